//! The contract between a counter and the place its flushes go.
//!
//! A [`Store`] runs a counter's flushes, one at a time for each participant id (a counter whose
//! store is farther away than an interval flushes through up to four lanes, each under an id of
//! its own: [`ParticipantId::lane`]), as laid down by the flush protocol: it adds the amount to
//! the running total of the interval the store's own clock is in, at most once per participant
//! and interval, provided that interval is within the flush's reach of the one it expects, and
//! answers with the total of the interval before. Every check comes before the first write, so
//! a refused flush leaves the store as it was.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use crate::diagnostics::Reporter;
use crate::error::StoreError;
use crate::keys::{KeySpace, Layout};

/// A participant's identity in the store, drawn at random when a counter is built.
///
/// The store keeps one fence per participant under this id, so that a participant adds to each
/// interval at most once and a replayed flush is never applied twice.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParticipantId(u64);

impl ParticipantId {
    /// Draws a fresh random id (64 bits).
    pub fn random() -> Self {
        Self(fastrand::u64(..))
    }

    /// An id of your choosing, for tests that need stable key names.
    pub const fn from_u64(id: u64) -> Self {
        Self(id)
    }

    /// The id as a number.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The id that lane `lane` of this participant flushes under: itself for lane 0. A counter
    /// whose store is farther away than an interval flushes through up to four lanes (see the
    /// README's "How a flush settles"), each with a fence of its own, whose key this names.
    /// The others' ids are a fixed mix of this one and the lane's number, the same in every
    /// run, as likely to meet another participant's id as a random draw is.
    ///
    /// ```
    /// use comcount_core::ParticipantId;
    ///
    /// let id = ParticipantId::from_u64(7);
    /// assert_eq!(id.lane(0), id);
    /// assert_ne!(id.lane(1), id);
    /// assert_eq!(id.lane(1), ParticipantId::from_u64(7).lane(1));
    /// ```
    pub const fn lane(self, lane: u32) -> Self {
        if lane == 0 {
            return self;
        }
        // SplitMix64's finaliser of the id plus the lane's multiple of the golden ratio.
        let mut z = self
            .0
            .wrapping_add((lane as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Self(z ^ (z >> 31))
    }
}

impl fmt::Display for ParticipantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for ParticipantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ParticipantId({self})")
    }
}

/// One key's part of a flush: what to add to it.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Entry {
    /// The key within its family; empty for a single counter.
    pub key: Arc<str>,
    /// What to add, never more than `i64::MAX`.
    pub amount: u64,
}

impl Entry {
    /// An entry adding `amount` to `key`.
    pub fn new(key: impl Into<Arc<str>>, amount: u64) -> Self {
        Self {
            key: key.into(),
            amount,
        }
    }
}

/// One flush, as a counter or one partition of a family sends it.
///
/// A resend of the same flush carries the same `seq` and entries; only `expect` may change.
/// Built with [`FlushRequest::new`] and its `with_*` methods; the fields are public to read
/// and to change, and new ones may come in later versions.
///
/// ```
/// use std::sync::Arc;
/// use comcount_core::{Entry, FlushRequest, KeySpace, ParticipantId};
///
/// let request = FlushRequest::new(KeySpace::counter("", "requests"), ParticipantId::from_u64(1), 1000)
///     .with_amount(5)
///     .with_expect(42);
/// assert_eq!(request.amount(), 5);
/// assert_eq!(request.expected_key(), "{requests}:42");
///
/// let batch = FlushRequest::new(KeySpace::partition("", "tenants", 0), ParticipantId::from_u64(1), 1000)
///     .with_entries(vec![Entry::new("acme", 3), Entry::new("globex", 0)]);
/// assert_eq!(batch.amount(), 3);
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct FlushRequest {
    /// The keys the flush may touch, and how they hold their totals.
    pub space: KeySpace,
    /// Who is flushing.
    pub participant: ParticipantId,
    /// Grows with every new flush of this participant to this key space.
    pub seq: u64,
    /// The interval length in milliseconds.
    pub interval_ms: u64,
    /// The interval number the participant expects the flush to land in.
    pub expect: u64,
    /// How many intervals either side of `expect` a copy may still land in, from 1 to
    /// [`MAX_REACH`](Self::MAX_REACH): the [`window`](Self::window). A participant whose round
    /// trips are long, and so vary by more than an interval, reaches further.
    pub reach: u64,
    /// How long the participant's fence key lives after each applied flush, in milliseconds.
    /// The fence is what keeps a participant to one flush an interval, so it must outlive the
    /// interval: counters give it three intervals, ten minutes at least. Once it has expired,
    /// a later flush of the same participant is applied even in the same interval.
    pub fence_ttl_ms: u64,
    /// What to add, key by key. A counter's flush has exactly one entry, with an empty key; a
    /// family's has from 1 to [`MAX_ENTRIES`](Self::MAX_ENTRIES); a key that comes more than
    /// once adds each of its amounts. An entry with amount 0 adds nothing but still brings back
    /// its key's total.
    pub entries: Vec<Entry>,
}

