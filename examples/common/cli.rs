//! What the command-line examples share: the backend choice and outputs that replace their
//! destination only when a run has succeeded.

#![allow(dead_code)] // each example uses a subset

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use clap::ValueEnum;

/// The engine the rules run on. Every choice is accepted on the command line; one whose
/// cargo feature is not in this build is refused with the feature to rebuild with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// the embedded strided CPU backend
    Strided,
    /// candle tensors on the CPU device (build with `--features candle`)
    Candle,
    /// burn tensors on burn's Flex CPU backend (build with `--features burn`)
    Burn,
    /// dfdx tensors (build with `--features dfdx`; rank ≤ 6)
    Dfdx,
}

impl BackendChoice {
    /// The cargo feature that builds this backend in (none for the default one).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            BackendChoice::Strided => None,
            BackendChoice::Candle => Some("candle"),
            BackendChoice::Burn => Some("burn"),
            BackendChoice::Dfdx => Some("dfdx"),
        }
    }

    /// `true` when this build contains the backend.
    pub fn built(self) -> bool {
        match self {
            BackendChoice::Strided => true,
            BackendChoice::Candle => cfg!(feature = "candle"),
            BackendChoice::Burn => cfg!(feature = "burn"),
            BackendChoice::Dfdx => cfg!(feature = "dfdx"),
        }
    }

    /// The refusal of a backend this build lacks, with the command that builds it for
    /// `example`.
    pub fn not_built(self, example: &str) -> String {
        let feature = self.feature().unwrap_or("strided");
        format!(
            "--backend {feature}: this build does not include the {feature} backend; rebuild \
             with `--features {feature}`, e.g. `cargo run --release --features {feature} \
             --example {example} -- --backend {feature}`"
        )
    }
}

/// The directory of an output path (`.` for a bare file name).
pub fn directory(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// An output path as an absolute directory and a file name, to tell two paths to one file.
pub fn destination(path: &Path) -> std::result::Result<PathBuf, String> {
    let dir = directory(path)
        .canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(dir.join(path.file_name().unwrap_or_default()))
}

/// An output path must name a file (not a directory) in an existing directory.
pub fn check_output(option: &str, path: &Path) -> std::result::Result<(), String> {
    let shown = path.display();
    if path.file_name().is_none() {
        return Err(format!("{option} {shown}: not a file name"));
    }
    let dir = directory(path);
    if !dir.is_dir() {
        return Err(format!(
            "{option} {shown}: the directory {} does not exist",
            dir.display()
        ));
    }
    if path.is_dir() {
        return Err(format!("{option} {shown}: is a directory"));
    }
    Ok(())
}

/// An output written to a fresh temporary file beside its destination, renamed over it by
/// [`Pending::commit`]; dropped uncommitted, the temporary file is removed and the
/// destination is left as it was.
pub struct Pending {
    /// the temporary file to write
    pub tmp: PathBuf,
    dest: PathBuf,
    committed: bool,
}

impl Pending {
    /// Creates the temporary file (a new one, never an existing file) next to `dest`; it
    /// keeps `dest`'s extension, from which the PNG encoder picks the format.
    pub fn reserve(option: &str, dest: &Path) -> std::result::Result<Pending, String> {
        let name = dest.file_name().unwrap_or_default().to_string_lossy();
        let ext = dest
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        let dir = directory(dest);
        let mut attempt = 0u32;
        loop {
            let tmp = dir.join(format!(".{name}.{}-{attempt}.tmp{ext}", std::process::id()));
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(_) => {
                    return Ok(Pending {
                        tmp,
                        dest: dest.to_path_buf(),
                        committed: false,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1;
                }
                Err(e) => {
                    return Err(format!(
                        "{option} {}: cannot write in {}: {e}",
                        dest.display(),
                        dir.display()
                    ));
                }
            }
        }
    }

    /// Renames the temporary file over the destination.
    pub fn commit(mut self) -> std::result::Result<(), String> {
        std::fs::rename(&self.tmp, &self.dest)
            .map_err(|e| format!("{}: {e}", self.dest.display()))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
