//! The errors of this crate: a counter built wrong, an amount that cannot be counted, and a
//! flush that did not go through.

use std::error::Error;
use std::fmt;
use std::time::Duration;

/// A counter's settings that cannot work. Returned by [`Builder::build`](crate::builder::Builder::build).
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// The counter's name is empty.
    EmptyName,
    /// The name holds `{` or `}`, which would break the `{name}` hash tag.
    NameBreaksHashTag {
        /// The name given.
        name: String,
    },
    /// A counter's name ends in `@` and a partition number: the hash tag of that partition of
    /// the family named by the rest, whose keys it would share.
    NameOfAPartition {
        /// The name given.
        name: String,
    },
    /// The prefix holds `{` or `}`, which would move the hash tag into the prefix.
    PrefixBreaksHashTag {
        /// The prefix given.
        prefix: String,
    },
    /// The name is longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes: every flush
    /// carries it in each of its keys.
    NameTooLong {
        /// The name's length in bytes.
        len: usize,
        /// The most it may be.
        max: usize,
    },
    /// The prefix is longer than [`MAX_PREFIX_LEN`](crate::MAX_PREFIX_LEN) bytes: every
    /// flush carries it in each of its keys.
    PrefixTooLong {
        /// The prefix's length in bytes.
        len: usize,
        /// The most it may be.
        max: usize,
    },
    /// The interval is shorter than 10 ms, too close to a round trip to the store.
    IntervalTooShort {
        /// The interval given.
        interval: Duration,
    },
    /// The interval is not a whole number of milliseconds.
    IntervalNotWholeMillis {
        /// The interval given.
        interval: Duration,
    },
    /// The interval is longer than 2^53 / 3 ms (about 95,000 years): the flush script keeps
    /// three intervals in a number that Lua holds exactly only below 2^53.
    IntervalTooLong {
        /// The interval given.
        interval: Duration,
    },
    /// The flush timeout is zero.
    FlushTimeoutZero,
    /// The flush timeout is above zero but shorter than the least a counter takes.
    FlushTimeoutTooShort {
        /// The timeout given.
        timeout: Duration,
        /// The least a counter takes.
        min: Duration,
    },
    /// The resend window would let a resent flush outlive half the fence's life.
    ResendWindowTooLong {
        /// The window given.
        window: Duration,
        /// How long the fence lives.
        fence_ttl: Duration,
    },
    /// A family's number of partitions is 0 or above the most allowed.
    Partitions {
        /// The number given.
        partitions: u32,
        /// The most allowed.
        max: u32,
    },
    /// A family's key cap is 0.
    NoKeys,
    /// A family would evict keys sooner than one interval after their last use.
    EvictAfterTooShort {
        /// The time given.
        evict_after: Duration,
        /// The interval.
        interval: Duration,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::EmptyName => f.write_str(
                "the counter's name is empty: give it a name such as \"requests\"; \
                 participants that share a name share a total",
            ),
            ConfigError::NameBreaksHashTag { name } => write!(
                f,
                "the counter name {name:?} contains '{{' or '}}', which would break the \
                 {{name}} hash tag that keeps the counter's keys in one cluster slot: \
                 choose a name without braces"
            ),
            ConfigError::NameOfAPartition { name } => {
                let (family, partition) = name.rsplit_once('@').unwrap_or((name, ""));
                write!(
                    f,
                    "the counter name {name:?} ends like a family's partition: it is the \
                     hash tag of partition {partition} of a family named {family:?}, whose \
                     keys it would share: choose a name without '@' and a number at its end, \
                     e.g. {:?}",
                    format!("{family}-{partition}")
                )
            }
            ConfigError::PrefixBreaksHashTag { prefix } => write!(
                f,
                "the prefix {prefix:?} contains '{{' or '}}', which would make Redis Cluster \
                 hash the prefix instead of the counter's name: choose a prefix without braces"
            ),
            ConfigError::NameTooLong { len, max } => write!(
                f,
                "the counter name is {len} bytes long, more than {max}: every flush carries it \
                 in each of its keys; choose a shorter name, or a hash of a long one"
            ),
            ConfigError::PrefixTooLong { len, max } => write!(
                f,
                "the prefix is {len} bytes long, more than {max}: every flush carries it in \
                 each of its keys; choose a shorter prefix"
            ),
            ConfigError::IntervalTooShort { interval } => write!(
                f,
                "the interval {interval:?} is shorter than 10 ms: a flush takes a round trip \
                 to the store, and below 10 ms the round trip and its jitter take most of the \
                 interval, so flushes keep missing it; use at least Duration::from_millis(10) \
                 (intervals far above the round trip count best)"
            ),
            ConfigError::IntervalNotWholeMillis { interval } => write!(
                f,
                "the interval {interval:?} is not a whole number of milliseconds: the store \
                 counts in whole milliseconds, so round it, e.g. Duration::from_millis({})",
                interval.as_millis()
            ),
            ConfigError::IntervalTooLong { interval } => write!(
                f,
                "the interval {interval:?} is too long to express three of them in \
                 milliseconds exactly: use an interval of at most 2^53 / 3 ms, about 95,000 \
                 years"
            ),
            ConfigError::FlushTimeoutTooShort { timeout, min } => write!(
                f,
                "the flush timeout {timeout:?} is shorter than {min:?}: until a reply has \
                 timed the round trip, a copy would go again on nearly every tick of the \
                 timer; give the store at least a few round trips, e.g. \
                 Duration::from_millis(100)"
            ),
            ConfigError::FlushTimeoutZero => f.write_str(
                "the flush timeout is zero, so every flush would time out: give the store \
                 at least a few round trips, e.g. Duration::from_millis(100)",
            ),
            ConfigError::ResendWindowTooLong { window, fence_ttl } => write!(
                f,
                "the resend window {window:?} is longer than half the fence's life \
                 ({fence_ttl:?}): a resent flush must never outlive the fence that stops it \
                 counting twice, so use a window of at most {:?}",
                *fence_ttl / 2
            ),
            ConfigError::Partitions { partitions, max } => write!(
                f,
                "a family needs 1 to {max} partitions, not {partitions}: take about one \
                 partition per 700 keys counted at once, so that a flush stays well under the \
                 1000 keys it may carry"
            ),
            ConfigError::NoKeys => f.write_str(
                "the family's key cap is 0, so it could count nothing: set max_keys to the \
                 most keys you expect at once",
            ),
            ConfigError::EvictAfterTooShort {
                evict_after,
                interval,
            } => write!(
                f,
                "keys would be evicted {evict_after:?} after their last use, sooner than one \
                 interval ({interval:?}): keep them at least an interval, better several"
            ),
        }
    }
}

