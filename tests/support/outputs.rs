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
