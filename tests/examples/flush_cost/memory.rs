//! 4. Memory.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use comcount_core::clock::TokioTimer;
use comcount_core::{Counter, KeySpace, ParticipantId, Worker};
use comcount_redis_rs::RedisStore;
use comcount_tests::connect;
use redis::aio::MultiplexedConnection;

use crate::fleets::{Tallied, Tally};
use crate::server::{clear, participant_connection};

pub(crate) struct Memory {
    pub(crate) interval_key: (String, u64, String),
    pub(crate) fence_key: (String, u64, String),
    pub(crate) counter: usize,
    pub(crate) worker: usize,
    pub(crate) store: usize,
    pub(crate) task_multiplexed: usize,
    pub(crate) task_manager: usize,
}

pub(crate) async fn memory(url: &str, stats: &mut MultiplexedConnection) -> Memory {
    clear(stats).await;
    let tally = Arc::new(Tally::default());
    let participant = ParticipantId::from_u64(0x0123_4567_89ab_cdef);
    let (counter, worker) = Counter::builder("memory", Duration::from_secs(1))
        .prefix("mem:")
        .participant(participant)
        .diagnostics(Tallied(Arc::clone(&tally)))
        .build(
            RedisStore::new(participant_connection(url).await),
            TokioTimer::new(),
        )
        .expect("the settings are valid");
    let task_manager = worker.task_size();
    tokio::spawn(worker);
    counter.increment(1_000_000);
    let deadline = Instant::now() + Duration::from_secs(5);
    while tally.completed.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "no flush within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    counter.close();
    let space = KeySpace::counter("mem:", "memory");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*", space.base()))
        .query_async(stats)
        .await
        .expect("KEYS answers");
    let mut interval_key = None;
    let mut fence_key = None;
    for key in keys {
        let usage: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .arg("SAMPLES")
            .arg(0)
            .query_async(stats)
            .await
            .expect("MEMORY USAGE answers");
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&key)
            .query_async(stats)
            .await
            .expect("OBJECT ENCODING answers");
        let slot = if key == space.fence(participant) {
            &mut fence_key
        } else {
            &mut interval_key
        };
        *slot = Some((key, usage, encoding));
    }

    // Built for its size only, never run: a bare connection does not reconnect.
    let multiplexed = connect::multiplexed(url).await;
    let (other, worker) = Counter::builder("memory-multiplexed", Duration::from_secs(1))
        .prefix("mem:")
        .build(RedisStore::new(multiplexed), TokioTimer::new())
        .expect("the settings are valid");
    let task_multiplexed = worker.task_size();
    drop((other, worker));
    Memory {
        interval_key: interval_key.expect("the flush wrote an interval key"),
        fence_key: fence_key.expect("the flush wrote a fence key"),
        counter: size_of::<Counter>(),
        worker: size_of::<Worker>(),
        store: size_of::<RedisStore<MultiplexedConnection>>(),
        task_multiplexed,
        task_manager,
    }
}

impl Memory {
    pub(crate) fn print(&self) {
        println!("## Redis memory");
        println!();
        println!(
            "After one real flush (`MEMORY USAGE key SAMPLES 0`, Redis's estimate with its \
             allocator's overhead):"
        );
        println!();
        println!("| key | value | encoding | bytes |");
        println!("| --- | --- | --- | ---: |");
        let (key, usage, encoding) = &self.interval_key;
        println!("| interval total `{key}` | an integer | {encoding} | {usage} |");
        let (key, usage, encoding) = &self.fence_key;
        println!("| fence `{key}` | `SEQ:N` | {encoding} | {usage} |");
        println!();
        println!("## Process memory with a RedisStore");
        println!();
        println!("| what | bytes |");
        println!("| --- | ---: |");
        println!("| `size_of::<Counter>()` | {} |", self.counter);
        println!("| `size_of::<Worker>()` | {} |", self.worker);
        println!(
            "| `size_of::<RedisStore<MultiplexedConnection>>()` | {} |",
            self.store
        );
        println!(
            "| `Worker::task_size()`, `RedisStore<MultiplexedConnection>` and `TokioTimer` | {} |",
            self.task_multiplexed
        );
        println!(
            "| `Worker::task_size()`, `RedisStore<ConnectionManager>` and `TokioTimer` | {} |",
            self.task_manager
        );
        println!();
    }
}
