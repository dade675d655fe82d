//! Output-file helpers of the examples' command-line tests: scratch directories, their
//! listings, and a user's earlier outputs that a failing run must leave as they were.
#![allow(dead_code)] // each test file uses a subset

use std::path::{Path, PathBuf};

/// A fresh, empty directory for one test, removed when dropped (also when the test fails).
pub struct Scratch(pub PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `example` names the directory (`adrules-{example}-{name}-{pid}`).
pub fn scratch(example: &str, name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("adrules-{example}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// Every file in `dir` with its bytes, by name.
pub fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// Puts a user's earlier `{example}.csv` and `{example}.png` into `dir`; returns the listing.
pub fn earlier_outputs(dir: &Path, example: &str) -> Vec<(String, Vec<u8>)> {
    std::fs::write(
        dir.join(format!("{example}.csv")),
        b"T,f\n1,2\n(the user's table)\n",
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{example}.png")),
        b"\x89PNG not really, but the user's",
    )
    .unwrap();
    listing(dir)
}

/// The adapters this build lacks (each example must refuse `--backend` for them, naming the
/// feature that builds them in).
pub fn missing_backends() -> Vec<&'static str> {
    [
        ("candle", cfg!(feature = "candle")),
        ("burn", cfg!(feature = "burn")),
        ("dfdx", cfg!(feature = "dfdx")),
    ]
    .into_iter()
    .filter(|(_, built)| !built)
    .map(|(name, _)| name)
    .collect()
}

/// Runs each of `cases` (extra arguments, and the parts the refusal must say) through `run`,
/// which must refuse it without changing `dir` (whose listing was `before`).
pub fn assert_refused(
    run: impl Fn(&[&str]) -> Result<(), String>,
    dir: &Path,
    before: &[(String, Vec<u8>)],
    cases: &[(&[&str], &[&str])],
) {
    for (extra, expected) in cases {
        let msg = run(extra).expect_err(&format!("{extra:?} was accepted"));
        for part in *expected {
            assert!(
                msg.contains(part),
                "{extra:?}: {msg:?} does not say {part:?}"
            );
        }
        assert_eq!(listing(dir), before, "{extra:?} changed the directory");
    }
}

/// `bytes` is a PNG file with something drawn in it.
pub fn assert_chart(bytes: &[u8]) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert!(bytes.len() > 10_000, "an empty chart");
}

/// `run --backend NAME` is refused for every adapter this build lacks, naming the feature
/// and the example to rebuild, without changing `dir`.
pub fn assert_missing_backends_refused(
    run: impl Fn(&[&str]) -> Result<(), String>,
    dir: &Path,
    before: &[(String, Vec<u8>)],
    example: &str,
) {
    for name in missing_backends() {
        let msg = run(&["--backend", name]).unwrap_err();
        assert!(
            msg.contains(&format!("rebuild with `--features {name}`"))
                && msg.contains(&format!("--bin {example}")),
            "{msg}"
        );
        assert!(!msg.contains("invalid value"), "{msg}");
        assert_eq!(listing(dir), before);
    }
}
