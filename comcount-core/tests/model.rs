//! The counter's guarantees, checked on generated schedules: several participants increment
//! on virtual time while a simulated store loses, delays, hangs, turns away and replays their
//! flushes and its clock is skewed and steps back; counters are closed, some mid-flush.
//!
//! `PROPTEST_CASES` sets how many schedules run (10,000 by default).
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use comcount_core::clock::Clock;
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_core::{Counter, Outcome, ParticipantId};
use common::sim::{Fault, Sim, cases, fault};
use futures::task::LocalSpawnExt;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::sync::{Arc, Mutex};

const INTERVAL_MS: u64 = 100;
const MAX_PARTICIPANTS: usize = 4;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[derive(Clone, Debug)]
enum Step {
    Increment {
        participant: usize,
        amount: u64,
    },
    Skew {
        by_ms: i64,
    },
    /// Closes a participant's counter, wherever its flush is: it keeps counting locally.
    Close {
        participant: usize,
    },
    /// Closes a participant's counter this long after its next send, so that the close falls
    /// in the middle of a flush: while a copy is awaited, or while the next one waits to go.
    CloseAfterSend {
        participant: usize,
        after_ms: u64,
    },
}

fn step() -> impl Strategy<Value = (u64, Step)> {
    let i = INTERVAL_MS as i64;
    let kind = prop_oneof![
        12 => (0..MAX_PARTICIPANTS, 1..1_000u64)
            .prop_map(|(participant, amount)| Step::Increment { participant, amount }),
        1 => (-2 * i..i).prop_map(|by_ms| Step::Skew { by_ms }),
        1 => (0..MAX_PARTICIPANTS * 4).prop_map(|participant| Step::Close { participant }),
        2 => (
            0..MAX_PARTICIPANTS * 4,
            prop_oneof![3 => 0..INTERVAL_MS / 10, 1 => 0..INTERVAL_MS],
        )
            .prop_map(|(participant, after_ms)| Step::CloseAfterSend {
                participant,
                after_ms
            }),
    ];
    (0..INTERVAL_MS, kind)
}

/// Records each flush reported dropped and each reported unsettled: its sequence number and its
/// amount.
#[derive(Clone)]
struct Drops {
    dropped: Arc<Mutex<Vec<(u64, u64)>>>,
    unsettled: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl Diagnostics for Drops {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        if let Event::FlushFailed {
            seq,
            dropped,
            unsettled,
            ..
        } = event
        {
            if *dropped > 0 {
                self.dropped.lock().unwrap().push((*seq, *dropped));
            }
            if *unsettled > 0 {
                self.unsettled.lock().unwrap().push((*seq, *unsettled));
            }
        }
    }
}

struct Participant {
    counter: Counter,
    drops: Drops,
    id: u64,
    incremented: u64,
    /// When the counter was closed, if it was.
    closed_at: Option<Duration>,
}

struct World {
    sim: Sim,
    participants: Vec<Participant>,
}

impl World {
    fn new(participants: usize, faults: Vec<Fault>, after_reply_without_resend: bool) -> Self {
        let sim = Sim::new(ms(INTERVAL_MS), faults);
        let Sim {
            clock, store, pool, ..
        } = &sim;
        let participants = (0..participants)
            .map(|i| {
                let id = i as u64 + 1;
                let drops = Drops {
                    dropped: Arc::default(),
                    unsettled: Arc::default(),
                };
                let mut builder = Counter::builder("model", ms(INTERVAL_MS))
                    .participant(ParticipantId::from_u64(id))
                    .diagnostics(drops.clone());
                if after_reply_without_resend {
                    builder = builder.after_reply_without_resend();
                }
                let (counter, worker) = builder.build(store.clone(), clock.clone()).unwrap();
                pool.spawner().spawn_local(worker).unwrap();
                Participant {
                    counter,
                    drops,
                    id,
                    incremented: 0,
                    closed_at: None,
                }
            })
            .collect();
        Self { sim, participants }
    }

