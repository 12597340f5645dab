//! Faults under a fleet of counter families: eight participants, redis-rs and fred, each with a
//! family of the same name counting 1,200 keys over four partitions, a few keys hot and most
//! rare (each participant counts every key once first, then draws keys from a Zipf spread;
//! rare keys are evicted after four idle intervals and come back). Through a proxy in front of
//! a server: replies lost after their command ran and replies cut off halfway (three times
//! each), every connection reset (three times), replies held back past the flush timeout for
//! longer than two intervals (twice). On a cluster: the slot of one partition moved to another
//! primary key by key while the fleet counts, then moved on again.
//!
//! Checked key by key from Redis's own hashes, read for each partition and interval before
//! they expire (see `comcount_tests::invariants`): no key's total of an interval exceeds what
//! the participants' applied or possibly applied flushes carried for it there, no flush is
//! applied twice, no participant adds twice to a partition's interval, every unit is counted,
//! reported or still buffered, key by key; and every participant flushes each partition again
//! soon after each fault, and knows the group totals of the hottest keys again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use comcount_core::Outcome;
use comcount_tests::cluster::Cluster;
use comcount_tests::cluster_admin::{move_slot, slot_of, where_keys_are};
use comcount_tests::faulty_fleet::{FamilyShape, FaultyFleet, run};
use comcount_tests::invariants::Writes;
use comcount_tests::proxy::Proxy;
use comcount_tests::recording::FlushEnd;

/// The family every participant counts into.
const SHAPE: FamilyShape = FamilyShape {
    keys: 1200,
    partitions: 4,
    skew: 1.0,
    evict_after: 4,
};

/// How many participants: half redis-rs, half fred.
const PARTICIPANTS: usize = 8;

fn fleet(tag: &str) -> FaultyFleet {
    FaultyFleet::family(tag, SHAPE).participants(PARTICIPANTS)
}

#[test]
fn replies_lost_and_connections_reset_under_a_family() {
    run(async {
        let (_server, proxy, mut fleet) = fleet("fam-lost").behind_a_proxy().await;
        let interval = fleet.interval();
        // A reply lost after its command ran, three times each way, then every connection
        // reset, three times; each while the fleet counts.
        let strikes = [Proxy::swallow_next_reply, Proxy::cut_next_reply_halfway];
        for (done, strike) in (1..).zip(strikes.iter().cycle().take(6)) {
            strike(&proxy);
            let fault_end = proxy.struck(done).await;
            fleet.assert_recovers(fault_end, interval * 2).await;
        }
        for _ in 0..3 {
            proxy.reset_connections();
            fleet.assert_recovers(Instant::now(), interval * 2).await;
        }
        fleet.assert_totals_known_again().await;
        let report = fleet.finish(Writes::Kept).await;
        assert_eq!(report.flush_failures(), []);
        assert!(
            report.duplicates() > 0,
            "no lost reply's flush was resent and fenced as a duplicate"
        );
    });
}

#[test]
fn replies_delayed_past_the_flush_timeout_under_a_family() {
    run(async {
        let (_server, proxy, mut fleet) = fleet("fam-delayed").behind_a_proxy().await;
        let interval = fleet.interval();
        // Longer than the flush timeout, so copies are sent again while the first ones run on
        // the server; and the hang outlasts two intervals, so the totals go stale.
        let delay = interval * 3;
        assert!(delay > fleet.flush_timeout());
        let mut marks = Vec::new();
        for _ in 0..2 {
            marks.push(fleet.mark());
            proxy.delay_replies(delay);
            tokio::time::sleep(interval * 4).await;
            proxy.delay_replies(Duration::ZERO);
            // A reply read just before is still held for the whole delay.
            let fault_end = Instant::now() + delay;
            fleet
                .assert_recovers(fault_end, interval * 2 + fleet.flush_timeout())
                .await;
            fleet.assert_totals_known_again().await;
        }
        let report = fleet.finish(Writes::Kept).await;
        // Each hang outlasted two intervals: the totals went stale, and came back.
        for mark in &marks {
            report.assert_each_said(mark, "total went stale");
        }
        assert_eq!(
            report.flush_failures(),
            [],
            "a flush resent within the resend window must not be dropped"
        );
        // A copy whose reply came after the flush timeout still settled its flush.
        let late = report
            .records()
            .iter()
            .filter(|r| match &r.end {
                FlushEnd::Replied { at, reply } => {
                    reply.outcome.is_counted() && *at - r.sent >= delay * 9 / 10
                }
                _ => false,
            })
            .count();
        assert!(
            late > 0,
            "no flush was settled by a reply the delay held up"
        );
    });
}

