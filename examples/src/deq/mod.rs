//! The `deq` example: a deep-equilibrium classifier trained on concentric rings, on burn or
//! candle (features `burn`, `candle`), with the layers of `adrules::burn::nn` and
//! `adrules::candle::nn`.
//!
//! **Model.** `logits = einsum("bh,hc->bc", z*, V)` with `z*` the fixed point of
//! `z = tanh(z·Wᵀ + x·Uᵀ + b)` for each 2-D point `x` (the `Deq` layer of each adapter,
//! `adrules::burn::nn::Deq` and `adrules::candle::nn::Deq`, `h` features), trained by the engine's own SGD (burn-optim's `Sgd`, candle-nn's `SGD`: the
//! same update `θ ← θ − lr·∇θ`) on the mean cross-entropy, in mini-batches taken in the data
//! set's order; after each step `W` is rescaled to `‖W‖_F ≤ 0.9` when larger (the layers'
//! `clamp_contraction`), so that the map stays a contraction. The gradient of `z*` is the implicit one (no iteration recorded); the forward
//! pass iterates to `max |z_{k+1} − z_k| ≤ tolerance`.
//!
//! **Data.** [`rings`]: `classes` concentric rings of radius `0.3 + 0.35·c` (class `c`),
//! angles uniform, radial noise of standard deviation 0.05, from a seeded generator
//! (`adrules_testing::Rng`), so every run and both engines see the same points.
//!
//! **Same curve on both engines.** Both adapters draw their initial parameters from the
//! core's seeded generator (`adrules_core::layers::uniform`, see the adapters' `nn` docs) and see the same batches in the same order: the loss curves agree to f32 rounding
//! (`--engine both` prints the largest difference).
//!
//! **Memory.** [`MemoryRow`]: the peak heap of one gradient through the implicit node and
//! through the unrolled iteration (`forward_unrolled`) with as many steps as the solver took,
//! for a list of tolerances (more iterations as the tolerance shrinks): the implicit peak
//! stays flat, the unrolled one grows with the iterations.

#[cfg(feature = "burn")]
pub mod on_burn;
#[cfg(feature = "candle")]
pub mod on_candle;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Instant;

use adrules::Error;
use adrules_testing::Rng;
use clap::{Parser, ValueEnum};

use crate::HEAP;
use crate::cli::{Pending, check_output};

/// A labelled 2-D data set.
#[derive(Clone, Debug, PartialEq)]
pub struct Rings {
    /// the points, row-major `n×2`
    pub x: Vec<f64>,
    /// the class of every point, in `0..classes`
    pub labels: Vec<usize>,
    /// the number of classes
    pub classes: usize,
}

impl Rings {
    /// The number of points.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// `true` without points.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The points `range` (row-major `len×2`) and their one-hot labels (`len×classes`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`"batch"`) for a range outside the points or a label
    /// outside `0..classes`.
    pub fn batch(&self, range: Range<usize>) -> adrules::Result<(Vec<f64>, Vec<f64>)> {
        let outside = || {
            let why = format!("points {range:?} of {}", self.len());
            Error::invalid("batch", why)
        };
        let labels = self.labels.get(range.clone()).ok_or_else(outside)?;
        let x = self
            .x
            .get(2 * range.start..2 * range.end)
            .ok_or_else(outside)?;
        let mut one_hot = vec![0.0; labels.len() * self.classes];
        for (i, &c) in labels.iter().enumerate() {
            if c >= self.classes {
                let why = format!(
                    "label {c} of point {} is not below {}",
                    range.start + i,
                    self.classes
                );
                return Err(Error::invalid("batch", why));
            }
            one_hot[i * self.classes + c] = 1.0;
        }
        Ok((x.to_vec(), one_hot))
    }
}

