//! The generalized trace (diagonals, traces, sums), its adjoint `add_to_diagonal` and the
//! batched contraction of [`BurnBackend`] beyond the conformance suite (which runs on Flex and
//! NdArray in `conformance`): the suite's general groups on a third inner backend,
//! `Autodiff<Flex>` (not detected as Flex, so it runs burn ops on Flex's implementation);
//! then gradients through burn's autodiff, on the primitives and on the user-facing `Tensor`,
//! against the core rules on the reference backend.

use adrules_burn::burn_autodiff::Autodiff;
use adrules_burn::burn_autodiff::checkpoint::strategy::NoCheckpointing;
use adrules_burn::burn_backend::ops::FloatTensorOps;
use adrules_burn::burn_backend::tensor::FloatTensor;
use adrules_burn::burn_backend::{AutodiffBackend, Backend as Engine};
use adrules_burn::burn_flex::Flex;
use adrules_burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use adrules_burn::{BurnBackend, BurnTensor, Op, forward_autodiff};
use adrules_core::rules::{Activity, ContractOp, Primitive, TraceOp};
use adrules_core::{Backend, ContractSpec, DType, HostData, HostTensor, TraceSpec};
use adrules_testing::conformance::{Config, general};
use adrules_testing::{ReferenceBackend, Rng, Tolerance, Value};
// burn-ndarray is deprecated upstream; it serves here as a second, independent backend.
#[allow(deprecated)]
use burn_ndarray::NdArray;

fn be<B: Engine>() -> BurnBackend<B> {
    BurnBackend::new(Default::default())
}

const DTYPES: [DType; 2] = [DType::F32, DType::F64];

/// `got` has `want`'s dtype and shape, no NaN or infinity, and agrees within the dtype's
/// tolerance.
fn assert_matches(got: &HostTensor, want: &HostTensor, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let got = Value::Tensor(got.clone());
    let finite = got.to_c64_vec().iter().all(|z| z.re.is_finite());
    assert!(finite, "{what}: non-finite entries in {got:?}");
    Tolerance::for_dtype(want.dtype())
        .check(&got, &Value::Tensor(want.clone()), what)
        .unwrap();
}

/// The config of the generic path: burn's real dtypes, any rank.
fn real() -> Config {
    Config {
        dtypes: DTYPES.to_vec(),
        max_rank: usize::MAX,
    }
}

/// `Autodiff<Flex>` as the inner backend is not detected as Flex, so [`BurnBackend`] routes
/// it to the generic path of burn ops on Flex's implementation: the suite's general groups
/// (every trace and batched-contraction pattern, NaN-filled outputs under β = 0) there.
#[test]
fn generic_path_on_flex_traces_and_adjoints_match_reference() {
    general::general_traces(&be::<Autodiff<Flex>>(), &real());
}

#[test]
fn generic_path_on_flex_batched_contractions_match_reference() {
    general::batched_contractions(&be::<Autodiff<Flex>>(), &real());
}

// ---- gradients through burn's autodiff ----

type Ad<B> = Autodiff<B, NoCheckpointing>;

/// Gradients of `L = Σ op(x) ⊙ w` for every input, from the adrules node on `Autodiff<B>`.
fn burn_gradients<B: Engine, const N: usize>(
    op: &Op,
    x: &[HostTensor; N],
    w: &HostTensor,
) -> Vec<HostTensor> {
    let b = be::<B>();
    let leaves: [FloatTensor<Ad<B>>; N] = std::array::from_fn(|i| {
        let t = Ad::<B>::from_inner(b.from_host(x[i].clone()).unwrap().into_primitive());
        Ad::<B>::float_set_require_grad(t, true)
    });
    let out = forward_autodiff::<B, NoCheckpointing, N>(op, leaves.clone()).unwrap();
    let w = Ad::<B>::from_inner(b.from_host(w.clone()).unwrap().into_primitive());
    let grads = Ad::<B>::backward(Ad::<B>::float_sum(Ad::<B>::float_mul(out, w)));
    let host = |g: FloatTensor<B>| b.to_host(&BurnTensor::new(g)).unwrap();
    leaves
        .iter()
        .map(|t| host(Ad::<B>::grad(t, &grads).expect("every input requires a gradient")))
        .collect()
}

/// The same gradients from the core rules on the reference backend.
fn reference_gradients(op: &Op, x: &[HostTensor], w: &HostTensor) -> Vec<HostTensor> {
    let r = ReferenceBackend;
    let t: Vec<_> = x.iter().map(|h| r.from_host(h.clone()).unwrap()).collect();
    let (wt, mut c) = (
        r.from_host(w.clone()).unwrap(),
        r.zeros(w.dims(), w.dtype()).unwrap(),
    );
    let act = Activity {
        a: true,
        b: true,
        ..Activity::NONE
    };
    let g = match op {
        Op::Primitive(Primitive::Trace(o)) => {
            o.rrule(&r, &mut c, &t[0], act).unwrap().pullback(&wt)
        }
        Op::Primitive(Primitive::Contract(o)) => o
            .rrule(&r, &mut c, &t[0], &t[1], act)
            .unwrap()
            .pullback(&wt),
        _ => unreachable!("traces and contractions only"),
    }
    .unwrap();
    let h = |t: Option<std::sync::Arc<HostTensor>>| (*t.expect("an active cotangent")).clone();
    let mut v = vec![h(g.a)];
    if x.len() > 1 {
        v.push(h(g.b));
    }
    v
}

