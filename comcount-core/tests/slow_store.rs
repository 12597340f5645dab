//! Stores whose round trip is longer than an interval, on virtual time. With one flush in the
//! air no participant can add to every interval: those that started together must not all add
//! to the same ones, or the intervals between hold no key and nobody learns a total. A
//! participant alone learns one only from flushes in consecutive intervals, which its lanes
//! take turns to land.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::collections::HashSet;
use std::time::Duration;

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::Recorder;
use comcount_core::{Counter, FlushReply, Outcome, ParticipantId};
use common::runtime::run_virtual_until;
use common::scripted::{Action, ScriptedStore};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

const INTERVAL: Duration = Duration::from_millis(100);
const PARTICIPANTS: u64 = 4;
/// Intervals sampled, after the warm-up.
const INTERVALS: u32 = 50;
/// Intervals not sampled at the start: participants learn the store's clock.
const WARM_UP: u32 = 10;
/// Intervals not sampled at the start where lanes may open: eight round trips must be seen
/// first, to tell a far store from a queue.
const LANES_WARM_UP: u32 = 30;
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

/// A participant alone, at round trips of 1.2, 1.5, 2 and 3 intervals: one flush
/// in the air at a time could add to two intervals in a row half the time at most, and from
/// two intervals on never. Its lanes take turns and add to every interval, so it knows its
/// total nearly all the time, sending one flush an interval, as at a store close by.
#[test]
fn a_participant_alone_at_a_far_store_knows_its_total_through_its_lanes() {
    for tenths in [12, 15, 20, 30] {
        let round_trip = INTERVAL * tenths / 10;
        let (mut known, mut samples, mut calls) = (0, 0, 0);
        for id in 0..FLEETS {
            let (alone_known, alone_samples, alone_calls) =
                run_fleet_at(id, 1, round_trip, LANES_WARM_UP);
            known += alone_known;
            samples += alone_samples;
            calls += alone_calls.len();
        }
        eprintln!(
            "round trip {round_trip:?}: known in {known} of {samples} samples, {calls} calls"
        );
        assert!(
            known * 10 > samples * 9,
            "at a round trip of {round_trip:?}, the total was known in {known} of {samples} \
             samples"
        );
        // One flush an interval, and a few wrong-interval replies as lanes open: no more.
        let most = FLEETS as usize * (INTERVALS + LANES_WARM_UP + 10) as usize;
        assert!(
            calls <= most,
            "at a round trip of {round_trip:?}, {calls} calls, more than {most}"
        );
    }
}

/// A participant alone at a round trip of two intervals, closed with its lanes' flushes in the
/// air: nothing goes out after `close()`, and every unit is accounted for once, as completed,
/// still buffered, or reported failed (dropped or unsettled).
#[test]
fn closing_with_flushes_in_the_air_on_several_lanes_accounts_for_every_unit() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    store.then((0..10_000).map(|_| Action::Delay(INTERVAL * 2)));
    let mut pool = LocalPool::new();
    let (counter, events) = lone("lanes", 7, &store, &clock, &pool);
    let mut incremented = 0;
    for n in 1..=400 {
        counter.increment(n);
        incremented += n;
        run_virtual_until(&mut pool, &clock, INTERVAL / 10 * n as u32);
    }
    let mut lanes: Vec<_> = store.requests().iter().map(|r| r.participant).collect();
    lanes.sort_unstable();
    lanes.dedup();
    assert!(lanes.len() >= 2, "flushed under {lanes:?} alone");
    counter.increment(1000);
    incremented += 1000;
    counter.close();
    let sent = store.calls();
    run_virtual_until(&mut pool, &clock, INTERVAL * 50);
    assert_eq!(store.calls(), sent, "a flush went out after close returned");
    let amount = |record: &comcount_core::diagnostics::Record, name| -> u64 {
        record.attribute(name).map_or(0, |a| a.parse().unwrap())
    };
    let completed: u64 = events
        .with_message("flush completed")
        .iter()
        .map(|r| amount(r, "amount"))
        .sum();
    let failed = events.with_message("flush failed");
    let unsettled: u64 = failed.iter().map(|r| amount(r, "unsettled")).sum();
    let dropped: u64 = failed.iter().map(|r| amount(r, "dropped")).sum();
    assert!(
        failed.len() >= 2 && unsettled > 0,
        "not a flush of each of two lanes was in the air at close: {failed:?}"
    );
    assert_eq!(
        completed + counter.buffered() + unsettled + dropped,
        incremented,
        "completed {completed}, buffered {}, unsettled {unsettled}, dropped {dropped}",
        counter.buffered()
    );
}

