//! A decomposition inside an engine's autodiff graph: the part every engine adapter shares
//! (candle's and burn's `linalg` modules), [`FactorsNode`] and [`FactorsPullback`]; the
//! scheme is on [`FactorsNode`].

use super::{ClusteredEighPullback, EighPullback, QrPullback, SvdCotangents, SvdPullback};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::rule::{JointPullback, OutputsNode};
use crate::scalar::DType;

/// Where the cotangents of a decomposition's factors meet, in an engine whose ops have one
/// output (candle's custom ops, burn's nodes).
///
/// # The scheme
/// The rules' multi-output node [`OutputsNode`](crate::rule::OutputsNode) over the
/// decomposition's pullback (its tickets and errors), with factor-named arguments:
/// An adapter computes the factors and the pullback once (`svd_rrule`, `qr_rrule`,
/// `eigh_rrule`, …) and records `1 + F` nodes for `F` factors:
/// - the **node** over `A`, whose output is a vector `[F]` of zeros (no data of the
///   decomposition) and whose backward is [`FactorsNode::pullback`];
/// - one **selector** per factor `i`, over the node's output, whose output is factor `i`
///   (the values computed above) and whose backward hands its cotangent to
///   [`FactorsNode::deposit`] and returns, as the cotangent of the node's output, the vector
///   `deposit` gives: zeros but for a **ticket** at position `i`, a tensor of the backend.
///
/// The engine's backward runs every selector a loss reaches before the node (they consume
/// its output), sums the selectors' vectors into the node's cotangent, a vector of the
/// tickets of this pass (0 for a factor the loss does not use), and the node's backward
/// takes the deposits named by the tickets and runs the decomposition's pullback once, on
/// the cotangents of all the factors ([`FactorsPullback`]; `None` for an unused one).
/// Nothing is recomputed in backward.
///
/// Why not one node whose output is the factors packed into one vector, each factor a slice
/// of it: the engines' backward of a slice builds a cotangent of the whole packed vector
/// (zeros, a concatenation or slice assignment, then an addition per factor); measured on
/// the SVD of a 256 × 256 f64 matrix through candle, that was 12 % of forward + backward,
/// more than the pullback itself. Here each selector's backward moves its cotangent (a
/// handle, no copy) and an `F`-vector.
///
/// Tickets are unique among the deposits alive at one time (a counter shared by every
/// node, up to `2²⁴ − 1`, then wrapping, so that a ticket is exact in f32), so passes that
/// run at the same time (two threads) or one after another (a loss differentiated twice)
/// never take each other's cotangents. A deposit whose pass fails before reaching the node
/// stays until the node is dropped with the graph.
///
/// # Example
/// ```
/// use adrules_core::linalg::{FactorsNode, FactorsPullback, RuleOptions, SvdMode, svd_rrule};
/// use adrules_core::{Backend, HostTensor};
/// use adrules_strided::Strided;
///
/// # fn main() -> adrules_core::Result<()> {
/// let be = Strided;
/// let a = be.from_host(HostTensor::from_vec(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?)?;
/// let (f, pb) = svd_rrule(&be, &a, SvdMode::Thin, RuleOptions::default())?;
/// let node = FactorsNode::new(FactorsPullback::svd(pb));
/// // the gradient of Σ s is U·Vh: a loss that uses S only reaches S's selector (factor 1)
/// let ones = be.from_host(HostTensor::from_vec(&[2], vec![1.0f64; 2])?)?;
/// let node_bar = node.deposit(1, ones)?;
/// let tickets = be.to_host(&node_bar)?;
/// let t = tickets.as_slice::<f64>()?;
/// assert!(t[0] == 0.0 && t[1] > 0.0 && t[2] == 0.0);
/// let a_bar = node.pullback(&node_bar)?;
/// assert_eq!(be.dims(&a_bar).as_slice(), &[3, 2]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct FactorsNode<B: Backend> {
    /// the rules' multi-output node, over the decomposition's pullback
    node: OutputsNode<B, FactorsPullback<B>>,
}

impl<B: Backend> FactorsNode<B> {
    /// The node of a decomposition whose pullback is `pullback`.
    pub fn new(pullback: FactorsPullback<B>) -> Self {
        FactorsNode {
            node: OutputsNode::new(pullback),
        }
    }

