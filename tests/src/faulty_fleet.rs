//! A fleet of counters that keeps counting while a test breaks the way to Redis, and the checks
//! every fault test makes afterwards.
//!
//! Each participant's store is wrapped twice: in a [`LoggingStore`], which logs every flush that
//! came back, and, inside it, in a tracer that notes every flush the moment it is sent, and its
//! reply or error if one ever comes. The tracer also sees the copies the counter gave up on at
//! its flush timeout, which may well have run on the server. A reader task meanwhile reads the
//! interval keys straight from the servers as the intervals close, before they expire.
//!
//! From all that, [`FaultyFleet::finish`] checks that nothing was counted twice: no interval
//! in Redis ever held more than the participants sent to it, each at most once; no flush
//! applied twice; no participant added twice to one interval; no `BUSYKEY` anywhere.
//! [`FaultyFleet::await_recovery`] measures how soon every participant completed a flush after
//! the fault ended, and the [`Report`] holds what the counters said.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::{Record, Recorder, Reporter};
use comcount_core::{
    Counter, FlushReply, FlushRequest, Outcome, ParticipantId, Store, StoreErrorKind,
};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::connect;
use crate::logging::{FlushLog, Logged, LoggingStore};
use crate::settings;

/// The counter every fleet counts with.
const NAME: &str = "faults";

/// How long a fleet may take to get going before a fault: every participant completes a flush.
const START_TIMEOUT: Duration = Duration::from_secs(20);

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

/// Milliseconds since the epoch by this machine's clock, which the test servers share.
fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap()
}

/// One flush as sent to a store, and what became of it.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// The participant's index in the fleet.
    pub member: usize,
    /// What was sent.
    pub request: FlushRequest,
    /// When it was sent.
    pub sent: Instant,
    /// Its reply or error, if one came before the counter stopped waiting.
    pub done: Option<Done>,
}

/// How a flush ended.
#[derive(Clone, Debug)]
pub struct Done {
    /// When.
    pub at: Instant,
    /// The reply, or the error's kind and text.
    pub result: Result<FlushReply, (StoreErrorKind, String)>,
}

impl Attempt {
    /// Whether the flush came back counted (applied now, or applied before by another copy).
    fn completed(&self) -> Option<Instant> {
        match &self.done {
            Some(Done {
                at,
                result: Ok(reply),
            }) if matches!(reply.outcome, Outcome::Applied | Outcome::Duplicate) => Some(*at),
            _ => None,
        }
    }
}

#[derive(Clone, Default)]
struct Attempts(Arc<Mutex<Vec<Attempt>>>);

impl Attempts {
    fn lock(&self) -> MutexGuard<'_, Vec<Attempt>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Notes every flush as it is sent, and its end if it has one.
struct Traced<S> {
    inner: S,
    member: usize,
    attempts: Attempts,
}

impl<S: Store> Store for Traced<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, comcount_core::StoreError>> + Send {
        let index = {
            let mut attempts = self.attempts.lock();
            attempts.push(Attempt {
                member: self.member,
                request: request.clone(),
                sent: Instant::now(),
                done: None,
            });
            attempts.len() - 1
        };
        let flush = self.inner.flush(request, report);
        let attempts = self.attempts.clone();
        async move {
            let result = flush.await;
            attempts.lock()[index].done = Some(Done {
                at: Instant::now(),
                result: result
                    .as_ref()
                    .map(|r| *r)
                    .map_err(|e| (e.kind(), e.to_string())),
            });
            result
        }
    }
}

/// One value read from a server.
#[derive(Clone, Debug)]
struct Read {
    interval: u64,
    value: Option<u64>,
    /// When the read was sent, by the machine's clock in ms.
    at_ms: u64,
    port: u16,
}

/// Where the reader reads the interval keys.
pub enum ReadFrom {
    /// A standalone server's port (not a proxy's: the reader must not suffer the fault).
    Server(u16),
    /// Every node of a cluster. Each key is asked of every node, the importing node of a
    /// migrating slot with `ASKING`; nodes that do not hold the key answer with an error.
    Cluster(Vec<u16>),
}

