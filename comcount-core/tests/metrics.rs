//! What `MetricsDiagnostics` makes of a running counter and family, on virtual time: each
//! metric's name, kind, unit, labels and value, checked against the events behind it.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::{MetricsDiagnostics, Record, Recorder};
use comcount_core::{Counter, Family, MemoryStore};
use common::runtime::run_virtual_until;
use common::scripted::{Action, ScriptedStore};
use futures::FutureExt;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use metrics::Unit;
use metrics_util::MetricKind::{self, Counter as C, Gauge as G, Histogram as H};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

const INTERVAL: Duration = Duration::from_secs(1);

/// One metric of a snapshot.
#[derive(Debug)]
struct Metric {
    kind: MetricKind,
    name: String,
    /// `key=value`, sorted.
    labels: Vec<String>,
    unit: Option<Unit>,
    description: Option<String>,
    value: DebugValue,
}

/// Every metric recorded; a snapshot takes the values, so one per recorder.
fn snapshot(snapshotter: &Snapshotter) -> Vec<Metric> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, unit, description, value)| {
            let (kind, key) = key.into_parts();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            Metric {
                kind,
                name: key.name().to_owned(),
                labels,
                unit,
                description: description.map(|d| d.to_string()),
                value,
            }
        })
        .collect()
}

/// The metrics as `(kind, name, labels)`.
fn ids(metrics: &[Metric]) -> BTreeSet<(MetricKind, String, Vec<String>)> {
    metrics
        .iter()
        .map(|m| (m.kind, m.name.clone(), m.labels.clone()))
        .collect()
}

fn id(kind: MetricKind, name: &str, labels: &[&str]) -> (MetricKind, String, Vec<String>) {
    let labels = labels.iter().map(|l| (*l).to_owned()).collect();
    (kind, name.to_owned(), labels)
}

fn find<'m>(metrics: &'m [Metric], name: &str, labels: &[&str]) -> &'m DebugValue {
    metrics
        .iter()
        .find(|m| m.name == name && m.labels == labels)
        .map(|m| &m.value)
        .unwrap_or_else(|| panic!("no {name} {labels:?} in {metrics:#?}"))
}

fn counter(metrics: &[Metric], name: &str, labels: &[&str]) -> u64 {
    match find(metrics, name, labels) {
        DebugValue::Counter(n) => *n,
        other => panic!("{name} {labels:?} is not a counter: {other:?}"),
    }
}

fn gauge(metrics: &[Metric], name: &str, labels: &[&str]) -> f64 {
    match find(metrics, name, labels) {
        DebugValue::Gauge(g) => g.0,
        other => panic!("{name} {labels:?} is not a gauge: {other:?}"),
    }
}

fn histogram(metrics: &[Metric], name: &str, labels: &[&str]) -> Vec<f64> {
    match find(metrics, name, labels) {
        DebugValue::Histogram(values) => values.iter().map(|v| v.0).collect(),
        other => panic!("{name} {labels:?} is not a histogram: {other:?}"),
    }
}

/// The events of `counter` with `message`.
fn of(records: &[Record], counter: &str, message: &str) -> Vec<Record> {
    records
        .iter()
        .filter(|r| r.counter == counter && r.message == message)
        .cloned()
        .collect()
}

fn number(record: &Record, attribute: &str) -> u64 {
    record
        .attribute(attribute)
        .unwrap_or_else(|| panic!("no {attribute} in {record:?}"))
        .parse()
        .unwrap()
}

