//! `cargo run --release -p adrules-benches --bin planner-networks [-- OUT.json]`: the cost
//! (multiply-adds, `NetworkPlan::choose_order`), largest intermediate and planning time of every order on the planner's
//! quality networks (`adrules_testing::networks::quality_set`), as a markdown table; with `OUT.json`, the
//! networks, these numbers and each order's tree (SSA merges) are also written there for
//! `benches/peers_planner.py` (opt_einsum and cotengra on the same networks; it recounts our
//! trees' costs with its own code).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use adrules::network::{Network, NetworkPlan, Optimizer, Order, Search};

use adrules_testing::networks;

fn main() {
    let out = std::env::args().nth(1);
    let orders: Vec<(&str, Order)> = vec![
        ("ncon label order", Order::Default),
        ("einsum default (Auto)", Order::Optimize(Optimizer::Auto)),
        ("greedy", Order::Optimize(Optimizer::Greedy)),
        (
            "TreeSa 2 s",
            Order::Search(Search::new(Optimizer::TreeSa).with_budget(Duration::from_secs(2))),
        ),
        (
            "RandomGreedy 2 s",
            Order::Search(Search::new(Optimizer::RandomGreedy).with_budget(Duration::from_secs(2))),
        ),
        (
            "Hyper 2 s",
            Order::Search(Search::new(Optimizer::Hyper).with_budget(Duration::from_secs(2))),
        ),
    ];
    println!("| network | order | cost | largest intermediate | planning |");
    println!("|---|---|---:|---:|---:|");
    let mut json = String::from("[\n");
    let graphs = networks::quality_set();
    for (g, graph) in graphs.iter().enumerate() {
        let net = Network::ncon(&graph.labels, None).expect("a valid network");
        let shapes = graph.shapes();
        let mut results = String::new();
        for (k, (name, order)) in orders.iter().enumerate() {
            let start = Instant::now();
            let chosen = NetworkPlan::choose_order(&net, &shapes, order).expect("an order");
            let secs = start.elapsed().as_secs_f64();
            // trees with an intermediate beyond usize::MAX elements cannot be planned
            let fits = if chosen.fits { "" } else { " (does not fit)" };
            println!(
                "| {} | {name} | {:.3e} | 2^{:.0}{fits} | {:.1} ms |",
                graph.name,
                chosen.cost,
                chosen.log2_largest,
                secs * 1e3
            );
            let sep = if k + 1 < orders.len() { ", " } else { "" };
            // JSON has no infinity: a cost beyond f64 is null
            let cost = if chosen.cost.is_finite() {
                format!("{:e}", chosen.cost)
            } else {
                "null".into()
            };
            let merges: Vec<String> = chosen
                .tree
                .merges()
                .iter()
                .map(|[a, b]| format!("[{a}, {b}]"))
                .collect();
            let _ = write!(
                results,
                "{{\"order\": \"{name}\", \"cost\": {cost}, \"log2_largest\": {}, \"seconds\": {secs:e}, \"merges\": [{}]}}{sep}",
                chosen.log2_largest,
                merges.join(", ")
            );
        }
        let labels: Vec<String> = graph.labels.iter().map(|ax| format!("{ax:?}")).collect();
        let sep = if g + 1 < graphs.len() { "," } else { "" };
        let _ = writeln!(
            json,
            "{{\"name\": \"{}\", \"labels\": [{}], \"dims\": {:?}, \"adrules\": [{results}]}}{sep}",
            graph.name,
            labels.join(", "),
            graph.dims
        );
    }
    json.push_str("]\n");
    if let Some(path) = out {
        std::fs::write(&path, json).unwrap_or_else(|e| panic!("writing {path}: {e}"));
        eprintln!("wrote {path}");
    }
}
