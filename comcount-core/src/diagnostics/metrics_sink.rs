use std::time::{Duration, SystemTime, UNIX_EPOCH};

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};

use super::{Diagnostics, Event, outcome_name};

/// Turns events into metrics through the [`metrics`](https://docs.rs/metrics) facade, for any
/// exporter installed (Prometheus, StatsD, OpenTelemetry, ...). Every metric carries the
/// counter's (or family's) name as the label `counter`; a family's keys are never labels.
///
/// | metric | kind | unit | labels | what |
/// | --- | --- | --- | --- | --- |
/// | `comcount_flushes_counted_total` | counter | flushes | `counter` | flushes the store counted, each once however many copies it took (`flush completed`); a family counts one per partition flushed |
/// | `comcount_flush_answers_total` | counter | answers | `counter`, `outcome` | the store's answers to copies of flushes, by outcome: `applied`, `duplicate`, `stale`, `fenced`, `wrong_interval` (`flush answered`) |
/// | `comcount_flush_resends_total` | counter | copies | `counter`, `reason` | copies of flushes sent again, by reason: `unanswered`, `failed`, `wrong_interval`, `fenced` (`copy resent`) |
/// | `comcount_flush_round_trip_seconds` | histogram | seconds | `counter` | each answered copy's round trip, from sending to answer (`flush answered`) |
/// | `comcount_units_counted_total` | counter | units | `counter` | units this participant's flushes carried that the store counted (`flush completed`'s `amount`) |
/// | `comcount_units_dropped_total` | counter | units | `counter` | units given up and certainly not counted (`flush failed`'s `dropped`) |
/// | `comcount_units_unsettled_total` | counter | units | `counter` | units given up that may or may not have been counted (`flush failed`'s `unsettled`) |
/// | `comcount_units_unsent_at_stop_total` | counter | units | `counter` | units still in the buffers when the counter stopped, never sent (`counter stopped`'s `unsent`) |
/// | `comcount_group_total_units` | gauge | units | `counter` | a counter's group total, the whole group's units over the last closed interval, as its last flush counted found it (`flush completed`'s `total`) |
/// | `comcount_group_total_timestamp_seconds` | gauge | seconds | `counter` | when a reply last brought that total, in seconds since the Unix epoch: its age is `time() - comcount_group_total_timestamp_seconds` (`flush completed`'s `total_age_ms`, taken from the system clock) |
/// | `comcount_stale_partitions` | gauge | partitions | `counter` | partitions whose totals are stale: from `total went stale` until `total fresh again`; a counter is one partition, so 0 or 1 |
/// | `comcount_round_trip_slow` | gauge | 0 or 1 | `counter` | 1 from `round trip slow` until `round trip normal`, 0 otherwise |
/// | `comcount_family_keys` | gauge | keys | `counter` | the keys a family holds (`keys held`'s `held`) |
/// | `comcount_family_key_cap` | gauge | keys | `counter` | the most keys the family may hold, its `max_keys` (`keys held`'s `max_keys`) |
/// | `comcount_family_key_refusals_total` | counter | calls | `counter`, `reason` | calls to a family's `increment` refused for their key, by reason: `empty`, `too_long`, `full` (`key refused`'s `calls`) |
///
/// Each is described to the recorder with its unit ([`Unit::Count`] or [`Unit::Seconds`]). The
/// gauges hold a state, not a reading, so they stay right between events; the total's age,
/// which grows between events, is given as the time the total came, for the monitoring
/// system to subtract from its own clock. The group total and its time are a counter's only:
/// a family's totals are its keys'. The family gauges are set once an interval.
///
/// A healthy counter has `comcount_stale_partitions` and `comcount_round_trip_slow` at 0,
/// `comcount_flushes_counted_total` growing by about one an interval (a family: one per
/// partition), as many `applied` answers, and no dropped or unsettled units. When a counter
/// starts, its gauges and unit counters are set up at 0 and every metric is described; a
/// counter that stops leaves its metrics at their last values.
///
/// Several counters may share one sink, and a sink may go with others (a pair of sinks is a
/// sink):
///
/// ```
/// use std::time::Duration;
/// use comcount_core::{Counter, MemoryStore, clock::VirtualClock};
/// use comcount_core::diagnostics::{LogDiagnostics, MetricsDiagnostics};
///
/// let (counter, worker) = Counter::builder("requests", Duration::from_secs(1))
///     .diagnostics((LogDiagnostics, MetricsDiagnostics))
///     .build(MemoryStore::new(), VirtualClock::new())?;
/// # drop((counter, worker));
/// # Ok::<(), comcount_core::ConfigError>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
#[derive(Clone, Copy, Default, Debug)]
pub struct MetricsDiagnostics;

