//! A counter's checked settings: its key base and its interval.

use std::sync::Arc;
use std::time::Duration;

use crate::error::ConfigError;
use crate::handle::timing::{Policy, Timing};
use crate::protocol::keys::KeySpace;
use crate::protocol::participant::ParticipantId;
use crate::protocol::request::FlushRequest;

/// How long a fence lives at the least, whatever the interval: long enough that no stray copy
/// of a flush, replayed by a client or held up in the network, can outlive it.
const FENCE_TTL_FLOOR: Duration = Duration::from_secs(10 * 60);

/// Settings that passed every check.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) name: Arc<str>,
    pub(crate) prefix: Arc<str>,
    /// Set for a family, `None` for a counter.
    pub(crate) family: Option<FamilySettings>,
    pub(crate) interval: Duration,
    pub(crate) interval_ms: u64,
    pub(crate) fence_ttl_ms: u64,
    pub(crate) policy: Policy,
}

/// What a family adds to a counter's settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FamilySettings {
    pub(crate) partitions: u32,
    /// A key not looked up for this many intervals, with nothing to send, is evicted.
    pub(crate) evict_after_intervals: u64,
}

/// A family's settings as a builder holds them, before the checks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FamilyChoice {
    pub(crate) partitions: u32,
    pub(crate) max_keys: usize,
    pub(crate) evict_after: Option<Duration>,
}

impl Default for FamilyChoice {
    fn default() -> Self {
        Self {
            partitions: 1,
            max_keys: 100_000,
            evict_after: None,
        }
    }
}

/// The most partitions a family may have.
pub(crate) const MAX_PARTITIONS: u32 = 1 << 16;

/// The longest name of a counter or family, in bytes. Every flush carries the name in each of
/// its keys, five or more of them: a longer one would cost every flush, every interval.
///
/// ```
/// use std::time::Duration;
/// use comcount_core::clock::VirtualClock;
/// use comcount_core::{ConfigError, Counter, MAX_NAME_LEN, MemoryStore};
///
/// let name = "n".repeat(MAX_NAME_LEN + 1);
/// let built = Counter::builder(name, Duration::from_secs(1))
///     .build(MemoryStore::new(), VirtualClock::new());
/// assert!(matches!(built, Err(ConfigError::NameTooLong { len: 257, max: 256 })));
/// ```
pub const MAX_NAME_LEN: usize = 256;

/// The longest prefix of a counter's or family's keys, in bytes, for the same reason as
/// [`MAX_NAME_LEN`].
pub const MAX_PREFIX_LEN: usize = 256;

/// The tick's settings as a builder holds them, before the checks.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PolicyChoice {
    pub(crate) timing: Timing,
    pub(crate) flush_timeout: Option<Duration>,
    pub(crate) resend_window: Option<Duration>,
}

impl Settings {
    /// The keys of `partition` (of the counter itself, when this is not a family).
    pub(crate) fn space(&self, partition: u32) -> KeySpace {
        match self.family {
            Some(_) => KeySpace::partition(&self.prefix, &self.name, partition),
            None => KeySpace::counter(&self.prefix, &self.name),
        }
    }

    /// A flush request of `participant` for `partition` (0 for a counter), with nothing in it
    /// yet.
    pub(crate) fn request(&self, partition: u32, participant: ParticipantId) -> FlushRequest {
        FlushRequest::new(self.space(partition), participant, self.interval_ms)
            .with_fence_ttl_ms(self.fence_ttl_ms)
    }

    /// How long the store's fence keeps a participant's last flush.
    pub(crate) fn fence_ttl(&self) -> Duration {
        Duration::from_millis(self.fence_ttl_ms)
    }

    /// How many partitions flush: 1 for a counter.
    pub(crate) fn partitions(&self) -> u32 {
        self.family.map_or(1, |f| f.partitions)
    }

    /// Whether flushes may go through more than one lane ([`lanes`](crate::engine::policy::lanes)): a
    /// counter's do; a family's partitions keep one loop each, since a lane's flush could
    /// carry a key that another lane evicts meanwhile.
    pub(crate) fn lanes_allowed(&self) -> bool {
        self.family.is_none() && self.policy.timing == Timing::MidInterval
    }

    /// After how many intervals without a lookup an empty key is evicted; never for a counter.
    pub(crate) fn evict_after_intervals(&self) -> Option<u64> {
        self.family.map(|f| f.evict_after_intervals)
    }

