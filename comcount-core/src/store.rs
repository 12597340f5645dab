//! The contract between a counter and the place its flushes go.
//!
//! A [`Store`] runs one flush at a time for a counter, as laid down by the flush protocol: it adds
//! the amount to the running total of the interval the store's own clock is in, at most once per
//! participant and interval, provided that interval is within one of the one the flush expects,
//! and answers with the total of the interval before. Every check comes before the first write,
//! so a refused flush leaves the store as it was.

use std::fmt;
use std::future::Future;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use crate::diagnostics::Reporter;
use crate::error::StoreError;

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

/// One flush, as a counter sends it.
///
/// A resend of the same flush carries the same `seq` and `amount`; only `expect` may change.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FlushRequest {
    /// The counter's key base, `prefix{name}`; every key of the counter starts with it.
    pub key_base: Arc<str>,
    /// Who is flushing.
    pub participant: ParticipantId,
    /// Grows with every new flush of this participant, starting at 1.
    pub seq: u64,
    /// What to add, never more than `i64::MAX`.
    pub amount: u64,
    /// The interval length in milliseconds.
    pub interval_ms: u64,
    /// The interval number the participant expects the flush to land in.
    pub expect: u64,
    /// How long the participant's fence key lives after each applied flush, in milliseconds.
    pub fence_ttl_ms: u64,
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

    /// The key of interval `n`: `prefix{name}:n`.
    pub fn interval_key(&self, n: u64) -> String {
        format!("{}:{n}", self.key_base)
    }

    /// The key of the interval the flush expects to land in, `expect`: the third of
    /// [`keys`](Self::keys).
    ///
    /// It is where the flush lands when the store's clock agrees with the participant's; a copy
    /// may also land in the interval before or after it (see [`window`](Self::window)).
    pub fn expected_key(&self) -> String {
        self.interval_key(self.expect)
    }

    /// The key of the interval before the expected one, `expect - 1`: the second of
    /// [`keys`](Self::keys), whose total the reply carries when the flush lands in `expect`.
    ///
    /// For `expect == 0` there is no interval before; the key then names interval 0 again.
    pub fn previous_key(&self) -> String {
        self.interval_key(self.expect.saturating_sub(1))
    }

    /// The key of this participant's fence: `prefix{name}:f:id`.
    pub fn fence_key(&self) -> String {
        format!("{}:f:{}", self.key_base, self.participant)
    }

    /// The intervals a copy of this flush may land in: `expect - 1 ..= expect + 1` (from 0 when
    /// `expect` is 0). In any other interval the store answers [`Outcome::WrongInterval`].
    pub fn window(&self) -> RangeInclusive<u64> {
        self.expect.saturating_sub(1)..=self.expect.saturating_add(1)
    }

    /// The five keys a flush may touch, in the order the flush script declares them: the keys
    /// of intervals `expect - 2`, `expect - 1`, `expect` and `expect + 1`, then the fence key.
    ///
    /// The interval numbers stop at 0, so for `expect` below 2 the first keys name interval 0
    /// more than once. A flush landing in interval `n` of the [`window`](Self::window) writes
    /// the key of `n` and reads the one before it for the previous interval's total.
    pub fn keys(&self) -> [String; 5] {
        let at = |back: u64| self.interval_key(self.expect.saturating_sub(back));
        [
            at(2),
            at(1),
            at(0),
            self.interval_key(self.expect.saturating_add(1)),
            self.fence_key(),
        ]
    }

    /// Checks every field against the ranges the flush protocol accepts, which every store
    /// checks before its first write: `seq` in `1..=MAX_SEQ`, `amount` at most `MAX_AMOUNT`,
    /// `interval_ms` in `1..=MAX_INTERVAL_MS`, `expect` at most `MAX_EXPECT`, and
    /// `fence_ttl_ms` in `1..=MAX_FENCE_TTL_MS`.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] of kind [`Refused`](crate::StoreErrorKind::Refused) naming the first
    /// field out of range.
    pub fn check(&self) -> Result<(), StoreError> {
        let fields = [
            ("seq", self.seq, 1, Self::MAX_SEQ),
            ("amount", self.amount, 0, Self::MAX_AMOUNT),
            ("interval_ms", self.interval_ms, 1, Self::MAX_INTERVAL_MS),
            ("expect", self.expect, 0, Self::MAX_EXPECT),
            ("fence_ttl_ms", self.fence_ttl_ms, 1, Self::MAX_FENCE_TTL_MS),
        ];
        for (name, value, min, max) in fields {
            if !(min..=max).contains(&value) {
                return Err(StoreError::refused(format!(
                    "flush field {name} is {value}, outside {min}..={max}: build flush \
                     requests within the protocol's ranges"
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

/// What the store did with a flush.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Outcome {
    /// Added to the interval the store's clock is in, which is within one of the expected
    /// interval; the participant's fence now holds this flush.
    Applied,
    /// This very flush (same sequence number) was applied before; nothing was written again.
    /// The reply's [`counted_in`](FlushReply::counted_in) says in which interval.
    Duplicate,
    /// A later flush of this participant was applied already; this older copy was ignored.
    Stale,
    /// The participant already added to this interval; nothing was written and the amount was
    /// certainly not counted.
    Fenced,
    /// The store's clock is more than one interval away from the expected one (outside
    /// [`FlushRequest::window`]); nothing was written. The reply's interval and phase say where
    /// it is.
    WrongInterval,
}

impl Outcome {
    /// Whether the flush's amount is counted in the store (now or from an earlier copy).
    pub fn is_counted(self) -> bool {
        matches!(self, Outcome::Applied | Outcome::Duplicate)
    }
}

/// The store's answer to a flush.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FlushReply {
    /// What happened to the flush.
    pub outcome: Outcome,
    /// The interval number the store's clock was in when it ran the flush.
    pub interval: u64,
    /// How far into that interval the store's clock was.
    pub phase: Duration,
    /// The total of the interval before `interval`, or `None` where that interval has no key.
    ///
    /// With [`Outcome::WrongInterval`] the store may not have read that key and this is `None`;
    /// a counter does not take it as the group's number then.
    pub previous_total: Option<u64>,
    /// The interval the flush's amount is counted in: `interval` for [`Outcome::Applied`], the
    /// interval the earlier copy was applied in for [`Outcome::Duplicate`], and `None` for every
    /// other outcome.
    pub counted_in: Option<u64>,
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
///   [`FlushRequest::window`] (one interval either side of `expect`); elsewhere it is
///   [`Outcome::WrongInterval`]. The fence decides as in [`Outcome`], against `n`.
/// - A refused flush ([`Outcome::Duplicate`], [`Outcome::Stale`], [`Outcome::Fenced`],
///   [`Outcome::WrongInterval`]) changes nothing in the store.
/// - A request outside the ranges of [`FlushRequest::check`] is an `Err` of kind
///   [`Refused`](crate::StoreErrorKind::Refused).
/// - An `Err` of kind [`Refused`](crate::StoreErrorKind::Refused) or
///   [`Unavailable`](crate::StoreErrorKind::Unavailable) means nothing was written; any other
///   error leaves it unknown whether the flush was applied.
/// - Key names and expiry follow [`FlushRequest::keys`]: the interval key expires three intervals
///   after each write, the fence after [`FlushRequest::fence_ttl_ms`].
pub trait Store: Send + Sync + 'static {
    /// A short name for diagnostics, such as `"memory"`, `"redis-rs"` or `"fred"`.
    fn name(&self) -> &str;

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

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        (**self).flush(request, report)
    }
}
