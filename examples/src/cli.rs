//! What the command-line examples share: the backend choice and outputs that replace their
//! destination only when a run has succeeded.

#![allow(dead_code)] // each example uses a subset

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, PoisonError};

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
             with `--features {feature}`, e.g. `cargo run --release -p adrules-examples \
             --features {feature} --bin {example} -- --backend {feature}`"
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

/// An output path must name a file (not a directory) in an existing directory.
pub fn check_output(option: &str, path: &Path) -> std::result::Result<(), String> {
    let shown = path.display();
    // `Path` drops a trailing `/` from the file name: `p.png/` would pass as `p.png` here and
    // fail only when written, after the other output was replaced
    let trailing = path
        .as_os_str()
        .to_string_lossy()
        .ends_with(std::path::is_separator);
    if path.file_name().is_none() || trailing {
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

/// `path` ends in `.{ext}` (any case).
fn has_extension(path: &Path, ext: &str) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

/// Checks the CSV and PNG output paths of an example: files in existing directories, a
/// `.csv` table and a `.png` chart (hence two different files).
///
/// # Errors
/// A message naming the offending option.
pub fn check_outputs(csv: &Path, png: &Path) -> std::result::Result<(), String> {
    check_output("--csv", csv)?;
    check_output("--png", png)?;
    if !has_extension(csv, "csv") {
        return Err(format!(
            "--csv {}: the table is written as CSV, use a .csv path",
            csv.display()
        ));
    }
    if !has_extension(png, "png") {
        return Err(format!(
            "--png {}: the chart is written as PNG, use a .png path",
            png.display()
        ));
    }
    // different extensions: never the same file
    Ok(())
}

/// Where a run in which some points failed writes what it has instead of `dest`:
/// `ctmrg.csv` → `ctmrg.partial.csv`, beside it.
pub fn partial_path(dest: &Path) -> PathBuf {
    let stem = dest.file_stem().unwrap_or_default().to_string_lossy();
    let name = match dest.extension() {
        Some(ext) => format!("{stem}.partial.{}", ext.to_string_lossy()),
        None => format!("{stem}.partial"),
    };
    dest.with_file_name(name)
}

/// The estimated cost of a run (each example states its model).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// wall time, seconds
    pub seconds: f64,
    /// peak memory, bytes
    pub bytes: f64,
}

/// `seconds` as `1 h 02 min`, `3 min 20 s` or `4.2 s`.
fn duration(seconds: f64) -> String {
    if seconds >= 3600.0 {
        format!(
            "{} h {:02} min",
            (seconds / 3600.0) as u64,
            ((seconds % 3600.0) / 60.0) as u64
        )
    } else if seconds >= 60.0 {
        format!(
            "{} min {:02} s",
            (seconds / 60.0) as u64,
            (seconds % 60.0) as u64
        )
    } else {
        format!("{seconds:.1} s")
    }
}

impl Cost {
    /// `"4.2 s and 16 MB"`.
    pub fn describe(&self) -> String {
        let gb = self.bytes / 1e9;
        let memory = if gb >= 1.0 {
            format!("{gb:.1} GB")
        } else {
            format!("{:.0} MB", self.bytes / 1e6)
        };
        format!("{} and {memory}", duration(self.seconds))
    }
}

/// `points` temperatures evenly spaced from `t_min` to `t_max`, both ends exact.
pub fn temperature_grid(t_min: f64, t_max: f64, points: usize) -> Vec<f64> {
    let step = if points > 1 {
        (t_max - t_min) / (points - 1) as f64
    } else {
        0.0
    };
    (0..points)
        .map(|i| {
            if i + 1 == points {
                t_max
            } else {
                t_min + step * i as f64
            }
        })
        .collect()
}

/// The temporary files of this process that are neither renamed into place nor removed yet,
/// for the interrupt handler to remove.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes an interrupt (SIGINT, Ctrl-C; SIGTERM too on Unix) remove this process's temporary
/// output files and exit with status 130, leaving every earlier output as it was. The
/// examples' `main` calls it first; a second call does nothing.
pub fn remove_temporaries_on_interrupt() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            for tmp in live().drain(..) {
                let _ = std::fs::remove_file(tmp);
            }
            eprintln!("interrupted: no output written, earlier outputs left as they were");
            std::process::exit(130);
        });
        if let Err(e) = installed {
            eprintln!(
                "warning: no interrupt handler ({e}): an interrupt may leave temporary files"
            );
        }
    });
}

/// An output written to a fresh temporary file beside its destination, renamed over it by
/// [`Pending::commit`]; dropped uncommitted, the temporary file is removed and the
/// destination is left as it was.
///
/// [`Pending::reserve`] only checks, before a run, that the file can be written (it creates
/// and removes a probe); the temporary file itself exists only from [`Pending::create`] to
/// the commit, so a run killed during its computation leaves nothing behind.
pub struct Pending {
    option: String,
    dest: PathBuf,
    tmp: Option<PathBuf>,
}

