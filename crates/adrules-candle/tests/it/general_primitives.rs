//! What the conformance suite cannot see of the generalized primitives on [`CandleBackend`]
//! (the suite's `general` group checks every pattern of its lists on contiguous tensors): the
//! same patterns on non-contiguous candle tensors (reversed strides, and one strided operand
//! beside a contiguous one) against the naive [`ReferenceBackend`], for f32 and f64, several
//! α and β (β = 0 with a NaN-filled C: nothing may leak); then the differentiable ops
//! ([`adrules_candle::trace`], [`adrules_candle::contract`]) through candle's own backward
//! pass against the reference pullback and finite differences.
//!
//! The storage-level forward of CUDA and Metal (`kernel.rs`) is tested on CPU storage against
//! the strided kernels by the unit tests of `src/cpu.rs`.

use std::sync::Arc;

use adrules_candle::{CandleBackend, contract, trace};
use adrules_core::rules::{Activity, ContractOp, TraceOp};
use adrules_core::{
    Backend, Conj, ContractSpec, DType, DynScalar, HostData, HostTensor, TraceSpec,
};
use adrules_testing::conformance::general::{CONTRACTIONS, TRACES};
use adrules_testing::{FiniteDifference, ReferenceBackend, Rng, Tolerance, Value};
use candle_core::{Tensor, Var};

fn be() -> CandleBackend {
    CandleBackend::cpu()
}

fn up(h: &HostTensor) -> Tensor {
    be().from_host(h.clone()).unwrap()
}

/// The same values as [`up`], laid out with reversed strides (a non-contiguous view).
fn up_strided(h: &HostTensor) -> Tensor {
    let rev: Vec<usize> = (0..h.dims().len()).rev().collect();
    let t = up(h).permute(rev.clone()).unwrap().contiguous().unwrap();
    t.permute(rev).unwrap()
}

fn down(t: &Tensor) -> HostTensor {
    be().to_host(t).unwrap()
}

fn refer(h: &HostTensor) -> Arc<HostTensor> {
    Arc::new(h.clone())
}

fn nan(dims: &[usize], dtype: DType) -> HostTensor {
    let n = dims.iter().product();
    let data = match dtype {
        DType::F32 => HostData::F32(vec![f32::NAN; n]),
        _ => HostData::F64(vec![f64::NAN; n]),
    };
    HostTensor::new(dims, data).unwrap()
}

