//! Eight participants, mixing clients, count concurrently for a dozen intervals. Afterwards the
//! flush records and Redis's own keys must pass every fleet invariant (see
//! [`comcount_tests::invariants`]): no interval holds more than was really sent to it, no flush
//! applied twice, each participant added to each interval at most once, every participant told
//! the same totals, every unit accounted for; and every count a participant returned obeys the
//! max rule.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::Recorder;
use comcount_core::{Counter, KeySpace, Outcome, ParticipantId, Store};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::inspect::{Inspector, RedisInspector};
use comcount_tests::invariants::{self, PerKey, Report, Writes};
use comcount_tests::reader::{Read, Reads, now_ms};
use comcount_tests::recording::FlushRecords;
use comcount_tests::settings::{self, sleep};
use comcount_tests::{connect, shared};
use tokio::task::JoinHandle;

/// How many intervals the fleet counts for.
const INTERVALS: u32 = 12;
/// How many threads increment each participant's counter.
const THREADS_EACH: usize = 2;

struct Participant {
    id: ParticipantId,
    store: String,
    counter: Counter,
    worker: JoinHandle<()>,
    recorder: Recorder,
    /// What its threads counted into it.
    counted: Arc<AtomicU64>,
}

struct Fleet {
    prefix: String,
    records: FlushRecords,
    participants: Vec<Participant>,
}

impl Fleet {
    fn new() -> Self {
        Self {
            prefix: settings::unique_prefix("fleet"),
            records: FlushRecords::new(),
            participants: Vec::new(),
        }
    }

    fn join<S: Store>(&mut self, store: S) {
        let recorder = Recorder::new();
        let id = ParticipantId::random();
        let name = store.name().to_owned();
        let member = self.participants.len();
        let (counter, worker) = Counter::builder("fleet", settings::interval())
            .prefix(&self.prefix)
            .participant(id)
            .diagnostics(recorder.clone())
            .build(self.records.wrap(store, member), TokioTimer::new())
            .unwrap();
        self.participants.push(Participant {
            id,
            store: name,
            counter,
            worker: tokio::spawn(worker),
            recorder,
            counted: Arc::default(),
        });
    }

    fn space(&self) -> KeySpace {
        KeySpace::counter(&self.prefix, "fleet")
    }
}

/// What one incrementing thread saw.
#[derive(Default)]
struct Seen {
    /// Counts that broke the max rule: (amount, count returned, all amounts counted so far).
    violations: Vec<(u64, u64, u64)>,
    /// Every group total the counter reported.
    group_totals: BTreeSet<u64>,
    increments: u64,
}

async fn run<I: Inspector>(mut fleet: Fleet, inspector: I) {
    let interval = settings::interval();
    let space = fleet.space();
    let all_counted = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    let threads: Vec<_> = fleet
        .participants
        .iter()
        .flat_map(|p| (0..THREADS_EACH).map(|_| (p.counter.clone(), Arc::clone(&p.counted))))
        .map(|(counter, counted)| {
            let (all_counted, stop) = (Arc::clone(&all_counted), Arc::clone(&stop));
            thread::spawn(move || {
                let mut seen = Seen::default();
                while !stop.load(Ordering::Relaxed) {
                    let amount = fastrand::u64(1..=5);
                    counted.fetch_add(amount, Ordering::SeqCst);
                    all_counted.fetch_add(amount, Ordering::SeqCst);
                    let count = counter.increment(amount);
                    let counted_now = all_counted.load(Ordering::SeqCst);
                    // max(group total of a closed interval, own buffer): at least what this
                    // call added, and never more than the whole group counted so far.
                    if count < amount || count > counted_now {
                        seen.violations.push((amount, count, counted_now));
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
    // final, and it lives two more intervals at least.
    let reads = Reads::default();
    let counting = async {
        sleep(interval * INTERVALS).await;
        stop.store(true, Ordering::SeqCst);
    };
    let reading = async {
        while !stop.load(Ordering::SeqCst) {
            read_totals(&inspector, &space, &reads).await;
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
    read_totals(&inspector, &space, &reads).await;

    let participants = fleet
        .participants
        .iter()
        .map(|p| invariants::Participant {
            id: p.id,
            store: p.store.clone(),
            recorder: p.recorder.clone(),
            counted: PerKey::counter(p.counted.load(Ordering::SeqCst)),
            buffered: PerKey::counter(p.counter.buffered()),
        })
        .collect();
    let report = Report::new(interval, fleet.records.records(), reads.all(), participants);
    check(&fleet, &report, &seen);
}

/// Reads every interval key of `space` into `reads`.
async fn read_totals<I: Inspector>(inspector: &I, space: &KeySpace, reads: &Reads) {
    let prefix = format!("{}:", space.base());
    // Taken before the keys are listed: a read counts as made after an interval closed only
    // if it was sent after.
    let at_ms = now_ms();
    for key in inspector.keys(space.base()).await {
        // The interval keys among them, fences left out.
        let Some(n) = key
            .strip_prefix(&prefix)
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| space.interval(*n) == key)
        else {
            continue;
        };
        if let Some(state) = inspector.key(&key).await {
            reads.push(Read {
                space: space.base().to_owned(),
                interval: n,
                totals: Some(PerKey::counter(state.value.parse().unwrap())),
                at_ms,
                port: None,
            });
        }
    }
}

fn check(fleet: &Fleet, report: &Report, seen: &[Seen]) {
    // No fault here: every acknowledged write stays.
    report.assert_all(Writes::Kept);
    report.assert_no_malformed_reply();
    report.assert_enough_evidence((INTERVALS as usize) / 2);

    // The fleet really counted, in many intervals, through every participant.
    let intervals_applied: BTreeSet<u64> = report
        .records()
        .iter()
        .filter_map(|r| r.reply())
        .filter(|reply| reply.outcome == Outcome::Applied)
        .map(|reply| reply.interval)
        .collect();
    assert!(
        intervals_applied.len() >= (INTERVALS as usize) - 3,
        "only {} intervals counted",
        intervals_applied.len()
    );
    for participant in &fleet.participants {
        assert!(
            !participant
                .recorder
                .with_message("flush completed")
                .is_empty(),
            "{} participant {} never completed a flush",
            participant.store,
            participant.id
        );
    }
    // Every count returned obeyed the max rule, and every group total a counter showed was
    // one a reply gave.
    let mut group_totals = BTreeSet::new();
    for thread in seen {
        assert!(thread.increments > 0);
        assert!(
            thread.violations.is_empty(),
            "counts out of bounds: {:?}",
            thread.violations
        );
        group_totals.extend(&thread.group_totals);
    }
    report.assert_group_totals_came_from_replies(&group_totals);
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
