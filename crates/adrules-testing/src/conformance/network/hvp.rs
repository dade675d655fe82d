//! Second order of whole networks: each backend's network HVPs (forward over reverse)
//! against the five-point stencil on the reference backend's gradient, with the symmetry of
//! the Hessian, on random networks and on the `hvp` entries of `multi_dot.jsonl`.

use super::*;

/// The gradient of `φ = Re⟨c̄, N(x)⟩` for the active operands, in `Complex64`/`f64`
/// (operands and cotangent widened) on the naive [`ReferenceBackend`](crate::ReferenceBackend).
fn reference_gradient(
    plan: &NetworkPlan,
    x: &[Value],
    c_bar: &Value,
    active: &[bool],
) -> Result<Vec<Option<Value>>> {
    let be = crate::ReferenceBackend;
    let xs: Vec<std::sync::Arc<HostTensor>> = x
        .iter()
        .map(|v| be.from_host(v.widen().tensor("operand")?.clone()))
        .collect::<Result<_>>()?;
    let refs: Vec<&std::sync::Arc<HostTensor>> = xs.iter().collect();
    let (_, pullback) = plan.rrule(&be, &refs, active)?;
    let cbar = be.from_host(c_bar.widen().tensor("c_bar")?.clone())?;
    pullback
        .pullback(&cbar)?
        .into_iter()
        .map(|g| g.map(|g| Ok(Value::Tensor(be.to_host(&g)?))).transpose())
        .collect()
}

/// The HVP by the five-point stencil on the reference gradient along `v`:
/// `(−g(x+2hv) + 8g(x+hv) − 8g(x−hv) + g(x−2hv)) / 12h`, exact (up to rounding) for a gradient
/// polynomial of degree ≤ 4 along the line, which a network of at most five operands has.
fn stencil_hvp(
    plan: &NetworkPlan,
    x: &[Value],
    v: &[Value],
    c_bar: &Value,
    active: &[bool],
) -> Result<Vec<Option<Value>>> {
    let h = 0.5;
    let at = |t: f64| -> Result<Vec<Option<Value>>> {
        let xt: Vec<Value> = x
            .iter()
            .zip(v)
            .map(|(x, v)| x.widen().axpy(t, &v.widen()))
            .collect::<Result<_>>()?;
        reference_gradient(plan, &xt, c_bar, active)
    };
    let (p2, p1, m1, m2) = (at(2.0 * h)?, at(h)?, at(-h)?, at(-2.0 * h)?);
    (0..x.len())
        .map(|k| match (&p2[k], &p1[k], &m1[k], &m2[k]) {
            (Some(p2), Some(p1), Some(m1), Some(m2)) => {
                let s = m2.axpy(-1.0, p2)?.axpy(8.0, p1)?.axpy(-8.0, m1)?;
                let scaled: Vec<Complex64> =
                    s.to_c64_vec().iter().map(|z| z / (12.0 * h)).collect();
                Ok(Some(s.with_values(&scaled)?))
            }
            _ => Ok(None),
        })
        .collect()
}

/// Per operand, a value or none.
type Values = Vec<Option<Value>>;

/// `Re Σ_k ⟨a_k, b_k⟩` over the entries present in both.
fn real_inner(a: &[Option<Value>], b: &[Option<Value>]) -> Result<f64> {
    let mut s = 0.0;
    for (a, b) in a.iter().zip(b) {
        if let (Some(a), Some(b)) = (a, b) {
            s += a.widen().inner(&b.widen())?.re;
        }
    }
    Ok(s)
}

