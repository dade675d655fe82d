//! The typed errors of a distributed run.

use std::time::Duration;

/// `Result<T, adrules_mpi::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a rank failed ([`Error::RankFailed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Failure {
    /// its slices returned an adrules error (a bad operand, a memory target, an overflow)
    Error,
    /// a panic inside its slices (caught around the rank's part of the call, with the
    /// default `panic = "unwind"`; the rank stays usable)
    Panic,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Failure::Error => "error",
            Failure::Panic => "panic",
        })
    }
}

/// Everything that can end a distributed run. Every rank of the communicator returns the
/// same variant naming the same rank (the failing rank itself included), so that no rank is
/// left waiting for a peer that has given up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A rank's own part failed (`failure`): rank 0 stops at its next slice boundary, the
    /// others at their next boundary after rank 0's verdict, and every rank returns this
    /// error. Where several ranks fail, the one whose failure rank 0 received first is named.
    #[error("rank {rank} failed ({failure}): {reason}")]
    RankFailed {
        /// the failing rank, in the communicator given to [`crate::Distributed::new`]
        rank: usize,
        /// an error or a panic
        failure: Failure,
        /// the error's message or the panic's payload
        reason: String,
        /// on the failing rank itself, the adrules error it returned (`None` on the other
        /// ranks, for a panic, and on a second failing rank that is not the one named)
        local: Option<adrules_core::Error>,
    },
    /// Nothing was heard from these ranks for the timeout while a peer waited for them
    /// (a live rank gives a sign of life between its slices): killed, hung, or in one slice
    /// longer than the timeout. With rank 0 silent, the other ranks cannot learn more and
    /// name rank 0 only. The `Distributed` is unusable afterwards ([`Error::Unusable`]).
    #[error(
        "ranks {ranks:?} did not report within {waited:?}: killed, hung, or slower than the \
         timeout allows"
    )]
    Unresponsive {
        /// the silent ranks
        ranks: Vec<usize>,
        /// how long the waiting rank waited
        waited: Duration,
    },
    /// The ranks did not call with the same plan, operand shapes, dtypes or activity: their
    /// results cannot be summed.
    #[error("rank {rank} disagrees with rank 0: {what}")]
    Inconsistent {
        /// the first rank whose call differs from rank 0's
        rank: usize,
        /// what differs
        what: String,
    },
    /// Every rank reported success, but the sum of the partial results did not arrive
    /// within the timeout (a rank died during the reduction). The `Distributed` is unusable
    /// afterwards ([`Error::Unusable`]).
    #[error("the reduction of the partial results did not complete within {waited:?}")]
    ReductionTimedOut {
        /// how long this rank waited
        waited: Duration,
    },
    /// An earlier call on this `Distributed` ended with [`Error::Unresponsive`] or
    /// [`Error::ReductionTimedOut`]: a peer may be dead and requests of that call may still be
    /// pending in MPI, so no further call is made. Create a new `Distributed` on a
    /// communicator of the surviving ranks (or end the job; `MPI_Finalize` may then wait for
    /// the dead peer, so exit without it).
    #[error("this Distributed is unusable: {reason}")]
    Unusable {
        /// what happened in the earlier call
        reason: String,
    },
    /// An adrules error after the reduction (the finite-output check of the sum), the same on
    /// every rank since every rank holds the same sum; or an argument error raised before
    /// any communication ([`crate::Distributed::with_timeout`]).
    #[error(transparent)]
    Core(#[from] adrules_core::Error),
}
