//! The handle users count with.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::AmountError;
use crate::handle::shared::Lifetime;
use crate::handle::slot::Slot;
use crate::handle::tally::Refusal;

/// A participant's handle on a distributed counter.
///
/// Cheap to clone; clones count into the same buffer. Built by [`Counter::builder`], together
/// with the [`Worker`](crate::Worker) that flushes it.
///
/// `Send`, `Sync`, `UnwindSafe` and `RefUnwindSafe`, as are [`Family`](crate::Family) and
/// [`KeyCounter`](crate::KeyCounter): what a handle shares is atomics and state that no panic
/// leaves half-changed, so a handle used inside `catch_unwind` is whole after it.
///
/// ```
/// use std::time::Duration;
/// use comcount_core::{Counter, MemoryStore, clock::VirtualClock};
///
/// let (counter, _worker) = Counter::builder("requests", Duration::from_secs(5))
///     .build(MemoryStore::new(), VirtualClock::new())?;
/// assert_eq!(counter.increment(1), 1);
/// assert_eq!(counter.increment(2), 3);
/// # Ok::<(), comcount_core::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Counter {
    slot: Arc<Slot>,
    /// The state shared with the worker; the last handle to go closes the counter.
    life: Arc<Lifetime>,
}

impl Counter {
    pub(crate) fn new(slot: Arc<Slot>, life: Arc<Lifetime>) -> Self {
        Self { slot, life }
    }

    /// Counts `amount` and returns the best lower bound on the group's count now.
    ///
    /// That is the larger of the group's total over the last closed interval and this
    /// participant's amount not yet sent. It never waits, locks, allocates or touches the
    /// network; the first call starts the background flushing.
    ///
    /// # Panics
    ///
    /// If `amount` exceeds `i64::MAX`, or would take this interval's unsent amount past it:
    /// more than the store can hold. Use [`try_increment`](Counter::try_increment) to get an
    /// error instead.
    #[inline]
    #[track_caller]
    pub fn increment(&self, amount: u64) -> u64 {
        match self.try_increment(amount) {
            Ok(count) => count,
            Err(error) => panic!("{error}"),
        }
    }

    /// As [`increment`](Counter::increment), but returns an error for an amount that cannot be
    /// counted, and counts nothing then.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use comcount_core::{AmountError, Counter, MemoryStore, clock::VirtualClock};
    /// # let (counter, _worker) = Counter::builder("bytes", Duration::from_secs(1))
    /// #     .build(MemoryStore::new(), VirtualClock::new())?;
    /// assert_eq!(counter.try_increment(u64::MAX), Err(AmountError::TooLarge { amount: u64::MAX }));
    /// assert_eq!(counter.try_increment(7), Ok(7));
    /// # Ok::<(), comcount_core::ConfigError>(())
    /// ```
    #[inline]
    pub fn try_increment(&self, amount: u64) -> Result<u64, AmountError> {
        held_increment(&self.life, &self.slot, amount)
    }

    /// The count `increment(0)` would return, without counting, and without starting the
    /// background flushing.
    pub fn count(&self) -> u64 {
        self.slot.count()
    }

    /// The group's total over the last closed interval, or `None` when it is not known: before
    /// the first reply, when that interval had no total, when no reply refreshed it for two
    /// intervals (plus the round trip of the reply that brought it, up to three intervals), or
    /// once the counter is closed or its worker has ended. A counter whose flush landed after
    /// an interval it skipped knows, once the flush's own interval has ended, what that one
    /// held right after the flush: a lower bound on its total, taken as the group's.
    pub fn group_total(&self) -> Option<u64> {
        self.slot.total.get()
    }

    /// How long ago a reply last brought the group's total, on the counter's timer (the one
    /// given to [`build`](crate::builder::Builder::build)); `None` before the first.
    ///
    /// It keeps growing while the total is unknown, stale or after
    /// [`close`](Counter::close): it tells how old the last known total is. A healthy counter's
    /// total is refreshed about once an interval, so its age stays under two intervals;
    /// [`group_total`](Counter::group_total) turns `None` once it passes two intervals (plus
    /// the round trip, up to three more).
    ///
    /// ```
    /// use std::time::Duration;
    /// use comcount_core::{Counter, MemoryStore, clock::VirtualClock};
    /// use futures::{executor::LocalPool, task::LocalSpawnExt};
    ///
    /// let clock = VirtualClock::new();
    /// let (counter, worker) = Counter::builder("requests", Duration::from_secs(1))
    ///     .build(MemoryStore::with_clock(clock.clone()), clock.clone())?;
    /// let mut pool = LocalPool::new();
    /// pool.spawner().spawn_local(worker).unwrap();
    /// assert_eq!(counter.total_age(), None);
    /// counter.increment(1);
    /// // The first flush, in interval 0, brings no total: there is no interval before it.
    /// pool.run_until_stalled();
    /// assert_eq!(counter.total_age(), None);
    /// // The next, in the middle of interval 1, brings interval 0's.
    /// clock.advance(Duration::from_millis(1500));
    /// pool.run_until_stalled();
    /// assert_eq!(counter.total_age(), Some(Duration::ZERO));
    /// clock.advance(Duration::from_millis(300));
    /// assert_eq!(counter.total_age(), Some(Duration::from_millis(300)));
    /// # Ok::<(), comcount_core::ConfigError>(())
    /// ```
    pub fn total_age(&self) -> Option<Duration> {
        self.life.0.total_age(&self.slot)
    }

