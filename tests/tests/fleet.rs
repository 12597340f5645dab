//! Eight participants, mixing clients, count concurrently for a dozen intervals. Afterwards the
//! flush log and Redis's own keys must agree: no interval holds more than was really sent to
//! it, each participant added to each interval at most once, every participant saw the same
//! totals, and every count a participant returned obeys the max rule.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::Recorder;
use comcount_core::{Counter, Outcome, ParticipantId, Store, StoreErrorKind};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::inspect::{Inspector, RedisInspector};
use comcount_tests::logging::{FlushLog, LoggingStore};
use comcount_tests::settings::{self, sleep};
use comcount_tests::{connect, shared};
use tokio::task::JoinHandle;

/// How many intervals the fleet counts for.
const INTERVALS: u32 = 12;
/// How many threads increment each participant's counter.
const THREADS_EACH: usize = 2;

struct Participant {
    counter: Counter,
    worker: JoinHandle<()>,
    recorder: Recorder,
}

struct Fleet {
    prefix: String,
    log: FlushLog,
    participants: Vec<Participant>,
}

impl Fleet {
    fn new() -> Self {
        Self {
            prefix: settings::unique_prefix("fleet"),
            log: FlushLog::default(),
            participants: Vec::new(),
        }
    }

    fn join<S: Store>(&mut self, store: S) {
        let recorder = Recorder::new();
        let (counter, worker) = Counter::builder("fleet", settings::interval())
            .prefix(&self.prefix)
            .participant(ParticipantId::random())
            .diagnostics(recorder.clone())
            .build(
                LoggingStore::new(store, self.log.clone()),
                TokioTimer::new(),
            )
            .unwrap();
        self.participants.push(Participant {
            counter,
            worker: tokio::spawn(worker),
            recorder,
        });
    }

    fn key_base(&self) -> String {
        format!("{}{{fleet}}", self.prefix)
    }
}

/// What one incrementing thread saw.
#[derive(Default)]
struct Seen {
    /// Counts that broke the max rule: (amount, count returned, all amounts sent so far).
    violations: Vec<(u64, u64, u64)>,
    /// Every group total the counter reported.
    group_totals: BTreeSet<u64>,
    increments: u64,
}

async fn run<I: Inspector>(mut fleet: Fleet, inspector: I) {
    let interval = settings::interval();
    let base = fleet.key_base();
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    let threads: Vec<_> = fleet
        .participants
        .iter()
        .flat_map(|p| (0..THREADS_EACH).map(|_| p.counter.clone()))
        .map(|counter| {
            let (sent, stop) = (Arc::clone(&sent), Arc::clone(&stop));
            thread::spawn(move || {
                let mut seen = Seen::default();
                while !stop.load(Ordering::Relaxed) {
                    let amount = fastrand::u64(1..=5);
                    sent.fetch_add(amount, Ordering::SeqCst);
                    let count = counter.increment(amount);
                    let sent_now = sent.load(Ordering::SeqCst);
                    // max(group total of a closed interval, own buffer): at least what this
                    // call added, and never more than the whole group sent so far.
                    if count < amount || count > sent_now {
                        seen.violations.push((amount, count, sent_now));
                    }
                    if let Some(total) = counter.group_total() {
                        seen.group_totals.insert(total);
                    }
                    seen.increments += 1;
                    thread::sleep(Duration::from_millis(fastrand::u64(1..=3)));
                }
                seen
            })
        })
        .collect();

    // While the fleet counts, read the interval keys: once an interval has closed its key is
    // final, and it lives two more intervals at least, so the last value read is its total.
    let mut last_read: BTreeMap<u64, u64> = BTreeMap::new();
    let counting = async {
        sleep(interval * INTERVALS).await;
        stop.store(true, Ordering::SeqCst);
    };
    let reading = async {
        while !stop.load(Ordering::SeqCst) {
            read_totals(&inspector, &base, &mut last_read).await;
            sleep(interval / 3).await;
        }
    };
    futures::join!(counting, reading);

    let seen: Vec<Seen> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for participant in &fleet.participants {
        participant.counter.close();
    }
    for participant in fleet.participants.iter_mut().map(|p| &mut p.worker) {
        tokio::time::timeout(Duration::from_secs(10), participant)
            .await
            .expect("a worker did not stop after close()")
            .unwrap();
    }
    read_totals(&inspector, &base, &mut last_read).await;

    check(&fleet, &seen, &last_read, sent.load(Ordering::SeqCst));
}

async fn read_totals<I: Inspector>(inspector: &I, base: &str, last_read: &mut BTreeMap<u64, u64>) {
    let prefix = format!("{base}:");
    for key in inspector.keys(base).await {
        let Some(n) = key
            .strip_prefix(&prefix)
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if let Some(state) = inspector.key(&key).await {
            last_read.insert(n, state.value.parse().unwrap());
        }
    }
}

