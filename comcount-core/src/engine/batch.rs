//! What one flush carries: the keys of a partition taken into it, each with the amount taken
//! from its buffer, and where the reply's totals go.
//!
//! A flush takes every key held by a handle, every key with something to send and every key
//! looked up lately (so that its total stays fresh), up to
//! [`FlushRequest::MAX_ENTRIES`]; when a partition holds more, the next flush goes on where
//! this one stopped. Keys idle for the eviction time, with an empty buffer and no handle, are
//! evicted on the way. A single counter's one key is always taken.

use std::sync::Arc;
use std::time::Duration;

use crate::diagnostics::{Event, Reporter};
use crate::engine::policy::settling::Step;
use crate::error::{AmountError, StoreError};
use crate::handle::settings::{self, Settings};
use crate::handle::shared::Shared;
use crate::handle::slot::Slot;
use crate::protocol::keys::Layout;
use crate::protocol::request::{Entry, FlushRequest};

/// How many entries a flush may carry for their room to be kept until the next.
const KEPT_BETWEEN_FLUSHES: usize = 8;

pub(crate) struct Batch {
    shared: Arc<Shared>,
    partition: u32,
    /// The slots of the flush's entries, in the same order.
    slots: Vec<Arc<Slot>>,
    /// Where the next flush starts, when the last could not take every key.
    cursor: usize,
    /// The interval number the last flush of the partition was taken in.
    last_epoch: Option<u64>,
}

/// When a key is evicted, and when its total is too old to keep.
#[derive(Clone, Copy)]
pub(crate) struct Ages {
    /// The current interval number.
    pub(crate) epoch: u64,
    /// A key not looked up for this many intervals is idle (`None`: never).
    pub(crate) evict_after: Option<u64>,
    /// Now, in milliseconds of the worker's timer.
    pub(crate) now_ms: u64,
    /// A total refreshed longer ago than this, in milliseconds, is forgotten.
    pub(crate) stale_after_ms: u64,
}

