//! The DEQ classifier example ([`adrules_examples::deq`]): a small training run lowers the
//! loss by a stated margin on each engine built in; burn and candle give the same loss curve
//! (f32 and f64); the implicit gradient's peak heap is flat in the solver's iterations while
//! the unrolled one grows; the command line refuses a `--plot` that exists (unless
//! `--overwrite`), a path that is not a PNG and an engine this build lacks, before anything
//! runs.

use adrules_examples::deq::{Args, Engine, Rings, Setup, accuracy, rings, run};
use clap::Parser;

use crate::support::outputs::{assert_chart, listing, scratch};

/// 96 points on 3 rings, 8 features, 10 epochs of 12 SGD steps of 8 points.
fn small(f64: bool) -> (Setup, Rings) {
    let setup = Setup {
        hidden: 8,
        epochs: 10,
        batch: 8,
        f64,
        ..Setup::default()
    };
    (setup, rings(3, 32, 1))
}

#[test]
fn rings_are_deterministic_and_separated_by_radius() {
    let data = rings(3, 50, 7);
    assert_eq!(data, rings(3, 50, 7));
    assert_ne!(data.x, rings(3, 50, 8).x);
    assert_eq!(data.len(), 150);
    for (p, &c) in data.x.chunks(2).zip(&data.labels) {
        let r = p[0].hypot(p[1]);
        // radius 0.3 + 0.35·c with noise of σ = 0.05: within 5σ
        assert!(
            (r - (0.3 + 0.35 * c as f64)).abs() < 0.25,
            "class {c} at r = {r}"
        );
    }
    let (x, one_hot) = data.batch(3..5).unwrap();
    assert_eq!(x, data.x[6..10]);
    assert_eq!(one_hot, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]); // classes 0 and 1
    // accuracy counts the rows whose largest logit is the label
    let logits = [0.1, 0.9, 0.0, 2.0, -1.0, 0.5];
    assert_eq!(accuracy(&logits, &[1, 2], 3).unwrap(), 0.5);
    // out of range, a foreign label, sizes that do not match: typed errors, no panic
    let invalid = |e: adrules::Error, name: &str| {
        assert!(
            matches!(e, adrules::Error::InvalidArgument { ref arg, .. } if arg == name),
            "{e}"
        )
    };
    invalid(data.batch(149..151).unwrap_err(), "batch");
    #[allow(clippy::reversed_empty_ranges)]
    invalid(data.batch(5..3).unwrap_err(), "batch");
    let mut foreign = data.clone();
    foreign.labels[4] = 3;
    invalid(foreign.batch(3..5).unwrap_err(), "batch");
    invalid(accuracy(&logits, &[1, 2], 0).unwrap_err(), "logits");
    invalid(accuracy(&logits, &[1], 3).unwrap_err(), "logits");
    invalid(accuracy(&[], &[], 3).unwrap_err(), "logits");
}

/// Trains `engine` on the small problem; asserts the stated margin and returns the curve.
#[allow(dead_code)] // without an engine feature
fn trains(engine: Engine, f64: bool) -> Vec<adrules_examples::deq::Epoch> {
    let (setup, data) = small(f64);
    let mut seen = 0;
    let curve = adrules_examples::deq::train(engine, &setup, &data, &mut |i, _| {
        assert_eq!(i, seen);
        seen += 1;
    })
    .unwrap();
    assert_eq!(curve.len(), setup.epochs + 1);
    let (first, last) = (curve[0], curve[setup.epochs]);
    // measured: 1.0995 → 0.9024 (18 % lower; f32 and f64, both engines); asked: 10 % lower
    assert!(
        last.loss < 0.9 * first.loss,
        "{engine:?}: {} → {}",
        first.loss,
        last.loss
    );
    assert!(
        curve
            .iter()
            .all(|e| e.iterations >= 1 && e.iterations < 200)
    );
    curve
}

#[cfg(feature = "burn")]
#[test]
fn burn_training_lowers_the_loss() {
    trains(Engine::Burn, false);
}

#[cfg(feature = "candle")]
#[test]
fn candle_training_lowers_the_loss() {
    trains(Engine::Candle, false);
}

#[cfg(all(feature = "burn", feature = "candle"))]
#[test]
fn burn_and_candle_give_the_same_loss_curve() {
    use adrules_examples::deq::curve_difference;
    // the same seeded parameters, batches and SGD update: the curves differ by rounding only
    // (measured: 2.3e-7 in f32, 2.3e-16 in f64, over these 10 epochs)
    for (f64, tol) in [(false, 1e-5), (true, 1e-12)] {
        let (burn, candle) = (trains(Engine::Burn, f64), trains(Engine::Candle, f64));
        let d = curve_difference(&burn, &candle);
        assert!(d < tol, "f64: {f64}: {d:e}\n{burn:?}\n{candle:?}");
        for (a, b) in burn.iter().zip(&candle) {
            assert_eq!(a.iterations, b.iterations);
            assert_eq!(a.accuracy, b.accuracy);
        }
    }
}

