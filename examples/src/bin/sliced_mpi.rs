//! A tensor network too large for one process's memory target, contracted and differentiated
//! across MPI ranks: the value and the gradient of the contraction of a random 3-regular graph
//! of tensors (the structure of a random-circuit amplitude or a QAOA energy), sliced so that
//! one slice's gradient temporaries fit the target, the slices split over the ranks.
//!
//! ```text
//! cargo build --release -p adrules-examples --features mpi --bin sliced_mpi
//! mpirun -n 2 target/release/sliced_mpi            # add --oversubscribe beyond the cores
//! ```
//!
//! Every rank prints nothing; rank 0 prints the network, the slicing, each rank's slices,
//! time and peak heap above the operands (against the target), the value, the gradient's norm
//! and, unless `--no-check`, the difference from the one-process sliced run. Run each rank on
//! one thread (`RAYON_NUM_THREADS=1`) to measure scaling over ranks. Exit status 1 on any error
//! (every rank returns the same typed error: see `adrules::mpi`).

use std::time::{Duration, Instant};

use adrules::mpi::{Cotangents, Distributed};
use adrules::network::{MemoryTarget, Network, Order, SlicedPlan};
use adrules::strided::{Strided, Tensor, cache};
use adrules::{Backend, DType};
use adrules_examples::HEAP;
use adrules_testing::Rng;
use adrules_testing::networks::random_regular;
use clap::Parser;
use mpi::traits::*;

/// Command line.
#[derive(Parser, Debug)]
#[command(about = "A sliced tensor network's value and gradient across MPI ranks")]
struct Args {
    /// tensors of the random 3-regular graph (even)
    #[arg(long, default_value_t = 72)]
    vertices: usize,
    /// bond dimension of every edge
    #[arg(long, default_value_t = 2)]
    bond: usize,
    /// seed of the graph and of the operands
    #[arg(long, default_value_t = 11)]
    seed: u64,
    /// memory target of one slice's gradient temporaries, in MiB
    #[arg(long, default_value_t = 4.0)]
    target_mib: f64,
    /// seconds a rank waits for its peers before it names them unresponsive
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// skip the one-process check on rank 0
    #[arg(long)]
    no_check: bool,
}

const MIB: f64 = 1024.0 * 1024.0;

fn rel(x: &Tensor, y: &Tensor) -> f64 {
    let (x, y) = (x.to_vec::<f64>().unwrap(), y.to_vec::<f64>().unwrap());
    let scale = y.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let err = x
        .iter()
        .zip(&y)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    err / scale.max(f64::MIN_POSITIVE)
}

fn main() {
    let args = Args::parse();
    let universe = mpi::initialize().expect("MPI initializes");
    let world = universe.world();
    if let Err(e) = run(&args, &world) {
        eprintln!("rank {}: {e}", world.rank());
        std::process::exit(1);
    }
}

