//! The 2D Ising model on an infinite strip, differentiated through a tensor network and an
//! implicit eigenvector, checked against Onsager's exact solution.
//!
//! ```text
//! cargo run --release -p adrules-examples --bin ising2d -- --help
//! ```
//!
//! For each temperature: the free energy from the leading eigenvalue of the row-to-row
//! transfer matrix (applied as a periodic MPO with our network plans), the bond energies by
//! reverse mode through the network and the implicit eigenvector, the horizontal correlation
//! read off the eigenvector (which must agree with the bond energy), and the specific heat
//! from the β-derivative of the energy's expectation values, `dv*/dβ` coming from the
//! implicit pushforward, and a second time as `(β²/W)·∂²ln λ/∂β²` by second order (the
//! network and implicit Hessian-vector products), with the two values' agreement printed.
//! See [`crate::ising`] for the model and the formulas.
//!
//! Every argument is checked before anything is written, and the CSV and the chart are
//! written to temporary files in their destination directories, renamed into place only when
//! the whole run has succeeded: a failing run leaves existing files as they were.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cli::{
    BackendChoice, Cost, Panel, Pending, check_outputs, draw_panel, temperature_grid,
};
use crate::ising::{self, Point, Real, Strip, Timings};
use crate::onsager;
use adrules::{Backend, DType, Result};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

/// The arithmetic precision of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Precision {
    /// double precision (tolerance down to 2.2e-16)
    F64,
    /// single precision (tolerance down to 1.2e-7; low temperatures overflow sooner)
    F32,
}

impl Precision {
    fn dtype(self) -> DType {
        match self {
            Precision::F64 => DType::F64,
            Precision::F32 => DType::F32,
        }
    }

    /// Machine epsilon: no relative residual below it can be reached.
    fn epsilon(self) -> f64 {
        match self {
            Precision::F64 => f64::EPSILON,
            Precision::F32 => f32::EPSILON as f64,
        }
    }

    /// `ln` of the largest finite value.
    fn ln_max(self) -> f64 {
        match self {
            Precision::F64 => f64::MAX.ln(),
            Precision::F32 => (f32::MAX as f64).ln(),
        }
    }

    /// The power iteration's default tolerance.
    fn default_tol(self) -> f64 {
        match self {
            Precision::F64 => 1e-13,
            Precision::F32 => 1e-6,
        }
    }
}

/// candle's backend on the chosen device.
#[cfg(feature = "candle")]
fn candle_backend(
    device: DeviceChoice,
) -> std::result::Result<adrules::candle::CandleBackend, String> {
    match device {
        DeviceChoice::Cuda => adrules::candle::candle_core::Device::new_cuda(0)
            .map(adrules::candle::CandleBackend::new)
            .map_err(|e| format!("--device cuda: {e}")),
        _ => Ok(adrules::candle::CandleBackend::cpu()),
    }
}

/// The most temperatures one run computes.
pub const MAX_POINTS: usize = 10_000;

