//! The MPI example (`sliced_mpi`, feature `mpi`) on a small network under `mpirun -n 2`:
//! it runs, its ranks split the slices, each rank's peak stays within the target, and its
//! result equals the one-process sliced run (the example checks that itself, and exits 1 if
//! not).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_mpi_example_agrees_with_one_process_on_two_ranks() {
    let mut child = Command::new("mpirun")
        .args([
            "--oversubscribe",
            "-n",
            "2",
            env!("CARGO_BIN_EXE_sliced_mpi"),
        ])
        .args(["--vertices", "40", "--target-mib", "0.5", "--timeout", "30"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("RAYON_NUM_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("Open MPI's mpirun (apt-get install openmpi-bin libopenmpi-dev)");
    // a hang fails the test instead of blocking it
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("mpirun -n 2 sliced_mpi hung for 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("2 ranks"), "{text}");
    assert!(text.contains("within the target"), "{text}");
    let diff: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("one-process sliced run: max relative difference "))
        .expect("the check line")
        .trim()
        .parse()
        .unwrap();
    assert!(diff <= 1e-12, "{text}");
    // both ranks ran slices
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("0 ") || l.trim_start().starts_with("1 "))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
}
