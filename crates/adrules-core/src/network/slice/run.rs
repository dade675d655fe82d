//! Running a [`SlicedPlan`]: the value, the pullback, the pushforward and the HVP, slice by
//! slice, in sequence or on the rayon pool. Each is the sum over slices of the slice plan's
//! own rule (see the module docs of [`super`]).

use rayon::prelude::*;

use super::{MemoryTarget, SlicedPlan};
use crate::alloc::{Allocator, HeapAllocator, Lifetime};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::network::{NetworkHvp, SecondOrder};
use crate::scalar::{DType, DynScalar};
use crate::spec::{Conj, Permutation};

/// The hook the `*_slices` methods call before each slice with the slice's index; an error
/// it returns (typically [`Error::Interrupted`]) stops the run and is returned.
pub type Between<'a> = &'a mut dyn FnMut(usize) -> Result<()>;

/// A network's value and the cotangent of each operand (`None` for the inactive ones), as
/// [`SlicedPlan::value_and_gradient`] returns them.
pub type ValueAndGradient<T> = (T, Vec<Option<T>>);

/// The pullback of a sliced network ([`SlicedPlan::rrule`]): it keeps handles of the operands
/// (no intermediate), and each application runs every slice again, forward and reverse, one
/// slice at a time, so its temporaries stay those of one slice.
#[derive(Clone, Debug)]
pub struct SlicedPullback<B: Backend> {
    plan: SlicedPlan,
    be: B,
    operands: Vec<B::Tensor>,
    active: Vec<bool>,
}

impl<B: Backend> SlicedPullback<B> {
    /// The cotangent of every active operand (`None` for the others) for the output
    /// cotangent `c_bar`, the sum over slices of the slice pullbacks.
    ///
    /// # Errors
    /// As [`SlicedPlan::value_and_gradient`].
    pub fn pullback(&self, c_bar: &B::Tensor) -> Result<Vec<Option<B::Tensor>>> {
        let operands: Vec<&B::Tensor> = self.operands.iter().collect();
        let (_, grads) = self
            .plan
            .value_and_gradient(&self.be, &operands, c_bar, &self.active)?;
        Ok(grads)
    }
}

/// `acc ← acc + x` (`x` becomes the accumulator when there is none yet).
fn accumulate<B: Backend>(be: &B, acc: &mut Option<B::Tensor>, x: B::Tensor) -> Result<()> {
    match acc {
        None => *acc = Some(x),
        Some(acc) => {
            let dtype = be.dtype(acc);
            let one = DynScalar::one(dtype);
            let id = Permutation::identity(be.rank(acc));
            be.add(acc, &x, &id, Conj::No, one, one)?;
        }
    }
    Ok(())
}

/// Adds `xs` into `accs` entry by entry.
fn accumulate_all<B: Backend>(
    be: &B,
    accs: &mut [Option<B::Tensor>],
    xs: impl IntoIterator<Item = Option<B::Tensor>>,
) -> Result<()> {
    for (acc, x) in accs.iter_mut().zip(xs) {
        if let Some(x) = x {
            accumulate(be, acc, x)?;
        }
    }
    Ok(())
}

/// The finite-output check of every present output, named `"{what} of operand k"`.
fn check_all<B: Backend>(
    be: &B,
    what: &str,
    outputs: &[Option<B::Tensor>],
    inputs: &[&B::Tensor],
) -> Result<()> {
    for (k, t) in outputs.iter().enumerate() {
        if let Some(t) = t {
            crate::finite::check(be, || format!("{what} of operand {k}"), t, inputs)?;
        }
    }
    Ok(())
}

impl SlicedPlan {
    /// Checks the operand count and shapes; returns the joined dtype.
    fn check<B: Backend>(&self, be: &B, operands: &[&B::Tensor]) -> Result<DType> {
        if operands.len() != self.num_operands() {
            return Err(Error::CountMismatch {
                arg: "operands".into(),
                expected: self.num_operands(),
                actual: operands.len(),
            });
        }
        let mut dtype = DType::F32;
        for (k, (t, d)) in operands.iter().zip(&self.operand_dims).enumerate() {
            let dims = be.dims(t);
            if dims != *d {
                return Err(Error::shape(format!("operand {k}"), d, &dims));
            }
            dtype = dtype.join(be.dtype(t));
        }
        Ok(dtype)
    }

    fn check_flags(&self, arg: &str, len: usize) -> Result<()> {
        if len == self.num_operands() {
            return Ok(());
        }
        Err(Error::CountMismatch {
            arg: arg.into(),
            expected: self.num_operands(),
            actual: len,
        })
    }

