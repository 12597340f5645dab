//! A store wrapper that records every flush a counter sends: when it was sent, what it carried,
//! and how it ended: a reply, an error, or cut off (its future dropped before it completed, by
//! the counter's flush timeout or by `close()`).
//!
//! The wrapper is the core's [`Recorded`], with a [`Member`] as its log: the record is made
//! when [`Store::flush`] is called, and a drop guard inside the returned future writes its end. A flush whose future is dropped unfinished (even before its first
//! poll) is therefore recorded as [`FlushEnd::Cut`], and one still running when the records are
//! read as [`FlushEnd::InFlight`]. A cut flush may well have run on the server.

use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use comcount_core::testing::{FlushLog, Recorded};
use comcount_core::{FlushReply, FlushRequest, Outcome, Store, StoreError, StoreErrorKind};

/// How a recorded flush ended, so far.
#[derive(Clone, Debug)]
pub enum FlushEnd {
    /// Its future is still alive: no reply yet, and not given up.
    InFlight,
    /// The store replied.
    Replied {
        /// When.
        at: Instant,
        /// The reply.
        reply: FlushReply,
    },
    /// The store returned an error.
    Failed {
        /// When.
        at: Instant,
        /// The error's kind.
        kind: StoreErrorKind,
        /// The error as text.
        message: String,
    },
    /// Its future was dropped before it completed: the counter stopped waiting (its flush
    /// timeout) or was closed. The flush may or may not have run on the server.
    Cut {
        /// When.
        at: Instant,
    },
}

/// A flush: the participant, the base of its key space, and its sequence number.
pub type FlushId<'a> = (usize, &'a str, u64);

/// One call to [`Store::flush`].
#[derive(Clone, Debug)]
pub struct FlushRecord {
    /// The index the wrapper was given: the participant's place in its fleet.
    pub member: usize,
    /// The wrapped store's name.
    pub store: String,
    /// What was sent.
    pub request: FlushRequest,
    /// When it was sent (when `flush` was called).
    pub sent: Instant,
    /// How it ended.
    pub end: FlushEnd,
}

impl FlushRecord {
    /// The reply, if one came.
    pub fn reply(&self) -> Option<&FlushReply> {
        match &self.end {
            FlushEnd::Replied { reply, .. } => Some(reply),
            _ => None,
        }
    }

    /// The reply's outcome, if one came.
    pub fn outcome(&self) -> Option<Outcome> {
        self.reply().map(|r| r.outcome)
    }

    /// When a reply came that says the flush is counted (applied now, or by an earlier copy).
    pub fn counted_at(&self) -> Option<Instant> {
        match &self.end {
            FlushEnd::Replied { at, reply } if reply.outcome.is_counted() => Some(*at),
            _ => None,
        }
    }

    /// Whether this copy may have written to the store: applied, or no telling (no reply,
    /// cut off, an error that leaves it unknown). By the store contract, a refused reply or an
    /// error of kind `Refused` or `Unavailable` wrote nothing.
    pub fn may_have_written(&self) -> bool {
        match &self.end {
            FlushEnd::InFlight | FlushEnd::Cut { .. } => true,
            FlushEnd::Replied { reply, .. } => reply.outcome == Outcome::Applied,
            FlushEnd::Failed { kind, .. } => {
                !matches!(kind, StoreErrorKind::Refused | StoreErrorKind::Unavailable)
            }
        }
    }

    /// The base of the key space it was sent to ([`KeySpace::base`]): its counter's, or its
    /// family partition's.
    ///
    /// [`KeySpace::base`]: comcount_core::KeySpace::base
    pub fn space(&self) -> &str {
        self.request.space.base()
    }

    /// The participant, key space and sequence number: the flush this copy is one send of
    /// (each partition of a family numbers its flushes on its own).
    pub fn flush_id(&self) -> FlushId<'_> {
        (self.member, self.space(), self.request.seq)
    }

    /// Its entries, as key and amount (a counter's one entry under the empty key).
    pub fn amounts(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.request.entries.iter().map(|e| (&*e.key, e.amount))
    }

    /// A line for a failure message: key space, seq, expected interval, amount and keys, time
    /// since `since`, and the end.
    pub fn describe(&self, since: Instant) -> String {
        let end = match &self.end {
            FlushEnd::InFlight => "in flight".to_owned(),
            FlushEnd::Replied { reply, .. } => format!("{:?}", reply.outcome),
            FlushEnd::Failed { message, .. } => message.clone(),
            FlushEnd::Cut { .. } => "cut off unanswered".to_owned(),
        };
        let sent = self
            .sent
            .checked_duration_since(since)
            .map_or_else(|| "before".to_owned(), |d| format!("+{d:?}"));
        format!(
            "{} seq {} expect {} amount {} over {} keys sent {sent}: {end}",
            self.space(),
            self.request.seq,
            self.request.expect,
            self.request.amount(),
            self.request.entries.len()
        )
    }
}