/// The 2D Ising model (J = k_B = 1) on an infinite strip of periodic width W, differentiated
/// through a tensor network and an implicit eigenvector, against Onsager's exact solution.
///
/// For each of --points temperatures T, evenly spaced from --t-min to --t-max, per site: the
/// free energy f = −ln λ/(βW) from the leading eigenvalue λ of the row-to-row transfer matrix
/// (power iteration on a periodic matrix-product operator, β = 1/T); the internal energy
/// u = e_h + e_v by reverse mode through the tensor network and the implicit eigenvector;
/// the horizontal correlation read off the eigenvector (it must equal −e_h); and the specific
/// heat c = −β² du/dβ by forward mode through the implicit pushforward, then a second time as
/// c = (β²/W)·∂²ln λ/∂β² by second order (Hessian-vector products of the network and of the
/// implicit eigenvector), with the two values' agreement printed. The second-order pass is
/// about half of the run time.
///
/// Outputs: a table on standard output beside Onsager's exact infinite-lattice u and c (with
/// the time spent in power iterations, network rules and implicit solves); the same table as
/// CSV (--csv); a chart of u(T) and c(T) with the exact curves and the critical temperature
/// T_c = 2/ln(1+√2) ≈ 2.269 (--png). Every argument is checked before anything is written
/// (the output paths' extensions .csv and .png included, and the estimated time and memory
/// of the run), and both files are replaced only when the whole run succeeds; an interrupt
/// (Ctrl-C) leaves no file behind.
#[derive(Parser, Debug)]
#[command(
    name = "ising2d",
    version,
    after_help = "Examples:\n  cargo run --release -p adrules-examples --bin ising2d\n  cargo run \
                  --release -p adrules-examples --bin ising2d -- --width 12 --t-min 2 --t-max \
                  2.6 --points 61\n  cargo run --release -p adrules-examples --features candle \
                  --bin ising2d -- --backend candle"
)]
pub struct Args {
    /// strip width W (periodic), 3 to 20; the transfer matrix acts on 2^W states, and time
    /// and memory grow as W·2^W: about 16 µs·W·2^W per temperature and 672 B·W·2^W of memory
    /// (W = 16: 17 s and 0.7 GB; W = 20: 6 min and 14 GB); a run estimated above 10 minutes
    /// or 4 GiB is refused unless --force
    #[arg(long, default_value_t = 10)]
    pub width: usize,
    /// lowest temperature (in units of J/k_B)
    #[arg(long, default_value_t = 1.0)]
    pub t_min: f64,
    /// highest temperature (in units of J/k_B)
    #[arg(long, default_value_t = 4.0)]
    pub t_max: f64,
    /// number of temperatures (evenly spaced, both ends included), 1 (with t-min = t-max) to
    /// 10000
    #[arg(long, default_value_t = 40)]
    pub points: usize,
    /// arithmetic precision
    #[arg(long, value_enum, default_value_t = Precision::F64)]
    pub precision: Precision,
    /// relative residual ‖Tv − λv‖/λ at which the power iteration stops, at least the
    /// precision's machine epsilon and at most 1e-3 [default: 1e-13 in f64, 1e-6 in f32]
    #[arg(long)]
    pub tol: Option<f64>,
    /// where to write the table as CSV
    #[arg(long, default_value = "ising2d.csv")]
    pub csv: PathBuf,
    /// where to draw u(T) and c(T) with the exact curves (a .png path)
    #[arg(long, default_value = "ising2d.png")]
    pub png: PathBuf,
    /// the engine the rules run on
    #[arg(long, value_enum, default_value_t = BackendChoice::Strided)]
    pub backend: BackendChoice,
    /// the device of the engine's tensors: `cpu`, or for candle `cuda` (build with
    /// `--features candle-cuda`), for burn `cuda` (`--features burn-cuda`) or `wgpu`
    /// (`--features burn-wgpu`, with `--precision f32`: WGSL has no f64)
    #[arg(long, value_enum, default_value_t = DeviceChoice::Cpu)]
    pub device: DeviceChoice,
    /// run even when the estimated time or memory exceeds the limits (10 minutes, 4 GiB)
    #[arg(long)]
    pub force: bool,
}

/// Seconds per temperature per `W·2^W`.
const SECONDS_PER_STATE: f64 = 1.6e-5;
/// Bytes of peak memory per `W·2^W`, above [`BASE_BYTES`].
const BYTES_PER_STATE: f64 = 672.0;
/// The program's memory without the strip (plans, tables, the chart).
const BASE_BYTES: f64 = 10e6;
/// The largest estimated run time accepted without `--force`, seconds.
pub const MAX_SECONDS: f64 = 600.0;
/// The largest estimated peak memory accepted without `--force`, bytes.
pub const MAX_BYTES: f64 = 4.0 * (1u64 << 30) as f64;

/// The estimated cost of `points` temperatures at strip width `width`: an upper estimate
/// from single-temperature runs of the strided backend in f64 near T_c (cold start) on the
/// development machine (2 vCPUs of an AMD Zen 5, 2026-12-03: W = 12, 14, 16 took 1.3, 2.9,
/// 15.8 s and 41, 164, 702 MB peak RSS); sweeps are cheaper per temperature (each
/// eigenvector starts the next power iteration: the default 40 temperatures at W = 10 took
/// 3.3 s, 6.6 s estimated).
pub fn estimate(width: usize, points: usize) -> Cost {
    let states = width as f64 * 2f64.powi(width as i32);
    Cost {
        seconds: SECONDS_PER_STATE * states * points as f64,
        bytes: BASE_BYTES + BYTES_PER_STATE * states,
    }
}