    /// This participant's amount not yet sent.
    pub fn buffered(&self) -> u64 {
        self.slot.buffer.get()
    }

    /// The counter's name.
    pub fn name(&self) -> &str {
        &self.life.0.name
    }

    /// Stops the background flushing, at once and for good; sends nothing.
    ///
    /// Once it returns, nothing more reaches the store: a flush that was already in the
    /// store's hands may still be applied there, but no copy of anything is sent after. There
    /// is no parting flush: it could land in an interval this participant already added to.
    /// What is still in the buffer stays unsent, and so does an amount whose flush had not
    /// been applied anywhere (it goes back to the buffer); an amount whose fate is unknown is
    /// reported by a `flush failed` event, as `unsettled`.
    ///
    /// The group's total becomes unknown: nothing refreshes it any more. The counter keeps
    /// counting locally and answering with its own buffer. Calling it again does nothing.
    /// Dropping every handle has the same effect.
    ///
    /// Called from another thread while the background task hands a copy to the store, it
    /// waits for that hand-over. Called by the store or the diagnostics from inside it, it
    /// returns at once, and that hand-over is the caller's own.
    pub fn close(&self) {
        self.life.0.close();
    }

    /// Flushes what this participant counted and stops, for a shutdown that loses nothing: a
    /// rolling deploy, say. The returned future completes once the background task has
    /// stopped, with the units it did not send (0 when everything counted was flushed and
    /// counted); the counter is closed by then.
    ///
    /// The next flush goes as usual, and the counter stops once one has settled with nothing
    /// left in the buffer. The store takes one flush of a participant per interval, so a
    /// counter that has just flushed waits for the next interval: a drain takes up to about
    /// two intervals and a round trip. If the buffer is not flushed and settled `timeout`
    /// after the call (on the worker's timer), the counter closes as [`close`](Counter::close)
    /// does and the rest is reported as `close()` reports it. A flush whose fate is still
    /// unknown at the end is reported unsettled. Increments made meanwhile are counted and
    /// sent with the next flush, as long as one goes. The worker must be running for the
    /// future to complete; one dropped or never spawned completes it at once.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use comcount_core::{Counter, MemoryStore, clock::VirtualClock};
    /// # use futures::{FutureExt, executor::LocalPool, task::LocalSpawnExt};
    /// let clock = VirtualClock::new();
    /// let store = MemoryStore::with_clock(clock.clone());
    /// let (counter, worker) = Counter::builder("jobs", Duration::from_secs(1))
    ///     .build(store.clone(), clock.clone())?;
    /// let mut pool = LocalPool::new();
    /// pool.spawner().spawn_local(worker).unwrap();
    /// counter.increment(5);
    /// let mut drained = counter.drain(Duration::from_secs(10)).boxed();
    /// pool.run_until_stalled();
    /// assert_eq!(drained.as_mut().now_or_never(), Some(0));
    /// assert!(counter.is_closed());
    /// assert_eq!(store.total("{jobs}:0"), Some(5));
    /// # Ok::<(), comcount_core::ConfigError>(())
    /// ```
    pub fn drain(&self, timeout: Duration) -> impl Future<Output = u64> + Send + 'static {
        self.life.drain(timeout)
    }

    /// Whether [`close`](Counter::close) was called, every handle was dropped, or the
    /// [`Worker`](crate::Worker) was dropped: nothing flushes the buffer any more.
    pub fn is_closed(&self) -> bool {
        self.life.0.is_closed()
    }
}

/// The hot path of a handle on one key: the key cannot be evicted while the handle holds it.
#[inline]
pub(crate) fn held_increment(
    life: &Lifetime,
    slot: &Slot,
    amount: u64,
) -> Result<u64, AmountError> {
    match life.0.increment(slot, amount) {
        Ok(count) => Ok(count),
        Err(Refusal::Amount(error)) => Err(error),
        // A held key is never retired; were it ever, the amount would not be counted, and
        // saying that the buffer is full is the closest truth.
        Err(Refusal::Retired) => Err(AmountError::BufferFull { amount }),
    }
}

impl fmt::Debug for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("name", &self.name())
            .field("buffered", &self.buffered())
            .field("group_total", &self.group_total())
            .field("closed", &self.is_closed())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_is_cheap_to_share_across_threads() {
        fn shareable<T: Clone + Send + Sync + 'static>() {}
        shareable::<Counter>();
        assert_eq!(
            std::mem::size_of::<Counter>(),
            2 * std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn the_worker_can_be_spawned_on_a_multi_threaded_runtime() {
        fn spawnable<T: std::future::Future<Output = ()> + Send + 'static>() {}
        spawnable::<crate::Worker>();
    }
}
