//! Unit tests of the contraction trees and their search: validation, the ncon sequence rule
//! (against a scanning version), greedy against omeco's greedy, large networks, budgets, and
//! the validity of every optimizer's tree; one ignored timing run calibrates the budgets.

use super::omeco_search::*;
use super::*;
use ::omeco::{TreeSA, optimize_treesa};

#[test]
fn tree_validation() {
    assert!(ContractionTree::new(3, vec![[0, 1], [3, 2]]).is_ok());
    assert!(ContractionTree::new(1, vec![]).is_ok());
    for (n, merges) in [
        (3, vec![[0, 1]]),
        (3, vec![[0, 1], [0, 2]]),
        (3, vec![[0, 4], [3, 2]]),
        (2, vec![[1, 1]]),
        (0, vec![]),
    ] {
        assert!(
            ContractionTree::new(n, merges.clone()).is_err(),
            "{merges:?}"
        );
    }
}

#[test]
fn ncon_sequence_rule() {
    // A[-1,1,2] B[2,3] C[3,1,-2]: label 1 joins A and C first, then 2 brings in B.
    let net = Network::ncon(&[vec![-1, 1, 2], vec![2, 3], vec![3, 1, -2]], None).unwrap();
    let dims = vec![2; net.num_labels()];
    let t = net.tree(&dims, &Order::Default).unwrap();
    assert_eq!(t.merges(), &[[0, 2], [3, 1]]);
    let t = net.tree(&dims, &Order::ncon(&[3, 2, 1])).unwrap();
    assert_eq!(t.merges(), &[[1, 2], [0, 3]]);
    // disconnected: outer products left to right; traces are not merges
    let net = Network::ncon(&[vec![-1, 1, 1], vec![-2], vec![-3, 2], vec![2]], None).unwrap();
    let t = net.tree(&[2; 6], &Order::Default).unwrap();
    assert_eq!(t.merges(), &[[2, 3], [0, 1], [5, 4]]);
    for bad in [vec![1, 2], vec![1], vec![1, 2, 3, 3], vec![1, -1, 2]] {
        let net = Network::ncon(&[vec![-1, 1, 2], vec![2, 3], vec![3, 1, -2]], None).unwrap();
        assert!(matches!(
            net.tree(&[2; 5], &Order::ncon(&bad)),
            Err(Error::InvalidLabel { .. })
        ));
    }
}

/// omeco 0.2.6's greedy (today's `Optimizer::Greedy` before this crate's own): the best of
/// `runs` runs (its ties follow HashMap order, which varies between runs).
fn omeco_greedy_cost(net: &Network, dims: &[Vec<usize>], runs: usize) -> f64 {
    use crate::network::NetworkPlan;
    use omeco::{GreedyMethod, optimize_greedy};
    let n = net.num_operands();
    let mut label_dims = vec![1usize; net.num_labels()];
    for (ax, d) in net.inputs().iter().zip(dims) {
        for (&l, &x) in ax.iter().zip(d) {
            label_dims[l] = x;
        }
    }
    let ixs = net.kept_labels();
    let (code, sizes) = omeco_code(&ixs, net.output(), &label_dims, None);
    (0..runs)
        .map(|_| {
            let nested = optimize_greedy(&code, &sizes, &GreedyMethod::default()).unwrap();
            let tree = ContractionTree::new(n, flatten(&nested, n, None).unwrap()).unwrap();
            NetworkPlan::new(net, dims, &Order::Tree(tree))
                .unwrap()
                .cost()
        })
        .fold(f64::INFINITY, f64::min)
}

fn greedy_cost(net: &Network, dims: &[Vec<usize>]) -> f64 {
    crate::network::NetworkPlan::new(net, dims, &Order::Optimize(Optimizer::Greedy))
        .unwrap()
        .cost()
}