/// `classes` concentric rings of `per_class` points each, interleaved (point `i` is of class
/// `i mod classes`): radius `0.3 + 0.35·c + 0.05·N(0, 1)`, angle uniform in `[0, 2π)`.
pub fn rings(classes: usize, per_class: usize, seed: u64) -> Rings {
    let mut rng = Rng::seed(seed);
    let n = classes * per_class;
    let (mut x, mut labels) = (Vec::with_capacity(2 * n), Vec::with_capacity(n));
    for i in 0..n {
        let c = i % classes;
        let r = 0.3 + 0.35 * c as f64 + 0.05 * rng.normal();
        let angle = std::f64::consts::TAU * rng.below(1 << 20) as f64 / (1 << 20) as f64;
        x.extend([r * angle.cos(), r * angle.sin()]);
        labels.push(c);
    }
    Rings { x, labels, classes }
}

/// The fraction of rows of `logits` (`n×classes`, row-major) whose largest entry is at the
/// label (the first of equal largest entries).
///
/// # Errors
/// [`Error::InvalidArgument`] (`"logits"`) for no labels, no classes, or `logits` not
/// `labels.len()×classes`.
pub fn accuracy(logits: &[f64], labels: &[usize], classes: usize) -> adrules::Result<f64> {
    if labels.is_empty() || classes == 0 || labels.len().checked_mul(classes) != Some(logits.len())
    {
        let why = format!(
            "{} values for {} labels of {classes} classes",
            logits.len(),
            labels.len()
        );
        return Err(Error::invalid("logits", why));
    }
    let right = logits
        .chunks(classes)
        .zip(labels)
        .filter(|&(row, &c)| {
            let best = row
                .iter()
                .enumerate()
                .fold(0, |b, (j, v)| if *v > row[b] { j } else { b });
            best == c
        })
        .count();
    Ok(right as f64 / labels.len() as f64)
}

/// The sizes and the schedule of a training run.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// `h`, the features of the fixed point
    pub hidden: usize,
    /// passes over the data
    pub epochs: usize,
    /// points per SGD step
    pub batch: usize,
    /// SGD's learning rate
    pub lr: f64,
    /// the seed of the parameters
    pub seed: u64,
    /// f64 parameters and data (else f32)
    pub f64: bool,
    /// the initial `‖W‖_F`
    pub contraction: f64,
    /// the fixed-point iteration's tolerance
    pub tolerance: f64,
    /// the fixed-point iteration's limit
    pub max_iterations: usize,
    /// after each SGD step `W` is rescaled to this Frobenius norm when larger (the layers'
    /// `clamp_contraction`), which keeps the map a contraction
    pub max_contraction: f64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            hidden: 16,
            epochs: 40,
            batch: 32,
            lr: 0.4,
            seed: 1,
            f64: false,
            contraction: 0.5,
            tolerance: 1e-5,
            max_iterations: 200,
            max_contraction: 0.9,
        }
    }
}

/// One point of a training curve, on the whole data set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epoch {
    /// the mean cross-entropy
    pub loss: f64,
    /// the fraction classified right
    pub accuracy: f64,
    /// the fixed-point iterations of the evaluation's solve
    pub iterations: usize,
    /// the seconds the epoch's SGD steps took (0 for the initial point)
    pub seconds: f64,
}

/// The peak heap above what was allocated before, while `f` runs.
pub fn peak_bytes<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = HEAP.current_usage();
    HEAP.reset_peak_usage();
    let out = f();
    (out, HEAP.peak_usage().saturating_sub(base))
}

/// A gradient's peak heap through the implicit node and through the unrolled iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryRow {
    /// the solver's tolerance
    pub tolerance: f64,
    /// the iterations the solver took (and the unrolled gradient ran)
    pub iterations: usize,
    /// the implicit gradient's peak heap, bytes
    pub implicit: usize,
    /// the unrolled gradient's peak heap, bytes
    pub unrolled: usize,
}

/// The engines this example runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// burn on Flex with autodiff (build with `--features burn`)
    Burn,
    /// candle on the CPU (build with `--features candle`)
    Candle,
    /// both, and the largest difference of their loss curves
    Both,
}

