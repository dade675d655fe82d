//! The fuzz targets of the rules around the kernels: network gradients against finite
//! differences, the planner's optimizers under budgets, and the shared caches from 8 threads.

use std::time::{Duration, Instant};

use adrules::network::{
    MemoryTarget, Network, NetworkPlan, Optimizer, Order, Search, SlicedPlan, einsum,
};
use adrules::strided::{BufferPool, Strided, Tensor};
use adrules::{Allocator, Backend, Complex64, DType, HostData, HostTensor};
use adrules_testing::fuzz::einsum_case;
use adrules_testing::{Rng, Tolerance, Value};

use crate::Finding;
use crate::targets::rel_err;

fn wrong(what: impl Into<String>) -> Finding {
    Finding::Wrong(what.into())
}

/// A valid einsum call of `seed`: its plan, operands and their host copies (`None` for a
/// rejected call; the einsum target checks those).
struct Case {
    text: String,
    network: Network,
    shapes: Vec<Vec<usize>>,
    plan: NetworkPlan,
    hosts: Vec<HostTensor>,
    xs: Vec<Tensor>,
}

fn case(seed: u64, dtype: DType) -> Option<Case> {
    let (s, shapes) = einsum_case(seed);
    let net = Network::einsum(&s).ok()?;
    let plan = NetworkPlan::new(&net, &shapes, &Order::Default).ok()?;
    let mut rng = Rng::seed(seed ^ 0xfeed);
    let hosts: Vec<HostTensor> = shapes.iter().map(|d| rng.tensor(d, dtype)).collect();
    let xs = hosts
        .iter()
        .map(|h| Strided.from_host(h.clone()))
        .collect::<adrules::Result<_>>()
        .ok()?;
    Some(Case {
        text: format!("{s:?} {shapes:?} {dtype}"),
        network: net,
        shapes,
        plan,
        hosts,
        xs,
    })
}

fn unchanged(c: &Case) -> Result<(), Finding> {
    for (x, h) in c.xs.iter().zip(&c.hosts) {
        if Strided.to_host(x).ok().as_ref() != Some(h) {
            return Err(Finding::Mutated(format!("{}: an operand changed", c.text)));
        }
    }
    Ok(())
}

fn re_inner(x: &Tensor, y: &Tensor) -> Result<f64, Finding> {
    Strided
        .inner(x, y)
        .map(|v| v.to_c64().re)
        .map_err(|e| wrong(format!("inner: {e}")))
}

/// `x + h·v` as a strided tensor of `x`'s dtype.
fn shifted(x: &HostTensor, v: &HostTensor, h: f64) -> Tensor {
    let (xv, vv) = (x.data().to_c64_vec(), v.data().to_c64_vec());
    let y: Vec<Complex64> = xv.iter().zip(&vv).map(|(a, b)| a + b * h).collect();
    let t = HostTensor::new(x.dims(), HostData::from_c64_projected(&y, x.dtype()));
    Strided
        .from_host(t.expect("the shape of x"))
        .expect("a stored dtype")
}

