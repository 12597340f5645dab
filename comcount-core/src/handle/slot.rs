//! One key's numbers: its unsent buffer, its group total, and when it was last asked for.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::handle::tally::{self, Buffer, GroupTotal, Refusal};
use crate::protocol::request::FlushRequest;

// A buffer never holds more than one flush may carry.
const _: () = assert!(tally::MAX == FlushRequest::MAX_AMOUNT);

/// The numbers of one key: a counter's only key, or one key of a family.
///
/// `increment` writes the buffer and reads the total; the rest is the background task's. The
/// two are [`APART`] bytes apart (`repr(C)` keeps the order), so they sit on different cache
/// lines wherever the allocation starts: under contention the buffer's line moves between
/// cores with every add, and a total on a line of its own stays in every core's cache, where
/// on the buffer's line it would cost a second transfer after each add.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Slot {
    pub(crate) buffer: Buffer,
    /// The key within its family; empty for a counter.
    pub(crate) key: Arc<str>,
    /// The last interval number (as the family's worker counts them) the key was looked up
    /// in; keys looked up lately stay in the flushes, others are evicted once idle.
    asked: AtomicU64,
    /// When a reply last brought a known total, in milliseconds of the worker's timer;
    /// [`NEVER`] before the first.
    refreshed_ms: AtomicU64,
    /// Keeps the total [`APART`] bytes from the buffer: 24 bytes a key, where aligning the slot
    /// to a line would take 64 or more.
    _apart: [u64; 3],
    pub(crate) total: GroupTotal,
}

/// How far the total sits from the buffer: a cache line, so that no allocation puts the two on
/// one line.
const APART: usize = 64;

const _: () = assert!(
    std::mem::offset_of!(Slot, total) - std::mem::offset_of!(Slot, buffer) >= APART,
    "the total must sit a cache line from the buffer"
);

/// The refresh time of a key whose total was never known.
const NEVER: u64 = u64::MAX;

impl Slot {
    pub(crate) fn new(key: Arc<str>, asked: u64) -> Self {
        Self {
            buffer: Buffer::default(),
            key,
            asked: AtomicU64::new(asked),
            refreshed_ms: AtomicU64::new(NEVER),
            _apart: [0; 3],
            total: GroupTotal::default(),
        }
    }

    /// The hot path: adds `amount` and returns the max rule's count. The second value is
    /// whether the add found the buffer empty, as the key's first add does: the caller then
    /// makes sure that the background flushing has started.
    #[inline]
    pub(crate) fn add(&self, amount: u64) -> Result<(u64, bool), Refusal> {
        let buffered = self.buffer.add(amount)?;
        Ok((tally::count(self.total.get(), buffered), buffered == amount))
    }

    /// What `add(0)` would return, without starting anything.
    pub(crate) fn count(&self) -> u64 {
        tally::count(self.total.get(), self.buffer.get())
    }

    /// Notes that the key was looked up in interval `epoch`; a store only when it changes, so
    /// that lookups of a busy key do not fight over the line.
    #[inline]
    pub(crate) fn asked_in(&self, epoch: u64) {
        if self.asked.load(Relaxed) != epoch {
            self.asked.store(epoch, Relaxed);
        }
    }

    /// Notes that the key was in use in interval `epoch` or later, unless a lookup noted a
    /// later one already.
    pub(crate) fn used_since(&self, epoch: u64) {
        self.asked.fetch_max(epoch, Relaxed);
    }

    /// The last interval the key was looked up in.
    pub(crate) fn last_asked(&self) -> u64 {
        self.asked.load(Relaxed)
    }

    /// Takes the group's total from a reply, at `now_ms` on the worker's timer.
    pub(crate) fn refresh(&self, total: Option<u64>, now_ms: u64) {
        self.total.set(total);
        if total.is_some() {
            self.refreshed_ms.store(now_ms.min(NEVER - 1), Relaxed);
        }
    }

    /// When a reply last brought a known total, in milliseconds of the worker's timer (a
    /// time far in the future when none did).
    pub(crate) fn refreshed_ms(&self) -> u64 {
        self.refreshed_ms.load(Relaxed)
    }

    /// How long before `now` a reply last brought a known total; `None` if none ever did.
    pub(crate) fn total_age(&self, now: Duration) -> Option<Duration> {
        match self.refreshed_ms() {
            NEVER => None,
            at => Some(now.saturating_sub(Duration::from_millis(at))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    #[test]
    fn the_buffer_and_the_total_sit_a_cache_line_apart_in_72_bytes() {
        assert_eq!(offset_of!(Slot, buffer), 0);
        assert_eq!(offset_of!(Slot, total), APART);
        assert_eq!(
            offset_of!(Slot, total),
            size_of::<Slot>() - size_of::<GroupTotal>()
        );
        assert_eq!(size_of::<Slot>(), 72);
    }
}