/// A participant alone whose store is two intervals away, then close by again: its lanes
/// close, and it flushes once an interval under its own id, as before they opened.
#[test]
fn lanes_close_once_the_store_is_close_again() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    store.then((0..10_000).map(|_| Action::Delay(INTERVAL * 2)));
    let mut pool = LocalPool::new();
    let (counter, events) = lone("back", 5, &store, &clock, &pool);
    let mut n = 0;
    let mut run_for = |intervals: u32| {
        for _ in 0..intervals * 10 {
            n += 1;
            counter.increment(1);
            run_virtual_until(&mut pool, &clock, INTERVAL / 10 * n);
        }
    };
    run_for(50);
    let far: HashSet<_> = store.requests().iter().map(|r| r.participant).collect();
    assert!(far.len() >= 3, "two intervals away, flushed under {far:?}");
    // Each lane opened with the first lane's aim: none sent a first copy aimed at interval 0,
    // as a flush loop does before it learns the store's clock.
    let unaimed: Vec<_> = store
        .requests()
        .into_iter()
        .filter(|r| r.participant != ParticipantId::from_u64(5) && r.expect == 0)
        .collect();
    assert!(unaimed.is_empty(), "{unaimed:?}");
    store.clear();
    run_for(20);
    let before = store.requests().len();
    run_for(20);
    let last: Vec<_> = store.requests()[before..]
        .iter()
        .map(|r| r.participant)
        .collect();
    assert!(
        last.iter().all(|id| *id == ParticipantId::from_u64(5)),
        "close by again, still flushed under {last:?}"
    );
    assert!(
        (18..=22).contains(&last.len()),
        "{} flushes in 20 intervals",
        last.len()
    );
    assert!(counter.group_total().is_some());
    // Said each time the lanes changed: three for a store two intervals away, one at the end.
    let changes: Vec<u64> = events
        .with_message("flush lanes changed")
        .iter()
        .map(|r| r.attribute("lanes").unwrap().parse().unwrap())
        .collect();
    assert!(changes.contains(&3), "{changes:?}");
    assert_eq!(changes.last(), Some(&1), "{changes:?}");
    assert!(changes.windows(2).all(|w| w[0] != w[1]), "{changes:?}");
}

/// A participant alone, whose store applies each flush as it comes and answers one and a half
/// intervals later, through lanes. One reply is held back until after a later lane's reply,
/// from a later interval, has brought newer totals: the older total that comes after them is
/// not taken. Whenever a total is known, it is one a reply delivered by then brought: the total
/// of the interval before its own, or its own once that interval has ended.
#[test]
fn a_lanes_reply_that_comes_after_a_newer_one_leaves_the_newer_total() {
    const HELD: usize = 25;
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    let far = || Action::ReplyAfter(INTERVAL * 3 / 2);
    // Lanes open by the tenth flush or so; the twenty-sixth is the one held back.
    store.then((0..HELD).map(|_| far()));
    store.then([Action::ReplyAfter(INTERVAL * 27 / 10)]);
    store.then((0..10_000).map(|_| far()));
    let mut pool = LocalPool::new();
    let (counter, _) = lone("late", 3, &store, &clock, &pool);
    let (mut checked, mut overtaken) = (0, 0);
    for n in 1..=500u32 {
        counter.increment(u64::from(n));
        run_virtual_until(&mut pool, &clock, INTERVAL / 10 * n);
        let now = clock.now();
        let replies = store.late_replies();
        let delivered = || {
            replies
                .iter()
                .filter(move |(at, reply)| *at <= now && reply.outcome != Outcome::WrongInterval)
        };
        let Some(total) = counter.group_total() else {
            continue;
        };
        let brought = |reply: &FlushReply| {
            let ended = INTERVAL * u32::try_from(reply.interval + 1).unwrap() <= now;
            [
                reply.previous_total(),
                reply
                    .landed_totals
                    .first()
                    .copied()
                    .flatten()
                    .filter(|_| ended),
            ]
        };
        assert!(
            delivered().any(|(_, reply)| brought(reply).contains(&Some(total))),
            "at tick {n}: {total}, brought by no reply delivered"
        );
        checked += 1;
        let Some((held_at, held)) = replies.get(HELD).filter(|(at, _)| *at <= now) else {
            continue;
        };
        let newer_before =
            delivered().any(|(at, reply)| at < held_at && reply.interval > held.interval);
        if newer_before {
            // Its total is older than the newer reply's: taken, it would go back in time.
            let older = held.previous_total();
            let also_newer = delivered().any(|(_, reply)| {
                reply.interval > held.interval && brought(reply).contains(&older)
            });
            assert!(
                older.is_none() || also_newer || Some(total) != older,
                "at tick {n}: took {total} from the reply held back, after a newer one"
            );
            overtaken += 1;
        }
    }
    let lanes: HashSet<_> = store.requests().iter().map(|r| r.participant).collect();
    assert!(lanes.len() >= 2, "flushed under {lanes:?} alone");
    assert!(checked > 300, "a total was known at {checked} ticks");
    assert!(
        overtaken > 0,
        "the reply held back was never overtaken by a newer one"
    );
}

