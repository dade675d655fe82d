//! Project automation: `cargo xtask test-all`, `cargo xtask bench`.
//!
//! `test-all` runs, in order: `cargo fmt --check`, then for every feature set of the facade
//! crate `adrules` (no default features, the defaults, each optional feature on top of the
//! defaults, all features): clippy with `-D warnings` on every target, the tests and the doc
//! tests. The feature sets are read from `cargo metadata`, so a feature added to the facade
//! is tested without editing this file.

use std::process::{Command, ExitCode};
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test-all") => test_all(),
        Some("bench") => bench(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n  test-all   fmt check, clippy -D warnings, tests and doc tests for every feature set\n  bench      run the benchmarks and print markdown tables"
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
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(mut cmd: Command) -> Result<(), String> {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("\n==> {shown}");
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {shown}: {e}"))?;
    eprintln!("<== {:.1} s", start.elapsed().as_secs_f64());
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed with {status}"))
    }
}

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
    let mut sets = vec![vec!["--no-default-features".to_string()], vec![]];
    for f in &optional {
        sets.push(vec!["--features".into(), f.clone()]);
    }
    if optional.len() > 1 {
        sets.push(vec!["--all-features".into()]);
    }
    Ok(sets)
}

fn test_all() -> Result<(), String> {
    let start = Instant::now();
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    run(fmt)?;
    for set in feature_sets()? {
        let mut clippy = cargo();
        clippy
            .args(["clippy", "--workspace", "--all-targets"])
            .args(&set)
            .args(["--", "-D", "warnings"]);
        run(clippy)?;
        let mut test = cargo();
        test.args(["test", "--workspace", "--all-targets"])
            .args(&set);
        run(test)?;
        let mut doc = cargo();
        doc.args(["test", "--workspace", "--doc"]).args(&set);
        run(doc)?;
    }
    eprintln!(
        "\ntest-all: everything passed in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn bench(_args: &[String]) -> Result<(), String> {
    Err("no benchmarks yet".into())
}
