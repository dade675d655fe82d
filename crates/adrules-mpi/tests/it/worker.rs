//! The test's MPI side: run under `mpirun` by the driver tests (`ADRULES_MPI_CASE` names the
//! case), or as a one-rank world when the test binary runs on its own. Each rank prints one
//! `RESULT {json}` line per check.

use std::time::{Duration, Instant};

use adrules_core::alloc::{Checkpoint, Lifetime};
use adrules_core::network::{MemoryTarget, Network, NetworkPlan, Order, SlicedPlan};
use adrules_core::{
    Allocator, Backend, Complex64, Conj, DType, Error as CoreError, HeapAllocator,
    Result as CoreResult,
};
use adrules_mpi::{Cotangents, Distributed, Error};
use adrules_strided::{Strided, Tensor};
use adrules_testing::Rng;
use mpi::collective::SystemOperation;
use mpi::traits::*;
use serde_json::json;

/// The timeout the fault cases run with.
pub const TIMEOUT: Duration = Duration::from_secs(3);

fn host(t: &Tensor) -> Vec<Complex64> {
    Strided.to_host(t).unwrap().data().to_c64_vec()
}

/// `max |x − y| / max |y|`.
fn rel(x: &[Complex64], y: &[Complex64]) -> f64 {
    assert_eq!(x.len(), y.len());
    let scale = y.iter().fold(0.0f64, |m, v| m.max(v.norm()));
    let err = x
        .iter()
        .zip(y)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).norm()));
    err / scale.max(f64::MIN_POSITIVE)
}

/// An open network with a hyperedge (`x` on three operands), a diagonal, a batch label and
/// conjugated operands, sliced to a sixteenth of its largest intermediate.
pub fn network() -> (Network, Vec<Vec<usize>>, SlicedPlan) {
    let network = Network::einsum("bxacc,bxde,xef,fag->bdg")
        .unwrap()
        .with_conj(&[Conj::Yes, Conj::No, Conj::Yes, Conj::No])
        .unwrap();
    let dims = vec![
        vec![2, 5, 3, 8, 8],
        vec![2, 5, 8, 8],
        vec![5, 8, 8],
        vec![8, 3, 2],
    ];
    let whole = unsliced(&network, &dims);
    let target = (whole.unsliced_elements().largest / 16.0) as usize;
    let plan = SlicedPlan::new(
        &network,
        &dims,
        &Order::Default,
        MemoryTarget::Elements(target),
    )
    .unwrap();
    (network, dims, plan)
}

/// The network as one slice (a target every tree meets).
fn unsliced(network: &Network, dims: &[Vec<usize>]) -> SlicedPlan {
    let target = MemoryTarget::Elements(usize::MAX);
    SlicedPlan::new(network, dims, &Order::Default, target).unwrap()
}

fn operands(rng: &mut Rng, dims: &[Vec<usize>], dtype: DType) -> Vec<Tensor> {
    dims.iter()
        .map(|d| Strided.from_host(rng.tensor(d, dtype)).unwrap())
        .collect()
}

fn emit(rank: usize, check: &str, fields: serde_json::Value) {
    let mut v = json!({ "rank": rank, "check": check });
    v.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    println!("RESULT {v}");
}