/// The gradient of `φ(T) = Re⟨C̄, N(T)⟩` of a random valid network (f64 or c64) against
/// central finite differences along a random direction, and the pushforward against the
/// pullback (the adjoint identity `Re⟨C̄, Ċ⟩ = Σ Re⟨T̄_k, V_k⟩`).
pub(crate) fn gradient(seed: u64) -> Result<(), Finding> {
    let dtype = if (seed / 7).is_multiple_of(2) {
        DType::F64
    } else {
        DType::C64
    };
    let Some(c) = case(seed, dtype) else {
        return Ok(());
    };
    let be = Strided;
    let refs: Vec<&Tensor> = c.xs.iter().collect();
    let mut rng = Rng::seed(seed ^ 0xd1ec);
    let cbar = be
        .from_host(rng.tensor(c.plan.output_dims(), dtype))
        .map_err(|e| wrong(e.to_string()))?;
    let vs: Vec<HostTensor> = c
        .hosts
        .iter()
        .map(|h| rng.tensor(h.dims(), dtype))
        .collect();
    let active = vec![true; refs.len()];
    let err = |what: &str, e: adrules::Error| wrong(format!("{}: {what}: {e}", c.text));
    let (_, pb) = c
        .plan
        .rrule(&be, &refs, &active)
        .map_err(|e| err("rrule", e))?;
    let grads = pb.pullback(&cbar).map_err(|e| err("pullback", e))?;
    let vts: Vec<Tensor> = vs
        .iter()
        .map(|v| be.from_host(v.clone()).expect("a stored dtype"))
        .collect();
    let mut analytic = 0.0;
    for (g, v) in grads.iter().zip(&vts) {
        let g = g
            .as_ref()
            .ok_or_else(|| wrong(format!("{}: no cotangent", c.text)))?;
        analytic += re_inner(g, v)?;
    }
    // pushforward against pullback
    let tangents: Vec<Option<&Tensor>> = vts.iter().map(Some).collect();
    let (_, cdot) = c
        .plan
        .frule(&be, &refs, &tangents)
        .map_err(|e| err("frule", e))?;
    let forward = re_inner(&cbar, &cdot)?;
    let scale = 1.0 + analytic.abs() + forward.abs();
    if (forward - analytic).abs() > 1e-10 * scale {
        return Err(wrong(format!(
            "{}: adjoint identity: Re⟨C̄, Ċ⟩ = {forward:e}, Σ Re⟨T̄, V⟩ = {analytic:e}",
            c.text
        )));
    }
    if seed.is_multiple_of(4) {
        sliced(&c, &refs, &cbar, &grads)?;
    }
    // central differences of φ along V (φ is a polynomial of degree ≤ 3 in h here)
    let h = 1e-4;
    let phi = |s: f64| -> Result<f64, Finding> {
        let ys: Vec<Tensor> = c
            .hosts
            .iter()
            .zip(&vs)
            .map(|(x, v)| shifted(x, v, s))
            .collect();
        let yr: Vec<&Tensor> = ys.iter().collect();
        let out = c.plan.execute(&be, &yr).map_err(|e| err("execute", e))?;
        re_inner(&cbar, &out)
    };
    let fd = (phi(h)? - phi(-h)?) / (2.0 * h);
    if (fd - analytic).abs() > 1e-6 * scale {
        return Err(wrong(format!(
            "{}: finite differences {fd:e}, pullback {analytic:e}",
            c.text
        )));
    }
    unchanged(&c)
}

/// The gradient slice by slice ([`SlicedPlan`], a quarter of the largest intermediate)
/// against the unsliced pullback's `grads` (1e-10 relative); a target no slicing meets must
/// be [`adrules::Error::MemoryLimit`].
fn sliced(
    c: &Case,
    refs: &[&Tensor],
    cbar: &Tensor,
    grads: &[Option<Tensor>],
) -> Result<(), Finding> {
    let err = |what: &str, e: adrules::Error| wrong(format!("{}: sliced {what}: {e}", c.text));
    let order = Order::Default;
    let whole = SlicedPlan::new(
        &c.network,
        &c.shapes,
        &order,
        MemoryTarget::Elements(usize::MAX),
    )
    .map_err(|e| err("plan", e))?;
    let target = MemoryTarget::Elements((whole.unsliced_elements().largest / 4.0) as usize);
    let plan = match SlicedPlan::new(&c.network, &c.shapes, &order, target) {
        Ok(plan) => plan,
        Err(adrules::Error::MemoryLimit { .. }) => return Ok(()),
        Err(e) => return Err(err("plan", e)),
    };
    let active = vec![true; refs.len()];
    let (_, got) = plan
        .value_and_gradient(&Strided, refs, cbar, &active)
        .map_err(|e| err("gradient", e))?;
    for (k, (g, w)) in got.iter().zip(grads).enumerate() {
        let (Some(g), Some(w)) = (g, w) else {
            return Err(wrong(format!("{}: sliced: a missing cotangent", c.text)));
        };
        let host = |t: &Tensor| Strided.to_host(t).map(|h| h.data().to_c64_vec());
        let (g, w) = (
            host(g).map_err(|e| err("host", e))?,
            host(w).map_err(|e| err("host", e))?,
        );
        let e = rel_err(&g, &w);
        if e > 1e-10 {
            return Err(wrong(format!(
                "{}: sliced cotangent {k} ({} slices) differs by {e:e}",
                c.text,
                plan.num_slices()
            )));
        }
    }
    Ok(())
}