impl Error for ConfigError {}

/// An amount that [`Counter::try_increment`](crate::Counter::try_increment) cannot count.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum AmountError {
    /// The amount alone is more than the store can hold (`i64::MAX`).
    TooLarge {
        /// The amount given.
        amount: u64,
    },
    /// Adding the amount would take the unsent buffer past `i64::MAX`.
    BufferFull {
        /// The amount given.
        amount: u64,
    },
}

impl fmt::Display for AmountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AmountError::TooLarge { amount } => write!(
                f,
                "the amount {amount} is more than the store can hold (i64::MAX = {}): \
                 count in a coarser unit",
                i64::MAX
            ),
            AmountError::BufferFull { amount } => write!(
                f,
                "adding {amount} would take this interval's buffer past i64::MAX, the most \
                 the store can hold: count in a coarser unit or use a shorter interval"
            ),
        }
    }
}

impl Error for AmountError {}

/// A key, or an amount for it, that a [`Family`](crate::Family) cannot count. Nothing is
/// counted when one is returned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty.
    Empty,
    /// The key is longer than the most a flush carries.
    TooLong {
        /// The key's length in bytes.
        len: usize,
        /// The longest key allowed, in bytes.
        max: usize,
    },
    /// The family holds as many keys as its cap allows, and this one is new.
    Full {
        /// The family's key cap.
        max_keys: usize,
    },
    /// The amount cannot be counted.
    Amount(AmountError),
}

impl From<AmountError> for KeyError {
    fn from(error: AmountError) -> Self {
        KeyError::Amount(error)
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Empty => f.write_str(
                "the key is empty: give every key of a family a name, such as a tenant's id",
            ),
            KeyError::TooLong { len, max } => write!(
                f,
                "the key is {len} bytes long, more than the {max} a flush carries: use a \
                 shorter id, or a hash of it"
            ),
            KeyError::Full { max_keys } => write!(
                f,
                "the family already holds its cap of {max_keys} keys, so a new one is not \
                 counted: raise max_keys, or evict idle keys sooner with evict_after"
            ),
            KeyError::Amount(error) => error.fmt(f),
        }
    }
}

impl Error for KeyError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            KeyError::Amount(error) => Some(error),
            _ => None,
        }
    }
}

