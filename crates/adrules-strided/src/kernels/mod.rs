//! Typed kernels on strided views: the primitives of the backend, usable directly.
//!
//! Every kernel takes its output as a [`StridedViewMut`](crate::StridedViewMut) and its
//! inputs as [`StridedView`](crate::StridedView)s of any element type that promotes to the
//! output's ([`Promote`](adrules_core::scalar::Promote)), with conjugation flags and BLAS-style
//! coefficients `C ← β·C + α·…`. `β = 0` is a strong zero. Shapes are checked with the specs
//! of [`adrules_core::spec`] and reported as typed errors.
//!
//! | kernel | update |
//! |---|---|
//! | [`add`] | `C ← β·C + α·P_p(op(A))` |
//! | [`add_projected`] | `C ← β·C + proj(α·P_p(op(A)))` |
//! | [`trace`] | `C ← β·C + α·P_p(tr_{q1,q2} op(A))` |
//! | [`add_to_diagonal`] | `diag_{q1,q2}(A) ← diag(A) + proj(α·op(C))` |
//! | [`contract`] | `C ← β·C + α·P_{pAB}(op(A)·op(B))` |
//! | [`inner`] | `Σ conj(X)·Y` |
//! | [`scale`] | `T ← s·T` |
//!
//! [`primitive`] runs any [`Primitive`](adrules_core::rules::Primitive) call (add, trace or
//! contract, with its specification, conjugation flags, α and β) through the kernel above,
//! and [`primitive_fresh`] into a new buffer: the one dispatch engines use on their own buffers.

mod add;
mod contract;
mod engine;
mod primitive;
mod reduce;
mod trace;
mod transpose;
mod update;

pub use add::{add, add_projected, scale};
pub use contract::contract;
pub use primitive::{primitive, primitive_fresh};
pub use reduce::inner;
pub use trace::{add_to_diagonal, trace};

pub(crate) use add::{add_impl, copy_to_vec};
pub(crate) use contract::contract_impl;
pub(crate) use reduce::{all_finite_impl, inner_impl};
pub(crate) use trace::trace_impl;
