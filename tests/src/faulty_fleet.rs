//! A fleet of counters, or of counter families, that keeps counting while a test breaks the
//! way to Redis.
//!
//! Each participant's store is wrapped in a
//! [`RecordingStore`](crate::recording::RecordingStore), which records every flush the moment
//! it is sent and how it ended: its reply or error, or cut off when the counter gave up on it
//! at its flush timeout (a cut flush may well have run on the server). A reader task
//! meanwhile reads the interval keys straight from the servers as the intervals close, before
//! they expire: a counter's totals, or each partition's hash of a family.
//!
//! [`FaultyFleet::finish`] hands all that to the [`invariants`](crate::invariants), which check,
//! key by key, that nothing was counted twice. [`FaultyFleet::assert_recovers`] measures how
//! soon every participant completed a flush of each of its key spaces after the fault ended.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use comcount_core::builder::Builder;
use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::Recorder;
use comcount_core::{Counter, Family, KeyCounter, KeySpace, ParticipantId, Store, keys};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::connect;
use crate::invariants::{Mark, Participant, PerKey, Report, Writes};
use crate::proxy::Proxy;
use crate::reader::{self, ReadFrom, Reads};
use crate::recording::FlushRecords;
use crate::server::RedisServer;
use crate::settings;
use crate::zipf::Zipf;

/// The counter or family every fleet counts with.
const NAME: &str = "faults";

/// How long a fleet may take to get going before a fault: every participant completes a flush.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How many intervals a fault test must have read from Redis for its checks to mean something.
const INTERVALS_READ: usize = 4;

/// How many increments a family's counting thread makes between two pauses.
const BURST: usize = 4;

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

/// What a fleet counts into.
#[derive(Clone, Copy, Debug)]
pub enum Counting {
    /// One counter, by 1 to 5 at a time.
    Counter,
    /// A family; each increment is for a key drawn from a skewed spread.
    Family(FamilyShape),
}

/// A family's keys and partitions.
#[derive(Clone, Copy, Debug)]
pub struct FamilyShape {
    /// How many keys: `key-0000`, `key-0001`, … from the hottest to the rarest.
    pub keys: usize,
    /// Over how many partitions.
    pub partitions: u32,
    /// The exponent of the spread ([`Zipf`]): 1 makes a few keys hot and most rare.
    pub skew: f64,
    /// How many intervals a key may go unused before it is evicted.
    pub evict_after: u32,
}

/// A participant's handle on what it counts into.
enum Handle {
    Counter(Counter),
    /// A family, and a handle on its hottest key, which is counted through the handle.
    Family {
        family: Family,
        hottest: KeyCounter,
    },
}

impl Handle {
    fn close(&self) {
        match self {
            Handle::Counter(counter) => counter.close(),
            Handle::Family { family, .. } => family.close(),
        }
    }

    /// The group total the participant knows for `key` (the empty key for a counter).
    fn group_total(&self, key: &str) -> Option<u64> {
        match self {
            Handle::Counter(counter) => counter.group_total(),
            Handle::Family { hottest, .. } if key == hottest.key() => hottest.group_total(),
            Handle::Family { family, .. } => family.group_total(key),
        }
    }

    /// What the participant holds unsent for `key`.
    fn buffered(&self, key: &str) -> u64 {
        match self {
            Handle::Counter(counter) => counter.buffered(),
            Handle::Family { family, .. } => family.buffered(key),
        }
    }
}

struct Member {
    id: ParticipantId,
    store: String,
    handle: Arc<Handle>,
    worker: Option<JoinHandle<()>>,
    recorder: Recorder,
}

/// Participants counting together, all the time, through whatever the test does.
pub struct FaultyFleet {
    interval: Duration,
    prefix: String,
    counting: Counting,
    /// The keys counted, hottest first: a counter's one key is the empty one.
    keys: Arc<[String]>,
    /// How many participants join a server or cluster.
    size: usize,
    flush_timeout: Duration,
    resend_window: Option<Duration>,
    records: FlushRecords,
    members: Vec<Member>,
    reads: Reads,
    /// Group totals the participants showed, by key, to be checked against the replies.
    shown: BTreeSet<(String, u64)>,
    stop: Arc<AtomicBool>,
    /// Set to stop the counting threads alone, the reader going on ([`settle`](Self::settle)).
    quiet: Arc<AtomicBool>,
    /// Each participant's counting thread, which returns what it counted, key by key.
    threads: Vec<thread::JoinHandle<Vec<u64>>>,
    reader: Option<JoinHandle<()>>,
}