impl FlushRequest {
    /// The largest sequence number a store accepts: 2^53 - 1, the last integer the flush
    /// script's Lua numbers hold exactly.
    pub const MAX_SEQ: u64 = (1 << 53) - 1;
    /// The largest amount a store accepts: `i64::MAX`, the most a Redis integer holds.
    pub const MAX_AMOUNT: u64 = crate::tally::MAX;
    /// The longest interval a store accepts, in milliseconds: ⌊2^53 / 3⌋, so that the three
    /// intervals an interval key lives stay exact in Lua.
    pub const MAX_INTERVAL_MS: u64 = (1 << 53) / 3;
    /// The largest interval number a flush may expect: 2^53 - 1.
    pub const MAX_EXPECT: u64 = (1 << 53) - 1;
    /// The longest fence life a store accepts, in milliseconds: 2^53 - 1.
    pub const MAX_FENCE_TTL_MS: u64 = (1 << 53) - 1;
    /// The most entries one flush of a family carries, so that no flush holds Redis for more
    /// than a few milliseconds.
    pub const MAX_ENTRIES: usize = 1000;
    /// The longest key of a family, in bytes.
    pub const MAX_KEY_LEN: usize = 256;
    /// The furthest a flush may reach either side of the interval it expects: a flush declares
    /// `2 * reach + 3` keys.
    pub const MAX_REACH: u64 = 3;

    /// A flush to `space` by `participant` at intervals of `interval_ms`, with sequence number
    /// 1, expecting interval 0 with a reach of 1, a fence life of ten minutes (or three
    /// intervals, if longer) and no entries. A counter's flush adds its one entry with
    /// [`with_amount`](Self::with_amount), a family's its entries with
    /// [`with_entries`](Self::with_entries).
    pub fn new(space: KeySpace, participant: ParticipantId, interval_ms: u64) -> Self {
        Self {
            space,
            participant,
            seq: 1,
            interval_ms,
            expect: 0,
            reach: 1,
            fence_ttl_ms: interval_ms.saturating_mul(3).max(600_000),
            entries: Vec::new(),
        }
    }

    /// With sequence number `seq`.
    pub fn with_seq(mut self, seq: u64) -> Self {
        self.seq = seq;
        self
    }

    /// Expecting interval `expect`.
    pub fn with_expect(mut self, expect: u64) -> Self {
        self.expect = expect;
        self
    }

    /// Landing anywhere from `reach` intervals before the expected one to `reach` after.
    pub fn with_reach(mut self, reach: u64) -> Self {
        self.reach = reach;
        self
    }

    /// With a fence life of `fence_ttl_ms`.
    pub fn with_fence_ttl_ms(mut self, fence_ttl_ms: u64) -> Self {
        self.fence_ttl_ms = fence_ttl_ms;
        self
    }

    /// With one entry, adding `amount` under the empty key: a single counter's flush.
    pub fn with_amount(mut self, amount: u64) -> Self {
        self.entries = vec![Entry::new("", amount)];
        self
    }

    /// With `entries`: a family partition's flush.
    pub fn with_entries(mut self, entries: Vec<Entry>) -> Self {
        self.entries = entries;
        self
    }