#[cfg(any(feature = "burn", feature = "candle"))]
rusty_fork::rusty_fork_test! {
    #![rusty_fork(timeout_ms = 300_000)]

    /// The counting allocator is process-wide: a child process of its own.
    #[test]
    fn implicit_memory_is_flat_and_unrolled_memory_grows() {
        let data = rings(3, 64, 1);
        let setup = Setup { f64: true, contraction: 0.9, max_iterations: 10_000, ..Setup::default() };
        let engines = [
            (Engine::Burn, cfg!(feature = "burn")),
            (Engine::Candle, cfg!(feature = "candle")),
        ];
        for (engine, _) in engines.into_iter().filter(|e| e.1) {
            let rows = adrules_examples::deq::memory(engine, &setup, &data, &[1e-2, 1e-8, 1e-14])
                .unwrap();
            let (first, last) = (rows[0], rows[2]);
            // more iterations for a smaller tolerance (measured 4, 13, 22)
            assert!(last.iterations >= 3 * first.iterations, "{engine:?} {rows:?}");
            // the unrolled tape grows with them (measured 0.31 → 1.30 MB on burn, 0.90 → 3.72
            // MB on candle), the implicit peak does not (0.61 and 12.99 MB at every row)
            assert!(last.unrolled > 3 * first.unrolled, "{engine:?} {rows:?}");
            assert!(
                (last.implicit as f64) < 1.1 * first.implicit as f64,
                "{engine:?} {rows:?}"
            );
        }
    }
}

/// `run` with `deq` and these arguments.
fn deq(args: &[&str]) -> Result<(), String> {
    let mut all = vec!["deq"];
    all.extend_from_slice(args);
    let args = Args::try_parse_from(all).map_err(|e| e.to_string())?;
    run(&args)
}

#[test]
fn the_plot_never_replaces_a_file_unless_asked() {
    let guard = scratch("deq", "plot");
    let dir = guard.0.clone();
    let png = dir.join("loss.png");
    let path = png.to_str().unwrap();
    std::fs::write(&png, b"the user's picture").unwrap();
    let before = listing(&dir);
    let tiny = ["--epochs", "1", "--points", "8", "--hidden", "4"];
    let with = |extra: &[&str]| {
        let mut a = tiny.to_vec();
        a.extend_from_slice(extra);
        deq(&a)
    };
    let msg = with(&["--plot", path]).unwrap_err();
    assert!(
        msg.contains("exists") && msg.contains("--overwrite"),
        "{msg}"
    );
    assert_eq!(listing(&dir), before);
    let txt = dir.join("loss.txt");
    let msg = with(&["--plot", txt.to_str().unwrap()]).unwrap_err();
    assert!(msg.contains(".png"), "{msg}");
    let msg = with(&["--lr=-1"]).unwrap_err();
    assert!(msg.contains("--lr"), "{msg}");
    let msg = with(&["--max-contraction", "1.5"]).unwrap_err();
    assert!(msg.contains("--max-contraction"), "{msg}");
    assert_eq!(listing(&dir), before);

    if cfg!(any(feature = "burn", feature = "candle")) {
        // a new path is written; an existing one only with --overwrite
        let fresh = dir.join("new.png");
        with(&["--plot", fresh.to_str().unwrap()]).unwrap();
        assert_chart(&std::fs::read(&fresh).unwrap());
        with(&["--plot", path, "--overwrite"]).unwrap();
        assert_chart(&std::fs::read(&png).unwrap());
        let names: Vec<String> = listing(&dir).into_iter().map(|f| f.0).collect();
        assert_eq!(names, ["loss.png", "new.png"], "temporary files were left");
    }
}

#[test]
fn engines_this_build_lacks_are_refused() {
    let missing = [
        ("burn", cfg!(feature = "burn")),
        ("candle", cfg!(feature = "candle")),
    ];
    for (name, built) in missing {
        if built {
            // an engine the build has is taken (one tiny epoch)
            let tiny = [
                "--engine", name, "--epochs", "1", "--points", "8", "--hidden", "4",
            ];
            deq(&tiny).unwrap_or_else(|e| panic!("{name}: {e}"));
            continue;
        }
        let msg = deq(&["--engine", name]).unwrap_err();
        assert!(msg.contains("rebuild with `--features"), "{msg}");
        assert!(msg.contains("--bin deq"), "{msg}");
    }
    if !cfg!(all(feature = "burn", feature = "candle")) {
        let msg = deq(&["--engine", "both"]).unwrap_err();
        assert!(msg.contains("--features burn,candle"), "{msg}");
    }
}
