//! # adrules-mpi
//!
//! A sliced tensor network ([`SlicedPlan`]) and its derivatives across the ranks of an MPI
//! communicator: the practice of cotengra/quimb (`contract_slice` per rank, then one
//! reduction), NVIDIA cuTensorNet's distributed slicing and JAX's `shard_map` + `psum`.
//!
//! - Rank `r` of `p` runs the contiguous range `plan.slice_ranges(p)[r]` of slices (every
//!   slice costs the same, so equal counts are equal costs; with more ranks than slices some
//!   ranks run none and contribute zeros) with the plan's own rules and allocator, one
//!   slice after another (the rayon pool parallelises within each slice's contractions).
//! - The partial sums are reduced once: a reduce to rank 0 (in the order MPI chooses), then
//!   a broadcast of rank 0's sum, so that every rank holds the *same bits* (an all-reduce
//!   may round differently on different ranks).
//! - [`Distributed::execute`] (value), [`Distributed::rrule`] (value and a pullback that
//!   reruns the slices when applied), [`Distributed::value_and_gradient`] (value and
//!   pullback in one pass: the cotangents of operands without a sliced label are reduced; those of
//!   operands with one are reduced too, or left as each rank's partial sum with
//!   [`Cotangents::Local`]) and [`Distributed::frule`] (pushforward), for `f32`, `f64`,
//!   `Complex32` and `Complex64` on any [`Backend`].
//! - **Faults** ([`Error`]): a rank whose slices return an error or panic reports it to
//!   rank 0 at once; rank 0 stops at its next slice boundary and answers every rank, which
//!   stops at its next boundary after that answer: every rank returns [`Error::RankFailed`]
//!   naming the failing rank. Every rank gives a sign of life between its slices (at least
//!   every quarter of the timeout), and a rank that waits for a peer it has heard nothing
//!   from for the timeout ([`Distributed::with_timeout`], default [`DEFAULT_TIMEOUT`]; it
//!   must exceed the longest single slice) names it with [`Error::Unresponsive`]: a killed or
//!   hung rank. Bound: a rank returns at most `timeout` after the last sign of life of the
//!   peer it waits for, plus at most `2 × min(2 s, timeout)` to drain and complete its
//!   messages and `timeout` for the reduction. A mismatched call ([`Error::Inconsistent`])
//!   is found once every rank has run its slices. The caller's operands are never written.
//!   Whether the surviving processes get to return depends on the launcher: Open MPI's
//!   `mpirun` terminates every rank of a job once one process exits abnormally unless it is
//!   given `--enable-recovery` (see `docs/DISTRIBUTED.md`).
//!
//! The caller's communicator is duplicated ([`Distributed::new`], a collective call), so the
//! messages of a run never match the caller's own, and its error handler is set to return
//! errors instead of aborting the job.
//!
//! ```no_run
//! use adrules_core::network::{MemoryTarget, Network, Order, SlicedPlan};
//! use adrules_mpi::Distributed;
//! use adrules_strided::{Strided, Tensor};
//!
//! let universe = mpi::initialize().unwrap();
//! let dist = Distributed::new(&universe.world());
//! let network = Network::einsum("ab,bc,cd,da->").unwrap();
//! let dims = [[64, 64], [64, 64], [64, 64], [64, 64]];
//! let plan = SlicedPlan::new(&network, &dims, &Order::Default, MemoryTarget::Elements(64))?;
//! # let operands: Vec<Tensor> = vec![];
//! let refs: Vec<&Tensor> = operands.iter().collect();
//! let value = dist.execute(&plan, &Strided, &refs)?; // the same on every rank
//! # Ok::<(), adrules_mpi::Error>(())
//! ```

#![warn(missing_docs)]

mod error;
mod exchange;
mod pack;

use std::cell::Cell;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use adrules_core::network::{SlicedPlan, ValueAndGradient};
use adrules_core::{Allocator, Backend, HeapAllocator};
use mpi::collective::SystemOperation;
use mpi::request::StaticScope;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

pub use error::{Error, Failure, Result};
use exchange::{Exchange, Status};
use pack::{Layout, pack, packed_len, unpack};

/// The most values one MPI reduction carries (MPI counts are `i32`).
const CHUNK: usize = 1 << 28;

