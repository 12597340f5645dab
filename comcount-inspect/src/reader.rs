//! The reader: what Redis holds for a counter or a family, read through any redis-rs
//! connection.

#[cfg(feature = "cluster")]
use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use comcount_core::keys::partition_of;
use comcount_core::{KeySpace, MAX_NAME_LEN, MAX_PREFIX_LEN, ParticipantId};
use redis::aio::ConnectionLike;
use redis::{Cmd, Value};

use crate::error::Error;
use crate::report::{
    CounterReport, FamilyInterval, FamilyKeyReport, FamilyReport, IntervalTotal, KeyTotals,
    ParticipantFence, ServerTime, Totals,
};

/// The most intervals a reader reads back. Interval keys expire three intervals after their
/// last flush, so more than a few find nothing; this only bounds the work asked of Redis.
pub const MAX_INTERVALS: u32 = 1_000;

/// The intervals a reader reads unless told otherwise: the open one and the two before, all
/// still readable (an interval's key lives for at least two intervals after it ends).
pub const DEFAULT_INTERVALS: u32 = 3;

/// The most partitions a family has.
const MAX_PARTITIONS: u32 = 1 << 16;

/// How many keys each `SCAN` call looks at.
const SCAN_COUNT: u32 = 1_000;

/// How many commands one pipeline carries to a single server.
const PIPELINE_COMMANDS: usize = 1_000;

/// Reads the keys of counters and families from Redis: the totals of the last intervals, by
/// the server's clock, and the participants' fences.
///
/// It reads with `TIME`, `GET`, `HGET`, `HGETALL`, `PTTL` and `SCAN`, and writes nothing.
/// Each report starts from the server's `TIME`, so the interval numbers are the ones the flush
/// script uses.
///
/// The connection may be any redis-rs [`ConnectionLike`]: a `MultiplexedConnection` (see
/// [`connect`](crate::connect)), a `ConnectionManager`, or with the feature `cluster` a
/// `redis::cluster_async::ClusterConnection` (see `connect_cluster`).
/// Fences are found with `SCAN`, which lists the keys of one server: on a cluster connection
/// the reader sends it, and `TIME`, to the node that holds the key space's slot. Any other
/// connection must lead to the one server that holds the keys, a standalone server or the
/// primary (a replica may lag behind it).
///
/// Finding the fences walks every key of that server (`SCAN MATCH`, 1,000 keys a call): on a
/// server with millions of keys it takes a round trip per thousand of them. A family's
/// partitions are found in one walk on a single server, in one walk per partition on a cluster.
pub struct Reader<C> {
    connection: C,
    prefix: String,
    interval_ms: u64,
    intervals: u32,
}