/// Value, gradient (reduced and per-rank), tangent against the one-process unsliced plan.
fn agree(dist: &Distributed, world: &impl Communicator) {
    let rank = dist.rank();
    let (network, dims, sliced) = network();
    let plan = NetworkPlan::new(&network, &dims, &Order::Default).unwrap();
    for dtype in [DType::F32, DType::F64, DType::C32, DType::C64] {
        let mut rng = Rng::seed(7);
        let xs = operands(&mut rng, &dims, dtype);
        let refs: Vec<&Tensor> = xs.iter().collect();
        let before: Vec<_> = xs.iter().map(host).collect();
        let c_bar = Strided
            .from_host(rng.tensor(plan.output_dims(), dtype))
            .unwrap();
        let dx = operands(&mut rng, &dims, dtype);
        let tangents: Vec<Option<&Tensor>> = dx
            .iter()
            .enumerate()
            .map(|(k, t)| (k != 2).then_some(t))
            .collect();
        let active = vec![true, false, true, true];
        // the reference: one process, unsliced
        let c = host(&plan.execute(&Strided, &refs).unwrap());
        let (_, pb) = plan.rrule(&Strided, &refs, &active).unwrap();
        let want: Vec<Option<Vec<Complex64>>> = pb
            .pullback(&c_bar)
            .unwrap()
            .iter()
            .map(|g| g.as_ref().map(host))
            .collect();
        let (_, dc) = plan.frule(&Strided, &refs, &tangents).unwrap();
        let dc = host(&dc);
        // distributed
        let value = rel(&host(&dist.execute(&sliced, &Strided, &refs).unwrap()), &c);
        let (v, grads) = dist
            .value_and_gradient(
                &sliced,
                &Strided,
                &refs,
                &c_bar,
                &active,
                Cotangents::Reduced,
            )
            .unwrap();
        let mut grad = rel(&host(&v), &c);
        for (g, w) in grads.iter().zip(&want) {
            assert_eq!(g.is_some(), w.is_some());
            if let (Some(g), Some(w)) = (g, w) {
                grad = grad.max(rel(&host(g), w));
            }
        }
        // the pullback of rrule runs the slices again
        let (v, pb) = dist.rrule(&sliced, &Strided, &refs, &active).unwrap();
        grad = grad.max(rel(&host(&v), &c));
        let again = pb.pullback(&c_bar, Cotangents::Reduced).unwrap();
        for (g, w) in again.iter().zip(&want) {
            assert_eq!(g.is_some(), w.is_some());
            if let (Some(g), Some(w)) = (g, w) {
                grad = grad.max(rel(&host(g), w));
            }
        }
        // per-rank cotangents of the sliced operands: their sum over the ranks is the cotangent
        let (_, local) = dist
            .value_and_gradient(&sliced, &Strided, &refs, &c_bar, &active, Cotangents::Local)
            .unwrap();
        let sliced_ops = sliced.sliced_operands();
        let mut local_err = 0.0f64;
        for (k, (g, w)) in local.iter().zip(&want).enumerate() {
            if let (Some(g), Some(w)) = (g, w) {
                let mine: Vec<f64> = host(g).iter().flat_map(|z| [z.re, z.im]).collect();
                let mut sum = vec![0.0; mine.len()];
                world.all_reduce_into(&mine[..], &mut sum[..], SystemOperation::sum());
                let sum: Vec<Complex64> =
                    sum.chunks(2).map(|p| Complex64::new(p[0], p[1])).collect();
                local_err = local_err.max(rel(&sum, w));
                if !sliced_ops[k] {
                    // an unsliced operand's cotangent is reduced even so
                    local_err = local_err.max(rel(&host(g), w));
                }
            }
        }
        let (v, t) = dist.frule(&sliced, &Strided, &refs, &tangents).unwrap();
        let tangent = rel(&host(&t), &dc).max(rel(&host(&v), &c));
        let after: Vec<_> = xs.iter().map(host).collect();
        emit(
            rank,
            "agree",
            json!({
                "dtype": dtype.to_string(), "value": value, "gradient": grad, "local": local_err,
                "tangent": tangent, "slices": sliced.num_slices(), "mine": dist.slices(&sliced).len(),
                "unchanged": before == after,
            }),
        );
    }
}

/// An allocator that, on the failing rank, fails its third allocation in the way `how`
/// names, and on the other ranks sleeps 5 ms per allocation (so that their share of the
/// slices takes far longer than stopping at a slice boundary does).
struct Faulty {
    armed: bool,
    how: &'static str,
    count: std::cell::Cell<usize>,
}

/// The rank the fault cases make fail (`ADRULES_MPI_FAILING`, default 1).
fn failing_rank() -> usize {
    std::env::var("ADRULES_MPI_FAILING")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1)
}

