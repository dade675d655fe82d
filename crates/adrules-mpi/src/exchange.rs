//! The status exchange that keeps every rank's wait bounded: each rank sends rank 0 one
//! fixed-size status (success with a fingerprint of its call, or its failure); rank 0 answers
//! every rank with one verdict. Rank 0 polls the statuses between its own slices and every
//! other rank polls for an early verdict between its slices, so one rank's failure stops rank
//! 0 at its next slice boundary and every other rank at the boundary after the verdict
//! arrives. Every rank also sends a sign of life ("alive") between its slices at least every
//! quarter of the timeout, and rank 0 while it waits; a rank is named silent when a peer
//! waiting for it has heard nothing from it for the timeout. Every message carries the call's
//! number, so a late message of an earlier call is recognised and dropped. A message that
//! did not arrive has its receive cancelled and its buffer deliberately leaked, since MPI may
//! still write into it.

use std::time::{Duration, Instant};

use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::error::{Error, Failure};

/// Bytes of one message.
const MESSAGE: usize = 1024;
/// The first byte of every message (a zeroed or foreign buffer is refused).
const MAGIC: u8 = 0xAD;
/// Bytes before a message's text: magic, kind, call, two words, text length.
const HEADER: usize = 28;
/// How long a rank sleeps between polls of a pending message.
const POLL: Duration = Duration::from_micros(200);
/// After a failure verdict, how long rank 0 keeps receiving the other ranks' statuses (so
/// that they do not linger unmatched), and how long any rank waits for its own sends to
/// complete, before it cancels them.
pub(crate) const DRAIN: Duration = Duration::from_secs(2);

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
    /// a sign of life between slices
    Alive,
}

