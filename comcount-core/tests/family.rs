//! What a family does, on virtual time and the in-memory store: each key's total across
//! participants, one flush per partition and interval, keys held, evicted and come back, keys
//! refused, partitions with more keys than a flush carries, closing, events, and where the
//! totals are kept.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::{Future, pending, ready};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::builder::{Builder, ForFamily};
use comcount_core::clock::{Clock, Timer, VirtualClock};
use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::keys::partition_of;
use comcount_core::{
    Family, FlushReply, FlushRequest, KeyError, KeySpace, MemoryStore, Outcome, ParticipantId,
    Store, StoreError,
};
use common::runtime::run_virtual_until;
use futures::FutureExt;
use futures::executor::LocalPool;
use futures::future::Either;
use futures::task::LocalSpawnExt;

const INTERVAL: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One flush as the store ran it.
#[derive(Clone, Debug)]
struct Call {
    /// When, on the store's clock (the participants' as well).
    at: Duration,
    request: FlushRequest,
    applied: bool,
}

impl Call {
    /// The interval the store's clock was in.
    fn interval(&self) -> u64 {
        (self.at.as_millis() / INTERVAL.as_millis()) as u64
    }

    fn carries(&self, key: &str) -> bool {
        self.request.entries.iter().any(|e| &*e.key == key)
    }
}

/// The memory store, keeping every flush it ran.
#[derive(Clone)]
struct Logged {
    memory: MemoryStore<VirtualClock>,
    clock: VirtualClock,
    calls: Arc<Mutex<Vec<Call>>>,
    /// While set, every flush is turned away, unapplied.
    down: Arc<AtomicBool>,
    /// While set, no flush is answered, nor run.
    hung: Arc<AtomicBool>,
    /// How long each flush takes to run and answer.
    delay: Arc<Mutex<Duration>>,
}

impl Logged {
    fn new(clock: &VirtualClock) -> Self {
        Self {
            memory: MemoryStore::with_clock(clock.clone()),
            clock: clock.clone(),
            calls: Arc::default(),
            down: Arc::default(),
            hung: Arc::default(),
            delay: Arc::default(),
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
        if self.hung.load(Ordering::SeqCst) {
            return Either::Right(Either::Left(pending()));
        }
        let delay = *self.delay.lock().unwrap();
        if delay.is_zero() {
            return Either::Left(ready(self.run(request, report)));
        }
        let (store, request, report) = (self.clone(), request.clone(), report.clone());
        let sleep = self.clock.sleep(delay);
        Either::Right(Either::Right(
            async move {
                sleep.await;
                store.run(&request, &report)
            }
            .boxed(),
        ))
    }
}

impl Logged {
    fn run(&self, request: &FlushRequest, report: &Reporter) -> Result<FlushReply, StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("the store is down"));
        }
        let reply = self
            .memory
            .flush(request, report)
            .now_or_never()
            .expect("the memory store answers at once");
        self.calls.lock().unwrap().push(Call {
            at: self.clock.now(),
            request: request.clone(),
            applied: reply
                .as_ref()
                .is_ok_and(|reply| reply.outcome == Outcome::Applied),
        });
        reply
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

/// The hash that holds the totals of `key` for interval `n`.
fn hash_of(name: &str, partitions: u32, key: &str, n: u64) -> String {
    KeySpace::partition("", name, partition_of(key, partitions)).interval(n)
}

#[test]
fn each_key_has_its_own_total_across_participants() {
    let mut bench = Bench::new();
    let families: Vec<Family> = (0..2)
        .map(|_| bench.family(builder("tenants").partitions(2)).0)
        .collect();
    // "acme" and "initech" share partition 1, "globex" has partition 0.
    for family in &families {
        family.increment("acme", 5);
        family.increment("globex", 2);
    }
    families[1].increment("initech", 1);
    // The first flushes go out at once and add every key to interval 0.
    bench.run_until(Duration::ZERO);
    let memory = &bench.store.memory;
    let total = |key| memory.field(&hash_of("tenants", 2, key, 0), key);
    assert_eq!(total("acme"), Some(10));
    assert_eq!(total("globex"), Some(4));
    assert_eq!(total("initech"), Some(1));

    // The next flushes, aimed inside interval 1 (each partition at a phase of its own), bring
    // back each key's total of interval 0, and the first participant adds a key it never
    // counted, to learn its total.
    families[1].increment("initech", 6);
    bench.run_until(ms(1_800));
    assert_eq!(families[0].increment("acme", 3), 10);
    assert_eq!(families[0].group_total("globex"), Some(4));
    assert_eq!(families[1].count("acme"), 10);
    assert_eq!(families[1].group_total("initech"), Some(1));
    assert_eq!(
        families[0].count("initech"),
        0,
        "not held here: a read adds nothing"
    );
    assert_eq!(
        families[0].increment("initech", 0),
        0,
        "never counted nor flushed here"
    );
    // Its next flush carries the key added, and brings its total.
    bench.run_until(ms(2_800));
    assert_eq!(families[0].group_total("initech"), Some(6));
    assert_eq!(families[0].count("initech"), 6);
}

