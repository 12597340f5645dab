//! The stores load the flush script when the server lacks it: on first use, after
//! `SCRIPT FLUSH`, after a restart, and on every node of a cluster; once for many flushes that
//! find it missing together. Each load is reported.

use std::sync::Arc;
use std::time::{Duration, Instant};

use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::{Outcome, ParticipantId, Store, StoreErrorKind};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::cluster::Cluster;
use comcount_tests::conformance::Requests;
use comcount_tests::connect::{self, RECONNECT_TIMEOUT};
use comcount_tests::server::{RedisServer, command_calls};
use comcount_tests::settings::{self, sleep};
use comcount_tests::shared;
use futures::future::join_all;

/// Runs the script once (a flush expecting interval 0 asks for the time and writes nothing),
/// retrying while the client reconnects; returns how many script loads it reported.
async fn run_script<S: Store>(store: &S, recorder: &Recorder) -> usize {
    let report = Reporter::new("reload", Arc::new(recorder.clone()));
    let requests = Requests::fresh(settings::interval());
    let deadline = Instant::now() + RECONNECT_TIMEOUT;
    loop {
        let probe = requests.flush(ParticipantId::random(), 1, 1, 0);
        match store.flush(&probe, &report).await {
            Ok(reply) => {
                assert_eq!(reply.outcome, Outcome::WrongInterval);
                return recorder.with_message("script loaded").len();
            }
            Err(error) => {
                assert_eq!(
                    error.kind(),
                    StoreErrorKind::Unanswered,
                    "only a lost connection may fail a flush here: {error}"
                );
                assert!(
                    Instant::now() < deadline,
                    "the store never came back: {error}"
                );
                sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn script_flush(port: u16) {
    let mut connection = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut connection)
        .unwrap();
}

/// How many `SCRIPT LOAD`s the server at `port` ran.
fn script_loads(port: u16) -> u64 {
    command_calls(port, &["script|load"])
}

/// After `SCRIPT FLUSH`, `flushes` flushes at once through `store` (as from as many counters
/// after a failover): every one goes through, and the server loads the script once for all of
/// them, once for each before. Returns the loads reported.
async fn many_at_once_load_once<S: Store>(store: &S, port: u16, flushes: usize) -> usize {
    let recorder = Recorder::new();
    script_flush(port);
    assert_eq!(run_script(store, &recorder).await, 1, "first use loads");
    script_flush(port);
    let before = script_loads(port);
    let report = Reporter::new("reload", Arc::new(recorder.clone()));
    let requests = Requests::fresh(settings::interval());
    let probes: Vec<_> = (0..flushes)
        .map(|_| requests.flush(ParticipantId::random(), 1, 1, 0))
        .collect();
    let replies = join_all(probes.iter().map(|probe| store.flush(probe, &report))).await;
    for reply in replies {
        assert_eq!(reply.unwrap().outcome, Outcome::WrongInterval);
    }
    assert_eq!(
        script_loads(port) - before,
        1,
        "SCRIPT LOADs for {flushes} flushes"
    );
    recorder.with_message("script loaded").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_flushes_that_find_the_script_missing_load_it_once() {
    let server = RedisServer::standalone();
    let redis_rs = RedisStore::new(connect::manager(&server.url()).await);
    assert_eq!(
        many_at_once_load_once(&redis_rs, server.port(), 500).await,
        2
    );
    let fred = FredStore::new(connect::fred_client(&server.url()).await);
    assert_eq!(many_at_once_load_once(&fred, server.port(), 500).await, 2);
}

fn assert_sha(recorder: &Recorder, sha: &str) {
    for record in recorder.with_message("script loaded") {
        assert_eq!(record.attribute("sha"), Some(sha));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_reloads_after_script_flush_and_restart() {
    let mut server = RedisServer::standalone();
    let store = RedisStore::new(connect::manager(&server.url()).await);
    let recorder = Recorder::new();
    assert_eq!(run_script(&store, &recorder).await, 1, "first use loads");
    assert_eq!(
        run_script(&store, &recorder).await,
        1,
        "loaded once is enough"
    );
    script_flush(server.port());
    assert_eq!(run_script(&store, &recorder).await, 2, "after SCRIPT FLUSH");
    server.restart();
    assert_eq!(run_script(&store, &recorder).await, 3, "after a restart");
    assert_sha(&recorder, store.script_sha());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fred_reloads_after_script_flush_and_restart() {
    let mut server = RedisServer::standalone();
    let store = FredStore::new(connect::fred_client(&server.url()).await);
    let recorder = Recorder::new();
    assert_eq!(run_script(&store, &recorder).await, 1, "first use loads");
    assert_eq!(
        run_script(&store, &recorder).await,
        1,
        "loaded once is enough"
    );
    script_flush(server.port());
    assert_eq!(run_script(&store, &recorder).await, 2, "after SCRIPT FLUSH");
    server.restart();
    assert_eq!(run_script(&store, &recorder).await, 3, "after a restart");
    assert_sha(&recorder, store.script_sha());
}

fn flush_every_node(cluster: &Cluster) {
    for port in cluster.ports() {
        script_flush(port);
    }
}

/// Both cluster stores in one test: they flush the scripts of the one shared cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_reload_on_a_cluster() {
    let cluster = shared::cluster();
    flush_every_node(cluster);
    let redis_rs = RedisStore::new(connect::cluster(cluster).await);
    let recorder = Recorder::new();
    assert_eq!(run_script(&redis_rs, &recorder).await, 1, "first use loads");
    assert_eq!(
        run_script(&redis_rs, &recorder).await,
        1,
        "loaded once is enough"
    );
    flush_every_node(cluster);
    assert_eq!(
        run_script(&redis_rs, &recorder).await,
        2,
        "after SCRIPT FLUSH"
    );
    assert_sha(&recorder, redis_rs.script_sha());

    flush_every_node(cluster);
    let fred = FredStore::new(connect::fred_cluster(cluster).await);
    let recorder = Recorder::new();
    assert_eq!(run_script(&fred, &recorder).await, 1, "first use loads");
    assert_eq!(
        run_script(&fred, &recorder).await,
        1,
        "loaded once is enough"
    );
    flush_every_node(cluster);
    assert_eq!(run_script(&fred, &recorder).await, 2, "after SCRIPT FLUSH");
    assert_sha(&recorder, fred.script_sha());
}