impl Status {
    fn encode(&self, call: u64) -> Vec<u8> {
        let (code, a, b, text): (u8, u64, u64, String) = match self {
            Status::Ready { fingerprint, what } => (1, *fingerprint, 0, what.clone()),
            Status::Failed {
                rank,
                failure,
                reason,
            } => (
                2,
                *rank as u64,
                matches!(failure, Failure::Panic) as u64,
                reason.clone(),
            ),
            Status::Stopped => (3, 0, 0, String::new()),
            Status::Silent { ranks } => (
                4,
                0,
                0,
                ranks
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            Status::Mismatch { rank, what } => (5, *rank as u64, 0, what.clone()),
            Status::Alive => (6, 0, 0, String::new()),
        };
        let mut buf = vec![0u8; MESSAGE];
        buf[0] = MAGIC;
        buf[1] = code;
        buf[2..10].copy_from_slice(&call.to_le_bytes());
        buf[10..18].copy_from_slice(&a.to_le_bytes());
        buf[18..26].copy_from_slice(&b.to_le_bytes());
        // the text, cut at a character boundary to fit
        let mut end = text.len().min(MESSAGE - HEADER);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        buf[26..28].copy_from_slice(&(end as u16).to_le_bytes());
        buf[HEADER..HEADER + end].copy_from_slice(&text.as_bytes()[..end]);
        buf
    }

    /// The call number and the status, or why the bytes are not a message of this crate.
    fn decode(buf: &[u8]) -> Result<(u64, Status), String> {
        if buf.len() != MESSAGE || buf[0] != MAGIC {
            return Err(format!(
                "{} bytes starting {:?}: not a status message (another library's message on \
                 this communicator, or a failed receive)",
                buf.len(),
                &buf[..buf.len().min(4)]
            ));
        }
        let word = |r: std::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&buf[r]);
            u64::from_le_bytes(w)
        };
        let (call, a, b) = (word(2..10), word(10..18), word(18..26));
        let len = (u16::from_le_bytes([buf[26], buf[27]]) as usize).min(MESSAGE - HEADER);
        let text = String::from_utf8_lossy(&buf[HEADER..HEADER + len]).into_owned();
        let status = match buf[1] {
            1 => Status::Ready {
                fingerprint: a,
                what: text,
            },
            2 => Status::Failed {
                rank: a as usize,
                failure: if b == 1 {
                    Failure::Panic
                } else {
                    Failure::Error
                },
                reason: text,
            },
            3 => Status::Stopped,
            4 => Status::Silent {
                ranks: text.split(',').filter_map(|r| r.parse().ok()).collect(),
            },
            5 => Status::Mismatch {
                rank: a as usize,
                what: text,
            },
            6 => Status::Alive,
            c => {
                return Err(format!(
                    "a message of unknown kind {c} (ranks of different versions?)"
                ));
            }
        };
        Ok((call, status))
    }

    /// The error every rank returns for this verdict (`None` for success).
    pub(crate) fn error(&self, waited: Duration) -> Option<Error> {
        match self {
            Status::Ready { .. } | Status::Stopped | Status::Alive => None,
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
/// completed (or abandoned) when the rank's own part is done.
pub(crate) struct Exchange<'c> {
    comm: &'c SimpleCommunicator,
    tag: i32,
    call: u64,
    rank: usize,
    timeout: Duration,
    /// rank 0: the receive of each rank's status (`None` once it has reported)
    statuses: Vec<Option<Pending>>,
    received: Vec<Option<Status>>,
    /// the last time each rank was heard from (rank 0 for the others, the others for rank 0)
    seen: Vec<Instant>,
    /// the other ranks: the receive of rank 0's verdict
    verdict: Option<Pending>,
    /// rank 0: the verdict it sent; others: the one it received
    decided: Option<Status>,
    /// sends not yet complete, with their destination
    sends: Vec<(usize, Pending)>,
    last_beat: Instant,
}

impl<'c> Exchange<'c> {
    pub(crate) fn start(
        comm: &'c SimpleCommunicator,
        tag: i32,
        call: u64,
        timeout: Duration,
    ) -> Exchange<'c> {
        let rank = comm.rank() as usize;
        let size = comm.size() as usize;
        let now = Instant::now();
        let mut ex = Exchange {
            comm,
            tag,
            call,
            rank,
            timeout,
            statuses: Vec::new(),
            received: vec![None; size],
            seen: vec![now; size],
            verdict: None,
            decided: None,
            sends: Vec::new(),
            last_beat: now,
        };
        if rank == 0 {
            ex.statuses = (0..size)
                .map(|r| (r > 0).then(|| Pending::receive(comm, r, tag)))
                .collect();
        } else {
            ex.verdict = Some(Pending::receive(comm, 0, tag));
        }
        ex
    }

    fn send(&mut self, to: usize, status: &Status) {
        let message = status.encode(self.call);
        self.sends
            .push((to, Pending::send(self.comm, to, self.tag, message)));
    }

    /// Rank 0: sends `verdict` to every other rank (a rank named silent may only be slow:
    /// it gets the verdict too, but no one waits for that send to complete).
    fn decide(&mut self, verdict: Status) {
        for r in 1..self.received.len() {
            self.send(r, &verdict);
        }
        self.decided = Some(verdict);
    }

    /// What a completed receive from `from` brings: a status of this call, or `None` (a
    /// sign of life, or a late message of an earlier call) when the receive must be posted
    /// again.
    fn take(&mut self, from: usize, bytes: &[u8]) -> Option<Status> {
        match Status::decode(bytes) {
            Err(why) => Some(Status::Failed {
                rank: from,
                failure: Failure::Error,
                reason: format!("rank {from} sent a corrupt message: {why}"),
            }),
            Ok((call, _)) if call != self.call => None,
            Ok((_, Status::Alive)) => {
                self.seen[from] = Instant::now();
                None
            }
            Ok((_, status)) => {
                self.seen[from] = Instant::now();
                Some(status)
            }
        }
    }

    /// Receives what has arrived; rank 0 decides a failure as soon as one is reported.
    fn progress(&mut self) {
        if self.rank == 0 {
            for r in 1..self.statuses.len() {
                let Some(bytes) = self.statuses[r].as_mut().and_then(Pending::test) else {
                    continue;
                };
                match self.take(r, &bytes) {
                    Some(status) => {
                        self.received[r] = Some(status);
                        self.statuses[r] = None;
                    }
                    None => self.statuses[r] = Some(Pending::receive(self.comm, r, self.tag)),
                }
            }
            if self.decided.is_none() {
                let failed = (self.received.iter().flatten())
                    .find(|s| matches!(s, Status::Failed { .. }))
                    .cloned();
                if let Some(f) = failed {
                    self.decide(f);
                }
            }
        } else if self.decided.is_none()
            && let Some(bytes) = self.verdict.as_mut().and_then(Pending::test)
        {
            match self.take(0, &bytes) {
                Some(verdict) => {
                    self.decided = Some(verdict);
                    self.verdict = None;
                }
                None => self.verdict = Some(Pending::receive(self.comm, 0, self.tag)),
            }
        }
        for (_, s) in &mut self.sends {
            s.test();
        }
        self.sends.retain(|(_, s)| !s.done());
    }

    /// A sign of life to the ranks that wait on this one, at most every quarter timeout.
    fn beat(&mut self) {
        if self.last_beat.elapsed() < self.timeout / 4 {
            return;
        }
        self.last_beat = Instant::now();
        if self.rank == 0 {
            for r in 1..self.received.len() {
                self.send(r, &Status::Alive);
            }
        } else {
            self.send(0, &Status::Alive);
        }
    }

    /// Between slices: the failure that must stop this rank, if one is known.
    pub(crate) fn poll(&mut self) -> Option<Status> {
        self.progress();
        self.beat();
        self.decided
            .clone()
            .filter(|d| d.error(Duration::ZERO).is_some())
    }

    /// Reports this rank's `status` and waits for the verdict every rank returns: rank 0
    /// until every rank has reported or one has been silent for the timeout, the others
    /// until the verdict arrives or rank 0 has been silent for the timeout.
    pub(crate) fn finish(mut self, status: Status) -> Status {
        if self.rank == 0 {
            if matches!(status, Status::Failed { .. }) && self.decided.is_none() {
                // a failure of rank 0 itself is decided at once
                self.decide(status.clone());
            }
            self.received[0] = Some(status);
            loop {
                self.progress();
                if self.decided.is_some() {
                    break;
                }
                if self.statuses.iter().all(Option::is_none) {
                    let verdict = self.judge();
                    self.decide(verdict);
                    break;
                }
                let silent: Vec<usize> = (1..self.received.len())
                    .filter(|&r| {
                        self.received[r].is_none() && self.seen[r].elapsed() >= self.timeout
                    })
                    .collect();
                if !silent.is_empty() {
                    self.decide(Status::Silent { ranks: silent });
                    break;
                }
                self.beat();
                std::thread::sleep(POLL);
            }
            // after a failure, receive the statuses still to come for a while (the other
            // ranks send theirs once they stop), then cancel the receives
            let drain = Instant::now();
            let draining = !matches!(self.decided, Some(Status::Silent { .. }));
            while draining
                && self.statuses.iter().any(Option::is_some)
                && drain.elapsed() < DRAIN.min(self.timeout)
            {
                std::thread::sleep(POLL);
                self.progress();
            }
            self.wait_sends();
            self.decided.take().unwrap_or(Status::Stopped)
        } else {
            self.send(0, &status);
            loop {
                self.progress();
                if let Some(d) = self.decided.take() {
                    self.wait_sends();
                    return d;
                }
                if self.seen[0].elapsed() >= self.timeout {
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

    /// Completes this rank's sends for at most [`DRAIN`] (small messages complete at once; a
    /// send to a dead rank may not, and is then cancelled). Sends to ranks the verdict names
    /// silent are not waited for.
    fn wait_sends(&mut self) {
        if let Some(Status::Silent { ranks }) = &self.decided {
            let silent = ranks.clone();
            self.sends.retain(|(r, _)| !silent.contains(r));
        }
        let start = Instant::now();
        while !self.sends.is_empty() && start.elapsed() < DRAIN.min(self.timeout) {
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
            Status::Alive,
        ] {
            let (call, back) = Status::decode(&s.encode(u64::MAX - 7)).unwrap();
            assert_eq!(call, u64::MAX - 7);
            match (&s, &back) {
                (Status::Failed { reason, .. }, Status::Failed { reason: r, .. })
                    if reason == &long =>
                {
                    assert!(r.len() <= MESSAGE - HEADER && long.starts_with(r.as_str()));
                }
                _ => assert_eq!(back, s),
            }
        }
        // a zeroed buffer (a failed receive), a foreign message, an unknown kind
        assert!(Status::decode(&[0u8; MESSAGE]).is_err());
        assert!(Status::decode(&[MAGIC; 10]).is_err());
        let mut unknown = Status::Alive.encode(1);
        unknown[1] = 99;
        assert!(Status::decode(&unknown).is_err());
    }
}
