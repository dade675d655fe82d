//! `cargo run --release -p adrules-benches --bin planner-budget`: how far each order search
//! overruns its time budget on the planner's hardest inputs, as a markdown table.
//!
//! Every [`Optimizer`] is run through `NetworkPlan::choose_order` (validation and the order
//! search, what `NetworkPlan::new` does before lowering; the random graphs' trees cannot be
//! lowered, see docs/PERFORMANCE.md) with budgets 0, 0.5 s and 2 s, and the ncon and einsum
//! default orders with theirs, on networks of about 10,000 operands:
//! - `"ab,ab,…,ab->"` (two labels on every operand) and a hypergraph (each operand two of
//!   four labels: hyperedges of degree about 5,000), both Einstein strings;
//! - 10,000 scalars (only outer products);
//! - a random 3-regular graph of 10,000 vertices (χ = 2), a 100 × 100 lattice (χ = 2) and the
//!   norm of a 5,000-site MPS (χ = 16, d = 2), as ncon lists;
//! - a random 3-regular graph of 14 vertices (χ = 2), whose exhaustive search is estimated
//!   at about 1 s: started within 2 s, not within 0.5 s.
//!
//! Overrun = planning time − budget (the budget of `Order::Default` and `Order::Optimize` is
//! `Search::DEFAULT_BUDGET`; the ncon default order has none and is listed with 0). The goal
//! (issue 27): no overrun above 0.5 s. The last line gives the largest overrun.

use std::time::{Duration, Instant};

use adrules::network::{Network, NetworkPlan, Notation, Optimizer, Order, Search};
use adrules_testing::networks::{self, Graph};

/// A network and its operands' shapes.
type Case = (Network, Vec<Vec<usize>>);

fn ncon(g: &Graph) -> Case {
    (
        Network::ncon(&g.labels, None).expect("a valid network"),
        g.shapes(),
    )
}

fn einsum(s: &str, shape: Vec<usize>, n: usize) -> Case {
    (Network::einsum(s).expect("a valid string"), vec![shape; n])
}

fn main() {
    let n = 10_000;
    let cases: Vec<(String, Case)> = vec![
        (
            format!("shared pair {n}"),
            einsum(&format!("{}ab->", "ab,".repeat(n - 1)), vec![3, 4], n),
        ),
        (
            format!("hypergraph {n}"),
            einsum(&networks::hypergraph(n, 5), vec![2, 2], n),
        ),
        (
            format!("scalars {n}"),
            einsum(&format!("{}->", vec![""; n].join(",")), vec![], n),
        ),
        (
            format!("random 3-regular {n}, χ = 2"),
            ncon(&networks::random_regular(n, 2, 1)),
        ),
        (
            "lattice 100×100, χ = 2".into(),
            ncon(&networks::lattice(100, 2)),
        ),
        (
            format!("mps norm {n} tensors"),
            ncon(&networks::mps_norm(n / 2, 16, 2)),
        ),
        (
            "random 3-regular 14, χ = 2".into(),
            ncon(&networks::random_regular(14, 2, 1)),
        ),
    ];
    let budgets = [0.0, 0.5, 2.0].map(Duration::from_secs_f64);
    let mut orders: Vec<(String, Order, Duration)> = vec![
        ("default".into(), Order::Default, Duration::ZERO),
        (
            "Optimize(Auto)".into(),
            Order::Optimize(Optimizer::Auto),
            Search::DEFAULT_BUDGET,
        ),
    ];
    for opt in Optimizer::ALL {
        for b in budgets {
            let order = Order::Search(Search::new(opt).with_budget(b));
            orders.push((format!("{opt:?}"), order, b));
        }
    }
    println!("| network | order | budget | planning | overrun |");
    println!("|---|---|---:|---:|---:|");
    let mut worst = (f64::NEG_INFINITY, String::new());
    for (name, (net, shapes)) in &cases {
        for (oname, order, budget) in &orders {
            // the ncon default is the label rule, einsum's is Auto with the default budget
            let budget = match order {
                Order::Default if net.notation() == Notation::Einsum => Search::DEFAULT_BUDGET,
                _ => *budget,
            };
            let start = Instant::now();
            let chosen = NetworkPlan::choose_order(net, shapes, order);
            let secs = start.elapsed().as_secs_f64();
            if let Err(e) = chosen {
                println!("| {name} | {oname} | – | error: {e} | |");
                continue;
            }
            let over = secs - budget.as_secs_f64();
            println!(
                "| {name} | {oname} | {:.1} s | {:.3} s | {over:+.3} s |",
                budget.as_secs_f64(),
                secs
            );
            if over > worst.0 {
                worst = (
                    over,
                    format!("{name}, {oname}, budget {:.1} s", budget.as_secs_f64()),
                );
            }
        }
    }
    println!(
        "\nlargest overrun: {:+.3} s ({}); goal ≤ 0.5 s",
        worst.0, worst.1
    );
}