    /// The one-hot vectors of every slice: per vector of the slice plan, `e_i` for each
    /// index `i` of its label, real, in the precision of the operand it selects from.
    fn one_hots<B: Backend>(&self, be: &B, operands: &[&B::Tensor]) -> Result<Vec<Vec<B::Tensor>>> {
        let mut hots = Vec::with_capacity(self.vectors.len());
        for &(s, k) in &self.vectors {
            let dtype = be.dtype(operands[k]).real();
            let d = self.dims[s];
            let mut row = Vec::with_capacity(d);
            for i in 0..d {
                let mut e = vec![0.0f64; d];
                e[i] = 1.0;
                let h = HostTensor::from_vec(&[d], e)?.to_dtype_projected(dtype);
                row.push(be.from_host(h)?);
            }
            hots.push(row);
        }
        Ok(hots)
    }

    /// The slice plan's operands for slice `j`: the caller's, then the one-hot vectors.
    fn slice_operands<'a, T>(
        &self,
        operands: &[&'a T],
        hots: &'a [Vec<T>],
        j: usize,
    ) -> Vec<&'a T> {
        // slice j as a mixed-radix index over the sliced labels, the last one fastest
        let mut index = vec![0usize; self.dims.len()];
        let mut rest = j;
        for (i, &d) in self.dims.iter().enumerate().rev() {
            index[i] = rest % d;
            rest /= d;
        }
        let mut ops = operands.to_vec();
        ops.extend(
            self.vectors
                .iter()
                .zip(hots)
                .map(|(&(s, _), row)| &row[index[s]]),
        );
        ops
    }

    /// Flags or tangents for the slice plan: the caller's, then `fill` for every vector.
    fn extended<T: Clone>(&self, given: &[T], fill: T) -> Vec<T> {
        let mut v = given.to_vec();
        v.resize(self.plan.num_operands(), fill);
        v
    }

    /// How many slices run at once on the rayon pool: the pool's threads (at most the number
    /// of slices); with a [`MemoryTarget::Bytes`] target, no more than fit in it side by side,
    /// each with its own accumulators of `accumulators` elements.
    pub fn parallelism(&self, target: &MemoryTarget, accumulators: usize) -> usize {
        let threads = rayon::current_num_threads().clamp(1, self.slices.max(1));
        match *target {
            MemoryTarget::Bytes { bytes, dtype } => {
                let per =
                    super::bytes(&self.memory, dtype).1 + (accumulators * dtype.size_of()) as f64;
                threads.min(((bytes as f64 / per.max(1.0)) as usize).max(1))
            }
            MemoryTarget::Elements(_) => threads,
        }
    }

    /// Contracts the network slice by slice: `C = Σ_j C_j`, a new tensor of shape
    /// [`output_dims`](Self::output_dims) and the joined dtype of the operands.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"operands"`); [`Error::ShapeMismatch`] (argument
    /// `"operand k"`); the backend's errors; [`Error::NonFinite`] (argument `"output"`) when
    /// the value overflows although every operand is finite.
    pub fn execute<B: Backend>(&self, be: &B, operands: &[&B::Tensor]) -> Result<B::Tensor> {
        self.execute_with(be, &HeapAllocator, operands)
    }

    /// As [`execute`](Self::execute), with each slice's intermediates (and the result, as a
    /// [`Lifetime::Persistent`] allocation) from `alloc`.
    ///
    /// # Errors
    /// As [`execute`](Self::execute).
    pub fn execute_with<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
    ) -> Result<B::Tensor> {
        let dtype = self.check(be, operands)?;
        let hots = self.one_hots(be, operands)?;
        let mut c = alloc.allocate(be, self.output_dims(), dtype, Lifetime::Persistent)?;
        self.execute_range(
            be,
            alloc,
            operands,
            &hots,
            0..self.slices,
            &mut c,
            dtype,
            &mut |_| Ok(()),
        )?;
        crate::finite::check(be, || "output".into(), &c, operands)?;
        Ok(c)
    }

    /// `C ← Σ_{j ∈ range} C_j` (β = 0 for the first slice: a strong zero).
    #[allow(clippy::too_many_arguments)]
    fn execute_range<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
        hots: &[Vec<B::Tensor>],
        range: std::ops::Range<usize>,
        c: &mut B::Tensor,
        dtype: DType,
        between: Between<'_>,
    ) -> Result<()> {
        let one = DynScalar::one(dtype);
        let start = range.start;
        for j in range {
            between(j)?;
            let beta = if j == start {
                DynScalar::zero(dtype)
            } else {
                one
            };
            let ops = self.slice_operands(operands, hots, j);
            self.plan.execute_into(be, alloc, c, &ops, one, beta)?;
        }
        Ok(())
    }

    /// As [`execute`](Self::execute), with the slices spread over the rayon pool
    /// ([`parallelism`](Self::parallelism) workers for `target`, each summing a contiguous
    /// range of slices into its own accumulator; the partial sums are added in range order,
    /// so the result depends on the number of workers only through rounding).
    ///
    /// # Errors
    /// As [`execute`](Self::execute); the first error of any worker.
    pub fn execute_par<B>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        target: &MemoryTarget,
    ) -> Result<B::Tensor>
    where
        B: Backend + Sync,
        B::Tensor: Send + Sync,
    {
        let dtype = self.check(be, operands)?;
        let hots = self.one_hots(be, operands)?;
        let out: usize = self.output_dims().iter().product();
        let parts = self.partition(self.parallelism(target, out));
        let partial: Vec<Option<B::Tensor>> = parts
            .into_par_iter()
            .map(|range| {
                let mut c = be.empty(self.output_dims(), dtype)?;
                self.execute_range(
                    be,
                    &HeapAllocator,
                    operands,
                    &hots,
                    range,
                    &mut c,
                    dtype,
                    &mut |_| Ok(()),
                )?;
                Ok(Some(c))
            })
            .collect::<Result<_>>()?;
        let mut c = None;
        for part in partial.into_iter().flatten() {
            accumulate(be, &mut c, part)?;
        }
        let c = c.ok_or_else(|| Error::invalid("plan", "a sliced plan without slices"))?;
        crate::finite::check(be, || "output".into(), &c, operands)?;
        Ok(c)
    }

    /// `workers` non-empty contiguous ranges covering the slices.
    fn partition(&self, workers: usize) -> Vec<std::ops::Range<usize>> {
        let w = workers.clamp(1, self.slices.max(1));
        let ranges = self.slice_ranges(w).unwrap_or_default();
        ranges.into_iter().filter(|r| !r.is_empty()).collect()
    }

    /// The value and a pullback that runs the slices again when applied (no intermediate is
    /// kept between the two passes). Operands with `active[k]` unset get no cotangent.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"active"`); the errors of
    /// [`execute`](Self::execute).
    pub fn rrule<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        active: &[bool],
    ) -> Result<(B::Tensor, SlicedPullback<B>)> {
        self.check_flags("active", active.len())?;
        let c = self.execute(be, operands)?;
        let pullback = SlicedPullback {
            plan: self.clone(),
            be: be.clone(),
            operands: operands.iter().map(|&t| t.clone()).collect(),
            active: active.to_vec(),
        };
        Ok((c, pullback))
    }

    /// The value and the cotangents of the active operands for the output cotangent `c_bar`
    /// (of the output's shape), in one pass over the slices: slice `j`'s forward pass, then
    /// at once its pullback, both added into the results, before slice `j + 1` starts.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"operands"`, `"active"`); [`Error::ShapeMismatch`] /
    /// [`Error::DTypeMismatch`] naming `"operand k"` or `"c_bar"`; the backend's errors;
    /// [`Error::NonFinite`] naming the output or the cotangent that overflows although every
    /// input is finite.
    pub fn value_and_gradient<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        c_bar: &B::Tensor,
        active: &[bool],
    ) -> Result<ValueAndGradient<B::Tensor>> {
        self.check(be, operands)?;
        self.check_flags("active", active.len())?;
        let hots = self.one_hots(be, operands)?;
        let all = 0..self.slices;
        let (c, grads) =
            self.gradient_range(be, operands, &hots, c_bar, active, all, &mut |_| Ok(()))?;
        self.finish_gradient(be, operands, c_bar, c, grads)
    }

    /// As [`value_and_gradient`](Self::value_and_gradient), with the slices spread over the
    /// rayon pool as in [`execute_par`](Self::execute_par) (each worker keeps its own
    /// accumulators for the value and the cotangents).
    ///
    /// # Errors
    /// As [`value_and_gradient`](Self::value_and_gradient); the first error of any worker.
    pub fn value_and_gradient_par<B>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        c_bar: &B::Tensor,
        active: &[bool],
        target: &MemoryTarget,
    ) -> Result<ValueAndGradient<B::Tensor>>
    where
        B: Backend + Sync,
        B::Tensor: Send + Sync,
    {
        self.check(be, operands)?;
        self.check_flags("active", active.len())?;
        let hots = self.one_hots(be, operands)?;
        let mut acc: usize = self.output_dims().iter().product();
        for (k, &a) in active.iter().enumerate() {
            if a {
                acc += self.operand_dims[k].iter().product::<usize>();
            }
        }
        let parts = self.partition(self.parallelism(target, acc));
        let partial: Vec<ValueAndGradient<B::Tensor>> = parts
            .into_par_iter()
            .map(|range| {
                self.gradient_range(be, operands, &hots, c_bar, active, range, &mut |_| Ok(()))
            })
            .collect::<Result<_>>()?;
        let (mut c, mut grads) = (None, vec![None; operands.len()]);
        for (cj, gj) in partial {
            accumulate(be, &mut c, cj)?;
            accumulate_all(be, &mut grads, gj)?;
        }
        let c = c.ok_or_else(|| Error::invalid("plan", "a sliced plan without slices"))?;
        self.finish_gradient(be, operands, c_bar, c, grads)
    }

    /// The finite-output check of the summed value and cotangents (of
    /// [`value_and_gradient_slices`](Self::value_and_gradient_slices) summed over every
    /// range): returns them unchanged, or [`Error::NonFinite`] naming the output or the
    /// cotangent that overflowed although every input is finite.
    ///
    /// # Errors
    /// [`Error::NonFinite`]; the backend's errors.
    pub fn finish_gradient<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        c_bar: &B::Tensor,
        c: B::Tensor,
        grads: Vec<Option<B::Tensor>>,
    ) -> Result<ValueAndGradient<B::Tensor>> {
        crate::finite::check(be, || "output".into(), &c, operands)?;
        let mut inputs = operands.to_vec();
        inputs.push(c_bar);
        check_all(be, "the cotangent", &grads, &inputs)?;
        Ok((c, grads))
    }

    /// Value and cotangents summed over the slices of `range`.
    #[allow(clippy::too_many_arguments)]
    fn gradient_range<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        hots: &[Vec<B::Tensor>],
        c_bar: &B::Tensor,
        active: &[bool],
        range: std::ops::Range<usize>,
        between: Between<'_>,
    ) -> Result<ValueAndGradient<B::Tensor>> {
        let n = operands.len();
        let active = self.extended(active, false);
        let (mut c, mut grads) = (None, vec![None; n]);
        for j in range {
            between(j)?;
            let ops = self.slice_operands(operands, hots, j);
            let (cj, pullback) = self.plan.rrule(be, &ops, &active)?;
            accumulate(be, &mut c, cj)?;
            let mut g = pullback.pullback(c_bar)?;
            g.truncate(n);
            accumulate_all(be, &mut grads, g)?;
        }
        let c = c.ok_or_else(|| Error::invalid("plan", "a sliced plan without slices"))?;
        Ok((c, grads))
    }

    /// The value and its tangent for operand tangents `tangents` (`None` a zero tangent):
    /// `Ċ = Σ_j Ċ_j`, one slice at a time.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"tangents"`); the errors of
    /// [`NetworkPlan::frule`](crate::network::NetworkPlan::frule).
    pub fn frule<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        tangents: &[Option<&B::Tensor>],
    ) -> Result<(B::Tensor, B::Tensor)> {
        let all = 0..self.slices;
        let (c, dc) = self.frule_slices(be, operands, tangents, all, &mut |_| Ok(()))?;
        self.finish_frule(be, operands, tangents, c, dc)
    }

    /// The finite-output check of a summed value and tangent (of
    /// [`frule_slices`](Self::frule_slices) summed over every range): returns them
    /// unchanged, or [`Error::NonFinite`] naming the one that overflowed although every
    /// input is finite.
    ///
    /// # Errors
    /// [`Error::NonFinite`]; the backend's errors.
    pub fn finish_frule<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        tangents: &[Option<&B::Tensor>],
        c: B::Tensor,
        dc: B::Tensor,
    ) -> Result<(B::Tensor, B::Tensor)> {
        crate::finite::check(be, || "output".into(), &c, operands)?;
        let mut inputs = operands.to_vec();
        inputs.extend(tangents.iter().flatten());
        crate::finite::check(be, || "the tangent of the output".into(), &dc, &inputs)?;
        Ok((c, dc))
    }

    /// The Hessian-vector product of `φ(T) = Re⟨c_bar, N(T)⟩` along `tangents` for the
    /// active operands, and the value: the sum over slices of
    /// [`NetworkPlan::hvp`](crate::network::NetworkPlan::hvp).
    ///
    /// # Errors
    /// As [`second_order`](Self::second_order).
    pub fn hvp<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        c_bar: &B::Tensor,
        tangents: &[Option<&B::Tensor>],
        active: &[bool],
    ) -> Result<NetworkHvp<B>> {
        let request = SecondOrder::hvp(c_bar, tangents, active);
        self.second_order(be, &HeapAllocator, operands, &request)
    }

    /// The general second-order rule ([`NetworkPlan::second_order`](crate::network::NetworkPlan::second_order))
    /// summed over the slices: value, optionally the gradient, and the tangent of the gradient
    /// for the operands `request.active` selects. One slice's temporaries are about four
    /// times its forward pass's (values, tangents, cotangents and their tangents); the target
    /// does not bound them.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"operands"`, `"tangents"`, `"active"`); the errors of
    /// [`NetworkPlan::second_order`](crate::network::NetworkPlan::second_order).
    pub fn second_order<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
        request: &SecondOrder<'_, B>,
    ) -> Result<NetworkHvp<B>> {
        self.check(be, operands)?;
        self.check_flags("tangents", request.tangents.len())?;
        self.check_flags("active", request.active.len())?;
        let n = operands.len();
        let hots = self.one_hots(be, operands)?;
        let tangents = self.extended(request.tangents, None);
        let active = self.extended(request.active, false);
        let slice_request = SecondOrder {
            tangents: &tangents,
            active: &active,
            ..*request
        };
        let (mut value, mut gradient, mut hvp) = (None, vec![None; n], vec![None; n]);
        for j in 0..self.slices {
            let ops = self.slice_operands(operands, &hots, j);
            let r = self.plan.second_order(be, alloc, &ops, &slice_request)?;
            accumulate(be, &mut value, r.value)?;
            accumulate_all(be, &mut gradient, r.gradient.into_iter().take(n))?;
            accumulate_all(be, &mut hvp, r.hvp.into_iter().take(n))?;
        }
        let value = value.ok_or_else(|| Error::invalid("plan", "a sliced plan without slices"))?;
        crate::finite::check(be, || "output".into(), &value, operands)?;
        let mut inputs = operands.to_vec();
        inputs.push(request.c_bar);
        inputs.extend(request.c_bar_dot);
        inputs.extend(request.tangents.iter().flatten());
        check_all(be, "the gradient", &gradient, &inputs)?;
        check_all(be, "the HVP", &hvp, &inputs)?;
        Ok(NetworkHvp {
            value,
            gradient,
            hvp,
        })
    }
}