    /// The sum of the entries' amounts (saturating at `u64::MAX`).
    pub fn amount(&self) -> u64 {
        self.entries
            .iter()
            .fold(0u64, |sum, e| sum.saturating_add(e.amount))
    }

    /// The key of interval `n`: `base:n`.
    pub fn interval_key(&self, n: u64) -> String {
        self.space.interval(n)
    }

    /// The key of the interval the flush expects to land in, `expect`: one of
    /// [`keys`](Self::keys).
    ///
    /// It is where the flush lands when the store's clock agrees with the participant's; a copy
    /// may also land in an interval before or after it (see [`window`](Self::window)).
    pub fn expected_key(&self) -> String {
        self.interval_key(self.expect)
    }

    /// The key of the interval before the expected one, `expect - 1`: one of
    /// [`keys`](Self::keys), whose totals the reply carries when the flush lands in `expect`.
    ///
    /// For `expect == 0` there is no interval before; the key then names interval 0 again.
    pub fn previous_key(&self) -> String {
        self.interval_key(self.expect.saturating_sub(1))
    }

    /// The key of this participant's fence: `base:f:id`.
    pub fn fence_key(&self) -> String {
        self.space.fence(self.participant)
    }

    /// The intervals a copy of this flush may land in: `expect - reach ..= expect + reach`
    /// (from 0 when that would be below). In any other interval the store answers
    /// [`Outcome::WrongInterval`].
    pub fn window(&self) -> RangeInclusive<u64> {
        self.expect.saturating_sub(self.reach)..=self.expect.saturating_add(self.reach)
    }

    /// The keys a flush may touch, `2 * reach + 3` of them, in the order the flush script
    /// declares them: the keys of intervals `expect - reach - 1` up to `expect + reach`, then
    /// the fence key. With the reach of 1 they are five: intervals `expect - 2`, `expect - 1`,
    /// `expect` and `expect + 1`, then the fence.
    ///
    /// The interval numbers stop at 0, so for `expect` below `reach + 1` the first keys name
    /// interval 0 more than once. A flush landing in interval `n` of the
    /// [`window`](Self::window) writes the key of `n` and reads the one before it for the
    /// previous interval's totals. A reach beyond [`MAX_REACH`](Self::MAX_REACH) lays out the
    /// keys of one more than it, which the flush script refuses as it refuses the reach.
    pub fn keys(&self) -> Vec<String> {
        let mut keys = Vec::with_capacity(self.key_count());
        self.each_key(|key| keys.push(key.to_owned()));
        keys
    }

    /// How many [`keys`](Self::keys) the flush declares: `2 * reach + 3`.
    pub fn key_count(&self) -> usize {
        let reach = self.reach.min(Self::MAX_REACH + 1) as usize;
        2 * reach + 3
    }

    /// Hands each of the [`keys`](Self::keys) to `key`, in order, each made in the same
    /// buffer: for a store that copies them into its command as they come, without a `String`
    /// each.
    ///
    /// ```
    /// use comcount_core::{FlushRequest, KeySpace, ParticipantId};
    ///
    /// let request = FlushRequest::new(
    ///     KeySpace::counter("app:", "requests"),
    ///     ParticipantId::from_u64(1),
    ///     1000,
    /// )
    /// .with_expect(7);
    /// let mut keys = Vec::new();
    /// request.each_key(|key| keys.push(key.to_owned()));
    /// assert_eq!(keys, request.keys());
    /// assert_eq!(keys.len(), request.key_count());
    /// assert_eq!(keys[2], "app:{requests}:7");
    /// ```
    pub fn each_key(&self, mut key: impl FnMut(&str)) {
        let reach = self.reach.min(Self::MAX_REACH + 1);
        let mut buffer = String::with_capacity(self.space.longest_key_len());
        for i in 0..=2 * reach + 1 {
            let n = self.expect.saturating_add(i).saturating_sub(reach + 1);
            self.space.write_interval(n, &mut buffer);
            key(&buffer);
        }
        self.space.write_fence(self.participant, &mut buffer);
        key(&buffer);
    }

