//! The differentiable candle ops against three independent references, on the same inputs:
//! - the shared rules on the naive [`ReferenceBackend`] and on the strided CPU backend
//!   (primal and pullback);
//! - central finite differences of the op's own forward (adrules-testing);
//! - candle's autograd of the same computation written with permute/reshape/matmul.
//!
//! Plus strided (non-contiguous) inputs, mixed dtypes, a tensor used twice, and typed errors.

use adrules_candle::{CandleBackend, add, adrules_error, contract, trace};
use adrules_core::rules::{Activity, AddOp, ContractOp, TraceOp};
use adrules_core::{
    Backend, Conj, ContractSpec, DType, DynScalar, Error, HostTensor, Permutation, TraceSpec,
};
use adrules_strided::Strided;
use adrules_testing::{FiniteDifference, ReferenceBackend, Rng, Tolerance, Value};
use candle_core::{Device, Tensor, Var};

/// One op under test (a test value: its size does not matter).
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
enum Case {
    Add(AddOp, Vec<usize>),
    Trace(TraceOp, Vec<usize>),
    Contract(ContractOp, Vec<usize>, Vec<usize>),
}

fn be() -> CandleBackend {
    CandleBackend::cpu()
}

fn up(h: &HostTensor) -> Tensor {
    be().from_host(h.clone()).unwrap()
}

fn down(t: &Tensor) -> HostTensor {
    be().to_host(t).unwrap()
}

impl Case {
    fn name(&self) -> String {
        format!("{self:?}")
    }

    fn input_dims(&self) -> Vec<Vec<usize>> {
        match self {
            Case::Add(_, a) | Case::Trace(_, a) => vec![a.clone()],
            Case::Contract(_, a, b) => vec![a.clone(), b.clone()],
        }
    }

    fn output_dims(&self) -> Vec<usize> {
        match self {
            Case::Add(op, a) => op.perm.apply(a).to_vec(),
            Case::Trace(op, a) => op.spec.output_dims(a).unwrap().to_vec(),
            Case::Contract(op, a, b) => op.spec.output_dims(a, b).unwrap().to_vec(),
        }
    }

    fn alpha(&self) -> f64 {
        match self {
            Case::Add(op, _) => op.alpha.re(),
            Case::Trace(op, _) => op.alpha.re(),
            Case::Contract(op, _, _) => op.alpha.re(),
        }
    }

    /// Our differentiable op.
    fn ours(&self, x: &[Tensor]) -> Tensor {
        match self {
            Case::Add(op, _) => add(op, &x[0]).unwrap(),
            Case::Trace(op, _) => trace(op, &x[0]).unwrap(),
            Case::Contract(op, _, _) => contract(op, &x[0], &x[1]).unwrap(),
        }
    }

