//! Faults between the clients and Redis, made by a proxy in front of a server the test starts:
//! replies held back past the flush timeout, a reply lost after its command ran, a reply cut
//! off halfway, every connection reset. A fleet of redis-rs and fred participants counts
//! throughout; nothing may be counted twice, and every participant must be flushing again
//! within two intervals of the fault's end.

use std::time::{Duration, Instant};

use comcount_tests::faulty_fleet::{FaultyFleet, run};
use comcount_tests::invariants::Writes;
use comcount_tests::proxy::Proxy;
use comcount_tests::recording::FlushEnd;
use comcount_tests::server::RedisServer;

/// A server, a proxy in front of it, and a fleet counting through the proxy.
async fn fleet_behind_a_proxy(tag: &str) -> (RedisServer, Proxy, FaultyFleet) {
    FaultyFleet::new(tag).behind_a_proxy().await
}

#[test]
fn replies_delayed_past_the_flush_timeout() {
    run(async {
        let (_server, proxy, fleet) = fleet_behind_a_proxy("delayed").await;
        let interval = fleet.interval();
        // Longer than the flush timeout, so copies are sent again while the first ones run on
        // the server; and the hang outlasts two intervals, so the totals go stale.
        let delay = interval * 3;
        assert!(delay > fleet.flush_timeout());
        let mark = fleet.mark();
        proxy.delay_replies(delay);
        tokio::time::sleep(interval * 4).await;
        proxy.delay_replies(Duration::ZERO);
        // A reply read just before is still held for the whole delay.
        let fault_end = Instant::now() + delay;
        fleet
            .assert_recovers(fault_end, interval * 2 + fleet.flush_timeout())
            .await;
        let report = fleet.finish(Writes::Kept).await;
        report.assert_each_said(&mark, "total went stale");
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

/// Strikes a one-shot reply fault four times, each while the fleet counts, and checks that
/// every lost reply was resent as the same flush and fenced as a duplicate.
async fn lose_replies(tag: &str, strike: fn(&Proxy)) {
    let (_server, proxy, fleet) = fleet_behind_a_proxy(tag).await;
    for done in 1..=4 {
        strike(&proxy);
        let fault_end = proxy.struck(done).await;
        fleet.assert_recovers(fault_end, fleet.interval() * 2).await;
    }
    let report = fleet.finish(Writes::Kept).await;
    assert_eq!(report.flush_failures(), []);
    assert!(
        report.duplicates() > 0,
        "{tag}: no lost reply's flush was resent and fenced as a duplicate"
    );
}

#[test]
fn reply_swallowed_after_the_command_ran() {
    run(lose_replies("swallowed", Proxy::swallow_next_reply));
}

#[test]
fn connection_cut_halfway_through_a_reply() {
    run(lose_replies("cut", Proxy::cut_next_reply_halfway));
}

#[test]
fn connections_reset() {
    run(async {
        let (_server, proxy, fleet) = fleet_behind_a_proxy("reset").await;
        for _ in 0..3 {
            proxy.reset_connections();
            let fault_end = Instant::now();
            fleet.assert_recovers(fault_end, fleet.interval() * 2).await;
        }
        let report = fleet.finish(Writes::Kept).await;
        assert_eq!(report.flush_failures(), []);
    });
}