/// The default bound on how long a rank waits for its peers after its own slices
/// ([`Distributed::with_timeout`]): 60 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// What [`Distributed::value_and_gradient`] returns for operands that carry a sliced label.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cotangents {
    /// every cotangent reduced: each rank holds the whole gradient
    #[default]
    Reduced,
    /// the cotangents of operands with a sliced label ([`SlicedPlan::sliced_operands`]) are
    /// this rank's partial sums over its own slices (the cotangent is their sum over the
    /// ranks; each is non-zero only on the rows of this rank's slices); the others reduced
    Local,
}

/// A communicator's ranks running sliced plans together: each call is collective (every rank
/// calls it with the same plan, shapes, dtypes and flags, its own copy of the operands) and
/// returns the same result on every rank, or the same error.
pub struct Distributed {
    comm: SimpleCommunicator,
    timeout: Duration,
    calls: Cell<u64>,
    /// why no further call can run (an earlier call left peers silent or a reduction
    /// pending)
    unusable: std::cell::RefCell<Option<String>>,
}

impl std::fmt::Debug for Distributed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distributed")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Part of a call's result: the tensors each rank reduces, and those it keeps.
struct Parts<T> {
    reduced: Vec<T>,
    kept: Vec<T>,
}

impl Distributed {
    /// Duplicates `comm` (a collective call: every rank of `comm` must make it) and sets the
    /// duplicate's error handler to return MPI errors (instead of aborting the job).
    pub fn new<C: Communicator>(comm: &C) -> Distributed {
        let comm = comm.duplicate();
        // SAFETY: a valid communicator and a predefined error handler
        unsafe {
            mpi::ffi::MPI_Comm_set_errhandler(comm.as_raw(), mpi::ffi::RSMPI_ERRORS_RETURN);
        }
        Distributed {
            comm,
            timeout: DEFAULT_TIMEOUT,
            calls: Cell::new(0),
            unusable: Default::default(),
        }
    }

    /// The bound on each wait for the peers (see the crate docs). Give every rank the same.
    ///
    /// # Errors
    /// [`Error::Core`] with an invalid argument `"timeout"` for a zero timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Result<Distributed> {
        if timeout.is_zero() {
            return Err(
                adrules_core::Error::invalid("timeout", "a timeout must be positive").into(),
            );
        }
        self.timeout = timeout;
        Ok(self)
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> usize {
        self.comm.rank() as usize
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.comm.size() as usize
    }

    /// The slices this rank runs for `plan`: `plan.slice_ranges(size)[rank]`.
    pub fn slices(&self, plan: &SlicedPlan) -> Range<usize> {
        let ranges = plan.slice_ranges(self.size()).unwrap_or_default();
        ranges.get(self.rank()).cloned().unwrap_or(0..0)
    }

    /// `C = Σ_j C_j` over every rank's slices; the same tensor on every rank.
    ///
    /// # Errors
    /// [`Error::RankFailed`] (this rank's or another's operands refused, a slice's error or
    /// panic), [`Error::Unresponsive`], [`Error::Inconsistent`],
    /// [`Error::ReductionTimedOut`]; [`Error::Core`] for an overflow of the sum.
    pub fn execute<B: Backend>(
        &self,
        plan: &SlicedPlan,
        be: &B,
        operands: &[&B::Tensor],
    ) -> Result<B::Tensor> {
        self.execute_with(plan, be, &HeapAllocator, operands)
    }

    /// As [`execute`](Self::execute), each slice's temporaries from `alloc`.
    ///
    /// # Errors
    /// As [`execute`](Self::execute).
    pub fn execute_with<B: Backend, A: Allocator<B>>(
        &self,
        plan: &SlicedPlan,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
    ) -> Result<B::Tensor> {
        let range = self.slices(plan);
        let out = self.run(plan, be, "execute", &[], |between| {
            let c = plan.execute_slices(be, alloc, operands, range, between)?;
            Ok(Parts {
                reduced: vec![c],
                kept: vec![],
            })
        })?;
        let c = next_reduced(&mut out.reduced.into_iter(), "value")?;
        Ok(plan.finish_value(be, operands, c)?)
    }

