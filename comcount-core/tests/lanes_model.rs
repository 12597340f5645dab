//! Lanes, checked on generated schedules: counters on a store farther away than an interval
//! flush through several lanes, each a participant of its own to the store, while the store
//! loses, replays, hangs, turns away and refuses some of their flushes, and counters are closed
//! with flushes in the air on several lanes. No lane's flush is applied twice, no key holds
//! more than was sent to it, nothing goes out after a close, and every unit is reported once:
//! completed, still buffered, dropped or unsettled.
//!
//! `PROPTEST_CASES` sets how many schedules run (10,000 by default; this test runs a tenth of
//! them, each being ten times as long as the model's).
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::clock::Clock;
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_core::{Counter, Outcome, ParticipantId};
use common::sim::{Fault, Sim, cases};
use futures::task::LocalSpawnExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const INTERVAL_MS: u64 = 100;
const MAX_COUNTERS: usize = 2;
const MAX_LANES: u32 = 4;
/// Intervals run before the schedule's steps, for lanes to open.
const WARM_UP: u64 = 40;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[derive(Clone, Debug)]
enum Step {
    Increment {
        counter: usize,
        amount: u64,
    },
    /// Closes a counter wherever its flushes are.
    Close {
        counter: usize,
    },
    /// Closes a counter this long after lane `lane`'s next send.
    CloseAfterSend {
        counter: usize,
        lane: u32,
        after_ms: u64,
    },
}

fn step() -> impl Strategy<Value = (u64, Step)> {
    let kind = prop_oneof![
        12 => (0..MAX_COUNTERS, 1..1_000u64)
            .prop_map(|(counter, amount)| Step::Increment { counter, amount }),
        1 => (0..MAX_COUNTERS * 3).prop_map(|counter| Step::Close { counter }),
        2 => (0..MAX_COUNTERS * 3, 0..MAX_LANES, 0..2 * INTERVAL_MS)
            .prop_map(|(counter, lane, after_ms)| Step::CloseAfterSend { counter, lane, after_ms }),
    ];
    (0..INTERVAL_MS, kind)
}

/// The store's answer to one flush: most take the round trip (give or take a few
/// milliseconds), some meet a fault of another kind.
fn fault(round_trip_ms: u64) -> impl Strategy<Value = Fault> {
    let i = INTERVAL_MS;
    prop_oneof![
        24 => (0..4u64).prop_map(move |jitter| Fault::Delay(ms(round_trip_ms + jitter))),
        1 => Just(Fault::ReplyLostAfter),
        1 => Just(Fault::LostBefore),
        1 => (2 * i..=3 * i).prop_map(|d| Fault::Hang(ms(d))),
        1 => (0..3 * i, any::<bool>())
            .prop_map(|(d, reply_lost)| Fault::Replayed { after: ms(d), reply_lost }),
        1 => Just(Fault::TurnedAway),
        1 => Just(Fault::Refused),
        1 => Just(Fault::AppliedThenRefused),
    ]
}

fn schedule() -> impl Strategy<Value = (usize, u64, Vec<Fault>, Vec<(u64, Step)>)> {
    (1..=MAX_COUNTERS, 110..=340u64).prop_flat_map(|(counters, round_trip_ms)| {
        (
            Just(counters),
            Just(round_trip_ms),
            prop::collection::vec(fault(round_trip_ms), 300..400),
            prop::collection::vec(step(), 1..60),
        )
    })
}

/// What a counter reported: the amounts of its completed flushes, and of those it gave up.
#[derive(Clone, Default)]
struct Reports(Arc<Mutex<Reported>>);

#[derive(Default, Debug)]
struct Reported {
    completed: u64,
    dropped: u64,
    unsettled: u64,
}

impl Diagnostics for Reports {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        let mut reported = self.0.lock().unwrap();
        match event {
            Event::FlushCompleted { amount, .. } => reported.completed += amount,
            Event::FlushFailed {
                dropped, unsettled, ..
            } => {
                reported.dropped += dropped;
                reported.unsettled += unsettled;
            }
            _ => {}
        }
    }
}

struct Participant {
    counter: Counter,
    id: ParticipantId,
    reports: Reports,
    incremented: u64,
    closed_at: Option<Duration>,
}