impl<C: ConnectionLike + Send + 'static> Reader<C> {
    /// A reader of the counters and families with the key prefix `prefix` (`""` for none) and
    /// the interval `interval`, which must be the one they were built with: it numbers the
    /// intervals. It reads the [`DEFAULT_INTERVALS`] newest intervals.
    ///
    /// # Errors
    ///
    /// [`Error::BadName`] for a prefix no counter can have (over
    /// [`MAX_PREFIX_LEN`](comcount_core::MAX_PREFIX_LEN) bytes, or with `{` or `}`), and
    /// [`Error::BadInterval`] for an interval of zero or that is not whole milliseconds.
    pub fn new(connection: C, prefix: &str, interval: Duration) -> Result<Self, Error> {
        check_prefix(prefix)?;
        let interval_ms = u64::try_from(interval.as_millis())
            .ok()
            .filter(|ms| *ms > 0 && interval.subsec_nanos().is_multiple_of(1_000_000))
            .ok_or(Error::BadInterval { interval })?;
        Ok(Self {
            connection,
            prefix: prefix.to_owned(),
            interval_ms,
            intervals: DEFAULT_INTERVALS,
        })
    }

    /// Reads the `intervals` newest intervals: the open one and the `intervals - 1` before.
    ///
    /// # Errors
    ///
    /// [`Error::BadIntervals`] for 0, or more than [`MAX_INTERVALS`].
    pub fn intervals(mut self, intervals: u32) -> Result<Self, Error> {
        if !(1..=MAX_INTERVALS).contains(&intervals) {
            return Err(Error::BadIntervals { intervals });
        }
        self.intervals = intervals;
        Ok(self)
    }

    /// The connection it reads through.
    pub fn connection(&self) -> &C {
        &self.connection
    }

    /// The connection it reads through, and the reader gone.
    pub fn into_connection(self) -> C {
        self.connection
    }

    /// The server's clock, and the interval it is in. On a cluster, any node's clock.
    ///
    /// # Errors
    ///
    /// [`Error::Command`] when `TIME` fails.
    pub async fn server_time(&mut self) -> Result<ServerTime, Error> {
        self.time(None).await
    }

    /// What Redis holds for the counter `name`: the totals of the last intervals and the
    /// participants' fences.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), comcount_inspect::Error> {
    /// use std::time::Duration;
    /// use comcount_inspect::Reader;
    ///
    /// let connection = comcount_inspect::connect("redis://127.0.0.1:6379").await?;
    /// let mut reader = Reader::new(connection, "app:", Duration::from_secs(1))?;
    /// let report = reader.counter("requests").await?;
    /// for interval in &report.intervals {
    ///     println!("{}: {:?}", interval.interval, interval.total);
    /// }
    /// println!("{} participants flushed", report.fences.len());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::BadName`] for a name no counter can have; [`Error::Command`] when a command
    /// fails; [`Error::Malformed`] when a key holds what no store writes.
    pub async fn counter(&mut self, name: &str) -> Result<CounterReport, Error> {
        let Totals { now, intervals } = self.counter_totals(name).await?;
        let space = KeySpace::counter(&self.prefix, name);
        let fences = self.fences(&[(space, None)]).await?;
        Ok(CounterReport {
            name: name.to_owned(),
            prefix: self.prefix.clone(),
            interval_ms: self.interval_ms,
            now,
            intervals,
            fences,
        })
    }

    /// The totals of the counter `name` for the last intervals, without its fences: two round
    /// trips (`TIME`, then the totals) and no walk over the server's keys, for a reader that
    /// polls.
    ///
    /// # Errors
    ///
    /// As [`counter`](Self::counter).
    pub async fn counter_totals(&mut self, name: &str) -> Result<Totals, Error> {
        check_name(name)?;
        let space = KeySpace::counter(&self.prefix, name);
        let now = self.time(Some(&space)).await?;
        let numbers = self.numbers(now);
        let reads = numbers
            .iter()
            .map(|n| redis::cmd("GET").arg(space.interval(*n)).clone())
            .collect();
        let values = self
            .run(
                vec![(space.clone(), reads)],
                &format!("reading {}", space.base()),
            )
            .await?
            .pop()
            .unwrap_or_default();
        let intervals = interval_totals(&space, &numbers, now, values, |key, value| {
            total_of(key, value)
        })?;
        Ok(Totals { now, intervals })
    }

    /// What Redis holds for the key `key` of the family `name` of `partitions` partitions: its
    /// totals of the last intervals, and the fences of its partition.
    ///
    /// # Errors
    ///
    /// [`Error::BadName`] for a name no family can have; [`Error::BadPartitions`] for a number
    /// of partitions outside `1..=65_536`; [`Error::Command`] when a command fails;
    /// [`Error::Malformed`] when a key holds what no store writes.
    pub async fn family_key(
        &mut self,
        name: &str,
        partitions: u32,
        key: &str,
    ) -> Result<FamilyKeyReport, Error> {
        check_name(name)?;
        check_partitions(partitions)?;
        let partition = partition_of(key, partitions);
        let space = KeySpace::partition(&self.prefix, name, partition);
        let now = self.time(Some(&space)).await?;
        let numbers = self.numbers(now);
        let reads = numbers
            .iter()
            .map(|n| redis::cmd("HGET").arg(space.interval(*n)).arg(key).clone())
            .collect();
        let values = self
            .run(
                vec![(space.clone(), reads)],
                &format!("reading {}", space.base()),
            )
            .await?
            .pop()
            .unwrap_or_default();
        let intervals = interval_totals(&space, &numbers, now, values, |hash, value| {
            total_of(&format!("the field {key:?} of {hash}"), value)
        })?;
        let fences = self.fences(&[(space, Some(partition))]).await?;
        Ok(FamilyKeyReport {
            name: name.to_owned(),
            prefix: self.prefix.clone(),
            interval_ms: self.interval_ms,
            partitions,
            key: key.to_owned(),
            partition,
            now,
            intervals,
            fences,
        })
    }

    /// What Redis holds for the family `name` of `partitions` partitions: for each of the
    /// last intervals the number of keys with a total and their sum, the `top` keys with the
    /// largest totals over those intervals, and every partition's fences.
    ///
    /// It reads every key's total (`HGETALL` of each partition's hash of each interval), and
    /// so costs Redis in proportion to the keys in use.
    ///
    /// # Errors
    ///
    /// As [`family_key`](Self::family_key).
    pub async fn family_top(
        &mut self,
        name: &str,
        partitions: u32,
        top: usize,
    ) -> Result<FamilyReport, Error> {
        check_name(name)?;
        check_partitions(partitions)?;
        let spaces: Vec<KeySpace> = (0..partitions)
            .map(|p| KeySpace::partition(&self.prefix, name, p))
            .collect();
        let now = self.time(Some(&spaces[0])).await?;
        let numbers = self.numbers(now);
        let groups = spaces
            .iter()
            .map(|space| {
                let reads = numbers
                    .iter()
                    .map(|n| redis::cmd("HGETALL").arg(space.interval(*n)).clone())
                    .collect();
                (space.clone(), reads)
            })
            .collect();
        let hashes = self
            .run(groups, &format!("reading the family {name:?}"))
            .await?;

        // Each key's total per interval, in the order of `numbers`.
        let mut keys: BTreeMap<String, (u32, Vec<Option<u64>>)> = BTreeMap::new();
        for ((partition, space), values) in (0..).zip(&spaces).zip(hashes) {
            for (slot, (n, value)) in numbers.iter().zip(values).enumerate() {
                let hash = space.interval(*n);
                let fields: Vec<(Vec<u8>, Vec<u8>)> =
                    redis::from_redis_value(value).map_err(|e| malformed(&hash, &e.to_string()))?;
                for (field, total) in fields {
                    let field = String::from_utf8_lossy(&field).into_owned();
                    let total = parse_total(&format!("the field {field:?} of {hash}"), &total)?;
                    let entry = keys
                        .entry(field)
                        .or_insert_with(|| (partition, vec![None; numbers.len()]));
                    entry.1[slot] = Some(total);
                }
            }
        }

        let intervals = numbers
            .iter()
            .enumerate()
            .map(|(slot, n)| {
                let totals = keys.values().filter_map(|(_, totals)| totals[slot]);
                FamilyInterval {
                    interval: *n,
                    open: *n == now.interval,
                    keys: totals.clone().count(),
                    total: totals.map(u128::from).sum(),
                }
            })
            .collect();
        let mut ranked: Vec<KeyTotals> = keys
            .iter()
            .map(|(key, (partition, totals))| KeyTotals {
                key: key.clone(),
                partition: *partition,
                sum: totals.iter().flatten().copied().map(u128::from).sum(),
                intervals: numbers
                    .iter()
                    .zip(totals)
                    .map(|(n, total)| IntervalTotal {
                        interval: *n,
                        open: *n == now.interval,
                        total: *total,
                    })
                    .collect(),
            })
            .collect();
        // Largest first; `keys` is in the order of names, and the sort is stable.
        ranked.sort_by_key(|key| std::cmp::Reverse(key.sum));
        ranked.truncate(top);

        let fenced: Vec<(KeySpace, Option<u32>)> = (0..)
            .zip(spaces)
            .map(|(p, space)| (space, Some(p)))
            .collect();
        let fences = self.fences(&fenced).await?;
        Ok(FamilyReport {
            name: name.to_owned(),
            prefix: self.prefix.clone(),
            interval_ms: self.interval_ms,
            partitions,
            now,
            intervals,
            keys: keys.len(),
            top: ranked,
            fences,
        })
    }

    /// The server's clock, read on the node that holds `space`, or on any.
    async fn time(&mut self, space: Option<&KeySpace>) -> Result<ServerTime, Error> {
        let failed = |source| Error::Command {
            command: "TIME".to_owned(),
            source,
        };
        let value = self
            .send_to_node_of(space, redis::cmd("TIME"))
            .await
            .map_err(failed)?;
        let (seconds, micros): (u64, u64) =
            redis::from_redis_value(value).map_err(|e| failed(e.into()))?;
        let ms = seconds.saturating_mul(1_000).saturating_add(micros / 1_000);
        Ok(ServerTime {
            ms,
            interval: ms / self.interval_ms,
        })
    }

    /// The numbers of the intervals to read, newest first.
    fn numbers(&self, now: ServerTime) -> Vec<u64> {
        let oldest = now.interval.saturating_sub(u64::from(self.intervals) - 1);
        (oldest..=now.interval).rev().collect()
    }

    /// The fences of `spaces`, each with its partition (`None` for a counter), in the order of
    /// the participants' ids, then of the partitions.
    async fn fences(
        &mut self,
        spaces: &[(KeySpace, Option<u32>)],
    ) -> Result<Vec<ParticipantFence>, Error> {
        let by_prefix: HashMap<String, usize> = spaces
            .iter()
            .enumerate()
            .map(|(i, (space, _))| (fence_prefix(space), i))
            .collect();
        // The walks: one per key space on a cluster, one for them all on a single server.
        let walks: Vec<(&KeySpace, String)> = if self.is_cluster() || spaces.len() == 1 {
            spaces
                .iter()
                .map(|(space, _)| (space, format!("{}*", glob_escape(&fence_prefix(space)))))
                .collect()
        } else {
            vec![(&spaces[0].0, partitions_pattern(&spaces[0].0, &spaces[1].0))]
        };
        let mut found: Vec<BTreeSet<(ParticipantId, String)>> = vec![BTreeSet::new(); spaces.len()];
        for (space, pattern) in walks {
            for key in self.scan(space, &pattern).await? {
                // The key's participant, and the key space whose fence prefix the rest is; a
                // key that is no fence of one of `spaces`, written back from both, is left out.
                let Some((id, i)) = key
                    .len()
                    .checked_sub(16)
                    .filter(|at| key.is_char_boundary(*at))
                    .and_then(|at| {
                        let id = u64::from_str_radix(&key[at..], 16).ok()?;
                        Some((ParticipantId::from_u64(id), *by_prefix.get(&key[..at])?))
                    })
                    .filter(|(id, i)| spaces[*i].0.fence(*id) == key)
                else {
                    continue;
                };
                found[i].insert((id, key));
            }
        }

        let groups = spaces
            .iter()
            .zip(&found)
            .map(|((space, _), keys)| {
                let reads = keys
                    .iter()
                    .flat_map(|(_, key)| {
                        [
                            redis::cmd("GET").arg(key).clone(),
                            redis::cmd("PTTL").arg(key).clone(),
                        ]
                    })
                    .collect();
                (space.clone(), reads)
            })
            .collect();
        let values = self.run(groups, "reading the fences").await?;
        let mut fences = Vec::new();
        for (((_, partition), keys), values) in spaces.iter().zip(found).zip(values) {
            let mut values = values.into_iter();
            for (participant, key) in keys {
                let (Some(value), Some(ttl)) = (values.next(), values.next()) else {
                    break;
                };
                let value: Option<Vec<u8>> =
                    redis::from_redis_value(value).map_err(|e| malformed(&key, &e.to_string()))?;
                let ttl: i64 =
                    redis::from_redis_value(ttl).map_err(|e| malformed(&key, &e.to_string()))?;
                // Gone since the walk found it: expired.
                let (Some(value), false) = (value, ttl == -2) else {
                    continue;
                };
                let text = String::from_utf8_lossy(&value);
                let (seq, interval) = text
                    .split_once(':')
                    .and_then(|(seq, n)| Some((number(seq)?, number(n)?)))
                    .ok_or_else(|| malformed(&key, &text))?;
                fences.push(ParticipantFence {
                    participant,
                    partition: *partition,
                    seq,
                    interval,
                    ttl: u64::try_from(ttl).ok().map(Duration::from_millis),
                });
            }
        }
        fences.sort_by_key(|f| (f.participant, f.partition));
        Ok(fences)
    }

    /// Every key of the server that holds `space` that matches `pattern`.
    async fn scan(&mut self, space: &KeySpace, pattern: &str) -> Result<BTreeSet<String>, Error> {
        let mut keys = BTreeSet::new();
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let failed = |source| Error::Command {
                command: format!("SCAN MATCH {pattern}"),
                source,
            };
            let value = self
                .send_to_node_of(Some(space), scan)
                .await
                .map_err(failed)?;
            let (next, batch): (u64, Vec<Vec<u8>>) =
                redis::from_redis_value(value).map_err(|e| failed(e.into()))?;
            // Names that are not UTF-8 are no key of a counter.
            keys.extend(batch.into_iter().filter_map(|k| String::from_utf8(k).ok()));
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }

    /// Runs each group's commands, each group on one key space, and returns each group's
    /// replies: on a cluster one pipeline per group, since a pipeline goes to one node; on a
    /// single server, groups together in pipelines of up to [`PIPELINE_COMMANDS`] commands.
    async fn run(
        &mut self,
        groups: Vec<(KeySpace, Vec<Cmd>)>,
        what: &str,
    ) -> Result<Vec<Vec<Value>>, Error> {
        let failed = |source| Error::Command {
            command: what.to_owned(),
            source,
        };
        let cluster = self.is_cluster();
        let sizes: Vec<usize> = groups.iter().map(|(_, cmds)| cmds.len()).collect();
        let mut replies: Vec<Value> = Vec::with_capacity(sizes.iter().sum());
        let mut pipe = redis::pipe();
        let mut queued = 0;
        for (_, cmds) in groups {
            for cmd in cmds {
                pipe.add_command(cmd);
                queued += 1;
            }
            if queued > 0 && (cluster || queued >= PIPELINE_COMMANDS) {
                let values: Vec<Value> = pipe
                    .query_async(&mut self.connection)
                    .await
                    .map_err(failed)?;
                replies.extend(values);
                pipe = redis::pipe();
                queued = 0;
            }
        }
        if queued > 0 {
            let values: Vec<Value> = pipe
                .query_async(&mut self.connection)
                .await
                .map_err(failed)?;
            replies.extend(values);
        }
        let mut replies = replies.into_iter();
        Ok(sizes
            .into_iter()
            .map(|size| replies.by_ref().take(size).collect())
            .collect())
    }

    /// Sends `cmd`, which names no key, to the node that holds `space`: the one server, or on
    /// a cluster the primary of its slot (any node for `None`).
    async fn send_to_node_of(
        &mut self,
        space: Option<&KeySpace>,
        cmd: Cmd,
    ) -> redis::RedisResult<Value> {
        #[cfg(feature = "cluster")]
        if let (Some(space), Some(cluster)) = (space, self.cluster()) {
            use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
            let route = Route::with_key(space.interval(0), SlotAddr::Master);
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
            return cluster.route_command(cmd, routing).await?.extract_error();
        }
        #[cfg(not(feature = "cluster"))]
        let _ = space;
        cmd.query_async(&mut self.connection).await
    }

    #[cfg(feature = "cluster")]
    fn cluster(&mut self) -> Option<&mut redis::cluster_async::ClusterConnection> {
        (&mut self.connection as &mut dyn Any).downcast_mut()
    }

    /// Whether the connection is a cluster's, whose pipelines go to one node each.
    fn is_cluster(&mut self) -> bool {
        #[cfg(feature = "cluster")]
        return self.cluster().is_some();
        #[cfg(not(feature = "cluster"))]
        false
    }
}