/// A new file beside `dest` whose name no file has; it keeps `dest`'s extension, from which
/// the PNG encoder picks the format. The name is short (at most 32 characters of `dest`'s
/// stem), so that a destination whose name is near the file system's limit still has one.
fn new_temporary(option: &str, dest: &Path) -> std::result::Result<PathBuf, String> {
    let stem = dest.file_stem().unwrap_or_default().to_string_lossy();
    let name: String = stem.chars().take(32).collect();
    let ext = dest
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let dir = directory(dest);
    let mut attempt = 0u32;
    loop {
        let tmp = dir.join(format!(".{name}.{}-{attempt}.tmp{ext}", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(_) => return Ok(tmp),
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

impl Pending {
    /// Checks that a file can be created next to `dest` (a probe is created and removed at
    /// once); `dest` itself is not touched.
    ///
    /// # Errors
    /// A message naming `option` when the directory cannot be written.
    pub fn reserve(option: &str, dest: &Path) -> std::result::Result<Pending, String> {
        let probe = new_temporary(option, dest)?;
        let _ = std::fs::remove_file(probe);
        Ok(Pending {
            option: option.to_string(),
            dest: dest.to_path_buf(),
            tmp: None,
        })
    }

    /// Creates the temporary file and returns its path, to write the output to (the file
    /// is empty; writing it by path replaces that).
    ///
    /// # Errors
    /// A message naming the option when the file cannot be created.
    pub fn create(&mut self) -> std::result::Result<PathBuf, String> {
        if let Some(tmp) = &self.tmp {
            return Ok(tmp.clone());
        }
        let mut live = live();
        let tmp = new_temporary(&self.option, &self.dest)?;
        live.push(tmp.clone());
        self.tmp = Some(tmp.clone());
        Ok(tmp)
    }

    /// The file this output replaces.
    pub fn destination(&self) -> &Path {
        &self.dest
    }

    /// Renames the temporary file over the destination (see [`commit_all`] for several
    /// outputs that must be replaced together).
    ///
    /// # Errors
    /// A message when nothing was created or the rename fails (the temporary file is then
    /// removed).
    pub fn commit(mut self) -> std::result::Result<(), String> {
        let Some(tmp) = self.tmp.clone() else {
            return Err(format!("{}: nothing was written", self.dest.display()));
        };
        let mut live = live();
        std::fs::rename(&tmp, &self.dest).map_err(|e| format!("{}: {e}", self.dest.display()))?;
        live.retain(|p| p != &tmp);
        self.tmp = None;
        Ok(())
    }

    /// Links the temporary file in as the destination only when no file of that name exists,
    /// then removes the temporary file: a hard link fails on an existing name, atomically, so
    /// a file that appeared after the arguments were checked is never replaced.
    ///
    /// # Errors
    /// A message naming the option when nothing was created, the destination exists or the
    /// link fails (the temporary file is removed either way).
    pub fn commit_new(self) -> std::result::Result<(), String> {
        let Some(tmp) = &self.tmp else {
            return Err(format!("{}: nothing was written", self.dest.display()));
        };
        std::fs::hard_link(tmp, &self.dest).map_err(|e| {
            format!(
                "{} {}: not written ({e}); pass --overwrite to replace it",
                self.option,
                self.dest.display()
            )
        })
    }
}

/// Renames every output's temporary file over its destination, all or none: each existing
/// destination is first kept under a backup name (a hard link, or a copy), and when one
/// rename fails the destinations already replaced get their earlier contents back (or are
/// removed when they did not exist), so that a failure never leaves one output new and the
/// other old.
///
/// # Errors
/// A message naming the output that could not be replaced; every destination is then as
/// it was before the call.
pub fn commit_all(outputs: Vec<Pending>) -> std::result::Result<(), String> {
    // (destination, its backup if it existed)
    let mut done: Vec<(PathBuf, Option<PathBuf>)> = Vec::new();
    let restore = |done: &[(PathBuf, Option<PathBuf>)]| {
        for (dest, backup) in done.iter().rev() {
            match backup {
                Some(b) => {
                    let _ = std::fs::rename(b, dest);
                }
                None => {
                    let _ = std::fs::remove_file(dest);
                }
            }
        }
    };
    for out in outputs {
        let dest = out.dest.clone();
        let backup = if dest.is_file() {
            let b = match new_temporary(&out.option, &dest) {
                Ok(b) => b,
                Err(e) => {
                    restore(&done);
                    return Err(e);
                }
            };
            let _ = std::fs::remove_file(&b);
            let kept =
                std::fs::hard_link(&dest, &b).or_else(|_| std::fs::copy(&dest, &b).map(|_| ()));
            if let Err(e) = kept {
                restore(&done);
                return Err(format!("{}: cannot keep a backup: {e}", dest.display()));
            }
            Some(b)
        } else {
            None
        };
        if let Err(e) = out.commit() {
            if let Some(b) = &backup {
                let _ = std::fs::remove_file(b);
            }
            restore(&done);
            return Err(format!("{e}; no output was replaced"));
        }
        done.push((dest, backup));
    }
    for (_, backup) in done {
        if let Some(b) = backup {
            let _ = std::fs::remove_file(b);
        }
    }
    Ok(())
}

/// Writes the table `csv` and draws the chart (`draw` gets the path to draw to) into their
/// temporary files, then replaces both destinations together ([`commit_all`]) and says so on
/// standard output.
///
/// # Errors
/// A message naming the output that could not be written; the destinations are then as
/// they were.
pub fn write_outputs(
    mut csv_out: Pending,
    mut png_out: Pending,
    csv: &str,
    draw: impl FnOnce(&Path) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    let (csv_dest, png_dest) = (csv_out.dest.clone(), png_out.dest.clone());
    let csv_tmp = csv_out.create()?;
    std::fs::write(&csv_tmp, csv.as_bytes()).map_err(|e| format!("{}: {e}", csv_dest.display()))?;
    let png_tmp = png_out.create()?;
    draw(&png_tmp).map_err(|e| format!("{}: cannot draw the chart: {e}", png_dest.display()))?;
    commit_all(vec![csv_out, png_out])?;
    println!("wrote {}", csv_dest.display());
    println!("wrote {}", png_dest.display());
    Ok(())
}

/// Makes a closed or full standard output end the program with a one-line message instead
/// of a panic (`println!` panics when it cannot write): exit status 141 for a closed pipe
/// (`… | head`), 1 otherwise. The examples' `main` calls it first.
pub fn quiet_on_unwritable_stdout(program: &'static str) {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if let Some(why) = msg.strip_prefix("failed printing to stdout: ") {
            for tmp in live().drain(..) {
                let _ = std::fs::remove_file(tmp);
            }
            if why.contains("Broken pipe") {
                std::process::exit(141);
            }
            eprintln!("{program}: cannot write to standard output: {why}");
            std::process::exit(1);
        }
        default(info);
    }));
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let mut live = live();
            let _ = std::fs::remove_file(&tmp);
            live.retain(|p| p != &tmp);
        }
    }
}

