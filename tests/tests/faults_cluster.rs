//! Faults on a Redis Cluster the test starts afresh, since each leaves it changed: a manual
//! failover of the counter's primary to its replica, the counter's primary killed with SIGKILL
//! (its replica takes over after the node timeout), and the counter's slot moved to another
//! primary key by key while the fleet counts. A fleet of redis-rs and fred cluster clients
//! counts throughout; nothing may be counted twice, no key may be split across nodes, and
//! every participant must be flushing again within two intervals of the fault's end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::{ParticipantId, Store};
use comcount_fred::FredStore;
use comcount_tests::cluster::Cluster;
use comcount_tests::cluster_admin::{
    SlotMove, await_role, command, move_slot, primaries, replica_of, role_within, slot_of,
    where_keys_are,
};
use comcount_tests::conformance::Requests;
use comcount_tests::faulty_fleet::{FaultyFleet, run};
use comcount_tests::invariants::Writes;
use comcount_tests::{connect, settings};

async fn fleet_on(cluster: &Cluster, tag: &str) -> FaultyFleet {
    FaultyFleet::new(tag).on_cluster(cluster).await
}

/// How long the replica of a killed primary may take to take over: the node timeout (5 s),
/// the election, and a busy machine.
const TAKEOVER: Duration = Duration::from_secs(30);

/// How long one manual failover may take before it is asked for again: a little over the
/// server's own manual-failover timeout.
const MANUAL_FAILOVER: Duration = Duration::from_secs(7);

#[test]
fn cluster_failover() {
    run(async {
        let cluster = Cluster::start();
        let fleet = fleet_on(&cluster, "failover").await;
        let primary = cluster.primary_of(&fleet.interval_key(0));
        let replica = replica_of(&cluster, primary).await;
        // A manual failover gives up by itself when the primary does not hand over within
        // its own timeout (5 s), as can happen on a busy machine: ask again until it takes.
        let mut fault_end = None;
        for _ in 0..5 {
            // Refused while the replica's link to its primary is still coming up.
            let asked: Result<(), _> = command(replica, &["CLUSTER", "FAILOVER"]).await;
            if asked.is_err() {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            fault_end = role_within(replica, "master", MANUAL_FAILOVER).await;
            if fault_end.is_some() {
                break;
            }
        }
        let fault_end = fault_end.expect("the replica never took over after 5 manual failovers");
        fleet.assert_recovers(fault_end, fleet.interval() * 2).await;
        assert_eq!(cluster.primary_of(&fleet.interval_key(0)), replica);
        // A manual failover waits for the replica to catch up: nothing is lost.
        let report = fleet.finish(Writes::Kept).await;
        report.assert_no_unanswered_flush_dropped();
    });
}

#[test]
fn primary_killed() {
    run(async {
        let mut cluster = Cluster::start();
        let fleet = fleet_on(&cluster, "killed").await;
        let primary = cluster.primary_of(&fleet.interval_key(0));
        let replica = replica_of(&cluster, primary).await;
        let mark = fleet.mark();
        cluster.kill_node(primary);
        let fault_end = await_role(replica, "master", TAKEOVER).await;
        fleet
            .assert_recovers(fault_end, fleet.interval() * 2 + fleet.flush_timeout())
            .await;
        // Writes the primary acknowledged but had not yet passed to its replica are lost.
        let report = fleet.finish(Writes::MayBeLost).await;
        // The primary was gone for the node timeout, far longer than two intervals.
        report.assert_each_said(&mark, "total went stale");
        report.assert_no_unanswered_flush_dropped();
    });
}

#[test]
fn slot_resharded_under_load() {
    run(async {
        let cluster = Cluster::start();
        let fleet = fleet_on(&cluster, "reshard").await;
        let interval = fleet.interval();
        let any = cluster.ports()[0];
        let slot = slot_of(any, &fleet.interval_key(0)).await;
        // One key at a time, a quarter interval apart, while the fleet keeps writing to them.
        let resharded = move_slot(any, slot, interval / 4).await;
        let SlotMove {
            source,
            target,
            moved,
            ..
        } = &resharded;
        eprintln!(
            "moved {moved} keys of slot {slot} from {} to {}",
            source.port, target.port
        );
        assert!(
            *moved >= 3,
            "only {moved} keys moved: the slot was nearly empty"
        );

        fleet.assert_recovers(resharded.done, interval * 2).await;
        let report = fleet.finish(Writes::Kept).await;
        // Every key of the counter is on the new owner, and only there.
        let held = where_keys_are(&resharded.primaries, slot).await;
        assert!(!held.is_empty());
        assert!(
            held.values().all(|port| *port == target.port),
            "keys left behind: {held:?}"
        );
        assert_eq!(cluster.primary_of(&fleet_key(&held)), target.port);
        report.assert_no_unanswered_flush_dropped();
    });
}

fn fleet_key(held: &BTreeMap<String, u16>) -> String {
    held.keys().next().unwrap().clone()
}

/// A flush that meets an `ASK` (its slot migrating, its keys not on the old owner) leaves the
/// fred client working. fred follows an `ASK` only for a command with a write attempt left, and
/// otherwise ends the client's connection task, after which no command of the client is ever
/// answered: so it went at the first resharding while the store allowed each flush one write.
#[test]
fn fred_store_survives_an_ask_redirection() {
    run(async {
        let cluster = Cluster::start();
        let store = FredStore::new(connect::fred_cluster(&cluster).await);
        let requests = Requests::fresh(settings::interval());
        let participant = ParticipantId::random();
        let report = Reporter::new("ask", Arc::new(Recorder::new()));
        let answered = |seq| {
            let request = requests.flush(participant, seq, 1, 0);
            let store = &store;
            let report = &report;
            async move {
                tokio::time::timeout(Duration::from_secs(5), store.flush(&request, report))
                    .await
                    .unwrap_or_else(|_| panic!("flush {seq} was never answered"))
            }
        };
        // Loads the script; expecting interval 0, it writes nothing.
        answered(1).await.unwrap();

        let any = cluster.ports()[0];
        let slot = slot_of(any, &requests.interval_key(0)).await.to_string();
        let primaries = primaries(any).await;
        let source_port = cluster.primary_of(&requests.interval_key(0));
        let source = primaries.iter().find(|n| n.port == source_port).unwrap();
        let target = primaries.iter().find(|n| n.port != source_port).unwrap();
        let () = command(
            target.port,
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source.id],
        )
        .await
        .unwrap();
        let () = command(
            source.port,
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target.id],
        )
        .await
        .unwrap();
        // None of the flush's keys is on the old owner: it answers ASK; the new owner then
        // refuses a script whose keys it does not all hold (TRYAGAIN).
        let asked = answered(2).await;
        eprintln!("a flush sent into the migration: {asked:?}");
        for node in [source, target] {
            let () = command(node.port, &["CLUSTER", "SETSLOT", &slot, "STABLE"])
                .await
                .unwrap();
        }
        // The client still answers.
        answered(3).await.unwrap();
    });
}