    /// What the participant should take as the group's total now: the last total a reply
    /// brought, unless two intervals have passed since (plus the round trip of the copy that
    /// brought it, up to three intervals), or the counter is closed.
    fn expected_group_total(&self, participant: &Participant) -> Option<u64> {
        if participant.closed_at.is_some() {
            return None;
        }
        let (at, total, round_trip) = self.sim.store.last_reply(participant.id)?;
        let fresh_for = ms(2 * INTERVAL_MS) + round_trip.min(ms(3 * INTERVAL_MS));
        let fresh = self.sim.clock.now() - at < fresh_for;
        total.filter(|_| fresh)
    }

    fn close(&mut self, index: usize) {
        let now = self.sim.clock.now();
        let p = &mut self.participants[index];
        p.counter.close();
        p.closed_at.get_or_insert(now);
    }

    fn increment(&mut self, index: usize, amount: u64) -> Result<(), TestCaseError> {
        let returned = self.participants[index].counter.increment(amount);
        self.participants[index].incremented += amount;
        let p = &self.participants[index];
        let group = self.expected_group_total(p);
        let known = p.counter.group_total();
        if known != group {
            // Only a larger total of an interval its own flush was counted in, now ended.
            prop_assert!(
                known.is_some_and(|total| total > group.unwrap_or(0)
                    && self.sim.store.landed_and_fresh(p.id, total)),
                "participant {} knows the wrong total: {known:?}, not {group:?}",
                p.id
            );
        }
        prop_assert_eq!(
            returned,
            known.unwrap_or(0).max(p.counter.buffered()),
            "the count breaks the max rule"
        );
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), TestCaseError> {
        let applications = self.sim.store.applications();
        let mut applied_seqs = HashSet::new();
        let mut applied_intervals = HashSet::new();
        let mut sums: HashMap<String, u64> = HashMap::new();
        let mut counted: HashMap<u64, u64> = HashMap::new();
        for app in &applications {
            let Ok(reply) = &app.reply else { continue };
            if reply.outcome != Outcome::Applied {
                continue;
            }
            let p = app.request.participant.as_u64();
            prop_assert!(
                applied_seqs.insert((p, app.request.seq)),
                "flush {} of participant {} applied twice",
                app.request.seq,
                p
            );
            prop_assert!(
                applied_intervals.insert((p, reply.interval)),
                "participant {} added to interval {} twice",
                p,
                reply.interval
            );
            prop_assert!(app.request.window().contains(&reply.interval));
            prop_assert_eq!(reply.counted_in, Some(reply.interval));
            let key = app.request.interval_key(reply.interval);
            let sum = sums.entry(key.clone()).or_default();
            *sum += app.request.amount();
            prop_assert!(
                app.total_after.unwrap_or(0) <= *sum,
                "interval key {} holds {:?}, more than the {} sent to it",
                key,
                app.total_after,
                sum
            );
            *counted.entry(p).or_default() += app.request.amount();
        }
        for p in &self.participants {
            let drops = p.drops.dropped.lock().unwrap().clone();
            for (seq, amount) in &drops {
                prop_assert!(
                    !applied_seqs.contains(&(p.id, *seq)),
                    "participant {} reported flush {} dropped ({}), but it was counted",
                    p.id,
                    seq,
                    amount
                );
            }
            let dropped: u64 = drops.iter().map(|(_, amount)| amount).sum();
            // An unsettled flush may or may not have been counted: whichever it was, its
            // amount is accounted for once.
            let unsettled = p.drops.unsettled.lock().unwrap().clone();
            let unsettled_not_counted: u64 = unsettled
                .iter()
                .filter(|(seq, _)| !applied_seqs.contains(&(p.id, *seq)))
                .map(|(_, amount)| amount)
                .sum();
            let counted = counted.get(&p.id).copied().unwrap_or(0);
            prop_assert_eq!(
                p.incremented,
                counted + p.counter.buffered() + dropped + unsettled_not_counted,
                "participant {} lost or doubled units (counted {}, buffered {}, dropped {}, \
                 unsettled {:?})",
                p.id,
                counted,
                p.counter.buffered(),
                dropped,
                unsettled
            );
            if let Some(closed_at) = p.closed_at {
                let late: Vec<_> = self
                    .sim
                    .store
                    .sends(p.id)
                    .into_iter()
                    .filter(|(at, _)| *at > closed_at)
                    .collect();
                prop_assert!(
                    late.is_empty(),
                    "participant {} closed at {:?} sent {:?} after",
                    p.id,
                    closed_at,
                    late
                );
                prop_assert_eq!(p.counter.group_total(), None);
            }
        }
        Ok(())
    }
}

