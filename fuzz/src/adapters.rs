//! The fuzz targets of the adapters' entry points: each adapter's `einsum` on a random call
//! of the full grammar (1 to 3 operands, ellipsis and broadcasting, zero-size and size-1
//! axes, bad shapes), then the engine's own backward pass of `L = Σ C ⊙ C̄` for a random
//! cotangent `C̄`. Each must accept exactly the calls the core accepts, give the core's
//! value and the core's network pullback as the gradients (within the dtype's tolerance), and
//! leave its operands unchanged.
//!
//! - candle: f32 and f64, candle's CPU device, every call;
//! - burn: f32 and f64, burn's Flex backend with autodiff, every call (burn has no rank-0
//!   tensors: a rank-0 operand or output has shape `[1]`, as the adapter documents);
//! - dfdx: f64, the `Vec` operand list (one shape type for every operand), on the first of
//!   32 calls related to the seed whose operands share one rank (dfdx's shape types are
//!   compile-time: one instantiation per operand rank × output rank, 49 in all).

use adrules::network::{Network, NetworkPlan, Order};
use adrules::strided::{Strided, Tensor};
use adrules::{Backend, DType, HostData, HostTensor};
use adrules_testing::fuzz::einsum_case;
use adrules_testing::{Rng, Tolerance, Value};

use crate::Finding;

fn wrong(what: impl Into<String>) -> Finding {
    Finding::Wrong(what.into())
}

/// A random einsum call and what the core does with it.
struct Reference {
    subscripts: String,
    /// the operands, in the dtype of the call
    hosts: Vec<HostTensor>,
    dtype: DType,
    /// the case, for messages
    text: String,
    /// `None` when the core refuses the call
    expected: Option<Expected>,
}

/// The core's value of an accepted call, the cotangent, and the network pullback of it.
struct Expected {
    value: HostTensor,
    c_bar: HostTensor,
    gradients: Vec<Option<HostTensor>>,
}

impl Reference {
    fn new(subscripts: String, shapes: Vec<Vec<usize>>, seed: u64, dtype: DType) -> Self {
        let mut rng = Rng::seed(seed ^ 0xca9d);
        let hosts: Vec<HostTensor> = shapes.iter().map(|d| rng.tensor(d, dtype)).collect();
        let text = format!("{subscripts:?} {shapes:?} {dtype}");
        let plan = Network::einsum(&subscripts)
            .and_then(|n| NetworkPlan::new(&n, &shapes, &Order::Default));
        let expected = plan.ok().map(|plan| {
            let xs: Vec<Tensor> = hosts
                .iter()
                .map(|h| Strided.from_host(h.clone()).expect("a stored dtype"))
                .collect();
            let refs: Vec<&Tensor> = xs.iter().collect();
            let c_bar = rng.tensor(plan.output_dims(), dtype);
            let (c, pb) = plan
                .rrule(&Strided, &refs, &vec![true; refs.len()])
                .expect("the core's rrule of a planned call");
            let cb = Strided.from_host(c_bar.clone()).expect("a stored dtype");
            let gradients = pb
                .pullback(&cb)
                .expect("the core's pullback of a planned call")
                .into_iter()
                .map(|g| g.map(|g| g.to_host().expect("host")))
                .collect();
            Expected {
                value: c.to_host().expect("host"),
                c_bar,
                gradients,
            }
        });
        Reference {
            subscripts,
            hosts,
            dtype,
            text,
            expected,
        }
    }

    /// The call's operands as `f64` values (real dtypes only here).
    fn values(h: &HostTensor) -> Vec<f64> {
        h.data().to_c64_vec().iter().map(|z| z.re).collect()
    }

    /// `v` (row-major `f64`s, as an engine returns them) as a host tensor of `dims` in the
    /// call's dtype.
    fn host(&self, dims: &[usize], v: Vec<f64>) -> Result<HostTensor, Finding> {
        HostTensor::new(dims, HostData::F64(v))
            .map(|h| h.to_dtype_projected(self.dtype))
            .map_err(|e| wrong(format!("{}: {e}", self.text)))
    }

