use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};

use super::{Diagnostics, Event, outcome_name};

/// Turns events into metrics through the [`metrics`](https://docs.rs/metrics) facade, for any
/// exporter installed (Prometheus, StatsD, OpenTelemetry, ...). Every metric carries the
/// counter's (or family's) name as the label `counter`:
///
/// | metric | kind | labels | what |
/// | --- | --- | --- | --- |
/// | `comcount_flushes_total` | counter | `counter`, `outcome` | the store's answers to copies of flushes, by outcome: `applied`, `duplicate`, `stale`, `fenced`, `wrong_interval` (from `flush answered`) |
/// | `comcount_resends_total` | counter | `counter`, `reason` | copies of flushes sent again, by reason: `unanswered`, `failed`, `wrong_interval`, `fenced` (from `copy resent`) |
/// | `comcount_units_dropped_total` | counter | `counter` | units given up and certainly not counted (`flush failed`'s `dropped`) |
/// | `comcount_units_unsettled_total` | counter | `counter` | units given up that may or may not have been counted (`flush failed`'s `unsettled`) |
/// | `comcount_keys_refused_total` | counter | `counter`, `reason` | a family's `increment` calls refused for their key: `empty`, `too_long`, `full` (from `key refused`) |
/// | `comcount_units_unsent_at_stop_total` | counter | `counter` | units still in the buffers when the counter stopped, never sent (`counter stopped`'s `unsent`) |
/// | `comcount_flush_round_trip_seconds` | histogram | `counter` | each answered copy's round trip |
/// | `comcount_total_stale` | gauge | `counter` | 1 from `total went stale` until `total fresh again`, 0 otherwise; for a family, how many of its partitions' totals are stale |
/// | `comcount_round_trip_slow` | gauge | `counter` | 1 from `round trip slow` until `round trip normal`, 0 otherwise |
///
/// The two gauges hold a state, not a reading, so they stay right between events. A healthy
/// counter has both at 0, `comcount_flushes_total` growing by about one `applied` an interval
/// (a family: one per partition), and no dropped or unsettled units. When a counter starts,
/// its gauges and unit counters are set up at 0 and every metric is described; a counter that
/// stops leaves its metrics at their last values.
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

const FLUSHES: &str = "comcount_flushes_total";
const RESENDS: &str = "comcount_resends_total";
const DROPPED: &str = "comcount_units_dropped_total";
const UNSETTLED: &str = "comcount_units_unsettled_total";
const KEYS_REFUSED: &str = "comcount_keys_refused_total";
const UNSENT: &str = "comcount_units_unsent_at_stop_total";
const ROUND_TRIP: &str = "comcount_flush_round_trip_seconds";
const STALE: &str = "comcount_total_stale";
const SLOW: &str = "comcount_round_trip_slow";