    /// The number of factors `F` (the length of the node's output and of its cotangent).
    pub fn num_factors(&self) -> usize {
        self.node.num_outputs()
    }

    /// Keeps `cotangent`, the cotangent of factor `factor` (shaped as the factor; checked by
    /// [`pullback`](Self::pullback)), and returns the selector's cotangent of the node's
    /// output: `[F]` zeros but for this deposit's ticket (a positive integer below `2²⁴`)
    /// at `factor`, on the decomposition's backend, in the real dtype of `A`'s precision.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`"factor"`) when `factor ≥ F`; the backend's transfer
    /// error.
    pub fn deposit(&self, factor: usize, cotangent: B::Tensor) -> Result<B::Tensor> {
        let count = self.num_factors();
        if factor >= count {
            let why = format!("is {factor}, the decomposition has {count} factors");
            return Err(Error::invalid("factor", why));
        }
        self.node.deposit(factor, cotangent)
    }

    /// `Ā` for the node's output cotangent `node_bar` (`[F]`, real: the sum of the vectors
    /// [`deposit`](Self::deposit) returned in this pass): the deposits it names are taken and
    /// [`FactorsPullback::pullback_partial`] runs on them, `None` for a factor whose entry is
    /// 0 (unused by the loss).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (`"node_bar"`) for a shape other than `[F]`;
    /// [`Error::DTypeMismatch`] for a complex one; [`Error::InvalidArgument`] (`"node_bar"`)
    /// for an entry that is not the ticket of a deposit of that factor still kept (an engine
    /// that scaled or mixed the selectors' vectors), and then no deposit is taken; then those
    /// of [`FactorsPullback::pullback_partial`].
    pub fn pullback(&self, node_bar: &B::Tensor) -> Result<B::Tensor> {
        self.node.pullback(node_bar)
    }
}

impl<B: Backend> JointPullback<B> for FactorsPullback<B> {
    type Output = B::Tensor;

    fn num_outputs(&self) -> usize {
        self.num_factors()
    }

    /// `A`'s backend and dtype.
    fn ticket_backend(&self) -> (&B, DType) {
        self.backend()
    }

    fn pullback_partial(&self, cotangents: &[Option<B::Tensor>]) -> Result<B::Tensor> {
        FactorsPullback::pullback_partial(self, cotangents)
    }
}

/// The pullback of a decomposition on the cotangents of all its factors, in the order of
/// the decomposition's fields (see the module docs): `[Ū, S̄, V̄h]` for
/// [`svd`](FactorsPullback::svd), `[Ū, S̄, V̄h, discarded̄]` for
/// [`svd_truncated`](FactorsPullback::svd_truncated), `[Q̄, R̄]` for
/// [`qr`](FactorsPullback::qr), `[λ̄, V̄]` for [`eigh`](FactorsPullback::eigh), `[W̄, C̄']`
/// for [`eigh_clustered`](FactorsPullback::eigh_clustered). Cheap to clone (the pullbacks
/// share their host factors).
#[derive(Clone, Debug)]
pub struct FactorsPullback<B: Backend>(Kind<B>);

#[derive(Clone, Debug)]
enum Kind<B: Backend> {
    Svd(SvdPullback<B>),
    Truncated(SvdPullback<B>),
    Qr(QrPullback<B>),
    Eigh(EighPullback<B>),
    Clustered(ClusteredEighPullback<B>),
}

impl<B: Backend> FactorsPullback<B> {
    /// The pullback of [`svd_rrule`](super::svd_rrule) (thin or full).
    pub fn svd(pullback: SvdPullback<B>) -> Self {
        FactorsPullback(Kind::Svd(pullback))
    }

    /// The pullback of [`svd_truncated_rrule`](super::svd_truncated_rrule). With
    /// [`RuleOptions::discarded_term`](super::RuleOptions::discarded_term) off, the zero
    /// cotangent of the discarded values an engine delivers for a loss that does not use them
    /// counts as absent (see [`SvdPullback::pullback`]).
    pub fn svd_truncated(pullback: SvdPullback<B>) -> Self {
        FactorsPullback(Kind::Truncated(pullback))
    }

