//! A store slower than the interval: a proxy holds every reply back for one and a half
//! intervals. Flushes still settle, the group's total is known most of the time, nothing
//! counted is reported dropped, and the slow round trip is reported once, then its end. Both
//! clients, each on a server of its own.

use std::net::SocketAddr;
use std::time::Duration;

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::Recorder;
use comcount_core::{Counter, Store};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::proxy::Proxy;
use comcount_tests::server::RedisServer;
use comcount_tests::{connect, settings};

const PARTICIPANTS: usize = 8;
/// Intervals of counting while the store is slow.
const SLOW_INTERVALS: u32 = 30;

struct Participant {
    counter: Counter,
    events: Recorder,
    incremented: u64,
}

fn join<S: Store>(name: &str, prefix: &str, store: S) -> Participant {
    let events = Recorder::new();
    let (counter, worker) = Counter::builder(name, settings::interval())
        .prefix(prefix)
        .diagnostics(events.clone())
        .build(store, TokioTimer::new())
        .unwrap();
    tokio::spawn(worker);
    Participant {
        counter,
        events,
        incremented: 0,
    }
}

fn sum(events: &Recorder, message: &str, attribute: &str) -> u64 {
    events
        .with_message(message)
        .iter()
        .map(|r| r.attribute(attribute).unwrap().parse::<u64>().unwrap())
        .sum()
}

/// Counts through a proxy that makes the round trip one and a half intervals, then through a
/// quick one again, and checks what every participant reported.
async fn count_through_a_slow_store<S: Store>(proxy: &Proxy, store: impl Fn() -> S) {
    let interval = settings::interval();
    let prefix = settings::unique_prefix("slow");
    proxy.delay_replies(interval * 3 / 2);
    let mut fleet: Vec<_> = (0..PARTICIPANTS)
        .map(|_| join("requests", &prefix, store()))
        .collect();

    let tick = interval / 10;
    let (mut known, mut samples) = (0usize, 0usize);
    for step in 0..SLOW_INTERVALS * 10 {
        for p in &mut fleet {
            p.counter.increment(1);
            p.incremented += 1;
        }
        // The first intervals go to loading the script and learning the server's clock, three
        // round trips and more.
        if step >= 100 {
            samples += fleet.len();
            known += fleet
                .iter()
                .filter(|p| p.counter.group_total().is_some())
                .count();
        }
        tokio::time::sleep(tick).await;
    }
    for p in &fleet {
        let slow = p.events.with_message("round trip slow");
        assert_eq!(slow.len(), 1, "{:?}", p.events.messages());
        let round_trip: u128 = slow[0].attribute("round_trip_ms").unwrap().parse().unwrap();
        assert!(round_trip > interval.as_millis() / 2);
    }
    eprintln!("the total was known in {known} of {samples} samples");
    assert!(
        known * 2 > samples,
        "the total was known in {known} of {samples} samples; a participant's events: {:?}",
        fleet[0]
            .events
            .records()
            .iter()
            .map(|r| (r.message, r.attribute("interval").map(str::to_owned)))
            .collect::<Vec<_>>()
    );

    // The store is quick again: the slow round trip's end is said, once.
    proxy.delay_replies(Duration::ZERO);
    for _ in 0..8 {
        for p in &mut fleet {
            p.counter.increment(1);
            p.incremented += 1;
        }
        tokio::time::sleep(interval).await;
    }
    // Nothing more to count: every flush settles, then the counters close.
    tokio::time::sleep(interval * 4).await;
    for p in &fleet {
        p.counter.close();
    }
    tokio::time::sleep(interval).await;

    for p in &fleet {
        let messages = p.events.messages();
        assert_eq!(
            p.events.with_message("round trip normal").len(),
            1,
            "{messages:?}"
        );
        assert_eq!(p.events.with_message("round trip slow").len(), 1);
        let counted = sum(&p.events, "flush completed", "amount");
        let dropped = sum(&p.events, "flush failed", "dropped");
        let unsettled = sum(&p.events, "flush failed", "unsettled");
        assert_eq!(
            dropped, 0,
            "a counted flush was reported dropped: {messages:?}"
        );
        assert_eq!(
            counted + p.counter.buffered() + unsettled,
            p.incremented,
            "units lost or counted twice (counted {counted}, buffered {}, unsettled \
             {unsettled})",
            p.counter.buffered()
        );
        assert!(
            counted * 10 >= p.incremented * 9,
            "only {counted} of {} counted",
            p.incremented
        );
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn slow_server() -> (RedisServer, Proxy) {
    let server = RedisServer::standalone();
    let upstream: SocketAddr = ([127, 0, 0, 1], server.port()).into();
    let proxy = Proxy::start(upstream).await.unwrap();
    (server, proxy)
}

#[test]
fn a_store_slower_than_the_interval_still_settles_flushes_redis_rs() {
    runtime().block_on(async {
        let (_server, proxy) = slow_server().await;
        // redis-rs gives up on a reply after 500 ms by default, about the round trip here at
        // the longer test intervals: a client that waits on a slow store must wait longer, as
        // the one `RedisStore::connect` opens does.
        let store = RedisStore::connect(&proxy.url()).await.unwrap();
        count_through_a_slow_store(&proxy, || store.clone()).await;
    });
}

#[test]
fn a_store_slower_than_the_interval_still_settles_flushes_fred() {
    runtime().block_on(async {
        let (_server, proxy) = slow_server().await;
        let client = connect::fred_client(&proxy.url()).await;
        count_through_a_slow_store(&proxy, || FredStore::new(client.clone())).await;
    });
}
