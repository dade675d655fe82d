//! adrules-mpi's tests. The driver tests run this same binary under Open MPI's `mpirun -n k`
//! (its `worker` test, with `ADRULES_MPI_CASE` naming the case) and check what every rank
//! printed; run on its own, `worker` runs the agreement checks as a one-rank world.

mod worker;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The entry point `mpirun` runs (with `ADRULES_MPI_CASE` set). On its own it checks a
/// one-rank world through `mpirun -n 1`: MPI is never initialized in this test process,
/// whose environment the `mpirun` children inherit (a singleton MPI in the parent makes
/// them fail).
#[test]
fn worker() {
    if std::env::var_os("ADRULES_MPI_CASE").is_some() {
        worker::main_case();
    } else {
        check_agreement(1, &mpirun(1, "agree", &[]));
    }
}

/// What `mpirun` left: every rank's `RESULT` lines, its exit status and how long it ran.
struct Run {
    results: Vec<Value>,
    success: bool,
    seconds: f64,
    output: String,
}

/// Runs the `worker` test of this binary on `n` ranks for `case`; fails the test if the job
/// does not end within two minutes (a hang).
fn mpirun(n: usize, case: &str, extra: &[&str]) -> Run {
    mpirun_failing(n, case, 1, extra)
}

/// As [`mpirun`], with rank `failing` the one the fault cases make fail.
fn mpirun_failing(n: usize, case: &str, failing: usize, extra: &[&str]) -> Run {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new("mpirun");
    cmd.args(extra)
        .args(["--oversubscribe", "-n", &n.to_string()])
        .arg(&exe)
        .args(["--exact", "worker", "--nocapture", "--test-threads=1"])
        .env("ADRULES_MPI_CASE", case)
        .env("ADRULES_MPI_FAILING", failing.to_string())
        // Open MPI refuses to start as root without these (CI runs as root)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        // one thread per rank: the ranks share the machine's cores
        .env("RAYON_NUM_THREADS", "1")
        // no backtrace for the injected panics: capturing one (symbolising this binary, slow
        // on a cold page cache) delays the failing rank's report by ~0.3 s, which the
        // stop-promptness bound of the fault tests would count against the protocol
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot start Open MPI's `mpirun` ({e}): install it with `apt-get install \
             openmpi-bin libopenmpi-dev` (`cargo xtask test-all` does so as root)"
        )
    });
    let deadline = Duration::from_secs(120);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            panic!("mpirun -n {n} ({case}) hung for {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let seconds = start.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let output = format!(
        "exit status {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let results = stdout
        .lines()
        .filter_map(|l| l.find("RESULT ").map(|i| &l[i + 7..]))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Run {
        results,
        success: out.status.success(),
        seconds,
        output,
    }
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn two_three_and_four_ranks_agree_with_the_one_process_unsliced_network() {
    for n in [2, 3, 4] {
        check_agreement(n, &mpirun(n, "agree", &[]));
    }
}

/// Every rank's value, cotangents and tangent against the one-process unsliced plan.
fn check_agreement(n: usize, run: &Run) {
    {
        assert!(run.success, "mpirun -n {n}:\n{}", run.output);
        // every rank, every dtype
        assert_eq!(run.results.len(), 4 * n, "{}", run.output);
        for dtype in ["f32", "f64", "c32", "c64"] {
            let rows: Vec<&Value> = run.results.iter().filter(|r| r["dtype"] == dtype).collect();
            assert_eq!(rows.len(), n);
            let tol = if dtype.ends_with("64") { 1e-12 } else { 1e-5 };
            for r in &rows {
                for key in ["value", "gradient", "local", "tangent"] {
                    assert!(f(r, key) <= tol, "-n {n} {dtype} {key}: {r}");
                }
                assert_eq!(r["unchanged"], true, "{r}");
            }
            // the slices are split among the ranks, unevenly where they do not divide
            let slices = f(rows[0], "slices") as usize;
            let mine: Vec<usize> = rows.iter().map(|r| f(r, "mine") as usize).collect();
            assert_eq!(mine.iter().sum::<usize>(), slices, "{mine:?}");
            let (lo, hi) = (mine.iter().min().unwrap(), mine.iter().max().unwrap());
            assert!(hi - lo <= 1, "{mine:?}");
            if n == 3 {
                assert_ne!(slices % 3, 0, "the -n 3 run is meant to split unevenly");
            }
        }
    }
}

/// Every rank's result for a fault case: the same error, the caller's operands unchanged.
fn fault_rows(run: &Run, n: usize, kind: &str) -> Vec<Value> {
    assert_eq!(run.results.len(), n, "{}", run.output);
    for r in &run.results {
        assert_eq!(r["error"]["kind"], kind, "{r}");
        assert_eq!(r["unchanged"], true, "{r}");
    }
    run.results.clone()
}

#[test]
fn a_failing_rank_stops_every_rank_with_a_typed_error_naming_it() {
    for failing in [1, 0] {
        for (case, failure) in [("error", "error"), ("panic", "panic"), ("oom", "error")] {
            if failing == 0 && case == "oom" {
                continue;
            }
            let what = format!("{case} on rank {failing}");
            let run = mpirun_failing(3, case, failing, &[]);
            assert!(run.success, "{what}:\n{}", run.output);
            for r in fault_rows(&run, 3, "RankFailed") {
                assert_eq!(r["error"]["failed"], failing, "{what}: {r}");
                assert_eq!(r["error"]["failure"], failure, "{what}: {r}");
                assert_eq!(r["again"], true, "{what}: the next call fails: {r}");
                // the failing rank keeps its own typed error
                let local = &r["error"]["local"];
                let me = r["rank"].as_u64() == Some(failing as u64);
                match (me, case) {
                    (true, "error") => {
                        assert!(local.as_str().unwrap().starts_with("ShapeMismatch"))
                    }
                    (true, "oom") => assert!(local.as_str().unwrap().starts_with("MemoryLimit")),
                    _ => assert!(local.is_null(), "{what}: {r}"),
                }
                if !me {
                    // stopped at a slice boundary: a healthy rank's share (≥ 100 slices,
                    // each at least one allocation of 5 ms) was far from done
                    let share = f(&r, "share");
                    assert!(share >= 100.0, "{r}");
                    assert!(f(&r, "allocations") < share / 2.0, "{what}: {r}");
                }
            }
        }
    }
}

#[test]
fn ranks_calling_with_different_plans_get_a_typed_error() {
    let run = mpirun(3, "inconsistent", &[]);
    assert!(run.success, "{}", run.output);
    for r in fault_rows(&run, 3, "Inconsistent") {
        assert_eq!(r["error"]["failed"], 1, "{r}");
        assert_eq!(r["again"], true, "{r}");
    }
}

#[test]
fn a_killed_rank_ends_the_run_on_every_rank_within_the_bound() {
    let bound = 2.0 * worker::TIMEOUT.as_secs_f64() + 1.0;
    // with --enable-recovery the survivors return Unresponsive naming the killed rank
    let run = mpirun(3, "kill", &["--enable-recovery"]);
    assert_eq!(run.results.len(), 2, "{}", run.output);
    for r in fault_rows(&run, 2, "Unresponsive") {
        assert_eq!(r["error"]["ranks"], serde_json::json!([1]), "{r}");
        assert!(f(&r, "seconds") <= bound, "{r}");
        // a Distributed that saw a silent peer refuses further calls at once
        assert_eq!(r["again"]["kind"], "Unusable", "{r}");
    }
    // rank 0 killed: the others hear nothing from it for the timeout
    let run = mpirun_failing(3, "kill", 0, &["--enable-recovery"]);
    for r in fault_rows(&run, 2, "Unresponsive") {
        assert_eq!(r["error"]["ranks"], serde_json::json!([0]), "{r}");
        assert!(f(&r, "seconds") <= bound, "{r}");
    }
    // by default Open MPI ends the whole job when a rank dies: no rank is left waiting
    let run = mpirun(3, "kill", &[]);
    assert!(!run.success, "{}", run.output);
    assert!(run.seconds <= bound + 10.0, "{}", run.seconds);
}