impl<C> std::fmt::Debug for Reader<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("prefix", &self.prefix)
            .field("interval_ms", &self.interval_ms)
            .field("intervals", &self.intervals)
            .finish_non_exhaustive()
    }
}

/// The totals of `numbers` (newest first) from their replies, each read by `total`, which is
/// given the interval key and the reply.
fn interval_totals(
    space: &KeySpace,
    numbers: &[u64],
    now: ServerTime,
    values: Vec<Value>,
    total: impl Fn(&str, Value) -> Result<Option<u64>, Error>,
) -> Result<Vec<IntervalTotal>, Error> {
    numbers
        .iter()
        .zip(values)
        .map(|(n, value)| {
            Ok(IntervalTotal {
                interval: *n,
                open: *n == now.interval,
                total: total(&space.interval(*n), value)?,
            })
        })
        .collect()
}

/// A total as `GET` or `HGET` replies with it: `None` for nil.
fn total_of(what: &str, value: Value) -> Result<Option<u64>, Error> {
    let bytes: Option<Vec<u8>> =
        redis::from_redis_value(value).map_err(|e| malformed(what, &e.to_string()))?;
    bytes.map(|b| parse_total(what, &b)).transpose()
}

/// A total as Redis holds it: a plain decimal integer.
fn parse_total(what: &str, bytes: &[u8]) -> Result<u64, Error> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(number)
        .ok_or_else(|| malformed(what, &String::from_utf8_lossy(bytes)))
}