fn run_schedule(
    participants: usize,
    steps: Vec<(u64, Step)>,
    faults: Vec<Fault>,
    after_reply_without_resend: bool,
) -> Result<(), TestCaseError> {
    let mut world = World::new(participants, faults, after_reply_without_resend);
    for (gap, step) in steps {
        world.sim.run_for(ms(gap));
        match step {
            Step::Increment {
                participant,
                amount,
            } => world.increment(participant % participants, amount)?,
            Step::Skew { by_ms } => world.sim.store.skew(by_ms),
            Step::Close { participant } => {
                // Most draws miss, so that most schedules keep most participants.
                if participant < participants {
                    world.close(participant);
                }
            }
            Step::CloseAfterSend {
                participant,
                after_ms,
            } => {
                if participant < participants {
                    let id = world.participants[participant].id;
                    world.sim.run_past_next_send(id, ms(after_ms));
                    world.close(participant);
                }
            }
        }
    }
    world.sim.settle()?;
    world.check_invariants()?;
    for p in &world.participants {
        p.counter.close();
    }
    world.sim.pool.run_until_stalled();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 10_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_fault_overstates_loses_or_doubles_a_count(
        participants in 1..=MAX_PARTICIPANTS,
        steps in prop::collection::vec(step(), 1..60),
        faults in prop::collection::vec(fault(INTERVAL_MS), 0..40),
        after_reply_without_resend in any::<bool>(),
    ) {
        run_schedule(participants, steps, faults, after_reply_without_resend)?;
    }
}

/// A quiet schedule: every participant's count ends up in the store, exactly.
#[test]
fn without_faults_every_unit_is_counted_once() {
    let steps: Vec<_> = (0..40)
        .map(|i| {
            (
                37,
                Step::Increment {
                    participant: i % 3,
                    amount: 10,
                },
            )
        })
        .collect();
    run_schedule(3, steps.clone(), Vec::new(), false).unwrap();
    run_schedule(3, steps, Vec::new(), true).unwrap();
}

/// The intervals each participant added to, in order.
fn added_intervals(world: &World) -> HashMap<u64, Vec<u64>> {
    let mut added: HashMap<u64, Vec<u64>> = HashMap::new();
    for app in world.sim.store.applications() {
        if let Ok(reply) = &app.reply
            && reply.outcome == Outcome::Applied
        {
            added
                .entry(app.request.participant.as_u64())
                .or_default()
                .push(reply.interval);
        }
    }
    added
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases() / 10,
        ..ProptestConfig::default()
    })]

    /// Aimed at mid-interval, flushes whose delay varies by less than a quarter of an interval
    /// add to every interval: none is skipped, once the store's clock is learned.
    #[test]
    fn aimed_flushes_skip_no_interval_under_jitter_below_a_quarter(
        participants in 1..=MAX_PARTICIPANTS,
        delays in prop::collection::vec(0..INTERVAL_MS / 4, 200),
    ) {
        let faults = delays.into_iter().map(|d| Fault::Delay(ms(d))).collect();
        let mut world = World::new(participants, faults, false);
        for tick in 0..300u64 {
            world.sim.run_until(ms(tick * 10));
            world.increment((tick as usize) % participants, 1)?;
        }
        for (participant, intervals) in added_intervals(&world) {
            prop_assert!(
                intervals.windows(2).all(|w| w[1] == w[0] + 1),
                "participant {} skipped an interval: {:?}",
                participant,
                intervals
            );
        }
    }
}