/// Seconds since the Unix epoch, on the system clock.
fn wall_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn a_counter_and_a_family_report_flushes_units_their_total_and_their_keys() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let events = Recorder::new();
    let clock = VirtualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let mut pool = LocalPool::new();
    let wall_before = wall_now();
    metrics::with_local_recorder(&recorder, || {
        let sinks = (MetricsDiagnostics, events.clone());
        let (requests, worker) = Counter::builder("requests", INTERVAL)
            .diagnostics(sinks.clone())
            .build(store.clone(), clock.clone())
            .unwrap();
        pool.spawner().spawn_local(worker).unwrap();
        let (tenants, worker) = Family::builder("tenants", INTERVAL)
            .max_keys(2)
            .diagnostics(sinks)
            .build(store.clone(), clock.clone())
            .unwrap();
        pool.spawner().spawn_local(worker).unwrap();
        for n in 0..6 {
            requests.increment(2);
            tenants.increment("acme", 1);
            tenants.increment("globex", 1);
            if n < 3 {
                // A third key, past the cap: refused, and not counted.
                tenants.increment("initech", 1);
            }
            run_virtual_until(&mut pool, &clock, INTERVAL * (n + 1));
        }
        let requests_drained = requests.drain(INTERVAL * 3);
        let tenants_drained = tenants.drain(INTERVAL * 3);
        run_virtual_until(&mut pool, &clock, clock.now() + INTERVAL * 4);
        assert_eq!(requests_drained.now_or_never(), Some(0));
        assert_eq!(tenants_drained.now_or_never(), Some(0));
    });
    let wall_after = wall_now();
    let metrics = snapshot(&snapshotter);
    let records = events.records();

    // Every metric, by kind, name and labels: the counter's name as `counter`, never a key.
    let requests = ["counter=requests"];
    let tenants = ["counter=tenants"];
    let mut expected = BTreeSet::new();
    for labels in [&requests, &tenants] {
        for name in [
            "comcount_flushes_counted_total",
            "comcount_units_counted_total",
            "comcount_units_dropped_total",
            "comcount_units_unsettled_total",
            "comcount_units_unsent_at_stop_total",
        ] {
            expected.insert(id(C, name, labels));
        }
        expected.insert(id(
            C,
            "comcount_flush_answers_total",
            &[labels[0], "outcome=applied"],
        ));
        expected.insert(id(G, "comcount_stale_partitions", labels));
        expected.insert(id(G, "comcount_round_trip_slow", labels));
        expected.insert(id(H, "comcount_flush_round_trip_seconds", labels));
    }
    expected.insert(id(G, "comcount_group_total_units", &requests));
    expected.insert(id(G, "comcount_group_total_timestamp_seconds", &requests));
    expected.insert(id(G, "comcount_family_keys", &tenants));
    expected.insert(id(G, "comcount_family_key_cap", &tenants));
    expected.insert(id(
        C,
        "comcount_family_key_refusals_total",
        &["counter=tenants", "reason=full"],
    ));
    assert_eq!(ids(&metrics), expected);

    // Each is described, with its unit: `_total` for counters and only for them, `_seconds`
    // for seconds.
    for m in &metrics {
        assert!(m.description.is_some(), "{} is not described", m.name);
        assert_eq!(m.kind == C, m.name.ends_with("_total"), "{}", m.name);
        let unit = if m.name.ends_with("_seconds") {
            Unit::Seconds
        } else {
            Unit::Count
        };
        assert_eq!(m.unit, Some(unit), "{}", m.name);
    }

    for (name, labels) in [("requests", &requests), ("tenants", &tenants)] {
        // Flushes, once each; answers, once per copy answered.
        let completed = of(&records, name, "flush completed");
        let answered = of(&records, name, "flush answered");
        assert!(completed.len() >= 6, "{completed:?}");
        assert_eq!(
            counter(&metrics, "comcount_flushes_counted_total", labels),
            completed.len() as u64
        );
        // The store's clock is the counter's: every copy is applied at once.
        let applied = [labels[0], "outcome=applied"];
        assert_eq!(
            counter(&metrics, "comcount_flush_answers_total", &applied),
            answered.len() as u64
        );
        assert_eq!(answered.len(), completed.len());
        // The memory store answers at once: no virtual time passes.
        let round_trips = histogram(&metrics, "comcount_flush_round_trip_seconds", labels);
        assert_eq!(round_trips, vec![0.0; answered.len()]);

        // Every unit counted, none lost.
        assert_eq!(
            counter(&metrics, "comcount_units_counted_total", labels),
            12
        );
        for lost in [
            "comcount_units_dropped_total",
            "comcount_units_unsettled_total",
            "comcount_units_unsent_at_stop_total",
        ] {
            assert_eq!(counter(&metrics, lost, labels), 0, "{lost}");
        }
        assert_eq!(gauge(&metrics, "comcount_stale_partitions", labels), 0.0);
        assert_eq!(gauge(&metrics, "comcount_round_trip_slow", labels), 0.0);
    }

    // The counter's group total, as its last flush counted found it, and when it came.
    let last = of(&records, "requests", "flush completed").pop().unwrap();
    let total = number(&last, "total");
    assert_eq!(total, 2, "one participant adding 2 an interval: {last:?}");
    assert_eq!(
        gauge(&metrics, "comcount_group_total_units", &requests),
        total as f64
    );
    let age = number(&last, "total_age_ms") as f64 / 1000.0;
    let came = gauge(
        &metrics,
        "comcount_group_total_timestamp_seconds",
        &requests,
    );
    let range = (wall_before - age - 0.001)..=(wall_after - age + 0.001);
    assert!(range.contains(&came), "{came} not in {range:?}");

    // The family's keys against its cap, and the calls refused for a key past it.
    assert_eq!(gauge(&metrics, "comcount_family_keys", &tenants), 2.0);
    assert_eq!(gauge(&metrics, "comcount_family_key_cap", &tenants), 2.0);
    let full = ["counter=tenants", "reason=full"];
    assert_eq!(
        counter(&metrics, "comcount_family_key_refusals_total", &full),
        3
    );
}