#[test]
fn one_flush_per_partition_and_interval_whatever_the_number_of_keys() {
    for keys in [1, 10, 500] {
        let mut bench = Bench::new();
        let (family, _) = bench.family(builder("many").partitions(3));
        let names: Vec<String> = (0..keys).map(|i| format!("key-{i}")).collect();
        let mut per_partition = [0; 3];
        for name in &names {
            per_partition[partition_of(name, 3) as usize] += 1;
        }
        for n in 0..10 {
            bench.run_until(INTERVAL * n + ms(100));
            for name in &names {
                family.increment(name, 1);
            }
        }
        bench.run_until(INTERVAL * 10 - ms(1));
        let mut flushes: HashMap<(u64, KeySpace), usize> = HashMap::new();
        for call in bench.store.calls() {
            *flushes
                .entry((call.interval(), call.request.space))
                .or_default() += 1;
        }
        for n in 0..10 {
            for (p, keys_there) in per_partition.iter().enumerate() {
                let space = KeySpace::partition("", "many", p as u32);
                let expected = usize::from(*keys_there > 0);
                assert_eq!(
                    flushes.get(&(n, space)).copied().unwrap_or(0),
                    expected,
                    "{keys} keys: flushes of partition {p} in interval {n}"
                );
            }
        }
        // Each flush carries every key of its partition, all of them having units to send.
        for call in bench.store.calls() {
            let p = (0..3)
                .position(|p| KeySpace::partition("", "many", p) == call.request.space)
                .unwrap();
            assert_eq!(call.request.entries.len(), per_partition[p]);
        }
        for name in &names {
            assert_eq!(bench.store.counted(name), 10, "{keys} keys: {name}");
        }
    }
}

/// A key only read (its total asked for every interval, never added to by this participant)
/// through an outage longer than the eviction time: its flushes start far apart meanwhile,
/// but it was in use all along, so it is neither evicted nor left out once the store is back.
#[test]
fn a_key_read_through_an_outage_is_kept_and_learns_its_total_again() {
    let mut bench = Bench::new();
    let (counting, _) = bench.family(builder("outage"));
    let (reading, _) = bench.family(builder("outage").evict_after(INTERVAL));
    reading.increment("own", 1);
    reading.increment("read", 0);
    for n in 0..16 {
        bench
            .store
            .down
            .store((4..9).contains(&n), Ordering::SeqCst);
        counting.increment("read", 1);
        reading.increment("own", 1);
        let _ = reading.group_total("read");
        bench.run_until(INTERVAL * (n + 1));
        assert_eq!(
            reading.len(),
            2,
            "after interval {n}: a key read every interval was evicted"
        );
    }
    assert!(
        reading.group_total("read").is_some(),
        "the key read through the outage has its total again"
    );
}

/// More partitions than a join polls together: each partition's flush loop is woken on its
/// own, so each must be told of the first increment (and of close) on its own.
#[test]
fn every_partition_of_a_wide_family_flushes() {
    const PARTITIONS: u32 = 64;
    let mut bench = Bench::new();
    let (family, done) = bench.family(builder("wide").partitions(PARTITIONS));
    let names: Vec<String> = (0..1_000).map(|i| format!("key-{i}")).collect();
    for n in 0..4 {
        bench.run_until(INTERVAL * n + ms(100));
        for name in &names {
            family.increment(name, 1);
        }
    }
    bench.run_until(INTERVAL * 6);
    let flushed: HashSet<KeySpace> = bench
        .store
        .calls()
        .into_iter()
        .filter(|call| call.applied)
        .map(|call| call.request.space)
        .collect();
    let missing: Vec<u32> = (0..PARTITIONS)
        .filter(|&p| !flushed.contains(&KeySpace::partition("", "wide", p)))
        .collect();
    assert!(missing.is_empty(), "partitions never flushed: {missing:?}");
    for name in &names {
        assert_eq!(bench.store.counted(name), 4, "{name}");
    }
    family.close();
    bench.run_until(INTERVAL * 7);
    assert!(
        done.load(Ordering::SeqCst),
        "every partition's loop ends on close"
    );
}