    /// The value and the cotangents of the active operands for the output cotangent `c_bar`
    /// (the same on every rank), in one pass over each rank's slices; `cotangents` chooses
    /// whether the cotangents of operands with a sliced label are reduced or kept per rank.
    ///
    /// # Errors
    /// As [`execute`](Self::execute); [`Error::Core`] for an overflow of the reduced value or
    /// cotangents.
    pub fn value_and_gradient<B: Backend>(
        &self,
        plan: &SlicedPlan,
        be: &B,
        operands: &[&B::Tensor],
        c_bar: &B::Tensor,
        active: &[bool],
        cotangents: Cotangents,
    ) -> Result<ValueAndGradient<B::Tensor>> {
        let range = self.slices(plan);
        let sliced = plan.sliced_operands();
        let keep = |k: usize| cotangents == Cotangents::Local && sliced.get(k) == Some(&true);
        let what = format!("gradient {active:?} {cotangents:?}");
        let out = self.run(plan, be, &what, &[c_bar], |between| {
            let (c, grads) =
                plan.value_and_gradient_slices(be, operands, c_bar, active, range, between)?;
            let mut parts = Parts {
                reduced: vec![c],
                kept: vec![],
            };
            for (k, g) in grads.into_iter().enumerate() {
                if let Some(g) = g {
                    if keep(k) {
                        parts.kept.push(g)
                    } else {
                        parts.reduced.push(g)
                    }
                }
            }
            Ok(parts)
        })?;
        let (mut reduced, mut kept) = (out.reduced.into_iter(), out.kept.into_iter());
        let c = next_reduced(&mut reduced, "value")?;
        let grads: Vec<Option<B::Tensor>> = (0..operands.len())
            .map(|k| match active.get(k) {
                Some(true) if keep(k) => kept.next(),
                Some(true) => reduced.next(),
                _ => None,
            })
            .collect();
        if cotangents == Cotangents::Local {
            // a partial cotangent need not be finite where the sum is; check the value only
            let c = plan.finish_value(be, operands, c)?;
            return Ok((c, grads));
        }
        Ok(plan.finish_gradient(be, operands, c_bar, c, grads)?)
    }