    /// Checks every field against the ranges the flush protocol accepts, which every store
    /// checks before its first write: `seq` in `1..=MAX_SEQ`, `interval_ms` in
    /// `1..=MAX_INTERVAL_MS`, `expect` at most `MAX_EXPECT`, `reach` in `1..=MAX_REACH`,
    /// `fence_ttl_ms` in `1..=MAX_FENCE_TTL_MS`, and the entries: for a counter exactly one, with an empty key;
    /// for a family from 1 to `MAX_ENTRIES`, keys of 1 to `MAX_KEY_LEN` bytes; every amount
    /// at most `MAX_AMOUNT`.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] of kind [`Refused`](crate::StoreErrorKind::Refused) naming the first
    /// field out of range.
    pub fn check(&self) -> Result<(), StoreError> {
        let fields = [
            ("seq", self.seq, 1, Self::MAX_SEQ),
            ("interval_ms", self.interval_ms, 1, Self::MAX_INTERVAL_MS),
            ("expect", self.expect, 0, Self::MAX_EXPECT),
            ("reach", self.reach, 1, Self::MAX_REACH),
            ("fence_ttl_ms", self.fence_ttl_ms, 1, Self::MAX_FENCE_TTL_MS),
        ];
        for (name, value, min, max) in fields {
            if !(min..=max).contains(&value) {
                return Err(out_of_range(format!(
                    "flush field {name} is {value}, outside {min}..={max}"
                )));
            }
        }
        let (count, key_len) = match self.space.layout() {
            Layout::Counter => (1..=1, 0..=0),
            Layout::Family => (1..=Self::MAX_ENTRIES, 1..=Self::MAX_KEY_LEN),
        };
        if !count.contains(&self.entries.len()) {
            return Err(out_of_range(format!(
                "a {:?} flush has {} entries, outside {count:?}",
                self.space.layout(),
                self.entries.len()
            )));
        }
        for entry in &self.entries {
            if !key_len.contains(&entry.key.len()) {
                return Err(out_of_range(format!(
                    "entry key {:?} is {} bytes long, outside {key_len:?}",
                    entry.key,
                    entry.key.len()
                )));
            }
            if entry.amount > Self::MAX_AMOUNT {
                return Err(out_of_range(format!(
                    "entry {:?} amount {} is above {}",
                    entry.key,
                    entry.amount,
                    Self::MAX_AMOUNT
                )));
            }
        }
        Ok(())
    }

    /// The interval length as a [`Duration`].
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }
}

fn out_of_range(what: String) -> StoreError {
    StoreError::refused(format!(
        "{what}: build flush requests within the protocol's ranges"
    ))
}

/// What the store did with a flush.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Outcome {
    /// Added to the interval the store's clock is in, which is within
    /// [`FlushRequest::window`]; the participant's fence now holds this flush.
    Applied,
    /// This very flush (same sequence number) was applied before; nothing was written again.
    /// The reply's [`counted_in`](FlushReply::counted_in) says in which interval.
    Duplicate,
    /// A later flush of this participant was applied already; this older copy was ignored.
    Stale,
    /// The participant already added to this interval; nothing was written and the amount was
    /// certainly not counted.
    Fenced,
    /// The store's clock is in an interval outside [`FlushRequest::window`] (more than the
    /// flush's reach from the expected one); nothing was written. The reply's interval and
    /// phase say where it is.
    WrongInterval,
}

impl Outcome {
    /// Whether the flush's amount is counted in the store (now or from an earlier copy).
    pub fn is_counted(self) -> bool {
        matches!(self, Outcome::Applied | Outcome::Duplicate)
    }
}

/// The store's answer to a flush.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct FlushReply {
    /// What happened to the flush.
    pub outcome: Outcome,
    /// The interval number the store's clock was in when it ran the flush.
    pub interval: u64,
    /// How far into that interval the store's clock was.
    pub phase: Duration,
    /// The interval the flush's amounts are counted in: `interval` for [`Outcome::Applied`],
    /// the interval the earlier copy was applied in for [`Outcome::Duplicate`], and `None` for
    /// every other outcome.
    pub counted_in: Option<u64>,
    /// What the participant's fence held when the store ran this flush, before the flush
    /// wrote anything. [`Fence::Untold`] from a store that does not tell, and for
    /// [`Outcome::WrongInterval`], which does not read the fence.
    pub fence: Fence,
    /// The totals of the interval before `interval`, one per entry of the request and in its
    /// order: `None` where that interval holds no total for the key.
    ///
    /// With [`Outcome::WrongInterval`] the store may not have read them and this is empty; a
    /// counter does not take it as the group's numbers then.
    pub previous_totals: Vec<Option<u64>>,
    /// For an applied flush of a single counter, the total of the interval it was counted in
    /// just after it was added: at least what that interval holds once it has ended, so the
    /// group's total from then on when no later reply brings the whole of it. Empty for every
    /// other outcome, for a family's flush, and from a store that does not tell it.
    pub landed_totals: Vec<Option<u64>>,
}