/// A key first used while the store hangs, after the flushes stopped going out: its use
/// notes the interval of the last flush's start, long past, and must not make it look idle.
/// It is kept `evict_after` past its use, as any key.
#[test]
fn a_key_used_while_the_flushes_are_held_up_is_kept_evict_after_past_its_use() {
    let evict_after = INTERVAL * 5;
    let mut bench = Bench::new();
    let (family, _) = bench.family(builder("outage").evict_after(evict_after));
    // A held key starts the flushes, and is never evicted.
    let held = family.counter("held").unwrap();
    held.increment(1);
    bench.run_until(ms(900));
    // The store hangs from interval 1 on: no flush starts, none notes a later interval.
    bench.store.hung.store(true, Ordering::SeqCst);
    bench.run_until(ms(8_100));
    family.increment("k", 1);
    let used = bench.now();
    bench.run_until(ms(8_200));
    bench.store.hung.store(false, Ordering::SeqCst);
    let evicted = loop {
        bench.run_until(bench.now() + ms(100));
        if family.len() == 1 {
            break bench.now();
        }
        assert!(bench.now() < INTERVAL * 40, "k was never evicted");
    };
    assert_eq!(
        bench.store.counted("k"),
        1,
        "k was evicted before it was flushed"
    );
    assert!(
        evicted >= used + evict_after,
        "k was evicted at {evicted:?}, sooner than {evict_after:?} after its use at {used:?}"
    );
}

#[test]
fn a_held_key_is_flushed_every_interval_and_never_evicted() {
    let mut bench = Bench::new();
    let (family, _) = bench.family(builder("held").evict_after(INTERVAL));
    let handle = family.counter("held").unwrap();
    handle.increment(1);
    family.increment("idle", 1);
    bench.run_until(INTERVAL * 10);
    assert_eq!(family.len(), 1, "the idle key stays, or the held one went");
    let calls = bench.store.calls();
    for n in 0..10 {
        assert!(
            calls.iter().any(|c| c.interval() == n && c.carries("held")),
            "interval {n} had no flush of the held key: {calls:?}"
        );
    }
    assert!(calls.last().is_some_and(|c| !c.carries("idle")));
    assert_eq!(
        handle.group_total(),
        Some(0),
        "the held key's total is fresh"
    );
    assert_eq!(bench.store.counted("held"), 1);

    // Let go of, it is evicted like any other key, and counts on when taken again.
    drop(handle);
    bench.run_until(INTERVAL * 13);
    assert_eq!(family.len(), 0);
    let handle = family.counter("held").unwrap();
    assert_eq!(
        handle.group_total(),
        None,
        "a key come back has no total yet"
    );
    handle.increment(2);
    bench.run_until(INTERVAL * 15);
    assert_eq!(bench.store.counted("held"), 3);
    assert_eq!(handle.buffered(), 0);
}

/// A key used through a handle counts as used until the handle goes: it is evicted only
/// `evict_after` later, not `evict_after` after the handle was taken.
#[test]
fn a_key_is_kept_evict_after_past_its_last_handle() {
    let evict_after = INTERVAL * 5;
    let mut bench = Bench::new();
    let (family, _) = bench.family(builder("released").evict_after(evict_after));
    let handle = family.counter("k").unwrap();
    for _ in 0..9 {
        handle.increment(1);
        bench.run_until(bench.now() + INTERVAL);
    }
    let released = bench.now() + ms(700);
    bench.run_until(released);
    drop(handle);
    bench.run_until(released + evict_after - ms(100));
    assert_eq!(
        family.len(),
        1,
        "evicted sooner than evict_after after its last handle"
    );
    bench.run_until(released + evict_after + INTERVAL * 2);
    assert_eq!(family.len(), 0, "never evicted");
    assert_eq!(bench.store.counted("k"), 9);
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

/// A key only added to learn its total (`increment(key, 0)`), with the shortest eviction,
/// early in an interval: it stays for the flush that brings its total.
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
    assert_eq!(looking.increment("k", 0), 0);
    bench.run_until(ms(2_600));
    assert_eq!(
        looking.group_total("k"),
        Some(3),
        "{:?}",
        bench.store.calls()
    );
}

