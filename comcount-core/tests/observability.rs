//! What an operator sees: the store's answers, the copies sent again, a stale total coming
//! back, and the age of the group's total, on virtual time.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::future::{Future, pending};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::{Level, Record, Recorder, Reporter};
use comcount_core::keys::partition_of;
use comcount_core::{
    Counter, Family, FlushReply, FlushRequest, KeySpace, MemoryStore, Outcome, Store, StoreError,
};
use common::runtime::run_virtual_until;
use common::scripted::{Action, ScriptedStore};
use futures::executor::LocalPool;
use futures::future::Either;
use futures::task::LocalSpawnExt;

const INTERVAL: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A counter on a scripted store, its worker on a local pool driven by a virtual clock.
struct Setup {
    clock: VirtualClock,
    pool: LocalPool,
    store: ScriptedStore<VirtualClock>,
    events: Recorder,
    counter: Counter,
}

impl Setup {
    fn new() -> Self {
        let clock = VirtualClock::starting_at(Duration::from_secs(1_000));
        let store = ScriptedStore::new(clock.clone());
        let events = Recorder::new();
        let (counter, worker) = Counter::builder("requests", INTERVAL)
            .flush_timeout(ms(200))
            .diagnostics(events.clone())
            .build(store.clone(), clock.clone())
            .unwrap();
        let pool = LocalPool::new();
        pool.spawner().spawn_local(worker).unwrap();
        Self {
            clock,
            pool,
            store,
            events,
            counter,
        }
    }

    /// Runs the worker for `d` of virtual time.
    fn run_for(&mut self, d: Duration) {
        let until = self.clock.now() + d;
        run_virtual_until(&mut self.pool, &self.clock, until);
    }

    /// A reply as the store would give it now.
    fn reply_now(&self, outcome: Outcome) -> FlushReply {
        let now = self.clock.now();
        let n = (now.as_millis() / INTERVAL.as_millis()) as u64;
        let phase = now - INTERVAL * n as u32;
        FlushReply::new(outcome, n, phase, None)
    }

    fn with_message(&self, message: &str) -> Vec<Record> {
        self.events.with_message(message)
    }
}

fn lost() -> StoreError {
    StoreError::unanswered("connection reset")
}

#[test]
fn the_answers_and_the_copies_sent_again_are_reported() {
    let mut s = Setup::new();
    s.counter.increment(1);
    s.run_for(INTERVAL);
    s.events.clear();

    // A copy goes unanswered past the flush timeout; the next one is applied.
    s.store.then([Action::Hang, Action::Pass]);
    s.run_for(INTERVAL);
    let resent = s.with_message("copy resent");
    assert_eq!(resent.len(), 1, "{:#?}", s.events.records());
    assert_eq!(resent[0].level, Level::Debug);
    assert_eq!(resent[0].attribute("reason"), Some("unanswered"));
    assert_eq!(resent[0].attribute("copy"), Some("2"));
    assert_eq!(resent[0].attribute("error"), None);
    let answered = s.with_message("flush answered");
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].level, Level::Trace);
    assert_eq!(answered[0].attribute("outcome"), Some("applied"));
    assert_eq!(answered[0].attribute("round_trip_ms"), Some("0"));
    assert_eq!(s.with_message("flush completed").len(), 1);

    // A copy fails on the way; the next one is applied.
    s.events.clear();
    s.store.then([Action::Fail(lost), Action::Pass]);
    s.run_for(INTERVAL);
    let resent = s.with_message("copy resent");
    assert_eq!(resent.len(), 1, "{:?}", s.events.messages());
    assert_eq!(resent[0].attribute("reason"), Some("failed"));
    assert_eq!(resent[0].attribute("copy"), Some("2"));
    assert!(
        resent[0]
            .attribute("error")
            .is_some_and(|e| e.contains("connection reset")),
        "{resent:?}"
    );
    assert_eq!(s.with_message("flush completed").len(), 1);

    // The store answers that the copy landed in the wrong interval: that answer is worth a
    // look at debug, and so is the copy sent again for it.
    s.events.clear();
    s.store.then([
        Action::Reply(s.reply_now(Outcome::WrongInterval)),
        Action::Pass,
    ]);
    s.run_for(INTERVAL * 2);
    let answered = s.with_message("flush answered");
    let wrong: Vec<_> = answered
        .iter()
        .filter(|r| r.attribute("outcome") == Some("wrong_interval"))
        .collect();
    assert_eq!(wrong.len(), 1, "{answered:?}");
    assert_eq!(wrong[0].level, Level::Debug);
    let resent = s.with_message("copy resent");
    assert_eq!(resent.len(), 1, "{:?}", s.events.messages());
    assert_eq!(resent[0].attribute("reason"), Some("wrong_interval"));
    assert!(
        answered
            .iter()
            .any(|r| r.attribute("outcome") == Some("applied") && r.level == Level::Trace)
    );

    // None of it was worth more than debug.
    assert!(
        s.events.records().iter().all(|r| r.level <= Level::Debug),
        "{:?}",
        s.events.records()
    );
}