/// An MPS norm ⟨ψ|ψ⟩ of `sites` sites (bond χ, physical d, open boundaries) in ncon form.
pub(crate) fn mps_norm(sites: usize, chi: usize, d: usize) -> (Network, Vec<Vec<usize>>) {
    let bond = |s: usize, layer: i64| 3 * s as i64 + layer; // bond right of site s
    let phys = |s: usize| 3 * s as i64 + 3;
    let mut idx: Vec<Vec<i64>> = Vec::new();
    let mut dims = Vec::new();
    for layer in [1, 2] {
        for s in 0..sites {
            let mut ax = Vec::new();
            let mut dm = Vec::new();
            if s > 0 {
                ax.push(bond(s - 1, layer));
                dm.push(chi);
            }
            ax.push(phys(s));
            dm.push(d);
            if s + 1 < sites {
                ax.push(bond(s, layer));
                dm.push(chi);
            }
            idx.push(ax);
            dims.push(dm);
        }
    }
    (Network::ncon(&idx, None).unwrap(), dims)
}

/// Deterministic pseudo-random networks (xorshift): `n` operands, each label shared by
/// two operands or open, dimensions 2..=5.
fn random_network(seed: u64, n: usize) -> (Network, Vec<Vec<usize>>) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |m: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m as u64) as usize
    };
    let mut idx: Vec<Vec<i64>> = vec![Vec::new(); n];
    let mut dims: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut label = 1i64;
    // a spanning chain, then extra edges and a few open legs
    for k in 1..n {
        let j = next(k);
        let d = 2 + next(4);
        idx[k].push(label);
        dims[k].push(d);
        idx[j].push(label);
        dims[j].push(d);
        label += 1;
    }
    for _ in 0..n / 2 {
        let (a, b) = (next(n), next(n));
        if a == b || idx[a].len() > 4 || idx[b].len() > 4 {
            continue;
        }
        let d = 2 + next(4);
        idx[a].push(label);
        dims[a].push(d);
        idx[b].push(label);
        dims[b].push(d);
        label += 1;
    }
    let mut open = -1i64;
    for k in 0..n {
        if next(4) == 0 {
            idx[k].push(open);
            dims[k].push(2 + next(3));
            open -= 1;
        }
    }
    (Network::ncon(&idx, None).unwrap(), dims)
}