    /// Compares what an adapter did with the core's reference: `got` is the adapter's
    /// refusal, or its value, its gradients (`None` where the engine gave none) and its
    /// operands after the call, all as row-major `f64`s.
    fn compare<E: std::fmt::Display>(
        &self,
        adapter: &str,
        got: Result<Outcome, E>,
    ) -> Result<(), Finding> {
        let text = format!("{adapter}: {}", self.text);
        let (got, expected) = match (got, &self.expected) {
            (Err(_), None) => return Ok(()),
            (Ok(_), None) => return Err(wrong(format!("{text}: accepted, the core refuses"))),
            (Err(e), Some(_)) => return Err(wrong(format!("{text}: refused: {e}"))),
            (Ok(g), Some(e)) => (g, e),
        };
        let tol = Tolerance::for_dtype(self.dtype);
        let s = &self.subscripts;
        let value = self.host(expected.value.dims(), got.value)?;
        tol.check(
            &Value::Tensor(value),
            &Value::Tensor(expected.value.clone()),
            s,
        )
        .map_err(|e| wrong(format!("{text}: value: {e}")))?;
        for (k, (g, want)) in got
            .gradients
            .into_iter()
            .zip(&expected.gradients)
            .enumerate()
        {
            let dims = self.hosts[k].dims();
            match (g, want) {
                (Some(g), Some(w)) => tol
                    .check(
                        &Value::Tensor(self.host(dims, g)?),
                        &Value::Tensor(w.clone()),
                        s,
                    )
                    .map_err(|e| wrong(format!("{text}: gradient {k}: {e}")))?,
                // an engine may skip the gradient of an operand without elements
                (None, Some(w)) if w.is_empty() => {}
                (g, _) => {
                    let n = g.map(|g| g.len());
                    return Err(wrong(format!("{text}: gradient {k}: {n:?} elements")));
                }
            }
        }
        for (k, (after, h)) in got.operands.into_iter().zip(&self.hosts).enumerate() {
            if self.host(h.dims(), after)? != *h {
                return Err(Finding::Mutated(format!("{text}: operand {k} changed")));
            }
        }
        Ok(())
    }
}

/// What an adapter's call gave, as row-major `f64`s.
struct Outcome {
    value: Vec<f64>,
    gradients: Vec<Option<Vec<f64>>>,
    operands: Vec<Vec<f64>>,
}

fn dtype_of(seed: u64) -> DType {
    if (seed / 5).is_multiple_of(2) {
        DType::F64
    } else {
        DType::F32
    }
}

/// The candle adapter's `einsum` on candle's CPU device, then candle's `backward`.
pub(crate) fn candle(seed: u64) -> Result<(), Finding> {
    use adrules::candle::candle_core::{DType as CDType, Device, Tensor as CTensor, Var};
    let (s, shapes) = einsum_case(seed);
    let r = Reference::new(s, shapes, seed, dtype_of(seed));
    let cdt = adrules::candle::candle_dtype(r.dtype).map_err(|e| wrong(e.to_string()))?;
    let candle = |what: &str, e: adrules::candle::candle_core::Error| {
        wrong(format!("candle: {}: {what}: {e}", r.text))
    };
    let tensor = |h: &HostTensor, dims: &[usize]| {
        CTensor::from_vec(Reference::values(h), dims, &Device::Cpu).and_then(|t| t.to_dtype(cdt))
    };
    let values = |t: &CTensor| -> Result<Vec<f64>, Finding> {
        let v = t.to_dtype(CDType::F64).and_then(|t| t.flatten_all());
        v.and_then(|t| t.to_vec1()).map_err(|e| candle("read", e))
    };
    let vars: Vec<Var> = r
        .hosts
        .iter()
        .map(|h| tensor(h, h.dims()).and_then(|t| Var::from_tensor(&t)))
        .collect::<Result<_, _>>()
        .map_err(|e| candle("operand", e))?;
    let tensors: Vec<&CTensor> = vars.iter().map(|v| v.as_tensor()).collect();
    let got = match adrules::candle::einsum(&r.subscripts, &tensors) {
        Err(e) => Err(e),
        Ok(out) => {
            let Some(expected) = &r.expected else {
                return r.compare("candle", Ok::<_, String>(empty_outcome()));
            };
            let c_bar =
                tensor(&expected.c_bar, expected.c_bar.dims()).map_err(|e| candle("c_bar", e))?;
            let loss = out
                .mul(&c_bar)
                .and_then(|t| t.sum_all())
                .map_err(|e| candle("loss", e))?;
            let grads = adrules::candle::try_backward(&loss)
                .map_err(|e| wrong(format!("candle: {}: backward: {e}", r.text)))?;
            let mut gradients = Vec::new();
            for v in &vars {
                gradients.push(grads.get(v.as_tensor()).map(values).transpose()?);
            }
            Ok(Outcome {
                value: values(&out)?,
                gradients,
                operands: vars
                    .iter()
                    .map(|v| values(v.as_tensor()))
                    .collect::<Result<_, _>>()?,
            })
        }
    };
    r.compare("candle", got)
}

