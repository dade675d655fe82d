//! The status exchange that keeps every rank's wait bounded: each rank sends rank 0 one
//! fixed-size status (success with a fingerprint of its call, or its failure); rank 0 answers
//! every rank with one verdict. Rank 0 polls the statuses between its own slices and every
//! other rank polls for an early verdict between its slices, so one rank's failure stops the
//! others at their next slice boundary. Every wait has a deadline; a message that did not
//! arrive by then has its receive cancelled and its buffer deliberately leaked, since MPI
//! may still write into it.

use std::time::{Duration, Instant};

use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::error::{Error, Failure};

/// Bytes of one status or verdict message.
const MESSAGE: usize = 1024;
/// How long a rank sleeps between polls of a pending message.
const POLL: Duration = Duration::from_micros(200);
/// After a failure verdict, how long rank 0 keeps receiving the other ranks' statuses (so
/// that they do not linger unmatched) before it cancels the receives.
const DRAIN: Duration = Duration::from_secs(2);

/// What one rank reports, or what rank 0 decides.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Status {
    /// the rank's partial results are ready; `fingerprint` hashes its plan, shapes and the
    /// layout of the buffer it will reduce, `what` describes them for a mismatch message
    Ready { fingerprint: u64, what: String },
    /// the rank failed
    Failed {
        rank: usize,
        failure: Failure,
        reason: String,
    },
    /// the rank stopped because the verdict arrived early (rank 0 ignores it)
    Stopped,
    /// verdict: ranks that did not report
    Silent { ranks: Vec<usize> },
    /// verdict: a rank's call differs from rank 0's
    Mismatch { rank: usize, what: String },
}

impl Status {
    fn encode(&self) -> Vec<u8> {
        let (code, a, b, text): (u8, u64, u64, String) = match self {
            Status::Ready { fingerprint, what } => (0, *fingerprint, 0, what.clone()),
            Status::Failed {
                rank,
                failure,
                reason,
            } => (
                1,
                *rank as u64,
                matches!(failure, Failure::Panic) as u64,
                reason.clone(),
            ),
            Status::Stopped => (2, 0, 0, String::new()),
            Status::Silent { ranks } => (
                3,
                0,
                0,
                ranks
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            Status::Mismatch { rank, what } => (4, *rank as u64, 0, what.clone()),
        };
        let mut buf = vec![0u8; MESSAGE];
        buf[0] = code;
        buf[1..9].copy_from_slice(&a.to_le_bytes());
        buf[9..17].copy_from_slice(&b.to_le_bytes());
        // the text, cut at a character boundary to fit
        let mut end = text.len().min(MESSAGE - 19);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        buf[17..19].copy_from_slice(&(end as u16).to_le_bytes());
        buf[19..19 + end].copy_from_slice(&text.as_bytes()[..end]);
        buf
    }

    fn decode(buf: &[u8]) -> Status {
        let word =
            |r: std::ops::Range<usize>| u64::from_le_bytes(buf[r].try_into().unwrap_or_default());
        let (a, b) = (word(1..9), word(9..17));
        let len = (u16::from_le_bytes([buf[17], buf[18]]) as usize).min(MESSAGE - 19);
        let text = String::from_utf8_lossy(&buf[19..19 + len]).into_owned();
        match buf[0] {
            0 => Status::Ready {
                fingerprint: a,
                what: text,
            },
            1 => Status::Failed {
                rank: a as usize,
                failure: if b == 1 {
                    Failure::Panic
                } else {
                    Failure::Error
                },
                reason: text,
            },
            2 => Status::Stopped,
            3 => Status::Silent {
                ranks: text.split(',').filter_map(|r| r.parse().ok()).collect(),
            },
            4 => Status::Mismatch {
                rank: a as usize,
                what: text,
            },
            c => Status::Failed {
                rank: 0,
                failure: Failure::Error,
                reason: format!("a message of unknown kind {c} (ranks of different versions?)"),
            },
        }
    }

    /// The error every rank returns for this verdict (`None` for success).
    pub(crate) fn error(&self, waited: Duration) -> Option<Error> {
        match self {
            Status::Ready { .. } | Status::Stopped => None,
            Status::Failed {
                rank,
                failure,
                reason,
            } => Some(Error::RankFailed {
                rank: *rank,
                failure: *failure,
                reason: reason.clone(),
                local: None,
            }),
            Status::Silent { ranks } => Some(Error::Unresponsive {
                ranks: ranks.clone(),
                waited,
            }),
            Status::Mismatch { rank, what } => Some(Error::Inconsistent {
                rank: *rank,
                what: what.clone(),
            }),
        }
    }
}

/// A non-blocking send or receive of one message, its buffer leaked to MPI
/// (`'static`) until the request completes and reclaimed then.
struct Pending {
    buf: *mut [u8],
    request: Option<Request<'static, [u8], StaticScope>>,
}

impl Pending {
    fn receive(comm: &SimpleCommunicator, from: usize, tag: i32) -> Pending {
        let buf: &'static mut [u8] = Box::leak(vec![0u8; MESSAGE].into_boxed_slice());
        let ptr: *mut [u8] = buf;
        // SAFETY: `ptr` was just leaked; MPI is its only user until the request completes
        let buf = unsafe { &mut *ptr };
        let request = comm
            .process_at_rank(from as i32)
            .immediate_receive_into_with_tag(StaticScope, buf, tag);
        Pending {
            buf: ptr,
            request: Some(request),
        }
    }

