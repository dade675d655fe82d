//! The fuzz package's one test binary: a short fuzz of every target (`cargo xtask test-all`
//! runs it), the replay of every saved reproducer in `fuzz/regressions/`, and the reproducer
//! format.

use std::time::Duration;

use adrules_fuzz::{Budget, Target, parse_reproducers, run, run_one};

#[test]
fn a_short_fuzz_of_every_target_finds_nothing() {
    let r = run(0x0adf, Budget::Time(Duration::from_secs(5)));
    assert!(r.inputs.iter().all(|&n| n >= 100), "{:?}", r.inputs);
    assert!(r.clean(), "{:#?}", r.failures);
}

#[test]
fn every_saved_reproducer_passes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "txt") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (target, seed) in parse_reproducers(&text).unwrap() {
                let r = run_one(target, seed);
                assert!(
                    r.is_ok(),
                    "{}: {} {seed}: {r:?}",
                    path.display(),
                    target.name()
                );
                replayed += 1;
            }
        }
    }
    assert!(replayed > 0, "no reproducer in {}", dir.display());
}

#[test]
fn reproducer_files_are_parsed_strictly() {
    let ok = parse_reproducers("# found 2026-12-03\neinsum 12\n\nlinalg 7 # subnormal\n").unwrap();
    assert_eq!(ok, [(Target::Einsum, 12), (Target::Linalg, 7)]);
    for bad in ["einsum", "einsum x", "nothing 3", "sizes 1 2"] {
        assert!(parse_reproducers(bad).is_err(), "{bad}");
    }
}