/// One random network's second order on the backend; `Err` describes the first failure.
fn check_network_hvp<B: Backend>(
    be: &B,
    rng: &mut Rng,
    net: &RandomNetwork,
    plan: &NetworkPlan,
    dtypes: &[DType],
    active: &[bool],
) -> std::result::Result<(), String> {
    use adrules_core::network::SecondOrder;
    let name = format!(
        "HVP of network {} conj {:?} dtypes {dtypes:?} active {active:?}",
        net.subscripts(),
        net.conj
    );
    let err = |e: Error| format!("{name}: {e}");
    let tolerance = tol(dtypes);
    let x: Vec<Value> = net
        .dims()
        .iter()
        .zip(dtypes)
        .map(|(d, &t)| Value::Tensor(rng.tensor(d, t)))
        .collect();
    let out_dtype = dtypes
        .iter()
        .copied()
        .reduce(DType::join)
        .unwrap_or(DType::F64);
    let out_dims = plan.output_dims().to_vec();
    let c_bar = Value::Tensor(rng.tensor(&out_dims, out_dtype));
    let direction = |rng: &mut Rng| -> Vec<Value> {
        x.iter()
            .zip(active)
            .map(|(v, &on)| {
                if on {
                    random_like(rng, v)
                } else {
                    zero_like(v)
                }
            })
            .collect()
    };
    let (v, u) = (direction(rng), direction(rng));
    let upload = |v: &Value| be.from_host(v.tensor("tensor")?.clone());
    let xs: Vec<B::Tensor> = x.iter().map(upload).collect::<Result<_>>().map_err(err)?;
    let refs: Vec<&B::Tensor> = xs.iter().collect();
    let cbar_dev = upload(&c_bar).map_err(err)?;
    let hvp_of = |dir: &[Value], gradient: bool| -> Result<(Values, Values)> {
        let dev: Vec<Option<B::Tensor>> = dir
            .iter()
            .zip(active)
            .map(|(d, &on)| on.then(|| upload(d)).transpose())
            .collect::<Result<_>>()?;
        let tangents: Vec<Option<&B::Tensor>> = dev.iter().map(Option::as_ref).collect();
        let request = SecondOrder {
            c_bar: &cbar_dev,
            c_bar_dot: None,
            tangents: &tangents,
            active,
            gradient,
        };
        let r = plan.second_order(be, &adrules_core::HeapAllocator, &refs, &request)?;
        let host = |ts: Vec<Option<B::Tensor>>| -> Result<Vec<Option<Value>>> {
            ts.into_iter()
                .map(|t| t.map(|t| Ok(Value::Tensor(be.to_host(&t)?))).transpose())
                .collect()
        };
        Ok((host(r.hvp)?, host(r.gradient)?))
    };
    let (hv, grad) = hvp_of(&v, true).map_err(err)?;
    let (hu, _) = hvp_of(&u, false).map_err(err)?;
    // the gradient that comes with the HVP is the first-order pullback
    let want_grad = reference_gradient(plan, &x, &c_bar, active).map_err(err)?;
    // the HVP against the stencil on the reference gradient
    let want_hv = stencil_hvp(plan, &x, &v, &c_bar, active).map_err(err)?;
    for k in 0..x.len() {
        match (&hv[k], &want_hv[k], &grad[k], &want_grad[k]) {
            (None, None, None, None) if !active[k] => {}
            (Some(h), Some(wh), Some(g), Some(wg)) if active[k] => {
                if h.dtype() != x[k].dtype() {
                    return Err(format!("{name}: HVP {k} has dtype {}", h.dtype()));
                }
                let (eh, eg) = (rel_err(h, wh), rel_err(g, wg));
                if eh > tolerance || eg > tolerance {
                    return Err(format!(
                        "{name}: operand {k}: HVP error {eh:.2e}, gradient error {eg:.2e} (tolerance {tolerance:.0e})"
                    ));
                }
            }
            _ => return Err(format!("{name}: operand {k}: wrong set of results")),
        }
    }
    // symmetry of the Hessian: Re⟨u, H·v⟩ = Re⟨H·u, v⟩
    let wrap = |d: &[Value]| -> Vec<Option<Value>> { d.iter().cloned().map(Some).collect() };
    let (uhv, huv) = (
        real_inner(&wrap(&u), &hv).map_err(err)?,
        real_inner(&hu, &wrap(&v)).map_err(err)?,
    );
    let scale = uhv.abs().max(huv.abs()).max(1e-300);
    if (uhv - huv).abs() > 10.0 * tolerance * scale.max(1.0) {
        return Err(format!("{name}: ⟨u, Hv⟩ = {uhv} but ⟨Hu, v⟩ = {huv}"));
    }
    Ok(())
}