/// How many flushes ended which way: a count kept without the records themselves.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Tally {
    /// Calls to `flush`.
    pub sent: u64,
    /// Replies [`Outcome::Applied`].
    pub applied: u64,
    /// Replies [`Outcome::Duplicate`].
    pub duplicate: u64,
    /// Replies [`Outcome::Stale`].
    pub stale: u64,
    /// Replies [`Outcome::Fenced`].
    pub fenced: u64,
    /// Replies [`Outcome::WrongInterval`].
    pub wrong_interval: u64,
    /// Errors.
    pub failed: u64,
    /// Futures dropped unfinished.
    pub cut: u64,
}

impl Tally {
    /// Sent and not ended yet. In a difference of two tallies, the flushes sent before and
    /// ended within make this smaller; it stops at zero.
    pub fn in_flight(&self) -> u64 {
        self.sent.saturating_sub(
            self.applied
                + self.duplicate
                + self.stale
                + self.fenced
                + self.wrong_interval
                + self.failed
                + self.cut,
        )
    }
}

impl Sub for Tally {
    type Output = Tally;

    /// What happened between two tallies of the same records.
    fn sub(self, before: Tally) -> Tally {
        Tally {
            sent: self.sent - before.sent,
            applied: self.applied - before.applied,
            duplicate: self.duplicate - before.duplicate,
            stale: self.stale - before.stale,
            fenced: self.fenced - before.fenced,
            wrong_interval: self.wrong_interval - before.wrong_interval,
            failed: self.failed - before.failed,
            cut: self.cut - before.cut,
        }
    }
}

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    applied: AtomicU64,
    duplicate: AtomicU64,
    stale: AtomicU64,
    fenced: AtomicU64,
    wrong_interval: AtomicU64,
    failed: AtomicU64,
    cut: AtomicU64,
}

impl Counts {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn ended(&self, end: &FlushEnd) {
        match end {
            FlushEnd::InFlight => {}
            FlushEnd::Replied { reply, .. } => Self::add(match reply.outcome {
                Outcome::Applied => &self.applied,
                Outcome::Duplicate => &self.duplicate,
                Outcome::Stale => &self.stale,
                Outcome::Fenced => &self.fenced,
                Outcome::WrongInterval => &self.wrong_interval,
            }),
            FlushEnd::Failed { .. } => Self::add(&self.failed),
            FlushEnd::Cut { .. } => Self::add(&self.cut),
        }
    }

    fn tally(&self) -> Tally {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        // Ends before sends: a flush that ends between the loads is never counted as ended
        // without having been sent.
        let applied = get(&self.applied);
        let duplicate = get(&self.duplicate);
        let stale = get(&self.stale);
        let fenced = get(&self.fenced);
        let wrong_interval = get(&self.wrong_interval);
        let failed = get(&self.failed);
        let cut = get(&self.cut);
        Tally {
            sent: get(&self.sent),
            applied,
            duplicate,
            stale,
            fenced,
            wrong_interval,
            failed,
            cut,
        }
    }
}

struct Shared {
    /// Whether to keep each record, or only count.
    keep: bool,
    records: Mutex<Vec<FlushRecord>>,
    counts: Counts,
}

/// The records that [`RecordingStore`]s write to; clones share them.
#[derive(Clone)]
pub struct FlushRecords(Arc<Shared>);

impl Default for FlushRecords {
    fn default() -> Self {
        Self::new()
    }
}

impl FlushRecords {
    /// Keeps a record of every flush, and a [`Tally`].
    pub fn new() -> Self {
        Self::with(true)
    }

    /// Keeps the [`Tally`] only: for a benchmark, whose flushes are too many to keep.
    pub fn tally_only() -> Self {
        Self::with(false)
    }

    fn with(keep: bool) -> Self {
        Self(Arc::new(Shared {
            keep,
            records: Mutex::default(),
            counts: Counts::default(),
        }))
    }

    /// Every flush so far, in the order they were sent, each as it stands now; empty for
    /// [`tally_only`](Self::tally_only).
    pub fn records(&self) -> Vec<FlushRecord> {
        self.lock().clone()
    }

    /// What `look` makes of every record so far, read in place: for a check repeated often
    /// while the fleet runs, where a copy of every family flush would cost too much.
    pub fn inspect<R>(&self, look: impl FnOnce(&[FlushRecord]) -> R) -> R {
        look(&self.lock())
    }

    /// The flushes of participant `member` sent at or after `since`.
    pub fn of_member_since(&self, member: usize, since: Instant) -> Vec<FlushRecord> {
        self.lock()
            .iter()
            .filter(|r| r.member == member && r.sent >= since)
            .cloned()
            .collect()
    }

    /// Wraps `inner` for participant `member` (any number where there is one participant),
    /// recording to these records.
    pub fn wrap<S: Store>(&self, inner: S, member: usize) -> RecordingStore<S> {
        let log = Member {
            member,
            store: inner.name().to_owned(),
            records: self.clone(),
        };
        Recorded::new(inner, Arc::new(log))
    }