fn check(dtype: DType, got: &HostTensor, want: &HostTensor, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}: dims");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    if let Ok(v) = got.as_slice::<f64>() {
        assert!(v.iter().all(|x| x.is_finite()), "{what}: NaN or inf");
    }
    if let Ok(v) = got.as_slice::<f32>() {
        assert!(v.iter().all(|x| x.is_finite()), "{what}: NaN or inf");
    }
    Tolerance::for_dtype(dtype)
        .check(
            &Value::Tensor(got.clone()),
            &Value::Tensor(want.clone()),
            what,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn coefficients(dtype: DType) -> Vec<(DynScalar, DynScalar)> {
    let s = |x: f64| DynScalar::F64(x).cast(dtype, "x").unwrap();
    vec![
        (s(1.0), s(0.0)),
        (s(-0.75), s(0.0)),
        (s(1.5), s(1.0)),
        (s(0.5), s(-2.0)),
    ]
}

#[test]
fn trace_matches_reference() {
    let mut rng = Rng::seed(31);
    let (cb, rb) = (be(), ReferenceBackend);
    for dtype in [DType::F64, DType::F32] {
        for &(la, lc, dims) in TRACES {
            let spec = TraceSpec::from_labels(la, lc).unwrap();
            let out = spec.output_dims(dims).unwrap();
            let a = rng.tensor(dims, dtype);
            let c0 = rng.tensor(&out, dtype);
            for (alpha, beta) in coefficients(dtype) {
                let c_in = if beta.is_zero() {
                    nan(&out, dtype)
                } else {
                    c0.clone()
                };
                let mut want = refer(&c_in);
                rb.trace(&mut want, &refer(&a), &spec, Conj::No, alpha, beta)
                    .unwrap();
                let mut got = up(&c_in);
                cb.trace(&mut got, &up_strided(&a), &spec, Conj::No, alpha, beta)
                    .unwrap();
                let what = format!("{la}->{lc} {dtype} strided α={alpha:?} β={beta:?}");
                check(dtype, &down(&got), &want, &what);
            }
        }
    }
}

#[test]
fn add_to_diagonal_matches_reference() {
    let mut rng = Rng::seed(32);
    let (cb, rb) = (be(), ReferenceBackend);
    for dtype in [DType::F64, DType::F32] {
        for &(la, lc, dims) in TRACES {
            let spec = TraceSpec::from_labels(la, lc).unwrap();
            let out = spec.output_dims(dims).unwrap();
            let a = rng.tensor(dims, dtype);
            let c = rng.tensor(&out, dtype);
            for alpha in [1.0, -0.5, 2.0] {
                let alpha = DynScalar::F64(alpha).cast(dtype, "alpha").unwrap();
                let mut want = refer(&a);
                rb.add_to_diagonal(&mut want, &refer(&c), &spec, Conj::No, alpha)
                    .unwrap();
                for (layout, ct) in [("A strided", up(&c)), ("A and C strided", up_strided(&c))] {
                    let mut got = up_strided(&a);
                    cb.add_to_diagonal(&mut got, &ct, &spec, Conj::No, alpha)
                        .unwrap();
                    let what = format!("add_to_diagonal {la}->{lc} {dtype} {layout} α={alpha:?}");
                    check(dtype, &down(&got), &want, &what);
                }
            }
        }
    }
    // Mixed dtypes: an f32 A gets the f64 update rounded to f32.
    let spec = TraceSpec::from_labels("bii", "bi").unwrap();
    let a = rng.tensor(&[2, 3, 3], DType::F32);
    let c = rng.tensor(&[2, 3], DType::F64);
    let mut want = refer(&a);
    rb.add_to_diagonal(&mut want, &refer(&c), &spec, Conj::No, 0.3.into())
        .unwrap();
    let mut got = up(&a);
    cb.add_to_diagonal(&mut got, &up(&c), &spec, Conj::No, 0.3.into())
        .unwrap();
    check(DType::F32, &down(&got), &want, "add_to_diagonal f32 += f64");
}

#[test]
fn contract_matches_reference() {
    let mut rng = Rng::seed(33);
    let (cb, rb) = (be(), ReferenceBackend);
    for dtype in [DType::F64, DType::F32] {
        for &(la, lb, lc, da, db) in CONTRACTIONS {
            let spec = ContractSpec::from_labels(la, lb, lc).unwrap();
            let out = spec.output_dims(da, db).unwrap();
            let (a, b) = (rng.tensor(da, dtype), rng.tensor(db, dtype));
            let c0 = rng.tensor(&out, dtype);
            for (alpha, beta) in coefficients(dtype) {
                let c_in = if beta.is_zero() {
                    nan(&out, dtype)
                } else {
                    c0.clone()
                };
                let mut want = refer(&c_in);
                rb.contract(
                    &mut want,
                    &refer(&a),
                    &refer(&b),
                    &spec,
                    Conj::No,
                    Conj::No,
                    alpha,
                    beta,
                )
                .unwrap();
                for (layout, at, bt) in [
                    ("strided", up_strided(&a), up_strided(&b)),
                    ("mixed", up(&a), up_strided(&b)),
                ] {
                    let mut got = up(&c_in);
                    cb.contract(&mut got, &at, &bt, &spec, Conj::No, Conj::No, alpha, beta)
                        .unwrap();
                    let what = format!("{la},{lb}->{lc} {dtype} {layout} α={alpha:?} β={beta:?}");
                    check(dtype, &down(&got), &want, &what);
                }
            }
        }
    }
}

/// `L = Σ f(x)·W` and `∂L/∂x` by candle's backward pass.
fn grads_of(f: &dyn Fn(&[Tensor]) -> Tensor, x: &[HostTensor], w: &HostTensor) -> Vec<HostTensor> {
    let vars: Vec<Var> = x
        .iter()
        .map(|h| Var::from_tensor(&up(h)).unwrap())
        .collect();
    let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let loss = f(&ts).mul(&up(w)).unwrap().sum_all().unwrap();
    let g = loss.backward().unwrap();
    ts.iter().map(|t| down(g.get(t).unwrap())).collect()
}

/// `⟨W, J·dx⟩` by central differences of `f` at `x`, along `dx`.
fn fd_directional(
    f: &dyn Fn(&[Tensor]) -> Tensor,
    x: &[HostTensor],
    dx: &[HostTensor],
    w: &HostTensor,
) -> f64 {
    let xv: Vec<Value> = x.iter().cloned().map(Value::Tensor).collect();
    let dv: Vec<Value> = dx.iter().cloned().map(Value::Tensor).collect();
    let fv = |v: &[Value]| {
        let t: Vec<Tensor> = v.iter().map(|v| up(v.tensor("x").unwrap())).collect();
        Ok(Value::Tensor(down(&f(&t))))
    };
    let jvp = FiniteDifference::default().jvp(fv, &xv, &dv).unwrap();
    Value::Tensor(w.clone()).inner(&jvp).unwrap().re
}

/// The differentiable ops through candle's own backward: batched contractions and
/// diagonals, against the reference pullback and finite differences.
#[test]
fn autodiff_through_candle_matches_reference_and_fd() {
    let mut rng = Rng::seed(35);
    let rb = ReferenceBackend;
    let dtype = DType::F64;
    for &(la, lb, lc, da, db) in &CONTRACTIONS[..5] {
        let op = ContractOp::new(ContractSpec::from_labels(la, lb, lc).unwrap()).alpha(1.25);
        let out = op.spec.output_dims(da, db).unwrap();
        let x = [rng.tensor(da, dtype), rng.tensor(db, dtype)];
        let w = rng.tensor(&out, dtype);
        let f = |t: &[Tensor]| contract(&op, &t[0], &t[1]).unwrap();
        let g = grads_of(&f, &x, &w);
        let mut c = rb.zeros(&out, dtype).unwrap();
        let want = op
            .rrule(
                &rb,
                &mut c,
                &refer(&x[0]),
                &refer(&x[1]),
                Activity::OPERANDS,
            )
            .unwrap()
            .pullback(&refer(&w))
            .unwrap();
        let what = format!("candle backward {la},{lb}->{lc}");
        check(dtype, &g[0], &want.a.unwrap(), &format!("{what}: Ā"));
        check(dtype, &g[1], &want.b.unwrap(), &format!("{what}: B̄"));
        let dx = [rng.tensor(da, dtype), rng.tensor(db, dtype)];
        let lhs = fd_directional(&f, &x, &dx, &w);
        let rhs: f64 = g
            .iter()
            .zip(&dx)
            .map(|(g, d)| {
                Value::Tensor(g.clone())
                    .inner(&Value::Tensor(d.clone()))
                    .unwrap()
                    .re
            })
            .sum();
        assert!(
            (lhs - rhs).abs() <= 1e-8 * (1.0 + lhs.abs()),
            "{what}: FD {lhs} vs {rhs}"
        );
    }
    for &(la, lc, dims) in &TRACES[..4] {
        let op = TraceOp::new(TraceSpec::from_labels(la, lc).unwrap()).alpha(-0.6);
        let out = op.spec.output_dims(dims).unwrap();
        let x = [rng.tensor(dims, dtype)];
        let w = rng.tensor(&out, dtype);
        let f = |t: &[Tensor]| trace(&op, &t[0]).unwrap();
        let g = grads_of(&f, &x, &w);
        let mut c = rb.zeros(&out, dtype).unwrap();
        let want = op
            .rrule(&rb, &mut c, &refer(&x[0]), Activity::OPERANDS)
            .unwrap()
            .pullback(&refer(&w))
            .unwrap();
        let what = format!("candle backward {la}->{lc}");
        check(dtype, &g[0], &want.a.unwrap(), &format!("{what}: Ā"));
        let dx = [rng.tensor(dims, dtype)];
        let lhs = fd_directional(&f, &x, &dx, &w);
        let rhs = Value::Tensor(g[0].clone())
            .inner(&Value::Tensor(dx[0].clone()))
            .unwrap()
            .re;
        assert!(
            (lhs - rhs).abs() <= 1e-8 * (1.0 + lhs.abs()),
            "{what}: FD {lhs} vs {rhs}"
        );
    }
}