/// How a flush failed, which decides what the counter may do with its amount.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// No reply came (connection lost, timed out): the flush may or may not have been applied.
    Unanswered,
    /// The store answered with an error before writing anything: the flush was not applied.
    Refused,
    /// The store turned the flush away for a passing reason (a cluster slot moving or failing
    /// over, a server loading its data, or refusing writes for now: a primary turned replica,
    /// too few replicas, its memory full): nothing was written, and the same flush may be sent
    /// again.
    Unavailable,
    /// The store answered with something that is not a flush reply: whether it was applied is
    /// unknown.
    Malformed,
}

/// A flush that did not produce a [`FlushReply`](crate::FlushReply).
///
/// It never reaches the caller of [`Counter::increment`](crate::Counter::increment): the counter
/// reports it through its diagnostics as `flush failed`.
#[derive(Debug)]
pub struct StoreError {
    kind: StoreErrorKind,
    source: Box<dyn Error + Send + Sync + 'static>,
    resent_unseen: bool,
}

impl StoreError {
    /// A flush that got no reply, caused by `source`.
    pub fn unanswered(source: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        Self::new(StoreErrorKind::Unanswered, source)
    }

    /// A flush the store refused before writing anything, caused by `source`.
    pub fn refused(source: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        Self::new(StoreErrorKind::Refused, source)
    }

    /// A flush the store refused because the user it connects as lacks a permission the flush
    /// needs, caused by `source`, the server's own words: on Redis, an ACL's `NOPERM` for
    /// `EVALSHA`, `SCRIPT LOAD` or the flush's keys, or the error a script gets for a command
    /// the ACL denies it. Of kind [`Refused`](StoreErrorKind::Refused), nothing written; its
    /// text says what to grant.
    ///
    /// ```
    /// use comcount_core::{StoreError, StoreErrorKind};
    ///
    /// let error = StoreError::lacks_permission(
    ///     "NOPERM User app has no permissions to run the 'evalsha' command",
    /// );
    /// assert_eq!(error.kind(), StoreErrorKind::Refused);
    /// let text = error.to_string();
    /// assert!(text.contains("'evalsha'"), "{text}");
    /// assert!(text.contains("lacks a permission the flush needs"), "{text}");
    /// ```
    pub fn lacks_permission(source: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        Self::refused(MissingPermission(source.into()))
    }

    /// A flush the store turned away for now, caused by `source`: see
    /// [`StoreErrorKind::Unavailable`].
    pub fn unavailable(source: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        Self::new(StoreErrorKind::Unavailable, source)
    }

    /// A reply that could not be read as a flush reply.
    pub fn malformed(source: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        Self::new(StoreErrorKind::Malformed, source)
    }

    /// An error of the given kind.
    pub fn new(
        kind: StoreErrorKind,
        source: impl Into<Box<dyn Error + Send + Sync + 'static>>,
    ) -> Self {
        Self {
            kind,
            source: source.into(),
            resent_unseen: false,
        }
    }

    /// The same error, from a client that may have sent the flush more than once on its own
    /// before it gave up: redis-rs's cluster client, for one, sends a command again after a
    /// lost connection. An earlier attempt may then have been applied, whatever the last one
    /// answered, so the error [may have applied](Self::may_have_applied) the flush. A refusal
    /// so marked is still not sent again, and its amount is reported unsettled, never dropped.
    ///
    /// ```
    /// use comcount_core::StoreError;
    ///
    /// let plain = StoreError::refused("ERR comcount: fence {c}:f:1 is not a fence");
    /// assert!(!plain.may_have_applied());
    /// let retried = StoreError::refused("ERR comcount: fence {c}:f:1 is not a fence")
    ///     .after_unseen_resends();
    /// assert!(retried.may_have_applied());
    /// assert!(!retried.worth_resending());
    /// ```
    pub fn after_unseen_resends(mut self) -> Self {
        self.resent_unseen = true;
        self
    }

    /// How the flush failed.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Whether the store may have applied the flush despite the error: no reply, a reply
    /// cut short, or any error from a client that may have sent the flush before on its own
    /// ([`after_unseen_resends`](Self::after_unseen_resends)).
    pub fn may_have_applied(&self) -> bool {
        self.resent_unseen
            || matches!(
                self.kind,
                StoreErrorKind::Unanswered | StoreErrorKind::Malformed
            )
    }

