//! One flush as a counter or a partition of a family sends it: what it adds, where, and the
//! bounds every request is checked against before anything is written.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use crate::Outcome;
use crate::error::StoreError;
use crate::protocol::keys::{KeySpace, Layout};
use crate::protocol::participant::ParticipantId;

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
    pub const MAX_AMOUNT: u64 = i64::MAX as u64;
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