#[test]
fn a_healthy_counter_says_nothing_above_info() {
    let mut s = Setup::new();
    for _ in 0..10 {
        s.counter.increment(1);
        s.run_for(INTERVAL);
    }
    let records = s.events.records();
    assert!(
        records.iter().all(|r| r.level <= Level::Info),
        "{records:?}"
    );
    // The first copy, sent before the counter knows the store's clock, is answered with the
    // store's interval and sent again: once, at debug.
    let resent = s.with_message("copy resent");
    assert_eq!(resent.len(), 1, "{records:#?}");
    assert_eq!(resent[0].attribute("reason"), Some("wrong_interval"));
    let answered = s.with_message("flush answered");
    assert_eq!(answered[0].attribute("outcome"), Some("wrong_interval"));
    assert!(answered.len() >= 9, "{answered:?}");
    assert!(
        answered[1..]
            .iter()
            .all(|r| r.level == Level::Trace && r.attribute("outcome") == Some("applied")),
        "{answered:?}"
    );
}

#[test]
fn a_stale_total_is_reported_fresh_again_once() {
    let mut s = Setup::new();
    s.counter.increment(1);
    // The first flush brings no total (no interval before it), the second does.
    s.run_for(INTERVAL * 2);
    assert!(s.counter.group_total().is_some());
    assert!(s.counter.total_age().unwrap() < INTERVAL);

    // The store stops answering for a while: every copy hangs.
    s.store.then((0..6).map(|_| Action::Hang));
    let mut stale_seen = false;
    for _ in 0..200 {
        s.run_for(ms(50));
        if s.counter.group_total().is_none() {
            stale_seen = true;
            // Unknown, but its age still tells how old the last known one is.
            assert!(s.counter.total_age().unwrap() >= INTERVAL * 2);
        }
        if !s.with_message("total fresh again").is_empty() {
            break;
        }
    }
    assert!(stale_seen);
    assert_eq!(s.with_message("total went stale").len(), 1);
    let fresh = s.with_message("total fresh again");
    assert_eq!(fresh.len(), 1, "{:?}", s.events.messages());
    assert_eq!(fresh[0].level, Level::Info);
    let stale_for: u64 = fresh[0].attribute("stale_for_ms").unwrap().parse().unwrap();
    assert!(stale_for > 0, "{fresh:?}");
    assert!(s.counter.group_total().is_some());
    assert!(s.counter.total_age().unwrap() < ms(50));
    // The recovery was after the stale report.
    let messages = s.events.messages();
    let went = messages.iter().position(|m| *m == "total went stale");
    let back = messages.iter().position(|m| *m == "total fresh again");
    assert!(went < back, "{messages:?}");

    // Once: the next replies say nothing more.
    s.run_for(INTERVAL * 4);
    assert_eq!(s.with_message("total fresh again").len(), 1);
    assert_eq!(s.with_message("total went stale").len(), 1);
}

#[test]
fn a_total_age_grows_on_the_counters_own_clock() {
    let mut s = Setup::new();
    assert_eq!(s.counter.total_age(), None);
    s.counter.increment(1);
    s.run_for(ms(10));
    // The first reply brings no total: still never known.
    assert_eq!(s.counter.group_total(), None);
    assert_eq!(s.counter.total_age(), None);
    s.run_for(INTERVAL + ms(500));
    let age = s.counter.total_age().unwrap();
    assert!(age <= INTERVAL, "{age:?}");
    // Nothing runs between two readings: the age follows the clock alone.
    s.clock.advance(ms(123));
    assert_eq!(s.counter.total_age(), Some(age + ms(123)));
    // After close the total is unknown, and its age keeps growing.
    s.counter.close();
    s.clock.advance(ms(1_000));
    assert_eq!(s.counter.group_total(), None);
    assert_eq!(s.counter.total_age(), Some(age + ms(1_123)));
}

#[test]
fn a_familys_keys_each_have_their_total_age() {
    let clock = VirtualClock::new();
    let (family, worker) = Family::builder("tenants", INTERVAL)
        .partitions(2)
        .diagnostics(Recorder::new())
        .build(MemoryStore::with_clock(clock.clone()), clock.clone())
        .unwrap();
    let mut pool = LocalPool::new();
    pool.spawner().spawn_local(worker).unwrap();
    family.increment("acme", 1);
    let globex = family.counter("globex").unwrap();
    globex.increment(2);
    run_virtual_until(&mut pool, &clock, ms(10));
    assert_eq!(family.total_age("acme"), None);
    assert_eq!(globex.total_age(), None);

    run_virtual_until(&mut pool, &clock, ms(2_000));
    let acme = family.total_age("acme").unwrap();
    let held = globex.total_age().unwrap();
    assert!(acme < INTERVAL && held < INTERVAL, "{acme:?} {held:?}");
    assert_eq!(family.total_age("globex"), Some(held));
    assert_eq!(family.total_age("initech"), None);
    assert!(family.group_total("initech").is_none());

    clock.advance(ms(250));
    assert_eq!(family.total_age("acme"), Some(acme + ms(250)));
    assert_eq!(globex.total_age(), Some(held + ms(250)));
}

