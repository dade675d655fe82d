//! The fuzz package's one test binary: a short fuzz of every target (`cargo xtask test-all`
//! runs it), the replay of every saved reproducer in `fuzz/regressions/`, and the reproducer
//! format.

use adrules_fuzz::{Budget, Target, parse_reproducers, run, run_one};

/// A fixed number of inputs, not a time budget: the count each target gets must not depend
/// on the machine's load (a 5 s budget gave one target 88 inputs on a loaded machine). 3,200
/// inputs give the rarest targets (2 of the schedule's 64 slots: planner, threads, dfdx and
/// the five engine targets) 100 each, 5 to 10 s here (2 cores, optimized test profile).
#[test]
fn a_short_fuzz_of_every_target_finds_nothing() {
    let r = run(0x0adf, Budget::Inputs(3_200));
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

/// `shrink_with` on a synthetic family (input `s` has size `s % 1000` and fails when its size
/// is even): the result fails the same way, is no larger than the input, and is the smallest
/// failing input among the seeds searched.
#[test]
fn shrink_returns_the_smallest_same_kind_failure_searched() {
    use adrules_fuzz::{Finding, related_seeds, shrink_with};
    let size = |s: u64| (s % 1000) as usize;
    let check = |s: u64| match s % 2 {
        0 => Err(Finding::Wrong(format!("size {}", s % 1000))),
        _ => Ok(()),
    };
    let seed = 998;
    let first = check(seed).unwrap_err();
    let (best, finding) = shrink_with(size, check, seed, &first, 500);
    assert!(matches!(finding, Finding::Wrong(_)), "{finding:?}");
    assert!(check(best).is_err());
    let smallest = related_seeds(seed)
        .take(500)
        .filter(|&s| check(s).is_err())
        .map(size)
        .min()
        .unwrap();
    assert_eq!(size(best), smallest.min(size(seed)));
    assert!(size(best) < size(seed));
    // another kind of finding is not taken as a reduction
    let (kept, _) = shrink_with(size, check, seed, &Finding::Panic("p".into()), 500);
    assert_eq!(kept, seed);
}
