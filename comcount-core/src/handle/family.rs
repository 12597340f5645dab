//! The handles users count many keys with: a family, and a handle on one of its keys.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{AmountError, KeyError};
use crate::handle::counter::held_increment;
use crate::handle::shared::Lifetime;
use crate::handle::slot::Slot;
use crate::handle::tally::Refusal;

/// A participant's handle on a family of distributed counters: one name and one interval, and
/// any number of keys (tenants, API keys, routes), each with its own group total.
///
/// [`increment`](Family::increment) counts for a key and returns, for that key, what a
/// [`Counter`](crate::Counter) returns: the larger of the key's group total over the last
/// closed interval and this participant's unsent amount for it. A key comes into being on
/// its first increment (or [`counter`](Family::counter)), and is evicted after a while without use (see
/// [`Builder::evict_after`](crate::builder::Builder::evict_after)). The family's [`Worker`](crate::Worker)
/// sends all its keys in one flush per partition and interval, instead of one per key. It
/// starts on the family's first increment, of any key (`increment(key, 0)` is enough): a
/// participant that only takes handles and reads totals sends nothing, and learns none.
///
/// Cheap to clone; clones count into the same keys.
///
/// ```
/// use std::time::Duration;
/// use comcount_core::{Family, MemoryStore, clock::VirtualClock};
///
/// let (requests, _worker) = Family::builder("requests", Duration::from_secs(1))
///     .partitions(4)
///     .build(MemoryStore::new(), VirtualClock::new())?;
/// assert_eq!(requests.increment("acme", 2), 2);
/// assert_eq!(requests.increment("globex", 1), 1);
/// assert_eq!(requests.increment("acme", 1), 3);
///
/// // A handle on one key counts without looking the key up.
/// let acme = requests.counter("acme")?;
/// assert_eq!(acme.increment(1), 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Family {
    life: Arc<Lifetime>,
}

impl Family {
    pub(crate) fn new(life: Arc<Lifetime>) -> Self {
        Self { life }
    }

    /// Counts `amount` for `key` and returns the best lower bound on the group's count for
    /// it now. An existing key is found without a lock or an allocation; a new one is added.
    ///
    /// A key that cannot be counted (empty, longer than
    /// [`FlushRequest::MAX_KEY_LEN`](crate::FlushRequest::MAX_KEY_LEN) bytes, or new once the family holds its [`max_keys`](crate::builder::Builder::max_keys))
    /// is counted nowhere: the call returns `amount`, its own count, which claims nothing of
    /// the group, and the family reports the refused calls as `key refused`, at most once an
    /// interval. So a key that comes from a client (an IP, an API key) can never make it
    /// panic; [`try_increment`](Family::try_increment) returns the error instead.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use comcount_core::{Family, MemoryStore, clock::VirtualClock};
    /// let (family, _worker) = Family::builder("calls", Duration::from_secs(1))
    ///     .max_keys(1)
    ///     .build(MemoryStore::new(), VirtualClock::new())?;
    /// assert_eq!(family.increment("a", 1), 1);
    /// assert_eq!(family.increment("b", 2), 2); // past the cap: not counted
    /// assert_eq!(family.increment("", 3), 3); // empty: not counted
    /// assert_eq!(family.count("b"), 0);
    /// # Ok::<(), comcount_core::ConfigError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// Where the amount cannot be counted, as [`Counter::increment`](crate::Counter::increment)
    /// panics.
    #[inline]
    #[track_caller]
    pub fn increment(&self, key: &str, amount: u64) -> u64 {
        match self.try_increment(key, amount) {
            Ok(count) => count,
            Err(error) if self.life.0.refuse_key(&error) => amount,
            Err(error) => panic!("{error}"),
        }
    }

    /// As [`increment`](Family::increment), but returns an error for what cannot be counted,
    /// and counts nothing then.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use comcount_core::{Family, KeyError, MemoryStore, clock::VirtualClock};
    /// let (family, _worker) = Family::builder("calls", Duration::from_secs(1))
    ///     .max_keys(1)
    ///     .build(MemoryStore::new(), VirtualClock::new())?;
    /// assert_eq!(family.try_increment("a", 1), Ok(1));
    /// assert_eq!(family.try_increment("b", 1), Err(KeyError::Full { max_keys: 1 }));
    /// assert_eq!(family.try_increment("", 1), Err(KeyError::Empty));
    /// # Ok::<(), comcount_core::ConfigError>(())
    /// ```
    #[inline]
    pub fn try_increment(&self, key: &str, amount: u64) -> Result<u64, KeyError> {
        let shared = &self.life.0;
        let found = shared.keys.find(key, |slot| {
            slot.asked_in(shared.epoch());
            shared.increment(slot, amount)
        });
        match found {
            Some(Ok(count)) => Ok(count),
            Some(Err(Refusal::Amount(error))) => Err(error.into()),
            Some(Err(Refusal::Retired)) | None => self.add_key_and_increment(key, amount),
        }
    }