/// Where the engine's tensors live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DeviceChoice {
    /// the host (strided, candle's CPU device, burn's Flex, dfdx)
    Cpu,
    /// the first CUDA GPU (candle, burn)
    Cuda,
    /// burn's wgpu backend on the default adapter
    Wgpu,
}

impl DeviceChoice {
    /// The facade feature that builds `backend` on this device, when one is needed.
    fn feature(self, backend: BackendChoice) -> Option<&'static str> {
        match (self, backend) {
            (DeviceChoice::Cpu, _) => None,
            (DeviceChoice::Cuda, BackendChoice::Candle) => Some("candle-cuda"),
            (DeviceChoice::Cuda, BackendChoice::Burn) => Some("burn-cuda"),
            (DeviceChoice::Wgpu, BackendChoice::Burn) => Some("burn-wgpu"),
            _ => Some(""),
        }
    }

    /// `true` when this build can run `backend` on this device.
    fn built(self, backend: BackendChoice) -> bool {
        match (self, backend) {
            (DeviceChoice::Cpu, _) => true,
            (DeviceChoice::Cuda, BackendChoice::Candle) => cfg!(feature = "candle-cuda"),
            (DeviceChoice::Cuda, BackendChoice::Burn) => cfg!(feature = "burn-cuda"),
            (DeviceChoice::Wgpu, BackendChoice::Burn) => cfg!(feature = "burn-wgpu"),
            _ => false,
        }
    }
}

/// A run's checked arguments.
#[derive(Debug)]
pub struct Plan {
    /// the temperatures, lowest first
    pub temperatures: Vec<f64>,
    /// the power iteration's tolerance
    pub tol: f64,
}

/// Checks every argument, touching no file: the sweep, the backend and both output paths.
///
/// # Errors
/// A message naming the offending option and what it accepts.
pub fn check(args: &Args) -> std::result::Result<Plan, String> {
    if !args.backend.built() {
        return Err(args.backend.not_built("ising2d"));
    }
    match args.device.feature(args.backend) {
        Some("") => {
            return Err(format!(
                "--device {:?}: the {:?} backend has no such device (candle: cpu, cuda; burn: \
                 cpu, cuda, wgpu; strided and dfdx: cpu)",
                args.device, args.backend
            ));
        }
        Some(feature) if !args.device.built(args.backend) => {
            return Err(format!(
                "--device {:?} with --backend {:?}: this build does not include it; rebuild \
                 with `--features {feature}`",
                args.device, args.backend
            ));
        }
        _ => {}
    }
    if args.device == DeviceChoice::Wgpu && args.precision == Precision::F64 {
        return Err("--device wgpu needs --precision f32: WGSL has no f64".into());
    }
    // dfdx tensors have rank ≤ 6, and the strip's networks have rank W + 2.
    let widest = match args.backend {
        BackendChoice::Dfdx => 4,
        _ => *ising::WIDTHS.end(),
    };
    let widths = *ising::WIDTHS.start()..=widest;
    if !widths.contains(&args.width) {
        let why = if args.width > *ising::WIDTHS.end() {
            " (the transfer matrix acts on 2^W states)"
        } else if args.width > *widths.end() {
            " on this backend (its tensors have rank ≤ 6)"
        } else {
            ""
        };
        return Err(format!(
            "--width {}: the strip width must be between {} and {}{why}",
            args.width,
            widths.start(),
            widths.end()
        ));
    }
    if args.points <= MAX_POINTS {
        let cost = estimate(args.width, args.points);
        if !args.force && (cost.seconds > MAX_SECONDS || cost.bytes > MAX_BYTES) {
            return Err(format!(
                "--width {} --points {}: estimated {} of memory, above the limits of 10 min and \
                 4 GiB (time and memory grow as W·2^W, see --help); use a smaller --width or \
                 fewer --points, or pass --force to run anyway",
                args.width,
                args.points,
                cost.describe()
            ));
        }
    }
    let (t_min, t_max) = (args.t_min, args.t_max);
    if !(t_min > 0.0 && t_max >= t_min && t_max.is_finite()) {
        return Err(format!(
            "--t-min {t_min}, --t-max {t_max}: temperatures must be finite with 0 < t-min ≤ \
             t-max"
        ));
    }
    // λ ≥ exp(2W/T) (the weight of two aligned rows), and the solves square it (‖T v‖² in
    // the power iteration, the implicit solves in the chosen precision): beyond the largest
    // finite value the run can only fail, after the sweep of every warmer temperature.
    let exponent = 4.0 * args.width as f64 / t_min;
    let limit = args.precision.ln_max() + 1.0;
    if exponent > limit {
        let coldest = 4.0 * args.width as f64 / limit;
        let remedy = match args.precision {
            Precision::F64 => String::new(),
            Precision::F32 => " or use --precision f64".into(),
        };
        return Err(format!(
            "--t-min {t_min}: too cold for {dtype} at width {}: the leading eigenvalue \
             λ ≥ exp(2W/T) = e^{:.0} and the solves need λ² = e^{exponent:.0} below the \
             largest {dtype} (e^{:.0}); raise --t-min above {coldest:.4}{remedy}",
            args.width,
            exponent / 2.0,
            args.precision.ln_max(),
            dtype = args.precision.dtype(),
        ));
    }
    if args.points == 0 || args.points > MAX_POINTS || (args.points == 1 && t_min != t_max) {
        return Err(format!(
            "--points {}: the number of temperatures must be between 2 and {MAX_POINTS} (or 1 \
             with t-min = t-max)",
            args.points
        ));
    }
    let tol = args.tol.unwrap_or(args.precision.default_tol());
    let eps = args.precision.epsilon();
    if !(tol >= eps && tol <= ising::MAX_TOL) {
        let hint = if args.precision == Precision::F32 && tol > 0.0 && tol < eps {
            " (use --precision f64 for a tighter tolerance)"
        } else {
            ""
        };
        return Err(format!(
            "--tol {tol:e}: the power iteration's relative residual must be between {eps:.1e} \
             (machine epsilon of {}) and {:e}{hint}",
            args.precision.dtype(),
            ising::MAX_TOL
        ));
    }
    check_outputs(&args.csv, &args.png)?;
    let temperatures = temperature_grid(t_min, t_max, args.points);
    Ok(Plan { temperatures, tol })
}