#[test]
fn a_key_that_cannot_be_counted_is_refused_and_nothing_is_counted() {
    let mut bench = Bench::new();
    let (family, _) = bench.family(builder("refused").max_keys(2).evict_after(INTERVAL));
    let longest = "y".repeat(FlushRequest::MAX_KEY_LEN);
    let too_long = "x".repeat(FlushRequest::MAX_KEY_LEN + 1);
    assert_eq!(family.try_increment("", 1), Err(KeyError::Empty));
    assert_eq!(
        family.try_increment(&too_long, 1),
        Err(KeyError::TooLong {
            len: FlushRequest::MAX_KEY_LEN + 1,
            max: FlushRequest::MAX_KEY_LEN
        })
    );
    assert_eq!(family.try_increment(&longest, 1), Ok(1));
    assert_eq!(family.try_increment("a", 2), Ok(2));
    let full = KeyError::Full { max_keys: 2 };
    assert_eq!(family.try_increment("b", 3), Err(full));
    assert_eq!(family.counter("b").err(), Some(full));
    assert_eq!(family.counter("").err(), Some(KeyError::Empty));
    assert!(matches!(
        family.counter(&too_long),
        Err(KeyError::TooLong { .. })
    ));
    // A key already held still counts when the family is full.
    assert_eq!(family.try_increment("a", 1), Ok(3));
    for refused in ["", too_long.as_str(), "b"] {
        assert_eq!(family.count(refused), 0);
        assert_eq!(family.group_total(refused), None);
        assert_eq!(family.buffered(refused), 0);
    }
    assert_eq!(family.len(), 2);

    bench.run_until(INTERVAL);
    let flushed: BTreeSet<String> = bench
        .store
        .calls()
        .iter()
        .flat_map(|c| c.request.entries.iter().map(|e| e.key.to_string()))
        .collect();
    assert_eq!(flushed, BTreeSet::from([longest.clone(), "a".to_owned()]));
    assert_eq!(bench.store.counted("a"), 3);
    assert_eq!(bench.store.counted(&longest), 1);

    // Once the idle keys are evicted, there is room again.
    bench.run_until(INTERVAL * 4);
    assert_eq!(family.len(), 0);
    assert_eq!(family.try_increment("b", 3), Ok(3));
}

#[test]
#[should_panic(expected = "is more than the store can hold")]
fn increment_panics_on_an_amount_try_increment_refuses_but_never_on_a_key() {
    let (family, _worker) = builder("panics")
        .max_keys(1)
        .build(MemoryStore::new(), VirtualClock::new())
        .unwrap();
    family.increment("a", 1);
    assert_eq!(family.increment("b", 1), 1);
    family.increment("a", u64::MAX);
}

#[test]
fn a_partition_with_more_keys_than_a_flush_carries_flushes_them_in_turns() {
    let keys = FlushRequest::MAX_ENTRIES * 5 / 2;
    let mut bench = Bench::new();
    let (family, _) = bench.family(builder("crowded").max_keys(keys));
    let names: Vec<String> = (0..keys).map(|i| format!("key-{i}")).collect();
    for n in 0..6 {
        bench.run_until(INTERVAL * n + ms(100));
        for name in &names {
            family.increment(name, 1);
        }
    }
    bench.run_until(INTERVAL * 12);
    let calls = bench.store.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.request.entries.len() <= FlushRequest::MAX_ENTRIES)
    );
    // Every key is flushed at least once every three flushes, whichever it is.
    let mut last_flushed: HashMap<&str, usize> = HashMap::new();
    let while_counting = calls.iter().take_while(|c| c.at < INTERVAL * 6);
    for (i, call) in while_counting.enumerate() {
        for entry in &call.request.entries {
            last_flushed.insert(&entry.key, i);
        }
        for name in &names {
            let last = last_flushed.get(name.as_str()).map_or(-1, |&l| l as i64);
            assert!(
                i as i64 - last < 3,
                "{name} not flushed in flushes {}..={i}",
                last + 1
            );
        }
    }
    for name in &names {
        assert_eq!(bench.store.counted(name), 6, "{name}");
        assert_eq!(family.buffered(name), 0, "{name}");
    }
}

