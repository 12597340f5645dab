//! A drain on shutdown: `drain` flushes what was counted, waits for it to settle, and stops,
//! within its timeout; on virtual time.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::Recorder;
use comcount_core::testing::{ScriptedStore, Step};
use comcount_core::{Counter, Family, StoreErrorKind};
use futures::FutureExt;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

const INTERVAL: Duration = Duration::from_secs(1);

type Drained = Pin<Box<dyn Future<Output = u64> + Send>>;

/// Runs the pool, moving the clock on by a tenth of an interval at a time, until `drained`
/// completes or `limit` has passed; what it completed with, and when.
fn run_until_drained(
    pool: &mut LocalPool,
    clock: &VirtualClock,
    drained: &mut Drained,
    limit: Duration,
) -> Option<(u64, Duration)> {
    let start = clock.now();
    loop {
        pool.run_until_stalled();
        if let Some(unsent) = drained.as_mut().now_or_never() {
            return Some((unsent, clock.now() - start));
        }
        if clock.now() - start >= limit {
            return None;
        }
        clock.advance(INTERVAL / 10);
    }
}

fn counter(
    store: &ScriptedStore<VirtualClock>,
    clock: &VirtualClock,
    events: &Recorder,
    pool: &LocalPool,
) -> Counter {
    let (counter, worker) = Counter::builder("drained", INTERVAL)
        .diagnostics(events.clone())
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    counter
}

#[test]
fn a_drain_sends_what_was_counted_since_the_last_flush_and_stops() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::with_clock(clock.clone());
    let (events, mut pool) = (Recorder::new(), LocalPool::new());
    let counter = counter(&store, &clock, &events, &pool);
    counter.increment(5);
    pool.run_until_stalled();
    assert_eq!(store.memory().total("{drained}:0"), Some(5));
    // Counted after the flush of interval 0: only a flush in interval 1 can take it.
    counter.increment(3);
    let mut drained: Drained = Box::pin(counter.drain(INTERVAL * 10));
    let (unsent, took) = run_until_drained(&mut pool, &clock, &mut drained, INTERVAL * 10).unwrap();
    assert_eq!(unsent, 0);
    assert!(took <= INTERVAL * 2, "took {took:?}");
    assert_eq!(store.memory().total("{drained}:1"), Some(3));
    assert!(counter.is_closed());
    let stopped = events.with_message("counter stopped");
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0].attribute("unsent"), Some("0"));
    assert!(events.with_message("flush failed").is_empty());
}

#[test]
fn a_counter_never_incremented_drains_at_once() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::with_clock(clock.clone());
    let (events, mut pool) = (Recorder::new(), LocalPool::new());
    let counter = counter(&store, &clock, &events, &pool);
    let mut drained: Drained = Box::pin(counter.drain(INTERVAL));
    pool.run_until_stalled();
    assert_eq!(drained.as_mut().now_or_never(), Some(0));
    let sent: u64 = store.requests().iter().map(|r| r.amount()).sum();
    assert_eq!(sent, 0, "{:?}", store.requests());
    assert!(counter.is_closed());
}

#[test]
fn a_drain_the_store_turns_away_ends_at_its_timeout_and_reports_the_rest() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::with_clock(clock.clone());
    store.otherwise(Step::Fail(StoreErrorKind::Unavailable));
    let (events, mut pool) = (Recorder::new(), LocalPool::new());
    let counter = counter(&store, &clock, &events, &pool);
    counter.increment(4);
    let mut drained: Drained = Box::pin(counter.drain(INTERVAL * 3));
    let (unsent, took) = run_until_drained(&mut pool, &clock, &mut drained, INTERVAL * 10).unwrap();
    assert!(
        took >= INTERVAL * 3 && took <= INTERVAL * 3 + INTERVAL / 10,
        "took {took:?}"
    );
    assert!(counter.is_closed());
    // Whatever did not go is accounted for: in the buffer, or reported as a close reports it.
    let reported = |attribute: &str| -> u64 {
        events
            .with_message("flush failed")
            .iter()
            .map(|r| r.attribute(attribute).unwrap().parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(unsent + reported("dropped") + reported("unsettled"), 4);
    let stopped = events.with_message("counter stopped");
    assert_eq!(stopped[0].attribute("unsent"), Some(&*unsent.to_string()));
}

#[test]
fn a_drain_of_a_worker_that_is_gone_completes_at_once() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::with_clock(clock.clone());
    let (counter, worker) = Counter::builder("gone", INTERVAL)
        .build(store, clock)
        .unwrap();
    counter.increment(2);
    drop(worker);
    assert_eq!(counter.drain(INTERVAL).now_or_never(), Some(2));
}

