//! The device commands: `cargo xtask test-wgpu` (burn's wgpu backend on a Vulkan driver) and
//! `cargo xtask gpu-check` (candle's and burn's CUDA backends on an NVIDIA GPU).

use std::process::Command;
use std::time::Instant;

use crate::{Step, cargo, print_steps, run, run_counted};

/// `cargo xtask test-wgpu`: burn's wgpu backend on the machine's Vulkan driver (Mesa's
/// software lavapipe where there is no GPU: `apt-get install mesa-vulkan-drivers`). Runs the
/// tests of `adrules-burn` with its feature `wgpu`: the conformance suite on wgpu (f32) beside
/// Flex and NdArray, and the device, routing and transfer tests with wgpu among the devices.
/// Not part of `test-all`: the wgpu/cubecl stack and the burn crates rebuilt with cubecl are
/// about 40 minutes of a cold build on 2 cores, more than CI's budget leaves.
///
/// # Errors
/// When the tests fail.
pub fn test_wgpu() -> Result<(), String> {
    let start = Instant::now();
    let mut test = cargo();
    test.args(["test", "-p", "adrules-burn", "--features", "wgpu"]);
    run(test)?;
    eprintln!(
        "\ntest-wgpu: everything passed in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs `cmd` as a step named `name` that may fail: the outcome is `ok` or `FAILED` with the
/// exit status, the test counts from its `test result:` lines.
fn try_step(name: &str, cmd: Command) -> Step {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("\n==> {shown}");
    let start = Instant::now();
    let (status, counts) = run_counted(cmd);
    let outcome = match status {
        Ok(s) if s.success() => "ok".to_string(),
        Ok(s) => format!("FAILED: {s}"),
        Err(e) => format!("FAILED to start: {e}"),
    };
    Step {
        name: name.into(),
        seconds: start.elapsed().as_secs_f64(),
        counts: (counts.binaries > 0).then_some(counts),
        outcome,
    }
}

/// `cargo xtask gpu-check [--cpu]`: on a machine with an NVIDIA GPU, builds (release) the
/// tests of `adrules-candle` with `cuda` and of `adrules-burn` with `cuda`, and the example
/// `ising2d` with `candle-cuda,burn-cuda`; runs the GPU conformance suites (the modules
/// `conformance::cuda` of both crates: every rule group, the einsum oracle f32 and f64 cases
/// among them, and the GPU training and implicit tests there) and `ising2d` on the GPU with
/// candle and with burn; prints one markdown table (step, outcome with test counts, seconds).
/// `--cpu` runs the same steps where no GPU is needed (burn's suite on wgpu, candle's on the
/// CPU, ising2d on wgpu and on candle's CPU), to rehearse the script. Fails when a step fails.
///
/// # Errors
/// Unknown arguments, no GPU (without `--cpu`), or a failed step.
pub fn gpu_check(args: &[String]) -> Result<(), String> {
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
    // (package, its feature, the test filter) of each suite, and the examples' features.
    let (suites, example_features, device): (&[(&str, &str, &str)], &str, &str) = if cpu {
        (
            &[
                ("adrules-candle", "", "conformance::"),
                ("adrules-burn", "wgpu", "conformance::wgpu"),
            ],
            "candle,burn-wgpu",
            "wgpu",
        )
    } else {
        (
            &[
                ("adrules-candle", "cuda", "conformance::cuda"),
                ("adrules-burn", "cuda", "conformance::cuda"),
            ],
            "candle-cuda,burn-cuda",
            "cuda",
        )
    };
    let start = Instant::now();
    let mut steps = Vec::new();
    let with_features = |cmd: &mut Command, features: &str| {
        if !features.is_empty() {
            cmd.args(["--features", features]);
        }
    };
    for (package, features, _) in suites {
        let mut build = cargo();
        build.args(["test", "--release", "--no-run", "-p", package]);
        with_features(&mut build, features);
        steps.push(try_step(&format!("build {package} {features}"), build));
    }
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "-p",
        "adrules-examples",
        "--bin",
        "ising2d",
    ]);
    with_features(&mut build, example_features);
    steps.push(try_step(
        &format!("build ising2d --features {example_features}"),
        build,
    ));
    if steps.iter().all(|s| s.outcome == "ok") {
        for (package, features, filter) in suites {
            let mut test = cargo();
            test.args(["test", "--release", "-p", package]);
            with_features(&mut test, features);
            test.args(["--", filter]);
            steps.push(try_step(&format!("{package}: {filter}"), test));
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
                "-p",
                "adrules-examples",
                "--bin",
                "ising2d",
            ]);
            with_features(&mut run, example_features);
            run.arg("--")
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
            steps.push(try_step(
                &format!("ising2d --backend {backend} --device {device} --precision {precision}"),
                run,
            ));
        }
    }
    print_steps("### gpu-check", &steps, start.elapsed().as_secs_f64());
    if steps.iter().all(|s| s.outcome == "ok") {
        Ok(())
    } else {
        Err("gpu-check: a step failed (see the table)".into())
    }
}