/// Keys that wait their turn in a crowded partition: a key's total is refreshed only by the
/// flushes that carry it, and is forgotten once it is older than two intervals and the round
/// trip, as any total, not taken as known until the key's turn comes again. The first
/// participant counts five flushes' worth of keys; the second, a tenth of them, in one flush
/// every interval. So every flush of the first brings totals (of the keys the second added to
/// the interval before), and the partition as a whole never goes stale.
#[test]
fn a_crowded_partitions_totals_go_stale_while_their_keys_wait_their_turn() {
    let keys = FlushRequest::MAX_ENTRIES * 5;
    let mut bench = Bench::new();
    let (crowded, _) = bench.family(builder("crowded").max_keys(keys));
    let (sparse, _) = bench.family(builder("crowded").max_keys(keys));
    let names: Vec<String> = (0..keys).map(|i| format!("key-{i}")).collect();
    let shared: Vec<&String> = names.iter().step_by(10).collect();
    let (mut oldest, mut known) = (Duration::ZERO, 0);
    for n in 0..16u32 {
        bench.run_until(INTERVAL * n + ms(100));
        for name in &names {
            crowded.increment(name, 1);
        }
        for name in &shared {
            sparse.increment(name, 1);
        }
        if n >= 4 {
            for name in &shared {
                if crowded.group_total(name).is_some() {
                    known += 1;
                    oldest = oldest.max(crowded.total_age(name).unwrap());
                }
            }
        }
    }
    assert!(known > 0, "no total was ever known");
    // Two intervals and the round trip (none here) from the reply that brought it; the check
    // falls at the start of the partition's next flush, within an interval of that.
    assert!(
        oldest <= INTERVAL * 3,
        "a total {oldest:?} old was still taken as known"
    );
}

/// A key whose total came with one flush and is not in the next, which brings no total of its
/// own: while the flush after that hangs, the key's total goes stale on time, as it would if it
/// had been in the flush.
#[test]
fn a_keys_total_goes_stale_while_a_flush_without_it_hangs() {
    let mut bench = Bench::new();
    // Replies take a tenth of an interval, by which a total stays fresh longer: the flush that
    // follows the one without "b" starts before its total is due to go stale.
    *bench.store.delay.lock().unwrap() = INTERVAL / 10;
    let (family, _) = bench.family(builder("stale"));
    // "b" is counted in interval 0, and the flush of interval 1 brings its total. (It is not
    // read: a key read goes into the next flushes, for its total.)
    family.increment("b", 5);
    bench.run_until(ms(1_900));
    // "a", new, is the only key of the next flush, whose reply brings no total.
    family.increment("a", 1);
    bench.run_until(ms(2_900));
    let calls = bench.store.calls();
    let (with_b, last) = (&calls[calls.len() - 2], &calls[calls.len() - 1]);
    assert!(with_b.carries("b") && with_b.interval() == 1, "{with_b:?}");
    assert!(last.carries("a") && !last.carries("b"), "{last:?}");
    // The reply came when the flush ran, a round trip after it was sent.
    let brought = with_b.at;
    // From now on the store answers nothing; "a" has something to send.
    bench.store.hung.store(true, Ordering::SeqCst);
    family.increment("a", 1);
    let stale_by = brought + INTERVAL * 2 + INTERVAL / 10 + ms(1);
    bench.run_until(stale_by);
    assert_eq!(
        family.group_total("b"),
        None,
        "the total of b was still known {:?} after the reply that brought it",
        family.total_age("b")
    );
}

#[test]
fn closing_makes_every_total_unknown_and_sends_nothing_more() {
    let mut bench = Bench::new();
    let (family, done) = bench.family(builder("closing").partitions(2));
    let handle = family.counter("acme").unwrap();
    for n in 0..3 {
        bench.run_until(INTERVAL * n + ms(100));
        handle.increment(1);
        family.increment("globex", 2);
    }
    bench.run_until(ms(2_800));
    assert_eq!(family.group_total("globex"), Some(2));
    assert_eq!(handle.group_total(), Some(1));
    let sent = bench.store.calls().len();

    assert!(!family.is_closed());
    family.close();
    assert!(family.is_closed());
    assert_eq!(family.group_total("globex"), None);
    assert_eq!(family.group_total("acme"), None);
    assert_eq!(handle.group_total(), None);
    // Counting goes on locally.
    assert_eq!(family.increment("globex", 5), 5);
    assert_eq!(handle.increment(7), 7);
    bench.run_until(INTERVAL * 10);
    assert_eq!(
        bench.store.calls().len(),
        sent,
        "a flush went out after close"
    );
    assert!(done.load(Ordering::SeqCst), "the worker did not end");
    assert_eq!(family.buffered("globex"), 5);
    assert_eq!(handle.buffered(), 7);
    assert_eq!(family.count("globex"), 5);
}