    /// The same computation from candle's own differentiable ops.
    fn composed(&self, x: &[Tensor]) -> Tensor {
        let out = match self {
            Case::Add(op, _) => x[0].permute(op.perm.as_slice()).unwrap(),
            Case::Trace(op, a) => {
                // Group the axes (kept, then summed), flatten each group of g axes of
                // dimension n to n^g entries, select its diagonal (every d-th entry, d = 1 +
                // n + … + n^(g−1)), then sum the summed groups.
                let s = &op.spec;
                let groups: Vec<&[usize]> = s
                    .kept()
                    .iter()
                    .chain(s.summed())
                    .map(|g| g.as_slice())
                    .collect();
                let order: Vec<usize> = groups.concat();
                let flat: Vec<usize> = groups.iter().map(|g| a[g[0]].pow(g.len() as u32)).collect();
                let mut t = x[0].permute(order).unwrap().reshape(flat).unwrap();
                for (axis, g) in groups.iter().enumerate() {
                    let n = a[g[0]];
                    let d: usize = (0..g.len()).map(|j| n.pow(j as u32)).sum();
                    let idx: Vec<u32> = (0..n).map(|i| (i * d) as u32).collect();
                    let idx = Tensor::new(idx.as_slice(), &Device::Cpu).unwrap();
                    t = t.index_select(&idx, axis).unwrap();
                }
                let summed: Vec<usize> = (s.rank_c()..groups.len()).collect();
                if summed.is_empty() {
                    t
                } else {
                    t.sum(summed).unwrap()
                }
            }
            Case::Contract(op, a, b) => {
                let s = &op.spec;
                let size = |d: &[usize], ax: &[usize]| ax.iter().map(|&i| d[i]).product::<usize>();
                let (l, m, k, n) = (
                    size(a, s.batch_a()),
                    size(a, s.open_a()),
                    size(a, s.contr_a()),
                    size(b, s.open_b()),
                );
                let pa: Vec<usize> = [s.batch_a(), s.open_a(), s.contr_a()].concat();
                let pb: Vec<usize> = [s.batch_b(), s.contr_b(), s.open_b()].concat();
                let inter: Vec<usize> = s
                    .batch_a()
                    .iter()
                    .chain(s.open_a())
                    .map(|&i| a[i])
                    .chain(s.open_b().iter().map(|&j| b[j]))
                    .collect();
                let dtype = if x[0].dtype() == x[1].dtype() {
                    x[0].dtype()
                } else {
                    candle_core::DType::F64
                };
                let am = x[0]
                    .to_dtype(dtype)
                    .unwrap()
                    .permute(pa)
                    .unwrap()
                    .reshape((l, m, k))
                    .unwrap();
                let bm = x[1]
                    .to_dtype(dtype)
                    .unwrap()
                    .permute(pb)
                    .unwrap()
                    .reshape((l, k, n))
                    .unwrap();
                am.matmul(&bm)
                    .and_then(|c| c.reshape(inter))
                    .and_then(|c| c.permute(s.perm_ab().as_slice()))
                    .unwrap()
            }
        };
        out.affine(self.alpha(), 0.0).unwrap()
    }

    /// Primal and cotangents of the shared rules on another backend (the naive reference, or
    /// the strided CPU backend).
    fn rules<B: Backend>(
        &self,
        rb: &B,
        x: &[HostTensor],
        cbar: &HostTensor,
    ) -> (HostTensor, Vec<HostTensor>) {
        let xs: Vec<_> = x.iter().map(|h| rb.from_host(h.clone()).unwrap()).collect();
        let dtype = x.iter().map(|h| h.dtype()).fold(DType::F32, DType::join);
        let mut c = rb.zeros(&self.output_dims(), dtype).unwrap();
        let cb = rb.from_host(cbar.clone()).unwrap();
        let cot = match self {
            Case::Add(op, _) => op
                .rrule(rb, &mut c, &xs[0], Activity::OPERANDS)
                .unwrap()
                .pullback(&cb),
            Case::Trace(op, _) => op
                .rrule(rb, &mut c, &xs[0], Activity::OPERANDS)
                .unwrap()
                .pullback(&cb),
            Case::Contract(op, _, _) => op
                .rrule(rb, &mut c, &xs[0], &xs[1], Activity::OPERANDS)
                .unwrap()
                .pullback(&cb),
        }
        .unwrap();
        let grads = [cot.a, cot.b]
            .into_iter()
            .take(x.len())
            .map(|g| rb.to_host(&g.unwrap()).unwrap())
            .collect();
        (rb.to_host(&c).unwrap(), grads)
    }
}

/// `L = Σ f(x)·W` and `∂L/∂x` by candle's backward pass.
fn loss_and_grads(
    f: &dyn Fn(&[Tensor]) -> Tensor,
    x: &[Tensor],
    w: &Tensor,
) -> (Tensor, Vec<HostTensor>) {
    let vars: Vec<Var> = x.iter().map(|t| Var::from_tensor(t).unwrap()).collect();
    let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let out = f(&ts);
    let loss = out
        .to_dtype(w.dtype())
        .unwrap()
        .mul(w)
        .unwrap()
        .sum_all()
        .unwrap();
    let grads = loss.backward().unwrap();
    let g = ts
        .iter()
        .map(|t| down(grads.get(t).expect("every input receives a gradient")))
        .collect();
    (out, g)
}

fn tol(dtype: DType) -> Tolerance {
    Tolerance::for_dtype(dtype)
}