    /// The value and a pullback for an output cotangent not known yet (a non-scalar output):
    /// as [`SlicedPlan::rrule`], the pullback keeps handles of the operands only and runs
    /// every rank's slices again, forward and reverse, when applied (a collective call, as
    /// this one).
    ///
    /// # Errors
    /// As [`execute`](Self::execute); an `active` without one flag per operand is reported
    /// by the pullback (as [`Error::RankFailed`], every rank in step).
    pub fn rrule<'d, B: Backend>(
        &'d self,
        plan: &SlicedPlan,
        be: &B,
        operands: &[&B::Tensor],
        active: &[bool],
    ) -> Result<(B::Tensor, DistributedPullback<'d, B>)> {
        let c = self.execute(plan, be, operands)?;
        let pullback = DistributedPullback {
            dist: self,
            plan: plan.clone(),
            be: be.clone(),
            operands: operands.iter().map(|&t| t.clone()).collect(),
            active: active.to_vec(),
        };
        Ok((c, pullback))
    }

    /// The value and its tangent `Ċ = Σ_j Ċ_j` for operand tangents `tangents` (`None` a
    /// zero tangent), the same on every rank.
    ///
    /// # Errors
    /// As [`execute`](Self::execute).
    pub fn frule<B: Backend>(
        &self,
        plan: &SlicedPlan,
        be: &B,
        operands: &[&B::Tensor],
        tangents: &[Option<&B::Tensor>],
    ) -> Result<(B::Tensor, B::Tensor)> {
        let range = self.slices(plan);
        let given: Vec<bool> = tangents.iter().map(Option::is_some).collect();
        let extra: Vec<&B::Tensor> = tangents.iter().flatten().copied().collect();
        let what = format!("frule {given:?}");
        let out = self.run(plan, be, &what, &extra, |between| {
            let (c, dc) = plan.frule_slices(be, operands, tangents, range, between)?;
            Ok(Parts {
                reduced: vec![c, dc],
                kept: vec![],
            })
        })?;
        let mut it = out.reduced.into_iter();
        let (c, dc) = (
            next_reduced(&mut it, "value")?,
            next_reduced(&mut it, "tangent")?,
        );
        Ok(plan.finish_frule(be, operands, tangents, c, dc)?)
    }

    /// One collective call: this rank's part (`local`, stopped at a slice boundary when
    /// another rank fails), the status exchange, then the reduction of `reduced`.
    fn run<B: Backend>(
        &self,
        plan: &SlicedPlan,
        be: &B,
        what: &str,
        extra: &[&B::Tensor],
        local: impl FnOnce(adrules_core::network::Between<'_>) -> adrules_core::Result<Parts<B::Tensor>>,
    ) -> Result<Parts<B::Tensor>> {
        if let Some(reason) = self.unusable.borrow().clone() {
            return Err(Error::Unusable { reason });
        }
        let call = self.calls.get();
        self.calls.set(call.wrapping_add(1));
        // tags 0..32767 are valid on every MPI implementation; the call's number is also in
        // every message, so a late message of an earlier call with the same tag is dropped
        let tag = 1 + (call % 32_000) as i32;
        let rank = self.rank();
        let mut exchange = Exchange::start(&self.comm, tag, call, self.timeout);
        let mut stopped = None;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            local(&mut |j| match exchange.poll() {
                None => Ok(()),
                Some(verdict) => {
                    stopped = Some(verdict);
                    Err(adrules_core::Error::Interrupted {
                        arg: "between".into(),
                        at: j,
                        reason: "another rank failed".into(),
                    })
                }
            })
        }));
        let mut local_error = None;
        let (status, parts) = match outcome {
            Ok(Ok(mut parts)) => match pack(be, &parts.reduced.iter().collect::<Vec<_>>()) {
                Ok((buf, layout)) => {
                    // the packed copy is what is reduced: free the tensors now
                    parts.reduced.clear();
                    let (fingerprint, what) = fingerprint(plan, be, what, extra, &layout);
                    (
                        Status::Ready { fingerprint, what },
                        Some((parts, buf, layout)),
                    )
                }
                Err(e) => (failed(rank, Failure::Error, e.to_string()), None),
            },
            Ok(Err(_)) if stopped.is_some() => (Status::Stopped, None),
            Ok(Err(e)) => {
                let status = failed(rank, Failure::Error, e.to_string());
                local_error = Some(e);
                (status, None)
            }
            Err(payload) => (failed(rank, Failure::Panic, panic_message(&*payload)), None),
        };
        let started = Instant::now();
        let verdict = exchange.finish(status);
        if let Some(mut e) = verdict.error(started.elapsed()) {
            if let Error::Unresponsive { ranks, .. } = &e {
                self.poison(format!(
                    "ranks {ranks:?} were unresponsive in an earlier call; their messages may \
                     still arrive"
                ));
            }
            if let Error::RankFailed { rank: r, local, .. } = &mut e
                && *r == rank
            {
                *local = local_error;
            }
            return Err(e);
        }
        let Some((parts, mut buf, layout)) = parts else {
            return Err(Error::Inconsistent {
                rank,
                what: "rank 0 sent a success verdict for a call this rank did not finish".into(),
            });
        };
        if let Err(e) = self.reduce(&mut buf) {
            self.poison(format!("{e}; the reduction's requests are still pending"));
            return Err(e);
        }
        let reduced = unpack(be, &buf, &layout)?;
        Ok(Parts {
            reduced,
            kept: parts.kept,
        })
    }

    /// Marks this `Distributed` unusable (see [`Error::Unusable`]).
    fn poison(&self, reason: String) {
        *self.unusable.borrow_mut() = Some(reason);
    }

    /// `buf ← Σ_ranks buf`, the same bits on every rank: a reduce to rank 0, then a broadcast
    /// of rank 0's sum, in chunks of at most [`CHUNK`] values (MPI counts are `i32`); all
    /// within the timeout.
    fn reduce(&self, buf: &mut [f64]) -> Result<()> {
        if self.size() == 1 {
            return Ok(());
        }
        let start = Instant::now();
        for chunk in buf.chunks_mut(CHUNK) {
            self.reduce_chunk(chunk, start)?;
        }
        Ok(())
    }

    fn reduce_chunk(&self, chunk: &mut [f64], start: Instant) -> Result<()> {
        let root = self.comm.process_at_rank(0);
        let send: &'static mut [f64] = Box::leak(chunk.to_vec().into_boxed_slice());
        let send_ptr: *mut [f64] = send;
        // SAFETY (every request): the buffers are leaked to MPI and reclaimed only once the
        // request completes; on a timeout they stay leaked.
        let result: *mut [f64] = if self.rank() == 0 {
            let recv: &'static mut [f64] = Box::leak(vec![0.0; chunk.len()].into_boxed_slice());
            let recv_ptr: *mut [f64] = recv;
            let request = root.immediate_reduce_into_root(
                StaticScope,
                unsafe { &*send_ptr },
                unsafe { &mut *recv_ptr },
                SystemOperation::sum(),
            );
            self.complete(request, start)?;
            drop(unsafe { Box::from_raw(send_ptr) });
            recv_ptr
        } else {
            let request = root.immediate_reduce_into(
                StaticScope,
                unsafe { &*send_ptr },
                SystemOperation::sum(),
            );
            self.complete(request, start)?;
            send_ptr
        };
        let request = root.immediate_broadcast_into(StaticScope, unsafe { &mut *result });
        self.complete(request, start)?;
        let sum = unsafe { Box::from_raw(result) };
        chunk.copy_from_slice(&sum);
        Ok(())
    }

    /// Polls `request` until it completes or the timeout after `start` passes (the request
    /// and its buffers are then leaked: MPI may still use them).
    fn complete<D: ?Sized>(
        &self,
        mut request: mpi::request::Request<'static, D, StaticScope>,
        start: Instant,
    ) -> Result<()> {
        loop {
            match request.test() {
                Ok(_) => return Ok(()),
                Err(r) => request = r,
            }
            if start.elapsed() >= self.timeout {
                std::mem::forget(request);
                return Err(Error::ReductionTimedOut {
                    waited: start.elapsed(),
                });
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// The pullback of [`Distributed::rrule`]: handles of the operands, no intermediate.
pub struct DistributedPullback<'d, B: Backend> {
    dist: &'d Distributed,
    plan: SlicedPlan,
    be: B,
    operands: Vec<B::Tensor>,
    active: Vec<bool>,
}

impl<B: Backend> std::fmt::Debug for DistributedPullback<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedPullback")
            .field("dist", self.dist)
            .field("slices", &self.plan.num_slices())
            .field("active", &self.active)
            .finish()
    }
}