/// # Partial sums over ranges of slices
///
/// The value, the cotangents and the tangent of a sliced network are sums over its slices,
/// so any split of the slices into ranges (threads, processes, hosts) gives the same result
/// once the partial sums are added: rank `r` of `p` runs `slice_ranges(p)[r]`, the
/// partial results are summed (an all-reduce), and the `finish_*` method checks the sum as
/// the one-process methods check theirs. A range may be empty (more parts than slices): its
/// partial sums are zeros of the shapes and dtypes every other range returns, so that all
/// parts contribute buffers of one layout. `between` runs before each slice with its index
/// and may stop the run (a distributed runner polls its peers there).
impl SlicedPlan {
    /// `parts` contiguous ranges of slices covering `0..num_slices()` in order, their
    /// lengths differing by at most one (every slice costs the same: they share one plan),
    /// some empty when `parts > num_slices()`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (argument `"parts"`) for zero parts.
    pub fn slice_ranges(&self, parts: usize) -> Result<Vec<std::ops::Range<usize>>> {
        if parts == 0 {
            return Err(Error::invalid("parts", "at least one part is needed"));
        }
        Ok((0..parts)
            .map(|i| (self.slices * i / parts)..(self.slices * (i + 1) / parts))
            .collect())
    }

    fn check_range(&self, range: &std::ops::Range<usize>) -> Result<()> {
        if range.start <= range.end && range.end <= self.slices {
            return Ok(());
        }
        Err(Error::invalid(
            "range",
            format!(
                "{range:?} is not a range of the {} slices (0..{})",
                self.slices, self.slices
            ),
        ))
    }