fn check(t: Tolerance, got: &HostTensor, want: &HostTensor, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    t.check(
        &Value::Tensor(got.clone()),
        &Value::Tensor(want.clone()),
        what,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn cases(rng: &mut Rng) -> Vec<Case> {
    let mut al = || DynScalar::F64(rng.normal());
    vec![
        Case::Add(
            AddOp::new(Permutation::new(&[1, 0, 3, 2, 4]).unwrap()).alpha(al()),
            vec![2, 3, 4, 2, 1],
        ),
        Case::Add(AddOp::new(Permutation::identity(0)), vec![]),
        Case::Trace(
            TraceOp::new(TraceSpec::new(&[2, 4, 1], &[0], &[3]).unwrap()).alpha(al()),
            vec![2, 3, 4, 2, 5],
        ),
        Case::Trace(
            TraceOp::new(TraceSpec::new(&[1], &[0, 2], &[3, 4]).unwrap()).alpha(al()),
            vec![2, 3, 4, 2, 4],
        ),
        Case::Trace(
            TraceOp::new(TraceSpec::new(&[], &[0, 1], &[2, 3]).unwrap()),
            vec![3, 2, 3, 2],
        ),
        Case::Contract(
            ContractOp::new(
                ContractSpec::new(&[1, 3, 4], &[0, 2], &[1, 0], &[2], &[2, 1, 3, 0]).unwrap(),
            )
            .alpha(al())
            .conj(Conj::Yes, Conj::No),
            vec![2, 3, 4, 2, 5],
            vec![4, 2, 3],
        ),
        Case::Contract(
            ContractOp::new(ContractSpec::from_labels("abcd", "cdef", "abef").unwrap()),
            vec![3, 2, 4, 3],
            vec![4, 3, 2, 5],
        ),
        Case::Contract(
            ContractOp::new(ContractSpec::from_labels("ij", "jk", "ki").unwrap()).alpha(al()),
            vec![3, 4],
            vec![4, 5],
        ),
        Case::Contract(
            ContractOp::new(ContractSpec::from_labels("ij", "k", "kji").unwrap()),
            vec![2, 3],
            vec![4],
        ),
        Case::Contract(
            ContractOp::new(ContractSpec::from_labels("abc", "cd", "dab").unwrap()).alpha(al()),
            vec![2, 3, 4],
            vec![4, 5],
        ),
        Case::Contract(
            ContractOp::new(ContractSpec::from_labels("ij", "k", "kij").unwrap()),
            vec![2, 3],
            vec![4],
        ),
        Case::Contract(
            ContractOp::new(ContractSpec::from_labels("ij", "ji", "").unwrap()),
            vec![3, 4],
            vec![4, 3],
        ),
        Case::Contract(
            ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap()),
            vec![3, 0],
            vec![0, 2],
        ),
        // Generalized traces: a batched diagonal, a hypertrace with a kept axis, a sum.
        Case::Trace(
            TraceOp::new(TraceSpec::from_labels("bii", "bi").unwrap()).alpha(al()),
            vec![2, 3, 3],
        ),
        Case::Trace(
            TraceOp::new(TraceSpec::from_labels("iijik", "kj").unwrap()),
            vec![3, 3, 2, 3, 4],
        ),
        Case::Trace(
            TraceOp::new(TraceSpec::from_labels("ijk", "j").unwrap()).alpha(al()),
            vec![2, 3, 4],
        ),
        // Batched contractions, with the batch labels permuted in C.
        Case::Contract(
            ContractOp::new(ContractSpec::from_labels("bhqd", "bhkd", "bhqk").unwrap()).alpha(al()),
            vec![2, 2, 3, 4],
            vec![2, 2, 5, 4],
        ),
        Case::Contract(
            ContractOp::new(ContractSpec::from_labels("ibj", "bjk", "kbi").unwrap()),
            vec![3, 2, 4],
            vec![2, 4, 5],
        ),
    ]
}

#[test]
fn ops_match_reference_rules_and_candle_autograd() {
    let mut rng = Rng::seed(11);
    for dtype in [DType::F64, DType::F32] {
        for case in cases(&mut rng) {
            let name = format!("{} {dtype}", case.name());
            let xh: Vec<HostTensor> = case
                .input_dims()
                .iter()
                .map(|d| rng.tensor(d, dtype))
                .collect();
            let wh = rng.tensor(&case.output_dims(), dtype);
            let x: Vec<Tensor> = xh.iter().map(up).collect();
            let (out, g) = loss_and_grads(&|x| case.ours(x), &x, &up(&wh));
            for (label, (want_c, want_g)) in [
                ("reference", case.rules(&ReferenceBackend, &xh, &wh)),
                ("strided", case.rules(&Strided, &xh, &wh)),
            ] {
                check(
                    tol(dtype),
                    &down(&out),
                    &want_c,
                    &format!("{name}: primal vs {label}"),
                );
                for (i, (g, w)) in g.iter().zip(&want_g).enumerate() {
                    check(
                        tol(dtype),
                        g,
                        w,
                        &format!("{name}: gradient {i} vs the {label} backend's rules"),
                    );
                }
            }
            let (out2, g2) = loss_and_grads(&|x| case.composed(x), &x, &up(&wh));
            check(
                tol(dtype),
                &down(&out),
                &down(&out2),
                &format!("{name}: primal vs candle"),
            );
            for (i, (g, w)) in g.iter().zip(&g2).enumerate() {
                check(
                    tol(dtype),
                    g,
                    w,
                    &format!("{name}: gradient {i} vs candle autograd"),
                );
            }
        }
    }
}

#[test]
fn gradients_match_finite_differences() {
    let mut rng = Rng::seed(12);
    for case in cases(&mut rng) {
        let xh: Vec<HostTensor> = case
            .input_dims()
            .iter()
            .map(|d| rng.tensor(d, DType::F64))
            .collect();
        let wh = rng.tensor(&case.output_dims(), DType::F64);
        let x: Vec<Tensor> = xh.iter().map(up).collect();
        let (_, g) = loss_and_grads(&|x| case.ours(x), &x, &up(&wh));
        let xv: Vec<Value> = xh.iter().cloned().map(Value::Tensor).collect();
        let f = |v: &[Value]| {
            let t: Vec<Tensor> = v.iter().map(|v| up(v.tensor("x").unwrap())).collect();
            Ok(Value::Tensor(down(&case.ours(&t))))
        };
        for i in 0..xh.len() {
            let dx: Vec<Value> = xh
                .iter()
                .enumerate()
                .map(|(j, h)| {
                    let d = Value::Tensor(rng.tensor(h.dims(), DType::F64));
                    if i == j { d } else { d.axpy(-1.0, &d).unwrap() }
                })
                .collect();
            let jvp = FiniteDifference::default().jvp(f, &xv, &dx).unwrap();
            let lhs = Value::Tensor(wh.clone()).inner(&jvp).unwrap().re;
            let rhs = Value::Tensor(g[i].clone()).inner(&dx[i]).unwrap().re;
            let scale = 1.0 + lhs.abs();
            assert!(
                (lhs - rhs).abs() <= 1e-8 * scale,
                "{}: input {i}: FD {lhs} vs gradient {rhs}",
                case.name()
            );
        }
    }
}

/// Inputs that are views (transposed, narrowed with an offset, broadcast with stride 0) give
/// the same values and gradients as their contiguous copies.
#[test]
fn strided_views_are_read_in_place() {
    let mut rng = Rng::seed(13);
    let base = up(&rng.tensor(&[6, 5, 4], DType::F64));
    // A (4, 3, 5) view with an offset and non-trivial strides.
    let a_view = base.narrow(0, 2, 3).unwrap().permute((2, 0, 1)).unwrap();
    assert!(!a_view.is_contiguous());
    let b_row = up(&rng.tensor(&[5, 1], DType::F64));
    let b_view = b_row.broadcast_as((5, 7)).unwrap(); // stride 0 along axis 1
    let op = ContractOp::new(ContractSpec::from_labels("xyz", "zw", "wyx").unwrap()).alpha(0.5);
    let wh = rng.tensor(&[7, 3, 4], DType::F64);
    let (out_v, g_v) = loss_and_grads(
        &|x| contract(&op, &x[0], &x[1]).unwrap(),
        &[a_view.clone(), b_view.clone()],
        &up(&wh),
    );
    let (a_c, b_c) = (a_view.contiguous().unwrap(), b_view.contiguous().unwrap());
    let (out_c, g_c) = loss_and_grads(
        &|x| contract(&op, &x[0], &x[1]).unwrap(),
        &[a_c, b_c],
        &up(&wh),
    );
    check(
        tol(DType::F64),
        &down(&out_v),
        &down(&out_c),
        "primal of views",
    );
    for (i, (v, c)) in g_v.iter().zip(&g_c).enumerate() {
        check(tol(DType::F64), v, c, &format!("gradient {i} of views"));
    }
    let top = TraceOp::new(TraceSpec::new(&[1], &[0], &[2]).unwrap());
    let sq = base
        .narrow(1, 1, 4)
        .unwrap()
        .permute((2, 0, 1))
        .unwrap()
        .narrow(1, 0, 4)
        .unwrap(); // (4, 4, 4)
    let t_v = trace(&top, &sq).unwrap();
    let t_c = trace(&top, &sq.contiguous().unwrap()).unwrap();
    check(tol(DType::F64), &down(&t_v), &down(&t_c), "trace of a view");
}

/// A tensor used twice (both operands of one contraction, and again in a second op) receives
/// the sum of every contribution, as in candle's own autograd.
#[test]
fn gradients_accumulate_over_uses() {
    let mut rng = Rng::seed(14);
    let xh = rng.tensor(&[4, 4], DType::F64);
    let wh = rng.tensor(&[4, 4], DType::F64);
    let mm = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap());
    let tr = TraceOp::new(TraceSpec::new(&[], &[0], &[1]).unwrap()).alpha(3.0);
    let ours = |x: &[Tensor]| {
        let y = contract(&mm, &x[0], &x[0]).unwrap();
        y.broadcast_add(&trace(&tr, &x[0]).unwrap()).unwrap()
    };
    let theirs = |x: &[Tensor]| {
        let y = x[0].matmul(&x[0]).unwrap();
        let t = (x[0]
            .mul(&Tensor::eye(4, candle_core::DType::F64, &Device::Cpu).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            * 3.0)
            .unwrap();
        y.broadcast_add(&t).unwrap()
    };
    let (_, g1) = loss_and_grads(&ours, &[up(&xh)], &up(&wh));
    let (_, g2) = loss_and_grads(&theirs, &[up(&xh)], &up(&wh));
    check(tol(DType::F64), &g1[0], &g2[0], "accumulated gradient");
}

/// f32 and f64 operands: the result has the joined dtype, each gradient its operand's.
#[test]
fn mixed_dtypes_project_gradients() {
    let mut rng = Rng::seed(15);
    let a = up(&rng.tensor(&[3, 4], DType::F32));
    let b = up(&rng.tensor(&[4, 2], DType::F64));
    let w = up(&rng.tensor(&[3, 2], DType::F64));
    let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap());
    let (out, g) = loss_and_grads(
        &|x| contract(&op, &x[0], &x[1]).unwrap(),
        &[a.clone(), b.clone()],
        &w,
    );
    assert_eq!(out.dtype(), candle_core::DType::F64);
    assert_eq!(g[0].dtype(), DType::F32);
    assert_eq!(g[1].dtype(), DType::F64);
    let want_ga = w
        .matmul(&b.t().unwrap())
        .unwrap()
        .to_dtype(candle_core::DType::F32)
        .unwrap();
    check(tol(DType::F32), &g[0], &down(&want_ga), "f32 gradient");
}