/// The sweep on `be` in the precision asked for.
fn sweep_in<B>(be: B, args: &Args, plan: &Plan) -> Result<(Vec<Point>, Timings)>
where
    B: Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync,
{
    match args.precision {
        Precision::F64 => sweep::<f64, _>(be, args, plan),
        Precision::F32 => sweep::<f32, _>(be, args, plan),
    }
}

fn sweep<T: Real, B>(be: B, args: &Args, plan: &Plan) -> Result<(Vec<Point>, Timings)>
where
    B: Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync,
{
    let temps = &plan.temperatures;
    let strip = Strip::new::<T>(be, args.width)?;
    let bar = ProgressBar::new(temps.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} T = {msg} [{elapsed_precise}]")
            .expect("valid template"),
    );
    let mut timings = Timings::default();
    let mut start = strip.start::<T>()?;
    let mut points = Vec::with_capacity(temps.len());
    // From high to low temperature: each eigenvector starts the next power iteration.
    for &t in temps.iter().rev() {
        bar.set_message(format!("{t:.4}"));
        let (p, v) = strip.point::<T>(t, &start, plan.tol, &mut timings)?;
        // Near the coldest temperature a precision can hold, rounding may leave a NaN or an
        // infinity in a derivative: refuse it rather than tabulate it.
        for (name, x) in [("f", p.f), ("u", p.u), ("g_h", p.g_h), ("c", p.c)] {
            if !x.is_finite() {
                return Err(adrules::Error::invalid(
                    "temperature",
                    format!(
                        "{name} = {x} at T = {t} in {}: too cold for this precision, raise \
                         --t-min",
                        T::DTYPE
                    ),
                ));
            }
        }
        start = v;
        points.push(p);
        bar.inc(1);
    }
    bar.finish_and_clear();
    points.reverse();
    Ok((points, timings))
}

/// The program: parses the command line, runs, and exits with status 1 and the error on
/// standard error when the run fails.
pub fn main() {
    crate::cli::remove_temporaries_on_interrupt();
    crate::cli::quiet_on_unwritable_stdout("ising2d");
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("ising2d: {e}");
        std::process::exit(1);
    }
}