/// Trains on `engine` (not [`Engine::Both`]): the curve, its first point before training,
/// each point also given to `progress` (epoch, point) as soon as it is measured.
///
/// # Errors
/// The engine's feature missing from this build, or the layers' typed errors (a fixed point
/// that did not converge, …) as messages.
pub fn train(
    engine: Engine,
    setup: &Setup,
    data: &Rings,
    progress: &mut dyn FnMut(usize, &Epoch),
) -> Result<Vec<Epoch>, String> {
    let _ = (setup, data, &progress);
    match engine {
        #[cfg(feature = "burn")]
        Engine::Burn => on_burn::train(setup, data, progress).map_err(|e| format!("burn: {e}")),
        #[cfg(feature = "candle")]
        Engine::Candle => on_candle::train(setup, data, progress)
            .map_err(|e| format!("candle: {}", adrules::candle::from_candle(e))),
        other => Err(not_built(other)),
    }
}

/// [`MemoryRow`]s on `engine` for these tolerances (f64, the whole data set as one batch).
///
/// # Errors
/// As [`train`].
pub fn memory(
    engine: Engine,
    setup: &Setup,
    data: &Rings,
    tolerances: &[f64],
) -> Result<Vec<MemoryRow>, String> {
    let _ = (setup, data, tolerances);
    match engine {
        #[cfg(feature = "burn")]
        Engine::Burn => on_burn::memory(setup, data, tolerances).map_err(|e| format!("burn: {e}")),
        #[cfg(feature = "candle")]
        Engine::Candle => on_candle::memory(setup, data, tolerances)
            .map_err(|e| format!("candle: {}", adrules::candle::from_candle(e))),
        other => Err(not_built(other)),
    }
}

/// The refusal of an engine this build lacks, naming the feature to rebuild with.
fn not_built(engine: Engine) -> String {
    let (name, feature) = match engine {
        Engine::Burn => ("burn", "burn"),
        Engine::Candle => ("candle", "candle"),
        Engine::Both => ("both", "burn,candle"),
    };
    format!(
        "--engine {name}: this build does not include it; rebuild with `--features {feature}`, \
         e.g. `cargo run --release -p adrules-examples --features {feature} --bin deq -- \
         --engine {name}`"
    )
}

/// The largest relative difference of two loss curves.
pub fn curve_difference(a: &[Epoch], b: &[Epoch]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x.loss - y.loss).abs() / y.loss.abs().max(1e-30))
        .fold(0.0, f64::max)
}

/// The loss curves (one line per engine) as a PNG at `path`.
///
/// # Errors
/// The drawing backend's, as a message.
pub fn draw(path: &Path, curves: &[(String, Vec<Epoch>)]) -> Result<(), String> {
    use plotters::prelude::*;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let epochs = curves.iter().map(|c| c.1.len()).max().unwrap_or(1).max(2) - 1;
        let losses = curves.iter().flat_map(|c| c.1.iter().map(|e| e.loss));
        let top = losses.fold(0.0f64, f64::max) * 1.05;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "DEQ classifier on rings: mean cross-entropy",
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..epochs as f64, 0.0..top.max(1e-9))?;
        chart
            .configure_mesh()
            .x_desc("epoch")
            .y_desc("loss")
            .draw()?;
        let colors = [RED, BLUE];
        for (k, (name, curve)) in curves.iter().enumerate() {
            let color = colors[k % 2];
            let points = curve.iter().enumerate().map(|(i, e)| (i as f64, e.loss));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| e.to_string())
}

