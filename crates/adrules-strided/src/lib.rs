//! # adrules-strided
//!
//! The embedded CPU backend of adrules: owned strided tensors of `f32`, `f64`, `Complex32`
//! and `Complex64`, borrowed strided views, and fast kernels for the primitives of
//! [`adrules_core::Backend`] (permuted add, trace, contraction, inner product, scaling).
//!
//! ## Layout and strides
//! A tensor or view of shape `dims` places element `(i_0, …, i_{r-1})` at
//! `offset + Σ_k i_k·strides[k]` of its buffer (in elements). Strides may be negative (a
//! reversed axis) or zero (broadcast, read-only). New tensors are row-major (the last axis
//! varies fastest), like ndarray's default and [`HostTensor`](adrules_core::HostTensor);
//! every kernel accepts any strides on every operand. Ranks from 0 up and zero-size
//! dimensions are supported everywhere. Axes are 0-based and a permutation `p` maps output
//! axis `m` to input axis `p[m]` (see [`adrules_core::spec`]).
//!
//! ## Ownership: copy-on-write
//! [`Tensor`] is a cheap handle: an `Arc`-shared buffer ([`Storage`]) plus a layout.
//! Cloning, [`Tensor::permuted`] and [`Tensor::strided`] share the buffer. Every write
//! ([`Tensor::view_mut`], or a backend update of C) first makes the buffer unique, copying it
//! if another handle shares it, so a pullback that kept a clone of an input never sees it
//! change. An output that is overwritten (`β = 0`) is not copied, just replaced. An output
//! that shares storage with an input of the same call is [`Error::Aliasing`].
//!
//! ## Kernels
//! The typed kernels of [`kernels`] work on [`StridedView`] / [`StridedViewMut`] directly,
//! with inputs of any element type that promotes to the output's:
//! - **permuted add** fuses contiguous axes, orders loops by the output's strides and, when
//!   the fastest axes of input and output differ, transposes cache-line tiles in registers
//!   (AVX-512 or AVX2 micro-kernels chosen at run time, a portable loop elsewhere), with
//!   streaming stores for large plain copies;
//! - **contraction** is TTGT on faer's GEMM, reading operands in place when their strides
//!   already form a matrix, choosing the axis order that copies the least, and looping GEMM
//!   over one open axis when that avoids copies altogether;
//! - **trace** and its adjoint **add_to_diagonal** work on the diagonal as a strided view
//!   (stride `s[q1] + s[q2]`), without dense identity tensors.
//!
//! `β = 0` is a strong zero everywhere: C is not read, NaN in it does not leak.
//!
//! ## Threading
//! Large problems run on the current rayon pool (the global pool, or the pool of an enclosing
//! `ThreadPool::install`), small ones on the calling thread; GEMM uses faer's rayon
//! parallelism the same way, above a per-dtype size measured to be where two threads beat one
//! (`m·n·k` of 2²³ for f32, 2²² for f64, 2²¹ for Complex32, 2²⁰ for Complex64; below it a
//! fork–join costs more than the second core returns). The library never creates a pool of
//! its own.
//!
//! ## Memory: the buffer cache
//! Large buffers (1 MiB and up) that nothing refers to any more are kept by a process-wide
//! [`cache`] (1 GiB at most by default; `ADRULES_CACHE_BYTES`, [`cache::set_limit`],
//! [`cache::trim`]) and handed to the next allocation of the same size, so a fresh output
//! costs neither page faults nor, through [`Backend::empty`](adrules_core::Backend::empty), a
//! zero-fill. Only buffers whose handle is the sole owner are cached, so storage a pullback
//! still holds is never reused.
//!
//! ## Interop
//! [`StridedView`] and [`StridedViewMut`] convert from and to ndarray views without copying
//! (negative strides included); a [`Tensor`] takes ownership of an ndarray `Array` or a
//! [`HostTensor`](adrules_core::HostTensor) buffer without copying.
//!
//! ## Example
//! ```
//! use adrules_core::{Backend, Conj, ContractSpec};
//! use adrules_strided::{Strided, Tensor};
//!
//! # fn main() -> adrules_core::Result<()> {
//! let be = Strided;
//! // A (2×3) times B (3×2), as the contraction "ij,jk->ik".
//! let a = Tensor::from_vec(&[2, 3], vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let b = Tensor::from_vec(&[3, 2], vec![1.0f64, 0.0, 0.0, 1.0, 1.0, 1.0])?;
//! let mut c = Tensor::zeros(&[2, 2], adrules_core::DType::F64)?;
//! let spec = ContractSpec::from_labels("ij", "jk", "ik")?;
//! be.contract(&mut c, &a, &b, &spec, Conj::No, Conj::No, 1.0.into(), 0.0.into())?;
//! assert_eq!(c.to_vec::<f64>()?, vec![4.0, 5.0, 10.0, 11.0]);
//!
//! // A transposed view shares A's buffer; reading it costs nothing.
//! let at = a.permuted(&adrules_core::Permutation::new(&[1, 0])?)?;
//! assert!(at.shares_storage(&a));
//! assert_eq!(at.to_vec::<f64>()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
//! # Ok(())
//! # }
//! ```
//!
//! [`Error::Aliasing`]: adrules_core::Error::Aliasing

#![warn(missing_docs)]

mod backend;
pub mod cache;
mod dispatch;
mod element;
mod hook;
pub mod kernels;
mod layout;
pub mod pool;
mod storage;
mod tensor;
mod view;

pub use backend::Strided;
pub use cache::CacheStats;
pub use element::Element;
pub use layout::{Strides, row_major_strides};
pub use pool::{BufferPool, PoolStats};
pub use storage::Storage;
pub use tensor::Tensor;
pub use view::{StridedView, StridedViewMut};

/// The code blocks of this crate's `README.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