    /// The slow path: the key is new, or was evicted just now.
    #[cold]
    fn add_key_and_increment(&self, key: &str, amount: u64) -> Result<u64, KeyError> {
        if amount > crate::handle::tally::MAX {
            return Err(AmountError::TooLarge { amount }.into());
        }
        let shared = &self.life.0;
        loop {
            let slot = shared.keys.get_or_add(key, shared.epoch())?;
            slot.asked_in(shared.epoch());
            match shared.increment(&slot, amount) {
                Ok(count) => return Ok(count),
                Err(Refusal::Amount(error)) => return Err(error.into()),
                // Evicted between the two steps: it is gone from the map now.
                Err(Refusal::Retired) => continue,
            }
        }
    }

    /// A handle on `key`, added if new, that counts for it as a [`Counter`](crate::Counter)
    /// does: at the same speed, with no lookup. Once the family has started flushing (on its
    /// first increment), the key is flushed every interval and never evicted while a handle on
    /// it lives.
    ///
    /// # Errors
    ///
    /// An empty or over-long key, or a new key past the cap.
    pub fn counter(&self, key: &str) -> Result<KeyCounter, KeyError> {
        let shared = &self.life.0;
        let slot = shared.keys.get_or_add(key, shared.epoch())?;
        slot.asked_in(shared.epoch());
        Ok(KeyCounter {
            slot,
            life: Arc::clone(&self.life),
        })
    }

    /// The count `increment(key, 0)` would return, without counting: 0 for a key the family
    /// does not hold. It keeps a key it holds from eviction, as an increment does; it does
    /// not add one (`increment(key, 0)` does, and the next flush then brings its total).
    pub fn count(&self, key: &str) -> u64 {
        self.look_up(key, Slot::count).unwrap_or(0)
    }

    /// The group's total for `key` over the last closed interval, or `None` when it is not
    /// known (see [`Counter::group_total`](crate::Counter::group_total)) or the family does not
    /// hold the key. Like [`count`](Family::count), it keeps the key from eviction.
    pub fn group_total(&self, key: &str) -> Option<u64> {
        self.look_up(key, |slot| slot.total.get()).flatten()
    }

    /// How long ago a reply last brought the group's total for `key` (see
    /// [`Counter::total_age`](crate::Counter::total_age)); `None` before the first, or for a
    /// key the family does not hold (an evicted key included: its age starts again when it
    /// comes back). Like [`count`](Family::count), it keeps the key from eviction.
    pub fn total_age(&self, key: &str) -> Option<Duration> {
        let shared = &self.life.0;
        self.look_up(key, |slot| shared.total_age(slot)).flatten()
    }

