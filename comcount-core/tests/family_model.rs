//! A family's guarantees, key by key, checked on generated schedules: several participants
//! count several keys spread over several partitions on virtual time, through the family and
//! through handles on keys, while keys are evicted and come back, and the simulated store
//! loses, delays, hangs, turns away and replays their flushes (each flush carrying the keys of
//! one partition) and its clock is skewed and steps back; families are closed, some
//! mid-flush.
//!
//! For every key: no interval's total is ever more than what the participants sent to it, and
//! every unit a participant counted is accounted for once: counted by the store, still
//! buffered, or reported for that key by a `flush failed` event (dropped ones never counted).
//! Each flush carries keys of its own partition only, and each count a participant returns
//! for a key follows the max rule, from a total a reply brought it for that key, or none once
//! it is closed.
//!
//! `PROPTEST_CASES` sets how many schedules run (10,000 by default).
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::clock::Clock;
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_core::keys::partition_of;
use comcount_core::{Family, KeyCounter, KeySpace, Outcome, ParticipantId};
use common::sim::{Fault, Sim, cases, fault};
use futures::task::LocalSpawnExt;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const NAME: &str = "model";
const INTERVAL_MS: u64 = 100;
const MAX_PARTICIPANTS: usize = 4;
/// The keys the schedules count; with two partitions three fall in each, with three two, one
/// and three.
const KEYS: [&str; 6] = ["k0", "k1", "k2", "k3", "k4", "k5"];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn space(partition: u32) -> KeySpace {
    KeySpace::partition("", NAME, partition)
}

#[derive(Clone, Debug)]
enum Step {
    /// Counts for a key through the family, which finds the key, or adds it back.
    Increment {
        participant: usize,
        key: usize,
        amount: u64,
    },
    /// Counts for a key through the participant's handle on it, taken first if it has none:
    /// the key is not evicted while the handle lives.
    IncrementHeld {
        participant: usize,
        key: usize,
        amount: u64,
    },
    /// Drops the participant's handle on a key, if it has one: the key may be evicted again.
    Release {
        participant: usize,
        key: usize,
    },
    /// Reads a key's count without counting, which keeps it from eviction or adds it back.
    Read {
        participant: usize,
        key: usize,
    },
    Skew {
        by_ms: i64,
    },
    /// Closes a participant's family, wherever its flushes are: it keeps counting locally.
    Close {
        participant: usize,
    },
    /// Closes a participant's family this long after its next send (of any partition), so
    /// that the close falls in the middle of a flush.
    CloseAfterSend {
        participant: usize,
        after_ms: u64,
    },
}