/// Only the inputs candle tracks get a gradient (a constant operand costs no contraction).
#[test]
fn constants_get_no_gradient() {
    let mut rng = Rng::seed(16);
    let a = Var::from_tensor(&up(&rng.tensor(&[3, 4], DType::F64))).unwrap();
    let b = up(&rng.tensor(&[4, 2], DType::F64));
    let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap());
    let grads = contract(&op, a.as_tensor(), &b)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert!(grads.get(a.as_tensor()).is_some());
    assert!(grads.get(&b).is_none());
}

/// The typed adrules error inside a candle error (the test fails if there is none).
fn typed(e: candle_core::Error) -> Error {
    adrules_error(&e)
        .cloned()
        .unwrap_or_else(|| panic!("not an adrules error: {e}"))
}

#[test]
fn bad_input_is_a_typed_error() {
    let mut rng = Rng::seed(17);
    let a = up(&rng.tensor(&[3, 4], DType::F64));
    let mm = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap());
    let e = typed(contract(&mm, &a, &a.t().unwrap().narrow(0, 0, 3).unwrap()).unwrap_err());
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = typed(contract(&mm, &a, &a.flatten_all().unwrap()).unwrap_err());
    assert!(
        matches!(e, Error::RankMismatch { ref arg, .. } if arg == "b"),
        "{e}"
    );
    let half = a.to_dtype(candle_core::DType::F16).unwrap();
    let e = typed(contract(&mm, &half, &a).unwrap_err());
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let e = typed(contract(&mm.clone().beta(1.0), &a, &a.t().unwrap()).unwrap_err());
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "beta"),
        "{e}"
    );
    let e = typed(
        contract(
            &mm.clone().alpha(adrules_core::Complex64::new(0.0, 1.0)),
            &a,
            &a.t().unwrap(),
        )
        .unwrap_err(),
    );
    assert!(
        matches!(e, Error::DTypeMismatch { ref arg, .. } if arg == "alpha"),
        "{e}"
    );
    let e = typed(add(&AddOp::new(Permutation::identity(3)), &a).unwrap_err());
    assert!(matches!(e, Error::RankMismatch { .. }), "{e}");
    let e = typed(
        trace(
            &TraceOp::new(TraceSpec::new(&[], &[0], &[1]).unwrap()),
            &up(&rng.tensor(&[3, 4], DType::F64)),
        )
        .unwrap_err(),
    );
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = be().from_host(rng.tensor(&[2], DType::C64)).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    // The message travels with the candle error.
    let e = contract(&mm, &a, &a).unwrap_err();
    assert!(e.to_string().contains("expected shape"), "{e}");
}

