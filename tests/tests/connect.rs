//! The stores' one-line constructors: connections that come back after the server restarts,
//! and the warning at start for a client that never reconnects.

use std::time::{Duration, Instant};

use comcount_core::diagnostics::{Level, Recorder};
use comcount_core::{Counter, Store, clock::TokioTimer};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::connect;
use comcount_tests::inspect::{Inspector, RedisInspector};
use comcount_tests::server::RedisServer;
use comcount_tests::settings::{self, sleep};
use comcount_tests::shared;
use fred::prelude::{Builder, Config, ReconnectPolicy};

/// The events of a counter on `store` that starts and is closed at once.
async fn events_at_start(store: impl Store) -> Recorder {
    let recorder = Recorder::new();
    let (counter, worker) = Counter::builder("caveat", settings::interval())
        .prefix(settings::unique_prefix("caveat"))
        .diagnostics(recorder.clone())
        .build(store, TokioTimer::new())
        .unwrap();
    counter.close();
    worker.await;
    recorder
}

/// Whether the counter warned of its store, and that the warning came right after the start.
fn warned(recorder: &Recorder) -> bool {
    let records = recorder.records();
    let caveats = recorder.with_message("store caveat");
    if let Some(caveat) = caveats.first() {
        assert_eq!(caveats.len(), 1, "{records:?}");
        assert_eq!(records[0].message, "counter started");
        assert_eq!(&records[1], caveat, "{records:?}");
        assert_eq!(caveat.level, Level::Warn);
        assert!(
            !caveat.attribute("caveat").unwrap_or_default().is_empty(),
            "{caveat:?}"
        );
    }
    !caveats.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_multiplexed_connection_is_warned_of_and_a_connection_manager_is_not() {
    let url = shared::standalone_url();
    let bare = events_at_start(RedisStore::new(connect::multiplexed(&url).await)).await;
    assert!(warned(&bare), "{:?}", bare.records());
    let caveat = &bare.with_message("store caveat")[0];
    assert_eq!(caveat.attribute("store"), Some("redis-rs"));
    assert!(
        caveat
            .attribute("caveat")
            .unwrap()
            .contains("never reconnects"),
        "{caveat:?}"
    );

    let store = RedisStore::connect(&url).await.unwrap();
    let manager = events_at_start(store.clone()).await;
    assert!(!warned(&manager), "{:?}", manager.records());
    // Through an `Arc`, as well.
    let shared = events_at_start(std::sync::Arc::new(store)).await;
    assert!(!warned(&shared), "{:?}", shared.records());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_connection_is_not_warned_of() {
    let store = RedisStore::connect_cluster(shared::cluster().urls())
        .await
        .unwrap();
    let recorder = events_at_start(store).await;
    assert!(!warned(&recorder), "{:?}", recorder.records());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fred_client_without_a_policy_for_ever_is_warned_of() {
    // The warning needs no server: it reads the client's policy.
    let url = "redis://127.0.0.1:6379";
    let builder = || Builder::from_config(Config::from_url(url).unwrap());

    let none = events_at_start(FredStore::new(builder().build().unwrap())).await;
    assert!(warned(&none), "{:?}", none.records());
    let caveat = &none.with_message("store caveat")[0];
    assert_eq!(caveat.attribute("store"), Some("fred"));
    assert!(
        caveat
            .attribute("caveat")
            .unwrap()
            .contains("no reconnect policy"),
        "{caveat:?}"
    );

    let bounded = builder()
        .set_policy(ReconnectPolicy::new_constant(5, 100))
        .build_pool(2)
        .unwrap();
    let bounded = events_at_start(FredStore::new(bounded)).await;
    assert!(warned(&bounded), "{:?}", bounded.records());

    let for_ever = builder()
        .set_policy(ReconnectPolicy::new_constant(0, 100))
        .build()
        .unwrap();
    let for_ever = events_at_start(FredStore::new(for_ever)).await;
    assert!(!warned(&for_ever), "{:?}", for_ever.records());
    let connected = FredStore::builder(url).unwrap().build().unwrap();
    let connected = events_at_start(FredStore::new(connected)).await;
    assert!(!warned(&connected), "{:?}", connected.records());
}

/// A counter counting on `store` under the name `name`, reporting to a recorder.
struct Counting {
    name: &'static str,
    prefix: String,
    counter: Counter,
    recorder: Recorder,
}

fn start(name: &'static str, store: impl Store) -> Counting {
    let prefix = settings::unique_prefix("connect");
    let recorder = Recorder::new();
    let (counter, worker) = Counter::builder(name, settings::interval())
        .prefix(&prefix)
        .diagnostics(recorder.clone())
        .build(store, TokioTimer::new())
        .unwrap();
    tokio::spawn(worker);
    Counting {
        name,
        prefix,
        counter,
        recorder,
    }
}

impl Counting {
    /// Waits until a flush completes after the first `skip` events, and returns its amount
    /// and interval.
    async fn flush_after(&self, skip: usize, deadline: Instant) -> (u64, String) {
        loop {
            let completed = self.recorder.records()[skip..]
                .iter()
                .find(|r| r.message == "flush completed" && r.attribute("amount") != Some("0"))
                .cloned();
            if let Some(record) = completed {
                let amount = record.attribute("amount").unwrap().parse().unwrap();
                return (amount, record.attribute("interval").unwrap().to_owned());
            }
            assert!(
                Instant::now() < deadline,
                "{}: no flush completed: {:?}",
                self.name,
                self.recorder.records()
            );
            sleep(settings::interval() / 4).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_from_connect_flush_again_after_the_server_restarts() {
    let mut server = RedisServer::standalone();
    let url = server.url();
    let interval = settings::interval();
    let counters = [
        start("redis-rs", RedisStore::connect(&url).await.unwrap()),
        start("fred", FredStore::connect(&url).await.unwrap()),
    ];
    let patience = interval * 20 + Duration::from_secs(10);

    let deadline = Instant::now() + patience;
    for c in &counters {
        c.counter.increment(2);
        c.flush_after(0, deadline).await;
        assert!(!warned(&c.recorder), "{:?}", c.recorder.records());
    }

    // The server goes away, and comes back empty on the same port.
    server.restart();
    let marks: Vec<usize> = counters
        .iter()
        .map(|c| c.recorder.records().len())
        .collect();
    for c in &counters {
        c.counter.increment(3);
    }
    let inspector = RedisInspector(connect::multiplexed(&url).await);
    let deadline = Instant::now() + patience;
    for (c, mark) in counters.iter().zip(marks) {
        let (amount, n) = c.flush_after(mark, deadline).await;
        assert_eq!(amount, 3, "{}: {:?}", c.name, c.recorder.records());
        // The server started empty, so the interval's key holds this flush alone.
        let key = format!("{}{{{}}}:{n}", c.prefix, c.name);
        assert_eq!(
            inspector.key(&key).await.unwrap().value,
            amount.to_string(),
            "{}",
            c.name
        );
    }
    for c in &counters {
        c.counter.close();
    }
}
