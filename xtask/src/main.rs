//! Project automation: `cargo xtask test-all`, `bench`, `test-wgpu`, `gpu-check`.
//!
//! `test-all` runs, in order: `cargo fmt --check`; clippy `-D warnings` on every target of the
//! workspace with no default features; then with the union feature set (every adapter and the
//! engine backends that need neither a GPU nor a graphics driver, `CPU_BACKENDS`) clippy, the
//! tests of every crate (benches in test mode) and the doc tests; then for each other feature
//! set of the facade crate `adrules` (no default features, the defaults, each adapter on top of
//! the defaults) clippy, tests and doc tests of the workspace (only the facade is rebuilt).
//! The feature sets are read from `cargo metadata`, so a feature added to the facade is tested
//! without editing this file.

use std::process::{Command, ExitCode};
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test-all") => test_all(),
        Some("bench") => bench(&args[1..]),
        Some("gpu-check") => gpu_check(&args[1..]),
        Some("test-wgpu") => test_wgpu(),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n  test-all   fmt check, clippy -D warnings, tests and doc tests for every feature set\n  bench      run the benchmarks and print markdown tables\n  test-wgpu  burn's wgpu backend (on lavapipe where there is no GPU): conformance and device tests\n  gpu-check  on a machine with an NVIDIA GPU: build candle and burn with CUDA, run their\n             conformance suites and ising2d on the GPU, print one table\n             (`gpu-check --cpu` rehearses the same steps on burn-wgpu and candle's CPU)"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    if on_ci() {
        // A clean clone builds each crate once, so incremental state only costs disk (measured
        // locally: 25 GB of `target/debug/incremental` after a few runs), and nobody reads a
        // backtrace of a CI test binary, whose line tables are three quarters of its 80 MB. A
        // CI run once failed with `ld terminated with signal 7 [Bus error]` (a full disk) in
        // the union set; panics still print their file and line without debug info.
        cmd.env("CARGO_INCREMENTAL", "0")
            .env("CARGO_PROFILE_DEV_STRIP", "debuginfo");
    }
    cmd
}

/// Whether this runs on CI (`CI` set to anything but `false` or empty).
fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// Free space on the target directory's file system, as `df -h` prints it (on CI, where a
/// full disk has stopped a run, so that the log shows how close each step came).
fn report_disk() {
    if !on_ci() {
        return;
    }
    let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| ".".into());
    if let Ok(out) = Command::new("df").args(["-h", &dir]).output() {
        eprint!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

fn run(mut cmd: Command) -> Result<(), String> {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("\n==> {shown}");
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {shown}: {e}"))?;
    eprintln!("<== {:.1} s", start.elapsed().as_secs_f64());
    report_disk();
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed with {status}"))
    }
}

/// The facade's engine-backend features that `test-all` builds and runs: they need neither a
/// GPU nor a graphics driver (NdArray is a CPU backend). `burn-wgpu` has its own command,
/// `test-wgpu` (its cubecl stack does not fit CI's budget); the GPU ones (`burn-cuda`,
/// `candle-cuda`, Metal, ROCm) are `gpu-check`'s.
const CPU_BACKENDS: &[&str] = &["burn-ndarray"];

