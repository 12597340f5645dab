//! 1. Capacity: a closed loop at saturation.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use comcount_core::diagnostics::Reporter;
use comcount_core::{FlushRequest, KeySpace, Outcome, ParticipantId, Store};
use comcount_redis_rs::RedisStore;
use comcount_tests::bench::{Quiet, process_cpu, redis_cpu};
use redis::aio::ConnectionManager;

use crate::connect;

/// Tasks in the capacity loop, each with one flush in flight.
pub(crate) const CAPACITY_TASKS: usize = 256;
/// How long the capacity loop is measured, after a second of warm-up.
pub(crate) const CAPACITY_WINDOW: Duration = Duration::from_secs(5);

pub(crate) struct Capacity {
    pub(crate) load: Load,
    pub(crate) applied_per_s: f64,
    /// The share of calls applied.
    pub(crate) applied_share: f64,
    pub(crate) cpu_per_applied_us: f64,
    pub(crate) client_cpu_per_applied_us: f64,
}

/// What the capacity loop's flushes write.
#[derive(Clone, Copy)]
pub(crate) enum Load {
    /// One counter's key, with an interval of 1000 days and a fresh participant per call, so
    /// that every call is applied: the cheapest flush there is, since it finds its keys in
    /// the CPU's cache and no key expires.
    OneKey,
    /// The keys of `names` counters with the sweep's interval, taken in turn, each by its own
    /// participant, as many counters that flush back to back would write them: every call
    /// makes an interval key that expires three intervals later, and reads and sets a fence
    /// of its own.
    Counters { names: u64, interval_ms: u64 },
}

impl Load {
    pub(crate) fn label(self) -> String {
        match self {
            Load::OneKey => "one key".to_owned(),
            Load::Counters { names, .. } => format!("{names} counters' keys"),
        }
    }

    /// The request of the `call`-th flush (counted from 1).
    pub(crate) fn request(self, call: u64) -> FlushRequest {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("the clock is past 1970")
            .as_millis() as u64;
        match self {
            Load::OneKey => {
                let interval_ms: u64 = 1000 * 86_400_000;
                FlushRequest::new(
                    KeySpace::counter("capacity:", "c"),
                    ParticipantId::random(),
                    interval_ms,
                )
                .with_expect(now_ms / interval_ms)
                .with_fence_ttl_ms(60_000)
            }
            Load::Counters { names, interval_ms } => {
                // A name comes round again `names` calls later, after a few intervals at the
                // store's pace, so its participant has not added to the interval yet; the call
                // number is a sequence number that grows for every participant.
                let name = call % names;
                FlushRequest::new(
                    KeySpace::counter("capacity:", &format!("tenant{name}")),
                    ParticipantId::from_u64(name + 1),
                    interval_ms,
                )
                .with_seq(call)
                .with_expect(now_ms / interval_ms)
            }
        }
        .with_amount(1)
    }
}

/// Applied flushes per second when every reply is followed at once by the next flush.
pub(crate) async fn capacity(url: &str, stats: &mut ConnectionManager, load: Load) -> Capacity {
    let store = Arc::new(RedisStore::new(connect(url, None, None).await));
    let report = Reporter::new("capacity", Arc::new(Quiet));
    // Call numbers go on from the last capacity loop, so that a fence left by one is behind
    // every sequence number of the next.
    static CALLS: AtomicU64 = AtomicU64::new(1);
    let calls = &CALLS;
    let applied = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..CAPACITY_TASKS {
        let (store, report, applied, stop) = (
            Arc::clone(&store),
            report.clone(),
            Arc::clone(&applied),
            Arc::clone(&stop),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let request = load.request(calls.fetch_add(1, Ordering::Relaxed));
                let reply = store.flush(&request, &report).await.expect("a reply");
                if reply.outcome == Outcome::Applied {
                    applied.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (start, cpu_before, client_before, applied_before, calls_before) = (
        Instant::now(),
        redis_cpu(stats).await,
        process_cpu(),
        applied.load(Ordering::Relaxed),
        calls.load(Ordering::Relaxed),
    );
    tokio::time::sleep(CAPACITY_WINDOW).await;
    let count = applied.load(Ordering::Relaxed) - applied_before;
    let sent = calls.load(Ordering::Relaxed) - calls_before;
    let client = process_cpu() - client_before;
    let (seconds, cpu_after) = (start.elapsed().as_secs_f64(), redis_cpu(stats).await);
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a capacity task ends");
    }
    Capacity {
        load,
        applied_per_s: count as f64 / seconds,
        applied_share: count as f64 / sent.max(1) as f64,
        cpu_per_applied_us: (cpu_after - cpu_before) * 1e6 / count.max(1) as f64,
        client_cpu_per_applied_us: client * 1e6 / count.max(1) as f64,
    }
}