#[test]
fn greedy_no_worse_than_omeco_greedy() {
    let d = |dims: &[&[usize]]| dims.iter().map(|d| d.to_vec()).collect::<Vec<_>>();
    // the networks of the benches (benches/networks.rs, benches/einsum.rs), then classic
    // chains, a grid and MPS norms: deterministic, so ours must be as cheap as omeco's
    let mut cases: Vec<(String, Network, Vec<Vec<usize>>)> = vec![
        (
            "abc,bde,cdf->aef d=64".into(),
            Network::einsum("abc,bde,cdf->aef").unwrap(),
            d(&[&[64; 3], &[64; 3], &[64; 3]]),
        ),
        (
            "abc,bde,cdf->aef d=8".into(),
            Network::einsum("abc,bde,cdf->aef").unwrap(),
            d(&[&[8; 3], &[8; 3], &[8; 3]]),
        ),
        (
            "ij,jk,kl->il n=1024".into(),
            Network::einsum("ij,jk,kl->il").unwrap(),
            d(&[&[1024; 2], &[1024; 2], &[1024; 2]]),
        ),
        (
            "bij,bjk->bik".into(),
            Network::einsum("bij,bjk->bik").unwrap(),
            d(&[&[64, 128, 128], &[64, 128, 128]]),
        ),
        (
            "matrix chain".into(),
            Network::einsum("ab,bc,cd,de,ef,fg,gh->ah").unwrap(),
            d(&[
                &[10, 30],
                &[30, 5],
                &[5, 60],
                &[60, 8],
                &[8, 40],
                &[40, 3],
                &[3, 50],
            ]),
        ),
    ];
    for (sites, chi) in [(10, 16), (50, 16), (200, 8)] {
        let (net, dims) = mps_norm(sites, chi, 2);
        cases.push((format!("MPS norm {sites} sites χ={chi}"), net, dims));
    }
    {
        // 6×6 grid, bond 4, closed
        let (w, h) = (6usize, 6usize);
        let mut idx: Vec<Vec<i64>> = vec![Vec::new(); w * h];
        let mut label = 1;
        for r in 0..h {
            for c in 0..w {
                let k = r * w + c;
                if c + 1 < w {
                    idx[k].push(label);
                    idx[k + 1].push(label);
                    label += 1;
                }
                if r + 1 < h {
                    idx[k].push(label);
                    idx[k + w].push(label);
                    label += 1;
                }
            }
        }
        let dims = idx.iter().map(|ax| vec![4; ax.len()]).collect();
        cases.push((
            "grid 6x6 χ=4".into(),
            Network::ncon(&idx, None).unwrap(),
            dims,
        ));
    }
    // omeco's greedy breaks ties in hash-map order, which differs between runs: its cost
    // on one network varies (the 6×6 grid: 2.1e6 to 4.9e9 seen in 60 runs; ours, deterministic,
    // 2.9e6). Required: no worse than omeco's worst of 20 runs, within 2× of its best.
    for (name, net, dims) in &cases {
        let ours = greedy_cost(net, dims);
        let runs: Vec<f64> = (0..20).map(|_| omeco_greedy_cost(net, dims, 1)).collect();
        let best = runs.iter().copied().fold(f64::INFINITY, f64::min);
        let worst = runs.iter().copied().fold(0.0, f64::max);
        eprintln!("{name}: ours {ours:.4e}, omeco greedy {best:.4e} to {worst:.4e}");
        assert!(
            ours <= worst * (1.0 + 1e-9),
            "{name}: {ours} > omeco's worst {worst}"
        );
        assert!(
            ours <= 2.0 * best,
            "{name}: {ours} > 2 × omeco's best {best}"
        );
    }
    // random networks: report, and require the total to be no worse
    let (mut sum_ours, mut sum_theirs, mut worse) = (0.0, 0.0, 0);
    for seed in 1..=40u64 {
        let (net, dims) = random_network(seed, 12 + (seed as usize % 5) * 6);
        let (ours, theirs) = (greedy_cost(&net, &dims), omeco_greedy_cost(&net, &dims, 1));
        if ours > theirs * (1.0 + 1e-9) {
            worse += 1;
            eprintln!("random seed {seed}: ours {ours:.4e} > omeco {theirs:.4e}");
        }
        sum_ours += ours / theirs;
        sum_theirs += 1.0;
    }
    eprintln!(
        "random networks: mean cost ratio ours/omeco {:.4}, ours worse on {worse} of 40",
        sum_ours / sum_theirs
    );
    assert!(sum_ours <= sum_theirs, "greedy worse than omeco on average");
}

#[test]
fn large_networks_plan() {
    // 10,000 scalars (the einsum ",,…,->") and an 800-tensor MPS norm: not timed, but a
    // regression to O(n²) or O(n³) planning makes this test slow enough to notice
    use crate::network::NetworkPlan;
    let n = 10_000;
    let s = format!("{}->", vec![""; n].join(","));
    let net = Network::einsum(&s).unwrap();
    let dims: Vec<Vec<usize>> = vec![vec![]; n];
    let plan = NetworkPlan::new(&net, &dims, &Order::Default).unwrap();
    assert_eq!(plan.tree().merges().len(), n - 1);
    let (net, dims) = mps_norm(400, 16, 2);
    let plan = NetworkPlan::new(&net, &dims, &Order::Optimize(Optimizer::Greedy)).unwrap();
    assert_eq!(plan.tree().merges().len(), 799);
    assert!(plan.output_dims().is_empty());
    // a chain ab,bc,…: connected, 10,000 matrices, through the default einsum search
    let idx: Vec<Vec<i64>> = (0..n as i64)
        .map(|k| match k {
            0 => vec![-1, 1],
            k if k == n as i64 - 1 => vec![k, -2],
            k => vec![k, k + 1],
        })
        .collect();
    let net = Network::ncon(&idx, None).unwrap();
    let dims: Vec<Vec<usize>> = vec![vec![3, 3]; n];
    let plan = NetworkPlan::new(&net, &dims, &Order::Optimize(Optimizer::Auto)).unwrap();
    assert_eq!(plan.output_dims(), &[3, 3]);
    let plan = NetworkPlan::new(&net, &dims, &Order::Default).unwrap(); // ncon sequence
    assert_eq!(plan.output_dims(), &[3, 3]);
}