/// Runs the example: checks the arguments, reserves the outputs, sweeps, prints the table and
/// replaces the CSV and the chart.
///
/// # Errors
/// A message for the user; existing output files are then left untouched.
pub fn run(args: &Args) -> std::result::Result<(), String> {
    let plan = check(args)?;
    let cost = estimate(args.width, args.points);
    if cost.seconds > 10.0 {
        eprintln!(
            "ising2d: estimated at most {} (an upper estimate)",
            cost.describe()
        );
    }
    // Refuse unwritable outputs before the sweep, not after it, without touching them.
    let csv_out = Pending::reserve("--csv", &args.csv)?;
    let png_out = Pending::reserve("--png", &args.png)?;
    let wall = Instant::now();
    let (points, timings) = match args.backend {
        BackendChoice::Strided => sweep_in(adrules::strided::Strided, args, &plan),
        #[cfg(feature = "candle")]
        BackendChoice::Candle => sweep_in(candle_backend(args.device)?, args, &plan),
        #[cfg(feature = "burn")]
        BackendChoice::Burn if args.device == DeviceChoice::Cpu => sweep_in(
            adrules::burn::BurnBackend::<adrules::burn::burn_flex::Flex>::new(Default::default()),
            args,
            &plan,
        ),
        #[cfg(feature = "burn-cuda")]
        BackendChoice::Burn if args.device == DeviceChoice::Cuda => {
            let device = adrules::burn::burn_tensor::Device::cuda(0);
            let be = adrules::burn::BurnBackend::cube(&device).map_err(|e| e.to_string())?;
            sweep_in(be, args, &plan)
        }
        #[cfg(feature = "burn-wgpu")]
        BackendChoice::Burn if args.device == DeviceChoice::Wgpu => {
            use adrules::burn::burn_tensor::{Device, DeviceKind};
            let device = Device::wgpu(DeviceKind::DefaultDevice);
            let be = adrules::burn::BurnBackend::cube(&device).map_err(|e| e.to_string())?;
            sweep_in(be, args, &plan)
        }
        #[cfg(feature = "dfdx")]
        BackendChoice::Dfdx => sweep_in(adrules::dfdx::DfdxBackend::default(), args, &plan),
        #[allow(unreachable_patterns)] // with every feature on
        other => return Err(other.not_built("ising2d")),
    }
    .map_err(|e| e.to_string())?;
    let elapsed = wall.elapsed();

    println!(
        "2D Ising model, periodic strip of width W = {}, {:?}, backend {:?} on {:?}; T_c = {:.6}",
        args.width,
        args.precision,
        args.backend,
        args.device,
        onsager::critical_temperature()
    );
    println!(
        "{:>7} {:>12} {:>12} {:>12} {:>10} {:>12} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "T",
        "f",
        "u",
        "g_h",
        "c",
        "u_exact",
        "u-u_ex",
        "c_exact",
        "c-c_ex",
        "|g_h+e_h|",
        "solve res"
    );
    let mut csv = String::from(
        "T,f,u,e_h,e_v,g_h,c,c_hvp,u_exact,c_exact,power_iterations,power_residual,conditions_norm,vjp_residual,jvp_residual,hvp_residual\n",
    );
    for p in &points {
        let beta = 1.0 / p.temperature;
        let (ue, ce) = (onsager::internal_energy(beta), onsager::specific_heat(beta));
        println!(
            "{:>7.4} {:>12.8} {:>12.8} {:>12.8} {:>10.6} {:>12.8} {:>10.2e} {:>10.6} {:>10.2e} {:>9.1e} {:>9.1e}",
            p.temperature,
            p.f,
            p.u,
            p.g_h,
            p.c,
            ue,
            p.u - ue,
            ce,
            p.c - ce,
            (p.g_h + p.e_h).abs(),
            p.vjp_residual.max(p.jvp_residual)
        );
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            p.temperature,
            p.f,
            p.u,
            p.e_h,
            p.e_v,
            p.g_h,
            p.c,
            p.c_hvp,
            ue,
            ce,
            p.power.iterations,
            p.power.residual,
            p.conditions_norm,
            p.vjp_residual,
            p.jvp_residual,
            p.hvp_residual
        ));
    }
    let worst = |f: &dyn Fn(&Point) -> f64| points.iter().map(f).fold(0.0, f64::max);
    println!(
        "\nconsistency: max |g_h + e_h| = {:.1e} (eigenvector vs reverse mode), max |e_v(expectation) − e_v(reverse)| = {:.1e}",
        worst(&|p| (p.g_h + p.e_h).abs()),
        worst(&|p| (p.e_v_expectation - p.e_v).abs())
    );
    let tc = onsager::critical_temperature();
    let rel = |p: &Point| (p.c_hvp - p.c).abs() / p.c.abs().max(f64::MIN_POSITIVE);
    let away = |p: &&Point| (p.temperature - tc).abs() > 0.1;
    println!(
        "specific heat two ways: max |c(HVP) − c(pushforward)|/|c| = {:.1e} over T with |T − T_c| > 0.1, {:.1e} over all T (second-order solve residual ≤ {:.1e})",
        points.iter().filter(away).map(rel).fold(0.0, f64::max),
        points.iter().map(rel).fold(0.0, f64::max),
        worst(&|p| p.hvp_residual),
    );
    println!(
        "solves: power iteration ≤ {} iterations, residual ≤ {:.1e}; ‖c(O, v*)‖/λ ≤ {:.1e}; linear solver `{}`, pullback residual ≤ {:.1e} ({} iterations max), pushforward residual ≤ {:.1e}",
        points.iter().map(|p| p.power.iterations).max().unwrap_or(0),
        worst(&|p| p.power.residual),
        worst(&|p| p.conditions_norm),
        points.first().map_or("-", |p| p.solver.0),
        worst(&|p| p.vjp_residual),
        points
            .iter()
            .map(|p| p.solver.1.max(p.solver.2))
            .max()
            .unwrap_or(0),
        worst(&|p| p.jvp_residual),
    );
    println!(
        "time: {:.2} s total; primal {:.2} s (power iterations, networks), rules {:.2} s (network pullbacks and pushforwards), implicit solves {:.2} s, second order {:.2} s (c by HVPs)",
        elapsed.as_secs_f64(),
        timings.primal.as_secs_f64(),
        timings.rules.as_secs_f64(),
        timings.implicit.as_secs_f64(),
        timings.second_order.as_secs_f64()
    );
    println!(
        "finite width: the exact values are for W = ∞; the differences above are the strip's finite-size effects (largest near T_c)."
    );

    crate::cli::write_outputs(csv_out, png_out, &csv, |png| {
        plot(png, &points, args.width).map_err(|e| e.to_string())
    })
}