/// A number as the flush script writes it: digits only.
fn number(text: &str) -> Option<u64> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

fn malformed(key: &str, found: &str) -> Error {
    Error::Malformed {
        key: key.to_owned(),
        found: found.to_owned(),
    }
}

/// What every fence key of `space` starts with: its key for participant 0, less the id.
fn fence_prefix(space: &KeySpace) -> String {
    let mut key = space.fence(ParticipantId::from_u64(0));
    key.truncate(key.len() - ParticipantId::from_u64(0).to_string().len());
    key
}

/// A `SCAN MATCH` pattern for the fence keys of every partition of a family, from the fence
/// prefixes of its partitions 0 and 1 (`zero` and `one`): what they share before the
/// partition's number, a wildcard for it, and what they share after it.
fn partitions_pattern(zero: &KeySpace, one: &KeySpace) -> String {
    let (zero, one) = (fence_prefix(zero), fence_prefix(one));
    let head = zero
        .char_indices()
        .zip(one.chars())
        .find(|((_, a), b)| a != b)
        .map_or(zero.len(), |((at, _), _)| at);
    let shared_tail = zero[head..]
        .bytes()
        .rev()
        .zip(one[head..].bytes().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let mut tail = zero.len() - shared_tail;
    while !zero.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}*{}*",
        glob_escape(&zero[..head]),
        glob_escape(&zero[tail..])
    )
}