/// An outcome that fails any comparison with an accepted call (for a call the core refuses,
/// where only the acceptance is wrong).
fn empty_outcome() -> Outcome {
    Outcome {
        value: Vec::new(),
        gradients: Vec::new(),
        operands: Vec::new(),
    }
}

pub(crate) mod burn_target {
    use adrules::burn::burn_tensor::{DType as BDType, Device, Gradients, Tensor, TensorData};
    use adrules::burn::{Operand, try_backward};

    use super::*;

    /// Reads a leaf's gradient out of burn's gradients.
    pub(crate) type GradientOf = Box<dyn Fn(&Gradients) -> Option<Vec<f64>>>;

    /// An operand on Flex with autodiff, tracked, and how to read it and its gradient.
    pub(crate) struct Leaf {
        pub(crate) operand: Operand,
        pub(crate) value: Box<dyn Fn() -> Vec<f64>>,
        pub(crate) gradient: GradientOf,
    }

    pub(crate) fn device() -> Device {
        Device::flex().autodiff()
    }

    pub(crate) fn dtype(d: DType) -> BDType {
        if d == DType::F64 {
            BDType::F64
        } else {
            BDType::F32
        }
    }

    pub(crate) fn values<const D: usize>(t: &Tensor<D>) -> Vec<f64> {
        t.clone().into_data().iter::<f64>().collect()
    }

    fn leaf_of<const R: usize>(v: Vec<f64>, dims: Vec<usize>, dt: BDType) -> Leaf {
        let t = Tensor::<R>::from_data(TensorData::new(v, dims), (&device(), dt)).require_grad();
        let (a, b) = (t.clone(), t.clone());
        Leaf {
            operand: t.into(),
            value: Box::new(move || values(&a)),
            gradient: Box::new(move |g| b.grad(g).map(|g| values(&g))),
        }
    }

    /// The host tensor `h` as a burn leaf (rank 0 as shape `[1]`); `None` above rank 8.
    pub(crate) fn leaf(h: &HostTensor, dt: BDType) -> Option<Leaf> {
        let v = Reference::values(h);
        let dims = if h.dims().is_empty() {
            vec![1]
        } else {
            h.dims().to_vec()
        };
        Some(match dims.len() {
            1 => leaf_of::<1>(v, dims, dt),
            2 => leaf_of::<2>(v, dims, dt),
            3 => leaf_of::<3>(v, dims, dt),
            4 => leaf_of::<4>(v, dims, dt),
            5 => leaf_of::<5>(v, dims, dt),
            6 => leaf_of::<6>(v, dims, dt),
            7 => leaf_of::<7>(v, dims, dt),
            8 => leaf_of::<8>(v, dims, dt),
            _ => return None,
        })
    }

    /// The value of the call, and the gradients of `Σ C ⊙ C̄` when `c_bar` is given.
    pub(crate) type Run = adrules::Result<(Vec<f64>, Option<Gradients>)>;

