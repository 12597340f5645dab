//! A fleet on a store whose round trip is one and a half intervals, on virtual time: no
//! participant can add to every interval, and those that started together must not all add to
//! the same ones, or the intervals between hold no key and nobody learns a total. A
//! participant alone must add to two in a row now and then, or it never learns one.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::time::Duration;

use comcount_core::clock::VirtualClock;
use comcount_core::diagnostics::Recorder;
use comcount_core::{Counter, ParticipantId};
use common::runtime::run_virtual_until;
use common::scripted::{Action, ScriptedStore};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

const INTERVAL: Duration = Duration::from_millis(100);
const PARTICIPANTS: u64 = 4;
const INTERVALS: u32 = 60;
/// Fleets run, each of its own participants. Which intervals a participant skips is drawn at
/// random (seeded by its id), so one fleet may be unlucky; over several the share of samples
/// that know the total is stable.
const FLEETS: u64 = 8;

#[test]
fn participants_that_started_together_spread_over_the_intervals() {
    let (mut known, mut samples) = (0, 0);
    for fleet in 0..FLEETS {
        let (fleet_known, fleet_samples, _) = run_fleet(fleet * PARTICIPANTS, PARTICIPANTS);
        eprintln!("fleet {fleet}: known in {fleet_known} of {fleet_samples} samples");
        known += fleet_known;
        samples += fleet_samples;
    }
    eprintln!("known in {known} of {samples} samples");
    assert!(
        known * 5 > samples * 3,
        "the total was known in {known} of {samples} samples"
    );
}

#[test]
fn a_fleet_on_virtual_time_with_fixed_ids_repeats_exactly() {
    let (known, samples, calls) = run_fleet(0, PARTICIPANTS);
    assert!(calls.len() > 100, "{} calls", calls.len());
    assert_eq!(run_fleet(0, PARTICIPANTS), (known, samples, calls));
}

/// A participant alone, whose flushes each take one and a half intervals: sent as soon as the
/// reply before comes, they land in two intervals out of three, and the second of each pair
/// brings the total of the first. The next flush's reply finds the interval before it empty,
/// and the total unknown, so half the time is as good as it gets. Aimed at the middle of each
/// interval, every flush skipped one, and the total was never known.
#[test]
fn a_participant_alone_adds_to_pairs_of_intervals_and_knows_its_total() {
    let (mut known, mut samples) = (0, 0);
    for id in 0..FLEETS {
        let (alone_known, alone_samples, _) = run_fleet(id, 1);
        eprintln!("participant {id}: known in {alone_known} of {alone_samples} samples");
        known += alone_known;
        samples += alone_samples;
    }
    eprintln!("known in {known} of {samples} samples");
    assert!(
        known * 5 > samples * 2,
        "the total was known in {known} of {samples} samples"
    );
}

/// Runs a fleet of participants `first_id + 1 ..` for `INTERVALS` intervals, and counts the
/// samples (every participant, ten times an interval, after the first ten intervals) in which
/// the total was known; with the times the store was called.
fn run_fleet(first_id: u64, participants: u64) -> (usize, usize, Vec<Duration>) {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    store.then((0..10_000).map(|_| Action::Delay(INTERVAL * 3 / 2)));
    let mut pool = LocalPool::new();
    let counters: Vec<Counter> = (1..=participants)
        .map(|id| {
            let (counter, worker) = Counter::builder("together", INTERVAL)
                .participant(ParticipantId::from_u64(first_id + id))
                .diagnostics(Recorder::new())
                .build(store.clone(), clock.clone())
                .unwrap();
            pool.spawner().spawn_local(worker).unwrap();
            counter
        })
        .collect();
    let (mut known, mut samples) = (0, 0);
    for n in 1..=INTERVALS * 10 {
        for counter in &counters {
            counter.increment(1);
        }
        let until = INTERVAL / 10 * n;
        run_virtual_until(&mut pool, &clock, until);
        if n > 100 {
            samples += counters.len();
            known += counters
                .iter()
                .filter(|c| c.group_total().is_some())
                .count();
        }
    }
    (known, samples, store.call_times())
}
