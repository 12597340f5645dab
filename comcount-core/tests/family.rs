//! What a family does, on virtual time and the in-memory store: keys evicted and come back.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::future::{Future, ready};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::{
    Builder, Family, FlushReply, FlushRequest, ForFamily, MemoryStore, Outcome, Store, StoreError,
};
use common::runtime::run_virtual_until;
use futures::FutureExt;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

const INTERVAL: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One flush as the store ran it.
#[derive(Clone, Debug)]
struct Call {
    request: FlushRequest,
    applied: bool,
}

/// The memory store, keeping every flush it ran.
#[derive(Clone)]
struct Logged {
    memory: MemoryStore<VirtualClock>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Logged {
    fn new(clock: &VirtualClock) -> Self {
        Self {
            memory: MemoryStore::with_clock(clock.clone()),
            calls: Arc::default(),
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// What the store counted for `key`, over every flush it applied.
    fn counted(&self, key: &str) -> u64 {
        let calls = self.calls.lock().unwrap();
        let applied = calls.iter().filter(|c| c.applied);
        let entries = applied.flat_map(|c| &c.request.entries);
        entries.filter(|e| &*e.key == key).map(|e| e.amount).sum()
    }
}

impl Store for Logged {
    fn name(&self) -> &str {
        "logged"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let reply = self
            .memory
            .flush(request, report)
            .now_or_never()
            .expect("the memory store answers at once");
        self.calls.lock().unwrap().push(Call {
            request: request.clone(),
            applied: reply
                .as_ref()
                .is_ok_and(|reply| reply.outcome == Outcome::Applied),
        });
        ready(reply)
    }
}

/// Participants on one virtual clock and one logged store, their workers on one pool.
struct Bench {
    clock: VirtualClock,
    store: Logged,
    pool: LocalPool,
}

impl Bench {
    fn new() -> Self {
        let clock = VirtualClock::new();
        Self {
            store: Logged::new(&clock),
            clock,
            pool: LocalPool::new(),
        }
    }

    /// Builds a family on the bench's store and runs its worker; the flag turns true when the
    /// worker is done.
    fn family(&self, builder: Builder<ForFamily>) -> (Family, Arc<AtomicBool>) {
        let (family, worker) = builder
            .build(self.store.clone(), self.clock.clone())
            .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let task = async move {
            worker.await;
            flag.store(true, Ordering::SeqCst);
        };
        self.pool.spawner().spawn_local(task).unwrap();
        (family, done)
    }

    /// Runs every worker until `at`, stopping at each timer on the way.
    fn run_until(&mut self, at: Duration) {
        run_virtual_until(&mut self.pool, &self.clock, at);
    }

    fn now(&self) -> Duration {
        self.clock.now()
    }
}

fn builder(name: &str) -> Builder<ForFamily> {
    Family::builder(name, INTERVAL).diagnostics(Recorder::new())
}

#[test]
fn an_idle_key_is_evicted_after_evict_after_and_comes_back_with_nothing_lost() {
    let evict_after = INTERVAL * 3;
    let mut bench = Bench::new();
    let (family, _) = bench.family(builder("idle").evict_after(evict_after));
    family.increment("k", 5);
    // Used again early in interval 1, before the flush of the middle of the interval.
    bench.run_until(ms(1_200));
    family.increment("k", 2);
    let last_use = bench.now();
    let evicted_at = loop {
        bench.run_until(bench.now() + ms(100));
        if family.is_empty() {
            break bench.now();
        }
        assert!(
            bench.now() < INTERVAL * 20,
            "the idle key was never evicted"
        );
    };
    assert!(
        evicted_at >= last_use + evict_after,
        "evicted at {evicted_at:?}, sooner than {evict_after:?} after its last use at \
         {last_use:?}"
    );
    assert!(
        evicted_at <= last_use + evict_after + INTERVAL * 2,
        "evicted at {evicted_at:?}, long after {evict_after:?} past its last use"
    );
    assert_eq!(
        bench.store.counted("k"),
        7,
        "the evicted key had sent everything"
    );

    // Back on its next use, with no total until a flush brings one.
    assert_eq!(family.increment("k", 4), 4);
    assert_eq!(family.len(), 1);
    assert_eq!(family.group_total("k"), None);
    bench.run_until(evicted_at + INTERVAL * 2);
    assert_eq!(bench.store.counted("k"), 11);
    assert_eq!(family.buffered("k"), 0);
}

/// A key only looked up, with the shortest eviction, early in an interval: it stays for the
/// flush that brings its total, as `count` and `group_total` promise.
#[test]
fn a_key_looked_up_stays_for_the_flush_that_brings_its_total() {
    let mut bench = Bench::new();
    let (counting, _) = bench.family(builder("looked"));
    let (looking, _) = bench.family(builder("looked").evict_after(INTERVAL));
    counting.increment("k", 1);
    looking.increment("other", 1);
    bench.run_until(ms(1_100));
    counting.increment("k", 3);
    bench.run_until(ms(2_200));
    assert_eq!(looking.count("k"), 0);
    bench.run_until(ms(2_600));
    assert_eq!(
        looking.group_total("k"),
        Some(3),
        "{:?}",
        bench.store.calls()
    );
}