const FLUSHES_COUNTED: &str = "comcount_flushes_counted_total";
const ANSWERS: &str = "comcount_flush_answers_total";
const RESENDS: &str = "comcount_flush_resends_total";
const ROUND_TRIP: &str = "comcount_flush_round_trip_seconds";
const UNITS_COUNTED: &str = "comcount_units_counted_total";
const DROPPED: &str = "comcount_units_dropped_total";
const UNSETTLED: &str = "comcount_units_unsettled_total";
const UNSENT: &str = "comcount_units_unsent_at_stop_total";
const GROUP_TOTAL: &str = "comcount_group_total_units";
const GROUP_TOTAL_TIME: &str = "comcount_group_total_timestamp_seconds";
const STALE: &str = "comcount_stale_partitions";
const SLOW: &str = "comcount_round_trip_slow";
const FAMILY_KEYS: &str = "comcount_family_keys";
const KEY_CAP: &str = "comcount_family_key_cap";
const KEY_REFUSALS: &str = "comcount_family_key_refusals_total";

impl Diagnostics for MetricsDiagnostics {
    fn record(&self, counter: &str, event: &Event<'_>) {
        let name = counter.to_owned();
        match *event {
            Event::CounterStarted { .. } => {
                describe();
                for units in [FLUSHES_COUNTED, UNITS_COUNTED, DROPPED, UNSETTLED, UNSENT] {
                    counter!(units, "counter" => name.clone()).increment(0);
                }
                gauge!(STALE, "counter" => name.clone()).increment(0.0);
                gauge!(SLOW, "counter" => name).increment(0.0);
            }
            Event::FlushCompleted {
                amount,
                total,
                total_age,
                ..
            } => {
                counter!(FLUSHES_COUNTED, "counter" => name.clone()).increment(1);
                counter!(UNITS_COUNTED, "counter" => name.clone()).increment(amount);
                if let Some(total) = total {
                    gauge!(GROUP_TOTAL, "counter" => name.clone()).set(total as f64);
                }
                if let Some(age) = total_age {
                    gauge!(GROUP_TOTAL_TIME, "counter" => name).set(seconds_ago(age));
                }
            }
            Event::FlushAnswered {
                outcome,
                round_trip,
                ..
            } => {
                counter!(ANSWERS, "counter" => name.clone(), "outcome" => outcome_name(outcome))
                    .increment(1);
                histogram!(ROUND_TRIP, "counter" => name).record(round_trip.as_secs_f64());
            }
            Event::CopyResent { reason, .. } => {
                counter!(RESENDS, "counter" => name, "reason" => reason.as_str()).increment(1);
            }
            Event::FlushFailed {
                dropped, unsettled, ..
            } => {
                counter!(DROPPED, "counter" => name.clone()).increment(dropped);
                counter!(UNSETTLED, "counter" => name).increment(unsettled);
            }
            Event::KeyRefused { reason, calls } => {
                counter!(KEY_REFUSALS, "counter" => name, "reason" => reason).increment(calls);
            }
            Event::KeysHeld { held, max_keys } => {
                gauge!(FAMILY_KEYS, "counter" => name.clone()).set(held as f64);
                gauge!(KEY_CAP, "counter" => name).set(max_keys as f64);
            }
            Event::CounterStopped { unsent } => {
                counter!(UNSENT, "counter" => name).increment(unsent);
            }
            Event::TotalWentStale { .. } => gauge!(STALE, "counter" => name).increment(1.0),
            Event::TotalFreshAgain { .. } => gauge!(STALE, "counter" => name).decrement(1.0),
            Event::RoundTripSlow { .. } => gauge!(SLOW, "counter" => name).set(1.0),
            Event::RoundTripNormal { .. } => gauge!(SLOW, "counter" => name).set(0.0),
            _ => {}
        }
    }
}

/// The time `age` before now on the system clock, in seconds since the Unix epoch.
fn seconds_ago(age: Duration) -> f64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    now.saturating_sub(age).as_secs_f64()
}