/// Runs one schedule; returns whether some counter flushed through more than one lane.
fn run_schedule(
    counters: usize,
    faults: Vec<Fault>,
    steps: Vec<(u64, Step)>,
) -> Result<bool, TestCaseError> {
    let mut sim = Sim::new(ms(INTERVAL_MS), faults);
    let mut participants: Vec<Participant> = (0..counters)
        .map(|i| {
            let id = ParticipantId::from_u64(i as u64 + 1);
            let reports = Reports::default();
            let (counter, worker) = Counter::builder("lanes", ms(INTERVAL_MS))
                .participant(id)
                .diagnostics(reports.clone())
                .build(sim.store.clone(), sim.clock.clone())
                .unwrap();
            sim.pool.spawner().spawn_local(worker).unwrap();
            Participant {
                counter,
                id,
                reports,
                incremented: 0,
                closed_at: None,
            }
        })
        .collect();
    for _ in 0..WARM_UP * 2 {
        for p in &mut participants {
            p.counter.increment(3);
            p.incremented += 3;
        }
        sim.run_for(ms(INTERVAL_MS / 2));
    }
    for (gap, step) in steps {
        sim.run_for(ms(gap));
        match step {
            Step::Increment { counter, amount } => {
                let p = &mut participants[counter % counters];
                p.counter.increment(amount);
                p.incremented += amount;
            }
            Step::Close { counter } => {
                if let Some(p) = participants.get_mut(counter) {
                    p.counter.close();
                    p.closed_at.get_or_insert(sim.clock.now());
                }
            }
            Step::CloseAfterSend {
                counter,
                lane,
                after_ms,
            } => {
                if let Some(p) = participants.get_mut(counter) {
                    sim.run_past_next_send(p.id.lane(lane).as_u64(), ms(after_ms));
                    p.counter.close();
                    p.closed_at.get_or_insert(sim.clock.now());
                }
            }
        }
    }
    sim.settle()?;
    let lanes_used = check(&sim, &participants)?;
    for p in &participants {
        p.counter.close();
    }
    sim.pool.run_until_stalled();
    Ok(lanes_used)
}

/// Checks the invariants; returns whether some counter flushed through more than one lane.
fn check(sim: &Sim, participants: &[Participant]) -> Result<bool, TestCaseError> {
    let mut applied = HashSet::new();
    let mut added_to = HashSet::new();
    let mut sums: HashMap<String, u64> = HashMap::new();
    let mut counted: HashMap<ParticipantId, u64> = HashMap::new();
    for app in sim.store.applications() {
        let Ok(reply) = &app.reply else { continue };
        if reply.outcome != Outcome::Applied {
            continue;
        }
        let id = app.request.participant;
        prop_assert!(
            applied.insert((id, app.request.seq)),
            "flush {} of {id:?} applied twice",
            app.request.seq
        );
        prop_assert!(
            added_to.insert((id, reply.interval)),
            "{id:?} added to interval {} twice",
            reply.interval
        );
        let key = app.request.interval_key(reply.interval);
        let sum = sums.entry(key.clone()).or_default();
        *sum += app.request.amount();
        prop_assert!(
            app.total_after.unwrap_or(0) <= *sum,
            "interval key {key} holds {:?}, more than the {sum} sent to it",
            app.total_after
        );
        *counted.entry(id).or_default() += app.request.amount();
    }
    let mut lanes_used = false;
    for p in participants {
        let lanes: Vec<ParticipantId> = (0..MAX_LANES).map(|lane| p.id.lane(lane)).collect();
        lanes_used |= lanes[1..].iter().any(|lane| counted.contains_key(lane));
        let in_store: u64 = lanes.iter().filter_map(|lane| counted.get(lane)).sum();
        let reported = p.reports.0.lock().unwrap();
        let buffered = p.counter.buffered();
        prop_assert_eq!(
            p.incremented,
            reported.completed + buffered + reported.dropped + reported.unsettled,
            "{:?} reported {:?} with {} buffered, of {} counted",
            p.id,
            *reported,
            buffered,
            p.incremented
        );
        prop_assert!(
            reported.completed <= in_store && in_store <= reported.completed + reported.unsettled,
            "{:?}: the store counted {in_store}, against {:?}",
            p.id,
            *reported
        );
        if let Some(closed_at) = p.closed_at {
            for lane in &lanes {
                let late: Vec<_> = sim
                    .store
                    .sends(lane.as_u64())
                    .into_iter()
                    .filter(|(at, _)| *at > closed_at)
                    .collect();
                prop_assert!(
                    late.is_empty(),
                    "{:?} closed at {closed_at:?}, and lane {lane:?} sent {late:?} after",
                    p.id
                );
            }
            prop_assert_eq!(p.counter.group_total(), None);
        }
    }
    Ok(lanes_used)
}