/// The sequence rule as written before the holder counts (scans of every value): the
/// oracle that the near-linear [`Frontier`] must reproduce merge for merge.
fn sequence_tree_by_scans(net: &Network, ids: &[usize]) -> Vec<[usize; 2]> {
    let is_out = net.output_mask();
    let kept = net.kept_labels();
    let mut values: Vec<(usize, Vec<usize>)> = kept.into_iter().enumerate().collect();
    let mut next = values.len();
    let mut merges = Vec::new();
    let mut merge = |values: &mut Vec<(usize, Vec<usize>)>, i: usize, j: usize| {
        let (vj, lj) = values.remove(j);
        let (vi, li) = values[i].clone();
        let needed = |l: &usize| {
            is_out[*l]
                || values
                    .iter()
                    .enumerate()
                    .any(|(x, (_, lx))| x != i && lx.contains(l))
        };
        let labels: Vec<usize> = li
            .iter()
            .chain(lj.iter().filter(|l| !li.contains(l)))
            .copied()
            .filter(needed)
            .collect();
        merges.push([vi, vj]);
        values[i] = (next, labels);
        next += 1;
    };
    for &id in ids {
        let mut holders = values
            .iter()
            .enumerate()
            .filter(|(_, (_, l))| l.contains(&id))
            .map(|(i, _)| i);
        if let (Some(i), Some(j)) = (holders.next(), holders.next()) {
            merge(&mut values, i, j);
        }
    }
    while values.len() > 1 {
        merge(&mut values, 0, 1);
    }
    merges
}

#[test]
fn sequence_rule_matches_the_scanning_version() {
    // random ncon networks (every label twice) in several label orders, and Einstein
    // strings with hyperedges, batch labels and disconnected parts
    let mut cases: Vec<Network> = (1..=30u64)
        .map(|seed| random_network(seed, 3 + seed as usize % 9).0)
        .collect();
    for s in [
        "ab,bc,cd,da->",
        "ai,bi,ci,di->abcd",
        "i,i,i,j,j->",
        "bij,bjk,bkl->bil",
        "ab,cd,bc,ef,e->adf",
        "ii,ij,jk,k,l,->",
    ] {
        cases.push(Network::einsum(s).unwrap());
    }
    for (c, net) in cases.iter().enumerate() {
        let is_out = net.output_mask();
        let mut ids: Vec<usize> = (0..net.num_labels()).filter(|&l| !is_out[l]).collect();
        for round in 0..3 {
            if round > 0 {
                ids.reverse();
                let r = round.min(ids.len());
                ids.rotate_left(r);
            }
            let labels: Vec<Label> = ids.iter().map(|&l| net.label(l)).collect();
            let tree = net
                .tree(&vec![2; net.num_labels()], &Order::Labels(labels))
                .unwrap();
            assert_eq!(
                tree.merges(),
                sequence_tree_by_scans(net, &ids).as_slice(),
                "case {c}, round {round}"
            );
        }
    }
}