    /// `Σ_{j ∈ range} C_j`, a new tensor of the output's shape and the operands' joined
    /// dtype (zeros for an empty range), each slice's temporaries from `alloc`. Not checked
    /// for finiteness: check the sum with [`finish_value`](Self::finish_value).
    ///
    /// # Errors
    /// As [`execute`](Self::execute); [`Error::InvalidArgument`] (argument `"range"`) for a
    /// range outside `0..num_slices()`; the error `between` returns.
    pub fn execute_slices<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
        range: std::ops::Range<usize>,
        between: Between<'_>,
    ) -> Result<B::Tensor> {
        let dtype = self.check(be, operands)?;
        self.check_range(&range)?;
        if range.is_empty() {
            return be.zeros(self.output_dims(), dtype);
        }
        let hots = self.one_hots(be, operands)?;
        let mut c = alloc.allocate(be, self.output_dims(), dtype, Lifetime::Persistent)?;
        self.execute_range(be, alloc, operands, &hots, range, &mut c, dtype, between)?;
        Ok(c)
    }

    /// The finite-output check of a summed value (of [`execute_slices`](Self::execute_slices)
    /// over every range): returns it, or [`Error::NonFinite`] (argument `"output"`).
    ///
    /// # Errors
    /// [`Error::NonFinite`]; the backend's errors.
    pub fn finish_value<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        c: B::Tensor,
    ) -> Result<B::Tensor> {
        crate::finite::check(be, || "output".into(), &c, operands)?;
        Ok(c)
    }

    /// The value and the active operands' cotangents summed over the slices of `range`
    /// (zeros for an empty range; `None` for the inactive operands). Not checked for
    /// finiteness: check the sums with [`finish_gradient`](Self::finish_gradient).
    ///
    /// # Errors
    /// As [`value_and_gradient`](Self::value_and_gradient); [`Error::InvalidArgument`]
    /// (argument `"range"`); the error `between` returns.
    pub fn value_and_gradient_slices<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        c_bar: &B::Tensor,
        active: &[bool],
        range: std::ops::Range<usize>,
        between: Between<'_>,
    ) -> Result<ValueAndGradient<B::Tensor>> {
        let dtype = self.check(be, operands)?;
        self.check_flags("active", active.len())?;
        self.check_range(&range)?;
        if range.is_empty() {
            // the checks a slice's pullback would make on `c_bar`
            let dims = be.dims(c_bar);
            if dims.as_slice() != self.output_dims() {
                return Err(Error::shape("c_bar", self.output_dims(), &dims));
            }
            let c = be.zeros(self.output_dims(), dtype)?;
            let grads = (operands.iter().zip(active))
                .map(|(t, &a)| a.then(|| be.zeros(&be.dims(t), be.dtype(t))).transpose())
                .collect::<Result<_>>()?;
            return Ok((c, grads));
        }
        let hots = self.one_hots(be, operands)?;
        self.gradient_range(be, operands, &hots, c_bar, active, range, between)
    }

    /// The value and its tangent summed over the slices of `range` (zeros for an empty
    /// range), for operand tangents `tangents` (`None` a zero tangent). Not checked for
    /// finiteness: check the sums with [`finish_frule`](Self::finish_frule).
    ///
    /// # Errors
    /// As [`frule`](Self::frule); [`Error::InvalidArgument`] (argument `"range"`); the error
    /// `between` returns.
    pub fn frule_slices<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        tangents: &[Option<&B::Tensor>],
        range: std::ops::Range<usize>,
        between: Between<'_>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        let dtype = self.check(be, operands)?;
        self.check_flags("tangents", tangents.len())?;
        self.check_range(&range)?;
        if range.is_empty() {
            let tangent_dtype = tangents
                .iter()
                .flatten()
                .fold(dtype, |d, t| d.join(be.dtype(t)));
            let c = be.zeros(self.output_dims(), dtype)?;
            return Ok((c, be.zeros(self.output_dims(), tangent_dtype)?));
        }
        let hots = self.one_hots(be, operands)?;
        let tangents = self.extended(tangents, None);
        let (mut c, mut dc) = (None, None);
        for j in range {
            between(j)?;
            let ops = self.slice_operands(operands, &hots, j);
            let (cj, dcj) = self.plan.frule(be, &ops, &tangents)?;
            accumulate(be, &mut c, cj)?;
            accumulate(be, &mut dc, dcj)?;
        }
        let (Some(c), Some(dc)) = (c, dc) else {
            return Err(Error::invalid("plan", "a sliced plan without slices"));
        };
        Ok((c, dc))
    }
}