/// What a participant's fence held when the store ran a flush: the store's record of the
/// participant's last applied flush, which turns away every copy of it and of any earlier one.
///
/// An applied flush settles an earlier flush of the same participant none of whose copies
/// answered, when no flush between the two was applied and the fence has lived since: the
/// earlier one was counted if the fence held its number, and not if it held an earlier one or
/// nothing; either way no copy of it can be counted from then on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Fence {
    /// The store did not say.
    #[default]
    Untold,
    /// No flush of the participant was applied within the fence's life.
    Empty,
    /// The participant's last applied flush: its sequence number and the interval it was
    /// counted in.
    Held {
        /// Its sequence number.
        seq: u64,
        /// The interval it was counted in.
        interval: u64,
    },
}

impl Fence {
    /// The sequence number held, if any.
    pub fn seq(self) -> Option<u64> {
        match self {
            Fence::Held { seq, .. } => Some(seq),
            Fence::Untold | Fence::Empty => None,
        }
    }
}

impl FlushReply {
    /// A reply with no totals; add them with [`with_totals`](Self::with_totals).
    pub fn new(outcome: Outcome, interval: u64, phase: Duration, counted_in: Option<u64>) -> Self {
        Self {
            outcome,
            interval,
            phase,
            counted_in,
            fence: Fence::Untold,
            previous_totals: Vec::new(),
            landed_totals: Vec::new(),
        }
    }

    /// With the previous interval's totals, one per entry of the request.
    pub fn with_totals(mut self, totals: Vec<Option<u64>>) -> Self {
        self.previous_totals = totals;
        self
    }

    /// With the totals of the interval counted in, just after this flush
    /// ([`landed_totals`](Self::landed_totals)).
    pub fn with_landed_totals(mut self, totals: Vec<Option<u64>>) -> Self {
        self.landed_totals = totals;
        self
    }

    /// With what the participant's fence held as the flush ran ([`fence`](Self::fence)).
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    /// The previous interval's total of the first entry: a single counter's total.
    pub fn previous_total(&self) -> Option<u64> {
        self.previous_totals.first().copied().flatten()
    }
}