/// Prints the measured rates behind `EXHAUSTIVE_RATE` and `TREESA_NODE`
/// (`cargo test -p adrules-core --release --lib calibrate -- --ignored --nocapture`).
#[test]
#[ignore = "timing: run by hand to calibrate the budget estimates"]
fn calibrate_budget_estimates() {
    use std::time::Instant;
    for k in [8i64, 10, 11, 12] {
        let idx: Vec<Vec<i64>> = (0..k).map(|i| vec![i + 1, (i + 1) % k + 1]).collect();
        let net = Network::ncon(&idx, None).unwrap();
        let ixs = net.kept_labels();
        let dims = vec![3; net.num_labels()];
        let (code, sizes) = omeco_code(&ixs, net.output(), &dims, None);
        let t = Instant::now();
        optimize_exhaustive(&code, &sizes, &ExhaustiveSearch::default()).unwrap();
        let s = t.elapsed().as_secs_f64();
        let w = exhaustive_work(&ixs, net.num_labels());
        eprintln!("exhaustive ring {k}: {s:.4} s, {:.3e} steps/s", w / s);
    }
    for sites in [25usize, 50, 100] {
        let (net, dims) = mps_norm(sites, 8, 2);
        let mut label_dims = vec![1usize; net.num_labels()];
        for (ax, d) in net.inputs().iter().zip(&dims) {
            for (&l, &x) in ax.iter().zip(d) {
                label_dims[l] = x;
            }
        }
        let ixs = net.kept_labels();
        let (code, sizes) = omeco_code(&ixs, net.output(), &label_dims, None);
        let t = Instant::now();
        optimize_treesa(&code, &sizes, &TreeSA::fast().with_niters(2)).unwrap();
        let s = t.elapsed().as_secs_f64();
        let n = 2 * sites;
        let per_node = s / (TREESA_BETAS as f64 * 2.0 * 2.0 * n as f64);
        eprintln!("treesa {n} operands, niters 2: {s:.4} s, {per_node:.3e} s per node-sweep");
    }
}

#[test]
fn budgets_bound_the_searches() {
    use std::time::Duration;
    // a 16-operand ring: exhaustive would take 3^16 · labels steps; a tiny budget gives
    // the greedy tree at once
    let idx: Vec<Vec<i64>> = (0..16i64).map(|k| vec![k + 1, (k + 1) % 16 + 1]).collect();
    let net = Network::ncon(&idx, None).unwrap();
    let dims = vec![3; net.num_labels()];
    let quick = Search::new(Optimizer::Exhaustive).with_budget(Duration::from_millis(1));
    let t = net.tree(&dims, &Order::Search(quick)).unwrap();
    let g = net
        .tree(&dims, &Order::Optimize(Optimizer::Greedy))
        .unwrap();
    assert_eq!(t, g);
    // TreeSA: a zero budget returns the greedy tree; a seed gives reproducible trees
    let none = Search::new(Optimizer::TreeSa).with_budget(Duration::ZERO);
    assert_eq!(net.tree(&dims, &Order::Search(none)).unwrap(), g);
    for seed in [0, 7] {
        let s = Search::new(Optimizer::TreeSa).with_seed(seed);
        let a = net.tree(&dims, &Order::Search(s)).unwrap();
        let b = net.tree(&dims, &Order::Search(s)).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.merges().len(), 15);
    }
    assert_eq!(Search::default().budget(), Search::DEFAULT_BUDGET);
    assert_eq!(
        Search::from(Optimizer::Greedy).optimizer(),
        Optimizer::Greedy
    );
}

#[test]
fn optimizers_give_valid_trees() {
    let net = Network::einsum("ab,bc,cd,de,ef,fa->").unwrap();
    for opt in [
        Optimizer::Auto,
        Optimizer::Greedy,
        Optimizer::Exhaustive,
        Optimizer::TreeSa,
    ] {
        let t = net
            .tree(&[3, 4, 5, 6, 7, 8], &Order::Optimize(opt))
            .unwrap();
        assert_eq!(t.merges().len(), 5);
    }
}

/// opt_einsum 3.4.0's `greedy` (`ssa_greedy_optimize`, default cost) on the planner's quality
/// networks (`adrules_testing::networks::quality_set`), costed by `benches/peers_planner.py`
/// with this crate's measure (multiply-adds): an independent implementation, in Python
/// integers.
const OPT_EINSUM_GREEDY: [(&str, f64); 5] = [
    ("lattice 10x10 chi=4", 49057124352.0),
    ("lattice 8x8 chi=8", 5662801772544.0),
    ("random 3-regular n=300 chi=4", 3.668026573661308e47),
    ("random 3-regular n=1000 chi=2", 5.880067724644651e76),
    ("mps norm 800 tensors chi=16", 6467840.0),
];