    fn send(comm: &SimpleCommunicator, to: usize, tag: i32, message: Vec<u8>) -> Pending {
        let buf: &'static mut [u8] = Box::leak(message.into_boxed_slice());
        let ptr: *mut [u8] = buf;
        // SAFETY: as in `receive`
        let buf = unsafe { &*ptr };
        let request =
            comm.process_at_rank(to as i32)
                .immediate_send_with_tag(StaticScope, buf, tag);
        Pending {
            buf: ptr,
            request: Some(request),
        }
    }

    /// The message, once the request has completed (its buffer reclaimed then).
    fn test(&mut self) -> Option<Vec<u8>> {
        let request = self.request.take()?;
        match request.test() {
            Ok(_) => {
                // SAFETY: the request is complete: MPI no longer uses the buffer, which came
                // from `Box::leak` and is reclaimed once
                let buf = unsafe { Box::from_raw(self.buf) };
                Some(buf.into_vec())
            }
            Err(request) => {
                self.request = Some(request);
                None
            }
        }
    }

    fn done(&self) -> bool {
        self.request.is_none()
    }
}

impl Drop for Pending {
    /// An incomplete request is cancelled; if it still does not complete, it and its buffer
    /// are leaked (MPI may yet write into the buffer).
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        request.cancel();
        match request.test() {
            Ok(_) => {
                // SAFETY: as in `test`
                drop(unsafe { Box::from_raw(self.buf) });
            }
            Err(request) => std::mem::forget(request),
        }
    }
}

/// One exchange: the receives are posted when a call starts, polled between slices and
/// completed (or abandoned at the deadline) when the rank's own part is done.
pub(crate) struct Exchange<'c> {
    comm: &'c SimpleCommunicator,
    tag: i32,
    rank: usize,
    /// rank 0: the statuses of ranks 1.. (`None` once received); others: the verdict
    statuses: Vec<Option<Pending>>,
    received: Vec<Option<Status>>,
    verdict: Option<Pending>,
    /// rank 0: the verdict it sent; others: the one it received
    decided: Option<Status>,
    /// sends not yet complete, with their destination
    sends: Vec<(usize, Pending)>,
}

