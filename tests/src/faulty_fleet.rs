//! A fleet of counters that keeps counting while a test breaks the way to Redis.
//!
//! Each participant's store is wrapped in a [`RecordingStore`], which records every flush the
//! moment it is sent and how it ended: its reply or error, or cut off when the counter gave up
//! on it at its flush timeout (a cut flush may well have run on the server). A reader task
//! meanwhile reads the interval keys straight from the servers as the intervals close, before
//! they expire.
//!
//! [`FaultyFleet::finish`] hands all that to the [`invariants`](crate::invariants), which check
//! that nothing was counted twice. [`FaultyFleet::assert_recovers`] measures how soon every
//! participant completed a flush after the fault ended.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::Recorder;
use comcount_core::{Counter, KeySpace, ParticipantId, Store};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::connect;
use crate::invariants::{Mark, Participant, Report, Writes};
use crate::reader::{self, ReadFrom, Reads};
use crate::recording::{FlushRecords, RecordingStore};
use crate::settings;

/// The counter every fleet counts with.
const NAME: &str = "faults";

/// How long a fleet may take to get going before a fault: every participant completes a flush.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How many intervals a fault test must have read from Redis for its checks to mean something.
const INTERVALS_READ: usize = 4;

/// Runs one fault test on a runtime of its own, one test of the binary at a time: the checks
/// measure recovery in real time, and two fleets at once on a small machine would only measure
/// each other.
pub fn run<F: Future<Output = ()>>(test: F) {
    static SERIAL: Mutex<()> = Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(test);
}

struct Member {
    id: ParticipantId,
    store: String,
    counter: Counter,
    worker: Option<JoinHandle<()>>,
    recorder: Recorder,
    /// What its thread counted into it.
    counted: Arc<AtomicU64>,
}

/// Participants counting together, all the time, through whatever the test does.
pub struct FaultyFleet {
    interval: Duration,
    prefix: String,
    flush_timeout: Duration,
    resend_window: Option<Duration>,
    records: FlushRecords,
    members: Vec<Member>,
    reads: Reads,
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
    reader: Option<JoinHandle<()>>,
}

impl FaultyFleet {
    /// An empty fleet at the test interval, with the default flush timeout (the interval, kept
    /// within 100 ms – 2 s) and resend window.
    pub fn new(tag: &str) -> Self {
        let interval = settings::interval();
        Self {
            interval,
            prefix: settings::unique_prefix(tag),
            flush_timeout: interval.clamp(Duration::from_millis(100), Duration::from_secs(2)),
            resend_window: None,
            records: FlushRecords::new(),
            members: Vec::new(),
            reads: Reads::default(),
            stop: Arc::default(),
            threads: Vec::new(),
            reader: None,
        }
    }

    /// Resends unanswered flushes for `window` only (before any participant joins).
    pub fn resend_window(mut self, window: Duration) -> Self {
        assert!(self.members.is_empty(), "set the window before joining");
        self.resend_window = Some(window);
        self
    }

    /// The interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The participants' flush timeout.
    pub fn flush_timeout(&self) -> Duration {
        self.flush_timeout
    }

    /// The counter's keys.
    pub fn space(&self) -> KeySpace {
        KeySpace::counter(&self.prefix, NAME)
    }

    /// The key of the counter's interval `n`.
    pub fn interval_key(&self, n: u64) -> String {
        self.space().interval(n)
    }

    /// Adds a participant on `store`; its worker starts at once, and idles until the fleet
    /// starts counting.
    pub fn join<S: Store>(&mut self, store: S) {
        let member = self.members.len();
        let recorder = Recorder::new();
        let id = ParticipantId::random();
        let name = store.name().to_owned();
        let mut builder = Counter::builder(NAME, self.interval)
            .prefix(&self.prefix)
            .participant(id)
            .diagnostics(recorder.clone())
            .flush_timeout(self.flush_timeout);
        if let Some(window) = self.resend_window {
            builder = builder.resend_window(window);
        }
        let (counter, worker) = builder
            .build(
                RecordingStore::new(store, member, self.records.clone()),
                TokioTimer::new(),
            )
            .unwrap();
        self.members.push(Member {
            id,
            store: name,
            counter,
            worker: Some(tokio::spawn(worker)),
            recorder,
            counted: Arc::default(),
        });
    }

    /// Six participants on one standalone server (or a proxy in front of it): three redis-rs
    /// connection managers, two fred clients and a fred pool, all of which reconnect.
    pub async fn join_standalone(&mut self, url: &str) {
        for _ in 0..3 {
            self.join(RedisStore::new(connect::manager(url).await));
        }
        for _ in 0..2 {
            self.join(FredStore::new(connect::fred_client(url).await));
        }
        self.join(FredStore::new(connect::fred_pool(url, 2).await));
    }