#[test]
fn greedy_reproduces_opt_einsum_and_the_default_is_no_costlier() {
    for (graph, (name, theirs)) in adrules_testing::networks::quality_set()
        .iter()
        .zip(OPT_EINSUM_GREEDY)
    {
        assert_eq!(graph.name, name);
        let net = Network::ncon(&graph.labels, None).unwrap();
        let ixs = net.kept_labels();
        let mut label_dims = vec![1usize; net.num_labels()];
        for (ax, d) in net.inputs().iter().zip(graph.shapes()) {
            for (&l, &x) in ax.iter().zip(&d) {
                label_dims[l] = x;
            }
        }
        let dims: Vec<f64> = label_dims.iter().map(|&d| d as f64).collect();
        let t = Greedy::OPT_EINSUM.run(&ixs, net.output(), &dims);
        let ours = TreeStats::of(&ixs, net.output(), &label_dims, &t.merges).flops;
        assert!(
            (ours - theirs).abs() <= 1e-12 * theirs,
            "{name}: opt_einsum's greedy ported gives {ours:e}, opt_einsum {theirs:e}"
        );
        for order in [
            Order::Optimize(Optimizer::Greedy),
            Order::Optimize(Optimizer::Auto),
        ] {
            // (some of these trees have intermediates beyond usize::MAX elements: costed
            // without NetworkPlan, which refuses them)
            let tree = net.tree(&label_dims, &order).unwrap();
            let cost = TreeStats::of(&ixs, net.output(), &label_dims, tree.merges()).flops;
            assert!(
                cost <= theirs * (1.0 + 1e-12),
                "{name} {order:?}: {cost:e} > {theirs:e}"
            );
        }
    }
}

#[test]
fn random_greedy_spends_its_budget_and_keeps_the_best() {
    use std::time::Duration;
    let graph = adrules_testing::networks::lattice(6, 4);
    let net = Network::ncon(&graph.labels, None).unwrap();
    let dims = vec![4; net.num_labels()];
    let cost = |t: &ContractionTree| {
        crate::network::NetworkPlan::new(&net, &graph.shapes(), &Order::Tree(t.clone()))
            .unwrap()
            .cost()
    };
    let greedy = net
        .tree(&dims, &Order::Optimize(Optimizer::Greedy))
        .unwrap();
    let search = Search::new(Optimizer::RandomGreedy).with_budget(Duration::from_millis(200));
    let start = Instant::now();
    let sampled = net.tree(&dims, &Order::Search(search)).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert!(cost(&sampled) <= cost(&greedy));
    // a zero budget: the greedy tree
    let none = search.with_budget(Duration::ZERO);
    assert_eq!(net.tree(&dims, &Order::Search(none)).unwrap(), greedy);
}

#[test]
fn hyper_spends_its_budget_and_beats_greedy_on_a_random_graph() {
    use std::time::Duration;
    // a random 3-regular graph: where partition-based trees beat greedy ones by orders of
    // magnitude (the order-quality table of docs/PERFORMANCE.md)
    let graph = adrules_testing::networks::random_regular(300, 4, 1);
    let net = Network::ncon(&graph.labels, None).unwrap();
    let dims = vec![4; net.num_labels()];
    let flops = |t: &ContractionTree| {
        TreeStats::of(&net.kept_labels(), net.output(), &dims, t.merges()).flops
    };
    let greedy = net
        .tree(&dims, &Order::Optimize(Optimizer::Greedy))
        .unwrap();
    let search = Search::new(Optimizer::Hyper).with_budget(Duration::from_millis(300));
    let start = Instant::now();
    let hyper = net.tree(&dims, &Order::Search(search)).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(
        flops(&hyper) * 1e3 < flops(&greedy),
        "{:e} vs {:e}",
        flops(&hyper),
        flops(&greedy)
    );
    // a zero budget: the greedy tree
    let none = search.with_budget(Duration::ZERO);
    assert_eq!(net.tree(&dims, &Order::Search(none)).unwrap(), greedy);
}

