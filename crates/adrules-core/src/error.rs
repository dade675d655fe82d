//! The one error type of adrules.
//!
//! Every fallible public function of every adrules crate returns [`Result<T>`]. Each variant
//! names the offending argument (`arg`) and, where it applies, the expected and the actual
//! value, so that a message alone tells the caller what to fix.

use crate::scalar::DType;

/// `Result<T, adrules_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in adrules.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tensor has the wrong number of axes.
    #[error("`{arg}`: expected rank {expected}, got rank {actual}")]
    RankMismatch {
        /// the argument
        arg: String,
        /// rank required by the other arguments
        expected: usize,
        /// rank received
        actual: usize,
    },
    /// A tensor has the wrong shape, or two axes that must agree do not.
    #[error("`{arg}`: expected shape {expected:?}, got {actual:?}")]
    ShapeMismatch {
        /// the argument (and axis, when one axis is at fault)
        arg: String,
        /// shape required by the other arguments
        expected: Vec<usize>,
        /// shape received
        actual: Vec<usize>,
    },
    /// An index list is not a valid permutation, split or pairing.
    #[error("`{arg}`: invalid index specification {actual:?}: {reason}")]
    InvalidIndices {
        /// the argument
        arg: String,
        /// the index list received
        actual: Vec<usize>,
        /// what is wrong with it, and what was expected
        reason: String,
    },
    /// A tensor or scalar has a dtype the operation cannot accept.
    #[error("`{arg}`: expected dtype {expected}, got {actual}")]
    DTypeMismatch {
        /// the argument
        arg: String,
        /// what was acceptable (a dtype, or a description such as "real")
        expected: String,
        /// dtype received
        actual: DType,
    },
    /// The output of an in-place operation shares memory with one of its inputs.
    #[error("`{output}` aliases `{input}`: the output must not share storage with an input")]
    Aliasing {
        /// the output argument
        output: String,
        /// the input it shares storage with
        input: String,
    },
    /// An index label of a network (ncon list or Einstein string) is misused.
    #[error("`{arg}`: label {label}: {reason}")]
    InvalidLabel {
        /// the argument (operand or output list)
        arg: String,
        /// the label, printed as given
        label: String,
        /// what is wrong, and what was expected
        reason: String,
    },
    /// An Einstein string does not parse.
    #[error("einsum string {input:?}, at byte {position}: {reason}")]
    Parse {
        /// the string received (a window around the problem when it is long)
        input: String,
        /// byte offset of the problem
        position: usize,
        /// what was expected there
        reason: String,
    },
    /// The number of operands does not match the number of index lists or flags.
    #[error("`{arg}`: expected {expected} entries, got {actual}")]
    CountMismatch {
        /// the argument
        arg: String,
        /// number required
        expected: usize,
        /// number received
        actual: usize,
    },
    /// A linear system is singular (or numerically so) at the point of differentiation.
    #[error("singular linear system in `{arg}`: {reason}")]
    Singular {
        /// what was being solved
        arg: String,
        /// detail (pivot, rank deficiency, breakdown)
        reason: String,
    },
    /// A matrix that must be (Hermitian) positive definite is not, numerically: a Cholesky
    /// factorization met a pivot that is not positive.
    #[error("`{arg}` is not positive definite: {reason}")]
    NotPositiveDefinite {
        /// the argument
        arg: String,
        /// detail (the pivot, the matrix of the batch)
        reason: String,
    },
    /// A cotangent depends on a gauge of a decomposition: on the phases of complex singular
    /// or eigen vectors (the imaginary part of `diag(Uᴴ·Ū) + diag(Vᴴ·V̄)`, or of
    /// `diag(Vᴴ·V̄)` for `eigh`, is not zero), on the basis chosen inside a degenerate
    /// subspace, or on the complement columns of a full decomposition. The loss is then not a
    /// function of the input alone and its gradient does not exist; PyTorch raises here too.
    #[error("`{arg}`: the gradient is ill-defined: {reason}")]
    GaugeIllDefined {
        /// the decomposition (`"svd"`, `"eigh"`, `"qr"`)
        arg: String,
        /// which gauge the cotangent depends on, and by how much
        reason: String,
    },
    /// An iterative method stopped before reaching its tolerance.
    #[error(
        "`{arg}` did not converge: {iterations} iterations, residual {residual:e} > tolerance {tolerance:e}"
    )]
    NotConverged {
        /// the solver
        arg: String,
        /// iterations performed
        iterations: usize,
        /// final (relative) residual norm
        residual: f64,
        /// tolerance that was asked for
        tolerance: f64,
    },
    /// A value is outside its valid range (a negative tolerance, a zero step, a NaN).
    #[error("`{arg}`: {reason}")]
    InvalidArgument {
        /// the argument
        arg: String,
        /// what is wrong, and what was expected
        reason: String,
    },
    /// No slicing of the network keeps one slice within a memory target
    /// ([`crate::network::SlicedPlan::new`]): what remains above the target holds only labels
    /// that cannot be sliced (the output's, or labels of dimension 1).
    #[error("`{arg}`: {needed:.3e} {unit} needed, the limit is {limit} {unit}: {reason}")]
    MemoryLimit {
        /// the argument (`"target"`)
        arg: String,
        /// the limit asked for
        limit: usize,
        /// what the best slicing found still needs (elements or bytes, as `unit`)
        needed: f64,
        /// `"elements"` or `"bytes"`
        unit: String,
        /// which value stays too large, and why it cannot be sliced further
        reason: String,
    },
    /// A rule given finite inputs produced a non-finite output (an overflow: the true result
    /// is beyond the range of the dtype, such as the cotangent `Ū·S⁻¹` of a matrix whose
    /// singular values are subnormal). Returned instead of the `inf` or `NaN`.
    #[error("`{arg}` is not finite: {reason}")]
    NonFinite {
        /// the output (`"a_bar"`, `"u_dot"`, …)
        arg: String,
        /// which entry, and why
        reason: String,
    },
    /// The backend cannot perform this operation (for example complex data on an engine
    /// without complex tensors).
    #[error("backend `{backend}` does not support {what}")]
    Unsupported {
        /// the backend's name
        backend: String,
        /// what was asked for
        what: String,
    },
    /// A tensor lives on a different device than the operation's other arguments.
    #[error("`{arg}`: expected device {expected}, got {actual}")]
    DeviceMismatch {
        /// the argument
        arg: String,
        /// device of the other arguments
        expected: String,
        /// device received
        actual: String,
    },
    /// A caller's hook stopped a computation before its end (the `between` hook of
    /// [`crate::network::SlicedPlan::execute_slices`] and its siblings, which a distributed
    /// runner uses to stop every process when one fails).
    #[error("`{arg}`: stopped before slice {at}: {reason}")]
    Interrupted {
        /// the hook (`"between"`)
        arg: String,
        /// the slice that would have run next
        at: usize,
        /// the hook's reason
        reason: String,
    },
    /// An error reported by an engine (candle, burn, dfdx), with its message.
    #[error("{backend}: {message}")]
    Backend {
        /// the engine
        backend: String,
        /// its message
        message: String,
    },
    /// A file could not be read or parsed (oracle files, configuration).
    #[error("{path}: {reason}")]
    Io {
        /// the file
        path: String,
        /// what went wrong
        reason: String,
    },
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(arg: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            arg: arg.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`Error::ShapeMismatch`].
    pub fn shape(arg: impl Into<String>, expected: &[usize], actual: &[usize]) -> Self {
        Error::ShapeMismatch {
            arg: arg.into(),
            expected: expected.to_vec(),
            actual: actual.to_vec(),
        }
    }

    /// Shorthand for [`Error::RankMismatch`].
    pub fn rank(arg: impl Into<String>, expected: usize, actual: usize) -> Self {
        Error::RankMismatch {
            arg: arg.into(),
            expected,
            actual,
        }
    }

    /// Shorthand for [`Error::InvalidIndices`].
    pub fn indices(arg: impl Into<String>, actual: &[usize], reason: impl Into<String>) -> Self {
        Error::InvalidIndices {
            arg: arg.into(),
            actual: actual.to_vec(),
            reason: reason.into(),
        }
    }
}