    /// `einsum::<N, D>` on `ops`, then burn's backward of `Σ C ⊙ C̄`.
    pub(crate) fn run<const N: usize, const D: usize>(
        s: &str,
        ops: Vec<Operand>,
        c_bar: Option<(&HostTensor, BDType)>,
    ) -> Run {
        let ops: [Operand; N] = ops.try_into().expect("N operands");
        let c: Tensor<D> = adrules::burn::einsum(s, ops)?;
        let value = values(&c);
        let Some((w, dt)) = c_bar else {
            return Ok((value, None));
        };
        let dims = c.dims().to_vec();
        let w =
            Tensor::<D>::from_data(TensorData::new(Reference::values(w), dims), (&device(), dt));
        let grads = try_backward(&(c * w).sum())?;
        Ok((value, Some(grads)))
    }
}

/// Dispatches `burn_target::run::<N, D>` on a run-time operand count and output rank.
macro_rules! burn_dispatch {
    ($n:expr, $d:expr, $args:expr; $($N:literal),+; $($D:literal),+) => {
        burn_dispatch!(@n $n, $d, $args; [$($N),+]; [$($D),+])
    };
    (@n $n:expr, $d:expr, $args:expr; [$($N:literal),+]; $ds:tt) => {
        match $n {
            $($N => burn_dispatch!(@d $N, $d, $args; $ds),)+
            _ => None,
        }
    };
    (@d $N:literal, $d:expr, $args:expr; [$($D:literal),+]) => {
        match $d {
            $($D => {
                let (s, ops, c_bar) = $args;
                Some(burn_target::run::<$N, $D>(s, ops, c_bar))
            })+
            _ => None,
        }
    };
}

/// The burn adapter's `einsum` on Flex with autodiff, then burn's backward (through
/// `adrules::burn::try_backward`).
pub(crate) fn burn(seed: u64) -> Result<(), Finding> {
    let (s, mut shapes) = einsum_case(seed);
    // burn has no rank-0 tensors: a rank-0 operand is passed as shape [1], which an operand
    // with an ellipsis reads as one broadcast axis (the adapter's documented convention), so
    // the reference is the call burn can express
    let inputs = s.split("->").next().unwrap_or("");
    for (d, term) in shapes.iter_mut().zip(inputs.split(',')) {
        if d.is_empty() && term.contains("...") {
            *d = vec![1];
        }
    }
    let r = Reference::new(s, shapes, seed, dtype_of(seed));
    let dt = burn_target::dtype(r.dtype);
    let Some(leaves) = r
        .hosts
        .iter()
        .map(|h| burn_target::leaf(h, dt))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(());
    };
    let ops: Vec<_> = leaves.iter().map(|l| l.operand.clone()).collect();
    // a refused call: the output rank does not matter (the string and the planning fail
    // first); an accepted one: the core's output rank, rank 0 as burn's shape [1]
    let rank = r
        .expected
        .as_ref()
        .map_or(1, |e| e.value.dims().len().max(1));
    let c_bar = r.expected.as_ref().map(|e| (&e.c_bar, dt));
    let ran = burn_dispatch!(ops.len(), rank, (r.subscripts.as_str(), ops, c_bar); 1, 2, 3;
        1, 2, 3, 4, 5, 6, 7, 8);
    let Some(ran) = ran else {
        return Ok(());
    };
    let got = ran.map(|(value, grads)| Outcome {
        value,
        gradients: leaves
            .iter()
            .map(|l| grads.as_ref().and_then(|g| (l.gradient)(g)))
            .collect(),
        operands: leaves.iter().map(|l| (l.value)()).collect(),
    });
    r.compare("burn", got)
}

mod dfdx_target {
    use adrules::dfdx::dfdx::prelude::{
        Cpu, HasShape, OwnedTape, Rank0, Shape, SumTo, Tensor, Trace,
    };
    use adrules::dfdx::{DfdxBackend, DfdxTensor, try_backward};

    use super::*;

    type Traced<S> = Tensor<S, f64, Cpu, OwnedTape<f64, Cpu>>;

    pub(super) fn host<S: Shape, T>(t: &Tensor<S, f64, Cpu, T>) -> Vec<f64> {
        let t = DfdxTensor::new(t.retaped()).expect("an f64 tensor");
        let h = DfdxBackend::default().to_host(&t).expect("host");
        Reference::values(&h)
    }