/// Second order of random networks on the backend ([`NetworkPlan::second_order`]): the
/// random networks of [`network_rules`] (batch labels, hyperedges, traces, conjugation flags,
/// mixed real/complex operands, random active subsets), checking
/// - the HVP of `φ = Re⟨c̄, N(x)⟩` against a five-point stencil on the reference gradient
///   (exact for these polynomials up to rounding), in the per-dtype tolerance;
/// - the gradient returned with it against the first-order pullback;
/// - the symmetry of the Hessian, `Re⟨u, H·v⟩ = Re⟨H·u, v⟩`, for random `u`, `v`.
///
/// # Panics
/// With the failing networks; when no network fits the config.
pub fn network_hvp<B: Backend>(be: &B, cfg: &Config) {
    let runs = RandomRuns {
        seed: 15,
        per_dtype: 4,
        mixed: 2,
        all_active_every: 2,
    };
    runs.run(cfg, |rng, net, plan, dtypes, active| {
        check_network_hvp(be, rng, net, plan, dtypes, active)
    });
}

/// The `hvp` entries of the oracle `multi_dot.jsonl` (PyTorch's `H_φ·v` and central
/// differences of its gradient, complex128 and float64) as one network, through
/// [`NetworkPlan::hvp`] on the backend: in the file's dtype within
/// [`OracleCase::second_order_tolerance`](crate::oracle::OracleCase::second_order_tolerance),
/// and, where the backend has the single-precision dtype, the same case rounded to f32 /
/// complex64 against the same references within the single-precision tolerance.
///
/// # Panics
/// On the first mismatch; when the oracle file is missing or no case with HVPs fits the
/// config.
pub fn multi_dot_hvp<B: Backend>(be: &B, cfg: &Config) {
    let dir = crate::oracle::oracle_dir();
    let cases = crate::oracle::load(&dir.join("multi_dot.jsonl")).unwrap();
    let mut ran = 0;
    for case in cases
        .iter()
        .filter(|c| c.probes.iter().any(|p| !p.hvp.is_empty()))
    {
        let single = if case.dtype.is_complex() {
            DType::C32
        } else {
            DType::F32
        };
        for dtype in [case.dtype, single] {
            if !cfg.dtypes.contains(&dtype) {
                continue;
            }
            let tol = if dtype == case.dtype {
                case.second_order_tolerance()
            } else {
                crate::Tolerance::for_dtype(dtype)
            };
            let inputs = case.inputs_in_order();
            let k = inputs.len();
            let words: Vec<String> = (0..k)
                .map(|i| format!("{}{}", letter(i), letter(i + 1)))
                .collect();
            let subscripts = format!("{}->{}{}", words.join(","), letter(0), letter(k));
            let net = Network::einsum(&subscripts).unwrap();
            let dims: Vec<&[usize]> = inputs.iter().map(|t| t.dims()).collect();
            let plan = NetworkPlan::new(&net, &dims, &Order::Default).unwrap();
            let up = |t: &HostTensor| be.from_host(t.to_dtype_projected(dtype)).unwrap();
            let xs: Vec<B::Tensor> = inputs.iter().map(|t| up(t)).collect();
            let refs: Vec<&B::Tensor> = xs.iter().collect();
            let names: Vec<&String> = case.inputs.keys().collect();
            for probe in &case.probes {
                let dirs: Vec<B::Tensor> = names.iter().map(|n| up(&probe.direction[*n])).collect();
                let tangents: Vec<Option<&B::Tensor>> = dirs.iter().map(Some).collect();
                let cbar = up(&probe.cotangent);
                let r = plan
                    .hvp(be, &refs, &cbar, &tangents, &vec![true; k])
                    .unwrap_or_else(|e| panic!("{} ({dtype}): {e}", case.id));
                for (n, h) in names.iter().zip(r.hvp) {
                    let got = be.to_host(&h.expect("active")).unwrap();
                    let got = Value::Tensor(got.to_dtype_projected(case.dtype));
                    for (what, want) in [
                        ("PyTorch", &probe.hvp),
                        ("finite differences", &probe.fd_hvp),
                    ] {
                        let Some(want) = want.get(*n) else { continue };
                        // finite differences carry their own error: the file's tolerance
                        let t = if what == "PyTorch" {
                            tol
                        } else {
                            tol.max(case.second_order.unwrap_or(tol))
                        };
                        t.check(
                            &got,
                            &Value::Tensor(want.clone()),
                            &format!("{} ({dtype}) HVP {n} vs {what}", case.id),
                        )
                        .unwrap_or_else(|e| panic!("{e}"));
                    }
                }
            }
            ran += 1;
        }
    }
    assert!(
        ran > 0,
        "no multi_dot case with HVPs has a dtype this backend supports"
    );
}
