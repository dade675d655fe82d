//! `cargo xtask fuzz [--inputs N | --minutes M | --seconds S] [--seed S] [--save FILE]`:
//! fuzzes adrules' public API (see the library's documentation for the targets), prints what
//! it found, and appends every failing input as a `target seed` line to a reproducer file
//! (default `fuzz/regressions/found-SEED.txt`), which the package's test replays: a saved
//! reproducer is a regression test until it passes.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use adrules_fuzz::{Budget, Finding, HANG_SECONDS, Target, run, shrink};

const USAGE: &str = "usage: fuzz [--inputs N | --minutes M | --seconds S] [--seed S] [--save FILE]
  --inputs N    run N inputs (default 100000), dealt round-robin to the targets
  --minutes M   run for M minutes instead; --seconds S for S seconds
  --seed S      the first input's seed (default 0); input i uses seed S + i
  --save FILE   where to append failing inputs (default fuzz/regressions/found-SEED.txt)";

fn parse() -> Result<(u64, Budget, Option<PathBuf>), String> {
    let mut args = std::env::args().skip(1);
    let (mut seed, mut budget, mut save) = (0u64, Budget::Inputs(100_000), None::<PathBuf>);
    let mut budgets = 0;
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--inputs" => {
                let v = value("--inputs")?;
                budget = Budget::Inputs(
                    v.parse()
                        .map_err(|_| format!("--inputs {v}: not a count"))?,
                );
                budgets += 1;
            }
            "--minutes" | "--seconds" => {
                let v = value(&a)?;
                let x: f64 = v
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite() && *x > 0.0)
                    .ok_or(format!("{a} {v}: not a positive number"))?;
                let secs = if a == "--minutes" { 60.0 * x } else { x };
                let d = Duration::try_from_secs_f64(secs)
                    .map_err(|_| format!("{a} {v}: too long a duration"))?;
                budget = Budget::Time(d);
                budgets += 1;
            }
            "--seed" => {
                let v = value("--seed")?;
                seed = v.parse().map_err(|_| format!("--seed {v}: not a u64"))?;
            }
            "--save" => {
                let p = PathBuf::from(value("--save")?);
                let dir = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                if p.is_dir() || !dir.is_dir() {
                    return Err(format!(
                        "--save {}: must name a file in an existing directory",
                        p.display()
                    ));
                }
                save = Some(p);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if budgets > 1 {
        return Err("give one of --inputs, --minutes and --seconds".into());
    }
    Ok((seed, budget, save))
}

/// `writeln!` to standard output, ignoring a closed or full stdout (the exit status and the
/// reproducer file still report the result).
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

fn main() -> ExitCode {
    let mut out = std::io::stdout().lock();
    let (seed, budget, save) = match parse() {
        Ok(x) => x,
        Err(e) if e.is_empty() => {
            say!(out, "{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("fuzz: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "fuzz: seed {seed}, {budget:?}, {} threads",
        rayon::current_num_threads()
    );
    let r = run(seed, budget);
    let secs = r.elapsed.as_secs_f64();
    let per_target: Vec<String> = Target::ALL
        .iter()
        .zip(r.inputs)
        .map(|(t, n)| format!("{} {n}", t.name()))
        .collect();
    say!(
        out,
        "inputs: {} in {secs:.1} s ({:.0} per second): {}",
        r.total(),
        r.total() as f64 / secs.max(1e-9),
        per_target.join(", ")
    );
    say!(
        out,
        "panics: {}, hangs (over {HANG_SECONDS} s): {}, wrong values: {}, mutated inputs: {}",
        r.panics,
        r.hangs,
        r.wrong,
        r.mutated
    );
    if r.clean() {
        return ExitCode::SUCCESS;
    }
    for f in &r.failures {
        let (kind, what) = match &f.finding {
            Finding::Wrong(w) => ("wrong", w),
            Finding::Mutated(w) => ("mutated", w),
            Finding::Panic(w) => ("panic", w),
            Finding::Hang(w) => ("hang", w),
        };
        say!(out, "{} {}: {kind}: {what}", f.target.name(), f.seed);
    }
    let path = save.unwrap_or_else(|| PathBuf::from(format!("fuzz/regressions/found-{seed}.txt")));
    // each failure with its reduced input (the smallest failing the same way among 2,000
    // related seeds), the first ten only: the search runs the target up to 2,000 times
    let lines: String = r
        .failures
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut line = format!("{} {}\n", f.target.name(), f.seed);
            if i < 10 {
                let (s, _) = shrink(f.target, f.seed, &f.finding, 2_000);
                if s != f.seed {
                    say!(
                        out,
                        "{} {}: reduced to {} {s}",
                        f.target.name(),
                        f.seed,
                        f.target.name()
                    );
                    line.push_str(&format!(
                        "{} {s} # reduced from {}\n",
                        f.target.name(),
                        f.seed
                    ));
                }
            }
            line
        })
        .collect();
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(lines.as_bytes()));
    match written {
        Ok(()) => say!(
            out,
            "reproducers appended to {} (replayed by `cargo test -p adrules-fuzz`; one input: \
             `target seed`, e.g. `{} {}`)",
            path.display(),
            Target::Einsum.name(),
            seed
        ),
        Err(e) => eprintln!("fuzz: cannot write {}: {e}", path.display()),
    }
    ExitCode::FAILURE
}