impl FaultyFleet {
    /// An empty fleet of one counter at the test interval, with the default flush timeout
    /// (the interval, kept within 100 ms – 2 s) and resend window, that joins six participants
    /// to a server or cluster.
    pub fn new(tag: &str) -> Self {
        Self::counting(tag, Counting::Counter)
    }

    /// As [`new`](Self::new), counting into a family of `shape`.
    pub fn family(tag: &str, shape: FamilyShape) -> Self {
        Self::counting(tag, Counting::Family(shape))
    }

    fn counting(tag: &str, counting: Counting) -> Self {
        let interval = settings::interval();
        let keys = match counting {
            Counting::Counter => vec![String::new()],
            Counting::Family(shape) => (0..shape.keys).map(|i| format!("key-{i:04}")).collect(),
        };
        Self {
            interval,
            prefix: settings::unique_prefix(tag),
            counting,
            keys: keys.into(),
            size: 6,
            flush_timeout: interval.clamp(Duration::from_millis(100), Duration::from_secs(2)),
            resend_window: None,
            records: FlushRecords::new(),
            members: Vec::new(),
            reads: Reads::default(),
            shown: BTreeSet::new(),
            stop: Arc::default(),
            quiet: Arc::default(),
            threads: Vec::new(),
            reader: None,
        }
    }