impl<B: Backend> Allocator<B> for Faulty {
    fn allocate(
        &self,
        be: &B,
        dims: &[usize],
        dtype: DType,
        lifetime: Lifetime,
    ) -> CoreResult<B::Tensor> {
        self.count.set(self.count.get() + 1);
        if self.armed && self.count.get() == 3 {
            match self.how {
                "panic" => panic!("injected panic in a slice"),
                "oom" => {
                    return Err(CoreError::MemoryLimit {
                        arg: "allocator".into(),
                        limit: 1024,
                        needed: dims.iter().product::<usize>() as f64 * 8.0,
                        unit: "bytes".into(),
                        reason: "injected: this rank's memory is exhausted".into(),
                    });
                }
                "kill" => {
                    let pid = std::process::id().to_string();
                    let _ = std::process::Command::new("kill")
                        .args(["-9", &pid])
                        .status();
                    std::thread::sleep(Duration::from_secs(60));
                }
                _ => {}
            }
        }
        if !self.armed && self.how != "kill" {
            // (not when a rank is killed: there the bound is measured from the call's start)
            std::thread::sleep(Duration::from_millis(5));
        }
        HeapAllocator.allocate(be, dims, dtype, lifetime)
    }
    fn free(&self, t: B::Tensor) {
        drop(t)
    }
    fn checkpoint(&self) -> Checkpoint {
        <HeapAllocator as Allocator<B>>::checkpoint(&HeapAllocator)
    }
    fn reset(&self, c: Checkpoint) -> CoreResult<()> {
        <HeapAllocator as Allocator<B>>::reset(&HeapAllocator, c)
    }
}

fn describe(e: &Error) -> serde_json::Value {
    match e {
        Error::RankFailed {
            rank,
            failure,
            reason,
            local,
        } => json!({
            "kind": "RankFailed", "failed": rank, "failure": failure.to_string(), "reason": reason,
            "local": local.as_ref().map(|l| format!("{l:?}")),
        }),
        Error::Unresponsive { ranks, .. } => json!({ "kind": "Unresponsive", "ranks": ranks }),
        Error::Inconsistent { rank, what } => {
            json!({ "kind": "Inconsistent", "failed": rank, "what": what })
        }
        Error::Unusable { .. } => json!({ "kind": "Unusable" }),
        other => json!({ "kind": format!("{other:?}") }),
    }
}

/// The failing rank fails as `how` says; every rank reports the error it got, how long it took, that
/// its operands are unchanged, and whether the next call succeeds.
fn fault(dist: &Distributed, how: &'static str) {
    let rank = dist.rank();
    let (_, mut dims, plan) = network();
    let mut rng = Rng::seed(11);
    let xs = operands(&mut rng, &dims, DType::F64);
    let before: Vec<_> = xs.iter().map(host).collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let start = Instant::now();
    let failing = failing_rank();
    let alloc = Faulty {
        armed: rank == failing,
        how,
        count: Default::default(),
    };
    let result = match how {
        "error" if rank == failing => {
            dims[0][1] += 1;
            let bad = operands(&mut Rng::seed(12), &dims, DType::F64);
            let bad_refs: Vec<&Tensor> = bad.iter().collect();
            dist.execute_with(&plan, &Strided, &alloc, &bad_refs)
                .map(|_| ())
        }
        "inconsistent" if rank == failing => {
            let (network, dims, _) = network();
            let other = unsliced(&network, &dims);
            dist.execute(&other, &Strided, &refs).map(|_| ())
        }
        _ => dist
            .execute_with(&plan, &Strided, &alloc, &refs)
            .map(|_| ()),
    };
    let elapsed = start.elapsed().as_secs_f64();
    let after: Vec<_> = xs.iter().map(host).collect();
    let error = match &result {
        Ok(()) => json!(null),
        Err(e) => describe(e),
    };
    // the communicator stays usable after a failure the ranks agreed on; after a silent
    // rank it refuses at once
    let again = match dist.execute(&plan, &Strided, &refs) {
        Ok(_) => json!(true),
        Err(e) => describe(&e),
    };
    emit(
        rank,
        how,
        json!({ "error": error, "seconds": elapsed, "unchanged": before == after, "again": again,
            "allocations": alloc.count.get(), "share": dist.slices(&plan).len() }),
    );
}

/// Runs the case the driver named (`ADRULES_MPI_CASE`), or every case that a one-rank world
/// can run.
pub fn main_case() {
    let universe = mpi::initialize().expect("MPI initializes");
    let world = universe.world();
    let dist = Distributed::new(&world).with_timeout(TIMEOUT).unwrap();
    let case = std::env::var("ADRULES_MPI_CASE").unwrap_or_else(|_| "agree".into());
    match case.as_str() {
        "agree" => agree(&dist, &world),
        "error" => fault(&dist, "error"),
        "panic" => fault(&dist, "panic"),
        "oom" => fault(&dist, "oom"),
        "kill" => fault(&dist, "kill"),
        "inconsistent" => fault(&dist, "inconsistent"),
        other => panic!("unknown case {other}"),
    }
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    if case == "kill" {
        // a peer is dead: finalizing could wait for it
        std::process::exit(0);
    }
}
