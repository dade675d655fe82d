//! `cargo xtask bench`: the criterion benches of `adrules-benches` and their markdown tables.

use crate::{cargo, run};

/// One criterion result: ids, the median time per iteration and the declared throughput.
struct Estimate {
    group: String,
    function: String,
    value: String,
    median_ns: f64,
    /// bytes moved (permutations) or floating-point operations (contractions) per iteration
    per_iter: f64,
}

/// Criterion's output folder: `$CARGO_TARGET_DIR/criterion`, else `<workspace>/target/criterion`.
fn criterion_dir() -> std::path::PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
        });
    target.join("criterion")
}

/// Every `new/benchmark.json` + `new/estimates.json` pair under `dir`.
fn read_estimates(dir: &std::path::Path, out: &mut Vec<Estimate>) -> Result<(), String> {
    let read = |p: &std::path::Path| -> Result<serde_json::Value, String> {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
    };
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if !path.is_dir() {
            continue;
        }
        let (bench, est) = (path.join("benchmark.json"), path.join("estimates.json"));
        if path.ends_with("new") && bench.exists() && est.exists() {
            let (b, e) = (read(&bench)?, read(&est)?);
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            let per_iter = b["throughput"]["Bytes"]
                .as_f64()
                .or_else(|| b["throughput"]["Elements"].as_f64())
                .unwrap_or(0.0);
            out.push(Estimate {
                group: text(&b["group_id"]),
                function: text(&b["function_id"]),
                value: text(&b["value_str"]),
                median_ns: e["median"]["point_estimate"].as_f64().unwrap_or(f64::NAN),
                per_iter,
            });
        } else {
            read_estimates(&path, out)?;
        }
    }
    Ok(())
}

/// Rows of a group: for each value id with both functions, `(value, ours, reference)`.
fn pairs<'a>(
    all: &'a [Estimate],
    group: &str,
    ours: &str,
    reference: &str,
) -> Vec<(&'a str, &'a Estimate, &'a Estimate)> {
    let find = |f: &str, v: &str| {
        all.iter()
            .find(|e| e.group == group && e.function == f && e.value == v)
    };
    let mut values: Vec<&str> = all
        .iter()
        .filter(|e| e.group == group && e.function == ours)
        .map(|e| e.value.as_str())
        .collect();
    values.sort_by_key(|v| {
        // threads, then the rest: keeps 1-thread rows together
        let t = v.rsplit('_').next().unwrap_or_default().to_string();
        (t, v.to_string())
    });
    values
        .into_iter()
        .filter_map(|v| Some((v, find(ours, v)?, find(reference, v)?)))
        .collect()
}