impl Ages {
    /// The ages at `now` (on the worker's timer) for a counter of `settings`, whose totals
    /// last brought by copies that took `round_trip`.
    pub(crate) fn new(now: Duration, settings: &Settings, round_trip: Duration) -> Self {
        let stale_after = settings::stale_after(settings.interval, round_trip);
        let now_ms = millis(now);
        Self {
            epoch: now_ms / settings.interval_ms,
            evict_after: settings.evict_after_intervals(),
            now_ms,
            stale_after_ms: millis(stale_after),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Batch {
    pub(crate) fn new(shared: Arc<Shared>, partition: u32) -> Self {
        Self {
            shared,
            partition,
            slots: Vec::new(),
            cursor: 0,
            last_epoch: None,
        }
    }

    /// Takes the partition's keys into `request`, each with its buffer; returns whether there
    /// is anything to flush.
    pub(crate) fn gather(&mut self, request: &mut FlushRequest, ages: Ages) -> bool {
        let Self {
            shared,
            partition,
            slots,
            cursor,
            last_epoch,
        } = self;
        slots.clear();
        request.entries.clear();
        let keys = &shared.keys;
        // A lookup notes the interval the flushes last ran in, which lags the one it happens
        // in by up to an interval while the flushes go out every interval, and by more when
        // they are far apart (a store down, a counter resting). A key looked up since the
        // partition's last flush was taken is in use, however long ago that was: it goes in
        // this flush, for its total. Otherwise it is idle once more than `after` intervals
        // have passed since its last lookup, so that it is never evicted sooner than `after`
        // after its last use.
        let since_last_flush = |slot: &Slot| last_epoch.is_some_and(|e| slot.last_asked() >= e);
        let idle = |slot: &Slot| match ages.evict_after {
            Some(after) => {
                slot.buffer.get() == 0
                    && !since_last_flush(slot)
                    && ages.epoch.saturating_sub(slot.last_asked()) > after
            }
            None => false,
        };
        keys.with_members(*partition, idle, |members| {
            let len = members.len();
            let start = if len == 0 { 0 } else { *cursor % len };
            *cursor = start;
            let mut full = false;
            for i in 0..len {
                let slot = &members[(start + i) % len];
                if since_last_flush(slot) {
                    // Its lookup noted the interval of the last flush's start, which can be
                    // long past when the flushes were held up; it was in use since then, so
                    // its time idle counts from the interval before this one at the earliest.
                    slot.used_since(ages.epoch.saturating_sub(1));
                }
                let wanted = keys.is_held(slot)
                    || slot.buffer.get() > 0
                    || since_last_flush(slot)
                    || ages.epoch.saturating_sub(slot.last_asked()) <= 1;
                if wanted && !full {
                    if slots.len() < FlushRequest::MAX_ENTRIES {
                        request
                            .entries
                            .push(Entry::new(Arc::clone(&slot.key), slot.buffer.take()));
                        slots.push(Arc::clone(slot));
                        continue;
                    }
                    // The flush is full: the next one starts with this key.
                    *cursor = (start + i) % len;
                    full = true;
                }
                // Left out of this flush, the key's total ages like any other: one that
                // waits its turn in a crowded partition is forgotten on time.
                if ages.now_ms >= slot.refreshed_ms().saturating_add(ages.stale_after_ms) {
                    slot.total.set(None);
                }
            }
        });
        *last_epoch = Some(ages.epoch);
        // Both are held until the flush settles: without the room they grew into, which is
        // up to as much again.
        request.entries.shrink_to_fit();
        slots.shrink_to_fit();
        !slots.is_empty()
    }

    /// Lets go of a settled flush's entries and slots. The room of a few is kept for the next
    /// flush, so that a counter's flush, of one entry, allocates none; that of more is let go
    /// of too: a partition of many keys would otherwise hold a flush's worth of both for each
    /// key between flushes.
    pub(crate) fn release(&mut self, request: &mut FlushRequest) {
        if self.slots.capacity() > KEPT_BETWEEN_FLUSHES {
            self.slots = Vec::new();
            request.entries = Vec::new();
        } else {
            self.slots.clear();
            request.entries.clear();
        }
    }

    /// Takes the totals of a reply (one per entry; fewer leave the rest alone).
    pub(crate) fn refresh(&self, totals: &[Option<u64>], now_ms: u64) {
        for (slot, total) in self.slots.iter().zip(totals) {
            slot.refresh(*total, now_ms);
        }
    }

    /// The largest count among the flush's keys.
    pub(crate) fn count(&self) -> u64 {
        self.slots.iter().map(|s| s.count()).max().unwrap_or(0)
    }

    /// A counter's group total and its age at `now`, as `flush completed` tells them.
    pub(crate) fn total(
        &self,
        request: &FlushRequest,
        now: Duration,
    ) -> (Option<u64>, Option<Duration>) {
        total(&self.slots, request, now)
    }

    /// Returns the entries' amounts, certainly not counted, to their buffers.
    pub(crate) fn put_back(&self, request: &FlushRequest, report: &Reporter) {
        put_back(&self.slots, request, report);
    }

    /// Accounts for `request`, a flush of these entries that ended without being counted as
    /// `step` says: back to the buffers if it certainly was not, reported as given up
    /// otherwise.
    pub(crate) fn end(&self, request: &FlushRequest, step: Step, report: &Reporter) {
        match step {
            Step::PutBack => self.put_back(request, report),
            Step::GiveUp { error, dropped } => give_up(request, &error, dropped, report),
            Step::InDoubt(error) => give_up(request, &error, false, report),
            _ => {}
        }
    }

    /// Hands the flush's slots over to a flush kept in doubt, which holds them (a slot held
    /// is never evicted) until it knows where its amounts go.
    pub(crate) fn hand_over(&mut self) -> Vec<Arc<Slot>> {
        std::mem::take(&mut self.slots)
    }
}

/// The group total of a counter's flush of `slots`, and how long before `now` a reply last
/// brought it; neither for a family's, whose totals are its keys'.
pub(crate) fn total(
    slots: &[Arc<Slot>],
    request: &FlushRequest,
    now: Duration,
) -> (Option<u64>, Option<Duration>) {
    match slots {
        [slot] if request.space.layout() == Layout::Counter => {
            (slot.total.get(), slot.total_age(now))
        }
        _ => (None, None),
    }
}

/// Returns the entries' amounts, certainly not counted, to the buffers of `slots` (one per
/// entry, in order); reports what does not fit as dropped.
pub(crate) fn put_back(slots: &[Arc<Slot>], request: &FlushRequest, report: &Reporter) {
    for (slot, entry) in slots.iter().zip(&request.entries) {
        let overflow = slot.buffer.put_back(entry.amount);
        if overflow > 0 {
            let error = StoreError::refused(AmountError::BufferFull {
                amount: entry.amount,
            });
            report.emit(Event::FlushFailed {
                error: &error,
                seq: request.seq,
                key: (!slot.key.is_empty()).then_some(&*slot.key),
                dropped: overflow,
                unsettled: 0,
            });
        }
    }
}

/// Reports the entries' amounts as given up: `dropped` when certainly not counted, unsettled
/// otherwise. One event per key with an amount; one without a key when none has.
pub(crate) fn give_up(
    request: &FlushRequest,
    error: &StoreError,
    dropped: bool,
    report: &Reporter,
) {
    let emit = |key, amount| {
        let (dropped, unsettled) = if dropped { (amount, 0) } else { (0, amount) };
        report.emit(Event::FlushFailed {
            error,
            seq: request.seq,
            key,
            dropped,
            unsettled,
        });
    };
    let with_amounts = request.entries.iter().filter(|e| e.amount > 0);
    if request.space.layout() == Layout::Counter || with_amounts.clone().count() == 0 {
        emit(None, request.amount());
        return;
    }
    for entry in with_amounts {
        emit(Some(&entry.key), entry.amount);
    }
}
