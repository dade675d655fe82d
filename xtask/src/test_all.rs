//! `cargo xtask test-all`: everything CI checks, each thing built once.
//!
//! In order:
//! 1. `cargo fmt --check`;
//! 2. with the **union** feature set (every adapter and the engine backends that need neither
//!    a GPU nor a graphics driver, [`CPU_BACKENDS`]) on the whole workspace: clippy
//!    `-D warnings` on every target, then every package's tests (one integration-test binary
//!    per package, the unit tests, the benches in test mode; among them the fuzz package's,
//!    which fuzzes 3,200 inputs (at least 100 per target) and replays the saved reproducers), then every
//!    package's doc tests, then rustdoc with `-D warnings` on every package but `xtask`
//!    (broken intra-doc links, public docs that link private items);
//! 3. for each **other feature set of the facade** `adrules` (no default features, the
//!    defaults, each adapter on top of the defaults): clippy `-D warnings` on every target of
//!    the workspace, and the tests of what those features change: the facade's test binary
//!    (`facade`) and the examples' (`examples`).
//!
//! Why it is arranged so (measured with `cargo build --timings`): the build, not the running,
//! is the cost (the tests of the union set run in about a minute; building them cold is most
//! of the total), and every test binary links an engine. Each step keeps the workspace as the
//! package selection, because a `-p adrules` selection resolves the dependencies' features
//! without the other members' dev-dependencies and rebuilds most of the dependency tree. The
//! facade's feature sets change only the facade and the packages that depend on it (examples,
//! benches): their clippy runs in check mode, and `--test facade --test examples` rebuilds
//! only those two binaries, while the members' own tests (built and run in step 2) do not
//! depend on the facade's features. The doc tests run once, in step 2: rustdoc recompiles
//! every doc test on each run, and the facade's one feature-gated doc test runs there with
//! every feature.
//!
//! Before the steps, Open MPI and libclang are installed with apt-get when they are missing
//! and the process is root (the `mpi` feature's crate, `adrules-mpi`, is a workspace member
//! whose build needs them, and its tests run `mpirun -n 2`, `-n 3` and `-n 4` on loopback).
//!
//! The feature sets are read from `cargo metadata`, so a feature added to the facade is tested
//! without editing this file.

use std::time::Instant;

use crate::{Step, cargo, print_steps, run_step};

/// The facade's engine-backend features that `test-all` builds and runs: they need neither a
/// GPU nor a graphics driver (NdArray is a CPU backend). `burn-wgpu` has its own command,
/// `test-wgpu` (its cubecl stack does not fit CI's budget); the GPU ones (`burn-cuda`,
/// `candle-cuda`, Metal, ROCm) are `gpu-check`'s.
pub const CPU_BACKENDS: &[&str] = &["burn-ndarray"];

/// The facade's layer features (the layer crates `adrules-burn-nn`, `adrules-candle-nn`),
/// tested in the union (each turns its adapter on).
pub const LAYERS: &[&str] = &["burn-nn", "candle-nn"];

/// Feature sets of the facade, each as the arguments to pass to cargo: the union last.
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
            .filter(|f| CPU_BACKENDS.contains(&f.as_str()) || LAYERS.contains(&f.as_str()))
            .cloned(),
    );
    if all.len() > 1 {
        sets.push(vec!["--features".into(), all.join(",")]);
    }
    Ok(sets)
}

/// The Debian packages the `mpi` feature needs: Open MPI (the library, `mpicc`, `mpirun`) and
/// libclang (the `mpi` crate generates its bindings with bindgen).
pub const MPI_PACKAGES: &[&str] = &["openmpi-bin", "libopenmpi-dev", "libclang-dev"];

/// Whether Open MPI and libclang are installed: `mpicc` and `mpirun` on the path, and a
/// `libclang` the dynamic linker knows.
fn mpi_installed() -> bool {
    let found = |cmd: &str| {
        std::process::Command::new("sh")
            .args(["-c", cmd])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    found("command -v mpicc && command -v mpirun")
        && found("ldconfig -p | grep -q libclang || ls /usr/lib/llvm-*/lib/libclang*.so*")
}

/// Installs [`MPI_PACKAGES`] with apt-get when they are missing and this process is root (as
/// on CI and a fresh machine); otherwise says what to install.
///
/// # Errors
/// The packages are missing and cannot be installed here, or apt-get failed.
fn ensure_mpi() -> Result<(), String> {
    if mpi_installed() {
        return Ok(());
    }
    let packages = MPI_PACKAGES.join(" ");
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        return Err(format!(
            "the MPI tests need Open MPI and libclang: install them with \
             `sudo apt-get install {packages}` (or your system's packages), then rerun"
        ));
    }
    eprintln!("test-all: installing {packages} (the `mpi` feature's build and tests need them)");
    let status = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                 {packages}"
            ),
        ])
        .status()
        .map_err(|e| format!("apt-get: {e}"))?;
    if !status.success() || !mpi_installed() {
        return Err(format!("apt-get could not install {packages}"));
    }
    Ok(())
}

/// Runs every step (see the module documentation), then prints the table of steps with their
/// times and test counts.
///
/// # Errors
/// The first step that fails (the table of the steps before it is printed).
pub fn test_all() -> Result<(), String> {
    let start = Instant::now();
    ensure_mpi()?;
    let sets = feature_sets()?;
    let (union, facade_sets) = sets.split_last().ok_or("no feature sets")?;
    let mut commands = Vec::new();
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    commands.push(fmt);
    let mut clippy = cargo();
    clippy
        .args(["clippy", "--workspace", "--all-targets"])
        .args(union)
        .args(["--", "-D", "warnings"]);
    commands.push(clippy);
    let mut test = cargo();
    test.args(["test", "--workspace", "--all-targets"])
        .args(union);
    commands.push(test);
    let mut doc = cargo();
    doc.args(["test", "--workspace", "--doc"]).args(union);
    commands.push(doc);
    // Broken intra-doc links and public docs linking private items fail the run. `xtask` is
    // left out: it is no library, and rustdoc reads its `mod bench` as ambiguous with the
    // built-in `#[bench]` attribute.
    let mut rustdoc = cargo();
    rustdoc
        .env("RUSTDOCFLAGS", "-D warnings")
        .args(["doc", "--workspace", "--exclude", "xtask", "--no-deps"])
        .args(union);
    commands.push(rustdoc);
    for set in facade_sets {
        let mut clippy = cargo();
        clippy
            .args(["clippy", "--workspace", "--all-targets"])
            .args(set)
            .args(["--", "-D", "warnings"]);
        commands.push(clippy);
        let mut test = cargo();
        test.args([
            "test",
            "--workspace",
            "--test",
            "facade",
            "--test",
            "examples",
        ])
        .args(set);
        commands.push(test);
    }
    let mut steps: Vec<Step> = Vec::new();
    for cmd in commands {
        match run_step(cmd) {
            Ok(step) => steps.push(step),
            Err(e) => {
                print_steps(
                    "### test-all: the steps before the failure",
                    &steps,
                    start.elapsed().as_secs_f64(),
                );
                return Err(e);
            }
        }
    }
    let total = start.elapsed().as_secs_f64();
    print_steps("### test-all", &steps, total);
    eprintln!("\ntest-all: everything passed in {total:.0} s");
    Ok(())
}