/// `cargo xtask bench [FILTER…]`: runs the criterion benches of the package
/// `adrules-benches` (`benches/`: `contract`, `permute`, `rules`, `networks`, `einsum`, `second_order`,
/// `planner`, `overheads`, `slicing`, `linalg`, `linalg_more`; arguments are
/// passed to criterion, e.g. a filter regex),
/// then prints markdown tables from criterion's estimates (median time per iteration), then
/// runs the `planner-networks` (order quality) and `planner-budget` (budget overruns)
/// binaries.
pub fn bench(args: &[String]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.args([
        "bench",
        "-p",
        "adrules-benches",
        "--bench",
        "contract",
        "--bench",
        "permute",
        "--bench",
        "rules",
        "--bench",
        "networks",
        "--bench",
        "einsum",
        "--bench",
        "second_order",
        "--bench",
        "planner",
        "--bench",
        "overheads",
        "--bench",
        "slicing",
        "--bench",
        "linalg",
        "--bench",
        "linalg_more",
        "--",
    ])
    .args(args);
    run(cmd)?;
    let dir = criterion_dir();
    let mut all = Vec::new();
    read_estimates(&dir, &mut all)?;

    println!("\n### `abcd,cdef->abef` (all dimensions d; m = n = k = d²) vs a bare faer GEMM\n");
    println!(
        "Median time per call; GFLOP/s count real operations (2·m·n·k, or 8·m·n·k for complex); \
         ratio = adrules time / faer time, both measured in the same run.\n"
    );
    println!("| case | adrules | GFLOP/s | faer GEMM | GFLOP/s | ratio |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (v, ours, faer) in pairs(&all, "contract", "adrules", "faer") {
        let gflops = |e: &Estimate| e.per_iter / e.median_ns;
        println!(
            "| {v} | {:.2} ms | {:.1} | {:.2} ms | {:.1} | {:.3} |",
            ours.median_ns / 1e6,
            gflops(ours),
            faer.median_ns / 1e6,
            gflops(faer),
            ours.median_ns / faer.median_ns
        );
    }

    println!("\n### Hard permutations (f64, `C ← P_p(A)`) vs memcpy of the same bytes\n");
    println!(
        "GB/s count bytes read plus bytes written (2 × the tensor's bytes) for both; memcpy is \
         `copy_from_slice` on one thread; ratio = adrules GB/s / memcpy GB/s, same run.\n"
    );
    println!("| case | adrules GB/s | memcpy GB/s | ratio |");
    println!("|---|---:|---:|---:|");
    for (v, ours, copy) in pairs(&all, "permute", "adrules", "memcpy") {
        let gbs = |e: &Estimate| e.per_iter / e.median_ns;
        println!(
            "| {v} | {:.1} | {:.1} | {:.2} |",
            gbs(ours),
            gbs(copy),
            gbs(ours) / gbs(copy)
        );
    }

    let find = |group: &str, function: &str, value: &str| {
        all.iter()
            .find(|e| e.group == group && e.function == function && e.value == value)
            .map(|e| e.median_ns / 1e6)
    };
    let ms = |t: Option<f64>| t.map_or("–".to_string(), |t| format!("{t:.2} ms"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        _ => "–".to_string(),
    };

    println!("\n### Contraction rule: `abcd,cdef->abef`, pullback vs primal\n");
    println!(
        "primal = `ContractOp::apply` into a fresh C (`Backend::empty`); pullback = Ā and B̄ \
         from C̄ (two GEMMs of the primal's size); rrule = primal + pullback (the three-GEMM \
         floor is 3.0 × primal); ratios against the primal, same run.\n"
    );
    println!(
        "| case | primal | pullback | accumulate | pullback with ᾱ | pullback / primal | rrule + pullback | / primal |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut cases: Vec<&str> = all
        .iter()
        .filter(|e| e.group == "rules" && e.function == "primal")
        .map(|e| e.value.as_str())
        .collect();
    cases.sort();
    for v in cases {
        let (p, b) = (find("rules", "primal", v), find("rules", "pullback", v));
        let r = find("rules", "rrule", v);
        println!(
            "| {v} | {} | {} | {} | {} | {} | {} | {} |",
            ms(p),
            ms(b),
            ms(find("rules", "accumulate", v)),
            ms(find("rules", "pullback_alpha", v)),
            ratio(b, p),
            ms(r),
            ratio(r, p)
        );
    }

    println!("\n### Small contractions `ij,jk->ik`: 1 thread vs 2 threads\n");
    println!(
        "contract = `Backend::contract` into an existing C; rrule = primal into a fresh C + \
         pullback of both operands; 2t / 1t = time on two threads over time on one (≤ 1: \
         threads never slow a call down).\n"
    );
    println!("| case | contract 1t | 2t | 2t / 1t | rrule 1t | 2t | 2t / 1t |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut cases: Vec<String> = all
        .iter()
        .filter(|e| e.group == "small" && e.function == "adrules")
        .filter_map(|e| e.value.strip_suffix("_t1").map(str::to_string))
        .collect();
    cases.sort();
    for v in cases {
        let us = |t: Option<f64>| t.map_or("–".to_string(), |t| format!("{:.1} µs", t * 1e3));
        let get = |f: &str, t: &str| find("small", f, &format!("{v}_{t}"));
        let (c1, c2, r1, r2) = (
            get("adrules", "t1"),
            get("adrules", "t2"),
            get("rrule", "t1"),
            get("rrule", "t2"),
        );
        println!(
            "| {v} | {} | {} | {} | {} | {} | {} |",
            us(c1),
            us(c2),
            ratio(c2, c1),
            us(r1),
            us(r2),
            ratio(r2, r1)
        );
    }

    println!("\n### Permutation into a fresh output vs into an existing one (f64)\n");
    println!(
        "fresh = `Backend::empty` + permuted add, the output dropped after each call (its \
         buffer goes to the buffer cache); existing = the same add into a kept C; same run.\n"
    );
    println!("| case | fresh | existing | fresh / existing |");
    println!("|---|---:|---:|---:|");
    for (v, f, e) in pairs(&all, "permute_fresh", "fresh", "existing") {
        println!(
            "| {v} | {:.2} ms | {:.2} ms | {:.2} |",
            f.median_ns / 1e6,
            e.median_ns / 1e6,
            f.median_ns / e.median_ns
        );
    }

    println!("\n### Second order: Hessian-vector products vs the gradient (f64, 1 thread)\n");
    println!(
        "gradient = forward + pullback of every operand (network) or linearization + pullback \
         (implicit); hvp = the HVP along a random direction of every operand (network: \
         `NetworkPlan::hvp`; implicit: linearization + `Linearization::hvp`); ratio = hvp / \
         gradient, same run (goal ≤ 2.5).\n"
    );
    println!("| case | gradient | hvp | hvp / gradient | hvp + gradient | ratio |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut cases: Vec<&str> = all
        .iter()
        .filter(|e| e.group == "hvp")
        .filter_map(|e| e.function.strip_prefix("gradient/"))
        .collect();
    cases.sort();
    for case in cases {
        let get = |f: &str| find("hvp", &format!("{f}/{case}"), "");
        let (g, h, hg) = (get("gradient"), get("hvp"), get("hvp+gradient"));
        println!(
            "| {case} | {} | {} | {} | {} | {} |",
            ms(g),
            ms(h),
            ratio(h, g),
            ms(hg),
            ratio(hg, g)
        );
    }

    println!("\n### Networks (f64, optimized order, pooled temporaries)\n");
    println!(
        "faer = the same pairwise GEMMs on pre-permuted matrices (the floor); gradient = \
         forward + pullback of every operand; ratios against adrules' primal, same run.\n"
    );
    println!(
        "| case | adrules | faer floor | ratio | heap allocator | gradient | gradient / primal |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut cases: Vec<&str> = all
        .iter()
        .filter(|e| e.group == "network")
        .filter_map(|e| e.function.strip_prefix("adrules/"))
        .collect();
    cases.sort();
    for case in cases {
        let get = |f: &str| find("network", &format!("{f}/{case}"), "");
        let p = get("adrules");
        println!(
            "| {case} | {} | {} | {} | {} | {} | {} |",
            ms(p),
            ms(get("faer")),
            ratio(p, get("faer")),
            ms(get("adrules-heap")),
            ms(get("adrules-grad")),
            ratio(get("adrules-grad"), p)
        );
    }

    println!("\n### Einsum as ML users write it (strided backend, one thread)\n");
    println!(
        "attention = `bhqd,bhkd->bhqk` (b = h = 8, q = k = 128, d = 64, f32), gradient = \
         primal + cotangents of both operands, against 64 bare faer GEMMs (×3 for the \
         gradient); bmm = `bij,bjk->bik` (b = 64, 128³, f64) against 64 faer GEMMs and \
         against one faer GEMM of the same flops; plan cache = one-call `einsum` (plan from \
         the cache) against executing a prebuilt plan. Same run, interleaved.\n"
    );
    println!("| case | adrules | GFLOP/s | reference | GFLOP/s | ratio | difference |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (group, reference) in [
        ("attention", "faer"),
        ("bmm", "faer"),
        ("plan_cache", "prebuilt"),
    ] {
        for (v, ours, other) in pairs(&all, group, "adrules", reference) {
            let gflops = |e: &Estimate| {
                if e.per_iter > 0.0 {
                    format!("{:.1}", e.per_iter / e.median_ns)
                } else {
                    "–".to_string()
                }
            };
            println!(
                "| {group} {v} | {:.3} ms | {} | {:.3} ms | {} | {:.3} | {:+.2} µs |",
                ours.median_ns / 1e6,
                gflops(ours),
                other.median_ns / 1e6,
                gflops(other),
                ours.median_ns / other.median_ns,
                (ours.median_ns - other.median_ns) / 1e3
            );
        }
    }

    overheads(&all);

    println!("\n### Planning large networks (`NetworkPlan::new`, order search and lowering)\n");
    println!(
        "scalars = the einsum `\",,…,->\"` with `Order::Default`; chain = a connected 3 × 3 \
         matrix chain with integer labels, `Optimizer::Auto` (the einsum default); shared \
         pair = `\"ab,ab,…,ab->\"`; hypergraph = each operand two of four labels; auto NAME = \
         `Optimizer::Auto` on the quality networks (their costs in the next table). Median \
         time per plan.\n"
    );
    println!("| case | operands | plan |");
    println!("|---|---:|---:|");
    let mut rows: Vec<&Estimate> = all.iter().filter(|e| e.group == "planner").collect();
    rows.sort_by_key(|e| (e.function.clone(), e.value.parse::<usize>().unwrap_or(0)));
    for e in rows {
        println!(
            "| {} | {} | {:.2} ms |",
            e.function,
            e.value,
            e.median_ns / 1e6
        );
    }

    slicing(&all);

    println!("\n### Contraction-order quality (multiply-adds of the chosen tree, one run)\n");
    println!(
        "`planner-networks`: every order on the quality networks; planning time of one run \
         (the medians are above). Peers on the same networks: `benches/peers_planner.py`.\n"
    );
    run_bench_bin("planner-networks")?;

    println!("\n### Planning within the budget (overrun = planning time − budget)\n");
    run_bench_bin("planner-budget")?;

    linalg(&all);
    linalg_more(&all);

    // Written by `cargo bench -p adrules-benches --features burn --bench burn_einsum` (not
    // run above: the burn feature is off by default); printed only when its estimates exist.
    let burn_rows = pairs(&all, "burn_attention", "adrules", "burn");
    if !burn_rows.is_empty() {
        println!("\n### Einsum on burn (Flex with autodiff, f32, one thread)\n");
        println!(
            "attention = `bhqd,bhkd->bhqk` (b = h = 8, q = k = 128, d = 64); \
             `adrules::burn::einsum` against burn's own `Tensor::einsum`; primal = the einsum \
             on inputs that do not require gradients, gradient = leaves, einsum, \
             `(c * w).sum().backward()`, both gradients read; ratio = adrules / burn, same \
             run, interleaved (goal ≤ 0.7 for the gradient).\n"
        );
        println!("| case | adrules | burn | ratio |");
        println!("|---|---:|---:|---:|");
        for (v, ours, other) in burn_rows {
            println!(
                "| attention {v} | {:.3} ms | {:.3} ms | {:.3} |",
                ours.median_ns / 1e6,
                other.median_ns / 1e6,
                ours.median_ns / other.median_ns
            );
        }
    }
    Ok(())
}

/// The table of `benches/linalg.rs`: forward + backward through the SVD and eigh at n = 256,
/// the strided rule against the decomposition alone and, when the engine rows exist
/// (`cargo bench -p adrules-benches --features candle,burn --bench linalg`), each engine
/// against the strided rule.
fn linalg(all: &[Estimate]) {
    println!("\n### Decompositions, forward + backward, n = 256 (`benches/linalg.rs`)\n");
    println!(
        "Median time per call; the loss is linear in the factors (fixed random cotangents). \
         forward = the decomposition alone (faer); engines: the decomposition as a candle or \
         burn op, through `backward()`; ratio = engine / strided (goal ≤ 1.1). JAX's times for \
         the same losses: `benches/peers_linalg.py`.\n"
    );
    println!("| case | strided rule | forward alone | engine | engine time | ratio |");
    println!("|---|---:|---:|---|---:|---:|");
    for group in ["linalg_svd", "linalg_eigh"] {
        let name = group.strip_prefix("linalg_").unwrap_or(group);
        for (v, rule, fwd) in pairs(all, group, "strided", "strided_forward") {
            let ms = |e: &Estimate| e.median_ns / 1e6;
            let mut engines = 0;
            for engine in ["candle", "burn"] {
                let found = all
                    .iter()
                    .find(|e| e.group == group && e.function == engine && e.value == v);
                if let Some(e) = found {
                    engines += 1;
                    println!(
                        "| {name} {v} | {:.2} ms | {:.2} ms | {engine} | {:.2} ms | {:.3} |",
                        ms(rule),
                        ms(fwd),
                        ms(e),
                        e.median_ns / rule.median_ns
                    );
                }
            }
            if engines == 0 {
                println!(
                    "| {name} {v} | {:.2} ms | {:.2} ms | | | |",
                    ms(rule),
                    ms(fwd)
                );
            }
        }
    }
}

/// The table of `benches/linalg_more.rs`: forward + backward through the dense rules at
/// n = 256 on the strided backend, against the forward alone.
fn linalg_more(all: &[Estimate]) {
    println!(
        "\n### Dense linear algebra, forward + backward, n = 256 (`benches/linalg_more.rs`)\n"
    );
    println!(
        "Median time per call; the loss is linear in the outputs (a fixed random cotangent); \
         forward = the primal alone (factorization and solves, faer). JAX's and PyTorch's \
         times for the same losses: `benches/peers_linalg.py`.\n"
    );
    println!("| case | rule (forward + backward) | forward alone | ratio |");
    println!("|---|---:|---:|---:|");
    for op in [
        "cholesky",
        "solve",
        "det",
        "slogdet",
        "inv",
        "eig",
        "matrix_exp",
    ] {
        let group = format!("linalg_more_{op}");
        for (v, rule, fwd) in pairs(all, &group, "rule", "forward") {
            println!(
                "| {op} {v} | {:.2} ms | {:.2} ms | {:.2} |",
                rule.median_ns / 1e6,
                fwd.median_ns / 1e6,
                rule.median_ns / fwd.median_ns
            );
        }
    }
}

/// Runs the release binary `name` of the package `adrules-benches` (it prints its table).
fn run_bench_bin(name: &str) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--release",
        "-q",
        "-p",
        "adrules-benches",
        "--bin",
        name,
    ]);
    run(cmd)
}

/// The table of `benches/overheads.rs`: each fixed cost against its reference and its target.
fn overheads(all: &[Estimate]) {
    let get = |group: &str, f: &str, v: &str| {
        all.iter()
            .find(|e| e.group == group && e.function == f && e.value == v)
    };
    let rows = [
        (
            "network gradient `abc,bde,cdf->aef` d = 64, pool vs heap allocator",
            get("pool_vs_heap", "pool", "abc,bde,cdf->aef_d64_grad_t1"),
            get("pool_vs_heap", "heap", "abc,bde,cdf->aef_d64_grad_t1"),
            "pool ≤ 1.00 × heap",
            (|o: f64, r: f64| o <= r) as fn(f64, f64) -> bool,
        ),
        (
            "einsum `ij,ij->ij` 1000², vs a plain loop into an existing output",
            get("elementwise", "adrules", "ij,ij->ij_n1000_f64_t1"),
            get("elementwise", "loop", "ij,ij->ij_n1000_f64_t1"),
            "≤ 1.5 ms",
            |o, _| o <= 1.5e6,
        ),
        (
            "einsum `bi,bi->b` 1000², vs a plain loop",
            get("elementwise", "adrules", "bi,bi->b_n1000_f64_t1"),
            get("elementwise", "loop", "bi,bi->b_n1000_f64_t1"),
            "–",
            |_, _| true,
        ),
        (
            "`ij,jk->ik` n = 8: `ContractOp` rrule + pullback, vs the primal alone",
            get("small_call", "rrule", "ij,jk->ik_n8_f64_t1"),
            get("small_call", "primal", "ij,jk->ik_n8_f64_t1"),
            "≤ 5 µs",
            |o, _| o <= 5e3,
        ),
        (
            "`ij,jk->ik` n = 8: network rrule + pullback, vs the one-call `einsum`",
            get("small_call", "einsum_rrule", "ij,jk->ik_n8_f64_t1_network"),
            get("small_call", "einsum", "ij,jk->ik_n8_f64_t1_network"),
            "≤ 5 µs",
            |o, _| o <= 5e3,
        ),
    ];
    if rows.iter().all(|r| r.1.is_none()) {
        return;
    }
    println!("\n### Fixed costs around the kernels (f64, one thread)\n");
    println!(
        "Median per call, each case and its reference interleaved in one run; numpy's figures \
         for the same cases come from `benches/numpy_elementwise.py`.\n"
    );
    println!("| case | adrules | reference | ratio | target | met |");
    println!("|---|---:|---:|---:|---|---|");
    let time = |ns: f64| {
        if ns >= 1e6 {
            format!("{:.3} ms", ns / 1e6)
        } else {
            format!("{:.2} µs", ns / 1e3)
        }
    };
    for (case, ours, reference, target, met) in rows {
        let (Some(o), Some(r)) = (ours, reference) else {
            continue;
        };
        let (o, r) = (o.median_ns, r.median_ns);
        println!(
            "| {case} | {} | {} | {:.3} | {target} | {} |",
            time(o),
            time(r),
            o / r,
            if met(o, r) { "yes" } else { "**no**" }
        );
    }
}

/// The table of `benches/slicing.rs`: sliced runs against the unsliced plan on as many threads.
fn slicing(all: &[Estimate]) {
    let get = |f: &str, v: &str| {
        all.iter()
            .find(|e| e.group == "slicing" && e.function == f && e.value == v)
            .map(|e| e.median_ns / 1e6)
    };
    let mut cases: Vec<&str> = all
        .iter()
        .filter(|e| e.group == "slicing" && e.function == "value t1")
        .map(|e| e.value.as_str())
        .collect();
    if cases.is_empty() {
        return;
    }
    cases.sort();
    println!("\n### Slicing (`SlicedPlan`) against the unsliced plan, f64\n");
    println!(
        "case = network and target (a fraction of the unsliced tree's largest intermediate); \
         value = `execute` / `execute_par`, gradient = value and every cotangent \
         (`value_and_gradient` / `_par`; unsliced: `rrule` + pullback); t1 / t2 = one or two \
         threads, the unsliced plan on the same pool; ratio = sliced / unsliced. Median time.\n"
    );
    println!("| case | threads | value | unsliced | ratio | gradient | unsliced | ratio |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for v in cases {
        let net = v.split('_').next().unwrap_or(v);
        for t in ["t1", "t2"] {
            let ms = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{x:.1} ms"));
            let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => format!("{:.2}", a / b),
                _ => "–".to_string(),
            };
            let (sv, sg) = (
                get(&format!("value {t}"), v),
                get(&format!("gradient {t}"), v),
            );
            let u = format!("{net}_{t}");
            let (uv, ug) = (get("unsliced value", &u), get("unsliced gradient", &u));
            println!(
                "| {v} | {t} | {} | {} | {} | {} | {} | {} |",
                ms(sv),
                ms(uv),
                ratio(sv, uv),
                ms(sg),
                ms(ug),
                ratio(sg, ug)
            );
        }
    }
}
