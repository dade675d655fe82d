//! The examples' output files (`adrules_examples::cli`): replaced together or not at all,
//! paths refused before a run.

use std::path::Path;

use crate::support::outputs::{listing, scratch};
use adrules_examples::cli::{Pending, check_output, commit_all};

/// Two outputs with their temporary files written, ready to commit.
fn written(dir: &Path) -> Vec<Pending> {
    let mut csv = Pending::reserve("--csv", &dir.join("t.csv")).unwrap();
    let mut png = Pending::reserve("--png", &dir.join("t.png")).unwrap();
    std::fs::write(csv.create().unwrap(), b"new table").unwrap();
    std::fs::write(png.create().unwrap(), b"new chart").unwrap();
    vec![csv, png]
}

#[test]
fn both_outputs_are_replaced_or_neither() {
    let guard = scratch("cli", "together");
    let dir = guard.0.clone();
    std::fs::write(dir.join("t.csv"), b"the user's table").unwrap();
    let outputs = written(&dir);
    // the chart's destination became a directory during the run: its rename fails
    std::fs::create_dir(dir.join("t.png")).unwrap();
    let msg = commit_all(outputs).unwrap_err();
    assert!(msg.contains("no output was replaced"), "{msg}");
    assert_eq!(
        std::fs::read(dir.join("t.csv")).unwrap(),
        b"the user's table"
    );
    let names: Vec<String> = listing_names(&dir);
    assert_eq!(
        names,
        ["t.csv", "t.png"],
        "temporary or backup files were left"
    );

    // a destination that did not exist is removed again
    std::fs::remove_file(dir.join("t.csv")).unwrap();
    let outputs = written(&dir);
    assert!(commit_all(outputs).is_err());
    assert_eq!(listing_names(&dir), ["t.png"]);

    // and when both can be replaced, both are
    std::fs::remove_dir(dir.join("t.png")).unwrap();
    std::fs::write(dir.join("t.csv"), b"old").unwrap();
    commit_all(written(&dir)).unwrap();
    let files = listing(&dir);
    assert_eq!(files.len(), 2);
    assert_eq!(files[0], ("t.csv".into(), b"new table".to_vec()));
    assert_eq!(files[1], ("t.png".into(), b"new chart".to_vec()));
}

fn listing_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_trailing_separator_or_a_long_name_is_handled_before_the_run() {
    let guard = scratch("cli", "names");
    let dir = guard.0.clone();
    let msg = check_output("--png", &dir.join("p.png/")).unwrap_err();
    assert!(msg.contains("not a file name"), "{msg}");
    // a name at the file system's limit (255 bytes) still gets a temporary file
    let long = format!("{}.csv", "b".repeat(251));
    let dest = dir.join(&long);
    check_output("--csv", &dest).unwrap();
    let mut out = Pending::reserve("--csv", &dest).unwrap();
    std::fs::write(out.create().unwrap(), b"x").unwrap();
    commit_all(vec![out]).unwrap();
    assert_eq!(listing_names(&dir), [long]);
}
