//! [`OutputsNode`]: a multi-output rule inside an engine whose ops have one output.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::SyncBackend;
use super::run::RulePullback;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::scalar::DType;

/// A pullback over the cotangents of `M` outputs at once, `None` for an output the loss does
/// not use: what an [`OutputsNode`] runs. Implemented by a rule's [`RulePullback`] (the
/// cotangents of its inputs).
pub trait JointPullback<B: Backend> {
    /// What the pullback returns.
    type Output;

    /// The number of outputs `M`.
    fn num_outputs(&self) -> usize;

    /// The backend the tickets live on and the dtype whose precision they take (the node's
    /// output dtype in the engine: a ticket vector has its real dtype).
    fn ticket_backend(&self) -> (&B, DType);

    /// The pullback on the cotangents of the `M` outputs, in order.
    ///
    /// # Errors
    /// The pullback's own.
    fn pullback_partial(&self, cotangents: &[Option<B::Tensor>]) -> Result<Self::Output>;
}

impl<B: SyncBackend> JointPullback<B> for RulePullback<B> {
    type Output = Vec<Option<B::Tensor>>;

    fn num_outputs(&self) -> usize {
        RulePullback::num_outputs(self)
    }

    /// The first input's dtype (an engine's node over the inputs outputs that dtype).
    fn ticket_backend(&self) -> (&B, DType) {
        (self.backend(), self.input_dtype(0).unwrap_or(DType::F64))
    }

    fn pullback_partial(&self, cotangents: &[Option<B::Tensor>]) -> Result<Self::Output> {
        self.pullback(cotangents)
    }
}

/// Where the cotangents of a rule's `M` outputs meet, in an engine whose ops have one output
/// (candle's custom ops, burn's nodes).
///
/// # The scheme
/// An adapter runs the rule's rrule once and records `1 + M` ops:
/// - the **node** over the inputs, whose output is a vector `[M]` of zeros (no data of the
///   rule) and whose backward is [`OutputsNode::pullback`];
/// - one **selector** per output `j`, over the node's output, whose output is output `j`
///   (the values computed above) and whose backward hands its cotangent to
///   [`OutputsNode::deposit`] and returns, as the cotangent of the node's output, the vector
///   `deposit` gives: zeros but for a **ticket** at position `j`, a tensor of the backend.
///
/// The engine's backward runs every selector a loss reaches before the node (they consume
/// its output), sums the selectors' vectors into the node's cotangent, a vector of the
/// tickets of this pass (0 for an output the loss does not use), and the node's backward
/// takes the deposits named by the tickets and runs the pullback once, on the cotangents of
/// all the outputs (`None` for an unused one). Nothing is recomputed in backward.
///
/// Why not one op whose output packs the outputs into one vector: the engines' backward of
/// a slice builds a cotangent of the whole packed vector (zeros, a concatenation or slice
/// assignment, then an addition per output); measured on the SVD of a 256 × 256 f64 matrix
/// through candle, that was 12 % of forward + backward. Here each selector's backward moves
/// its cotangent (a handle, no copy) and an `M`-vector.
///
/// Tickets are unique among the deposits alive at one time (a counter shared by every node,
/// up to `2²⁴ − 1`, then wrapping, so that a ticket is exact in f32), so passes that run at
/// the same time (two threads) or one after another (a loss differentiated twice) never take
/// each other's cotangents. A deposit whose pass fails before reaching the node stays until
/// the node is dropped with the graph.
///
/// # Example
/// ```
/// use adrules_core::rule::{self, OutputsNode, Pullback, Primal, Rule, SyncBackend};
/// use adrules_core::{Backend, Conj, HostTensor, Permutation, Result};
/// use adrules_strided::Strided;
///
/// /// `(x, 2·x)`: two outputs; `x̄ = ȳ₀ + 2·ȳ₁`
/// #[derive(Debug)]
/// struct Twice;
///
/// impl Rule for Twice {
///     fn name(&self) -> &str { "twice" }
///     fn num_inputs(&self) -> usize { 1 }
///     fn num_outputs(&self) -> usize { 2 }
///     fn rrule<B: SyncBackend>(
///         &self, be: &B, x: &[&B::Tensor], _: &[bool],
///     ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
///         let mut y = x[0].clone();
///         be.scale(&mut y, 2.0.into())?;
///         let pb = |be: &B, x: &Primal<B>, c: &[Option<B::Tensor>]| -> Result<Vec<Option<B::Tensor>>> {
///             let x = x.input(0)?;
///             let mut x_bar = be.zeros(&be.dims(x), be.dtype(x))?;
///             let id = Permutation::identity(be.rank(x));
///             for (c, a) in c.iter().zip([1.0, 2.0]) {
///                 if let Some(c) = c {
///                     be.add(&mut x_bar, c, &id, Conj::No, a.into(), 1.0.into())?;
///                 }
///             }
///             Ok(vec![Some(x_bar)])
///         };
///         Ok((vec![x[0].clone(), y], Box::new(pb)))
///     }
/// }
///
/// # fn main() -> Result<()> {
/// let be = Strided;
/// let x = be.from_host(HostTensor::from_vec(&[2], vec![1.0, 2.0])?)?;
/// let (_, pb) = rule::rrule(&Twice, &be, &[&x], &[true])?;
/// let node = OutputsNode::new(pb);
/// // a loss that uses output 1 only: its selector deposits ȳ₁ and hands the node a ticket
/// let ones = be.from_host(HostTensor::from_vec(&[2], vec![1.0; 2])?)?;
/// let node_bar = node.deposit(1, ones)?;
/// let x_bar = node.pullback(&node_bar)?;
/// assert_eq!(be.to_host(x_bar[0].as_ref().unwrap())?.as_slice::<f64>()?, &[2.0, 2.0]);
/// # Ok(())
/// # }
/// ```
pub struct OutputsNode<B: Backend, P> {
    pullback: P,
    /// the cotangents deposited and not yet taken, by ticket: (output, cotangent)
    deposits: Mutex<HashMap<u32, (usize, B::Tensor)>>,
}