/// Where a counter's flushes go: an implementation of the flush protocol.
///
/// Implementations exist for the in-process [`MemoryStore`](crate::MemoryStore) and, in their own
/// crates, for the redis-rs and fred Redis clients. A store is shared by the counter's background
/// task only; it is never called from [`Counter::increment`](crate::Counter::increment).
///
/// # Contract
///
/// - A flush lands in the interval `n` the store's clock is in when `n` is within
///   [`FlushRequest::window`] (the flush's reach, one to three intervals, either side of
///   `expect`); elsewhere it is
///   [`Outcome::WrongInterval`]. The fence decides as in [`Outcome`], against `n`.
/// - A refused flush ([`Outcome::Duplicate`], [`Outcome::Stale`], [`Outcome::Fenced`],
///   [`Outcome::WrongInterval`]) changes nothing in the store.
/// - A request outside the ranges of [`FlushRequest::check`] is an `Err` of kind
///   [`Refused`](crate::StoreErrorKind::Refused).
/// - An `Err` of kind [`Refused`](crate::StoreErrorKind::Refused) or
///   [`Unavailable`](crate::StoreErrorKind::Unavailable) means nothing was written; any other
///   error leaves it unknown whether the flush was applied. A store whose client may send a
///   command more than once on its own, and answers with the last attempt only, marks its
///   errors with [`StoreError::after_unseen_resends`].
/// - An applied flush adds every entry's amount, or none of them. A counter's total that would
///   pass `i64::MAX` refuses the flush; a family key's total stops at `i64::MAX`.
/// - Key names and expiry follow [`FlushRequest::keys`]: in the [`Layout::Counter`] layout the
///   interval key holds an integer; in the [`Layout::Family`] layout a hash with a field per
///   key holding its total as an integer. Either expires three intervals after each write, the
///   fence after [`FlushRequest::fence_ttl_ms`].
/// - The reply's [`previous_totals`](FlushReply::previous_totals) has one item per entry, in
///   the request's order, unless the outcome is [`Outcome::WrongInterval`].
/// - A reply should bring [`fence`](FlushReply::fence), what the participant's fence held as
///   the flush ran, so that a flush whose copies all went unanswered can be settled by the
///   next one applied; such a flush stays unsettled with a store that leaves it
///   [`Fence::Untold`].
/// - A single counter's applied flush should bring its
///   [`landed_totals`](FlushReply::landed_totals): one item, the interval's total right after
///   the flush was added. A counter whose flushes do not add to every interval learns its
///   group's total from it; without it, only from flushes in consecutive intervals.
///
/// # Writing one
///
/// `flush` may be written as an `async fn`; the compiler checks that its future is `Send`. A
/// store that adds something around another one, here a count of the flushes it passes on:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use comcount_core::diagnostics::Reporter;
/// use comcount_core::{Counter, FlushReply, FlushRequest, MemoryStore, Store, StoreError};
/// use comcount_core::clock::VirtualClock;
/// use futures::executor::LocalPool;
/// use futures::task::LocalSpawnExt;
///
/// struct Tallied<S> {
///     inner: S,
///     flushes: AtomicU64,
/// }
///
/// impl<S: Store> Store for Tallied<S> {
///     fn name(&self) -> &str {
///         self.inner.name()
///     }
///
///     async fn flush(
///         &self,
///         request: &FlushRequest,
///         report: &Reporter,
///     ) -> Result<FlushReply, StoreError> {
///         self.flushes.fetch_add(1, Ordering::Relaxed);
///         self.inner.flush(request, report).await
///     }
/// }
///
/// let clock = VirtualClock::new();
/// let store = Arc::new(Tallied {
///     inner: MemoryStore::with_clock(clock.clone()),
///     flushes: AtomicU64::new(0),
/// });
/// // `Arc<S>` is a store too, so this one stays at hand.
/// let (counter, worker) = Counter::builder("requests", Duration::from_secs(1))
///     .build(store.clone(), clock)?;
/// let mut pool = LocalPool::new();
/// pool.spawner().spawn_local(worker).unwrap();
///
/// counter.increment(3);
/// pool.run_until_stalled();
/// assert_eq!(store.flushes.load(Ordering::Relaxed), 1);
/// assert_eq!(store.inner.total("{requests}:0"), Some(3));
/// # Ok::<(), comcount_core::ConfigError>(())
/// ```
///
/// To hold a store whose type is chosen at run time, box it: [`BoxStore`](crate::BoxStore).
pub trait Store: Send + Sync + 'static {
    /// A short name for diagnostics, such as `"memory"`, `"redis-rs"` or `"fred"`.
    fn name(&self) -> &str;

    /// Something about how the store is set up that will make flushes fail, said once when
    /// the counter starts as the warning
    /// [`Event::StoreCaveat`](crate::diagnostics::Event::StoreCaveat). A connection that never
    /// reconnects is the case in point: after the server restarts or fails over, every flush
    /// fails and the counter counts alone. `None`, the default, for a store set up as it
    /// should be.
    ///
    /// ```
    /// use comcount_core::{MemoryStore, Store};
    ///
    /// assert_eq!(MemoryStore::new().caveat(), None);
    /// ```
    fn caveat(&self) -> Option<Cow<'_, str>> {
        None
    }

    /// Runs one flush. `report` is where the store reports events of its own, such as loading
    /// its script.
    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send;
}

impl<S: Store> Store for Arc<S> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn caveat(&self) -> Option<Cow<'_, str>> {
        (**self).caveat()
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        (**self).flush(request, report)
    }
}