    /// The pullback of [`qr_rrule`](super::qr_rrule).
    pub fn qr(pullback: QrPullback<B>) -> Self {
        FactorsPullback(Kind::Qr(pullback))
    }

    /// The pullback of [`eigh_rrule`](super::eigh_rrule).
    pub fn eigh(pullback: EighPullback<B>) -> Self {
        FactorsPullback(Kind::Eigh(pullback))
    }

    /// The pullback of [`eigh_clustered_rrule`](super::eigh_clustered_rrule), over its two
    /// differentiable outputs in this order: the basis `W: [batch…, n, k]`, then the
    /// compressed matrix `C' = Wᴴ·A·W: [batch…, k, k]`. The kept eigenvalues and the
    /// [`ClusterInfo`](super::ClusterInfo) are not differentiable outputs (`C'` carries the
    /// eigenvalues; the cluster structure is piecewise constant): an engine returns them as
    /// plain data without a gradient, and they take no cotangent here. The formulas (Kato's
    /// projector derivative, the secondary operator's rotation and the phase term) and
    /// their sources are on [`ClusteredEighPullback::pullback`].
    pub fn eigh_clustered(pullback: ClusteredEighPullback<B>) -> Self {
        FactorsPullback(Kind::Clustered(pullback))
    }

    /// The backend the factors live on and the dtype of `A`.
    fn backend(&self) -> (&B, DType) {
        match &self.0 {
            Kind::Svd(pb) | Kind::Truncated(pb) => (&pb.be, pb.dtype),
            Kind::Qr(pb) => (&pb.be, pb.dtype),
            Kind::Eigh(pb) => (&pb.be, pb.dtype),
            Kind::Clustered(pb) => (&pb.be, pb.dtype),
        }
    }

    /// The number of factors (and of cotangents [`pullback`](Self::pullback) takes).
    pub fn num_factors(&self) -> usize {
        match self.0 {
            Kind::Svd(_) => 3,
            Kind::Truncated { .. } => 4,
            Kind::Qr(_) | Kind::Eigh(_) | Kind::Clustered(_) => 2,
        }
    }

    /// `Ā` from the cotangents of every factor, in order, shaped as the factors.
    ///
    /// # Errors
    /// As [`pullback_partial`](Self::pullback_partial).
    pub fn pullback(&self, cot: &[B::Tensor]) -> Result<B::Tensor> {
        let cot: Vec<Option<B::Tensor>> = cot.iter().cloned().map(Some).collect();
        self.pullback_partial(&cot)
    }

    /// `Ā` from the cotangents of the factors, in order, shaped as the factors, `None` for a
    /// factor the loss does not use (the same `Ā` as a zero cotangent).
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"cotangents"`) for a wrong number of cotangents; otherwise
    /// (shapes and dtypes of the cotangents included)
    /// those of [`SvdPullback::pullback`], [`QrPullback::pullback`],
    /// [`EighPullback::pullback`] or [`ClusteredEighPullback::pullback`]
    /// ([`Error::GaugeIllDefined`] for a loss that depends on the gauge of the factors, or a
    /// kept eigenvalue degenerate with one outside its cluster without broadening).
    pub fn pullback_partial(&self, cot: &[Option<B::Tensor>]) -> Result<B::Tensor> {
        if cot.len() != self.num_factors() {
            return Err(Error::CountMismatch {
                arg: "cotangents".into(),
                expected: self.num_factors(),
                actual: cot.len(),
            });
        }
        let c = |i: usize| cot[i].as_ref();
        let svd = |pb: &SvdPullback<B>, discarded| {
            pb.pullback(SvdCotangents {
                u: c(0),
                s: c(1),
                vh: c(2),
                discarded,
            })
        };
        match &self.0 {
            Kind::Svd(pb) => svd(pb, None),
            Kind::Truncated(pb) => svd(pb, c(3)),
            Kind::Qr(pb) => pb.pullback(c(0), c(1)),
            Kind::Eigh(pb) => pb.pullback(c(0), c(1)),
            Kind::Clustered(pb) => pb.pullback(c(0), c(1)),
        }
    }
}