    /// How many flushes ended which way so far.
    pub fn tally(&self) -> Tally {
        self.0.counts.tally()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<FlushRecord>> {
        self.0.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a flush sent now; the guard writes its end.
    fn open(&self, member: usize, store: &str, request: &FlushRequest) -> EndGuard {
        Counts::add(&self.0.counts.sent);
        let index = self.0.keep.then(|| {
            let mut records = self.lock();
            records.push(FlushRecord {
                member,
                store: store.to_owned(),
                request: request.clone(),
                sent: Instant::now(),
                end: FlushEnd::InFlight,
            });
            records.len() - 1
        });
        EndGuard {
            records: self.clone(),
            index,
            ended: false,
        }
    }

    fn end(&self, index: Option<usize>, end: FlushEnd) {
        self.0.counts.ended(&end);
        if let Some(index) = index {
            self.lock()[index].end = end;
        }
    }
}

/// Lives inside a flush's future: writes the flush's end when it completes, or `Cut` when the
/// future is dropped first.
pub struct EndGuard {
    records: FlushRecords,
    index: Option<usize>,
    ended: bool,
}

impl EndGuard {
    fn complete(&mut self, result: &Result<FlushReply, StoreError>) {
        let at = Instant::now();
        let end = match result {
            // `FlushReply` is `Copy` today; a clone keeps this compiling should it stop being.
            #[allow(clippy::clone_on_copy)]
            Ok(reply) => FlushEnd::Replied {
                at,
                reply: reply.clone(),
            },
            Err(error) => FlushEnd::Failed {
                at,
                kind: error.kind(),
                message: error.to_string(),
            },
        };
        self.ended = true;
        self.records.end(self.index, end);
    }
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if !self.ended {
            self.records
                .end(self.index, FlushEnd::Cut { at: Instant::now() });
        }
    }
}

/// Passes every flush to the store it wraps, and records it in a [`FlushRecords`]: made by
/// [`FlushRecords::wrap`].
pub type RecordingStore<S> = Recorded<S, Member>;

/// What a [`RecordingStore`] records its flushes as: the participant's place in its fleet and
/// the wrapped store's name, into the [`FlushRecords`] it was made for.
pub struct Member {
    member: usize,
    store: String,
    records: FlushRecords,
}

impl FlushLog for Member {
    /// Dropped with the flush's future: `Cut` unless the answer came first.
    type Sent = EndGuard;

    fn sent(&self, request: &FlushRequest) -> EndGuard {
        self.records.open(self.member, &self.store, request)
    }

    fn answered(&self, mut guard: EndGuard, answer: &Result<FlushReply, StoreError>) {
        guard.complete(answer);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use comcount_core::diagnostics::{Recorder, Reporter};
    use comcount_core::{MemoryStore, ParticipantId};
    use futures::FutureExt;

    use super::*;
    use crate::conformance::Requests;

    #[test]
    fn a_completed_flush_is_recorded_with_its_end_and_a_dropped_one_as_cut() {
        let records = FlushRecords::new();
        let store = records.wrap(MemoryStore::new(), 3);
        let report = Reporter::new("recording", Arc::new(Recorder::new()));
        let requests = Requests::fresh(Duration::from_secs(60));
        let participant = ParticipantId::random();

        let done = store
            .flush(&requests.flush(participant, 1, 1, 0), &report)
            .now_or_never();
        assert!(done.is_some(), "the memory store answers at once");
        let (second, third) = (
            requests.flush(participant, 2, 1, 0),
            requests.flush(participant, 3, 1, 0),
        );
        let never_polled = store.flush(&second, &report);
        let alive = store.flush(&third, &report);
        assert!(matches!(records.records()[1].end, FlushEnd::InFlight));
        drop(never_polled);

        let now = records.records();
        assert_eq!(now.len(), 3);
        assert!(now.iter().all(|r| r.member == 3));
        assert!(matches!(now[0].end, FlushEnd::Replied { .. }));
        assert!(matches!(now[1].end, FlushEnd::Cut { .. }));
        assert!(matches!(now[2].end, FlushEnd::InFlight));
        let tally = records.tally();
        assert_eq!((tally.sent, tally.cut, tally.in_flight()), (3, 1, 1));
        drop(alive);
        assert_eq!(records.tally().cut, 2);
        assert!(matches!(records.records()[2].end, FlushEnd::Cut { .. }));
    }

    #[test]
    fn tally_only_keeps_no_records() {
        let records = FlushRecords::tally_only();
        let store = records.wrap(MemoryStore::new(), 0);
        let report = Reporter::new("recording", Arc::new(Recorder::new()));
        let requests = Requests::fresh(Duration::from_secs(60));
        let request = requests.flush(ParticipantId::random(), 1, 1, 0);
        assert!(store.flush(&request, &report).now_or_never().is_some());
        drop(store.flush(&request, &report));
        assert!(records.records().is_empty());
        let tally = records.tally();
        assert_eq!((tally.sent, tally.cut, tally.in_flight()), (2, 1, 0));
    }
}