impl<B: Backend, P: fmt::Debug> fmt::Debug for OutputsNode<B, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputsNode")
            .field("pullback", &self.pullback)
            .field("deposits", &lock(&self.deposits).len())
            .finish()
    }
}

/// The next ticket (see [`OutputsNode`]): shared by every node, so that a ticket names one
/// deposit whatever the node.
static NEXT_TICKET: AtomicU32 = AtomicU32::new(0);

/// The largest ticket: `2²⁴ − 1`, every ticket is exact in f32.
const MAX_TICKET: u32 = (1 << 24) - 1;

impl<B: Backend, P: JointPullback<B>> OutputsNode<B, P> {
    /// The node of a rule (or decomposition) whose pullback is `pullback`.
    pub fn new(pullback: P) -> Self {
        OutputsNode {
            pullback,
            deposits: Mutex::new(HashMap::new()),
        }
    }

    /// The pullback the node runs.
    pub fn joint_pullback(&self) -> &P {
        &self.pullback
    }

    /// The number of outputs `M` (the length of the node's output and of its cotangent).
    pub fn num_outputs(&self) -> usize {
        self.pullback.num_outputs()
    }

    /// Keeps `cotangent`, the cotangent of output `output` (checked by the pullback), and
    /// returns the selector's cotangent of the node's output: `[M]` zeros but for this
    /// deposit's ticket (a positive integer below `2²⁴`) at `output`, on the pullback's
    /// backend, in the real dtype of [`JointPullback::ticket_backend`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`"output"`) when `output ≥ M`; the backend's transfer
    /// error.
    pub fn deposit(&self, output: usize, cotangent: B::Tensor) -> Result<B::Tensor> {
        let count = self.num_outputs();
        if output >= count {
            let why = format!("is {output}, the node has {count} outputs");
            return Err(Error::invalid("output", why));
        }
        let ticket = NEXT_TICKET.fetch_add(1, Ordering::Relaxed) % MAX_TICKET + 1;
        let mut node_bar = vec![0.0; count];
        node_bar[output] = f64::from(ticket);
        let (be, dtype) = self.pullback.ticket_backend();
        let node_bar = HostTensor::from_vec(&[count], node_bar)?.to_dtype_projected(dtype.real());
        let node_bar = be.from_host(node_bar)?;
        self.lock().insert(ticket, (output, cotangent));
        Ok(node_bar)
    }

    /// The pullback for the node's output cotangent `node_bar` (`[M]`, real: the sum of the
    /// vectors [`deposit`](Self::deposit) returned in this pass): the deposits it names are
    /// taken and [`JointPullback::pullback_partial`] runs on them, `None` for an output whose
    /// entry is 0 (unused by the loss).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (`"node_bar"`) for a shape other than `[M]`;
    /// [`Error::DTypeMismatch`] for a complex one; [`Error::InvalidArgument`] (`"node_bar"`)
    /// for an entry that is not the ticket of a deposit of that output still kept (an engine
    /// that scaled or mixed the selectors' vectors), and then no deposit is taken; then those
    /// of the pullback.
    pub fn pullback(&self, node_bar: &B::Tensor) -> Result<P::Output> {
        let (be, _) = self.pullback.ticket_backend();
        let count = self.num_outputs();
        let h = be.to_host(node_bar)?;
        if h.dims() != [count] {
            return Err(Error::shape("node_bar", &[count], h.dims()));
        }
        if h.dtype().is_complex() {
            return Err(Error::DTypeMismatch {
                arg: "node_bar".into(),
                expected: "a real dtype".into(),
                actual: h.dtype(),
            });
        }
        let h = h.to_dtype_projected(DType::F64);
        let mut deposits = self.lock();
        let is_ticket = |i: usize, t: f64| {
            let integer = t.fract() == 0.0 && t > 0.0 && t <= f64::from(MAX_TICKET);
            integer && deposits.get(&(t as u32)).is_some_and(|d| d.0 == i)
        };
        let tickets = h.as_slice::<f64>()?;
        for (i, &t) in tickets.iter().enumerate() {
            if t != 0.0 && !is_ticket(i, t) {
                let why = format!("entry {i} ({t:?}) is not the ticket of a deposit of output {i}");
                return Err(Error::invalid("node_bar", why));
            }
        }
        let cot: Vec<Option<B::Tensor>> = tickets
            .iter()
            .map(|&t| deposits.remove(&(t as u32)).map(|d| d.1))
            .collect();
        drop(deposits);
        self.pullback.pullback_partial(&cot)
    }

    fn lock(&self) -> Deposits<'_, B> {
        lock(&self.deposits)
    }
}

type Deposits<'a, B> = MutexGuard<'a, HashMap<u32, (usize, <B as Backend>::Tensor)>>;

/// The deposits, also after a panic elsewhere (they stay consistent: one insert or remove
/// at a time).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