/// A deep-equilibrium classifier on concentric rings, trained on burn or candle through the
/// implicit gradient of its fixed point; loss and accuracy per epoch, an optional loss plot
/// (--plot, a .png path that must not exist unless --overwrite), and with --memory the peak
/// heap of the implicit against the unrolled gradient.
#[derive(Parser, Debug)]
#[command(
    name = "deq",
    version,
    after_help = "Examples:\n  cargo run --release -p adrules-examples --features burn,candle \
                  --bin deq -- --engine both --plot deq.png\n  cargo run --release -p \
                  adrules-examples --features candle --bin deq -- --engine candle --memory"
)]
pub struct Args {
    /// the engine: burn, candle, or both (their curves compared); default both when this
    /// build has both, else the one it has
    #[arg(long, value_enum)]
    pub engine: Option<Engine>,
    /// passes over the data
    #[arg(long, default_value_t = 40)]
    pub epochs: usize,
    /// features of the fixed point
    #[arg(long, default_value_t = 16)]
    pub hidden: usize,
    /// points per class (3 classes)
    #[arg(long, default_value_t = 128)]
    pub points: usize,
    /// points per SGD step
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// SGD's learning rate
    #[arg(long, default_value_t = 0.4)]
    pub lr: f64,
    /// the seed of the data and the parameters
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// train in f64 (default f32)
    #[arg(long)]
    pub f64: bool,
    /// the fixed-point iteration's tolerance (max |z_{k+1} − z_k|)
    #[arg(long, default_value_t = 1e-5)]
    pub tolerance: f64,
    /// after each SGD step, W is rescaled to this Frobenius norm when larger, in (0, 1): the
    /// map then stays a contraction and the fixed point exists
    #[arg(long, default_value_t = 0.9)]
    pub max_contraction: f64,
    /// write the loss curves to this PNG file (refused if it exists, unless --overwrite)
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// allow --plot to replace an existing file
    #[arg(long)]
    pub overwrite: bool,
    /// also measure the peak heap of the implicit and the unrolled gradient, for these
    /// solver tolerances (f64, initial ‖W‖_F = 0.9, the whole data set as one batch)
    #[arg(long, num_args = 0.., value_delimiter = ',',
          default_missing_value = "1e-2,1e-4,1e-6,1e-8,1e-10,1e-12,1e-14")]
    pub memory: Option<Vec<f64>>,
}

/// Checks the arguments before anything runs.
fn check(args: &Args) -> Result<Setup, String> {
    if args.epochs == 0 || args.hidden == 0 || args.points == 0 || args.batch == 0 {
        return Err("--epochs, --hidden, --points and --batch must be positive".into());
    }
    if args.hidden > 4096 || args.points > 1_000_000 {
        return Err("--hidden is at most 4096 and --points at most 1 000 000".into());
    }
    if !(args.max_contraction > 0.0 && args.max_contraction < 1.0) {
        let m = args.max_contraction;
        return Err(format!("--max-contraction {m}: a norm in (0, 1)"));
    }
    if !(args.tolerance > 0.0 && args.tolerance.is_finite()) {
        return Err(format!(
            "--tolerance {}: a positive tolerance",
            args.tolerance
        ));
    }
    if !(args.lr > 0.0 && args.lr.is_finite()) {
        return Err(format!("--lr {}: a positive learning rate", args.lr));
    }
    if let Some(path) = &args.plot {
        check_output("--plot", path)?;
        let png = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("png"));
        if !png {
            return Err(format!(
                "--plot {}: the plot is a PNG, use a .png path",
                path.display()
            ));
        }
        if path.exists() && !args.overwrite {
            return Err(format!(
                "--plot {}: the file exists; pass --overwrite to replace it, or choose another path",
                path.display()
            ));
        }
    }
    if let Some(t) = args
        .memory
        .iter()
        .flatten()
        .find(|t| !(**t > 0.0 && t.is_finite()))
    {
        return Err(format!("--memory {t}: tolerances must be positive"));
    }
    Ok(Setup {
        hidden: args.hidden,
        epochs: args.epochs,
        batch: args.batch,
        lr: args.lr,
        seed: args.seed,
        f64: args.f64,
        tolerance: args.tolerance,
        max_contraction: args.max_contraction,
        ..Setup::default()
    })
}