fn check_gradients<B: Engine, const N: usize>(op: Op, dims: [&[usize]; N], out: &[usize]) {
    for dtype in DTYPES {
        let mut rng = Rng::seed(21);
        let x: [HostTensor; N] = std::array::from_fn(|i| rng.tensor(dims[i], dtype));
        // `Σ op(x)` (w of ones), then a weighted sum.
        let ones = HostTensor::new(out, HostData::F64(vec![1.0; out.iter().product()]));
        let ones = ones.unwrap().to_dtype_projected(dtype);
        for w in [ones, rng.tensor(out, dtype)] {
            let got = burn_gradients::<B, N>(&op, &x, &w);
            let want = reference_gradients(&op, &x, &w);
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                let what = format!(
                    "{op:?}: gradient {i}, {dtype}, {}",
                    std::any::type_name::<B>()
                );
                assert_matches(g, e, &what);
            }
        }
    }
}

fn gradients_match_reference<B: Engine>() {
    let contract = |a, b, c| Op::from(ContractOp::new(ContractSpec::from_labels(a, b, c).unwrap()));
    let trace = |a, c| Op::from(TraceOp::new(TraceSpec::from_labels(a, c).unwrap()));
    check_gradients::<B, 2>(
        contract("bij", "bjk", "bik"),
        [&[2, 3, 4], &[2, 4, 5]],
        &[2, 3, 5],
    );
    check_gradients::<B, 2>(
        contract("ibj", "bjk", "kbi"),
        [&[3, 2, 4], &[2, 4, 5]],
        &[5, 2, 3],
    );
    check_gradients::<B, 2>(contract("ij", "ij", "i"), [&[3, 4], &[3, 4]], &[3]);
    check_gradients::<B, 1>(trace("bii", "bi"), [&[2, 3, 3]], &[2, 3]);
    check_gradients::<B, 1>(trace("ibjb", "jbi"), [&[3, 2, 4, 2]], &[4, 2, 3]);
    check_gradients::<B, 1>(trace("iii", ""), [&[3, 3, 3]], &[]);
    check_gradients::<B, 1>(trace("iijk", "kj"), [&[3, 3, 4, 5]], &[5, 4]);
    check_gradients::<B, 1>(trace("ij", "i"), [&[3, 4]], &[3]);
}

#[test]
fn flex_autodiff_gradients_of_batched_contractions_and_diagonals_match_reference() {
    gradients_match_reference::<Flex>();
}

#[test]
#[allow(deprecated)]
fn ndarray_autodiff_gradients_of_batched_contractions_and_diagonals_match_reference() {
    gradients_match_reference::<NdArray>();
}

// ---- the same through the user-facing Tensor API ----

fn tensor<const D: usize>(h: &HostTensor, device: &Device) -> Tensor<D> {
    let data = TensorData::new(h.as_slice::<f64>().unwrap().to_vec(), h.dims().to_vec());
    Tensor::<D>::from_data(data, (device, BurnDType::F64)).require_grad()
}

fn host<const D: usize>(t: Tensor<D>) -> HostTensor {
    let dims = t.dims().to_vec();
    HostTensor::new(&dims, HostData::F64(t.into_data().iter::<f64>().collect())).unwrap()
}

#[test]
fn tensor_api_gradients_of_sum_of_batched_contraction_and_diagonal() {
    let device = Device::flex().autodiff();
    let mut rng = Rng::seed(33);
    let (ha, hb) = (
        rng.tensor(&[2, 3, 4], DType::F64),
        rng.tensor(&[2, 4, 5], DType::F64),
    );
    let op = ContractOp::new(ContractSpec::from_labels("bij", "bjk", "bik").unwrap());
    let (a, b) = (tensor::<3>(&ha, &device), tensor::<3>(&hb, &device));
    let c: Tensor<3> = adrules_burn::contract(&op, &a, &b).unwrap();
    assert_eq!(c.dims(), [2, 3, 5]);
    let grads = c.sum().backward();
    let ones = HostTensor::new(&[2, 3, 5], HostData::F64(vec![1.0; 30])).unwrap();
    let want = reference_gradients(&op.clone().into(), &[ha, hb], &ones);
    assert_matches(
        &host(a.grad(&grads).unwrap()),
        &want[0],
        "Σ bij,bjk->bik: ∂A",
    );
    assert_matches(
        &host(b.grad(&grads).unwrap()),
        &want[1],
        "Σ bij,bjk->bik: ∂B",
    );

    let hx = rng.tensor(&[2, 3, 3], DType::F64);
    let op = TraceOp::new(TraceSpec::from_labels("bii", "bi").unwrap());
    let x = tensor::<3>(&hx, &device);
    let d: Tensor<2> = adrules_burn::trace(&op, &x).unwrap();
    let hw = rng.tensor(&[2, 3], DType::F64);
    let w = Tensor::<2>::from_data(
        TensorData::new(hw.as_slice::<f64>().unwrap().to_vec(), [2, 3]),
        (&device, BurnDType::F64),
    );
    let grads = (d * w).sum().backward();
    let want = reference_gradients(&op.into(), &[hx], &hw);
    assert_matches(&host(x.grad(&grads).unwrap()), &want[0], "bii->bi: ∂A");
}
