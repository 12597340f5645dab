//! What a fleet's counters and stores did: a tally from their events and their store calls.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_core::testing::FlushLog;
use comcount_core::{FlushReply, FlushRequest, StoreError};
use comcount_tests::bench::wall_interval;

/// What a fleet's counters and stores did, from their events and their store calls.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) copies: AtomicU64,
    pub(crate) applied: AtomicU64,
    pub(crate) applied_amount: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) unsettled: AtomicU64,
    pub(crate) stale: AtomicU64,
    pub(crate) slow_raised: AtomicU64,
    pub(crate) back_to_normal: AtomicU64,
    /// Counted replies that carried no total: the interval before had no key.
    pub(crate) counted_without_total: AtomicU64,
    /// Counted replies in all.
    pub(crate) counted_replies: AtomicU64,
    /// The intervals some flush of the fleet was counted in.
    pub(crate) intervals_reached: Mutex<BTreeSet<u64>>,
    /// Milliseconds from the first count to the first `round trip slow`; `u64::MAX` if none.
    pub(crate) first_slow_ms: AtomicU64,
    /// When the fleet began to count.
    pub(crate) started: OnceLock<Instant>,
    /// Why the first flush that was reported unsettled or failed was.
    pub(crate) first_error: OnceLock<String>,
}

/// A moment's reading of the tallies that the steady-state window is measured by.
#[derive(Clone, Copy, Default)]
pub(crate) struct Reading {
    pub(crate) copies: u64,
    pub(crate) applied: u64,
    pub(crate) counted_replies: u64,
    pub(crate) counted_without_total: u64,
    /// The fleet's interval number by the wall clock.
    pub(crate) interval: u64,
}

impl Tally {
    pub(crate) fn new() -> Self {
        Self {
            first_slow_ms: AtomicU64::new(u64::MAX),
            ..Self::default()
        }
    }

    pub(crate) fn read(&self, interval: Duration) -> Reading {
        Reading {
            copies: self.copies.load(Ordering::Relaxed),
            applied: self.applied.load(Ordering::Relaxed),
            counted_replies: self.counted_replies.load(Ordering::Relaxed),
            counted_without_total: self.counted_without_total.load(Ordering::Relaxed),
            interval: wall_interval(interval),
        }
    }

    /// The share of the intervals in `[from, to)` that some flush was counted in.
    pub(crate) fn reached(&self, from: u64, to: u64) -> f64 {
        let reached = self
            .intervals_reached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .range(from..to)
            .count();
        reached as f64 / to.saturating_sub(from).max(1) as f64
    }
}

/// Diagnostics that add every event to the fleet's tally.
pub(crate) struct Tallied(pub(crate) Arc<Tally>);

impl Diagnostics for Tallied {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        let t = &self.0;
        match event {
            Event::FlushCompleted { amount, .. } => {
                t.applied.fetch_add(1, Ordering::Relaxed);
                t.applied_amount.fetch_add(*amount, Ordering::Relaxed);
            }
            Event::FlushFailed {
                dropped,
                unsettled,
                error,
                ..
            } => {
                t.dropped.fetch_add(*dropped, Ordering::Relaxed);
                t.unsettled.fetch_add(*unsettled, Ordering::Relaxed);
                let _ = t.first_error.set(format!("flush failed: {error}"));
            }
            Event::TotalWentStale { .. } => {
                t.stale.fetch_add(1, Ordering::Relaxed);
            }
            Event::RoundTripNormal { .. } => {
                t.back_to_normal.fetch_add(1, Ordering::Relaxed);
            }
            Event::RoundTripSlow { .. } => {
                t.slow_raised.fetch_add(1, Ordering::Relaxed);
                if let Some(started) = t.started.get() {
                    let ms = started.elapsed().as_millis() as u64;
                    t.first_slow_ms.fetch_min(ms, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }
}

/// Counts every copy of a flush the fleet's stores are asked to send, and what the counted
/// replies carried.
impl FlushLog for Tally {
    type Sent = ();

    fn sent(&self, _: &FlushRequest) {
        self.copies.fetch_add(1, Ordering::Relaxed);
    }

    fn answered(&self, (): (), answer: &Result<FlushReply, StoreError>) {
        if let Ok(reply) = answer
            && reply.outcome.is_counted()
        {
            self.counted_replies.fetch_add(1, Ordering::Relaxed);
            if reply.previous_total().is_none() {
                self.counted_without_total.fetch_add(1, Ordering::Relaxed);
            }
            let interval = reply.counted_in.unwrap_or(reply.interval);
            self.intervals_reached
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(interval);
        }
    }
}