    /// Checks a family's own settings on top of these.
    pub(crate) fn with_family(mut self, choice: FamilyChoice) -> Result<Self, ConfigError> {
        if !(1..=MAX_PARTITIONS).contains(&choice.partitions) {
            return Err(ConfigError::Partitions {
                partitions: choice.partitions,
                max: MAX_PARTITIONS,
            });
        }
        if choice.max_keys == 0 {
            return Err(ConfigError::NoKeys);
        }
        // By default a minute, or ten intervals if longer.
        let evict_after = choice
            .evict_after
            .unwrap_or_else(|| (self.interval * 10).max(Duration::from_secs(60)));
        if evict_after < self.interval {
            return Err(ConfigError::EvictAfterTooShort {
                evict_after,
                interval: self.interval,
            });
        }
        let evict_after_intervals = (evict_after.as_millis() / u128::from(self.interval_ms))
            .try_into()
            .unwrap_or(u64::MAX);
        self.family = Some(FamilySettings {
            partitions: choice.partitions,
            evict_after_intervals,
        });
        Ok(self)
    }

    #[cfg(test)]
    pub(crate) fn new(name: &str, prefix: &str, interval: Duration) -> Result<Self, ConfigError> {
        Self::with_policy(name, prefix, interval, PolicyChoice::default())
    }

    pub(crate) fn with_policy(
        name: &str,
        prefix: &str,
        interval: Duration,
        choice: PolicyChoice,
    ) -> Result<Self, ConfigError> {
        if name.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        if name.len() > MAX_NAME_LEN {
            return Err(ConfigError::NameTooLong {
                len: name.len(),
                max: MAX_NAME_LEN,
            });
        }
        if prefix.len() > MAX_PREFIX_LEN {
            return Err(ConfigError::PrefixTooLong {
                len: prefix.len(),
                max: MAX_PREFIX_LEN,
            });
        }
        if name.contains(['{', '}']) {
            return Err(ConfigError::NameBreaksHashTag { name: name.into() });
        }
        if prefix.contains(['{', '}']) {
            return Err(ConfigError::PrefixBreaksHashTag {
                prefix: prefix.into(),
            });
        }
        let interval_ms = interval_millis(interval)?;
        let fence_ttl_ms = (3 * interval_ms).max(FENCE_TTL_FLOOR.as_millis() as u64);
        let fence_ttl = Duration::from_millis(fence_ttl_ms);
        let flush_timeout = choice
            .flush_timeout
            .unwrap_or_else(|| Policy::default_flush_timeout(interval));
        if flush_timeout.is_zero() {
            return Err(ConfigError::FlushTimeoutZero);
        }
        if flush_timeout < MIN_FLUSH_TIMEOUT {
            return Err(ConfigError::FlushTimeoutTooShort {
                timeout: flush_timeout,
                min: MIN_FLUSH_TIMEOUT,
            });
        }
        let resend_window = choice
            .resend_window
            .unwrap_or_else(|| Policy::default_resend_window(fence_ttl));
        if resend_window > fence_ttl / 2 {
            return Err(ConfigError::ResendWindowTooLong {
                window: resend_window,
                fence_ttl,
            });
        }
        Ok(Self {
            name: name.into(),
            prefix: prefix.into(),
            family: None,
            interval,
            interval_ms,
            fence_ttl_ms,
            policy: Policy {
                timing: choice.timing,
                flush_timeout,
                resend_window,
            },
        })
    }
}

/// The shortest interval a counter takes.
///
/// A flush takes a round trip, and the aim needs the round trip's jitter well under a quarter
/// of an interval. On a loopback connection to a busy host, scheduling alone delays a reply by
/// a millisecond or two, and in a datacenter the round trip itself is about that: below 10 ms
/// the interval is mostly round trip, flushes keep landing in the wrong interval, and each
/// miss costs the store a round trip's work for nothing.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The shortest flush timeout a counter takes. Before the first reply has timed the round
/// trip, the timeout alone decides when a copy goes again; one under a round trip on a busy
/// host (a millisecond or two, as for [`MIN_INTERVAL`]) would send a copy on nearly every tick
/// of the timer to a store that is merely slow, for the whole resend window.
pub(crate) const MIN_FLUSH_TIMEOUT: Duration = Duration::from_millis(10);