/// Describes every metric to the recorder, for exporters that print help texts.
fn describe() {
    describe_counter!(
        FLUSHES_COUNTED,
        Unit::Count,
        "Flushes the store counted, each once however many copies it took."
    );
    describe_counter!(
        ANSWERS,
        Unit::Count,
        "The store's answers to copies of flushes, by outcome."
    );
    describe_counter!(
        RESENDS,
        Unit::Count,
        "Copies of flushes sent again, by reason."
    );
    describe_histogram!(
        ROUND_TRIP,
        Unit::Seconds,
        "Round trip of each answered copy of a flush."
    );
    describe_counter!(
        UNITS_COUNTED,
        Unit::Count,
        "Units this participant's flushes carried that the store counted."
    );
    describe_counter!(
        DROPPED,
        Unit::Count,
        "Units given up and certainly not counted."
    );
    describe_counter!(
        UNSETTLED,
        Unit::Count,
        "Units given up that may or may not have been counted."
    );
    describe_counter!(
        UNSENT,
        Unit::Count,
        "Units still in the buffers when the counter stopped, never sent."
    );
    describe_gauge!(
        GROUP_TOTAL,
        Unit::Count,
        "A counter's group total: the whole group's units over the last closed interval."
    );
    describe_gauge!(
        GROUP_TOTAL_TIME,
        Unit::Seconds,
        "When a reply last brought the counter's group total, in seconds since the Unix epoch."
    );
    describe_gauge!(
        STALE,
        Unit::Count,
        "Partitions whose totals are stale; a counter is one partition."
    );
    describe_gauge!(
        SLOW,
        Unit::Count,
        "1 while the store's round trip stays above half the interval, 0 otherwise."
    );
    describe_gauge!(FAMILY_KEYS, Unit::Count, "Keys the family holds.");
    describe_gauge!(
        KEY_CAP,
        Unit::Count,
        "The most keys the family may hold (max_keys)."
    );
    describe_counter!(
        KEY_REFUSALS,
        Unit::Count,
        "Calls to a family's increment refused for their key, by reason."
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use metrics_util::{CompositeKey, MetricKind};

    use super::*;
    use crate::diagnostics::ResendReason;
    use crate::error::StoreError;
    use crate::protocol::reply::Outcome;

    /// A metric as `(kind, name, labels as "k=v" sorted)`.
    type Id = (MetricKind, String, Vec<String>);

    /// Every metric with its value; a snapshot takes the values, so one per test.
    fn snapshot(snapshotter: &Snapshotter) -> Vec<(Id, DebugValue)> {
        let mut metrics: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value): (CompositeKey, _, _, _)| {
                let (kind, key) = key.into_parts();
                let mut labels: Vec<_> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                labels.sort();
                ((kind, key.name().to_owned(), labels), value)
            })
            .collect();
        metrics.sort_by(|a, b| a.0.cmp(&b.0));
        metrics
    }

    fn id(kind: MetricKind, name: &str, labels: &[&str]) -> Id {
        let labels = labels.iter().map(|l| (*l).to_owned()).collect();
        (kind, name.to_owned(), labels)
    }

    #[test]
    fn each_event_feeds_the_metrics_of_its_meaning() {
        use MetricKind::{Counter, Gauge, Histogram};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let error = StoreError::refused("too big");
        let second = Duration::from_secs(1);
        let wall = |at: SystemTime| at.duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        let before = wall(SystemTime::now());
        metrics::with_local_recorder(&recorder, || {
            let sink = MetricsDiagnostics;
            let jobs = |event: Event<'_>| sink.record("jobs", &event);
            jobs(Event::CounterStarted {
                interval: second,
                prefix: "",
                store: "memory",
            });
            jobs(Event::FlushAnswered {
                outcome: Outcome::WrongInterval,
                interval: 7,
                round_trip: Duration::from_millis(250),
            });
            jobs(Event::CopyResent {
                reason: ResendReason::WrongInterval,
                copy: 2,
                error: None,
            });
            jobs(Event::FlushAnswered {
                outcome: Outcome::Applied,
                interval: 8,
                round_trip: Duration::from_millis(4),
            });
            // Two answers, one flush.
            jobs(Event::FlushCompleted {
                interval: 8,
                amount: 12,
                keys: 1,
                count: 40,
                total: Some(40),
                total_age: Some(Duration::from_secs(30)),
            });
            jobs(Event::FlushFailed {
                error: &error,
                seq: 9,
                key: None,
                dropped: 5,
                unsettled: 0,
            });
            jobs(Event::TotalWentStale { after: 2 * second });
            jobs(Event::RoundTripSlow {
                round_trip: Duration::from_millis(700),
                interval: second,
            });
            jobs(Event::CounterStopped { unsent: 3 });

            // A family of three partitions: two go stale, one comes back; its flush carries
            // no total, and its keys are never labels.
            let tenants = |event: Event<'_>| sink.record("tenants", &event);
            tenants(Event::CounterStarted {
                interval: second,
                prefix: "",
                store: "memory",
            });
            tenants(Event::FlushCompleted {
                interval: 8,
                amount: 7,
                keys: 2,
                count: 6,
                total: None,
                total_age: None,
            });
            tenants(Event::TotalWentStale { after: 2 * second });
            tenants(Event::TotalWentStale { after: 2 * second });
            tenants(Event::TotalFreshAgain { stale_for: second });
            tenants(Event::KeyRefused {
                reason: "full",
                calls: 4,
            });
            tenants(Event::KeysHeld {
                held: 2,
                max_keys: 2,
            });
            tenants(Event::FlushFailed {
                error: &error,
                seq: 3,
                key: Some("acme"),
                dropped: 0,
                unsettled: 2,
            });
        });
        let after = wall(SystemTime::now());

        let mut metrics = snapshot(&snapshotter);
        // When the total came: 30 s before the event, on the system clock.
        let at = metrics
            .iter()
            .position(|(id, _)| id.1 == GROUP_TOTAL_TIME)
            .map(|i| metrics.remove(i));
        match at {
            Some((_, DebugValue::Gauge(at))) => {
                let range = (before - 30.0)..=(after - 30.0);
                assert!(range.contains(&at.0), "{} not in {range:?}", at.0);
            }
            other => panic!("{GROUP_TOTAL_TIME}: {other:?}"),
        }
        let seconds = |v: &[f64]| DebugValue::Histogram(v.iter().map(|&s| s.into()).collect());
        let expected = vec![
            (
                id(Counter, FLUSHES_COUNTED, &["counter=jobs"]),
                DebugValue::Counter(1),
            ),
            (
                id(Counter, FLUSHES_COUNTED, &["counter=tenants"]),
                DebugValue::Counter(1),
            ),
            (
                id(Counter, ANSWERS, &["counter=jobs", "outcome=applied"]),
                DebugValue::Counter(1),
            ),
            (
                id(
                    Counter,
                    ANSWERS,
                    &["counter=jobs", "outcome=wrong_interval"],
                ),
                DebugValue::Counter(1),
            ),
            (
                id(Counter, RESENDS, &["counter=jobs", "reason=wrong_interval"]),
                DebugValue::Counter(1),
            ),
            (
                id(Counter, KEY_REFUSALS, &["counter=tenants", "reason=full"]),
                DebugValue::Counter(4),
            ),
            (
                id(Counter, DROPPED, &["counter=jobs"]),
                DebugValue::Counter(5),
            ),
            (
                id(Counter, DROPPED, &["counter=tenants"]),
                DebugValue::Counter(0),
            ),
            (
                id(Counter, UNITS_COUNTED, &["counter=jobs"]),
                DebugValue::Counter(12),
            ),
            (
                id(Counter, UNITS_COUNTED, &["counter=tenants"]),
                DebugValue::Counter(7),
            ),
            (
                id(Counter, UNSENT, &["counter=jobs"]),
                DebugValue::Counter(3),
            ),
            (
                id(Counter, UNSENT, &["counter=tenants"]),
                DebugValue::Counter(0),
            ),
            (
                id(Counter, UNSETTLED, &["counter=jobs"]),
                DebugValue::Counter(0),
            ),
            (
                id(Counter, UNSETTLED, &["counter=tenants"]),
                DebugValue::Counter(2),
            ),
            (
                id(Gauge, KEY_CAP, &["counter=tenants"]),
                DebugValue::Gauge(2.0.into()),
            ),
            (
                id(Gauge, FAMILY_KEYS, &["counter=tenants"]),
                DebugValue::Gauge(2.0.into()),
            ),
            (
                id(Gauge, GROUP_TOTAL, &["counter=jobs"]),
                DebugValue::Gauge(40.0.into()),
            ),
            (
                id(Gauge, SLOW, &["counter=jobs"]),
                DebugValue::Gauge(1.0.into()),
            ),
            (
                id(Gauge, SLOW, &["counter=tenants"]),
                DebugValue::Gauge(0.0.into()),
            ),
            (
                id(Gauge, STALE, &["counter=jobs"]),
                DebugValue::Gauge(1.0.into()),
            ),
            (
                id(Gauge, STALE, &["counter=tenants"]),
                DebugValue::Gauge(1.0.into()),
            ),
            (
                id(Histogram, ROUND_TRIP, &["counter=jobs"]),
                seconds(&[0.25, 0.004]),
            ),
        ];
        let mut expected = expected;
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(metrics, expected);
    }
}
