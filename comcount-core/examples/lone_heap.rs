//! How many bytes of heap a lone counter and its worker keep, flushing and idle, as the
//! allocator counts them: no Redis, and none of the noise of resident memory.
//!
//! Builds `COUNTERS` counters (default 2,000), each with a name of its own and so a participant
//! alone, at 1 s intervals on one [`MemoryStore`], spawns their workers on one thread and
//! drives them on virtual time: every counter is incremented every 20 ms, for ten intervals.
//! It then reads the heap still allocated, less what was allocated before they were built,
//! over `COUNTERS`. Dropping the counters and their workers leaves what the store keeps for
//! them (their fences and totals, which Redis would keep in its own process): that part is
//! told apart. Then the same with counters never incremented, whose workers wait for a first
//! increment; and the size of one worker's boxed task (`Worker::task_size`, not part of the
//! stable API), which is in both.
//!
//! The store answers at once, so no flush is in the air when the heap is read. What a flush
//! in the air takes besides (a Redis client's command and future) is in the resident memory
//! that `comcount-redis-rs`'s `lone_memory` example measures.
//!
//! ```sh
//! cargo run --release -p comcount-core --example lone_heap
//! ```

use std::alloc::System;
use std::time::Duration;

use comcount_core::clock::VirtualClock;
use comcount_core::{Counter, MemoryStore};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static ALLOC: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const INTERVAL: Duration = Duration::from_secs(1);
/// How often every counter is incremented.
const TICK: Duration = Duration::from_millis(20);
/// How many intervals the counters run before the heap is read.
const INTERVALS: u32 = 10;

/// What one counter keeps, in bytes: with its worker, and the store's part of that.
struct PerCounter {
    kept: f64,
    store: f64,
}

/// Bytes allocated and not freed since `region` began.
fn live(region: &Region<'_, System>) -> i64 {
    let change = region.change();
    change.bytes_allocated as i64 - change.bytes_deallocated as i64
        + change.bytes_reallocated as i64
}

/// Builds `n` counters under `prefix`, runs them for [`INTERVALS`] intervals (incrementing
/// them if `busy`), and measures what each keeps. Returns it with the size of a worker's task.
fn measure(n: usize, prefix: &str, busy: bool) -> (PerCounter, usize) {
    let clock = VirtualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let mut pool = LocalPool::new();
    let mut counters = Vec::with_capacity(n);
    let mut task_size = 0;
    let region = Region::new(ALLOC);
    for i in 0..n {
        let (counter, worker) = Counter::builder(format!("c{i}"), INTERVAL)
            .prefix(prefix)
            .build(store.clone(), clock.clone())
            .expect("counter");
        task_size = worker.task_size();
        pool.spawner().spawn_local(worker).expect("spawn");
        counters.push(counter);
    }
    let ticks = INTERVALS * (INTERVAL.as_millis() / TICK.as_millis()) as u32;
    for _ in 0..ticks {
        if busy {
            counters.iter().for_each(|counter| {
                counter.increment(1);
            });
        }
        pool.run_until_stalled();
        clock.advance(TICK);
    }
    pool.run_until_stalled();
    let kept = live(&region);
    // The workers end once their counters are dropped; the store keeps their keys.
    drop(counters);
    pool.run_until_stalled();
    drop(pool);
    let store_part = live(&region);
    let per = |bytes: i64| bytes as f64 / n as f64;
    let result = PerCounter {
        kept: per(kept),
        store: per(store_part),
    };
    drop(store);
    (result, task_size)
}

fn main() {
    let n = std::env::var("COUNTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let (flushing, task) = measure(n, "busy:", true);
    let (idle, _) = measure(n, "idle:", false);
    println!(
        "counters={n} interval_ms={} flushing_bytes_per_counter={:.0} (store {:.0}) \
         idle_bytes_per_counter={:.0} (store {:.0}) worker_task_bytes={task}",
        INTERVAL.as_millis(),
        flushing.kept,
        flushing.store,
        idle.kept,
        idle.store,
    );
}
