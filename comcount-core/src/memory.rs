//! The in-process store: the flush protocol on a map, on a clock of its own.

use std::collections::HashMap;
use std::fmt;
use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::diagnostics::Reporter;
use crate::error::StoreError;
use crate::store::{FlushReply, FlushRequest, Outcome, Store};
use crate::tally::MAX;

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

#[derive(Clone, Copy, Debug)]
enum Value {
    Total(u64),
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

    /// The total held at `key`, if it exists and has not expired.
    pub fn total(&self, key: &str) -> Option<u64> {
        match self.live(key)?.value {
            Value::Total(total) => Some(total),
            Value::Fence { .. } => None,
        }
    }

    /// The sequence number and interval of the last flush a fence at `key` holds.
    pub fn fence(&self, key: &str) -> Option<(u64, u64)> {
        match self.live(key)?.value {
            Value::Fence { seq, interval } => Some((seq, interval)),
            Value::Total(_) => None,
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

    /// The protocol's steps, every check before the first write.
    fn run(&self, request: &FlushRequest) -> Result<FlushReply, StoreError> {
        let now = self.clock.now();
        let interval_ms = request.interval_ms.max(1);
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let n = now_ms / interval_ms;
        let phase = Duration::from_millis(now_ms % interval_ms);
        let reply = |outcome, previous_total, counted_in| FlushReply {
            outcome,
            interval: n,
            phase,
            previous_total,
            counted_in,
        };

        let mut state = self.lock();
        state.flushes += 1;
        if state.flushes.is_multiple_of(SWEEP_EVERY) {
            state.values.retain(|_, e| e.expires_at > now);
        }
        let live = |key: &str| state.values.get(key).filter(|e| e.expires_at > now);

        if n != request.expect {
            return Ok(reply(Outcome::WrongInterval, None, None));
        }
        let previous_total = match n.checked_sub(1).map(|p| request.interval_key(p)) {
            Some(key) => match live(&key).map(|e| e.value) {
                Some(Value::Total(total)) => Some(total),
                Some(Value::Fence { .. }) => return Err(wrong_type(&key)),
                None => None,
            },
            None => None,
        };
        let fence_key = request.fence_key();
        match live(&fence_key).map(|e| e.value) {
            Some(Value::Fence { seq, interval }) if request.seq == seq => {
                return Ok(reply(Outcome::Duplicate, previous_total, Some(interval)));
            }
            Some(Value::Fence { seq, .. }) if request.seq < seq => {
                return Ok(reply(Outcome::Stale, previous_total, None));
            }
            Some(Value::Fence { interval, .. }) if interval >= n => {
                return Ok(reply(Outcome::Fenced, previous_total, None));
            }
            Some(Value::Total(_)) => return Err(wrong_type(&fence_key)),
            _ => {}
        }
        let key = request.expected_key();
        let before = match live(&key).map(|e| e.value) {
            Some(Value::Total(total)) => total,
            Some(Value::Fence { .. }) => return Err(wrong_type(&key)),
            None => 0,
        };
        let after = before
            .checked_add(request.amount)
            .filter(|t| *t <= MAX)
            .ok_or_else(|| StoreError::refused("increment or decrement would overflow"))?;

        let interval_ttl = Duration::from_millis(interval_ms.saturating_mul(3));
        state.values.insert(
            key,
            Entry {
                value: Value::Total(after),
                expires_at: now + interval_ttl,
            },
        );
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
        Ok(reply(Outcome::Applied, previous_total, Some(n)))
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