    /// Joins `size` participants to a server or cluster, instead of six.
    pub fn participants(mut self, size: usize) -> Self {
        assert!(size > 0, "a fleet needs participants");
        self.size = size;
        self
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
    ///
    /// # Panics
    ///
    /// For a family, which has a key space per partition ([`spaces`](Self::spaces)).
    pub fn space(&self) -> KeySpace {
        assert!(
            matches!(self.counting, Counting::Counter),
            "a family has a key space per partition"
        );
        KeySpace::counter(&self.prefix, NAME)
    }

    /// The key of the counter's interval `n`.
    pub fn interval_key(&self, n: u64) -> String {
        self.space().interval(n)
    }

    /// Every key space the fleet flushes to: the counter's, or each partition's.
    pub fn spaces(&self) -> Vec<KeySpace> {
        match self.counting {
            Counting::Counter => vec![self.space()],
            Counting::Family(shape) => (0..shape.partitions)
                .map(|p| KeySpace::partition(&self.prefix, NAME, p))
                .collect(),
        }
    }

    /// The keys counted, hottest first (a counter's one key is the empty one).
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The key space of `key`: the counter's, or its partition's.
    pub fn space_of(&self, key: &str) -> KeySpace {
        match self.counting {
            Counting::Counter => self.space(),
            Counting::Family(shape) => KeySpace::partition(
                &self.prefix,
                NAME,
                keys::partition_of(key, shape.partitions),
            ),
        }
    }

    /// The hottest key of each key space, in the order of [`spaces`](Self::spaces).
    pub fn hottest_keys(&self) -> Vec<&str> {
        self.spaces()
            .iter()
            .map(|space| {
                self.keys
                    .iter()
                    .find(|key| self.space_of(key) == *space)
                    .unwrap_or_else(|| panic!("no key of the fleet is in {space:?}"))
                    .as_str()
            })
            .collect()
    }

    /// Adds a participant on `store`; its worker starts at once, and idles until the fleet
    /// starts counting.
    pub fn join<S: Store>(&mut self, store: S) {
        let member = self.members.len();
        let recorder = Recorder::new();
        let id = ParticipantId::random();
        let name = store.name().to_owned();
        let store = self.records.wrap(store, member);
        let (handle, worker) = match self.counting {
            Counting::Counter => {
                let builder = self.configure(Counter::builder(NAME, self.interval), id, &recorder);
                let (counter, worker) = builder.build(store, TokioTimer::new()).unwrap();
                (Handle::Counter(counter), worker)
            }
            Counting::Family(shape) => {
                let builder = Family::builder(NAME, self.interval)
                    .partitions(shape.partitions)
                    .max_keys(shape.keys)
                    .evict_after(self.interval * shape.evict_after);
                let builder = self.configure(builder, id, &recorder);
                let (family, worker) = builder.build(store, TokioTimer::new()).unwrap();
                let hottest = family.counter(&self.keys[0]).unwrap();
                (Handle::Family { family, hottest }, worker)
            }
        };
        self.members.push(Member {
            id,
            store: name,
            handle: Arc::new(handle),
            worker: Some(tokio::spawn(worker)),
            recorder,
        });
    }

    /// The fleet's settings on a counter's or a family's builder.
    fn configure<K>(
        &self,
        builder: Builder<K>,
        id: ParticipantId,
        recorder: &Recorder,
    ) -> Builder<K> {
        let builder = builder
            .prefix(&self.prefix)
            .participant(id)
            .diagnostics(recorder.clone())
            .flush_timeout(self.flush_timeout);
        match self.resend_window {
            Some(window) => builder.resend_window(window),
            None => builder,
        }
    }

    /// The fleet's participants on one standalone server (or a proxy in front of it), in turn
    /// a redis-rs connection manager, a fred client, a connection manager, a fred pool, all
    /// of which reconnect: six make three managers, two fred clients and a pool.
    pub async fn join_standalone(&mut self, url: &str) {
        for i in 0..self.size {
            match i % 4 {
                0 | 2 => self.join(RedisStore::new(connect::manager(url).await)),
                1 => self.join(FredStore::new(connect::fred_client(url).await)),
                _ => self.join(FredStore::new(connect::fred_pool(url, 2).await)),
            }
        }
    }

    /// The fleet's participants on a cluster, in turn a redis-rs cluster connection and a
    /// clustered fred client.
    pub async fn join_cluster(&mut self, cluster: &Cluster) {
        for i in 0..self.size {
            if i % 2 == 0 {
                self.join(RedisStore::new(connect::cluster(cluster).await));
            } else {
                self.join(FredStore::new(connect::fred_cluster(cluster).await));
            }
        }
    }

    /// A server, a proxy in front of it, and the fleet counting through the proxy (started:
    /// see [`start`](Self::start)), read from the server itself.
    pub async fn behind_a_proxy(mut self) -> (RedisServer, Proxy, FaultyFleet) {
        let server = RedisServer::standalone();
        let upstream: SocketAddr = ([127, 0, 0, 1], server.port()).into();
        let proxy = Proxy::start(upstream).await.unwrap();
        self.join_standalone(&proxy.url()).await;
        self.start(ReadFrom::Server(server.port())).await;
        (server, proxy, self)
    }

    /// The fleet on `cluster`, started (see [`start`](Self::start)) and read from every node.
    pub async fn on_cluster(mut self, cluster: &Cluster) -> FaultyFleet {
        self.join_cluster(cluster).await;
        self.start(ReadFrom::Cluster(cluster.ports())).await;
        self
    }

    /// Starts counting (a thread per participant) and reading, then waits until every
    /// participant has completed a flush of each key space, and two intervals more.
    ///
    /// A counter's thread increments by 1 to 5 every 1 to 3 ms. A family's first counts 1
    /// into every key, so that every key is in use and flushed before any fault, then makes
    /// bursts of increments by 1 to 5 for keys drawn from the [`Zipf`] spread every 1 to 3 ms,
    /// the hottest key through a [`KeyCounter`] handle.
    pub async fn start(&mut self, from: ReadFrom) {
        assert!(!self.members.is_empty(), "a fleet needs participants");
        let zipf = match self.counting {
            Counting::Counter => Arc::new(Zipf::new(1, 0.0)),
            Counting::Family(shape) => Arc::new(Zipf::new(shape.keys, shape.skew)),
        };
        for member in &self.members {
            let (handle, stop, quiet) = (
                Arc::clone(&member.handle),
                Arc::clone(&self.stop),
                Arc::clone(&self.quiet),
            );
            let counting = move || !stop.load(Ordering::Relaxed) && !quiet.load(Ordering::Relaxed);
            let (keys, zipf) = (Arc::clone(&self.keys), Arc::clone(&zipf));
            self.threads.push(thread::spawn(move || {
                let mut counted = vec![0; keys.len()];
                match &*handle {
                    Handle::Counter(counter) => {
                        while counting() {
                            let amount = fastrand::u64(1..=5);
                            counted[0] += amount;
                            counter.increment(amount);
                            thread::sleep(Duration::from_millis(fastrand::u64(1..=3)));
                        }
                    }
                    Handle::Family { family, hottest } => {
                        for (key, counted) in keys.iter().zip(&mut counted) {
                            *counted += 1;
                            family.increment(key, 1);
                        }
                        while counting() {
                            for _ in 0..BURST {
                                let (rank, amount) = (zipf.sample(), fastrand::u64(1..=5));
                                counted[rank] += amount;
                                if rank == 0 {
                                    hottest.increment(amount);
                                } else {
                                    family.increment(&keys[rank], amount);
                                }
                            }
                            thread::sleep(Duration::from_millis(fastrand::u64(1..=3)));
                        }
                    }
                }
                counted
            }));
        }
        self.reader = Some(tokio::spawn(reader::read_loop(
            from,
            self.spaces(),
            self.interval,
            self.reads.clone(),
            Arc::clone(&self.stop),
        )));
        let started = Instant::now();
        let times = self.await_recovery(started, START_TIMEOUT).await;
        assert!(
            times.iter().all(Option::is_some),
            "not every participant completed a flush of each key space within \
             {START_TIMEOUT:?} of starting: {times:?}"
        );
        tokio::time::sleep(self.interval * 2).await;
    }

    /// Stops counting, and waits until every participant has flushed all it counted and
    /// has no copy of a flush in the air, at most `patience`, while the reader goes on: the
    /// fleet's every unit is then settled, and [`finish`](Self::finish) finds none unsent and
    /// gives none up at the close.
    pub async fn settle(&self, patience: Duration) {
        self.quiet.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + patience;
        loop {
            let counting = self.threads.iter().any(|t| !t.is_finished());
            let unsent: Vec<String> = self
                .members
                .iter()
                .flat_map(|m| {
                    self.keys
                        .iter()
                        .map(move |key| (m, key, m.handle.buffered(key)))
                        .filter(|(_, _, amount)| *amount > 0)
                        .map(|(m, key, amount)| {
                            format!("{} {}: {amount} of {key:?}", m.store, m.id)
                        })
                })
                .collect();
            let in_flight = self.records.tally().in_flight();
            if !counting && unsent.is_empty() && in_flight == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the fleet did not settle within {patience:?} of the end of counting: \
                 {in_flight} copies in flight, still unsent: {unsent:#?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Where every participant's events stand now.
    pub fn mark(&self) -> Mark {
        Mark::now(self.members.iter().map(|m| &m.recorder))
    }

    /// Waits until each participant has reported `message` after `mark`, at most `patience`.
    pub async fn await_each_said(&self, mark: &Mark, message: &str, patience: Duration) {
        let deadline = Instant::now() + patience;
        while !mark.each_said(self.members.iter().map(|m| &m.recorder), message)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// How long after `since` each participant had completed a flush (applied, or a
    /// duplicate of an applied one) of every key space, waiting at most `patience`; `None` for
    /// one that did not.
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
        let spaces = self.spaces();
        self.records.inspect(|records| {
            // Per participant and key space: its first flush counted at or after `since`.
            let mut first: HashMap<(usize, &str), Instant> = HashMap::new();
            for record in records {
                if let Some(at) = record.counted_at().filter(|at| *at >= since) {
                    let earliest = first.entry((record.member, record.space())).or_insert(at);
                    *earliest = (*earliest).min(at);
                }
            }
            (0..self.members.len())
                .map(|member| {
                    spaces
                        .iter()
                        .map(|space| first.get(&(member, space.base())).map(|at| *at - since))
                        .collect::<Option<Vec<Duration>>>()
                        .map(|times| times.into_iter().max().unwrap_or_default())
                })
                .collect()
        })
    }

    /// Checks that every participant completed a flush of each key space within `allowed` of
    /// `fault_end` (plus a margin for a busy machine: one interval and 250 ms), and keeps
    /// counting two intervals more.
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
                .take(24)
                .map(|r| r.describe(fault_end))
                .collect();
            assert!(
                time.is_some_and(|t| t <= allowed + margin),
                "{} participant {} did not complete a flush of each key space within \
                 {allowed:?} (+ {margin:?}) of the fault's end: {time:?}; its flushes since: \
                 {since:#?}",
                member.store,
                member.id,
            );
        }
        tokio::time::sleep(self.interval * 2).await;
    }

    /// Waits until every participant knows the group total of the hottest key of each key
    /// space again (as a fault that lasts leaves them unknown), at most four intervals and
    /// 5 s; notes them, for [`finish`](Self::finish) to check that each came from a reply.
    pub async fn assert_totals_known_again(&mut self) {
        let hottest: Vec<String> = self.hottest_keys().into_iter().map(str::to_owned).collect();
        let patience = self.interval * 4 + Duration::from_secs(5);
        let deadline = Instant::now() + patience;
        loop {
            let mut unknown = Vec::new();
            for member in &self.members {
                for key in &hottest {
                    match member.handle.group_total(key) {
                        Some(total) => {
                            self.shown.insert((key.clone(), total));
                        }
                        None => unknown.push(format!("{} {}: {key:?}", member.store, member.id)),
                    }
                }
            }
            if unknown.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "group totals still unknown {patience:?} after the fleet recovered: {unknown:#?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops counting, reads the interval keys one last time, and checks every invariant
    /// that holds with `writes` (see [`Report::assert_all`]), the group totals the
    /// participants were seen to show, and, for a family, that Redis was read to hold a total
    /// for every one of its keys.
    pub async fn finish(mut self, writes: Writes) -> Report {
        self.stop.store(true, Ordering::SeqCst);
        let counted: Vec<Vec<u64>> = self
            .threads
            .drain(..)
            .map(|thread| thread.join().unwrap())
            .collect();
        if let Some(reader) = self.reader.take() {
            reader.await.unwrap();
        }
        let closing = self.mark();
        for member in &self.members {
            member.handle.close();
        }
        for member in &mut self.members {
            if let Some(worker) = member.worker.take() {
                tokio::time::timeout(Duration::from_secs(10), worker)
                    .await
                    .expect("a worker did not stop after close()")
                    .unwrap();
            }
        }
        let keys = &self.keys;
        let participants = self
            .members
            .iter()
            .zip(counted)
            .map(|(m, counted)| Participant {
                id: m.id,
                store: m.store.clone(),
                recorder: m.recorder.clone(),
                counted: keys
                    .iter()
                    .zip(counted)
                    .filter(|(_, amount)| *amount > 0)
                    .map(|(key, amount)| (key.clone(), amount))
                    .collect(),
                // What the participants still hold was never sent, and never will be.
                buffered: keys
                    .iter()
                    .map(|key| (key.clone(), m.handle.buffered(key)))
                    .filter(|(_, amount)| *amount > 0)
                    .collect::<PerKey>(),
            })
            .collect();
        let report = Report::new(
            self.interval,
            self.records.records(),
            self.reads.all(),
            participants,
        )
        .closing_at(closing);
        report.assert_all(writes);
        report.assert_enough_evidence(INTERVALS_READ);
        report.assert_key_totals_came_from_replies(&self.shown);
        if let Counting::Family(shape) = self.counting {
            let read = report.keys_read();
            let unread: Vec<&String> = keys.iter().filter(|k| !read.contains(k.as_str())).collect();
            assert!(
                unread.is_empty(),
                "{} of the family's {} keys were never read from Redis: {unread:?}",
                unread.len(),
                shape.keys
            );
        }
        report
    }
}

impl Drop for FaultyFleet {
    fn drop(&mut self) {
        // A test that fails half-way still stops its threads and workers.
        self.stop.store(true, Ordering::SeqCst);
        for member in &self.members {
            member.handle.close();
        }
    }
}
