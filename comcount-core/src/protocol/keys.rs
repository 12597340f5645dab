//! Where a counter's and a family's numbers live in a store: the one place key names are made.
//!
//! A counter named `name` with prefix `prefix` keeps the total of interval `n` under
//! `prefix{name}:n`, an integer, and each participant's fence under `prefix{name}:f:<id>`.
//!
//! A family keeps each of its partitions apart, under its own hash tag: partition `p` of the
//! family `name` keeps interval `n` in one hash, `prefix{name@p}:n`, with a field per family
//! key holding its total as an integer; each participant's fence is `prefix{name@p}:f:<id>`.
//! A key belongs to the partition [`partition_of`] gives, which every participant computes
//! alike.
//!
//! Every key expires by itself: an interval's after three intervals, a fence after its life
//! ([`FlushRequest::fence_ttl_ms`](crate::FlushRequest::fence_ttl_ms)). A server must never
//! evict a fence while the interval key it guards survives: a resent copy of a flush applied
//! before would then be applied again. Only `maxmemory-policy noeviction` promises that;
//! [`eviction_caveat`] tells a store what to warn of.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use crate::protocol::participant::ParticipantId;

/// How a key space holds its totals.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum Layout {
    /// One integer per interval: a single counter's total.
    Counter,
    /// One hash per interval, with a field per key holding its total: one partition of a
    /// family.
    Family,
}

/// The keys of one counter, or of one partition of a family, all under one hash tag so that
/// a Redis Cluster keeps them on one node.
///
/// ```
/// use comcount_core::{KeySpace, ParticipantId};
///
/// let counter = KeySpace::counter("app:", "requests");
/// assert_eq!(counter.interval(7), "app:{requests}:7");
/// assert_eq!(counter.fence(ParticipantId::from_u64(1)), "app:{requests}:f:0000000000000001");
///
/// let partition = KeySpace::partition("app:", "tenants", 3);
/// assert_eq!(partition.interval(7), "app:{tenants@3}:7");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KeySpace {
    base: Arc<str>,
    layout: Layout,
}

impl KeySpace {
    /// The keys of the counter `name`: `prefix{name}:…`.
    pub fn counter(prefix: &str, name: &str) -> Self {
        Self {
            base: format!("{prefix}{{{name}}}").into(),
            layout: Layout::Counter,
        }
    }

    /// The keys of partition `partition` of the family `name`: `prefix{name@partition}:…`.
    pub fn partition(prefix: &str, name: &str, partition: u32) -> Self {
        Self {
            base: format!("{prefix}{{{name}@{partition}}}").into(),
            layout: Layout::Family,
        }
    }

    /// What every key of the space starts with: `prefix{name}` or `prefix{name@p}`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// How the space holds its totals.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The key that holds the total (or a family partition's hash) of interval `n`: `base:n`.
    pub fn interval(&self, n: u64) -> String {
        let mut key = String::with_capacity(self.longest_key_len());
        self.write_interval(n, &mut key);
        key
    }

    /// The key of `participant`'s fence: `base:f:<id in 16 hex digits>`.
    pub fn fence(&self, participant: ParticipantId) -> String {
        let mut key = String::with_capacity(self.longest_key_len());
        self.write_fence(participant, &mut key);
        key
    }

    /// Writes [`interval`](Self::interval)`(n)` into `key`, in place of what it held.
    pub(crate) fn write_interval(&self, n: u64, key: &mut String) {
        key.clear();
        key.push_str(&self.base);
        let _ = write!(key, ":{n}");
    }

    /// Writes [`fence`](Self::fence)`(participant)` into `key`, in place of what it held.
    pub(crate) fn write_fence(&self, participant: ParticipantId, key: &mut String) {
        key.clear();
        key.push_str(&self.base);
        let _ = write!(key, ":f:{participant}");
    }

    /// The length of the longest key of the space: an interval key with a 20-digit number.
    pub(crate) fn longest_key_len(&self) -> usize {
        self.base.len() + ":".len() + 20
    }
}

impl fmt::Debug for KeySpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeySpace({:?}, {})", self.layout, self.base)
    }
}

/// The partition, out of `partitions`, that `key` belongs to: the 64-bit FNV-1a hash of its
/// UTF-8 bytes, modulo `partitions`. Stable across processes, platforms and versions, since
/// every participant of a family must agree on it.
///
/// # Panics
///
/// If `partitions` is 0.
///
/// ```
/// use comcount_core::keys::partition_of;
///
/// assert_eq!(partition_of("tenant-42", 1), 0);
/// assert_eq!(partition_of("tenant-42", 16), partition_of("tenant-42", 16));
/// ```
pub fn partition_of(key: &str, partitions: u32) -> u32 {
    assert!(partitions > 0, "a family has at least one partition");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % u64::from(partitions)) as u32
}

/// What to warn of, if anything, for a Redis server whose `INFO memory` reply is `info`: every
/// `maxmemory-policy` but `noeviction` may evict a fence under memory pressure, whether it
/// picks among all keys (`allkeys-*`) or among those with an expiry (`volatile-*`, which every
/// key of a counter has), while the interval key it guards survives. `None` for `noeviction`,
/// and for a reply that names no policy.
///
/// ```
/// use comcount_core::keys::eviction_caveat;
///
/// assert_eq!(eviction_caveat("# Memory\r\nmaxmemory_policy:noeviction\r\n"), None);
/// let caveat = eviction_caveat("maxmemory_policy:volatile-lru\r\n").unwrap();
/// assert!(caveat.contains("volatile-lru"));
/// ```
pub fn eviction_caveat(info: &str) -> Option<String> {
    let policy = info
        .lines()
        .find_map(|line| line.strip_prefix("maxmemory_policy:"))?
        .trim();
    (policy != "noeviction").then(|| {
        format!(
            "the server's maxmemory-policy is {policy}: under memory pressure it may evict a \
             participant's fence while the interval it guards survives, and a resent copy of a \
             flush applied before would then be counted again; set maxmemory-policy noeviction"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_keys_are_the_documented_names() {
        let space = KeySpace::counter("", "c");
        assert_eq!(space.base(), "{c}");
        assert_eq!(space.interval(0), "{c}:0");
        assert_eq!(
            space.fence(ParticipantId::from_u64(0xab)),
            "{c}:f:00000000000000ab"
        );
        assert_eq!(space.layout(), Layout::Counter);
    }

    #[test]
    fn partitions_have_their_own_hash_tag() {
        let a = KeySpace::partition("p:", "f", 0);
        let b = KeySpace::partition("p:", "f", 1);
        assert_eq!(a.interval(5), "p:{f@0}:5");
        assert_eq!(b.interval(5), "p:{f@1}:5");
        assert_eq!(a.layout(), Layout::Family);
    }

    #[test]
    fn the_partition_hash_is_fnv_1a() {
        // Reference values of 64-bit FNV-1a.
        let fnv = |key: &str| {
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
            for b in key.bytes() {
                hash = (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
            hash
        };
        assert_eq!(fnv(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            partition_of("a", 1000),
            (0xaf63_dc4c_8601_ec8c_u64 % 1000) as u32
        );
        let spread: std::collections::HashSet<u32> = (0..1000)
            .map(|i| partition_of(&format!("k{i}"), 8))
            .collect();
        assert_eq!(spread.len(), 8);
    }
}
