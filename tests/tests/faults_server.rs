//! Faults on a Redis server the test starts: its client connections killed, its script cache
//! flushed, the server restarted empty on the same port, and the server frozen in `DEBUG SLEEP`
//! for longer than the flush timeout. A fleet of redis-rs and fred participants counts
//! throughout; nothing may be counted twice, and every participant must be flushing again
//! within two intervals of the fault's end (plus the flush timeout after a hang).

use std::time::{Duration, Instant};

use comcount_tests::cluster_admin::{admin, command};
use comcount_tests::faulty_fleet::{FaultyFleet, run};
use comcount_tests::invariants::Writes;
use comcount_tests::reader::ReadFrom;
use comcount_tests::server::RedisServer;

async fn fleet_on(server: &RedisServer, fleet: &mut FaultyFleet) {
    fleet.join_standalone(&server.url()).await;
    fleet.start(ReadFrom::Server(server.port())).await;
}

#[test]
fn client_kill() {
    run(async {
        let server = RedisServer::standalone();
        let mut fleet = FaultyFleet::new("kill");
        fleet_on(&server, &mut fleet).await;
        let mut admin = admin(server.port()).await;
        for _ in 0..3 {
            // Every connection but the admin's own: the participants' and the reader's.
            let killed: u64 = redis::cmd("CLIENT")
                .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
                .query_async(&mut admin)
                .await
                .unwrap();
            let fault_end = Instant::now();
            assert!(killed >= 6, "CLIENT KILL killed only {killed} connections");
            fleet.assert_recovers(fault_end, fleet.interval() * 2).await;
        }
        let report = fleet.finish(Writes::Kept).await;
        assert_eq!(report.flush_failures(), []);
    });
}

#[test]
fn script_flush() {
    run(async {
        let server = RedisServer::standalone();
        let mut fleet = FaultyFleet::new("scriptflush");
        fleet_on(&server, &mut fleet).await;
        let mark = fleet.mark();
        let () = command(server.port(), &["SCRIPT", "FLUSH"]).await.unwrap();
        let fault_end = Instant::now();
        fleet.assert_recovers(fault_end, fleet.interval() * 2).await;
        let report = fleet.finish(Writes::Kept).await;
        assert!(
            report.scripts_loaded_since(&mark) >= 1,
            "no participant loaded the script again after SCRIPT FLUSH"
        );
        assert_eq!(report.flush_failures(), []);
    });
}

#[test]
fn server_restart_on_the_same_port() {
    run(async {
        let server = RedisServer::standalone();
        let mut fleet = FaultyFleet::new("restart");
        fleet_on(&server, &mut fleet).await;
        let mark = fleet.mark();
        let server = tokio::task::spawn_blocking(move || {
            let mut server = server;
            server.restart();
            server
        })
        .await
        .unwrap();
        let fault_end = Instant::now();
        fleet.assert_recovers(fault_end, fleet.interval() * 2).await;
        // The restart lost the keys written before it: Redis may hold less than was applied.
        let report = fleet.finish(Writes::MayBeLost).await;
        assert!(
            report.scripts_loaded_since(&mark) >= 1,
            "no participant loaded the script into the restarted server"
        );
        report.assert_no_unanswered_flush_dropped();
        drop(server);
    });
}

#[test]
fn debug_sleep_longer_than_the_flush_timeout() {
    run(async {
        let server = RedisServer::standalone();
        // A resend window of one interval, far shorter than the hang: a copy the hang holds up
        // is still awaited, and settles its flush when the server wakes (unless the client
        // gives up on it first, which leaves it unsettled, never dropped).
        let mut fleet =
            FaultyFleet::new("sleep").resend_window(comcount_tests::settings::interval());
        fleet_on(&server, &mut fleet).await;
        let interval = fleet.interval();
        // Longer than the flush timeout, and than two intervals: the totals go stale.
        let hang = interval * 7 / 2;
        assert!(hang > fleet.flush_timeout());
        let mark = fleet.mark();
        let seconds = format!("{:.3}", hang.as_secs_f64());
        let () = command(server.port(), &["DEBUG", "SLEEP", &seconds])
            .await
            .unwrap();
        let fault_end = Instant::now();
        fleet
            .assert_recovers(fault_end, interval * 2 + fleet.flush_timeout())
            .await;
        // The recovery is said once the replies have been quick for a whole interval.
        fleet
            .await_each_said(
                &mark,
                "round trip normal",
                interval * 4 + Duration::from_secs(2),
            )
            .await;
        let report = fleet.finish(Writes::Kept).await;
        report.assert_each_said(&mark, "total went stale");
        report.assert_each_said(&mark, "round trip slow");
        report.assert_each_said(&mark, "round trip normal");
        report.assert_no_unanswered_flush_dropped();
    });
}