/// Failures inside candle's backward pass: `try_backward` returns an adrules error raised
/// there typed, and candle's own failures as `Error::Backend`; plain `backward()` carries the
/// typed error inside candle's.
#[test]
fn backward_failures_are_typed() {
    use adrules_candle::try_backward;
    use candle_core::{CpuStorage, CustomOp1, Layout, Shape};

    /// The identity, whose backward either calls one of our ops with bad arguments (an
    /// adrules error inside the backward pass) or hands back a cotangent of the wrong shape
    /// (which candle itself rejects).
    struct Faulty {
        adrules: bool,
    }
    impl CustomOp1 for Faulty {
        fn name(&self) -> &'static str {
            "faulty"
        }
        fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
            assert!(l.is_contiguous() && l.start_offset() == 0);
            Ok((s.clone(), l.shape().clone()))
        }
        fn bwd(&self, _: &Tensor, _: &Tensor, g: &Tensor) -> candle_core::Result<Option<Tensor>> {
            if self.adrules {
                // g is 3 × 2: tracing its two axes is a shape error.
                let tr = TraceOp::new(TraceSpec::new(&[], &[0], &[1]).unwrap());
                return trace(&tr, g).map(Some);
            }
            Ok(Some(g.flatten_all()?))
        }
    }

    let mut rng = Rng::seed(18);
    let a = Var::from_tensor(&up(&rng.tensor(&[3, 4], DType::F64))).unwrap();
    let b = up(&rng.tensor(&[4, 2], DType::F64));
    let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap());
    let loss = |adrules| {
        contract(&op, a.as_tensor(), &b)
            .and_then(|c| c.apply_op1(Faulty { adrules }))
            .and_then(|c| c.sum_all())
            .unwrap()
    };
    let e = try_backward(&loss(true)).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg.starts_with("a (axes")),
        "{e}"
    );
    let e = loss(true).backward().unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::ShapeMismatch { .. })),
        "{e}"
    );
    let e = try_backward(&loss(false)).unwrap_err();
    assert!(
        matches!(e, Error::Backend { ref message, .. } if message.contains("shape mismatch")),
        "{e}"
    );
    // A good loss goes through.
    let good = contract(&op, a.as_tensor(), &b).unwrap().sum_all().unwrap();
    let g = try_backward(&good).unwrap();
    assert!(g.get(a.as_tensor()).is_some());
}
