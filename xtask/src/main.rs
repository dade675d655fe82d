//! Project automation: `cargo xtask test-all`, `bench`, `fuzz`, `test-wgpu`, `gpu-check`.
//!
//! - [`test_all`]: fmt, clippy, every package's tests and doc tests with the union feature
//!   set, then the facade's other feature sets (see the module docs for what runs where and
//!   why each thing is built once);
//! - [`bench`]: the criterion benches and their tables;
//! - `fuzz`: the long-running fuzz of the public API (the package `adrules-fuzz`, in release
//!   mode, arguments passed through);
//! - [`devices`]: `test-wgpu` (burn's wgpu backend on a Vulkan driver) and `gpu-check` (the
//!   CUDA backends of candle and burn on an NVIDIA GPU).

mod bench;
mod devices;
mod test_all;

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

const USAGE: &str = "usage: cargo xtask <command>

  test-all   fmt check, clippy -D warnings, tests and doc tests for every feature set
             (prints the tests run and the time of each step)
  bench      run the benchmarks and print markdown tables
  fuzz       fuzz the public API: `fuzz [--inputs N | --minutes M | --seconds S] [--seed S]
             [--save FILE]` (default 100000 inputs; failing inputs saved as reproducers)
  test-wgpu  burn's wgpu backend (on lavapipe where there is no GPU): conformance and device tests
  gpu-check  on a machine with an NVIDIA GPU: build candle and burn with CUDA, run their
             conformance suites and ising2d on the GPU, print one table
             (`gpu-check --cpu` rehearses the same steps on burn-wgpu and candle's CPU)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test-all") if args.len() == 1 => test_all::test_all(),
        Some("bench") => bench::bench(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        Some("gpu-check") => devices::gpu_check(&args[1..]),
        Some("test-wgpu") if args.len() == 1 => devices::test_wgpu(),
        _ => {
            eprintln!("{USAGE}");
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

/// `cargo xtask fuzz ARGS`: `cargo run --release -p adrules-fuzz -- ARGS`.
fn fuzz(args: &[String]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--release",
        "-p",
        "adrules-fuzz",
        "--bin",
        "fuzz",
        "--",
    ])
    .args(args);
    run(cmd)
}

/// `cargo`, set up for CI when `CI` is set.
fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    if on_ci() {
        // A clean clone builds each crate once, so incremental state only costs disk (measured
        // locally: 25 GB of `target/debug/incremental` after a few runs), and nobody reads a
        // backtrace of a CI test binary, whose line tables are most of its size. A CI run
        // once failed with `ld terminated with signal 7 [Bus error]` (a full disk); panics
        // still print their file and line without debug info.
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

/// Tests counted from the harness's `test result:` lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    passed: usize,
    failed: usize,
    ignored: usize,
    /// test binaries (one `test result:` line each)
    binaries: usize,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
        self.binaries += other.binaries;
    }

    /// Adds one `test result: ok. 12 passed; 0 failed; 1 ignored; …` line.
    fn parse_line(&mut self, line: &str) {
        let Some(rest) = line.trim_start().strip_prefix("test result:") else {
            return;
        };
        self.binaries += 1;
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(what), Some(n)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<usize>() else {
                continue;
            };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

/// One step of a run: the command, its time, and the tests it ran.
struct Step {
    name: String,
    seconds: f64,
    counts: Option<Counts>,
    outcome: String,
}

/// Runs `cmd` with its output shown as it comes, counting the tests of the `test result:`
/// lines on its standard output; the exit status (or why it could not start) and the counts.
fn run_counted(mut cmd: Command) -> (std::io::Result<std::process::ExitStatus>, Counts) {
    cmd.stdout(Stdio::piped());
    let mut counts = Counts::default();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (Err(e), counts),
    };
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            counts.parse_line(&line);
            println!("{line}");
        }
    }
    (child.wait(), counts)
}

/// Runs `cmd` as a step named after it: prints it, its time, and (on CI) the free disk.
///
/// # Errors
/// When the command cannot start or fails.
fn run_step(cmd: Command) -> Result<Step, String> {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("\n==> {shown}");
    let start = Instant::now();
    let (status, counts) = run_counted(cmd);
    let seconds = start.elapsed().as_secs_f64();
    let tests = if counts.binaries > 0 {
        format!(
            ", {} tests passed, {} failed, {} ignored in {} binaries",
            counts.passed, counts.failed, counts.ignored, counts.binaries
        )
    } else {
        String::new()
    };
    eprintln!("<== {seconds:.1} s{tests}");
    report_disk();
    let status = status.map_err(|e| format!("cannot start {shown}: {e}"))?;
    if !status.success() {
        return Err(format!("{shown} failed with {status}"));
    }
    Ok(Step {
        name: shown,
        seconds,
        counts: (counts.binaries > 0).then_some(counts),
        outcome: "ok".into(),
    })
}

/// Runs `cmd` as a step (see [`run_step`]), for callers that need only success.
///
/// # Errors
/// As [`run_step`].
fn run(cmd: Command) -> Result<(), String> {
    run_step(cmd).map(|_| ())
}

/// Prints the steps as a markdown table (step, seconds, tests) and the totals.
fn print_steps(title: &str, steps: &[Step], total_seconds: f64) {
    println!(
        "\n{title}\n\n| step | outcome | seconds | tests passed / ignored |\n|---|---|---:|---:|"
    );
    let mut all = Counts::default();
    for s in steps {
        let tests = s.counts.map_or(String::new(), |c| {
            all.add(c);
            format!("{} / {}", c.passed, c.ignored)
        });
        println!(
            "| `{}` | {} | {:.1} | {tests} |",
            s.name, s.outcome, s.seconds
        );
    }
    println!(
        "| total | | {total_seconds:.1} | {} / {} |",
        all.passed, all.ignored
    );
}

#[cfg(test)]
mod tests {
    use super::Counts;

    #[test]
    fn test_result_lines_are_counted() {
        let mut c = Counts::default();
        c.parse_line("test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 3 filtered out; finished in 0.5s");
        c.parse_line("running 3 tests");
        c.parse_line(
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        assert_eq!(
            c,
            Counts {
                passed: 14,
                failed: 1,
                ignored: 1,
                binaries: 2
            }
        );
    }
}