#[test]
fn lanes_under_faults_and_closes_count_every_unit_once() {
    let runs = (cases() / 10).max(10);
    let mut runner = TestRunner::new(Config {
        cases: runs,
        max_shrink_iters: 2_000,
        ..Config::default()
    });
    let with_lanes = Arc::new(Mutex::new(0u32));
    let counted = Arc::clone(&with_lanes);
    runner
        .run(
            &schedule(),
            move |(counters, _round_trip, faults, steps)| {
                if run_schedule(counters, faults, steps)? {
                    *counted.lock().unwrap() += 1;
                }
                Ok(())
            },
        )
        .unwrap();
    let with_lanes = *with_lanes.lock().unwrap();
    eprintln!("lanes opened in {with_lanes} of {runs} schedules");
    assert!(
        with_lanes * 2 >= runs,
        "lanes opened in {with_lanes} of {runs} schedules"
    );
}

/// A lane that closes and opens again is the same participant to the store, whose fence still
/// holds the number of its last flush, so it goes on from that number. Started again from the
/// counter's first number, its flushes came back stale and were reported dropped, or as
/// duplicates of its earlier flushes and reported completed, although never counted.
#[test]
fn a_lane_opened_again_goes_on_from_its_last_sequence_number() {
    let far = || std::iter::repeat_n(Fault::Delay(ms(150)), 5_000);
    let mut sim = Sim::new(ms(INTERVAL_MS), far());
    let id = ParticipantId::from_u64(1);
    let reports = Reports::default();
    let (counter, worker) = Counter::builder("reopened", ms(INTERVAL_MS))
        .participant(id)
        .diagnostics(reports.clone())
        .build(sim.store.clone(), sim.clock.clone())
        .unwrap();
    sim.pool.spawner().spawn_local(worker).unwrap();
    let mut incremented = 0;
    let mut run = |sim: &mut Sim, intervals: u64| {
        for _ in 0..intervals * 2 {
            counter.increment(3);
            incremented += 3;
            sim.run_for(ms(INTERVAL_MS / 2));
        }
    };
    let lane_1 = id.lane(1);
    let applied_by_lane_1 = |sim: &Sim| {
        sim.store
            .applied()
            .iter()
            .filter(|app| app.request.participant == lane_1)
            .count()
    };
    // Far away: a second lane opens and flushes.
    run(&mut sim, 40);
    let before = applied_by_lane_1(&sim);
    assert!(before > 0, "no second lane opened on a far store");
    // Close by: the lanes close. Far again, long enough for the quick round trips to be
    // forgotten (until then the far store looks like a queue): the second lane opens again.
    sim.store
        .set_faults(std::iter::repeat_n(Fault::Delay(ms(10)), 1_000));
    run(&mut sim, 40);
    let closed = applied_by_lane_1(&sim);
    sim.store.set_faults(far());
    run(&mut sim, 500);
    assert!(
        applied_by_lane_1(&sim) > closed,
        "the second lane, opened again, had none of its flushes applied"
    );
    sim.settle().unwrap();
    let reported = reports.0.lock().unwrap();
    assert_eq!(
        (reported.dropped, reported.unsettled),
        (0, 0),
        "{reported:?}"
    );
    let counted: u64 = sim
        .store
        .applied()
        .iter()
        .map(|app| app.request.amount())
        .sum();
    assert_eq!(reported.completed, counted);
    assert_eq!(reported.completed + counter.buffered(), incremented);
}