fn interval_millis(interval: Duration) -> Result<u64, ConfigError> {
    if interval < MIN_INTERVAL {
        return Err(ConfigError::IntervalTooShort { interval });
    }
    // Three intervals must fit the millisecond arithmetic of every store, Lua's doubles
    // included (integers are exact below 2^53).
    if interval > Duration::from_millis(FlushRequest::MAX_INTERVAL_MS) {
        return Err(ConfigError::IntervalTooLong { interval });
    }
    if !interval.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(ConfigError::IntervalNotWholeMillis { interval });
    }
    Ok(interval.as_millis() as u64)
}

/// Refuses a counter's name that a family's partition has too: `name@p`, `p` a partition
/// number, is the hash tag of partition `p` of the family `name`, and the two would share keys.
pub(crate) fn check_counter_name(name: &str) -> Result<(), ConfigError> {
    let partition = name
        .rsplit_once('@')
        .and_then(|(_, tail)| tail.parse::<u32>().ok().filter(|p| p.to_string() == tail));
    match partition {
        Some(partition) if partition < MAX_PARTITIONS => {
            Err(ConfigError::NameOfAPartition { name: name.into() })
        }
        _ => Ok(()),
    }
}

/// How long a total brought by a copy that took `round_trip` stays fresh: two intervals, plus
/// the round trip up to three intervals.
pub(crate) fn stale_after(interval: Duration, round_trip: Duration) -> Duration {
    interval * 2 + round_trip.min(interval * 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_base_wraps_the_name_in_a_hash_tag_after_the_prefix() {
        let s = Settings::new("requests", "svc:", Duration::from_secs(5)).unwrap();
        assert_eq!(s.space(0).base(), "svc:{requests}");
        assert_eq!(s.interval_ms, 5000);
        assert_eq!(s.fence_ttl_ms, 600_000);
        assert_eq!(s.policy.timing, Timing::MidInterval);
        assert_eq!(s.policy.flush_timeout, Duration::from_secs(2));
        assert_eq!(s.policy.resend_window, Duration::from_secs(60));
        let long = Settings::new("r", "", Duration::from_secs(3600)).unwrap();
        assert_eq!(long.fence_ttl_ms, 3 * 3_600_000);
    }

    #[test]
    fn names_and_prefixes_past_their_longest_are_refused() {
        let ms = MIN_INTERVAL;
        let longest = "n".repeat(MAX_NAME_LEN);
        assert!(Settings::new(&longest, &"p".repeat(MAX_PREFIX_LEN), ms).is_ok());
        let error = Settings::new(&format!("{longest}n"), "", ms).unwrap_err();
        assert_eq!(
            error,
            ConfigError::NameTooLong {
                len: MAX_NAME_LEN + 1,
                max: MAX_NAME_LEN
            }
        );
        assert!(
            error.to_string().contains("choose a shorter name"),
            "{error}"
        );
        let prefix = "p".repeat(MAX_PREFIX_LEN + 1);
        let error = Settings::new("n", &prefix, ms).unwrap_err();
        assert_eq!(
            error,
            ConfigError::PrefixTooLong {
                len: MAX_PREFIX_LEN + 1,
                max: MAX_PREFIX_LEN
            }
        );
        assert!(
            error.to_string().contains("choose a shorter prefix"),
            "{error}"
        );
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let ms = MIN_INTERVAL;
        assert_eq!(
            Settings::new("", "", ms).unwrap_err(),
            ConfigError::EmptyName
        );
        assert!(matches!(
            Settings::new("a{b", "", ms).unwrap_err(),
            ConfigError::NameBreaksHashTag { .. }
        ));
        assert!(matches!(
            Settings::new("a", "}", ms).unwrap_err(),
            ConfigError::PrefixBreaksHashTag { .. }
        ));
        assert!(matches!(
            Settings::new("a", "", Duration::ZERO).unwrap_err(),
            ConfigError::IntervalTooShort { .. }
        ));
        assert!(matches!(
            Settings::new("a", "", Duration::from_millis(9)).unwrap_err(),
            ConfigError::IntervalTooShort { .. }
        ));
        assert!(Settings::new("a", "", Duration::from_millis(10)).is_ok());
        assert!(matches!(
            Settings::new("a", "", Duration::from_micros(10_500)).unwrap_err(),
            ConfigError::IntervalNotWholeMillis { .. }
        ));
        assert!(matches!(
            Settings::new("a", "", Duration::from_secs(u64::MAX / 2)).unwrap_err(),
            ConfigError::IntervalTooLong { .. }
        ));
        // Too long first: no rounding to whole milliseconds would make it fit.
        assert!(matches!(
            Settings::new("a", "", Duration::MAX).unwrap_err(),
            ConfigError::IntervalTooLong { .. }
        ));
        let zero_timeout = PolicyChoice {
            flush_timeout: Some(Duration::ZERO),
            ..PolicyChoice::default()
        };
        assert_eq!(
            Settings::with_policy("a", "", ms, zero_timeout).unwrap_err(),
            ConfigError::FlushTimeoutZero
        );
        // A nanosecond would resend on every tick of the timer until the first reply.
        let tiny_timeout = PolicyChoice {
            flush_timeout: Some(Duration::from_nanos(1)),
            ..PolicyChoice::default()
        };
        assert!(matches!(
            Settings::with_policy("a", "", ms, tiny_timeout).unwrap_err(),
            ConfigError::FlushTimeoutTooShort { .. }
        ));
        let long_window = PolicyChoice {
            resend_window: Some(Duration::from_secs(301)),
            ..PolicyChoice::default()
        };
        assert!(matches!(
            Settings::with_policy("a", "", ms, long_window).unwrap_err(),
            ConfigError::ResendWindowTooLong { .. }
        ));
    }

    #[test]
    fn the_limits_themselves_are_accepted() {
        let longest = Duration::from_millis(FlushRequest::MAX_INTERVAL_MS);
        assert_eq!(
            Settings::new("a", "", longest).unwrap().interval_ms,
            FlushRequest::MAX_INTERVAL_MS
        );
        // Half the fence's life (10 minutes for a short interval).
        let half_the_fence = PolicyChoice {
            resend_window: Some(Duration::from_secs(300)),
            ..PolicyChoice::default()
        };
        assert!(Settings::with_policy("a", "", MIN_INTERVAL, half_the_fence).is_ok());
        let shortest_timeout = PolicyChoice {
            flush_timeout: Some(MIN_FLUSH_TIMEOUT),
            ..PolicyChoice::default()
        };
        assert!(Settings::with_policy("a", "", MIN_INTERVAL, shortest_timeout).is_ok());
    }

    /// The error for an interval too long names the limit it has: the longest interval is
    /// about 95,000 years, and one of 100,000 is refused.
    #[test]
    fn the_longest_interval_is_what_its_error_says() {
        let years = |n: u64| Duration::from_secs(n * 365 * 24 * 3600);
        assert!(Settings::new("a", "", years(95_000)).is_ok());
        let error = Settings::new("a", "", years(100_000)).unwrap_err();
        assert!(error.to_string().contains("about 95,000 years"), "{error}");
    }

    /// A counter's name may not be a family's partition's hash tag, `family@p`: the two would
    /// share keys, one holding integers and the other hashes, and each refuse the other's
    /// flushes. Other uses of `@` are free.
    #[test]
    fn a_counter_named_like_a_familys_partition_is_refused() {
        for name in ["jobs@0", "jobs@7", "a@b@65535"] {
            let error = check_counter_name(name).unwrap_err();
            assert_eq!(error, ConfigError::NameOfAPartition { name: name.into() });
            assert!(error.to_string().contains("choose a name"), "{error}");
        }
        assert_eq!(
            KeySpace::counter("", "jobs@0").base(),
            KeySpace::partition("", "jobs", 0).base()
        );
        for name in [
            "jobs",
            "jobs@",
            "jobs@x",
            "jobs@01",
            "jobs@65536",
            "a@b",
            "@",
        ] {
            assert_eq!(check_counter_name(name), Ok(()), "{name}");
        }
        // A counter's builder refuses it; a family's takes it, its partitions are `jobs@0@p`.
        let clock = crate::clock::VirtualClock::new();
        let store = crate::MemoryStore::with_clock(clock.clone());
        let counter =
            crate::Counter::builder("jobs@0", MIN_INTERVAL).build(store.clone(), clock.clone());
        assert!(matches!(counter, Err(ConfigError::NameOfAPartition { .. })));
        assert!(
            crate::Family::builder("jobs@0", MIN_INTERVAL)
                .build(store, clock)
                .is_ok()
        );
    }

    #[test]
    fn an_unused_key_is_kept_a_minute_or_ten_intervals_if_longer() {
        let evict_after = |interval: Duration| {
            Settings::new("a", "", interval)
                .unwrap()
                .with_family(FamilyChoice::default())
                .unwrap()
                .evict_after_intervals()
        };
        assert_eq!(evict_after(Duration::from_secs(1)), Some(60));
        assert_eq!(evict_after(Duration::from_secs(6)), Some(10));
        assert_eq!(evict_after(Duration::from_secs(30)), Some(10));
    }
}
