//! 2. Flush fleets.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use comcount_core::Counter;
use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_redis_rs::RedisStore;
use comcount_tests::recording::{self, FlushRecords};
use redis::aio::MultiplexedConnection;

use crate::WARMUP;
use crate::server::{Snapshot, clear, participant_connection};

/// What the counters of a fleet reported, through their diagnostics.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) completed: AtomicU64,
    pub(crate) failed: AtomicU64,
}

pub(crate) struct Tallied(pub(crate) Arc<Tally>);

impl Diagnostics for Tallied {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        match event {
            Event::FlushCompleted { .. } => {
                self.0.completed.fetch_add(1, Ordering::Relaxed);
            }
            Event::FlushFailed { .. } => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

pub(crate) struct FleetRow {
    /// What became of the flushes sent in the window.
    pub(crate) outcomes: recording::Tally,
    pub(crate) interval: Duration,
    pub(crate) counters: usize,
    pub(crate) participants: usize,
    pub(crate) seconds: f64,
    pub(crate) flushes: u64,
    pub(crate) failed: u64,
    pub(crate) evalsha: (u64, u64),
    pub(crate) redis_cpu: f64,
    pub(crate) client_cpu: f64,
    pub(crate) keys: u64,
    pub(crate) memory_growth: i64,
}

impl FleetRow {
    pub(crate) fn handles(&self) -> usize {
        self.counters * self.participants
    }

    pub(crate) fn offered(&self) -> f64 {
        self.handles() as f64 / self.interval.as_secs_f64()
    }

    pub(crate) fn flushes_per_s(&self) -> f64 {
        self.flushes as f64 / self.seconds
    }

    pub(crate) fn usec_per_call(&self) -> f64 {
        self.evalsha.1 as f64 / self.evalsha.0.max(1) as f64
    }

    pub(crate) fn cpu_per_flush(&self) -> f64 {
        self.redis_cpu * 1e6 / self.flushes.max(1) as f64
    }

    pub(crate) fn cpu_per_call(&self) -> f64 {
        self.redis_cpu * 1e6 / self.evalsha.0.max(1) as f64
    }

    pub(crate) fn calls_per_s(&self) -> f64 {
        self.evalsha.0 as f64 / self.seconds
    }
}

/// Runs `counters × participants` counter handles with the sweep interval and measures them.
pub(crate) async fn flush_fleet(
    url: &str,
    stats: &mut MultiplexedConnection,
    interval: Duration,
    counters: usize,
    participants: usize,
    window: Duration,
) -> FleetRow {
    clear(stats).await;
    let empty = Snapshot::take(stats).await;
    let tally = Arc::new(Tally::default());
    let records = FlushRecords::tally_only();
    let stop = Arc::new(AtomicBool::new(false));
    let mut drivers = Vec::new();
    let mut all = Vec::new();
    for _ in 0..participants {
        // A participant is a process: one connection for all its counters.
        let connection = participant_connection(url).await;
        let mut handles = Vec::new();
        for c in 0..counters {
            let (counter, worker) = Counter::builder(format!("c{c}"), interval)
                .prefix("flush:")
                .diagnostics(Tallied(Arc::clone(&tally)))
                .build(
                    records.wrap(RedisStore::new(connection.clone()), 0),
                    TokioTimer::new(),
                )
                .expect("the settings are valid");
            tokio::spawn(worker);
            handles.push(counter);
        }
        all.extend(handles.iter().cloned());
        let stop = Arc::clone(&stop);
        // Something to flush in every interval of every counter.
        drivers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for counter in &handles {
                    counter.increment(1);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    tokio::time::sleep(WARMUP).await;
    let (completed, failed) = tally_now(&tally);
    let outcomes_before = records.tally();
    let before = Snapshot::take(stats).await;
    tokio::time::sleep(window).await;
    let after = Snapshot::take(stats).await;
    let (completed_after, failed_after) = tally_now(&tally);
    let outcomes_after = records.tally();
    stop.store(true, Ordering::Relaxed);
    for driver in drivers {
        driver.await.expect("a driver ends");
    }
    for counter in &all {
        counter.close();
    }
    FleetRow {
        outcomes: outcomes_after - outcomes_before,
        interval,
        counters,
        participants,
        seconds: (after.at - before.at).as_secs_f64(),
        flushes: completed_after - completed,
        failed: failed_after - failed,
        evalsha: after.command_since(&before, "evalsha"),
        redis_cpu: after.redis_cpu - before.redis_cpu,
        client_cpu: after.client_cpu - before.client_cpu,
        keys: after.keys,
        memory_growth: after.used_memory as i64 - empty.used_memory as i64,
    }
}

pub(crate) fn tally_now(tally: &Tally) -> (u64, u64) {
    (
        tally.completed.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
    )
}
