//! The 2D Ising model on an infinite strip, differentiated through a tensor network and an
//! implicit eigenvector, checked against Onsager's exact solution.
//!
//! ```text
//! cargo run --release --example ising2d -- --help
//! ```
//!
//! For each temperature: the free energy from the leading eigenvalue of the row-to-row
//! transfer matrix (applied as a periodic MPO with our network plans), the bond energies by
//! reverse mode through the network and the implicit eigenvector, the horizontal correlation
//! read off the eigenvector (which must agree with the bond energy), and the specific heat
//! from the β-derivative of the energy's expectation values, `dv*/dβ` coming from the
//! implicit pushforward. See `examples/common/ising.rs` for the model and the formulas.

#[path = "common/ising.rs"]
mod ising;
#[path = "common/onsager.rs"]
mod onsager;

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use adrules::{Backend, Result};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use ising::{Point, Real, Strip, Timings};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Precision {
    F64,
    F32,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BackendChoice {
    /// the embedded strided CPU backend
    Strided,
    /// candle tensors on the CPU device (feature `candle`)
    #[cfg(feature = "candle")]
    Candle,
    /// burn tensors on burn's Flex CPU backend (feature `burn`)
    #[cfg(feature = "burn")]
    Burn,
    /// dfdx tensors (feature `dfdx`; rank ≤ 6, so width ≤ 4)
    #[cfg(feature = "dfdx")]
    Dfdx,
}

/// 2D Ising model on a periodic strip: free energy, energy and specific heat by automatic
/// differentiation through a tensor network and an implicit eigenvector.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// strip width W (periodic), 3 to 20; the transfer matrix acts on 2^W states
    #[arg(long, default_value_t = 10)]
    width: usize,
    /// lowest temperature
    #[arg(long, default_value_t = 1.0)]
    t_min: f64,
    /// highest temperature
    #[arg(long, default_value_t = 4.0)]
    t_max: f64,
    /// number of temperatures (evenly spaced, both ends included)
    #[arg(long, default_value_t = 40)]
    points: usize,
    /// arithmetic precision
    #[arg(long, value_enum, default_value_t = Precision::F64)]
    precision: Precision,
    /// relative residual ‖Tv − λv‖/λ at which the power iteration stops (default 1e-13 in
    /// f64, 1e-6 in f32)
    #[arg(long)]
    tol: Option<f64>,
    /// where to write the table as CSV
    #[arg(long, default_value = "ising2d.csv")]
    csv: PathBuf,
    /// where to draw u(T) and c(T) with the exact curves (PNG)
    #[arg(long, default_value = "ising2d.png")]
    png: PathBuf,
    /// the engine the rules run on
    #[arg(long, value_enum, default_value_t = BackendChoice::Strided)]
    backend: BackendChoice,
}

fn temperatures(args: &Args) -> std::result::Result<Vec<f64>, String> {
    if !(args.t_min > 0.0 && args.t_max >= args.t_min && args.t_max.is_finite()) {
        return Err(format!(
            "temperatures must satisfy 0 < t-min ≤ t-max, got {} and {}",
            args.t_min, args.t_max
        ));
    }
    if args.points == 0 || (args.points == 1 && args.t_min != args.t_max) {
        return Err("points must be at least 2 (or 1 with t-min = t-max)".into());
    }
    let step = if args.points > 1 {
        (args.t_max - args.t_min) / (args.points - 1) as f64
    } else {
        0.0
    };
    Ok((0..args.points)
        .map(|i| args.t_min + step * i as f64)
        .collect())
}

/// The sweep on `be` in the precision asked for.
fn sweep_in<B>(be: B, args: &Args, temps: &[f64]) -> Result<(Vec<Point>, Timings)>
where
    B: Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync,
{
    match args.precision {
        Precision::F64 => sweep::<f64, _>(be, args, temps),
        Precision::F32 => sweep::<f32, _>(be, args, temps),
    }
}

