//! What the sweep's counters did: a tally from their stores and their events, and the gaps
//! between each counter's applied flushes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_core::testing::FlushLog;
use comcount_core::{FlushReply, FlushRequest, Outcome, StoreError};

/// What every counter of a run did, from the store wrapper and the events.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) copies: AtomicU64,
    pub(crate) resent: AtomicU64,
    pub(crate) wrong_interval: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) applied: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) unsettled: AtomicU64,
    pub(crate) slow_raised: AtomicU64,
    /// Polls of the counters' background tasks.
    pub(crate) polls: AtomicU64,
}

#[derive(Clone, Copy)]
pub(crate) struct Reading(pub(crate) [u64; 9]);

impl Tally {
    pub(crate) fn read(&self) -> Reading {
        Reading(
            [
                &self.copies,
                &self.resent,
                &self.wrong_interval,
                &self.errors,
                &self.applied,
                &self.dropped,
                &self.unsettled,
                &self.slow_raised,
                &self.polls,
            ]
            .map(|a| a.load(Ordering::Relaxed)),
        )
    }
}

impl Reading {
    pub(crate) fn since(self, before: Reading) -> Reading {
        Reading(std::array::from_fn(|i| self.0[i] - before.0[i]))
    }
}

/// When each counter last had a flush applied, and its longest gap so far, in ms since the
/// run started; gaps count only from the window's start.
pub(crate) struct Gaps {
    pub(crate) started: Instant,
    pub(crate) window_start_ms: AtomicU64,
    pub(crate) last_ms: Vec<AtomicU64>,
    pub(crate) longest_ms: Vec<AtomicU64>,
}

impl Gaps {
    pub(crate) fn new(counters: usize) -> Self {
        Self {
            started: Instant::now(),
            window_start_ms: AtomicU64::new(u64::MAX),
            last_ms: (0..counters).map(|_| AtomicU64::new(0)).collect(),
            longest_ms: (0..counters).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub(crate) fn open_window(&self) {
        self.window_start_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Notes an applied flush of counter `i` at `now` (ms).
    pub(crate) fn applied(&self, i: usize, now: u64) {
        let window_start = self.window_start_ms.load(Ordering::Relaxed);
        let last = self.last_ms[i].swap(now, Ordering::Relaxed);
        if now > window_start {
            // Another thread may have noted a later flush of the counter since `now` was read.
            let gap = now.saturating_sub(last.max(window_start));
            self.longest_ms[i].fetch_max(gap, Ordering::Relaxed);
        }
    }

    /// Each counter's longest gap in the window that ends now, the one still open included.
    pub(crate) fn close_window(&self) -> Vec<u64> {
        let (now, window_start) = (self.now_ms(), self.window_start_ms.load(Ordering::Relaxed));
        self.last_ms
            .iter()
            .zip(&self.longest_ms)
            .map(|(last, longest)| {
                let open = now.saturating_sub(last.load(Ordering::Relaxed).max(window_start));
                longest.load(Ordering::Relaxed).max(open)
            })
            .collect()
    }
}

/// Diagnostics of counter `index`: into the run's tally and gaps.
pub(crate) struct Tallied {
    pub(crate) index: usize,
    pub(crate) tally: Arc<Tally>,
    pub(crate) gaps: Arc<Gaps>,
}

impl Diagnostics for Tallied {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        let t = &self.tally;
        match event {
            Event::FlushCompleted { .. } => {
                t.applied.fetch_add(1, Ordering::Relaxed);
                self.gaps.applied(self.index, self.gaps.now_ms());
            }
            Event::FlushFailed {
                dropped, unsettled, ..
            } => {
                t.dropped.fetch_add(*dropped, Ordering::Relaxed);
                t.unsettled.fetch_add(*unsettled, Ordering::Relaxed);
            }
            Event::RoundTripSlow { .. } => {
                t.slow_raised.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// Counts one counter's copies and replies into the run's tally.
pub(crate) struct Counting {
    pub(crate) tally: Arc<Tally>,
    /// The sequence number of the last flush each participant id sent (a counter's lanes have
    /// ids of their own, and numbers that overlap): a copy with the same one is a resend.
    pub(crate) last_seq: Mutex<Vec<(u64, u64)>>,
}

impl Counting {
    /// Whether the participant's last flush had this one's number: this is a copy sent again.
    pub(crate) fn sent_before(&self, request: &FlushRequest) -> bool {
        let participant = request.participant.as_u64();
        let mut last = self.last_seq.lock().unwrap_or_else(|e| e.into_inner());
        match last.iter_mut().find(|(id, _)| *id == participant) {
            Some((_, seq)) => std::mem::replace(seq, request.seq) == request.seq,
            None => {
                last.push((participant, request.seq));
                false
            }
        }
    }
}

impl FlushLog for Counting {
    type Sent = ();

    fn sent(&self, request: &FlushRequest) {
        self.tally.copies.fetch_add(1, Ordering::Relaxed);
        if self.sent_before(request) {
            self.tally.resent.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn answered(&self, (): (), answer: &Result<FlushReply, StoreError>) {
        match answer {
            Ok(reply) if reply.outcome == Outcome::WrongInterval => {
                self.tally.wrong_interval.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(_) => {
                self.tally.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