fn check(fleet: &Fleet, seen: &[Seen], last_read: &BTreeMap<u64, u64>, sent_total: u64) {
    let entries = fleet.log.entries();
    let mut applied: BTreeMap<u64, u64> = BTreeMap::new();
    let mut unknown: BTreeMap<u64, u64> = BTreeMap::new();
    let mut sent_to: BTreeMap<u64, u64> = BTreeMap::new();
    let mut adds: HashMap<(ParticipantId, u64), u32> = HashMap::new();
    let mut previous: BTreeMap<u64, BTreeSet<Option<u64>>> = BTreeMap::new();
    let mut failures = 0;
    for entry in &entries {
        let request = &entry.request;
        match entry.result {
            Ok(reply) if reply.outcome == Outcome::WrongInterval => {}
            Ok(reply) => {
                assert_eq!(reply.interval, request.expect, "{entry:?}");
                *sent_to.entry(reply.interval).or_default() += request.amount;
                previous
                    .entry(reply.interval)
                    .or_default()
                    .insert(reply.previous_total);
                if reply.outcome == Outcome::Applied {
                    *applied.entry(reply.interval).or_default() += request.amount;
                    *adds
                        .entry((request.participant, reply.interval))
                        .or_default() += 1;
                }
            }
            Err(kind) => {
                failures += 1;
                assert_ne!(kind, StoreErrorKind::Malformed, "{entry:?}");
                *sent_to.entry(request.expect).or_default() += request.amount;
                *unknown.entry(request.expect).or_default() += request.amount;
            }
        }
    }
    let total = |n: &u64| applied.get(n).copied().unwrap_or(0);
    let doubt = |n: &u64| unknown.get(n).copied().unwrap_or(0);
    eprintln!(
        "{} flushes, {} failed, {} intervals with additions, {} read from Redis",
        entries.len(),
        failures,
        applied.len(),
        last_read.len()
    );

    // Each participant added to each interval at most once.
    for ((participant, n), count) in &adds {
        assert_eq!(
            *count, 1,
            "{participant} added to interval {n} {count} times"
        );
    }
    // Redis holds for each interval what the applied flushes carried, never more than was
    // sent to it (a flush that got no reply may or may not be in it).
    for (n, value) in last_read {
        assert!(
            total(n) <= *value && *value <= total(n) + doubt(n),
            "interval {n}: Redis holds {value}, applied flushes carried {}, unanswered {}",
            total(n),
            doubt(n)
        );
        assert!(*value <= sent_to.get(n).copied().unwrap_or(0));
    }
    assert!(
        last_read.len() >= (INTERVALS as usize) / 2,
        "read only {} interval totals from Redis",
        last_read.len()
    );
    // Everyone who flushed in interval n was told the same total of n-1, and it is that
    // interval's true total.
    for (n, totals) in &previous {
        assert_eq!(
            totals.len(),
            1,
            "interval {n}: replies disagree on the total before: {totals:?}"
        );
        let before = n - 1;
        match totals.first().copied().flatten() {
            Some(value) => assert!(
                total(&before) <= value && value <= total(&before) + doubt(&before),
                "interval {n} was told {value} for {before}, which holds {}",
                total(&before)
            ),
            None => assert_eq!(
                total(&before),
                0,
                "interval {before} was written but read as none"
            ),
        }
    }
    // The fleet really counted, in many intervals, through every participant.
    assert!(
        applied.len() >= (INTERVALS as usize) - 3,
        "only {} intervals counted",
        applied.len()
    );
    let applied_sum: u64 = applied.values().sum();
    assert!(applied_sum <= sent_total);
    for participant in &fleet.participants {
        assert!(
            !participant
                .recorder
                .with_message("flush completed")
                .is_empty(),
            "a participant never completed a flush"
        );
    }
    // Every count returned obeyed the max rule, and every group total a counter showed was
    // the total of some interval.
    for thread in seen {
        assert!(thread.increments > 0);
        assert!(
            thread.violations.is_empty(),
            "counts out of bounds: {:?}",
            thread.violations
        );
        for group in &thread.group_totals {
            assert!(
                applied
                    .keys()
                    .any(|n| total(n) <= *group && *group <= total(n) + doubt(n)),
                "a counter showed a group total of {group}, which no interval holds"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_and_fred_on_one_server() {
    let url = shared::standalone_url();
    let mut fleet = Fleet::new();
    for _ in 0..2 {
        fleet.join(RedisStore::new(connect::multiplexed(&url).await));
        fleet.join(RedisStore::new(connect::manager(&url).await));
        fleet.join(FredStore::new(connect::fred_client(&url).await));
        fleet.join(FredStore::new(connect::fred_pool(&url, 2).await));
    }
    run(fleet, RedisInspector(connect::multiplexed(&url).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_and_fred_on_a_cluster() {
    let cluster = shared::cluster();
    let mut fleet = Fleet::new();
    for _ in 0..4 {
        fleet.join(RedisStore::new(connect::cluster(cluster).await));
        fleet.join(FredStore::new(connect::fred_cluster(cluster).await));
    }
    run(fleet, RedisInspector(connect::cluster(cluster).await)).await;
}
