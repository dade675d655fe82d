//! The generalized trace (diagonals, traces, sums), its adjoint `add_to_diagonal` and the
//! batched contraction of [`BurnBackend`] against the reference backend, in f32 and f64, on
//! three inner backends: Flex (adrules-strided's kernels), NdArray and `Autodiff<Flex>` (both
//! the generic path of burn ops: NdArray is an independent implementation of those ops, and
//! `Autodiff<Flex>` is not detected as Flex, so it runs burn ops on Flex's implementation).
//! Then gradients through burn's autodiff, on the primitives and on the user-facing `Tensor`,
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
use adrules_core::{Backend, Conj, ContractSpec, DType, HostData, HostTensor, TraceSpec};
use adrules_testing::{ReferenceBackend, Rng, Tolerance, Value};
// burn-ndarray is deprecated upstream; it serves here as a second, independent backend.
#[allow(deprecated)]
use burn_ndarray::NdArray;

fn be<B: Engine>() -> BurnBackend<B> {
    BurnBackend::new(Default::default())
}

const DTYPES: [DType; 2] = [DType::F32, DType::F64];

/// `(α, β)` of the primal checks; with β = 0 the burn C starts NaN-filled (a strong zero
/// never reads it).
const COEFFICIENTS: [(f64, f64); 3] = [(1.0, 0.0), (2.5, 0.0), (-1.5, 0.5)];