    /// Six participants on a cluster: three redis-rs cluster connections, three clustered fred
    /// clients.
    pub async fn join_cluster(&mut self, cluster: &Cluster) {
        for _ in 0..3 {
            self.join(RedisStore::new(connect::cluster(cluster).await));
            self.join(FredStore::new(connect::fred_cluster(cluster).await));
        }
    }

    /// Starts counting (a thread per participant, incrementing by 1 to 5 every 1 to 3 ms) and
    /// reading, then waits until every participant has completed a flush, and two more
    /// intervals.
    pub async fn start(&mut self, from: ReadFrom) {
        assert!(!self.members.is_empty(), "a fleet needs participants");
        for member in &self.members {
            let counter = member.counter.clone();
            let (counted, stop) = (Arc::clone(&member.counted), Arc::clone(&self.stop));
            self.threads.push(thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let amount = fastrand::u64(1..=5);
                    counted.fetch_add(amount, Ordering::SeqCst);
                    counter.increment(amount);
                    thread::sleep(Duration::from_millis(fastrand::u64(1..=3)));
                }
            }));
        }
        self.reader = Some(tokio::spawn(reader::read_loop(
            from,
            self.space(),
            self.interval,
            self.reads.clone(),
            Arc::clone(&self.stop),
        )));
        let started = Instant::now();
        let times = self.await_recovery(started, START_TIMEOUT).await;
        assert!(
            times.iter().all(Option::is_some),
            "not every participant completed a flush within {START_TIMEOUT:?} of starting: \
             {times:?}"
        );
        tokio::time::sleep(self.interval * 2).await;
    }

    /// Where every participant's events stand now.
    pub fn mark(&self) -> Mark {
        Mark::now(self.members.iter().map(|m| &m.recorder))
    }

    /// How long after `since` each participant first completed a flush (applied, or a
    /// duplicate of an applied one), waiting at most `patience`; `None` for one that did not.
    pub async fn await_recovery(
        &self,
        since: Instant,
        patience: Duration,
    ) -> Vec<Option<Duration>> {
        loop {
            let times = self.recovery(since);
            if times.iter().all(Option::is_some) || since.elapsed() > patience {
                return times;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn recovery(&self, since: Instant) -> Vec<Option<Duration>> {
        let records = self.records.records();
        (0..self.members.len())
            .map(|member| {
                records
                    .iter()
                    .filter(|r| r.member == member)
                    .filter_map(|r| r.counted_at())
                    .filter(|at| *at >= since)
                    .min()
                    .map(|at| at - since)
            })
            .collect()
    }

    /// Checks that every participant completed a flush within `allowed` of `fault_end` (plus a
    /// margin for a busy machine: one interval and 250 ms), and keeps counting two intervals
    /// more.
    pub async fn assert_recovers(&self, fault_end: Instant, allowed: Duration) {
        let margin = self.interval + Duration::from_millis(250);
        let times = self
            .await_recovery(fault_end, allowed + margin + Duration::from_secs(5))
            .await;
        eprintln!(
            "recovery after the fault, per participant (allowed {allowed:?} + {margin:?}): \
             {times:?}"
        );
        for (index, (member, time)) in self.members.iter().zip(&times).enumerate() {
            let since: Vec<String> = self
                .records
                .of_member_since(index, fault_end)
                .iter()
                .take(12)
                .map(|r| r.describe(fault_end))
                .collect();
            assert!(
                time.is_some_and(|t| t <= allowed + margin),
                "{} participant {} did not complete a flush within {allowed:?} (+ {margin:?}) \
                 of the fault's end: {time:?}; its flushes since: {since:#?}",
                member.store,
                member.id,
            );
        }
        tokio::time::sleep(self.interval * 2).await;
    }

    /// Stops counting, reads the interval keys one last time, and checks every invariant
    /// that holds with `writes` (see [`Report::assert_all`]).
    pub async fn finish(mut self, writes: Writes) -> Report {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            thread.join().unwrap();
        }
        if let Some(reader) = self.reader.take() {
            reader.await.unwrap();
        }
        for member in &self.members {
            member.counter.close();
        }
        for member in &mut self.members {
            if let Some(worker) = member.worker.take() {
                tokio::time::timeout(Duration::from_secs(10), worker)
                    .await
                    .expect("a worker did not stop after close()")
                    .unwrap();
            }
        }
        let participants = self
            .members
            .iter()
            .map(|m| Participant {
                id: m.id,
                store: m.store.clone(),
                recorder: m.recorder.clone(),
                counted: m.counted.load(Ordering::SeqCst),
                // What the counters still hold was never sent, and never will be.
                buffered: m.counter.buffered(),
            })
            .collect();
        let report = Report::new(
            self.interval,
            self.records.records(),
            self.reads.all(),
            participants,
        );
        report.assert_all(writes);
        report.assert_enough_evidence(INTERVALS_READ);
        report
    }
}

impl Drop for FaultyFleet {
    fn drop(&mut self) {
        // A test that fails half-way still stops its threads and workers.
        self.stop.store(true, Ordering::SeqCst);
        for member in &self.members {
            member.counter.close();
        }
    }
}
