//! A decomposition as **one** node of an engine's autodiff graph: the part every engine
//! adapter shares (candle's and burn's `linalg` modules), [`Packing`] and
//! [`FactorsPullback`]; the scheme is on [`Packing`].

use std::ops::Range;

use super::{ClusteredEighPullback, EighPullback, QrPullback, SvdCotangents, SvdPullback};
use crate::backend::Backend;
use crate::error::{Error, Result};

/// Where the factors of a decomposition lie in their packed vector: consecutively, each
/// row-major, in order.
///
/// An engine adapter computes the factors and the pullback once (`svd_rrule`, `qr_rrule`,
/// `eigh_rrule`, …) and records one node over `A` whose output is the factors packed into
/// one flat vector, in the order of the decomposition's fields; each user-facing factor is
/// a slice + reshape of that output with the engine's own differentiable ops. The engine's
/// backward then hands the node the packed cotangent (zeros for a factor the loss does not
/// use), which the node cuts at [`pieces`](Packing::pieces) and passes to
/// [`FactorsPullback::pullback`]: the decomposition's pullback on the cotangents of all its
/// factors, in the same order. Nothing is recomputed in backward.
///
/// # Example
/// ```
/// use adrules_core::linalg::{FactorsPullback, Packing, RuleOptions, SvdMode, svd_rrule};
/// use adrules_core::{Backend, HostTensor};
/// use adrules_strided::Strided;
///
/// # fn main() -> adrules_core::Result<()> {
/// let be = Strided;
/// let a = be.from_host(HostTensor::from_vec(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?)?;
/// let (f, pb) = svd_rrule(&be, &a, SvdMode::Thin, RuleOptions::default())?;
/// let packing = Packing::of(&be, &[f.u, f.s, f.vh]);
/// // U: [3, 2] at 0..6, S: [2] at 6..8, Vh: [2, 2] at 8..12
/// let ranges: Vec<_> = packing.pieces().map(|(r, _)| r).collect();
/// assert_eq!((ranges, packing.len()), (vec![0..6, 6..8, 8..12], 12));
/// // the gradient of Σ s is U·Vh: cotangents of U and Vh zero, of S ones
/// let pullback = FactorsPullback::svd(pb);
/// let ones = be.from_host(HostTensor::from_vec(&[2], vec![1.0f64; 2])?)?;
/// let dt = be.dtype(&a);
/// let cot = [be.zeros(&[3, 2], dt)?, ones, be.zeros(&[2, 2], dt)?];
/// let a_bar = pullback.pullback(&cot)?;
/// assert_eq!(be.dims(&a_bar).as_slice(), &[3, 2]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packing {
    /// the shape of each factor
    shapes: Vec<Vec<usize>>,
    /// the offset of each factor, and the total length last
    offsets: Vec<usize>,
}

impl Packing {
    /// The packing of factors of these shapes, in order.
    pub fn new(shapes: impl IntoIterator<Item = Vec<usize>>) -> Self {
        let shapes: Vec<Vec<usize>> = shapes.into_iter().collect();
        let mut offsets = Vec::with_capacity(shapes.len() + 1);
        offsets.push(0);
        for s in &shapes {
            let last = offsets[offsets.len() - 1];
            offsets.push(last + s.iter().product::<usize>());
        }
        Packing { shapes, offsets }
    }

    /// The packing of `factors`, in order.
    pub fn of<B: Backend>(be: &B, factors: &[B::Tensor]) -> Self {
        Packing::new(factors.iter().map(|t| be.dims(t).to_vec()))
    }

    /// The number of elements of the packed vector.
    pub fn len(&self) -> usize {
        self.offsets[self.offsets.len() - 1]
    }

    /// `true` when the packed vector has no element (every factor is empty).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of factors.
    pub fn num_factors(&self) -> usize {
        self.shapes.len()
    }

    /// The shape of each factor, in order.
    pub fn shapes(&self) -> &[Vec<usize>] {
        &self.shapes
    }

    /// Each factor's range in the packed vector, with its shape, in order.
    pub fn pieces(&self) -> impl ExactSizeIterator<Item = (Range<usize>, &[usize])> + '_ {
        let ranges = self.offsets.windows(2).map(|w| w[0]..w[1]);
        ranges.zip(self.shapes.iter().map(Vec::as_slice))
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
    /// [`Error::CountMismatch`] (`"cotangents"`) for a wrong number of cotangents; otherwise
    /// (shapes and dtypes of the cotangents included)
    /// those of [`SvdPullback::pullback`], [`QrPullback::pullback`],
    /// [`EighPullback::pullback`] or [`ClusteredEighPullback::pullback`]
    /// ([`Error::GaugeIllDefined`] for a loss that depends on the gauge of the factors, or a
    /// kept eigenvalue degenerate with one outside its cluster without broadening).
    pub fn pullback(&self, cot: &[B::Tensor]) -> Result<B::Tensor> {
        if cot.len() != self.num_factors() {
            return Err(Error::CountMismatch {
                arg: "cotangents".into(),
                expected: self.num_factors(),
                actual: cot.len(),
            });
        }
        let svd = |pb: &SvdPullback<B>, discarded| {
            pb.pullback(SvdCotangents {
                u: Some(&cot[0]),
                s: Some(&cot[1]),
                vh: Some(&cot[2]),
                discarded,
            })
        };
        match &self.0 {
            Kind::Svd(pb) => svd(pb, None),
            Kind::Truncated(pb) => svd(pb, Some(&cot[3])),
            Kind::Qr(pb) => pb.pullback(Some(&cot[0]), Some(&cot[1])),
            Kind::Eigh(pb) => pb.pullback(Some(&cot[0]), Some(&cot[1])),
            Kind::Clustered(pb) => pb.pullback(Some(&cot[0]), Some(&cot[1])),
        }
    }
}