/// A store whose shard for partition 0 of the family "tenants" answers nothing while `hung`
/// is set (what it was sent meanwhile never answers), while the other answers at once: a
/// cluster with one shard hung.
struct OneShardHung {
    memory: MemoryStore<VirtualClock>,
    hung: Arc<AtomicBool>,
}

impl Store for OneShardHung {
    fn name(&self) -> &str {
        "one shard hung"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        if self.hung.load(Ordering::SeqCst)
            && request.space == KeySpace::partition("", "tenants", 0)
        {
            Either::Left(pending())
        } else {
            Either::Right(self.memory.flush(request, report))
        }
    }
}

/// A family's partitions share one slow-store alarm. One partition hanging raises it; the
/// other partition's quick answers must not bring it down while the first still hangs, or it
/// would flap, said slow and normal again and again. Once the shard answers again, it comes
/// down, once.
#[test]
fn a_familys_alarm_stays_raised_while_one_partition_hangs() {
    let clock = VirtualClock::new();
    let events = Recorder::new();
    let hung = Arc::new(AtomicBool::new(true));
    let store = OneShardHung {
        memory: MemoryStore::with_clock(clock.clone()),
        hung: Arc::clone(&hung),
    };
    let (family, worker) = Family::builder("tenants", INTERVAL)
        .partitions(2)
        .diagnostics(events.clone())
        .build(store, clock.clone())
        .unwrap();
    let mut pool = LocalPool::new();
    pool.spawner().spawn_local(worker).unwrap();
    let keys: Vec<String> = (0..16).map(|i| format!("tenant-{i}")).collect();
    assert!(
        (0..2).all(|p| keys.iter().any(|k| partition_of(k, 2) == p)),
        "the keys fall in both partitions"
    );
    let mut run = |intervals: std::ops::Range<u32>| {
        for n in intervals {
            for key in &keys {
                family.increment(key, 1);
            }
            run_virtual_until(&mut pool, &clock, INTERVAL * (n + 1));
        }
    };
    run(0..60);
    assert_eq!(
        events.with_message("round trip slow").len(),
        1,
        "{:?}",
        events.messages()
    );
    assert!(
        events.with_message("round trip normal").is_empty(),
        "said normal while a partition still hung: {:?}",
        events.messages()
    );
    hung.store(false, Ordering::SeqCst);
    run(60..80);
    assert_eq!(
        events.with_message("round trip normal").len(),
        1,
        "{:?}",
        events.messages()
    );
    assert_eq!(events.with_message("round trip slow").len(), 1);
}

/// One reply over half the interval, then every reply under it though not well under (45 %):
/// the round trip did not stay above the threshold, so the alarm is not raised, even though
/// the flush loop looks at its unanswered copy when the first slowness would have lasted long
/// enough.
#[test]
fn one_slow_reply_then_replies_under_the_threshold_raise_no_alarm() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    store.then([Action::Delay(ms(600))]);
    store.then((0..100).map(|_| Action::Delay(ms(450))));
    let events = Recorder::new();
    let mut pool = LocalPool::new();
    let (counter, worker) = Counter::builder("hovering", INTERVAL)
        .diagnostics(events.clone())
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    for n in 1..=10 {
        counter.increment(1);
        run_virtual_until(&mut pool, &clock, INTERVAL * n);
    }
    assert!(store.calls() >= 8, "{} flushes", store.calls());
    assert!(
        events.with_message("round trip slow").is_empty(),
        "{:?}",
        events.messages()
    );
}

/// A store that never answers, and copies that go every few tens of milliseconds (a short flush
/// timeout): no copy stays awaited past half the interval, since only the last four are, yet
/// the store has answered nothing for longer, and the alarm is raised within two intervals.
#[test]
fn a_store_that_never_answers_is_reported_slow_however_often_copies_go() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    store.then((0..10_000).map(|_| Action::Hang));
    let events = Recorder::new();
    let mut pool = LocalPool::new();
    let (counter, worker) = Counter::builder("silent", INTERVAL)
        .flush_timeout(ms(20))
        .diagnostics(events.clone())
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    counter.increment(1);
    pool.run_until_stalled();
    let first = store.call_times()[0];
    run_virtual_until(&mut pool, &clock, first + INTERVAL * 2);
    assert!(store.calls() > 8, "{} copies", store.calls());
    let raised = || events.with_message("round trip slow").len();
    assert_eq!(raised(), 1, "{:?}", events.messages());
    run_virtual_until(&mut pool, &clock, first + INTERVAL * 6);
    assert_eq!(raised(), 1, "{:?}", events.messages());
}