/// Feature sets of the facade: each as the arguments to pass to cargo.
fn feature_sets() -> Result<Vec<Vec<String>>, String> {
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata: {e}"))?;
    let pkg = meta["packages"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "adrules"))
        .ok_or("package `adrules` not found in cargo metadata")?;
    let features = pkg["features"].as_object().ok_or("no features table")?;
    let default: Vec<String> = features
        .get("default")
        .and_then(|d| d.as_array())
        .map(|d| {
            d.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let mut optional: Vec<String> = features
        .keys()
        .filter(|k| *k != "default" && !default.contains(k))
        .cloned()
        .collect();
    optional.sort();
    // Adapters (`burn`, `candle`, `dfdx`) one by one; the engines' own backends (`burn-wgpu`,
    // `candle-cuda`, …) only together, with every adapter, and only those that build and run
    // on a machine without a GPU or graphics driver (see `CPU_BACKENDS`; `test-wgpu` and
    // `gpu-check` cover the rest). The union is the last set.
    let adapters: Vec<String> = optional
        .iter()
        .filter(|f| !f.contains('-'))
        .cloned()
        .collect();
    let mut sets = vec![vec!["--no-default-features".to_string()], vec![]];
    for f in &adapters {
        sets.push(vec!["--features".into(), f.clone()]);
    }
    let mut all = adapters.clone();
    all.extend(
        optional
            .iter()
            .filter(|f| CPU_BACKENDS.contains(&f.as_str()))
            .cloned(),
    );
    if all.len() > 1 {
        sets.push(vec!["--features".into(), all.join(",")]);
    }
    Ok(sets)
}

fn test_all() -> Result<(), String> {
    let start = Instant::now();
    let sets = feature_sets()?;
    let (union, facade_sets) = sets.split_last().ok_or("no feature sets")?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    run(fmt)?;
    // Every member with its own defaults (the adapters without engine backends).
    let mut clippy = cargo();
    clippy
        .args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--no-default-features",
        ])
        .args(["--", "-D", "warnings"]);
    run(clippy)?;
    // Every member, every CPU feature: lint, then every crate's tests, benches (in test mode)
    // and doc tests.
    let mut clippy = cargo();
    clippy
        .args(["clippy", "--workspace", "--all-targets"])
        .args(union)
        .args(["--", "-D", "warnings"]);
    run(clippy)?;
    let mut test = cargo();
    test.args(["test", "--workspace", "--all-targets"])
        .args(union);
    run(test)?;
    let mut doc = cargo();
    doc.args(["test", "--workspace", "--doc"]).args(union);
    run(doc)?;
    // The facade's other feature sets. What changes between them is the facade (its cfg'd
    // re-exports, the conformance suite in `tests/`, the examples); they are run on the whole
    // workspace all the same, because `-p adrules` would resolve the dependencies' features
    // without the other members' dev-dependencies and rebuild the engines' crates (measured:
    // the burn stack again, minutes on 2 cores), while the members' tests, already built,
    // take seconds to rerun.
    for set in facade_sets {
        let mut clippy = cargo();
        clippy
            .args(["clippy", "--workspace", "--all-targets"])
            .args(set)
            .args(["--", "-D", "warnings"]);
        run(clippy)?;
        let mut test = cargo();
        test.args(["test", "--workspace", "--all-targets"])
            .args(set);
        run(test)?;
        let mut doc = cargo();
        doc.args(["test", "--workspace", "--doc"]).args(set);
        run(doc)?;
    }
    eprintln!(
        "\ntest-all: everything passed in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `cargo xtask test-wgpu`: burn's wgpu backend on the machine's Vulkan driver (Mesa's
/// software lavapipe where there is no GPU: `apt-get install mesa-vulkan-drivers`). Runs the
/// burn conformance suite (`tests/burn.rs`: Flex, NdArray and wgpu, f32) and adrules-burn's
/// device and transfer tests with `burn-ndarray,burn-wgpu`. Not part of `test-all`: the
/// wgpu/cubecl stack and the burn crates rebuilt with cubecl are about 40 minutes of a cold
/// build on 2 cores, more than CI's budget leaves.
fn test_wgpu() -> Result<(), String> {
    let start = Instant::now();
    let mut test = cargo();
    test.args([
        "test",
        "-p",
        "adrules",
        "--features",
        "burn-ndarray,burn-wgpu",
        "--test",
        "burn",
    ]);
    run(test)?;
    let mut test = cargo();
    test.args([
        "test",
        "-p",
        "adrules-burn",
        "--features",
        "ndarray,wgpu",
        "--test",
        "devices",
        "--test",
        "transfers",
    ]);
    run(test)?;
    eprintln!(
        "\ntest-wgpu: everything passed in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One step of `gpu-check`: what it ran, how it ended, how long it took.
struct Step {
    name: String,
    outcome: String,
    seconds: f64,
}

/// Runs `cmd`, echoing its output, and returns the step with the outcome: `ok` (and the
/// passed / failed / ignored test counts cargo printed), or `FAILED` with the exit status.
fn step(name: &str, mut cmd: Command) -> Step {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("\n==> {shown}");
    let start = Instant::now();
    let out = cmd.output();
    let seconds = start.elapsed().as_secs_f64();
    let outcome = match out {
        Err(e) => format!("FAILED to start: {e}"),
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            eprint!("{}", tail(&text, 60));
            let (mut passed, mut failed, mut ignored, mut seen) = (0, 0, 0, false);
            for line in text.lines().filter(|l| l.starts_with("test result:")) {
                seen = true;
                let count = |what: &str| {
                    line.split(';')
                        .find(|p| p.trim_end().ends_with(what))
                        .and_then(|p| p.split_whitespace().rev().nth(1))
                        .and_then(|n| n.parse::<usize>().ok())
                        .unwrap_or(0)
                };
                passed += count("passed");
                failed += count("failed");
                ignored += count("ignored");
            }
            let tests = if seen {
                format!(" ({passed} passed, {failed} failed, {ignored} ignored)")
            } else {
                String::new()
            };
            if out.status.success() {
                format!("ok{tests}")
            } else {
                format!("FAILED: {}{tests}", out.status)
            }
        }
    };
    Step {
        name: name.into(),
        outcome,
        seconds,
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    lines[from..].join("\n") + "\n"
}

/// `cargo xtask gpu-check [--cpu]`: on a machine with an NVIDIA GPU, builds the facade with
/// `candle-cuda,burn-cuda` (release), runs the GPU conformance suites (`tests/gpu.rs`: every
/// rule group, the einsum oracle f32 and f64 cases among them) and `ising2d` on the GPU with
/// candle and with burn, and prints one markdown table (step, outcome with test counts,
/// seconds). `--cpu` runs the same steps where no GPU is needed (`candle,burn-wgpu`: the burn
/// suites on wgpu, candle's on the CPU, ising2d on wgpu and on candle's CPU), to rehearse the
/// script. Fails when a step fails.
fn gpu_check(args: &[String]) -> Result<(), String> {
    let cpu = match args {
        [] => false,
        [a] if a == "--cpu" => true,
        other => {
            return Err(format!(
                "gpu-check: unexpected arguments {other:?} (only --cpu)"
            ));
        }
    };
    if !cpu {
        let smi = Command::new("nvidia-smi")
            .args([
                "--query-gpu=name,memory.total,driver_version",
                "--format=csv,noheader",
            ])
            .output();
        match smi {
            Ok(o) if o.status.success() => {
                eprintln!("GPU: {}", String::from_utf8_lossy(&o.stdout).trim());
            }
            _ => {
                return Err(
                    "gpu-check: no NVIDIA GPU here (nvidia-smi does not answer); \
                            `cargo xtask gpu-check --cpu` rehearses the steps without one"
                        .into(),
                );
            }
        }
    }
    let (features, device, tests): (&str, &str, &[&str]) = if cpu {
        ("candle,burn-wgpu", "wgpu", &["burn", "candle"])
    } else {
        ("candle-cuda,burn-cuda", "cuda", &["gpu"])
    };
    let start = Instant::now();
    let mut steps = Vec::new();
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "--features",
        features,
        "--example",
        "ising2d",
    ]);
    for t in tests {
        build.args(["--test", t]);
    }
    steps.push(step(
        &format!("build --release --features {features}"),
        build,
    ));
    if steps[0].outcome.starts_with("ok") {
        for t in tests {
            let mut test = cargo();
            test.args(["test", "--release", "--features", features, "--test", t]);
            steps.push(step(&format!("conformance: tests/{t}.rs"), test));
        }
        let scratch = std::env::temp_dir();
        for (backend, device, precision) in [
            ("candle", if cpu { "cpu" } else { device }, "f64"),
            ("burn", device, if cpu { "f32" } else { "f64" }),
        ] {
            let mut run = cargo();
            let csv = scratch.join(format!("gpu-check-{backend}.csv"));
            let png = scratch.join(format!("gpu-check-{backend}.png"));
            run.args([
                "run",
                "--release",
                "--features",
                features,
                "--example",
                "ising2d",
                "--",
            ])
            .args([
                "--backend",
                backend,
                "--device",
                device,
                "--precision",
                precision,
            ])
            .args([
                "--width", "8", "--points", "5", "--t-min", "2", "--t-max", "3",
            ])
            .arg("--csv")
            .arg(&csv)
            .arg("--png")
            .arg(&png);
            steps.push(step(
                &format!("ising2d --backend {backend} --device {device} --precision {precision}"),
                run,
            ));
        }
    }
    println!("\n| step | outcome | seconds |\n|---|---|---:|");
    for s in &steps {
        println!("| {} | {} | {:.1} |", s.name, s.outcome, s.seconds);
    }
    println!("| total | | {:.1} |", start.elapsed().as_secs_f64());
    if steps.iter().all(|s| s.outcome.starts_with("ok")) {
        Ok(())
    } else {
        Err("gpu-check: a step failed (see the table)".into())
    }
}

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
/// `planner`; arguments are
/// passed to criterion, e.g. a filter regex),
/// then prints markdown tables from criterion's estimates (median time per iteration).
fn bench(args: &[String]) -> Result<(), String> {
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

    println!("\n### Planning large networks (`NetworkPlan::new`, order search and lowering)\n");
    println!(
        "scalars = the einsum `\",,…,->\"` with `Order::Default`; chain = a connected 3 × 3 \
         matrix chain with integer labels, `Optimizer::Auto` (the einsum default); MPS norm = \
         ⟨ψ|ψ⟩ of 400 sites (800 tensors, χ = 16, d = 2), `Optimizer::Greedy`. Median time \
         per plan.\n"
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