#[test]
fn hyperedges_and_shared_labels_plan() {
    // every operand holds both labels (the batch-label case): treated as open while choosing
    let s = format!("{}ab->", "ab,".repeat(1_999));
    let net = Network::einsum(&s).unwrap();
    let t = net.tree(&[3, 4], &Order::Default).unwrap();
    assert_eq!(t.merges().len(), 1_999);
    // labels held by about half the operands each (hyperedges of degree ~1,000)
    let net = Network::einsum(&adrules_testing::networks::hypergraph(2_000, 5)).unwrap();
    for opt in [Optimizer::Greedy, Optimizer::Auto] {
        let t = net.tree(&[2, 3, 2, 3], &Order::Optimize(opt)).unwrap();
        assert_eq!(t.merges().len(), 1_999);
    }
}

#[test]
fn intermediates_beyond_usize_are_a_typed_error() {
    use crate::network::NetworkPlan;
    // the outer product of 70 vectors of length 2: 2^70 elements
    let idx: Vec<Vec<i64>> = (1..=70).map(|k| vec![-k]).collect();
    let net = Network::ncon(&idx, None).unwrap();
    let dims = vec![vec![2usize]; 70];
    let err = NetworkPlan::new(&net, &dims, &Order::Default).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { arg, reason } if arg == "order" && reason.contains("usize::MAX")),
        "{err:?}"
    );
    // choose_order still gives the tree, its cost and its size
    let chosen = NetworkPlan::choose_order(&net, &dims, &Order::Default).unwrap();
    assert!(!chosen.fits);
    assert_eq!(chosen.log2_largest, 70.0);
    assert_eq!(chosen.tree.merges().len(), 69);
    // 60 of them fit (2^60 elements): planning succeeds (nothing is allocated), and the
    // chosen order is the plan's
    let net = Network::ncon(&idx[..60], None).unwrap();
    let plan = NetworkPlan::new(&net, &dims[..60], &Order::Default).unwrap();
    let chosen = NetworkPlan::choose_order(&net, &dims[..60], &Order::Default).unwrap();
    assert!(chosen.fits);
    assert_eq!(&chosen.tree, plan.tree());
    assert_eq!(chosen.cost, plan.cost());
    assert_eq!(chosen.log2_largest, 60.0);
    // a lattice: same tree and cost as the plan, the largest step's size
    let graph = adrules_testing::networks::lattice(4, 3);
    let net = Network::ncon(&graph.labels, None).unwrap();
    let order = Order::Optimize(Optimizer::Auto);
    let plan = NetworkPlan::new(&net, &graph.shapes(), &order).unwrap();
    let chosen = NetworkPlan::choose_order(&net, &graph.shapes(), &order).unwrap();
    assert_eq!(&chosen.tree, plan.tree());
    assert_eq!(chosen.cost, plan.cost());
    let largest = (0..plan.steps().len())
        .map(|s| plan.step_dims(s).unwrap().iter().product::<usize>())
        .max()
        .unwrap();
    assert!((chosen.log2_largest - (largest as f64).log2()).abs() < 1e-12);
    assert!(matches!(
        NetworkPlan::choose_order(&net, &graph.shapes()[1..], &order),
        Err(Error::CountMismatch { .. })
    ));
}

#[test]
fn a_budget_beyond_the_clock_is_no_limit() {
    use std::time::Duration;
    // Instant + Duration::MAX overflows: the searches that finish on their own must not panic
    let net = Network::einsum("ab,bc,cd,de,ef,fg,gh,hi,ij,ja,ac,eg->").unwrap();
    let dims = vec![3; net.num_labels()];
    for opt in [
        Optimizer::Auto,
        Optimizer::Greedy,
        Optimizer::Exhaustive,
        Optimizer::TreeSa,
    ] {
        let search = Search::new(opt).with_budget(Duration::MAX);
        let tree = net.tree(&dims, &Order::Search(search)).unwrap();
        assert_eq!(tree.merges().len(), net.num_operands() - 1, "{opt:?}");
    }
}