/// A counter on a store that stops answering for `hung` copies after two healthy intervals,
/// run for `run_for` in all; its metrics and events.
fn stalled(hung: usize, run_for: Duration) -> (Vec<Metric>, Recorder) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let events = Recorder::new();
    let clock = VirtualClock::starting_at(Duration::from_secs(1_000));
    let store = ScriptedStore::new(clock.clone());
    let mut pool = LocalPool::new();
    metrics::with_local_recorder(&recorder, || {
        let (requests, worker) = Counter::builder("requests", INTERVAL)
            .flush_timeout(Duration::from_millis(200))
            .diagnostics((MetricsDiagnostics, events.clone()))
            .build(store.clone(), clock.clone())
            .unwrap();
        pool.spawner().spawn_local(worker).unwrap();
        requests.increment(1);
        let start = clock.now();
        run_virtual_until(&mut pool, &clock, start + INTERVAL * 2);
        store.then((0..hung).map(|_| Action::Hang));
        let mut at = start + INTERVAL * 2;
        while at < start + run_for {
            at += Duration::from_millis(100);
            requests.increment(1);
            run_virtual_until(&mut pool, &clock, at);
        }
    });
    (snapshot(&snapshotter), events)
}

#[test]
fn a_stall_counts_copies_sent_again_and_a_stale_partition_until_a_total_comes_back() {
    let requests = ["counter=requests"];
    // Every copy hangs for long enough that the total goes stale.
    let (metrics, events) = stalled(40, INTERVAL * 6);
    assert_eq!(
        events.with_message("total went stale").len(),
        1,
        "{:?}",
        events.messages()
    );
    assert!(events.with_message("total fresh again").is_empty());
    assert_eq!(gauge(&metrics, "comcount_stale_partitions", &requests), 1.0);
    let unanswered = ["counter=requests", "reason=unanswered"];
    let resent = events
        .with_message("copy resent")
        .iter()
        .filter(|r| r.attribute("reason") == Some("unanswered"))
        .count();
    assert!(resent > 0);
    assert_eq!(
        counter(&metrics, "comcount_flush_resends_total", &unanswered),
        resent as u64
    );

    // A few copies hang, then the store answers again: the total comes back.
    let (metrics, events) = stalled(6, INTERVAL * 8);
    assert_eq!(events.with_message("total went stale").len(), 1);
    assert_eq!(events.with_message("total fresh again").len(), 1);
    assert_eq!(gauge(&metrics, "comcount_stale_partitions", &requests), 0.0);
    let completed = events.with_message("flush completed");
    assert_eq!(
        counter(&metrics, "comcount_flushes_counted_total", &requests),
        completed.len() as u64
    );
    let answered = events.with_message("flush answered");
    let answers: u64 = metrics
        .iter()
        .filter(|m| m.name == "comcount_flush_answers_total")
        .map(|m| match m.value {
            DebugValue::Counter(n) => n,
            _ => panic!("{m:?}"),
        })
        .sum();
    assert_eq!(answers, answered.len() as u64);
    let carried: u64 = completed.iter().map(|r| number(r, "amount")).sum();
    assert_eq!(
        counter(&metrics, "comcount_units_counted_total", &requests),
        carried
    );
}