#[test]
fn a_family_drains_every_partition() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::with_clock(clock.clone());
    let mut pool = LocalPool::new();
    let (family, worker) = Family::builder("tenants", INTERVAL)
        .partitions(4)
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    let keys: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    for key in &keys {
        family.increment(key, 1);
    }
    pool.run_until_stalled();
    for key in &keys {
        family.increment(key, 2);
    }
    let mut drained: Drained = Box::pin(family.drain(INTERVAL * 10));
    let (unsent, _) = run_until_drained(&mut pool, &clock, &mut drained, INTERVAL * 10).unwrap();
    assert_eq!(unsent, 0);
    assert!(family.is_closed());
    let sent: u64 = store.requests().iter().map(|r| r.amount()).sum();
    assert_eq!(sent, 3 * 40, "every unit went out");
}

/// A fleet of four, each instance drained and replaced in turn while the others count, as a
/// rolling deploy does: the store ends up with every unit counted.
#[test]
fn a_fleet_restarted_instance_by_instance_loses_no_units() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::with_clock(clock.clone());
    let (events, mut pool) = (Recorder::new(), LocalPool::new());
    let start = |pool: &LocalPool| {
        let (counter, worker) = Counter::builder("fleet", INTERVAL)
            .diagnostics(events.clone())
            .build(store.clone(), clock.clone())
            .unwrap();
        pool.spawner().spawn_local(worker).unwrap();
        counter
    };
    let mut fleet: Vec<Counter> = (0..4).map(|_| start(&pool)).collect();
    let mut counted = 0u64;
    for restart in 0..8 {
        for _ in 0..7 {
            for counter in &fleet {
                counter.increment(3);
                counted += 3;
            }
            clock.advance(INTERVAL / 5);
            pool.run_until_stalled();
        }
        let old = std::mem::replace(&mut fleet[restart % 4], start(&pool));
        let mut drained: Drained = Box::pin(old.drain(INTERVAL * 5));
        // The others go on counting meanwhile.
        let (unsent, _) = loop {
            for counter in &fleet {
                counter.increment(1);
                counted += 1;
            }
            if let Some(done) = run_until_drained(&mut pool, &clock, &mut drained, INTERVAL / 10) {
                break done;
            }
        };
        assert_eq!(unsent, 0, "restart {restart}");
    }
    for counter in &fleet {
        let mut drained: Drained = Box::pin(counter.drain(INTERVAL * 5));
        let (unsent, _) = run_until_drained(&mut pool, &clock, &mut drained, INTERVAL * 5).unwrap();
        assert_eq!(unsent, 0);
    }
    // Interval keys expire: what the store counted is what the flushes it applied carried.
    let stored: u64 = events
        .with_message("flush completed")
        .iter()
        .map(|r| r.attribute("amount").unwrap().parse::<u64>().unwrap())
        .sum();
    let failed = events.with_message("flush failed");
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(stored, counted);
}

/// Units counted while the drain's flush is in the air go out with one more flush before the
/// counter stops.
#[test]
fn what_is_counted_while_the_drains_flush_is_in_the_air_goes_out_too() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::with_clock(clock.clone());
    let (events, mut pool) = (Recorder::new(), LocalPool::new());
    let counter = counter(&store, &clock, &events, &pool);
    store.then(Step::Hold);
    counter.increment(5);
    let mut drained: Drained = Box::pin(counter.drain(INTERVAL * 10));
    pool.run_until_stalled();
    assert_eq!(store.held(), 1, "the drain's flush is held");
    counter.increment(3);
    assert_eq!(store.release(), 1);
    let (unsent, _) = run_until_drained(&mut pool, &clock, &mut drained, INTERVAL * 10).unwrap();
    assert_eq!(unsent, 0);
    let sent: Vec<u64> = store.requests().iter().map(|r| r.amount()).collect();
    assert_eq!(sent.iter().sum::<u64>(), 8, "{sent:?}");
    assert!(events.with_message("flush failed").is_empty());
}