/// Failures inside an engine's backward pass, for engines whose backward cannot return an
/// error (burn's `Backward::backward` returns nothing; dfdx's backward closures can only
/// return a message-less `CpuError`).
///
/// # Design
/// An adapter records a node with a [`BackwardReporter`](backward::BackwardReporter) taken on the thread that builds the
/// graph ([`BackwardReporter::current`](backward::BackwardReporter::current)). When the node's backward fails (on whatever thread
/// the engine runs it), the adapter hands the typed error to the reporter and gives the
/// engine what it can take (NaN-filled cotangents for burn, so no gradient is silently wrong;
/// `CpuError::WrongNumElements` for dfdx, which stops the pass). The error, message kept, is
/// then read on the thread that built the graph with [`take_backward_errors`](backward::take_backward_errors), which every
/// adapter re-exports under that name; each adapter's `try_backward` runs the backward pass
/// and returns the first such error as `Err`. Errors reported for graphs built on other
/// threads are not seen, so concurrent training loops do not take each other's errors.
///
/// Unread errors are kept up to [`BACKWARD_ERROR_LIMIT`](backward::BACKWARD_ERROR_LIMIT) per thread (oldest dropped first).
pub mod backward {
    use std::collections::HashMap;
    use std::sync::{Mutex, PoisonError};
    use std::thread::ThreadId;

    use super::Error;

    /// How many unread errors are kept per graph-building thread.
    pub const BACKWARD_ERROR_LIMIT: usize = 64;

    static LOG: Mutex<Option<HashMap<ThreadId, Vec<Error>>>> = Mutex::new(None);

    /// Where the failures of one recorded node go: the thread that recorded it. `Copy`, so a
    /// backward closure or node state keeps it for free.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct BackwardReporter {
        owner: ThreadId,
    }

    impl BackwardReporter {
        /// A reporter for a node recorded on the current thread.
        pub fn current() -> Self {
            BackwardReporter {
                owner: std::thread::current().id(),
            }
        }

        /// Records `e` for the thread that recorded the node (callable from any thread).
        pub fn report(&self, e: Error) {
            let mut log = LOG.lock().unwrap_or_else(PoisonError::into_inner);
            let errors = log
                .get_or_insert_with(HashMap::new)
                .entry(self.owner)
                .or_default();
            if errors.len() == BACKWARD_ERROR_LIMIT {
                errors.remove(0);
            }
            errors.push(e);
        }
    }

    /// The errors reported inside backward passes of graphs recorded on this thread, oldest
    /// first, since the last call; the log is emptied. See the [module documentation](self).
    pub fn take_backward_errors() -> Vec<Error> {
        let me = std::thread::current().id();
        let mut log = LOG.lock().unwrap_or_else(PoisonError::into_inner);
        log.as_mut().and_then(|l| l.remove(&me)).unwrap_or_default()
    }
}
