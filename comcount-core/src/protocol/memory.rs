//! The in-process store: the flush protocol on a map, on a clock of its own.

use std::collections::HashMap;
use std::fmt;
use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::diagnostics::Reporter;
use crate::error::StoreError;
use crate::protocol::keys::Layout;
use crate::protocol::reply::{Fence, FlushReply, Outcome};
use crate::protocol::request::FlushRequest;
use crate::protocol::store::Store;

/// The largest total a store keeps.
const MAX: u64 = FlushRequest::MAX_AMOUNT;

/// How many flushes between two sweeps of expired keys.
const SWEEP_EVERY: u32 = 256;

/// A [`Store`] in this process's memory, with the same outcomes, key names and expiry as the
/// Redis stores.
///
/// Use it where no Redis is wanted: participants in one process that share a `MemoryStore`
/// (clones share one map) share totals, as participants on Redis do. It also stands in for
/// Redis in your own unit tests, where a [`VirtualClock`](crate::clock::VirtualClock) makes
/// time move by hand.
///
/// ```
/// use std::time::Duration;
/// use comcount_core::{MemoryStore, clock::VirtualClock};
///
/// let clock = VirtualClock::starting_at(Duration::from_secs(60));
/// let store = MemoryStore::with_clock(clock.clone());
/// assert_eq!(store.total("{requests}:600"), None);
/// ```
#[derive(Clone)]
pub struct MemoryStore<C = SystemClock> {
    clock: Arc<C>,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    values: HashMap<String, Entry>,
    flushes: u32,
}

#[derive(Clone, Debug)]
struct Entry {
    value: Value,
    expires_at: Duration,
}

#[derive(Clone, Debug)]
enum Value {
    Total(u64),
    Totals(HashMap<Arc<str>, u64>),
    Fence { seq: u64, interval: u64 },
}