fn run(args: &Args, world: &impl Communicator) -> Result<(), Box<dyn std::error::Error>> {
    // freed buffers go back to the allocator at once, so that the peak is the live memory
    cache::set_limit(0);
    let dist = Distributed::new(world).with_timeout(Duration::from_secs(args.timeout))?;
    let (rank, size) = (dist.rank(), dist.size());
    let be = Strided;
    // a 3-regular graph needs an even number of vertices, at least 4
    if args.vertices < 4 || args.vertices % 2 == 1 {
        return Err(format!("--vertices {}: an even number ≥ 4 is needed", args.vertices).into());
    }
    if args.bond == 0 {
        return Err("--bond 0: a bond dimension ≥ 1 is needed".into());
    }
    let graph = random_regular(args.vertices, args.bond, args.seed);
    let network = Network::ncon(&graph.labels, None)?;
    let dims = graph.shapes();
    let target_bytes = (args.target_mib * MIB) as usize;
    let target = MemoryTarget::Bytes {
        bytes: target_bytes,
        dtype: DType::F64,
    };
    let plan = SlicedPlan::new(&network, &dims, &Order::Default, target)?;
    let (_, unsliced_grad) = {
        let whole = plan.unsliced_elements();
        (whole.largest * 8.0, whole.gradient * 8.0)
    };
    let mut rng = Rng::seed(args.seed);
    let xs: Vec<Tensor> = dims
        .iter()
        .map(|d| be.from_host(rng.tensor(d, DType::F64)))
        .collect::<Result<_, _>>()?;
    let refs: Vec<&Tensor> = xs.iter().collect();
    let c_bar = be.from_host(rng.tensor(&[], DType::F64))?;
    let active = vec![true; refs.len()];

    // warm-up: the first GEMM on a thread allocates faer's packing buffers (on x86, twice the
    // L3 cache per thread, kept for the thread's life); one slice's gradient, not measured
    let first = HEAP.current_usage();
    HEAP.reset_peak_usage();
    plan.value_and_gradient_slices(&be, &refs, &c_bar, &active, 0..1, &mut |_| Ok(()))?;
    let warm_up = HEAP.peak_usage().saturating_sub(first) as f64;
    let base = HEAP.current_usage();
    HEAP.reset_peak_usage();
    let start = Instant::now();
    let (value, grads) =
        dist.value_and_gradient(&plan, &be, &refs, &c_bar, &active, Cotangents::Reduced)?;
    let seconds = start.elapsed().as_secs_f64();
    let peak = HEAP.peak_usage().saturating_sub(base) as f64;

    // each rank's slices, time and peak, gathered on rank 0
    let mine = [dist.slices(&plan).len() as f64, seconds, peak, warm_up];
    let mut all = vec![0.0f64; 4 * size];
    world.all_gather_into(&mine[..], &mut all[..]);
    if rank != 0 {
        return Ok(());
    }
    let value = value.to_vec::<f64>()?[0];
    let norm = grads
        .iter()
        .flatten()
        .map(|g| {
            g.to_vec::<f64>()
                .map(|v| v.iter().map(|x| x * x).sum::<f64>())
        })
        .sum::<Result<f64, _>>()?
        .sqrt();
    println!(
        "random 3-regular graph: {} tensors, bond {}, seed {}; {} ranks",
        args.vertices, args.bond, args.seed, size
    );
    println!(
        "unsliced: largest intermediate {:.1} MiB, gradient temporaries {:.1} MiB (estimated)",
        plan.unsliced_elements().largest * 8.0 / MIB,
        unsliced_grad / MIB
    );
    println!(
        "sliced: target {:.1} MiB per slice's gradient, {} slices over labels of dims {:?}, \
         work {:.2}x the unsliced tree's",
        args.target_mib,
        plan.num_slices(),
        plan.sliced_dims(),
        plan.cost() / plan.unsliced_cost()
    );
    println!("rank  slices  seconds  peak heap above the operands (MiB)  warm-up (MiB)");
    for r in 0..size {
        let row = &all[4 * r..4 * r + 4];
        println!(
            "{r:>4}  {:>6}  {:>7.3}  {:>35.3}  {:>13.1}",
            row[0],
            row[1],
            row[2] / MIB,
            row[3] / MIB
        );
    }
    let slowest = (0..size).map(|r| all[4 * r + 1]).fold(0.0, f64::max);
    let worst = (0..size).map(|r| all[4 * r + 2]).fold(0.0, f64::max);
    println!("time {slowest:.3} s (slowest rank)");
    println!(
        "peak {:.3} MiB on the worst rank: {} the target of {:.1} MiB",
        worst / MIB,
        if worst <= target_bytes as f64 {
            "within"
        } else {
            "ABOVE"
        },
        args.target_mib
    );
    println!("value {value:.12e}");
    println!("gradient norm {norm:.12e}");
    if !args.no_check {
        let (v1, g1) = plan.value_and_gradient(&be, &refs, &c_bar, &active)?;
        let mut diff = rel(&value_tensor(&be, value)?, &v1);
        for (a, b) in grads.iter().zip(&g1) {
            if let (Some(a), Some(b)) = (a, b) {
                diff = diff.max(rel(a, b));
            }
        }
        println!("one-process sliced run: max relative difference {diff:.2e}");
        if diff > 1e-12 {
            return Err(format!("the ranks disagree with one process: {diff:e}").into());
        }
    }
    Ok(())
}

fn value_tensor(be: &Strided, v: f64) -> Result<Tensor, adrules::Error> {
    be.from_host(adrules::HostTensor::from_vec(&[], vec![v])?)
}