/// A participant alone whose store is close by for a hundred flushes, then one and a half to
/// three intervals away for good (a failover to a far replica, say). The round trips before
/// the change say nothing of a queue now: once eight round trips in a row are alike, it takes
/// the new one for the path's, opens lanes, and knows its total again. It used to compare them
/// with the least of the last sixty-four, and took the far store for a queue for about 250
/// intervals, knowing no total meanwhile.
#[test]
fn a_store_that_becomes_far_while_counting_is_known_again_within_sixty_intervals() {
    for far in [INTERVAL * 3 / 2, INTERVAL * 2, INTERVAL * 3] {
        let clock = VirtualClock::new();
        let store = ScriptedStore::new(clock.clone());
        store.then((0..100).map(|_| Action::Delay(INTERVAL / 5)));
        store.then((0..10_000).map(|_| Action::Delay(far)));
        let mut pool = LocalPool::new();
        let (counter, _) = lone("failover", 11, &store, &clock, &pool);
        let (mut known, mut samples) = (0, 0);
        let mut became_far = None;
        for n in 1..=2_500u32 {
            counter.increment(1);
            run_virtual_until(&mut pool, &clock, INTERVAL / 10 * n);
            let Some(at) = became_far.or_else(|| store.call_times().get(100).copied()) else {
                continue;
            };
            became_far = Some(at);
            // Sixty intervals after the change, for the next fifty.
            let since = clock.now().saturating_sub(at);
            if since > INTERVAL * 60 && since <= INTERVAL * 110 {
                samples += 1;
                known += usize::from(counter.group_total().is_some());
            }
        }
        assert!(samples >= 490, "{samples} samples at {far:?}");
        assert!(
            known * 10 >= samples * 9,
            "{far:?} away, the total was known in {known} of {samples} samples"
        );
    }
}

/// A counter named `name` under participant `id` on `store`, its worker on `pool`, with the
/// events it reports.
fn lone(
    name: &str,
    id: u64,
    store: &ScriptedStore<VirtualClock>,
    clock: &VirtualClock,
    pool: &LocalPool,
) -> (Counter, Recorder) {
    let events = Recorder::new();
    let (counter, worker) = Counter::builder(name, INTERVAL)
        .participant(ParticipantId::from_u64(id))
        .diagnostics(events.clone())
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    (counter, events)
}

/// Runs a fleet of participants `first_id + 1 ..` at a round trip of one and a half intervals,
/// and counts the samples (every participant, ten times an interval, for `INTERVALS` intervals
/// after `WARM_UP`) in which the total was known; with the times the store was called.
fn run_fleet(first_id: u64, participants: u64) -> (usize, usize, Vec<Duration>) {
    run_fleet_at(first_id, participants, INTERVAL * 3 / 2, WARM_UP)
}

/// [`run_fleet`] at a round trip of `round_trip`, sampled after `warm_up` intervals.
fn run_fleet_at(
    first_id: u64,
    participants: u64,
    round_trip: Duration,
    warm_up: u32,
) -> (usize, usize, Vec<Duration>) {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    store.then((0..10_000).map(|_| Action::Delay(round_trip)));
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
    for n in 1..=(INTERVALS + warm_up) * 10 {
        for counter in &counters {
            counter.increment(1);
        }
        let until = INTERVAL / 10 * n;
        run_virtual_until(&mut pool, &clock, until);
        if n > warm_up * 10 {
            samples += counters.len();
            known += counters
                .iter()
                .filter(|c| c.group_total().is_some())
                .count();
        }
    }
    (known, samples, store.call_times())
}