/// Every optimizer under a small budget on a random valid network: planning returns within
/// the budget and a slack, the tree's value equals the default order's, and the cost is finite.
pub(crate) fn planner(seed: u64) -> Result<(), Finding> {
    let (s, shapes) = einsum_case(seed);
    let Ok(net) = Network::einsum(&s) else {
        return Ok(());
    };
    let Ok(reference) = NetworkPlan::new(&net, &shapes, &Order::Default) else {
        return Ok(());
    };
    let mut rng = Rng::seed(seed ^ 0x91a7);
    let optimizer = Optimizer::ALL[rng.below(Optimizer::ALL.len())];
    let budget = Duration::from_micros(200 + rng.below(2000) as u64);
    let search = Search::new(optimizer)
        .with_budget(budget)
        .with_seed(rng.below(4) as u64);
    let case = format!("{s:?} {shapes:?} {optimizer:?} {budget:?}");
    let start = Instant::now();
    let plan = NetworkPlan::new(&net, &shapes, &Order::Search(search))
        .map_err(|e| wrong(format!("{case}: refused a valid network: {e}")))?;
    let took = start.elapsed();
    // the budget plus a slack for the greedy fallback and the lowering
    if took > budget + Duration::from_millis(250) {
        return Err(wrong(format!("{case}: planning took {took:?}")));
    }
    if !plan.cost().is_finite() {
        return Err(wrong(format!("{case}: cost {}", plan.cost())));
    }
    let hosts: Vec<HostTensor> = shapes.iter().map(|d| rng.tensor(d, DType::F64)).collect();
    let xs: Vec<Tensor> = hosts
        .iter()
        .map(|h| Strided.from_host(h.clone()).expect("f64"))
        .collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let run = |p: &NetworkPlan| {
        p.execute(&Strided, &refs)
            .and_then(|t| t.to_host())
            .map_err(|e| wrong(format!("{case}: {e}")))
    };
    let (got, expected) = (run(&plan)?, run(&reference)?);
    Tolerance::for_dtype(DType::F64)
        .check(&Value::Tensor(got), &Value::Tensor(expected), &s)
        .map_err(|e| wrong(format!("{case}: {e}")))
}

/// The einsum of `seed` and a pooled execution of its plan, from 8 threads at once, sharing
/// the global plan cache, the process-wide buffer cache (one case of 1 MiB buffers) and one
/// [`BufferPool`]: every thread must get the single-threaded values.
pub(crate) fn threads(seed: u64) -> Result<(), Finding> {
    let big = (seed / 11).is_multiple_of(4);
    let (s, shapes) = if big {
        (
            "ij,ij->ij".to_string(),
            vec![vec![512, 256], vec![512, 256]],
        )
    } else {
        einsum_case(seed)
    };
    let Ok(net) = Network::einsum(&s) else {
        return Ok(());
    };
    let Ok(plan) = NetworkPlan::new(&net, &shapes, &Order::Default) else {
        return Ok(());
    };
    let mut rng = Rng::seed(seed ^ 0x7a7a);
    let dtype = [DType::F32, DType::F64, DType::C32, DType::C64][rng.below(4)];
    let hosts: Vec<HostTensor> = shapes.iter().map(|d| rng.tensor(d, dtype)).collect();
    let xs: Vec<Tensor> = hosts
        .iter()
        .map(|h| Strided.from_host(h.clone()).expect("a stored dtype"))
        .collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let case = format!("{s:?} {shapes:?} {dtype}");
    let expected = plan
        .execute(&Strided, &refs)
        .and_then(|t| t.to_host())
        .map_err(|e| wrong(format!("{case}: {e}")))?;
    let pool = BufferPool::new();
    let results: Vec<Result<(HostTensor, HostTensor), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let one = einsum(&Strided, &s, &refs).and_then(|t| t.to_host());
                    let pooled = plan.execute_with(&Strided, &pool, &refs).and_then(|t| {
                        let h = t.to_host();
                        pool.free(t);
                        h
                    });
                    one.and_then(|a| pooled.map(|b| (a, b)))
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    for r in results {
        let (a, b) = r.map_err(|e| wrong(format!("{case}: {e}")))?;
        if a != expected || b != expected {
            return Err(wrong(format!("{case}: a thread got other values")));
        }
    }
    for (x, h) in xs.iter().zip(&hosts) {
        if Strided.to_host(x).ok().as_ref() != Some(h) {
            return Err(Finding::Mutated(format!("{case}: an operand changed")));
        }
    }
    Ok(())
}