fn step() -> impl Strategy<Value = (u64, Step)> {
    let i = INTERVAL_MS as i64;
    let key = 0..KEYS.len();
    let kind = prop_oneof![
        9 => (0..MAX_PARTICIPANTS, key.clone(), 1..1_000u64)
            .prop_map(|(participant, key, amount)| Step::Increment { participant, key, amount }),
        3 => (0..MAX_PARTICIPANTS, key.clone(), 1..1_000u64).prop_map(
            |(participant, key, amount)| Step::IncrementHeld { participant, key, amount }
        ),
        1 => (0..MAX_PARTICIPANTS, key.clone())
            .prop_map(|(participant, key)| Step::Release { participant, key }),
        1 => (0..MAX_PARTICIPANTS, key).prop_map(|(participant, key)| Step::Read { participant, key }),
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

/// One `flush failed` event: the key it names, the flush it is about (its partition, and
/// its sequence number: the participant's last send there, as each partition has one flush
/// in the air at a time) and the amounts.
#[derive(Clone, Debug)]
struct Failed {
    key: Option<String>,
    partition: u32,
    seq: u64,
    dropped: u64,
    unsettled: u64,
}

/// Records the participant's `flush failed` events, and any event under another name than
/// the family's.
#[derive(Clone)]
struct Failures {
    partitions: u32,
    failed: Arc<Mutex<Vec<Failed>>>,
    misnamed: Arc<Mutex<Vec<String>>>,
}

impl Diagnostics for Failures {
    fn record(&self, counter: &str, event: &Event<'_>) {
        if counter != NAME {
            self.misnamed.lock().unwrap().push(counter.to_owned());
        }
        if let Event::FlushFailed {
            key,
            seq,
            dropped,
            unsettled,
            ..
        } = event
        {
            let partition = key.map_or(u32::MAX, |key| partition_of(key, self.partitions));
            let seq = *seq;
            self.failed.lock().unwrap().push(Failed {
                key: key.map(str::to_owned),
                partition,
                seq,
                dropped: *dropped,
                unsettled: *unsettled,
            });
        }
    }
}

struct Participant {
    family: Family,
    handles: HashMap<usize, KeyCounter>,
    failures: Failures,
    id: u64,
    incremented: [u64; KEYS.len()],
    closed_at: Option<Duration>,
}

struct World {
    sim: Sim,
    partitions: u32,
    participants: Vec<Participant>,
}

/// What a schedule's families are like.
#[derive(Clone, Copy, Debug)]
struct Shape {
    participants: usize,
    partitions: u32,
    /// After how many intervals an idle key is evicted.
    evict_after: u64,
    after_reply_without_resend: bool,
}

impl World {
    fn new(shape: Shape, faults: Vec<Fault>) -> Self {
        let sim = Sim::new(ms(INTERVAL_MS), faults);
        let Sim {
            clock, store, pool, ..
        } = &sim;
        let participants = (0..shape.participants)
            .map(|i| {
                let id = i as u64 + 1;
                let failures = Failures {
                    partitions: shape.partitions,
                    failed: Arc::default(),
                    misnamed: Arc::default(),
                };
                let mut builder = Family::builder(NAME, ms(INTERVAL_MS))
                    .partitions(shape.partitions)
                    .evict_after(ms(shape.evict_after * INTERVAL_MS))
                    .participant(ParticipantId::from_u64(id))
                    .diagnostics(failures.clone());
                if shape.after_reply_without_resend {
                    builder = builder.after_reply_without_resend();
                }
                let (family, worker) = builder.build(store.clone(), clock.clone()).unwrap();
                pool.spawner().spawn_local(worker).unwrap();
                Participant {
                    family,
                    handles: HashMap::new(),
                    failures,
                    id,
                    incremented: [0; KEYS.len()],
                    closed_at: None,
                }
            })
            .collect();
        Self {
            sim,
            partitions: shape.partitions,
            participants,
        }
    }

    fn close(&mut self, index: usize) {
        let now = self.sim.clock.now();
        let p = &mut self.participants[index];
        p.family.close();
        p.closed_at.get_or_insert(now);
    }

    fn increment(
        &mut self,
        index: usize,
        key: usize,
        amount: u64,
        held: bool,
    ) -> Result<(), TestCaseError> {
        let p = &mut self.participants[index];
        let returned = if held {
            let family = &p.family;
            let handle = p
                .handles
                .entry(key)
                .or_insert_with(|| family.counter(KEYS[key]).unwrap());
            handle.increment(amount)
        } else {
            p.family.increment(KEYS[key], amount)
        };
        p.incremented[key] += amount;
        self.check_count(index, key, returned)
    }

    fn read(&mut self, index: usize, key: usize) -> Result<(), TestCaseError> {
        let returned = self.participants[index].family.count(KEYS[key]);
        self.check_count(index, key, returned)
    }

    /// The count just returned for `key` follows the max rule, from a total the store did
    /// bring this participant for that key, or none once the family is closed.
    fn check_count(&self, index: usize, key: usize, returned: u64) -> Result<(), TestCaseError> {
        let p = &self.participants[index];
        let name = KEYS[key];
        let group = p.family.group_total(name);
        let buffered = p.family.buffered(name);
        prop_assert_eq!(
            returned,
            group.unwrap_or(0).max(buffered),
            "the count of {} breaks the max rule",
            name
        );
        if let Some(handle) = p.handles.get(&key) {
            prop_assert_eq!(handle.group_total(), group);
            prop_assert_eq!(handle.buffered(), buffered);
        }
        if p.closed_at.is_some() {
            prop_assert_eq!(group, None, "a closed family knows a total for {}", name);
        }
        if let Some(total) = group {
            prop_assert!(
                self.sim.store.brought(p.id, name, total),
                "participant {} takes {} as the total of {}, which no reply brought it",
                p.id,
                total,
                name
            );
        }
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), TestCaseError> {
        // Who applied which flush, of which partition, in which interval.
        let mut applied = HashSet::new();
        let mut applied_intervals = HashSet::new();
        // What was sent to each key of each interval's hash, and counted from each participant.
        let mut sums: HashMap<(String, Arc<str>), u64> = HashMap::new();
        let mut counted: HashMap<(u64, Arc<str>), u64> = HashMap::new();
        for app in self.sim.store.applications() {
            let request = &app.request;
            let p = request.participant.as_u64();
            prop_assert!(!request.entries.is_empty(), "a flush with no key");
            let mut keys = HashSet::new();
            for entry in &request.entries {
                prop_assert!(keys.insert(&entry.key), "{} twice in a flush", entry.key);
                prop_assert_eq!(
                    &request.space,
                    &space(partition_of(&entry.key, self.partitions)),
                    "{} flushed in another partition",
                    entry.key
                );
            }
            let Ok(reply) = &app.reply else { continue };
            if reply.outcome != Outcome::Applied {
                continue;
            }
            prop_assert!(
                applied.insert((p, request.space.clone(), request.seq)),
                "flush {} of participant {} to {:?} applied twice",
                request.seq,
                p,
                request.space
            );
            prop_assert!(
                applied_intervals.insert((p, request.space.clone(), reply.interval)),
                "participant {} added to interval {} of {:?} twice",
                p,
                reply.interval,
                request.space
            );
            prop_assert!(request.window().contains(&reply.interval));
            prop_assert_eq!(reply.counted_in, Some(reply.interval));
            prop_assert_eq!(app.totals_after.len(), request.entries.len());
            let hash = request.interval_key(reply.interval);
            for (entry, after) in request.entries.iter().zip(&app.totals_after) {
                let sum = sums
                    .entry((hash.clone(), Arc::clone(&entry.key)))
                    .or_default();
                *sum += entry.amount;
                prop_assert!(
                    after.is_some_and(|total| total <= *sum),
                    "{} of {} holds {:?}, more than the {} sent to it",
                    entry.key,
                    hash,
                    after,
                    sum
                );
                *counted.entry((p, Arc::clone(&entry.key))).or_default() += entry.amount;
            }
        }
        for p in &self.participants {
            let misnamed = p.failures.misnamed.lock().unwrap().clone();
            prop_assert!(misnamed.is_empty(), "events under {:?}", misnamed);
            let failed = p.failures.failed.lock().unwrap().clone();
            for f in &failed {
                prop_assert!(
                    f.key.is_some() || f.dropped + f.unsettled == 0,
                    "participant {} reported an amount for no key: {:?}",
                    p.id,
                    f
                );
                prop_assert!(
                    f.dropped == 0 || !applied.contains(&(p.id, space(f.partition), f.seq)),
                    "participant {} reported {:?} dropped, but it was counted",
                    p.id,
                    f
                );
            }
            for (k, key) in KEYS.iter().enumerate() {
                let of_key = || failed.iter().filter(|f| f.key.as_deref() == Some(key));
                let dropped: u64 = of_key().map(|f| f.dropped).sum();
                // An unsettled flush may or may not have been counted: whichever it was,
                // its amount is accounted for once.
                let unsettled_not_counted: u64 = of_key()
                    .filter(|f| !applied.contains(&(p.id, space(f.partition), f.seq)))
                    .map(|f| f.unsettled)
                    .sum();
                let counted = counted.get(&(p.id, Arc::from(*key))).copied().unwrap_or(0);
                let buffered = p.family.buffered(key);
                prop_assert_eq!(
                    p.incremented[k],
                    counted + buffered + dropped + unsettled_not_counted,
                    "participant {} lost or doubled units of {} (counted {}, buffered {}, \
                     dropped {}, unsettled not counted {}; failures {:?})",
                    p.id,
                    key,
                    counted,
                    buffered,
                    dropped,
                    unsettled_not_counted,
                    failed
                );
            }
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
                for key in KEYS {
                    prop_assert_eq!(p.family.group_total(key), None);
                }
            }
        }
        Ok(())
    }
}

fn run_schedule(
    shape: Shape,
    steps: Vec<(u64, Step)>,
    faults: Vec<Fault>,
) -> Result<(), TestCaseError> {
    let mut world = World::new(shape, faults);
    let n = shape.participants;
    for (gap, step) in steps {
        world.sim.run_for(ms(gap));
        match step {
            Step::Increment {
                participant,
                key,
                amount,
            } => world.increment(participant % n, key, amount, false)?,
            Step::IncrementHeld {
                participant,
                key,
                amount,
            } => world.increment(participant % n, key, amount, true)?,
            Step::Release { participant, key } => {
                world.participants[participant % n].handles.remove(&key);
            }
            Step::Read { participant, key } => world.read(participant % n, key)?,
            Step::Skew { by_ms } => world.sim.store.skew(by_ms),
            Step::Close { participant } => {
                // Most draws miss, so that most schedules keep most participants.
                if participant < n {
                    world.close(participant);
                }
            }
            Step::CloseAfterSend {
                participant,
                after_ms,
            } => {
                if participant < n {
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
        p.family.close();
    }
    world.sim.pool.run_until_stalled();
    Ok(())
}

fn shape() -> impl Strategy<Value = Shape> {
    (1..=MAX_PARTICIPANTS, 2..=3u32, 1..=3u64, any::<bool>()).prop_map(
        |(participants, partitions, evict_after, after_reply_without_resend)| Shape {
            participants,
            partitions,
            evict_after,
            after_reply_without_resend,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 10_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_fault_overstates_loses_or_doubles_a_key_s_count(
        shape in shape(),
        steps in prop::collection::vec(step(), 1..60),
        faults in prop::collection::vec(fault(INTERVAL_MS), 0..40),
    ) {
        run_schedule(shape, steps, faults)?;
    }
}

/// The keys spread over every partition, with two partitions and with three, so that the
/// schedules flush several partitions side by side.
#[test]
fn the_keys_fall_in_every_partition() {
    for partitions in [2, 3] {
        let used: HashSet<u32> = KEYS
            .iter()
            .map(|key| partition_of(key, partitions))
            .collect();
        assert_eq!(used.len(), partitions as usize, "{partitions} partitions");
    }
}

/// A quiet schedule: every participant's count of every key ends up in the store, exactly,
/// though each key is evicted between the two turns it is counted in.
#[test]
fn without_faults_every_key_is_counted_once() {
    let shape = Shape {
        participants: 3,
        partitions: 3,
        evict_after: 1,
        after_reply_without_resend: false,
    };
    let mut world = World::new(shape, Vec::new());
    // Each key is counted in two turns of six steps (ten units each), thirty-six steps
    // (thirteen intervals) apart; between them, only the key counted last is still held.
    for i in 0..72 {
        if i == 36 {
            for p in &world.participants {
                assert!(
                    p.family.len() <= 1,
                    "idle keys were not evicted: {:?}",
                    p.family
                );
            }
        }
        world.sim.run_for(ms(37));
        world
            .increment(i % 3, (i / 6) % KEYS.len(), 10, false)
            .unwrap();
    }
    world.sim.run_for(ms(10 * INTERVAL_MS));
    world.check_invariants().unwrap();
    let mut counted: HashMap<String, u64> = HashMap::new();
    for app in world.sim.store.applications() {
        if app.reply.is_ok_and(|r| r.outcome == Outcome::Applied) {
            for entry in &app.request.entries {
                *counted.entry(entry.key.to_string()).or_default() += entry.amount;
            }
        }
    }
    for key in KEYS {
        assert_eq!(counted.get(key), Some(&120), "{key}: {counted:?}");
    }
    for p in &world.participants {
        let failed = p.failures.failed.lock().unwrap();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(p.family.len(), 0, "an idle key was not evicted");
    }
}