    /// Whether sending the same flush again may succeed: anything but a refusal. A flush that
    /// got no reply, or a reply cut short, may have been applied (the fence makes a second
    /// copy a duplicate); one turned away for a passing reason was not.
    pub fn worth_resending(&self) -> bool {
        self.kind != StoreErrorKind::Refused
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            StoreErrorKind::Unanswered => write!(
                f,
                "flush got no reply ({}); check that the store is reachable",
                self.source
            ),
            StoreErrorKind::Refused if self.resent_unseen => write!(
                f,
                "store refused the flush ({}) after the client had sent it again on its own, \
                 so an earlier attempt may have been applied; check the store's state and \
                 permissions",
                self.source
            ),
            StoreErrorKind::Refused => write!(
                f,
                "store refused the flush, nothing was written ({}); check the store's state \
                 and permissions",
                self.source
            ),
            StoreErrorKind::Unavailable => write!(
                f,
                "store turned the flush away for now ({}); if it lasts, check the store's \
                 health: a failover, a slot moving, a long script",
                self.source
            ),
            StoreErrorKind::Malformed => write!(
                f,
                "store gave a reply that is not a flush reply ({}); check that the key prefix \
                 is not used by anything else",
                self.source
            ),
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

/// What a store's user lacks for a flush (see [`StoreError::lacks_permission`]): the server's
/// words, which name the command or say it is a key, and what to grant.
#[derive(Debug)]
struct MissingPermission(Box<dyn Error + Send + Sync + 'static>);

/// The commands the flush script calls, which a Redis ACL must grant the store's user as it
/// grants `EVALSHA` and `SCRIPT LOAD`.
pub(crate) const SCRIPT_COMMANDS: &str = "TIME, GET, SET, INCRBY and PEXPIRE; for a family also HMGET, \
                               HSET and HDEL";

impl fmt::Display for MissingPermission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the Redis user lacks a permission the flush needs: {}; grant it EVALSHA, SCRIPT \
             LOAD and the commands the flush script calls ({SCRIPT_COMMANDS}) on the counter's \
             keys, as the README's ACL notes show (ACL LOG on the server names what it refused)",
            self.0
        )
    }
}

impl Error for MissingPermission {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.0)
    }
}

/// A flush none of whose copies answered.
#[derive(Debug)]
pub(crate) struct NoReply;

impl fmt::Display for NoReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "no copy of the flush was answered before it was given up (the store may be \
             overloaded), so whether it was counted is unknown",
        )
    }
}

impl Error for NoReply {}

/// A flush whose copies kept landing in intervals they could not be added to.
#[derive(Debug)]
pub(crate) struct NeverLanded;

impl fmt::Display for NeverLanded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the flush kept arriving in another interval than the store's clock was in, and a \
             copy replayed by the client may still land; check that the interval is well \
             above the round trip to the store",
        )
    }
}

impl Error for NeverLanded {}

/// Why a flush still in the air was left unsettled.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Abandoned {
    /// The counter was closed.
    ClosedInFlight,
    /// The background task was dropped before it ended.
    DroppedInFlight,
}

impl fmt::Display for Abandoned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Abandoned::ClosedInFlight => {
                "the counter was closed while the flush was in the store's hands, so whether \
                 it was counted is unknown"
            }
            Abandoned::DroppedInFlight => {
                "the counter's background task was dropped (its runtime shut down, or a panic \
                 unwound through it) while the flush was in the store's hands, so whether it \
                 was counted is unknown"
            }
        })
    }
}

impl Error for Abandoned {}

/// A flush the store found older than one it already applied from this participant: two live
/// participants share an id.
#[derive(Debug)]
pub(crate) struct StaleFlush;

impl fmt::Display for StaleFlush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the store already applied a later flush under this participant id: give every \
             live participant its own id, and keep the wall clock of one restarting under a \
             fixed id from going back",
        )
    }
}

impl Error for StaleFlush {}

/// The store's fence held this flush's number from another flush, counted in an interval none
/// of this one's copies could reach.
#[derive(Debug)]
pub(crate) struct NumberTaken;

impl fmt::Display for NumberTaken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the store answered that a flush with this number was already applied, in an \
             interval this flush could not reach: another run under this participant id used \
             the number (a restart whose wall clock went back, or two live participants with \
             one id); give every live participant its own id, and keep the wall clock of one \
             restarting under a fixed id from going back",
        )
    }
}

impl Error for NumberTaken {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_permission_is_refused_with_the_servers_words_and_what_to_grant() {
        let server = "ERR The user executing the script can't run this command or subcommand";
        let error = StoreError::lacks_permission(server);
        assert_eq!(error.kind(), StoreErrorKind::Refused);
        assert!(!error.worth_resending());
        let text = error.to_string();
        for part in [
            server,
            "lacks a permission",
            "grant it EVALSHA",
            "INCRBY",
            "ACL",
        ] {
            assert!(text.contains(part), "{part:?} missing from {text}");
        }
        let cause = error
            .source()
            .and_then(Error::source)
            .map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some(server));
    }
}