#[test]
fn a_family_partition_resharded_under_load() {
    run(async {
        let cluster = Cluster::start();
        let mut fleet = fleet("fam-reshard").on_cluster(&cluster).await;
        let interval = fleet.interval();
        let any = cluster.ports()[0];
        // The partition of the hottest key, which every participant flushes every interval.
        let moving = fleet.space_of(&fleet.keys()[0]);
        let slot = slot_of(any, &moving.interval(0)).await;
        let others: Vec<String> = fleet
            .spaces()
            .iter()
            .filter(|space| **space != moving)
            .map(|space| space.base().to_owned())
            .collect();
        for space in &others {
            assert_ne!(
                slot_of(any, &format!("{space}:0")).await,
                slot,
                "two partitions share the slot"
            );
        }
        // Moved away, then on again, while the fleet counts: the hashes and every fence.
        let mut moves = Vec::new();
        for _ in 0..2 {
            let started = Instant::now();
            // One key at a time, a quarter interval apart, while the fleet keeps writing.
            let resharded = move_slot(any, slot, interval / 4).await;
            let took = resharded.done - started;
            eprintln!(
                "moved {} keys of slot {slot} ({}) from {} to {} in {took:?}",
                resharded.moved,
                moving.base(),
                resharded.source.port,
                resharded.target.port,
            );
            // Three hashes of intervals and a fence per participant.
            assert!(
                resharded.moved >= 3,
                "only {} keys moved: the slot was nearly empty",
                resharded.moved
            );
            // A copy the move turns away with TRYAGAIN may be held in the client's own retry
            // (redis-rs waits over a second), cut at the flush timeout and sent again, the
            // timeout doubling each time: the copy that lands after the move goes within one
            // timeout, which grew over the move's length.
            fleet
                .assert_recovers(resharded.done, interval * 2 + took)
                .await;
            moves.push((started, resharded));
        }
        fleet.assert_totals_known_again().await;
        let report = fleet.finish(Writes::Kept).await;
        // Every key of the partition is on its last owner, and only there.
        let last = &moves[1].1;
        let held = where_keys_are(&last.primaries, slot).await;
        assert!(!held.is_empty());
        assert!(
            held.iter()
                .all(|(key, port)| *port == last.target.port && key.starts_with(moving.base())),
            "keys left behind, or not the partition's: {held:?}"
        );
        report.assert_no_unanswered_flush_dropped();
        let mut turned_away: BTreeMap<String, usize> = BTreeMap::new();
        for record in report
            .records()
            .iter()
            .filter(|r| r.space() == moving.base())
        {
            if let FlushEnd::Failed { message, .. } = &record.end {
                let reason = message.split(['(', ':']).next().unwrap_or_default();
                *turned_away.entry(reason.trim().to_owned()).or_default() += 1;
            }
        }
        eprintln!("copies of the moving partition's flushes that failed: {turned_away:?}");
        // The other partitions kept counting while the slot moved: every participant had
        // flushes of each applied in the meantime.
        for (started, resharded) in &moves {
            for member in 0..PARTICIPANTS {
                for space in &others {
                    let applied = report
                        .records()
                        .iter()
                        .filter(|r| r.member == member && r.space() == space)
                        .filter(|r| r.outcome() == Some(Outcome::Applied))
                        .filter(|r| r.sent >= *started && r.sent <= resharded.done)
                        .count();
                    assert!(
                        applied > 0,
                        "participant {member} applied no flush of {space} while the slot of \
                         {} moved",
                        moving.base()
                    );
                }
            }
        }
    });
}
