//! What can go wrong while reading, each case saying what to do about it.

use std::fmt;
use std::time::Duration;

/// Why a read, or the connection it needs, failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The URL is not one redis-rs takes.
    BadUrl {
        /// The URL as given.
        url: String,
        /// What redis-rs said of it.
        reason: String,
    },
    /// No connection to the server: it refused, did not answer in time, or turned the
    /// credentials away.
    Unreachable {
        /// The URL, or the cluster's URLs, connected to.
        url: String,
        /// What redis-rs said.
        reason: String,
    },
    /// A name or prefix that no counter can have: empty or too long, or with `{` or `}`.
    BadName {
        /// What is wrong, and with what.
        reason: String,
    },
    /// An interval no counter can have: zero, or not a whole number of milliseconds.
    BadInterval {
        /// The interval given.
        interval: Duration,
    },
    /// A family's number of partitions outside `1..=65_536`.
    BadPartitions {
        /// The number given.
        partitions: u32,
    },
    /// A number of intervals to read outside `1..=`[`MAX_INTERVALS`](crate::MAX_INTERVALS).
    BadIntervals {
        /// The number given.
        intervals: u32,
    },
    /// A command the server answered with an error, or did not answer in time.
    Command {
        /// The command, and the key it was sent for.
        command: String,
        /// What redis-rs said.
        source: redis::RedisError,
    },
    /// A key under the counter's hash tag holds something that no store writes there.
    Malformed {
        /// The key.
        key: String,
        /// What it holds, as read.
        found: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadUrl { url, reason } => write!(
                f,
                "{url:?} is not a Redis URL ({reason}): write it as \
                 redis://[[user]:password@]host[:port][/db]"
            ),
            Error::Unreachable { url, reason } => write!(
                f,
                "cannot reach Redis at {url} ({reason}): check the host and port, that the \
                 server is up, and the user and password in the URL"
            ),
            Error::BadName { reason } => f.write_str(reason),
            Error::BadInterval { interval } => write!(
                f,
                "the interval {interval:?} is not one a counter can have: give the counter's \
                 interval, a whole number of milliseconds of at least 1"
            ),
            Error::BadPartitions { partitions } => write!(
                f,
                "a family has 1 to 65536 partitions, not {partitions}: give the number its \
                 participants are built with"
            ),
            Error::BadIntervals { intervals } => write!(
                f,
                "{intervals} intervals: read 1 to {} (interval keys expire three intervals \
                 after their last flush)",
                crate::MAX_INTERVALS
            ),
            Error::Command { command, source } => {
                write!(f, "{command} failed: {source}")?;
                if source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) {
                    f.write_str(
                        "; the user needs the keys under the prefix and the commands \
                         +time +get +hget +hgetall +pttl +scan",
                    )?;
                }
                Ok(())
            }
            Error::Malformed { key, found } => write!(
                f,
                "{key} holds {found:?}, which no comcount store writes: is the prefix shared \
                 with other data, or the name a family's (or a counter's)?"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Command { source, .. } => Some(source),
            _ => None,
        }
    }
}