impl MemoryStore {
    /// A store on the wall clock.
    pub fn new() -> Self {
        Self::with_clock(SystemClock)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Clock> MemoryStore<C> {
    /// A store whose interval numbers come from `clock`.
    pub fn with_clock(clock: C) -> Self {
        Self {
            clock: Arc::new(clock),
            state: Arc::default(),
        }
    }

    /// The total held at `key`, if it exists, holds an integer (a counter's interval key) and
    /// has not expired.
    pub fn total(&self, key: &str) -> Option<u64> {
        match self.live(key)?.value {
            Value::Total(total) => Some(total),
            _ => None,
        }
    }

    /// The total of the family key `field` in the interval key `key` of a family's partition,
    /// if both exist and the interval key has not expired.
    pub fn field(&self, key: &str, field: &str) -> Option<u64> {
        match self.live(key)?.value {
            Value::Totals(fields) => fields.get(field).copied(),
            _ => None,
        }
    }

    /// Every family key's total in the interval key `key` of a family's partition, sorted by
    /// family key.
    pub fn fields(&self, key: &str) -> Vec<(String, u64)> {
        let mut fields: Vec<_> = match self.live(key).map(|e| e.value) {
            Some(Value::Totals(fields)) => fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            _ => Vec::new(),
        };
        fields.sort();
        fields
    }

    /// The sequence number and interval of the last flush a fence at `key` holds.
    pub fn fence(&self, key: &str) -> Option<(u64, u64)> {
        match self.live(key)?.value {
            Value::Fence { seq, interval } => Some((seq, interval)),
            _ => None,
        }
    }

    /// How long `key` has to live, if it exists.
    pub fn time_to_live(&self, key: &str) -> Option<Duration> {
        let now = self.clock.now();
        self.live(key).map(|e| e.expires_at.saturating_sub(now))
    }

    /// Every live key, sorted.
    pub fn keys(&self) -> Vec<String> {
        let now = self.clock.now();
        let mut keys: Vec<_> = self
            .lock()
            .values
            .iter()
            .filter(|(_, e)| e.expires_at > now)
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    fn live(&self, key: &str) -> Option<Entry> {
        let now = self.clock.now();
        self.lock()
            .values
            .get(key)
            .filter(|e| e.expires_at > now)
            .cloned()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The protocol's steps, as the flush script takes them: every check before the first
    /// write.
    fn run(&self, request: &FlushRequest) -> Result<FlushReply, StoreError> {
        request.check()?;
        let now = self.clock.now();
        let interval_ms = request.interval_ms;
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let n = now_ms / interval_ms;
        let phase = Duration::from_millis(now_ms % interval_ms);
        let reply = |outcome, counted_in| FlushReply::new(outcome, n, phase, counted_in);

        let mut state = self.lock();
        state.flushes += 1;
        if state.flushes.is_multiple_of(SWEEP_EVERY) {
            state.values.retain(|_, e| e.expires_at > now);
        }
        if !request.window().contains(&n) {
            return Ok(reply(Outcome::WrongInterval, None));
        }
        let live = |key: &str| {
            state
                .values
                .get(key)
                .filter(|e| e.expires_at > now)
                .map(|e| &e.value)
        };
        let totals = |key: &str| -> Result<Vec<Option<u64>>, StoreError> {
            let layout = request.space.layout();
            match (live(key), layout) {
                (None, _) => Ok(vec![None; request.entries.len()]),
                (Some(Value::Total(total)), Layout::Counter) => Ok(vec![Some(*total)]),
                (Some(Value::Totals(fields)), Layout::Family) => Ok(request
                    .entries
                    .iter()
                    .map(|e| fields.get(&e.key).copied())
                    .collect()),
                _ => Err(wrong_type(key)),
            }
        };
        let previous_totals = match n.checked_sub(1) {
            Some(p) => totals(&request.interval_key(p))?,
            None => vec![None; request.entries.len()],
        };
        let fence_key = request.fence_key();
        // What the fence held before this flush, which every reply but a wrong interval tells.
        let fence = match live(&fence_key) {
            Some(Value::Fence { seq, interval }) => Fence::Held {
                seq: *seq,
                interval: *interval,
            },
            _ => Fence::Empty,
        };
        let refused = |outcome, counted_in| {
            Ok(reply(outcome, counted_in)
                .with_fence(fence)
                .with_totals(previous_totals.clone()))
        };
        match live(&fence_key) {
            Some(Value::Fence { seq, interval }) if request.seq == *seq => {
                return refused(Outcome::Duplicate, Some(*interval));
            }
            Some(Value::Fence { seq, .. }) if request.seq < *seq => {
                return refused(Outcome::Stale, None);
            }
            Some(Value::Fence { interval, .. }) if *interval >= n => {
                return refused(Outcome::Fenced, None);
            }
            Some(Value::Fence { .. }) | None => {}
            Some(_) => return Err(wrong_type(&fence_key)),
        }
        let key = request.interval_key(n);
        let expires_at = now + Duration::from_millis(interval_ms.saturating_mul(3));
        let mut landed_totals = Vec::new();
        let value = match request.space.layout() {
            Layout::Counter => {
                // A total that would pass the largest refuses the flush, as `INCRBY` does.
                let before = totals(&key)?[0].unwrap_or(0);
                let total = before
                    .checked_add(request.amount())
                    .filter(|t| *t <= MAX)
                    .ok_or_else(|| StoreError::refused("increment or decrement would overflow"))?;
                landed_totals.push(Some(total));
                Value::Total(total)
            }
            _ => {
                totals(&key)?;
                let mut fields = match state.values.remove(&key) {
                    Some(Entry {
                        value: Value::Totals(fields),
                        expires_at,
                    }) if expires_at > now => fields,
                    _ => HashMap::new(),
                };
                // A family's total stops at the largest, as the script's sums do; a key that
                // comes twice adds both amounts.
                for entry in &request.entries {
                    let total = fields.entry(Arc::clone(&entry.key)).or_default();
                    *total = total.saturating_add(entry.amount).min(MAX);
                }
                Value::Totals(fields)
            }
        };
        state.values.insert(key, Entry { value, expires_at });
        state.values.insert(
            fence_key,
            Entry {
                value: Value::Fence {
                    seq: request.seq,
                    interval: n,
                },
                expires_at: now + Duration::from_millis(request.fence_ttl_ms),
            },
        );
        Ok(reply(Outcome::Applied, Some(n))
            .with_fence(fence)
            .with_totals(previous_totals)
            .with_landed_totals(landed_totals))
    }
}

fn wrong_type(key: &str) -> StoreError {
    StoreError::refused(format!(
        "key {key:?} holds the wrong kind of value; is another program using this prefix?"
    ))
}

impl<C: Clock> Store for MemoryStore<C> {
    fn name(&self) -> &str {
        "memory"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        ready(self.run(request))
    }
}

impl<C> fmt::Debug for MemoryStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreErrorKind;
    use crate::clock::VirtualClock;
    use crate::protocol::keys::KeySpace;
    use crate::protocol::participant::ParticipantId;

    const INTERVAL_MS: u64 = 1_000;

    /// A store whose clock is 400 ms into interval `n`.
    fn store_in(n: u64) -> MemoryStore<VirtualClock> {
        let at = Duration::from_millis(n * INTERVAL_MS + 400);
        MemoryStore::with_clock(VirtualClock::starting_at(at))
    }

    fn request(participant: u64, seq: u64, amount: u64, expect: u64) -> FlushRequest {
        FlushRequest::new(
            KeySpace::counter("", "m"),
            ParticipantId::from_u64(participant),
            INTERVAL_MS,
        )
        .with_seq(seq)
        .with_amount(amount)
        .with_expect(expect)
        .with_fence_ttl_ms(600_000)
    }

    fn batch(participant: u64, seq: u64, entries: &[(&str, u64)], expect: u64) -> FlushRequest {
        FlushRequest::new(
            KeySpace::partition("", "m", 0),
            ParticipantId::from_u64(participant),
            INTERVAL_MS,
        )
        .with_seq(seq)
        .with_entries(
            entries
                .iter()
                .map(|(k, a)| crate::Entry::new(*k, *a))
                .collect(),
        )
        .with_expect(expect)
    }

    fn key(n: u64) -> String {
        format!("{{m}}:{n}")
    }

    #[test]
    fn the_sweep_drops_expired_keys_and_keeps_live_ones() {
        let store = store_in(10);
        store.run(&request(1, 1, 4, 10)).unwrap();
        store.clock.advance(Duration::from_millis(3 * INTERVAL_MS));
        store.run(&request(2, 1, 5, 13)).unwrap();
        // The sweep runs on every SWEEP_EVERY-th flush; these are wrong-interval ones.
        for _ in 2..SWEEP_EVERY {
            store.run(&request(3, 1, 1, 0)).unwrap();
        }
        let keys: Vec<_> = store.lock().values.keys().cloned().collect();
        assert!(!keys.contains(&key(10)), "{keys:?}");
        assert!(keys.contains(&key(13)), "{keys:?}");
        assert!(keys.contains(&request(2, 1, 5, 13).fence_key()), "{keys:?}");
        assert_eq!(store.total(&key(13)), Some(5));
    }

    #[test]
    fn a_copy_arriving_as_its_fence_expires_is_not_fenced() {
        let store = store_in(10);
        let short_fence = request(1, 1, 4, 10).with_fence_ttl_ms(1_500);
        store.run(&short_fence).unwrap();
        store.clock.advance(Duration::from_millis(1_500));
        let again = short_fence.with_expect(11);
        assert_eq!(store.run(&again).unwrap().outcome, Outcome::Applied);
    }

    #[test]
    fn a_fence_key_holding_a_total_is_refused_and_left_alone() {
        let store = store_in(10);
        let request = request(1, 1, 4, 10);
        store.lock().values.insert(
            request.fence_key(),
            Entry {
                value: Value::Total(7),
                expires_at: Duration::from_secs(1_000),
            },
        );
        let error = store.run(&request).unwrap_err();
        assert_eq!(error.kind(), StoreErrorKind::Refused);
        assert_eq!(store.total(&key(10)), None);
        assert_eq!(store.total(&request.fence_key()), Some(7));
    }

    #[test]
    fn a_key_is_gone_at_the_instant_its_life_ends() {
        let store = store_in(10);
        store.run(&request(1, 1, 4, 10)).unwrap();
        let life = Duration::from_millis(3 * INTERVAL_MS);
        store.clock.advance(life - Duration::from_millis(1));
        assert_eq!(store.total(&key(10)), Some(4));
        assert!(store.keys().contains(&key(10)));
        store.clock.advance(Duration::from_millis(1));
        assert_eq!(store.total(&key(10)), None);
        assert!(!store.keys().contains(&key(10)));
    }

    #[test]
    fn a_copy_landing_one_interval_late_is_applied_in_the_servers_interval() {
        let store = store_in(10);
        store.run(&request(1, 1, 4, 9)).unwrap();
        let reply = store.run(&request(2, 1, 5, 9)).unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(reply.interval, 10);
        assert_eq!(reply.counted_in, Some(10));
        assert_eq!(reply.previous_total(), None);
        assert_eq!(store.total(&key(10)), Some(9));
        assert_eq!(store.total(&key(9)), None);
        assert_eq!(store.fence(&request(2, 1, 5, 9).fence_key()), Some((1, 10)));
    }

    #[test]
    fn a_copy_landing_one_interval_early_is_applied_in_the_servers_interval() {
        let store = store_in(10);
        let earlier = store_in(9);
        earlier.run(&request(1, 1, 3, 9)).unwrap();
        // The same map, a clock one interval later: interval 9 holds 3.
        let store = MemoryStore {
            clock: store.clock,
            state: earlier.state,
        };
        let reply = store.run(&request(2, 1, 5, 11)).unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(reply.interval, 10);
        assert_eq!(reply.counted_in, Some(10));
        assert_eq!(reply.previous_total(), Some(3));
        assert_eq!(store.total(&key(10)), Some(5));
        assert_eq!(store.total(&key(11)), None);
    }

    #[test]
    fn two_intervals_off_is_a_wrong_interval_that_writes_nothing() {
        let store = store_in(10);
        for expect in [0, 7, 8, 12, 13, 1 << 40] {
            let reply = store.run(&request(1, 1, 5, expect)).unwrap();
            assert_eq!(reply.outcome, Outcome::WrongInterval, "expect {expect}");
            assert_eq!(reply.interval, 10);
            assert_eq!(reply.counted_in, None);
            assert!(
                store.keys().is_empty(),
                "expect {expect}: {:?}",
                store.keys()
            );
        }
    }

    #[test]
    fn the_first_interval_has_no_interval_before() {
        let store = store_in(0);
        let reply = store.run(&request(1, 1, 5, 1)).unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(reply.counted_in, Some(0));
        assert_eq!(reply.previous_total(), None);
        assert_eq!(store.total(&key(0)), Some(5));
    }

    #[test]
    fn a_duplicate_reports_the_interval_the_flush_was_applied_in() {
        let store = store_in(10);
        assert_eq!(
            store.run(&request(1, 1, 5, 11)).unwrap().counted_in,
            Some(10)
        );
        store.clock.advance(Duration::from_millis(INTERVAL_MS));
        let reply = store.run(&request(1, 1, 5, 11)).unwrap();
        assert_eq!(reply.outcome, Outcome::Duplicate);
        assert_eq!(reply.interval, 11);
        assert_eq!(reply.counted_in, Some(10));
        assert_eq!(reply.previous_total(), Some(5));
        assert_eq!(store.total(&key(11)), None);
    }

    #[test]
    fn a_reply_tells_what_the_fence_held_before_the_flush() {
        let store = store_in(10);
        let told = |request: &FlushRequest| {
            let reply = store.run(request).unwrap();
            (reply.outcome, reply.fence)
        };
        let held = Fence::Held {
            seq: 5,
            interval: 10,
        };
        assert_eq!(
            told(&request(1, 5, 1, 10)),
            (Outcome::Applied, Fence::Empty)
        );
        assert_eq!(told(&request(1, 5, 1, 10)), (Outcome::Duplicate, held));
        assert_eq!(told(&request(1, 3, 1, 10)), (Outcome::Stale, held));
        assert_eq!(told(&request(1, 7, 1, 10)), (Outcome::Fenced, held));
        assert_eq!(
            told(&request(1, 7, 1, 13)),
            (Outcome::WrongInterval, Fence::Untold)
        );
        store.clock.advance(Duration::from_millis(INTERVAL_MS));
        assert_eq!(told(&request(1, 7, 1, 11)), (Outcome::Applied, held));
        assert_eq!(
            store.fence(&request(1, 7, 1, 11).fence_key()),
            Some((7, 11))
        );
    }

    #[test]
    fn the_fence_still_holds_across_the_window() {
        let store = store_in(10);
        store.run(&request(1, 1, 5, 9)).unwrap();
        // A later flush aimed at interval 11 lands in 10, where the participant added already.
        let reply = store.run(&request(1, 2, 7, 11)).unwrap();
        assert_eq!(reply.outcome, Outcome::Fenced);
        assert_eq!(reply.counted_in, None);
        let reply = store.run(&request(1, 1, 5, 11)).unwrap();
        assert_eq!(reply.outcome, Outcome::Duplicate);
        assert_eq!(store.total(&key(10)), Some(5));
    }

    #[test]
    fn an_empty_flush_is_applied_and_brings_back_the_total() {
        let store = store_in(10);
        let reply = store.run(&request(1, 1, 0, 10)).unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(store.total(&key(10)), Some(0));
    }

    #[test]
    fn each_argument_out_of_range_is_refused_and_writes_nothing() {
        let store = store_in(10);
        store.run(&request(1, 1, 5, 10)).unwrap();
        let keys = store.keys();
        let fence = store.fence(&request(1, 1, 5, 10).fence_key());
        type Spoil = fn(&mut FlushRequest);
        let bad: [(&str, Spoil); 8] = [
            ("seq", |r| r.seq = 0),
            ("seq", |r| r.seq = 1 << 53),
            ("amount", |r| r.entries[0].amount = i64::MAX as u64 + 1),
            ("interval_ms", |r| r.interval_ms = 0),
            ("interval_ms", |r| r.interval_ms = (1 << 53) / 3 + 1),
            ("expect", |r| r.expect = 1 << 53),
            ("fence_ttl_ms", |r| r.fence_ttl_ms = 0),
            ("fence_ttl_ms", |r| r.fence_ttl_ms = 1 << 53),
        ];
        for (field, spoil) in bad {
            for participant in [1, 2] {
                let mut request = request(participant, 2, 3, 10);
                spoil(&mut request);
                let error = store.run(&request).unwrap_err();
                assert_eq!(error.kind(), StoreErrorKind::Refused, "{field}");
                assert!(error.to_string().contains(field), "{field}: {error}");
                assert_eq!(store.keys(), keys, "{field} wrote");
                assert_eq!(store.total(&key(10)), Some(5), "{field} wrote");
                assert_eq!(
                    store.fence(&request.fence_key()).is_some(),
                    participant == 1
                );
            }
        }
        assert_eq!(store.fence(&request(1, 1, 5, 10).fence_key()), fence);
    }

    #[test]
    fn the_largest_arguments_in_range_are_accepted() {
        let store = store_in(10);
        let mut largest = request(1, FlushRequest::MAX_SEQ, i64::MAX as u64, 10);
        largest.fence_ttl_ms = FlushRequest::MAX_FENCE_TTL_MS;
        assert_eq!(store.run(&largest).unwrap().outcome, Outcome::Applied);
        let mut longest = request(2, 1, 0, 0);
        longest.interval_ms = FlushRequest::MAX_INTERVAL_MS;
        assert_eq!(store.run(&longest).unwrap().outcome, Outcome::Applied);
        let far = request(3, 1, 0, FlushRequest::MAX_EXPECT);
        assert_eq!(store.run(&far).unwrap().outcome, Outcome::WrongInterval);
    }

    #[test]
    fn a_batch_adds_every_field_of_one_hash_and_brings_back_each_total() {
        let store = store_in(10);
        let key = "{m@0}:10";
        store.run(&batch(1, 1, &[("a", 2), ("b", 3)], 10)).unwrap();
        store.run(&batch(2, 1, &[("b", 4), ("c", 0)], 10)).unwrap();
        assert_eq!(
            store.fields(key),
            [("a".into(), 2), ("b".into(), 7), ("c".into(), 0)]
        );
        store.clock.advance(Duration::from_millis(INTERVAL_MS));
        let reply = store
            .run(&batch(1, 2, &[("c", 1), ("z", 1), ("b", 0)], 11))
            .unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(reply.previous_totals, [Some(0), None, Some(7)]);
        assert_eq!(store.field("{m@0}:11", "z"), Some(1));
    }

    #[test]
    fn a_family_total_stops_at_the_largest_a_counter_refuses_to_pass() {
        let store = store_in(10);
        store
            .run(&batch(1, 1, &[("a", 1), ("b", MAX)], 10))
            .unwrap();
        let reply = store.run(&batch(2, 1, &[("a", 5), ("b", 1)], 10)).unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(store.field("{m@0}:10", "a"), Some(6));
        assert_eq!(store.field("{m@0}:10", "b"), Some(MAX));
        store.run(&request(1, 1, MAX, 10)).unwrap();
        let error = store.run(&request(2, 1, 1, 10)).unwrap_err();
        assert_eq!(error.kind(), StoreErrorKind::Refused);
        assert_eq!(store.total("{m}:10"), Some(MAX));
    }

    #[test]
    fn a_key_twice_in_a_batch_adds_both_amounts() {
        let store = store_in(10);
        store.run(&batch(1, 1, &[("a", 1)], 10)).unwrap();
        let reply = store
            .run(&batch(2, 1, &[("a", 2), ("b", 1), ("a", 3)], 10))
            .unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(store.fields("{m@0}:10"), [("a".into(), 6), ("b".into(), 1)]);
    }

    #[test]
    fn a_counter_key_and_a_family_hash_are_not_mistaken_for_each_other() {
        let store = store_in(10);
        let mut counter = request(1, 1, 1, 10);
        counter.space = KeySpace::partition("", "m", 0);
        counter.entries = vec![crate::Entry::new("k", 1)];
        store.run(&counter).unwrap();
        let mut wrong = request(2, 1, 1, 10);
        wrong.space = KeySpace::partition("", "m", 0);
        wrong.space = KeySpace::counter("", "m@0");
        assert_eq!(
            store.run(&wrong).unwrap_err().kind(),
            StoreErrorKind::Refused
        );
    }
}