/// One panel of an example's chart: measured points against an exact curve.
pub struct Panel<'a> {
    /// the panel's title
    pub caption: String,
    /// the y axis' description
    pub y_desc: &'a str,
    /// the measured `(T, y)` points
    pub points: Vec<(f64, f64)>,
    /// the exact curve `y(T)` (non-finite values are skipped)
    pub exact: &'a dyn Fn(f64) -> f64,
    /// the legends of the exact curve and of the points
    pub labels: (&'a str, String),
    /// an upper limit of the y range (a divergence at `T_c` would flatten the rest)
    pub y_cap: Option<f64>,
}

/// Draws `panel` on `area` over the temperatures `(x0, x1)`, with a dashed line at
/// Onsager's critical temperature `tc` when it is in range.
///
/// # Errors
/// The drawing backend's.
pub fn draw_panel(
    area: &plotters::drawing::DrawingArea<
        plotters::prelude::BitMapBackend<'_>,
        plotters::coord::Shift,
    >,
    (x0, x1): (f64, f64),
    tc: f64,
    panel: &Panel<'_>,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let exact: Vec<f64> = (0..=400)
        .map(|i| x0 + (x1 - x0) * i as f64 / 400.0)
        .collect();
    let curve: Vec<(f64, f64)> = exact
        .iter()
        .map(|&t| (t, (panel.exact)(t)))
        .filter(|(_, y)| y.is_finite())
        .collect();
    let (lo, hi) = panel
        .points
        .iter()
        .chain(&curve)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &(_, y)| {
            (a.min(y), b.max(y))
        });
    let hi = panel.y_cap.map_or(hi, |cap| hi.min(cap));
    let pad = 0.05 * (hi - lo).max(1e-9);
    let (y0, y1) = (lo - pad, hi + pad);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    chart
        .configure_mesh()
        .x_desc("T (J = k_B = 1)")
        .y_desc(panel.y_desc)
        .axis_desc_style(("sans-serif", 15))
        .draw()?;
    if (x0..=x1).contains(&tc) {
        let marker = RGBColor(40, 90, 200);
        chart
            .draw_series(DashedLineSeries::new(
                [(tc, y0), (tc, y1)],
                6,
                4,
                marker.stroke_width(1),
            ))?
            .label(format!("T_c = 2/ln(1+√2) ≈ {tc:.3}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], marker));
    }
    chart
        .draw_series(LineSeries::new(curve, &BLACK))?
        .label(panel.labels.0)
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], BLACK));
    chart
        .draw_series(
            panel
                .points
                .iter()
                .map(|&p| Circle::new(p, 3, RED.filled())),
        )?
        .label(&panel.labels.1)
        .legend(|(x, y)| Circle::new((x + 7, y), 3, RED.filled()));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