/// The program: see [`Args`].
pub fn main() {
    crate::cli::remove_temporaries_on_interrupt();
    crate::cli::quiet_on_unwritable_stdout("deq");
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("deq: {e}");
        std::process::exit(1);
    }
}

/// Runs the example with `args`.
///
/// # Errors
/// A message for a bad argument (before anything runs), an engine this build lacks, a
/// failed training or an output that could not be written.
pub fn run(args: &Args) -> Result<(), String> {
    let setup = check(args)?;
    let built = |e: Engine| match e {
        Engine::Burn => cfg!(feature = "burn"),
        Engine::Candle => cfg!(feature = "candle"),
        Engine::Both => cfg!(all(feature = "burn", feature = "candle")),
    };
    let engine = args
        .engine
        .unwrap_or(if cfg!(feature = "candle") && !cfg!(feature = "burn") {
            Engine::Candle
        } else if cfg!(feature = "burn") && !cfg!(feature = "candle") {
            Engine::Burn
        } else {
            Engine::Both
        });
    if !built(engine) {
        return Err(not_built(engine));
    }
    let engines = match engine {
        Engine::Both => vec![Engine::Burn, Engine::Candle],
        one => vec![one],
    };
    let plot = match &args.plot {
        Some(p) => Some(Pending::reserve("--plot", p)?),
        None => None,
    };
    let data = rings(3, args.points, args.seed);
    let precision = if setup.f64 { "f64" } else { "f32" };
    println!(
        "DEQ classifier: {} points on 3 rings, h = {}, batch {}, SGD lr {}, {precision}, \
         tolerance {:e}",
        data.len(),
        setup.hidden,
        setup.batch,
        setup.lr,
        setup.tolerance
    );
    let mut curves = Vec::new();
    for &engine in &engines {
        let name = format!("{engine:?}").to_lowercase();
        println!(
            "{name}: {:>5} {:>10} {:>9} {:>6} {:>9}",
            "epoch", "loss", "accuracy", "iter", "time (s)"
        );
        let mut show = |i: usize, e: &Epoch| {
            println!(
                "{name}: {i:>5} {:>10.6} {:>8.1}% {:>6} {:>9.3}",
                e.loss,
                100.0 * e.accuracy,
                e.iterations,
                e.seconds
            );
        };
        let curve = train(engine, &setup, &data, &mut show)?;
        let trained = &curve[1..];
        let mean = trained.iter().map(|e| e.seconds).sum::<f64>() / trained.len() as f64;
        println!("{name}: {mean:.3} s per epoch");
        curves.push((name, curve));
    }
    if let [(_, a), (_, b)] = &curves[..] {
        println!(
            "largest relative difference of the burn and candle loss curves: {:.2e}",
            curve_difference(a, b)
        );
    }
    if let Some(tolerances) = &args.memory {
        for (&engine, (name, _)) in engines.iter().zip(&curves) {
            let mem = Setup {
                f64: true,
                contraction: 0.9,
                max_iterations: 10_000,
                ..setup.clone()
            };
            let rows = memory(engine, &mem, &data, tolerances)?;
            println!(
                "{name}: peak heap of one gradient ({} points, f64, ‖W‖_F = 0.9)",
                data.len()
            );
            println!(
                "{name}: {:>9} {:>6} {:>14} {:>14}",
                "tolerance", "iter", "implicit (MB)", "unrolled (MB)"
            );
            for r in rows {
                println!(
                    "{name}: {:>9.0e} {:>6} {:>14.2} {:>14.2}",
                    r.tolerance,
                    r.iterations,
                    r.implicit as f64 / 1e6,
                    r.unrolled as f64 / 1e6
                );
            }
        }
    }
    if let Some(mut out) = plot {
        let started = Instant::now();
        let tmp = out.create()?;
        draw(&tmp, &curves)?;
        let dest = out.destination().to_path_buf();
        if args.overwrite {
            out.commit()?;
        } else {
            out.commit_new()?;
        }
        println!(
            "wrote {} ({:.2} s)",
            dest.display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
