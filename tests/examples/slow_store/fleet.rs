//! A fleet per rule: its counters on their own connections through the proxy, what drives
//! them, and what is read of them and of Redis while they count.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use comcount_core::clock::TokioTimer;
use comcount_core::testing::Recorded;
use comcount_core::{Counter, KeySpace};
use comcount_inspect::Reader;
use comcount_redis_rs::RedisStore;
use comcount_tests::bench::Rules;
use comcount_tests::connect::manager_with;
use redis::aio::ConnectionManager;

use crate::options::Settings;
use crate::record::{Tallied, Tally};
use crate::{SAMPLE_EVERY, TICK};

/// A connection that reconnects, with no response timeout of its own: redis-rs's default
/// (500 ms) would turn the slowest round trips into errors before the counter's own timeout
/// saw them.
pub(crate) async fn connect(url: &str) -> ConnectionManager {
    manager_with(url, RedisStore::manager_config().set_response_timeout(None)).await
}

pub(crate) struct Fleet {
    pub(crate) rules: Rules,
    pub(crate) prefix: String,
    pub(crate) space: KeySpace,
    pub(crate) counters: Vec<Counter>,
    pub(crate) tally: Arc<Tally>,
    /// Units counted by every participant together.
    pub(crate) counted: Arc<AtomicU64>,
}

pub(crate) async fn start_fleet(
    rules: Rules,
    settings: &Settings,
    proxy_url: &str,
    tag: &str,
) -> Fleet {
    let prefix = format!("slow:{tag}:");
    let name = rules.label();
    let tally = Arc::new(Tally::new());
    let mut counters = Vec::new();
    for _ in 0..settings.participants {
        let store = Recorded::new(
            RedisStore::new(connect(proxy_url).await),
            Arc::clone(&tally),
        );
        let builder = Counter::builder(name, settings.interval)
            .prefix(prefix.as_str())
            .diagnostics(Tallied(Arc::clone(&tally)));
        let (counter, worker) = rules
            .configure(builder)
            .build(store, TokioTimer::new())
            .expect("valid settings");
        tokio::spawn(worker);
        counters.push(counter);
    }
    Fleet {
        rules,
        space: KeySpace::counter(&prefix, name),
        prefix,
        counters,
        tally,
        counted: Arc::new(AtomicU64::new(0)),
    }
}

/// Starts counting on every participant of the fleet, participant `i` after `i` × `stagger`.
pub(crate) fn start_counting(fleet: &Fleet, stagger: Duration, stop: &Arc<AtomicBool>) {
    let starts = (0..fleet.counters.len() as u32)
        .map(|i| stagger * i)
        .collect();
    tokio::spawn(drive(
        fleet.counters.clone(),
        starts,
        Arc::clone(&fleet.counted),
        Arc::clone(stop),
    ));
}

/// Counts a unit on every participant that has started, every tick until `stop`.
pub(crate) async fn drive(
    counters: Vec<Counter>,
    starts: Vec<Duration>,
    counted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let began = Instant::now();
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    while !stop.load(Ordering::Relaxed) {
        ticks.tick().await;
        let elapsed = began.elapsed();
        let mut units = 0;
        for (counter, start) in counters.iter().zip(&starts) {
            if elapsed >= *start {
                counter.increment(1);
                units += 1;
            }
        }
        counted.fetch_add(units, Ordering::Relaxed);
    }
}

/// Adds up what landed in Redis for each fleet: each interval's total once the server's
/// clock has left it, read before it expires; runs until `done`, then takes the open interval
/// too, since nothing is flushed any more.
pub(crate) async fn read_totals(
    direct: ConnectionManager,
    fleets: Vec<(String, &'static str)>,
    interval: Duration,
    done: Arc<AtomicBool>,
) -> Vec<u64> {
    let mut readers: Vec<(Reader<ConnectionManager>, &str)> = fleets
        .iter()
        .map(|(prefix, name)| {
            let reader = Reader::new(direct.clone(), prefix, interval).expect("valid settings");
            (reader, *name)
        })
        .collect();
    let mut landed = vec![0u64; readers.len()];
    // Per fleet, the first interval not yet added up: the one the run starts in.
    let mut next = Vec::new();
    for (reader, _) in &mut readers {
        next.push(reader.server_time().await.expect("TIME answers").interval);
    }
    loop {
        let last_round = done.load(Ordering::Relaxed);
        for (((reader, name), sum), next) in readers.iter_mut().zip(&mut landed).zip(&mut next) {
            let totals = reader.counter_totals(name).await.expect("the totals read");
            // Oldest first.
            for total in totals.intervals.iter().rev() {
                if total.interval >= *next && (!total.open || last_round) {
                    *sum += total.total.unwrap_or(0);
                    *next = total.interval + 1;
                }
            }
        }
        if last_round {
            return landed;
        }
        tokio::time::sleep(interval / 5).await;
    }
}

/// Asks every participant whether it knows the group's total, every few ms for `window`;
/// returns the share of yes per fleet.
pub(crate) async fn sample_known(fleets: &[Fleet], window: Duration) -> Vec<f64> {
    let deadline = Instant::now() + window;
    let mut known = vec![0u64; fleets.len()];
    let mut samples = vec![0u64; fleets.len()];
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    while Instant::now() < deadline {
        ticks.tick().await;
        for (i, fleet) in fleets.iter().enumerate() {
            for counter in &fleet.counters {
                known[i] += u64::from(counter.group_total().is_some());
                samples[i] += 1;
            }
        }
    }
    known
        .iter()
        .zip(&samples)
        .map(|(k, s)| *k as f64 / (*s).max(1) as f64)
        .collect()
}