fn sweep<T: Real, B>(be: B, args: &Args, temps: &[f64]) -> Result<(Vec<Point>, Timings)>
where
    B: Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync,
{
    let strip = Strip::new::<T>(be, args.width)?;
    let tol = args
        .tol
        .unwrap_or(if T::DTYPE.is_double() { 1e-13 } else { 1e-6 });
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
        let (p, v) = strip.point::<T>(t, &start, tol, &mut timings)?;
        start = v;
        points.push(p);
        bar.inc(1);
    }
    bar.finish_and_clear();
    points.reverse();
    Ok((points, timings))
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("ising2d: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> std::result::Result<(), String> {
    let temps = temperatures(args)?;
    // Refuse unwritable outputs before the sweep, not after it.
    if args.png.extension().and_then(|e| e.to_str()) != Some("png") {
        return Err(format!(
            "{}: the chart is written as PNG, use a .png path",
            args.png.display()
        ));
    }
    for path in [&args.csv, &args.png] {
        std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let wall = Instant::now();
    let (points, timings) = match args.backend {
        BackendChoice::Strided => sweep_in(adrules::strided::Strided, args, &temps),
        #[cfg(feature = "candle")]
        BackendChoice::Candle => sweep_in(adrules::candle::CandleBackend::cpu(), args, &temps),
        #[cfg(feature = "burn")]
        BackendChoice::Burn => sweep_in(
            adrules::burn::BurnBackend::<adrules::burn::burn_flex::Flex>::new(Default::default()),
            args,
            &temps,
        ),
        #[cfg(feature = "dfdx")]
        BackendChoice::Dfdx => sweep_in(adrules::dfdx::DfdxBackend::default(), args, &temps),
    }
    .map_err(|e| e.to_string())?;
    let elapsed = wall.elapsed();

    println!(
        "2D Ising model, periodic strip of width W = {}, {:?}, backend {:?}; T_c = {:.6}",
        args.width,
        args.precision,
        args.backend,
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
        "T,f,u,e_h,e_v,g_h,c,u_exact,c_exact,power_iterations,power_residual,conditions_norm,vjp_residual,jvp_residual\n",
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
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            p.temperature,
            p.f,
            p.u,
            p.e_h,
            p.e_v,
            p.g_h,
            p.c,
            ue,
            ce,
            p.power.iterations,
            p.power.residual,
            p.conditions_norm,
            p.vjp_residual,
            p.jvp_residual
        ));
    }
    let worst = |f: &dyn Fn(&Point) -> f64| points.iter().map(f).fold(0.0, f64::max);
    println!(
        "\nconsistency: max |g_h + e_h| = {:.1e} (eigenvector vs reverse mode), max |e_v(expectation) − e_v(reverse)| = {:.1e}",
        worst(&|p| (p.g_h + p.e_h).abs()),
        worst(&|p| (p.e_v_expectation - p.e_v).abs())
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
        "time: {:.2} s total; primal {:.2} s (power iterations, networks), rules {:.2} s (network pullbacks and pushforwards), implicit solves {:.2} s",
        elapsed.as_secs_f64(),
        timings.primal.as_secs_f64(),
        timings.rules.as_secs_f64(),
        timings.implicit.as_secs_f64()
    );
    println!(
        "finite width: the exact values are for W = ∞; the differences above are the strip's finite-size effects (largest near T_c)."
    );

    std::fs::File::create(&args.csv)
        .and_then(|mut f| f.write_all(csv.as_bytes()))
        .map_err(|e| format!("{}: {e}", args.csv.display()))?;
    println!("wrote {}", args.csv.display());
    match plot(&args.png, &points, args.width) {
        Ok(()) => println!("wrote {}", args.png.display()),
        Err(e) => return Err(format!("{}: {e}", args.png.display())),
    }
    Ok(())
}

/// u(T) and c(T) beside Onsager's exact curves, in two panels.
fn plot(
    path: &std::path::Path,
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
    let exact: Vec<f64> = (0..=400)
        .map(|i| t0 + (t1 - t0) * i as f64 / 400.0)
        .collect();
    type Getter = fn(&Point) -> f64;
    type Exact = fn(f64) -> f64;
    let panels: [(&_, &str, Getter, Exact); 2] = [
        (
            &left,
            "internal energy u",
            |p| p.u,
            |t| onsager::internal_energy(1.0 / t),
        ),
        (
            &right,
            "specific heat c",
            |p| p.c,
            |t| onsager::specific_heat(1.0 / t),
        ),
    ];
    for (area, name, get, exact_fn) in panels {
        let ys: Vec<f64> = points
            .iter()
            .map(get)
            .chain(exact.iter().map(|&t| exact_fn(t)).filter(|y| y.is_finite()))
            .collect();
        let (lo, hi) = ys
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &y| {
                (a.min(y), b.max(y))
            });
        let pad = 0.05 * (hi - lo).max(1e-9);
        let hi = if name.starts_with("specific") {
            hi.min(3.0)
        } else {
            hi
        };
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{name}, W = {width} vs Onsager (W = ∞)"),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(t0..t1, (lo - pad)..(hi + pad))?;
        chart.configure_mesh().x_desc("T").draw()?;
        chart
            .draw_series(LineSeries::new(
                exact
                    .iter()
                    .map(|&t| (t, exact_fn(t)))
                    .filter(|(_, y)| y.is_finite()),
                &BLACK,
            ))?
            .label("exact, W = ∞")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], BLACK));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|p| Circle::new((p.temperature, get(p)), 3, RED.filled())),
            )?
            .label(format!("adrules, W = {width}"))
            .legend(|(x, y)| Circle::new((x + 7, y), 3, RED.filled()));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