impl<'c> Exchange<'c> {
    pub(crate) fn start(comm: &'c SimpleCommunicator, tag: i32) -> Exchange<'c> {
        let rank = comm.rank() as usize;
        let size = comm.size() as usize;
        let mut ex = Exchange {
            comm,
            tag,
            rank,
            statuses: Vec::new(),
            received: vec![None; size],
            verdict: None,
            decided: None,
            sends: Vec::new(),
        };
        if rank == 0 {
            ex.statuses = (1..size)
                .map(|r| Some(Pending::receive(comm, r, tag)))
                .collect();
        } else {
            ex.verdict = Some(Pending::receive(comm, 0, tag));
        }
        ex
    }

    /// Rank 0: sends `verdict` to every other rank (a rank named silent may only be slow:
    /// it gets the verdict too, but no one waits for that send to complete).
    fn decide(&mut self, verdict: Status) {
        let message = verdict.encode();
        for r in 1..self.received.len() {
            self.sends
                .push((r, Pending::send(self.comm, r, self.tag, message.clone())));
        }
        self.decided = Some(verdict);
    }

    /// Receives what has arrived; rank 0 decides a failure as soon as one is reported.
    fn progress(&mut self) {
        if self.rank == 0 {
            for (i, p) in self.statuses.iter_mut().enumerate() {
                if let Some(bytes) = p.as_mut().and_then(Pending::test) {
                    self.received[i + 1] = Some(Status::decode(&bytes));
                    *p = None;
                }
            }
            if self.decided.is_none() {
                let failed = self
                    .received
                    .iter()
                    .flatten()
                    .find(|s| matches!(s, Status::Failed { .. }));
                if let Some(f) = failed.cloned() {
                    self.decide(f);
                }
            }
        } else if self.decided.is_none()
            && let Some(bytes) = self.verdict.as_mut().and_then(Pending::test)
        {
            self.decided = Some(Status::decode(&bytes));
        }
        for (_, s) in &mut self.sends {
            s.test();
        }
        self.sends.retain(|(_, s)| !s.done());
    }

    /// Between slices: the failure that must stop this rank, if one is known.
    pub(crate) fn poll(&mut self) -> Option<Status> {
        self.progress();
        self.decided
            .clone()
            .filter(|d| d.error(Duration::ZERO).is_some())
    }

    /// Reports this rank's `status` and waits (at most `timeout` on rank 0, twice that on the
    /// others, whose verdict waits on rank 0's) for the verdict every rank returns.
    pub(crate) fn finish(mut self, status: Status, timeout: Duration) -> Status {
        let start = Instant::now();
        if self.rank == 0 {
            self.received[0] = Some(status);
            self.progress();
            if self.decided.is_none() {
                // a failure of rank 0 itself is decided at once
                if let Some(f @ Status::Failed { .. }) = self.received[0].clone() {
                    self.decide(f);
                }
            }
            while self.decided.is_none() {
                if self.statuses.iter().all(Option::is_none) {
                    let verdict = self.judge();
                    self.decide(verdict);
                    break;
                }
                if start.elapsed() >= timeout {
                    let silent = (1..self.received.len())
                        .filter(|&r| self.received[r].is_none())
                        .collect();
                    self.decide(Status::Silent { ranks: silent });
                    break;
                }
                std::thread::sleep(POLL);
                self.progress();
            }
            // after a failure, drain the statuses still to come for a while (the other ranks
            // send theirs once they stop), then cancel the receives; silent ranks are not
            // waited for again
            let drain = Instant::now();
            let draining = !matches!(self.decided, Some(Status::Silent { .. }));
            while draining
                && self.statuses.iter().any(Option::is_some)
                && drain.elapsed() < DRAIN.min(timeout)
            {
                std::thread::sleep(POLL);
                self.progress();
            }
            self.wait_sends(timeout);
            self.decided.take().unwrap_or(Status::Stopped)
        } else {
            self.sends
                .push((0, Pending::send(self.comm, 0, self.tag, status.encode())));
            loop {
                self.progress();
                if let Some(d) = self.decided.take() {
                    self.wait_sends(timeout);
                    return d;
                }
                if start.elapsed() >= 2 * timeout {
                    return Status::Silent { ranks: vec![0] };
                }
                std::thread::sleep(POLL);
            }
        }
    }

    /// Rank 0, every status in: success when all fingerprints equal rank 0's.
    fn judge(&self) -> Status {
        let Some(Status::Ready { fingerprint, what }) = &self.received[0] else {
            return Status::Stopped;
        };
        for (r, s) in self.received.iter().enumerate().skip(1) {
            match s {
                Some(Status::Ready {
                    fingerprint: f,
                    what: w,
                }) if f != fingerprint => {
                    return Status::Mismatch {
                        rank: r,
                        what: format!("rank 0 calls with {what}; rank {r} with {w}"),
                    };
                }
                Some(Status::Ready { .. }) => {}
                Some(f @ Status::Failed { .. }) => return f.clone(),
                _ => {
                    return Status::Failed {
                        rank: r,
                        failure: Failure::Error,
                        reason: "stopped without a verdict".into(),
                    };
                }
            }
        }
        Status::Ready {
            fingerprint: *fingerprint,
            what: what.clone(),
        }
    }

    /// Completes this rank's sends (small messages complete at once; a send to a dead rank
    /// may not, and is abandoned at the deadline). Sends to ranks the verdict names silent
    /// are not waited for.
    fn wait_sends(&mut self, timeout: Duration) {
        if let Some(Status::Silent { ranks }) = &self.decided {
            let silent = ranks.clone();
            self.sends.retain(|(r, _)| !silent.contains(r));
        }
        let start = Instant::now();
        while !self.sends.is_empty() && start.elapsed() < timeout {
            self.progress();
            std::thread::sleep(POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_long_texts_are_cut_at_a_character() {
        let long = "é".repeat(2000);
        for s in [
            Status::Ready {
                fingerprint: u64::MAX - 3,
                what: "plan".into(),
            },
            Status::Failed {
                rank: 7,
                failure: Failure::Panic,
                reason: "boom".into(),
            },
            Status::Failed {
                rank: 2,
                failure: Failure::Error,
                reason: long.clone(),
            },
            Status::Stopped,
            Status::Silent { ranks: vec![1, 3] },
            Status::Mismatch {
                rank: 5,
                what: "shapes".into(),
            },
        ] {
            let back = Status::decode(&s.encode());
            match (&s, &back) {
                (Status::Failed { reason, .. }, Status::Failed { reason: r, .. })
                    if reason == &long =>
                {
                    assert!(r.len() <= MESSAGE - 19 && long.starts_with(r.as_str()));
                }
                _ => assert_eq!(back, s),
            }
        }
        assert!(matches!(
            Status::decode(&[9u8; MESSAGE]),
            Status::Failed { .. }
        ));
    }
}