struct Member {
    id: ParticipantId,
    store: String,
    counter: Counter,
    worker: Option<JoinHandle<()>>,
    recorder: Recorder,
}

/// Where each participant's events stood at some moment.
pub struct Mark(Vec<usize>);

/// Participants counting together, all the time, through whatever the test does.
pub struct FaultyFleet {
    interval: Duration,
    prefix: String,
    flush_timeout: Duration,
    resend_window: Option<Duration>,
    log: FlushLog,
    attempts: Attempts,
    members: Vec<Member>,
    reads: Arc<Mutex<Vec<Read>>>,
    sent: Arc<AtomicU64>,
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
            log: FlushLog::default(),
            attempts: Attempts::default(),
            members: Vec::new(),
            reads: Arc::default(),
            sent: Arc::default(),
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

    /// The key of the counter's interval `n`.
    pub fn interval_key(&self, n: u64) -> String {
        format!("{}{{{NAME}}}:{n}", self.prefix)
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
        let traced = Traced {
            inner: store,
            member,
            attempts: self.attempts.clone(),
        };
        let (counter, worker) = builder
            .build(
                LoggingStore::new(traced, self.log.clone()),
                TokioTimer::new(),
            )
            .unwrap();
        self.members.push(Member {
            id,
            store: name,
            counter,
            worker: Some(tokio::spawn(worker)),
            recorder,
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
            let (sent, stop) = (Arc::clone(&self.sent), Arc::clone(&self.stop));
            self.threads.push(thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let amount = fastrand::u64(1..=5);
                    sent.fetch_add(amount, Ordering::SeqCst);
                    counter.increment(amount);
                    thread::sleep(Duration::from_millis(fastrand::u64(1..=3)));
                }
            }));
        }
        let (ports, cluster) = match from {
            ReadFrom::Server(port) => (vec![port], false),
            ReadFrom::Cluster(ports) => (ports, true),
        };
        self.reader = Some(tokio::spawn(read_loop(
            ports,
            cluster,
            format!("{}{{{NAME}}}", self.prefix),
            self.interval,
            Arc::clone(&self.reads),
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
        Mark(
            self.members
                .iter()
                .map(|m| m.recorder.records().len())
                .collect(),
        )
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

    /// What became of one participant's flushes sent after `since` (the first dozen).
    fn outcomes_since(&self, member: usize, since: Instant) -> Vec<String> {
        self.attempts
            .lock()
            .iter()
            .filter(|a| a.member == member && a.sent >= since)
            .take(12)
            .map(|a| {
                let result = match &a.done {
                    None => "no reply before the flush timeout".to_owned(),
                    Some(Done { result: Ok(r), .. }) => format!("{:?}", r.outcome),
                    Some(Done {
                        result: Err((_, e)),
                        ..
                    }) => e.clone(),
                };
                format!(
                    "seq {} expect {} at +{:?}: {result}",
                    a.request.seq,
                    a.request.expect,
                    a.sent - since
                )
            })
            .collect()
    }

    fn recovery(&self, since: Instant) -> Vec<Option<Duration>> {
        let attempts = self.attempts.lock();
        (0..self.members.len())
            .map(|member| {
                attempts
                    .iter()
                    .filter(|a| a.member == member)
                    .filter_map(Attempt::completed)
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
            assert!(
                time.is_some_and(|t| t <= allowed + margin),
                "{} participant {} did not complete a flush within {allowed:?} (+ {margin:?}) \
                 of the fault's end: {time:?}; its flushes since: {:#?}",
                member.store,
                member.id,
                self.outcomes_since(index, fault_end)
            );
        }
        tokio::time::sleep(self.interval * 2).await;
    }

    /// Stops counting, reads the interval keys one last time, and checks that nothing was
    /// counted twice. `data_may_be_lost` for a fault that can lose writes the server
    /// acknowledged (a restart, a killed primary), which drops the check that Redis holds at
    /// least what was applied.
    pub async fn finish(mut self, data_may_be_lost: bool) -> Report {
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
        // What the counters still hold was never sent, and never will be.
        let unsent = self.members.iter().map(|m| m.counter.buffered()).sum();
        let report = Report {
            unsent,
            interval: self.interval,
            attempts: self.attempts.lock().clone(),
            log: self.log.entries(),
            reads: self.reads.lock().unwrap().clone(),
            members: self
                .members
                .iter()
                .map(|m| (m.id, m.store.clone(), m.recorder.clone()))
                .collect(),
            sent: self.sent.load(Ordering::SeqCst),
        };
        report.assert_nothing_counted_twice(!data_may_be_lost);
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

/// Reads the interval keys around now, every third of an interval, until stopped.
async fn read_loop(
    ports: Vec<u16>,
    cluster: bool,
    base: String,
    interval: Duration,
    reads: Arc<Mutex<Vec<Read>>>,
    stop: Arc<AtomicBool>,
) {
    let mut connections: HashMap<u16, MultiplexedConnection> = HashMap::new();
    loop {
        // One more round after the stop: the last closed intervals are final by then.
        let last = stop.load(Ordering::SeqCst);
        for &port in &ports {
            read_round(port, cluster, &base, interval, &mut connections, &reads).await;
        }
        if last {
            return;
        }
        tokio::time::sleep(interval / 3).await;
    }
}

async fn read_round(
    port: u16,
    cluster: bool,
    base: &str,
    interval: Duration,
    connections: &mut HashMap<u16, MultiplexedConnection>,
    reads: &Mutex<Vec<Read>>,
) {
    let limit = interval.max(Duration::from_millis(200));
    let mut connection = match connections.get(&port) {
        Some(connection) => connection.clone(),
        None => {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(limit))
                .set_response_timeout(Some(limit));
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
            match client
                .get_multiplexed_async_connection_with_config(&config)
                .await
            {
                Ok(connection) => {
                    connections.insert(port, connection.clone());
                    connection
                }
                Err(_) => return,
            }
        }
    };
    let at_ms = now_ms();
    let now = at_ms / ms(interval);
    let numbers: Vec<u64> = (now.saturating_sub(3)..=now + 1).collect();
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for n in &numbers {
        if cluster {
            pipe.cmd("ASKING").ignore();
        }
        pipe.cmd("GET").arg(format!("{base}:{n}"));
    }
    let values: Vec<redis::RedisResult<Option<u64>>> = match pipe.query_async(&mut connection).await
    {
        Ok(values) => values,
        Err(_) => {
            // A dead or hung connection: a new one next round.
            connections.remove(&port);
            return;
        }
    };
    let mut reads = reads.lock().unwrap();
    for (n, value) in numbers.iter().zip(values) {
        if let Ok(value) = value {
            reads.push(Read {
                interval: *n,
                value,
                at_ms,
                port,
            });
        }
    }
}

/// What a fleet did, once stopped.
pub struct Report {
    interval: Duration,
    attempts: Vec<Attempt>,
    log: Vec<Logged>,
    reads: Vec<Read>,
    members: Vec<(ParticipantId, String, Recorder)>,
    sent: u64,
    unsent: u64,
}

impl Report {
    fn assert_nothing_counted_twice(&self, nothing_lost: bool) {
        let index: HashMap<ParticipantId, usize> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, (id, _, _))| (*id, i))
            .collect();

        // A flush keeps its amount from its first send to its settling.
        let mut amounts: HashMap<(usize, u64), u64> = HashMap::new();
        for attempt in &self.attempts {
            let amount = *amounts
                .entry((attempt.member, attempt.request.seq))
                .or_insert(attempt.request.amount);
            assert_eq!(
                amount, attempt.request.amount,
                "participant {} sent flush {} with two amounts",
                attempt.member, attempt.request.seq
            );
        }

        // By the replies: each flush applied at most once, each participant adding to each
        // interval at most once, and only to the interval it expected.
        let mut applied_seqs: HashMap<(usize, u64), u32> = HashMap::new();
        let mut applied: BTreeMap<u64, BTreeMap<usize, u64>> = BTreeMap::new();
        for entry in &self.log {
            let Ok(reply) = entry.result else { continue };
            let member = index[&entry.request.participant];
            if reply.outcome != Outcome::WrongInterval {
                assert_eq!(reply.interval, entry.request.expect, "{entry:?}");
            }
            if reply.outcome != Outcome::Applied {
                continue;
            }
            let count = applied_seqs.entry((member, entry.request.seq)).or_default();
            *count += 1;
            assert_eq!(
                *count, 1,
                "participant {member}'s flush {} was applied twice: {entry:?}",
                entry.request.seq
            );
            let previous = applied
                .entry(reply.interval)
                .or_default()
                .insert(member, entry.request.amount);
            assert!(
                previous.is_none(),
                "participant {member} added to interval {} twice: {previous:?} and {entry:?}",
                reply.interval
            );
        }

        // By Redis's own keys: an interval never holds more than every participant's one
        // addition to it, at most the largest flush it sent there, or exactly the one the
        // replies say was applied.
        let mut most_sent: BTreeMap<u64, BTreeMap<usize, u64>> = BTreeMap::new();
        for attempt in &self.attempts {
            let most = most_sent
                .entry(attempt.request.expect)
                .or_default()
                .entry(attempt.member)
                .or_default();
            *most = (*most).max(attempt.request.amount);
        }
        let mut highest: BTreeMap<u64, u64> = BTreeMap::new();
        for read in &self.reads {
            if let Some(value) = read.value {
                let high = highest.entry(read.interval).or_default();
                *high = (*high).max(value);
            }
        }
        let none = BTreeMap::new();
        for (n, value) in &highest {
            let applied_here = applied.get(n).unwrap_or(&none);
            let sent_here = most_sent.get(n).unwrap_or(&none);
            let bound: u64 = sent_here
                .iter()
                .map(|(member, most)| applied_here.get(member).copied().unwrap_or(*most))
                .sum();
            assert!(
                *value <= bound,
                "interval {n} held {value} in Redis, more than its participants sent to it \
                 ({bound}): applied {applied_here:?}, largest sent {sent_here:?}"
            );
        }

        // Across intervals: each flush counts in one interval at most, so the intervals read
        // hold no more than the flushes that may have landed in them, each taken once. A flush
        // the replies place in an interval counts there only; one every copy of which was
        // answered without a write counts nowhere.
        let mut landed: HashMap<(usize, u64), u64> = HashMap::new();
        for entry in &self.log {
            if let Ok(reply) = entry.result
                && reply.outcome == Outcome::Applied
            {
                let member = index[&entry.request.participant];
                landed.insert((member, entry.request.seq), reply.interval);
            }
        }
        let mut flushes: HashMap<(usize, u64), (u64, bool, bool)> = HashMap::new();
        for attempt in &self.attempts {
            let (_, aimed_at_read, never_applied) = flushes
                .entry((attempt.member, attempt.request.seq))
                .or_insert((attempt.request.amount, false, true));
            *aimed_at_read |= highest.contains_key(&attempt.request.expect);
            *never_applied &= match &attempt.done {
                Some(Done { result: Ok(r), .. }) => matches!(
                    r.outcome,
                    Outcome::WrongInterval | Outcome::Fenced | Outcome::Stale
                ),
                Some(Done {
                    result: Err((kind, _)),
                    ..
                }) => matches!(kind, StoreErrorKind::Refused | StoreErrorKind::Unavailable),
                None => false,
            };
        }
        let may_hold: u64 = flushes
            .iter()
            .map(
                |(flush, (amount, aimed_at_read, never_applied))| match landed.get(flush) {
                    Some(n) if highest.contains_key(n) => *amount,
                    Some(_) => 0,
                    None if *aimed_at_read && !*never_applied => *amount,
                    None => 0,
                },
            )
            .sum();
        let held: u64 = highest.values().sum();
        assert!(
            held <= may_hold,
            "the intervals read held {held} in Redis, more than the flushes that may have \
             landed in them carried ({may_hold}): a flush counted in two intervals"
        );

        // And all of them together no more than the fleet counted and sent.
        assert!(
            held <= self.sent - self.unsent,
            "the intervals read held {held} in Redis, more than the fleet counted and sent ({})",
            self.sent - self.unsent
        );

        // And Redis holds what the replies say was applied, once the interval has closed.
        if nothing_lost {
            for (n, by_member) in &applied {
                let closed_at = (n + 1) * ms(self.interval);
                let read_closed = self
                    .reads
                    .iter()
                    .any(|r| r.interval == *n && r.at_ms > closed_at && r.value.is_some());
                if !read_closed {
                    continue;
                }
                let total: u64 = by_member.values().sum();
                let value = highest.get(n).copied().unwrap_or(0);
                assert!(
                    value >= total,
                    "interval {n} held {value} in Redis, less than the applied flushes carried \
                     ({total}): {by_member:?}"
                );
            }
        }

        // No fault may leave a key split across nodes, which Redis reports as BUSYKEY.
        for attempt in &self.attempts {
            if let Some(Done {
                result: Err((_, text)),
                ..
            }) = &attempt.done
            {
                assert!(!text.contains("BUSYKEY"), "{attempt:?}");
            }
        }
        for (_, _, recorder) in &self.members {
            for record in recorder.records() {
                for (_, value) in &record.attributes {
                    assert!(!value.contains("BUSYKEY"), "{record:?}");
                }
            }
        }

        // The checks had something to check.
        let applied_total: u64 = applied.values().flat_map(|m| m.values()).sum();
        assert!(applied_total > 0 && applied_total <= self.sent);
        assert!(
            highest.len() >= 4,
            "only {} intervals read from Redis: {:?}",
            highest.len(),
            highest
        );
        let failed = self
            .attempts
            .iter()
            .filter(|a| !matches!(&a.done, Some(Done { result: Ok(_), .. })))
            .count();
        let ports: std::collections::BTreeSet<u16> = self.reads.iter().map(|r| r.port).collect();
        let failures: Vec<usize> = self
            .members
            .iter()
            .map(|(_, _, r)| r.with_message("flush failed").len())
            .collect();
        eprintln!(
            "{} flushes sent, {failed} without a reply; {} intervals counted, {} read from \
             Redis (ports {ports:?}), holding {held} of at most {may_hold}; {applied_total} \
             applied of {} sent; flush failed by participant: {failures:?}",
            self.attempts.len(),
            applied.len(),
            highest.len(),
            self.sent
        );
    }

    /// The events of every participant after `mark` with `message`, by participant.
    pub fn since(&self, mark: &Mark, message: &str) -> Vec<Vec<Record>> {
        self.members
            .iter()
            .zip(&mark.0)
            .map(|((_, _, recorder), from)| {
                recorder.records()[*from..]
                    .iter()
                    .filter(|r| r.message == message)
                    .cloned()
                    .collect()
            })
            .collect()
    }

    /// Asserts that every participant reported `message` after `mark`.
    pub fn assert_each_said(&self, mark: &Mark, message: &str) {
        for ((id, store, _), said) in self.members.iter().zip(self.since(mark, message)) {
            assert!(
                !said.is_empty(),
                "{store} participant {id} did not report {message:?}"
            );
        }
    }

    /// Every `flush failed` any participant reported.
    pub fn flush_failures(&self) -> Vec<Record> {
        self.members
            .iter()
            .flat_map(|(_, _, r)| r.with_message("flush failed"))
            .collect()
    }

    /// Asserts that no participant gave up a flush that may have been applied: with the
    /// default resend window, every unanswered flush is resent until it is settled, and only
    /// flushes turned away (nothing written) are dropped.
    pub fn assert_no_unanswered_flush_dropped(&self) {
        for record in self.flush_failures() {
            let error = record.attribute("error").unwrap_or_default();
            assert!(
                error.starts_with("store refused the flush")
                    || error.starts_with("store turned the flush away"),
                "a flush that may have been applied was dropped: {record:?}"
            );
        }
    }

    /// How many `script loaded` events the fleet reported after `mark`.
    pub fn scripts_loaded_since(&self, mark: &Mark) -> usize {
        self.since(mark, "script loaded").iter().map(Vec::len).sum()
    }

    /// Flushes sent (the copies the counter gave up on included) that came back as
    /// duplicates of a copy applied before.
    pub fn duplicates(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| {
                matches!(&a.done, Some(Done { result: Ok(r), .. }) if r.outcome == Outcome::Duplicate)
            })
            .count()
    }

    /// The interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}