    /// `einsum` with the output shape type `O` on operands of one shape type `S`, then
    /// dfdx's backward of `Σ C ⊙ C̄` when `c_bar` is given: the value, the gradients, the
    /// operands after the call.
    pub(super) fn run<S: Shape, O: Shape>(
        s: &str,
        xs: &[Tensor<S, f64, Cpu>],
        c_bar: Option<&HostTensor>,
    ) -> adrules::Result<Outcome> {
        let traced: Vec<Traced<S>> = xs.iter().map(|x| x.leaky_trace()).collect();
        let c: Traced<O> = adrules::dfdx::einsum(s, traced)?;
        let value = host(&c);
        let operands = xs.iter().map(host).collect();
        let Some(w) = c_bar else {
            let gradients = vec![None; xs.len()];
            return Ok(Outcome {
                value,
                gradients,
                operands,
            });
        };
        let w: Tensor<O, f64, Cpu> = DfdxBackend::default()
            .from_host(w.clone())?
            .to_tensor::<O, f64>()?;
        let loss: Traced<Rank0> = if c.shape().num_elements() == 0 {
            // dfdx's sum to a scalar divides by the element count (0 here): the same loss
            // through the adapter's op
            let labels = &"abcdefg"[..O::NUM_DIMS];
            adrules::dfdx::einsum(&format!("{labels},{labels}->"), (c, w))?
        } else {
            (c * w).sum::<Rank0, _>()
        };
        let g = try_backward(loss)?;
        let gradients = xs.iter().map(|x| Some(host(&g.get(x)))).collect();
        Ok(Outcome {
            value,
            gradients,
            operands,
        })
    }
}

/// The einsum call the dfdx target runs for `seed`: the first of `seed` and 31 seeds derived
/// from it ([`crate::related_seeds`]) whose operands share one rank of at most 6 (`None`
/// when none does).
pub(crate) fn dfdx_seed(seed: u64) -> Option<u64> {
    std::iter::once(seed)
        .chain(crate::related_seeds(seed))
        .take(32)
        .find(|&x| {
            let (_, shapes) = einsum_case(x);
            let r = shapes.first().map_or(0, Vec::len);
            r <= 6 && shapes.iter().all(|d| d.len() == r)
        })
}

/// The dfdx adapter's `einsum` with a `Vec` of operands, then dfdx's backward (through
/// `adrules::dfdx::try_backward`).
pub(crate) fn dfdx(seed: u64) -> Result<(), Finding> {
    use adrules::dfdx::dfdx::prelude::{Cpu, Tensor};
    use adrules::dfdx::{Ranked, with_rank};
    let Some(x) = dfdx_seed(seed) else {
        return Ok(());
    };
    let (s, shapes) = einsum_case(x);
    let r = Reference::new(s, shapes, x, DType::F64);
    let dev = Cpu::default();
    let xs = r
        .hosts
        .iter()
        .map(|h| Ranked::<f64>::from_host(&dev, h.clone()))
        .collect::<adrules::Result<Vec<_>>>()
        .map_err(|e| wrong(format!("dfdx: {}: operand: {e}", r.text)))?;
    // one rank for every operand (dfdx_seed)
    let rank = r.hosts.first().map_or(0, |h| h.dims().len());
    // a refused call plans first, whatever the output rank
    let out = r.expected.as_ref().map_or(0, |e| e.value.dims().len());
    let c_bar = r.expected.as_ref().map(|e| &e.c_bar);
    let s = r.subscripts.as_str();
    let ran = with_rank!(rank, S => with_rank!(out, O => {
        let ts: Vec<Tensor<S, f64, Cpu>> =
            xs.iter().map(|x| x.to_tensor::<S>().expect("its rank")).collect();
        Some(dfdx_target::run::<S, O>(s, &ts, c_bar))
    }, else None), else None);
    match ran {
        Some(got) => r.compare("dfdx", got),
        // an output above dfdx's rank 6
        None => Ok(()),
    }
}