impl<B: Backend> DistributedPullback<'_, B> {
    /// The cotangent of every active operand (`None` for the others) for the output
    /// cotangent `c_bar`, reduced as `cotangents` says: every rank's slices run again, so
    /// this is a collective call.
    ///
    /// # Errors
    /// As [`Distributed::value_and_gradient`].
    pub fn pullback(
        &self,
        c_bar: &B::Tensor,
        cotangents: Cotangents,
    ) -> Result<Vec<Option<B::Tensor>>> {
        let operands: Vec<&B::Tensor> = self.operands.iter().collect();
        let (_, grads) = self.dist.value_and_gradient(
            &self.plan,
            &self.be,
            &operands,
            c_bar,
            &self.active,
            cotangents,
        )?;
        Ok(grads)
    }
}

fn failed(rank: usize, failure: Failure, reason: String) -> Status {
    Status::Failed {
        rank,
        failure,
        reason,
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".into()
    }
}

/// A hash of what every rank must agree on (the call, the plan's slicing and shapes, the
/// extra inputs' shapes and dtypes, the layout of the reduced buffer), and its description.
fn fingerprint<B: Backend>(
    plan: &SlicedPlan,
    be: &B,
    what: &str,
    extra: &[&B::Tensor],
    layout: &Layout,
) -> (u64, String) {
    let operands: Vec<Option<&[usize]>> = (0..plan.num_operands())
        .map(|k| plan.operand_dims(k))
        .collect();
    let extra: Vec<(Vec<usize>, String)> = extra
        .iter()
        .map(|t| (be.dims(t).to_vec(), be.dtype(t).to_string()))
        .collect();
    let layout_text: Vec<(Vec<usize>, String)> = layout
        .iter()
        .map(|(d, t)| (d.clone(), t.to_string()))
        .collect();
    let text = format!(
        "{what}: {} slices over {:?} (dims {:?}, slice cost {:e}), operands {operands:?}, \
         inputs {extra:?}, {} reduced values {layout_text:?}",
        plan.num_slices(),
        plan.sliced_labels(),
        plan.sliced_dims(),
        plan.slice_plan().cost(),
        packed_len(layout),
    );
    (fnv1a(text.as_bytes()), text)
}

/// FNV-1a, 64 bits: a hash that is the same in every build (std's `DefaultHasher` may change
/// between Rust releases, and ranks may run different builds).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The next of a run's reduced tensors (`what` names it). The reduction returns exactly the
/// tensors the rank's closure returned, so a missing one is this crate's fault: reported as a
/// typed error ([`adrules_core::Error::Backend`]), not a panic.
fn next_reduced<T>(it: &mut impl Iterator<Item = T>, what: &str) -> Result<T> {
    it.next().ok_or_else(|| {
        Error::Core(adrules_core::Error::Backend {
            backend: "mpi".into(),
            message: format!("the reduction of the partial results returned no {what}"),
        })
    })
}

/// The code blocks of this crate's `README.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