/// `text` with the characters `SCAN MATCH` reads as a pattern escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

fn check_prefix(prefix: &str) -> Result<(), Error> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::BadName {
            reason: format!(
                "the prefix is {} bytes long; a counter's is at most {MAX_PREFIX_LEN}",
                prefix.len()
            ),
        });
    }
    if prefix.contains(['{', '}']) {
        return Err(Error::BadName {
            reason: format!(
                "the prefix {prefix:?} holds {{ or }}, which no counter's does: give the \
                 prefix the counters are built with, without the hash tag"
            ),
        });
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "the name is empty: give the counter's or family's name".to_owned()
    } else if name.len() > MAX_NAME_LEN {
        format!(
            "the name is {} bytes long; a counter's is at most {MAX_NAME_LEN}",
            name.len()
        )
    } else if name.contains(['{', '}']) {
        format!(
            "the name {name:?} holds {{ or }}, which no counter's does: give the name alone, \
             without the prefix or the braces of its keys"
        )
    } else {
        return Ok(());
    };
    Err(Error::BadName { reason })
}

fn check_partitions(partitions: u32) -> Result<(), Error> {
    if (1..=MAX_PARTITIONS).contains(&partitions) {
        Ok(())
    } else {
        Err(Error::BadPartitions { partitions })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_prefix_is_the_fence_key_less_the_id() {
        let space = KeySpace::counter("app:", "requests");
        let prefix = fence_prefix(&space);
        assert!(
            space
                .fence(ParticipantId::from_u64(42))
                .starts_with(&prefix)
        );
        assert_eq!(prefix, "app:{requests}:f:");
    }

    #[test]
    fn one_pattern_covers_every_partition_and_no_other_family() {
        let zero = KeySpace::partition("a*:", "f[1]", 0);
        let one = KeySpace::partition("a*:", "f[1]", 1);
        let pattern = partitions_pattern(&zero, &one);
        assert_eq!(pattern, r"a\*:{f\[1\]@*}:f:*");
        let matches = |key: &str| glob_match(pattern.as_bytes(), key.as_bytes());
        for p in [0, 1, 9, 10, 65_535] {
            let space = KeySpace::partition("a*:", "f[1]", p);
            assert!(matches(&space.fence(ParticipantId::from_u64(7))), "{p}");
            assert!(!matches(&space.interval(7)), "{p}");
        }
        let counter = KeySpace::counter("a*:", "f[1]");
        assert!(!matches(&counter.fence(ParticipantId::from_u64(7))));
    }

    #[test]
    fn totals_are_plain_decimal_integers() {
        assert_eq!(parse_total("k", b"0").ok(), Some(0));
        assert_eq!(
            parse_total("k", b"9223372036854775807").ok(),
            Some(i64::MAX as u64)
        );
        for bad in [&b""[..], b"-1", b"+1", b"1.5", b"x", b" 1"] {
            assert!(
                matches!(parse_total("k", bad), Err(Error::Malformed { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn settings_are_checked() {
        let new = |prefix: &str, interval| Reader::new(Disconnected, prefix, interval).err();
        assert!(matches!(
            new("{a}", Duration::from_secs(1)),
            Some(Error::BadName { .. })
        ));
        assert!(matches!(
            new("", Duration::ZERO),
            Some(Error::BadInterval { .. })
        ));
        assert!(matches!(
            new("", Duration::from_micros(1_500)),
            Some(Error::BadInterval { .. })
        ));
        let reader = Reader::new(Disconnected, "", Duration::from_millis(10)).unwrap();
        assert!(matches!(
            reader.intervals(0),
            Err(Error::BadIntervals { .. })
        ));
        assert!(check_name("").is_err());
        assert!(check_name("a{b").is_err());
        assert!(check_name(&"n".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(check_partitions(0).is_err());
        assert!(check_partitions(MAX_PARTITIONS + 1).is_err());
        assert!(check_partitions(MAX_PARTITIONS).is_ok());
    }

    /// A connection for what needs none.
    struct Disconnected;

    impl ConnectionLike for Disconnected {
        fn req_packed_command<'a>(&'a mut self, _: &'a Cmd) -> redis::RedisFuture<'a, Value> {
            unreachable!("no command is sent")
        }

        fn req_packed_commands<'a>(
            &'a mut self,
            _: &'a redis::Pipeline,
            _: usize,
            _: usize,
        ) -> redis::RedisFuture<'a, Vec<Value>> {
            unreachable!("no command is sent")
        }

        fn get_db(&self) -> i64 {
            0
        }
    }

    /// Redis's glob matching, for the patterns made here: `*`, and `\` escapes.
    fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some((b'*', rest)) => (0..=text.len()).any(|i| glob_match(rest, &text[i..])),
            Some((b'\\', rest)) => match (rest.split_first(), text.split_first()) {
                (Some((p, rest)), Some((t, text))) => p == t && glob_match(rest, text),
                _ => false,
            },
            Some((p, rest)) => text
                .split_first()
                .is_some_and(|(t, text)| p == t && glob_match(rest, text)),
        }
    }
}
