//! How much process memory a lone counter and its worker take, flushing and idle.
//!
//! Builds `FIRST` counters (default 1,000), each with a name of its own and so a participant
//! alone, at `INTERVAL_MS` (default 1,000), all sharing one redis-rs `ConnectionManager`, and
//! increments every one of them every 20 ms. After `SETTLE_S` (default 10) it reads the
//! process's resident memory (`VmRSS`), builds `MORE` counters (default 2,000) the same way,
//! waits as long again and reads it once more. What one counter takes is the difference over
//! `MORE`: the runtime, the connection and the allocator's own overhead cancel out. It then
//! does the same with counters that are built and spawned but never incremented, whose workers
//! wait for a first increment, and the size of one worker's boxed task
//! (`Worker::task_size`, not part of the stable API) for comparison.
//!
//! It uses only what every version of the crate has, so that one copy of this file builds
//! against an older commit as well:
//!
//! ```sh
//! redis-server --port 6390 --save '' --appendonly no --daemonize yes
//! cargo run --release -p comcount-redis-rs --example lone_memory -- redis://127.0.0.1:6390
//! ```
//!
//! Every key is under the prefix `lone-memory:<pid>:`, and expires by itself.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_redis_rs::clock::TokioTimer;
use comcount_redis_rs::redis::aio::ConnectionManager;
use comcount_redis_rs::{Counter, RedisStore, redis};

/// How often every counter is incremented.
const TICK: Duration = Duration::from_millis(20);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The process's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .expect("VmRSS");
    kb * 1024
}

struct Run {
    store: RedisStore<ConnectionManager>,
    interval: Duration,
    prefix: String,
    /// The counters built so far, incremented every tick when `busy`.
    counters: Arc<Mutex<Vec<Counter>>>,
    /// The size of one worker's boxed task.
    task_size: std::sync::atomic::AtomicUsize,
}

impl Run {
    fn build(&self, from: usize, n: usize) {
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        for i in from..from + n {
            let (counter, worker) = Counter::builder(format!("c{i}"), self.interval)
                .prefix(self.prefix.clone())
                .build(self.store.clone(), TokioTimer::new())
                .expect("counter");
            self.task_size
                .store(worker.task_size(), std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(worker);
            counters.push(counter);
        }
    }
}

/// Builds `first`, then `more` counters, each time waiting `settle`; returns the resident
/// memory per counter of the `more`, in bytes.
async fn per_counter(run: &Run, first: usize, more: usize, settle: Duration) -> f64 {
    run.build(0, first);
    tokio::time::sleep(settle).await;
    let before = rss();
    run.build(first, more);
    tokio::time::sleep(settle).await;
    let after = rss();
    (after as f64 - before as f64) / more as f64
}

#[tokio::main]
async fn main() {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let first = env_or("FIRST", 1000) as usize;
    let more = env_or("MORE", 2000) as usize;
    let interval = Duration::from_millis(env_or("INTERVAL_MS", 1000));
    let settle = Duration::from_secs(env_or("SETTLE_S", 10));
    let client = redis::Client::open(url.as_str()).expect("REDIS URL");
    let connection = ConnectionManager::new(client).await.expect("connect");
    let pid = std::process::id();

    let flushing = Run {
        store: RedisStore::new(connection.clone()),
        interval,
        prefix: format!("lone-memory:{pid}:busy:"),
        counters: Arc::default(),
        task_size: Default::default(),
    };
    let driven = Arc::clone(&flushing.counters);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        loop {
            tick.tick().await;
            for counter in driven.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                counter.increment(1);
            }
        }
    });
    let busy = per_counter(&flushing, first, more, settle).await;

    let idle = Run {
        store: RedisStore::new(connection),
        interval,
        prefix: format!("lone-memory:{pid}:idle:"),
        counters: Arc::default(),
        task_size: Default::default(),
    };
    let waiting = per_counter(&idle, first, more, settle).await;
    println!(
        "first={first} more={more} interval_ms={} flushing_bytes_per_counter={busy:.0} \
         idle_bytes_per_counter={waiting:.0} worker_task_bytes={}",
        interval.as_millis(),
        idle.task_size.load(std::sync::atomic::Ordering::Relaxed),
    );
    // The counters' tasks and the driver go with the runtime; their keys expire.
    std::process::exit(0);
}