/// u(T) and c(T) beside Onsager's exact curves, in two panels, each with a dashed vertical
/// line at Onsager's critical temperature.
fn plot(
    path: &Path,
    points: &[Point],
    width: usize,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = BitMapBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(500);
    let (t0, t1) = (
        points.first().map_or(1.0, |p| p.temperature),
        points.last().map_or(4.0, |p| p.temperature),
    );
    // A single temperature still gets an x-range around it.
    let (x0, x1) = if t1 > t0 {
        (t0, t1)
    } else {
        (0.9 * t0, 1.1 * t0)
    };
    let tc = onsager::critical_temperature();
    let u_exact = |t: f64| onsager::internal_energy(1.0 / t);
    let c_exact = |t: f64| onsager::specific_heat(1.0 / t);
    let panels = [
        (
            &left,
            Panel {
                caption: format!("internal energy u, W = {width} vs Onsager (W = ∞)"),
                y_desc: "u per site (J = k_B = 1)",
                points: points.iter().map(|p| (p.temperature, p.u)).collect(),
                exact: &u_exact,
                labels: ("exact, W = ∞", format!("adrules, W = {width}")),
                y_cap: None,
            },
        ),
        (
            &right,
            Panel {
                caption: format!("specific heat c, W = {width} vs Onsager (W = ∞)"),
                y_desc: "c per site (J = k_B = 1)",
                points: points.iter().map(|p| (p.temperature, p.c)).collect(),
                exact: &c_exact,
                labels: ("exact, W = ∞", format!("adrules, W = {width}")),
                y_cap: Some(3.0),
            },
        ),
    ];
    for (area, panel) in &panels {
        draw_panel(area, (x0, x1), tc, panel)?;
    }
    root.present()?;
    Ok(())
}
