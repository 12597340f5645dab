//! Many counters on a store that cannot serve them all, on virtual time: the store works
//! through one flush at a time, in order, copies cut off by their sender included, as a
//! single Redis server does. Asked for twice what it can serve, the counters must keep it busy
//! with flushes that settle, not with copies nobody waits for.
//!
//! The counters are a fleet's: fifty tenants, each counted by four participants. (A counter
//! that a single participant flushes only every other interval cannot know a group total: the
//! interval before each of its flushes holds no key.)
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::clock::{Clock, Timer, VirtualClock};
use comcount_core::diagnostics::{Diagnostics, Event, Reporter};
use comcount_core::{
    Counter, FlushReply, FlushRequest, MemoryStore, Outcome, ParticipantId, Store, StoreError,
};
use futures::FutureExt;
use futures::channel::oneshot;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

use common::runtime::run_virtual_until;

const INTERVAL: Duration = Duration::from_millis(100);
/// What one flush costs the store: it serves a hundred an interval.
const SERVICE: Duration = Duration::from_millis(1);
const TENANTS: usize = 50;
const PARTICIPANTS: usize = 4;
const INTERVALS: u32 = 60;
const WARM_UP: u32 = 10;

type Pending = (
    FlushRequest,
    oneshot::Sender<Result<FlushReply, StoreError>>,
);

/// A store with one server thread: flushes queue, and each takes [`SERVICE`] of it, whether
/// anyone still waits for its answer or not.
#[derive(Clone)]
struct Queued {
    clock: VirtualClock,
    memory: MemoryStore<VirtualClock>,
    queue: Arc<Mutex<VecDeque<Pending>>>,
    /// Per `(participant, seq)`, how many copies arrived.
    copies: Arc<Mutex<HashMap<(u64, u64), u32>>>,
    served: Arc<AtomicU64>,
    wrong: Arc<AtomicU64>,
}

impl Queued {
    fn new(clock: VirtualClock) -> Self {
        Self {
            memory: MemoryStore::with_clock(clock.clone()),
            clock,
            queue: Arc::default(),
            copies: Arc::default(),
            served: Arc::default(),
            wrong: Arc::default(),
        }
    }

    /// The server: takes the queue in order, one flush per [`SERVICE`].
    async fn serve(self) {
        loop {
            let next = self.queue.lock().unwrap().pop_front();
            match next {
                Some((request, answer)) => {
                    self.clock.sleep(SERVICE).await;
                    let reply = self
                        .memory
                        .flush(&request, &Reporter::new("server", Arc::new(Quiet)))
                        .now_or_never()
                        .unwrap();
                    self.served.fetch_add(1, Ordering::Relaxed);
                    if reply
                        .as_ref()
                        .is_ok_and(|r| r.outcome == Outcome::WrongInterval)
                    {
                        self.wrong.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = answer.send(reply);
                }
                None => self.clock.sleep(SERVICE).await,
            }
        }
    }

    /// Copies beyond the first of each flush.
    fn resent(&self) -> u64 {
        let copies = self.copies.lock().unwrap();
        copies.values().map(|n| u64::from(n - 1)).sum()
    }
}

impl Store for Queued {
    fn name(&self) -> &str {
        "queued"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let (answer, answered) = oneshot::channel();
        *self
            .copies
            .lock()
            .unwrap()
            .entry((request.participant.as_u64(), request.seq))
            .or_default() += 1;
        self.queue
            .lock()
            .unwrap()
            .push_back((request.clone(), answer));
        async move {
            answered
                .await
                .unwrap_or_else(|_| Err(StoreError::unanswered("server gone")))
        }
    }
}

struct Quiet;

impl Diagnostics for Quiet {
    fn record(&self, _counter: &str, _event: &Event<'_>) {}
}

/// When each participant settled a flush.
#[derive(Clone)]
struct Settled(
    Arc<Mutex<Vec<(u64, Duration)>>>,
    VirtualClock,
    ParticipantId,
);

impl Diagnostics for Settled {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        if let Event::FlushCompleted { .. } = event {
            self.0.lock().unwrap().push((self.2.as_u64(), self.1.now()));
        }
    }
}

#[test]
fn twice_the_load_a_store_can_serve_degrades_gracefully() {
    let clock = VirtualClock::new();
    let store = Queued::new(clock.clone());
    let settled = Settled(Arc::default(), clock.clone(), ParticipantId::from_u64(0));
    let mut pool = LocalPool::new();
    pool.spawner().spawn_local(store.clone().serve()).unwrap();
    let counters: Vec<(Counter, u64)> = (0..TENANTS * PARTICIPANTS)
        .map(|i| {
            let participant = ParticipantId::random();
            let (counter, worker) = Counter::builder(format!("tenant-{}", i % TENANTS), INTERVAL)
                .participant(participant)
                .diagnostics(Settled(Arc::clone(&settled.0), clock.clone(), participant))
                .build(store.clone(), clock.clone())
                .unwrap();
            pool.spawner().spawn_local(worker).unwrap();
            (counter, participant.as_u64())
        })
        .collect();

    let mut known = 0usize;
    let mut samples = 0usize;
    let mut served_at_warm_up = 0;
    let mut resent_at_warm_up = 0;
    for n in 1..=INTERVALS {
        for (counter, _) in &counters {
            counter.increment(1);
        }
        let until = INTERVAL * n;
        run_virtual_until(&mut pool, &clock, until);
        if n == WARM_UP {
            served_at_warm_up = store.served.load(Ordering::Relaxed);
            resent_at_warm_up = store.resent();
        }
        if n > WARM_UP {
            samples += counters.len();
            known += counters
                .iter()
                .filter(|(c, _)| c.group_total().is_some())
                .count();
        }
    }

    let measured = INTERVALS - WARM_UP;
    let capacity = u64::from(measured) * (INTERVAL.as_millis() / SERVICE.as_millis()) as u64;
    let settled_log = settled.0.lock().unwrap().clone();
    let warm = INTERVAL * WARM_UP;
    let useful = settled_log.iter().filter(|(_, at)| *at > warm).count() as u64;
    let served = store.served.load(Ordering::Relaxed) - served_at_warm_up;
    assert!(
        useful * 10 >= capacity * 8,
        "{useful} flushes settled in {measured} intervals, under 80% of the {capacity} the \
         store can serve (it served {served})"
    );
    // No counter is starved: each settles a flush every few intervals.
    let mut last: HashMap<u64, Duration> = HashMap::new();
    let mut longest = Duration::ZERO;
    for (participant, at) in settled_log.iter().filter(|(_, at)| *at > warm) {
        let since = last.insert(*participant, *at).unwrap_or(warm);
        longest = longest.max(*at - since);
    }
    let starved: HashSet<_> = counters
        .iter()
        .filter(|(_, p)| !last.contains_key(p))
        .map(|(c, p)| (c.name().to_owned(), *p))
        .collect();
    eprintln!(
        "settled {useful} of capacity {capacity}, served {served}, resent {}, longest gap \
         {longest:?}, known {known}/{samples}, wrong {}",
        store.resent() - resent_at_warm_up,
        store.wrong.load(Ordering::Relaxed)
    );
    assert!(starved.is_empty(), "never settled: {starved:?}");
    assert!(
        longest <= INTERVAL * 8,
        "a counter went {longest:?} without a settled flush"
    );
    assert!(
        known * 2 > samples,
        "the total was known in {known} of {samples} samples"
    );
    // Back off, do not pile on: copies beyond the first stay a small share.
    let resent = store.resent() - resent_at_warm_up;
    assert!(
        resent * 10 <= served,
        "{resent} resent copies among {served} served"
    );
}