/// `(labels of A, labels of C, dims of A)`.
type TraceCase = (&'static str, &'static str, &'static [usize]);

const TRACES: &[TraceCase] = &[
    ("ii", "i", &[4, 4]),                  // diagonal
    ("bii", "bi", &[2, 3, 3]),             // batched diagonal
    ("iii", "i", &[3, 3, 3]),              // diagonal of three axes
    ("ibjb", "jbi", &[3, 2, 4, 2]),        // batched diagonal, permuted
    ("bijj", "jb", &[2, 3, 4, 4]),         // diagonal, sum, permutation
    ("ij", "i", &[3, 4]),                  // sums over one axis
    ("ij", "j", &[3, 4]),                  //
    ("ijk", "", &[2, 3, 4]),               // full sum
    ("iii", "", &[3, 3, 3]),               // hypertrace
    ("iiii", "", &[2, 2, 2, 2]),           //
    ("ii", "", &[4, 4]),                   // classic full trace
    ("ijil", "lj", &[3, 4, 3, 5]),         // classic partial trace
    ("ijji", "", &[3, 2, 2, 3]),           // double trace
    ("iijk", "kj", &[3, 3, 4, 5]),         // trace, sum, permutation
    ("iijjk", "kj", &[3, 3, 2, 2, 4]),     // trace, diagonal, permutation
    ("aibica", "cb", &[2, 3, 4, 3, 5, 2]), // rank 6: two traces, permuted
    ("ijiki", "kj", &[2, 3, 2, 4, 2]),     // hypertrace, permutation
    ("iiij", "i", &[3, 3, 3, 4]),          // diagonal of three axes, sum
    ("ijk", "kij", &[2, 3, 4]),            // a plain permutation
    ("", "", &[]),                         // a scalar
    ("iii", "i", &[1, 1, 1]),              // dimension 1
    ("ii", "i", &[0, 0]),                  // empty output
    ("ij", "i", &[3, 0]),                  // empty sum: zeros
    ("bii", "bi", &[0, 3, 3]),             // empty batch
    ("iij", "j", &[0, 0, 2]),              // empty trace: zeros
];

/// `(labels of A, of B, of C, dims of A, dims of B)`.
type ContractCase = (
    &'static str,
    &'static str,
    &'static str,
    &'static [usize],
    &'static [usize],
);

const CONTRACTIONS: &[ContractCase] = &[
    ("bij", "bjk", "bik", &[2, 3, 4], &[2, 4, 5]),
    ("bhqd", "bhkd", "bhqk", &[2, 3, 4, 5], &[2, 3, 6, 5]), // attention scores
    ("bhqk", "bhkd", "bhqd", &[2, 3, 4, 6], &[2, 3, 6, 5]), // attention values
    ("ibj", "bjk", "kbi", &[3, 2, 4], &[2, 4, 5]),          // batch axis permuted in C
    ("abij", "bjka", "kiba", &[2, 3, 4, 5], &[3, 5, 6, 2]), // two batch axes, permuted
    ("ij", "ij", "ij", &[3, 4], &[3, 4]),                   // Hadamard: every axis batch
    ("ij", "ji", "ji", &[3, 4], &[4, 3]),                   // Hadamard, transposed
    ("ij", "ij", "i", &[3, 4], &[3, 4]),                    // row-wise dot products
    ("bi", "bj", "bij", &[2, 3], &[2, 4]),                  // batched outer product
    ("ij", "jk", "ki", &[3, 4], &[4, 5]),                   // unbatched
    ("ijk", "jki", "", &[2, 3, 4], &[3, 4, 2]),             // unbatched, full
    ("bij", "bjk", "bik", &[0, 3, 4], &[0, 4, 5]),          // zero-size batch
    ("bij", "bjk", "bik", &[2, 3, 0], &[2, 0, 5]),          // empty sum: zeros
    ("bij", "bjk", "kib", &[2, 0, 4], &[2, 4, 5]),          // empty open axis
];

/// A tensor of `dims` filled with NaN.
fn nan(dims: &[usize], dtype: DType) -> HostTensor {
    let n = dims.iter().product();
    let data = if dtype.is_double() {
        HostData::F64(vec![f64::NAN; n])
    } else {
        HostData::F32(vec![f32::NAN; n])
    };
    HostTensor::new(dims, data).unwrap()
}

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

/// The initial C of a primal check: NaN for burn and zeros for the reference when β = 0.
fn initial_c(rng: &mut Rng, dims: &[usize], dtype: DType, beta: f64) -> (HostTensor, HostTensor) {
    if beta == 0.0 {
        let zeros = ReferenceBackend.zeros(dims, dtype).unwrap();
        (nan(dims, dtype), (*zeros).clone())
    } else {
        let c = rng.tensor(dims, dtype);
        (c.clone(), c)
    }
}

fn check_trace<B: Engine>((la, lc, dims): TraceCase, dtype: DType) {
    let (b, r) = (be::<B>(), ReferenceBackend);
    let spec = TraceSpec::from_labels(la, lc).unwrap();
    let out = spec.output_dims(dims).unwrap();
    let mut rng = Rng::seed(7);
    let ha = rng.tensor(dims, dtype);
    let what = |op: &str, alpha: f64, beta: f64| {
        let backend = std::any::type_name::<B>();
        format!("{op} {la}->{lc} on {dims:?}, {dtype}, α = {alpha}, β = {beta}, {backend}")
    };
    for (alpha, beta) in COEFFICIENTS {
        let (hc, hc_ref) = initial_c(&mut rng, &out, dtype, beta);
        let mut c = b.from_host(hc).unwrap();
        let a = b.from_host(ha.clone()).unwrap();
        b.trace(&mut c, &a, &spec, Conj::No, alpha.into(), beta.into())
            .unwrap();
        let mut want = r.from_host(hc_ref).unwrap();
        let ra = r.from_host(ha.clone()).unwrap();
        r.trace(&mut want, &ra, &spec, Conj::No, alpha.into(), beta.into())
            .unwrap();
        assert_matches(&b.to_host(&c).unwrap(), &want, &what("trace", alpha, beta));
    }
    for alpha in [1.0, -0.75] {
        let hc = rng.tensor(&out, dtype);
        let (c, rc) = (
            b.from_host(hc.clone()).unwrap(),
            r.from_host(hc.clone()).unwrap(),
        );
        // Onto a dense A (another handle to it must not see the update) and onto zeros
        // (the broadcast zeros the trace pullback starts from).
        let mut a = b.from_host(ha.clone()).unwrap();
        let other = a.clone();
        b.add_to_diagonal(&mut a, &c, &spec, Conj::No, alpha.into())
            .unwrap();
        let mut want = r.from_host(ha.clone()).unwrap();
        r.add_to_diagonal(&mut want, &rc, &spec, Conj::No, alpha.into())
            .unwrap();
        let w = what("add_to_diagonal", alpha, 1.0);
        assert_matches(&b.to_host(&a).unwrap(), &want, &w);
        assert_eq!(
            b.to_host(&other).unwrap(),
            ha,
            "{w}: another handle changed"
        );
        let mut z = b.zeros(dims, dtype).unwrap();
        b.add_to_diagonal(&mut z, &c, &spec, Conj::No, alpha.into())
            .unwrap();
        let mut want = r.zeros(dims, dtype).unwrap();
        r.add_to_diagonal(&mut want, &rc, &spec, Conj::No, alpha.into())
            .unwrap();
        assert_matches(&b.to_host(&z).unwrap(), &want, &format!("{w}, onto zeros"));
    }
}

fn check_contract<B: Engine>((la, lb, lc, da, db): ContractCase, dtype: DType) {
    let (b, r) = (be::<B>(), ReferenceBackend);
    let spec = ContractSpec::from_labels(la, lb, lc).unwrap();
    let out = spec.output_dims(da, db).unwrap();
    let mut rng = Rng::seed(9);
    let (ha, hb) = (rng.tensor(da, dtype), rng.tensor(db, dtype));
    for (alpha, beta) in COEFFICIENTS {
        let (hc, hc_ref) = initial_c(&mut rng, &out, dtype, beta);
        let mut c = b.from_host(hc).unwrap();
        let (x, y) = (
            b.from_host(ha.clone()).unwrap(),
            b.from_host(hb.clone()).unwrap(),
        );
        let (a1, b1) = (alpha.into(), beta.into());
        b.contract(&mut c, &x, &y, &spec, Conj::No, Conj::No, a1, b1)
            .unwrap();
        let mut want = r.from_host(hc_ref).unwrap();
        let (x, y) = (
            r.from_host(ha.clone()).unwrap(),
            r.from_host(hb.clone()).unwrap(),
        );
        r.contract(&mut want, &x, &y, &spec, Conj::No, Conj::No, a1, b1)
            .unwrap();
        let backend = std::any::type_name::<B>();
        let what = format!(
            "contract {la},{lb}->{lc} on {da:?}, {db:?}, {dtype}, α = {alpha}, β = {beta}, \
             {backend}"
        );
        assert_matches(&b.to_host(&c).unwrap(), &want, &what);
    }
}

/// `Σ_j A[i, j]·B[i, j]` three ways on backend `B`: the Hadamard product `ij,ij->ij` then the
/// sum `ij->i`, and the batched contraction `ij,ij->i`; both against the reference.
fn check_dot_rows<B: Engine>(dtype: DType) {
    let b = be::<B>();
    let mut rng = Rng::seed(5);
    let (ha, hb) = (rng.tensor(&[3, 4], dtype), rng.tensor(&[3, 4], dtype));
    let (x, y) = (
        b.from_host(ha.clone()).unwrap(),
        b.from_host(hb.clone()).unwrap(),
    );
    let (one, zero) = (1.0.into(), 0.0.into());
    let hadamard = ContractSpec::from_labels("ij", "ij", "ij").unwrap();
    let mut h = b.zeros(&[3, 4], dtype).unwrap();
    b.contract(&mut h, &x, &y, &hadamard, Conj::No, Conj::No, one, zero)
        .unwrap();
    let mut via_trace = b.zeros(&[3], dtype).unwrap();
    let sum = TraceSpec::from_labels("ij", "i").unwrap();
    b.trace(&mut via_trace, &h, &sum, Conj::No, one, zero)
        .unwrap();
    let dot = ContractSpec::from_labels("ij", "ij", "i").unwrap();
    let mut direct = b.zeros(&[3], dtype).unwrap();
    b.contract(&mut direct, &x, &y, &dot, Conj::No, Conj::No, one, zero)
        .unwrap();
    let r = ReferenceBackend;
    let (rx, ry) = (r.from_host(ha).unwrap(), r.from_host(hb).unwrap());
    let mut want = r.zeros(&[3], dtype).unwrap();
    r.contract(&mut want, &rx, &ry, &dot, Conj::No, Conj::No, one, zero)
        .unwrap();
    let what = format!("row dot products, {dtype}, {}", std::any::type_name::<B>());
    assert_matches(&b.to_host(&via_trace).unwrap(), &want, &what);
    assert_matches(&b.to_host(&direct).unwrap(), &want, &what);
}

fn traces_match_reference<B: Engine>() {
    for dtype in DTYPES {
        for &case in TRACES {
            check_trace::<B>(case, dtype);
        }
    }
}

fn contractions_match_reference<B: Engine>() {
    for dtype in DTYPES {
        for &case in CONTRACTIONS {
            check_contract::<B>(case, dtype);
        }
        check_dot_rows::<B>(dtype);
    }
}

#[test]
fn flex_traces_and_adjoints_match_reference() {
    traces_match_reference::<Flex>();
}

#[test]
fn flex_batched_contractions_match_reference() {
    contractions_match_reference::<Flex>();
}

#[test]
#[allow(deprecated)]
fn ndarray_traces_and_adjoints_match_reference() {
    traces_match_reference::<NdArray>();
}

#[test]
#[allow(deprecated)]
fn ndarray_batched_contractions_match_reference() {
    contractions_match_reference::<NdArray>();
}

#[test]
fn generic_path_on_flex_traces_and_adjoints_match_reference() {
    traces_match_reference::<Autodiff<Flex>>();
}

#[test]
fn generic_path_on_flex_batched_contractions_match_reference() {
    contractions_match_reference::<Autodiff<Flex>>();
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
