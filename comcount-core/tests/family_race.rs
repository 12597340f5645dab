//! Adds racing evictions, on real threads: threads count into a family of many keys, through
//! the family and through handles on keys, while its worker runs on a thread of its own with
//! the shortest eviction (one interval) and a driver moves a virtual clock along, so that keys
//! are evicted and added again all the time. An add that finds a key as it is evicted must
//! land in the key's next slot: every unit ends up counted in the store, still buffered, or
//! reported by a `flush failed` event.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::{Diagnostics, Event, Reporter};
use comcount_core::{Family, FlushReply, FlushRequest, MemoryStore, Outcome, Store, StoreError};

const INTERVAL: Duration = Duration::from_millis(20);
const KEYS: usize = 2048;
/// The keys are counted a group at a time: each group is hot for one interval, then idle (and
/// evicted) until its turn comes again.
const GROUP: usize = 64;
/// Twice as many as the cores of a small machine: an incrementer the scheduler stops between
/// finding a key and adding to it holds that key for a whole time slice, while its group goes
/// idle and is evicted; that is the race the test is for.
const INCREMENTERS: usize = 4;
/// How many adds an incrementer makes before it yields.
const ADDS_PER_TURN: usize = 256;
/// How many evictions the run must see before it stops; enough to lose some adds, on a
/// two-core machine, if a racing add could be lost.
const EVICTIONS: usize = 100_000;
/// How long the run may take, in real time, to see them: far more than it needs.
const PATIENCE: Duration = Duration::from_secs(120);

fn key(i: usize) -> String {
    format!("key-{i}")
}

/// A memory store that keeps, key by key, the amounts of the flushes it applied: what it
/// counted, whatever interval it went to, and however long ago that interval expired.
#[derive(Clone)]
struct Tallied {
    memory: MemoryStore<VirtualClock>,
    counted: Arc<Mutex<HashMap<String, u64>>>,
}

impl Store for Tallied {
    fn name(&self) -> &str {
        "tallied"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let memory = self.memory.clone();
        let counted = Arc::clone(&self.counted);
        let request = request.clone();
        let report = report.clone();
        async move {
            let reply = memory.flush(&request, &report).await;
            if let Ok(reply) = &reply
                && reply.outcome == Outcome::Applied
            {
                let mut counted = counted.lock().unwrap();
                for entry in &request.entries {
                    *counted.entry(entry.key.to_string()).or_default() += entry.amount;
                }
            }
            reply
        }
    }
}

/// The amounts `flush failed` events reported, key by key.
#[derive(Clone, Default)]
struct Failed(Arc<Mutex<HashMap<String, u64>>>);

impl Diagnostics for Failed {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        if let Event::FlushFailed {
            key,
            dropped,
            unsettled,
            ..
        } = event
        {
            let key = key.unwrap_or("<none>").to_owned();
            *self.0.lock().unwrap().entry(key).or_default() += dropped + unsettled;
        }
    }
}

/// A small, fast generator, so that each thread draws its own keys.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Counts until told to stop: keys of the group that is hot now, through the family or
/// through a handle taken for a few adds. Returns what it counted, key by key.
fn count(family: Family, clock: VirtualClock, stop: Arc<AtomicBool>, seed: u64) -> Vec<u64> {
    let keys: Vec<String> = (0..KEYS).map(key).collect();
    let mut rng = Rng(seed);
    let mut counted = vec![0; KEYS];
    while !stop.load(Ordering::Relaxed) {
        let epoch = (clock.now().as_millis() / INTERVAL.as_millis()) as usize;
        let group = epoch % (KEYS / GROUP);
        for _ in 0..ADDS_PER_TURN {
            let k = group * GROUP + rng.below(GROUP);
            let amount = 1 + rng.below(3) as u64;
            match rng.below(8) {
                0 => {
                    let handle = family.counter(&keys[k]).unwrap();
                    for _ in 0..3 {
                        // A held key is never evicted: an add through its handle lands.
                        handle.try_increment(amount).unwrap();
                        counted[k] += amount;
                    }
                }
                1 => {
                    family.try_increment(&keys[k], amount).unwrap();
                    counted[k] += amount;
                }
                _ => {
                    family.increment(&keys[k], amount);
                    counted[k] += amount;
                }
            }
        }
        // Leaves the driver and the worker their turns.
        thread::yield_now();
    }
    counted
}

#[test]
fn no_add_racing_an_eviction_is_lost() {
    let clock = VirtualClock::new();
    let store = Tallied {
        memory: MemoryStore::with_clock(clock.clone()),
        counted: Arc::default(),
    };
    let failed = Failed::default();
    let (family, worker) = Family::builder("race", INTERVAL)
        .partitions(2)
        .evict_after(INTERVAL)
        .diagnostics(failed.clone())
        .build(store.clone(), clock.clone())
        .unwrap();
    let worker = thread::spawn(move || futures::executor::block_on(worker));
    let stop = Arc::new(AtomicBool::new(false));
    let incrementers: Vec<_> = (0..INCREMENTERS)
        .map(|i| {
            let (family, clock, stop) = (family.clone(), clock.clone(), Arc::clone(&stop));
            thread::spawn(move || count(family, clock, stop, 0x9e37_79b9_7f4a_7c15 + i as u64))
        })
        .collect();

    // The driver: a millisecond of virtual time at a time, watching the family shrink.
    let started = Instant::now();
    let mut evicted = 0;
    let mut len = family.len();
    while evicted < EVICTIONS && started.elapsed() < PATIENCE {
        clock.advance(Duration::from_millis(1));
        thread::yield_now();
        let now = family.len();
        evicted += len.saturating_sub(now);
        len = now;
    }
    stop.store(true, Ordering::Relaxed);
    let incremented = incrementers
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold(vec![0; KEYS], |sum, counted| {
            sum.iter().zip(counted).map(|(a, b)| a + b).collect()
        });
    family.close();
    worker.join().unwrap();
    let intervals = clock.now().as_millis() / INTERVAL.as_millis();
    // Far more evictions than keys: each key was evicted and added back many times.
    assert!(
        evicted >= EVICTIONS,
        "only {evicted} keys seen evicted in {intervals} intervals: the race was not run"
    );

    let counted = store.counted.lock().unwrap().clone();
    let failed = failed.0.lock().unwrap().clone();
    assert_eq!(failed.get("<none>").copied().unwrap_or(0), 0, "{failed:?}");
    for (k, incremented) in incremented.iter().enumerate() {
        let key = key(k);
        let counted = counted.get(&key).copied().unwrap_or(0);
        let failed = failed.get(&key).copied().unwrap_or(0);
        let buffered = family.buffered(&key);
        assert_eq!(
            *incremented,
            counted + buffered + failed,
            "{key}: units lost or doubled (counted {counted}, buffered {buffered}, \
             reported failed {failed}; {evicted} evictions in {intervals} intervals)"
        );
    }
    assert!(
        incremented.iter().all(|n| *n > 0),
        "some key was never counted"
    );
}