    /// How long until the store's current interval ends, by the store's clock: the moment its
    /// interval totals start again from nothing, the same for every participant of the group.
    /// `None` before the store's first reply, once no reply has come for two intervals (the
    /// store is unreachable, or the worker has stopped), and once the family is closed: so it
    /// also tells whether the store answers.
    ///
    /// Each reply tells where in its interval the store's clock was when it ran the flush; this
    /// takes the last one, less half its round trip, and moves it on by the worker's timer
    /// since. It is off by as much as the round trip was lopsided (half of it at most), and by
    /// the drift between the two clocks since the reply, which an interval's flush keeps
    /// small. The interval closing then is not yet the group's total: that comes with the
    /// first flush after it (see [`group_total`](Family::group_total)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use comcount_core::{Family, MemoryStore, clock::VirtualClock};
    /// # use futures::{executor::LocalPool, task::LocalSpawnExt};
    /// let clock = VirtualClock::new();
    /// let (family, worker) = Family::builder("calls", Duration::from_secs(1))
    ///     .build(MemoryStore::with_clock(clock.clone()), clock.clone())?;
    /// let mut pool = LocalPool::new();
    /// pool.spawner().spawn_local(worker)?;
    /// assert_eq!(family.until_interval_end(), None);
    /// family.increment("a", 1);
    /// clock.advance(Duration::from_millis(300));
    /// pool.run_until_stalled(); // the first flush goes out, and its reply comes
    /// assert_eq!(family.until_interval_end(), Some(Duration::from_millis(700)));
    /// clock.advance(Duration::from_millis(900));
    /// assert_eq!(family.until_interval_end(), Some(Duration::from_millis(800)));
    /// family.close();
    /// assert_eq!(family.until_interval_end(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn until_interval_end(&self) -> Option<Duration> {
        self.life.0.until_interval_end()
    }

    /// This participant's amount not yet sent for `key`; 0 for a key it does not hold.
    pub fn buffered(&self, key: &str) -> u64 {
        self.life
            .0
            .keys
            .find(key, |slot| slot.buffer.get())
            .unwrap_or(0)
    }

    fn look_up<R>(&self, key: &str, f: impl Fn(&Slot) -> R) -> Option<R> {
        let shared = &self.life.0;
        shared.keys.find(key, |slot| {
            slot.asked_in(shared.epoch());
            f(slot)
        })
    }

    /// How many keys the family holds now.
    pub fn len(&self) -> usize {
        self.life.0.keys.len()
    }

    /// Whether the family holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of partitions.
    pub fn partitions(&self) -> u32 {
        self.life.0.keys.partitions()
    }

    /// The family's name.
    pub fn name(&self) -> &str {
        &self.life.0.name
    }

    /// Stops the background flushing, at once and for good, as
    /// [`Counter::close`](crate::Counter::close) does, for every key.
    pub fn close(&self) {
        self.life.0.close();
    }

    /// Flushes what every key counted and stops, as [`Counter::drain`](crate::Counter::drain)
    /// does for a counter: the returned future completes once the background task has
    /// stopped, with the units it did not send, by `timeout` on the worker's timer at the
    /// latest. Each partition stops once one of its flushes has settled with nothing left in
    /// its keys' buffers.
    pub fn drain(&self, timeout: Duration) -> impl Future<Output = u64> + Send + 'static {
        self.life.drain(timeout)
    }

    /// Whether [`close`](Family::close) was called, every handle was dropped, or the
    /// [`Worker`](crate::Worker) was dropped: nothing flushes the buffer any more.
    pub fn is_closed(&self) -> bool {
        self.life.0.is_closed()
    }
}

impl fmt::Debug for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Family")
            .field("name", &self.name())
            .field("keys", &self.len())
            .field("partitions", &self.partitions())
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// A handle on one key of a [`Family`], from [`Family::counter`]: counts for the key as a
/// [`Counter`](crate::Counter) counts, with no lookup. Cheap to clone.
///
/// The key is flushed every interval and never evicted while a handle on it lives; the
/// family stays open while any handle on it or on one of its keys lives.
#[derive(Clone)]
pub struct KeyCounter {
    slot: Arc<Slot>,
    life: Arc<Lifetime>,
}

impl KeyCounter {
    /// As [`Counter::increment`](crate::Counter::increment), for this key.
    ///
    /// # Panics
    ///
    /// Where [`try_increment`](KeyCounter::try_increment) returns an error.
    #[inline]
    #[track_caller]
    pub fn increment(&self, amount: u64) -> u64 {
        match self.try_increment(amount) {
            Ok(count) => count,
            Err(error) => panic!("{error}"),
        }
    }

    /// As [`Counter::try_increment`](crate::Counter::try_increment), for this key.
    #[inline]
    pub fn try_increment(&self, amount: u64) -> Result<u64, AmountError> {
        held_increment(&self.life, &self.slot, amount)
    }

    /// The count `increment(0)` would return, without counting.
    pub fn count(&self) -> u64 {
        self.slot.count()
    }

    /// The group's total for this key over the last closed interval, when known.
    pub fn group_total(&self) -> Option<u64> {
        self.slot.total.get()
    }

    /// How long ago a reply last brought the group's total for this key (see
    /// [`Counter::total_age`](crate::Counter::total_age)); `None` before the first.
    pub fn total_age(&self) -> Option<Duration> {
        self.life.0.total_age(&self.slot)
    }

    /// This participant's amount not yet sent for this key.
    pub fn buffered(&self) -> u64 {
        self.slot.buffer.get()
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.slot.key
    }

    /// The family's name.
    pub fn family(&self) -> &str {
        &self.life.0.name
    }
}

impl Drop for KeyCounter {
    /// A key counts as used until its last handle goes: it is evicted only `evict_after`
    /// later.
    fn drop(&mut self) {
        self.slot.asked_in(self.life.0.epoch());
    }
}

impl fmt::Debug for KeyCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyCounter")
            .field("family", &self.family())
            .field("key", &self.key())
            .field("buffered", &self.buffered())
            .field("group_total", &self.group_total())
            .finish()
    }
}
