//! A rolling restart on a real Redis: instances stop one at a time, each draining its counter
//! before the next takes its place, and no unit counted is lost or counted twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use comcount_core::clock::TokioTimer;
use comcount_core::{Counter, KeySpace, Store};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::reader::{ReadFrom, Reads, read_loop};
use comcount_tests::server::RedisServer;
use comcount_tests::{connect, settings};

/// How many instances count at once, and how many lives each has.
const INSTANCES: usize = 3;
const LIVES: usize = 3;

/// One instance: `LIVES` counters in turn, each counting a unit every few milliseconds for a
/// few intervals, then taken out of traffic and drained. Returns the units it counted.
async fn instance<S: Store + Clone>(
    store: S,
    name: String,
    prefix: String,
    stagger: Duration,
) -> u64 {
    let interval = settings::interval();
    let mut counted = 0;
    tokio::time::sleep(stagger).await;
    for life in 0..LIVES {
        let (counter, worker) = Counter::builder(&name, interval)
            .prefix(&prefix)
            .build(store.clone(), TokioTimer::new())
            .unwrap();
        tokio::spawn(worker);
        let until = tokio::time::Instant::now() + interval * 3;
        while tokio::time::Instant::now() < until {
            counter.increment(1);
            counted += 1;
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        // Out of traffic: nothing more is counted, and what was is sent before the counter
        // stops. Redis takes one flush of a participant an interval, so this may take two.
        let unsent = counter.drain(interval * 10).await;
        assert_eq!(
            unsent,
            0,
            "{}: life {life} stopped with {unsent} units unsent",
            store.name()
        );
    }
    counted
}

async fn rolling_restart_loses_no_units<S: Store + Clone>(
    store: S,
    server: &RedisServer,
    tag: &str,
) {
    let interval = settings::interval();
    let prefix = settings::unique_prefix(tag);
    let name = "rolling".to_owned();
    let space = KeySpace::counter(&prefix, &name);
    let reads = Reads::default();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn(read_loop(
        ReadFrom::Server(server.port()),
        vec![space.clone()],
        interval,
        reads.clone(),
        Arc::clone(&stop),
    ));
    let counted = Arc::new(AtomicU64::new(0));
    let instances: Vec<_> = (0..INSTANCES)
        .map(|i| {
            let (store, name, prefix) = (store.clone(), name.clone(), prefix.clone());
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let stagger = settings::interval() * u32::try_from(i).unwrap();
                let units = instance(store, name, prefix, stagger).await;
                counted.fetch_add(units, Ordering::SeqCst);
            })
        })
        .collect();
    for instance in instances {
        instance.await.unwrap();
    }
    // Every counter has drained, so the last interval written is closed within an interval.
    settings::sleep(interval * 2).await;
    stop.store(true, Ordering::SeqCst);
    reader.await.unwrap();

    // A total only grows, so the largest read of each interval is what it came to.
    let mut held = std::collections::BTreeMap::new();
    for read in reads.all() {
        if let Some(totals) = read.totals {
            let total = totals.total();
            let entry = held.entry(read.interval).or_insert(0);
            *entry = total.max(*entry);
        }
    }
    let stored: u64 = held.values().sum();
    let counted = counted.load(Ordering::SeqCst);
    assert!(counted > 0, "{}: nothing was counted", store.name());
    assert_eq!(
        stored,
        counted,
        "{}: the instances counted {counted} units, Redis holds {stored} over intervals {held:?}",
        store.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_restarted_instance_by_instance_loses_no_units_redis_rs() {
    let server = RedisServer::standalone();
    let store = RedisStore::new(connect::manager(&server.url()).await);
    rolling_restart_loses_no_units(store, &server, "drain-rs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_restarted_instance_by_instance_loses_no_units_fred() {
    let server = RedisServer::standalone();
    let store = FredStore::new(connect::fred_client(&server.url()).await);
    rolling_restart_loses_no_units(store, &server, "drain-fred").await;
}