/// A store that refuses every flush.
struct Refusing;

impl Store for Refusing {
    fn name(&self) -> &str {
        "refusing"
    }

    fn flush(
        &self,
        _request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        ready(Err(StoreError::refused("not today")))
    }
}

#[test]
fn events_carry_the_family_name_and_a_failed_flush_names_each_key() {
    let recorder = Recorder::new();
    let clock = VirtualClock::new();
    let mut pool = LocalPool::new();
    let (family, worker) = Family::builder("tenants", INTERVAL)
        .partitions(2)
        .diagnostics(recorder.clone())
        .build(Refusing, clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    // "acme" and "initech" share partition 1, "globex" has partition 0.
    family.increment("acme", 3);
    family.increment("initech", 0);
    family.increment("globex", 4);
    pool.run_until_stalled();

    let records = recorder.records();
    assert!(!records.is_empty());
    for record in &records {
        assert_eq!(record.counter, "tenants", "{record:?}");
    }
    let failed: BTreeMap<String, (String, String)> = recorder
        .with_message("flush failed")
        .iter()
        .map(|r| {
            assert!(r.attribute("error").unwrap().contains("not today"), "{r:?}");
            (
                r.attribute("key")
                    .expect("a family's failure names its key")
                    .into(),
                (
                    r.attribute("dropped").unwrap().into(),
                    r.attribute("unsettled").unwrap().into(),
                ),
            )
        })
        .collect();
    let expected = BTreeMap::from([
        ("acme".to_owned(), ("3".to_owned(), "0".to_owned())),
        ("globex".to_owned(), ("4".to_owned(), "0".to_owned())),
    ]);
    assert_eq!(failed, expected);
    assert_eq!(recorder.with_message("flush failed").len(), 2);
    assert_eq!(family.buffered("acme"), 0, "a dropped amount is not kept");
}

#[test]
fn totals_are_kept_in_one_hash_per_partition_and_interval_with_a_field_per_key() {
    let mut bench = Bench::new();
    let id = ParticipantId::from_u64(7);
    let (family, _) = bench.family(
        builder("tenants")
            .prefix("app:")
            .partitions(4)
            .participant(id),
    );
    let amounts = [("acme", 1), ("globex", 2), ("initech", 3), ("hooli", 4)];
    for (key, amount) in amounts {
        family.increment(key, amount);
    }
    bench.run_until(Duration::ZERO);
    let memory = &bench.store.memory;
    let mut expected_keys = BTreeSet::new();
    let mut fields: BTreeMap<u32, Vec<(String, u64)>> = BTreeMap::new();
    for (key, amount) in amounts {
        let p = partition_of(key, 4);
        let space = KeySpace::partition("app:", "tenants", p);
        let hash = format!("app:{{tenants@{p}}}:0");
        assert_eq!(space.interval(0), hash);
        assert_eq!(memory.field(&hash, key), Some(amount), "{key}");
        fields.entry(p).or_default().push((key.to_owned(), amount));
        let fence = format!("app:{{tenants@{p}}}:f:0000000000000007");
        assert_eq!(space.fence(id), fence);
        assert_eq!(memory.fence(&fence).map(|(_, n)| n), Some(0), "{key}");
        expected_keys.insert(hash);
        expected_keys.insert(fence);
    }
    for (p, mut expected) in fields {
        expected.sort();
        let hash = KeySpace::partition("app:", "tenants", p).interval(0);
        assert_eq!(memory.fields(&hash), expected, "partition {p}");
    }
    // Only the partitions that hold keys write: here partition 0 holds none.
    assert!(amounts.iter().all(|(key, _)| partition_of(key, 4) != 0));
    assert_eq!(
        memory.keys().into_iter().collect::<BTreeSet<_>>(),
        expected_keys
    );
    assert_eq!(family.partitions(), 4);
    assert_eq!(family.name(), "tenants");
}