impl Diagnostics for MetricsDiagnostics {
    fn record(&self, counter: &str, event: &Event<'_>) {
        let name = counter.to_owned();
        match *event {
            Event::CounterStarted { .. } => {
                describe();
                counter!(DROPPED, "counter" => name.clone()).increment(0);
                counter!(UNSETTLED, "counter" => name.clone()).increment(0);
                gauge!(STALE, "counter" => name.clone()).increment(0.0);
                gauge!(SLOW, "counter" => name).increment(0.0);
            }
            Event::FlushAnswered {
                outcome,
                round_trip,
                ..
            } => {
                counter!(FLUSHES, "counter" => name.clone(), "outcome" => outcome_name(outcome))
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
                counter!(KEYS_REFUSED, "counter" => name, "reason" => reason).increment(calls);
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

/// Describes every metric to the recorder, for exporters that print help texts.
fn describe() {
    describe_counter!(
        FLUSHES,
        Unit::Count,
        "The store's answers to copies of flushes, by outcome."
    );
    describe_counter!(
        RESENDS,
        Unit::Count,
        "Copies of flushes sent again, by reason."
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
        KEYS_REFUSED,
        Unit::Count,
        "Calls to a family's increment refused for their key, by reason."
    );
    describe_counter!(
        UNSENT,
        Unit::Count,
        "Units still in the buffers when the counter stopped, never sent."
    );
    describe_histogram!(
        ROUND_TRIP,
        Unit::Seconds,
        "Round trip of each answered copy of a flush."
    );
    describe_gauge!(
        STALE,
        Unit::Count,
        "1 while the group's total is stale (per partition for a family), 0 otherwise."
    );
    describe_gauge!(
        SLOW,
        Unit::Count,
        "1 while the store's round trip stays above half the interval, 0 otherwise."
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::executor::LocalPool;
    use futures::task::LocalSpawnExt;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use metrics_util::{CompositeKey, MetricKind};

    use super::*;
    use crate::clock::VirtualClock;
    use crate::diagnostics::ResendReason;
    use crate::error::StoreError;
    use crate::protocol::reply::Outcome;
    use crate::{Counter, MemoryStore};

    /// Every metric as `(kind, name, labels, value)`, labels sorted.
    type Metric = (MetricKind, String, Vec<(String, String)>, DebugValue);

    fn snapshot(snapshotter: &Snapshotter) -> Vec<Metric> {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value): (CompositeKey, _, _, _)| {
                let (kind, key) = key.into_parts();
                let mut labels: Vec<_> = key
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                labels.sort();
                (kind, key.name().to_owned(), labels, value)
            })
            .collect()
    }

    fn find<'m>(metrics: &'m [Metric], name: &str, labels: &[(&str, &str)]) -> &'m DebugValue {
        metrics
            .iter()
            .find(|(_, n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, _, value)| value)
            .unwrap_or_else(|| panic!("no {name} {labels:?} in {metrics:#?}"))
    }

    fn gauge_of(value: &DebugValue) -> f64 {
        match value {
            DebugValue::Gauge(g) => g.0,
            other => panic!("not a gauge: {other:?}"),
        }
    }

    #[test]
    fn events_become_labelled_metrics() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let error = StoreError::refused("too big");
        metrics::with_local_recorder(&recorder, || {
            let sink = MetricsDiagnostics;
            let record = |event: Event<'_>| sink.record("jobs", &event);
            record(Event::CounterStarted {
                interval: Duration::from_secs(1),
                prefix: "",
                store: "memory",
            });
            record(Event::FlushAnswered {
                outcome: Outcome::WrongInterval,
                interval: 7,
                round_trip: Duration::from_millis(250),
            });
            record(Event::CopyResent {
                reason: ResendReason::WrongInterval,
                copy: 2,
                error: None,
            });
            record(Event::FlushAnswered {
                outcome: Outcome::Applied,
                interval: 8,
                round_trip: Duration::from_millis(4),
            });
            record(Event::FlushFailed {
                error: &error,
                seq: 7,
                key: None,
                dropped: 5,
                unsettled: 0,
            });
            record(Event::TotalWentStale {
                after: Duration::from_secs(2),
            });
            record(Event::RoundTripSlow {
                round_trip: Duration::from_millis(700),
                interval: Duration::from_secs(1),
            });
        });
        let metrics = snapshot(&snapshotter);
        let jobs = ("counter", "jobs");
        assert_eq!(
            find(&metrics, FLUSHES, &[jobs, ("outcome", "wrong_interval")]),
            &DebugValue::Counter(1)
        );
        assert_eq!(
            find(&metrics, FLUSHES, &[jobs, ("outcome", "applied")]),
            &DebugValue::Counter(1)
        );
        assert_eq!(
            find(&metrics, RESENDS, &[jobs, ("reason", "wrong_interval")]),
            &DebugValue::Counter(1)
        );
        assert_eq!(find(&metrics, DROPPED, &[jobs]), &DebugValue::Counter(5));
        assert_eq!(find(&metrics, UNSETTLED, &[jobs]), &DebugValue::Counter(0));
        match find(&metrics, ROUND_TRIP, &[jobs]) {
            DebugValue::Histogram(values) => {
                let seconds: Vec<f64> = values.iter().map(|v| v.0).collect();
                assert_eq!(seconds, [0.25, 0.004]);
            }
            other => panic!("not a histogram: {other:?}"),
        }
        assert_eq!(gauge_of(find(&metrics, STALE, &[jobs])), 1.0);
        assert_eq!(gauge_of(find(&metrics, SLOW, &[jobs])), 1.0);

        // A snapshot takes the values: from here on they start from 0 again. Two partitions
        // of a family go stale, one recovers.
        metrics::with_local_recorder(&recorder, || {
            let sink = MetricsDiagnostics;
            let record = |event: Event<'_>| sink.record("tenants", &event);
            let after = Duration::from_secs(2);
            record(Event::TotalWentStale { after });
            record(Event::TotalWentStale { after });
            record(Event::TotalFreshAgain { stale_for: after });
            record(Event::RoundTripSlow {
                round_trip: Duration::from_millis(700),
                interval: Duration::from_secs(1),
            });
            record(Event::RoundTripNormal {
                round_trip: Duration::from_millis(5),
                interval: Duration::from_secs(1),
            });
        });
        let metrics = snapshot(&snapshotter);
        let tenants = ("counter", "tenants");
        assert_eq!(gauge_of(find(&metrics, STALE, &[tenants])), 1.0);
        assert_eq!(gauge_of(find(&metrics, SLOW, &[tenants])), 0.0);
    }

    #[test]
    fn a_running_counter_counts_its_flushes_and_times_them() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let clock = VirtualClock::new();
            let (counter, worker) = Counter::builder("requests", Duration::from_secs(1))
                .diagnostics(MetricsDiagnostics)
                .build(MemoryStore::with_clock(clock.clone()), clock.clone())
                .unwrap();
            let mut pool = LocalPool::new();
            pool.spawner().spawn_local(worker).unwrap();
            for _ in 0..4 {
                counter.increment(1);
                pool.run_until_stalled();
                clock.advance(Duration::from_millis(1000));
            }
            pool.run_until_stalled();
        });
        let metrics = snapshot(&snapshotter);
        let requests = ("counter", "requests");
        match find(&metrics, FLUSHES, &[requests, ("outcome", "applied")]) {
            DebugValue::Counter(n) => assert!(*n >= 3, "{n} flushes applied"),
            other => panic!("not a counter: {other:?}"),
        }
        match find(&metrics, ROUND_TRIP, &[requests]) {
            // The memory store answers at once: no virtual time passes.
            DebugValue::Histogram(values) => assert!(values.iter().all(|v| v.0 == 0.0)),
            other => panic!("not a histogram: {other:?}"),
        }
        assert_eq!(gauge_of(find(&metrics, STALE, &[requests])), 0.0);
        assert_eq!(
            find(&metrics, DROPPED, &[requests]),
            &DebugValue::Counter(0)
        );
    }
}
