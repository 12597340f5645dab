//! Errors Redis gives a flush's first write, on servers the test starts, through both stores:
//! a primary turned replica (`READONLY`), too few replicas for a write (`NOREPLICAS`) and a
//! full memory (`OOM`) turn the flush away for now, for a counter and for a family's
//! partition, so that the counter sends it again; a user whose ACL lacks a command the flush
//! needs (`NOPERM`, or the error a script's command gets) is refused, and told what to grant.
//!
//! Each flush goes straight to the store, aimed at the server's interval, and only the error's
//! kind and text are checked, which do not depend on the script's reply; one counter per
//! store keeps its units through a full memory and counts them once the memory is freed.

use std::time::{Duration, Instant};

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::{Record, Recorder, Reporter};
use comcount_core::{
    Counter, Entry, FlushRequest, KeySpace, Outcome, ParticipantId, Store, StoreError,
    StoreErrorKind,
};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::cluster_admin::command;
use comcount_tests::connect;
use comcount_tests::server::RedisServer;
use comcount_tests::settings::{self, sleep};

/// How long a test waits for something that takes a few intervals on a quiet machine.
fn patience() -> Duration {
    settings::interval() * 20 + Duration::from_secs(5)
}

fn interval_ms() -> u64 {
    u64::try_from(settings::interval().as_millis()).unwrap()
}

/// The interval the server on `port` is in, by its own clock.
async fn server_interval(port: u16) -> u64 {
    let (seconds, micros): (u64, u64) = command(port, &["TIME"]).await.unwrap();
    (seconds * 1000 + micros / 1000) / interval_ms()
}

/// A counter's flush of 5, aimed at the server's interval: one that reaches its first write.
async fn counter_flush(port: u16) -> FlushRequest {
    counter_flush_under(&settings::unique_prefix("writeerr"), port).await
}

async fn counter_flush_under(prefix: &str, port: u16) -> FlushRequest {
    let space = KeySpace::counter(prefix, "writes");
    FlushRequest::new(space, ParticipantId::random(), interval_ms())
        .with_amount(5)
        .with_expect(server_interval(port).await)
}

/// A family partition's flush of one key, aimed at the server's interval.
async fn family_flush(port: u16) -> FlushRequest {
    family_flush_under(&settings::unique_prefix("writeerr"), port).await
}

async fn family_flush_under(prefix: &str, port: u16) -> FlushRequest {
    let space = KeySpace::partition(prefix, "tenants", 0);
    FlushRequest::new(space, ParticipantId::random(), interval_ms())
        .with_entries(vec![Entry::new("acme", 1)])
        .with_expect(server_interval(port).await)
}

/// The error `store` answers `request` with; a reply fails the test.
async fn failure<S: Store>(store: &S, request: &FlushRequest) -> StoreError {
    let report = Reporter::new("write_errors", std::sync::Arc::new(Recorder::new()));
    match store.flush(request, &report).await {
        Ok(reply) => panic!(
            "{} answered {reply:?} where the server refuses writes",
            store.name()
        ),
        Err(error) => error,
    }
}

/// A counter's flush and a family's, both turned away for now with the server's own words
/// (`said`; redis-rs writes the code its own way), not refused as a key that holds something
/// foreign.
async fn assert_turned_away<S: Store>(store: &S, port: u16, said: &str) {
    for request in [counter_flush(port).await, family_flush(port).await] {
        let layout = request.space.layout();
        let error = failure(store, &request).await;
        let text = error.to_string();
        assert_eq!(
            error.kind(),
            StoreErrorKind::Unavailable,
            "{} {layout:?}: {text}",
            store.name()
        );
        assert!(error.worth_resending(), "{text}");
        assert!(
            text.contains(said),
            "{} {layout:?}: {said:?} missing from {text}",
            store.name()
        );
        assert!(
            !text.contains("ERR comcount") && !text.contains("elete the key"),
            "{} {layout:?}: the server's refusal taken for a foreign key: {text}",
            store.name()
        );
    }
}

async fn redis_rs(url: &str) -> RedisStore<redis::aio::ConnectionManager> {
    RedisStore::new(connect::manager(url).await)
}

async fn fred(url: &str) -> FredStore<fred::clients::Client> {
    FredStore::new(connect::fred_client(url).await)
}

async fn config_set(port: u16, name: &str, value: &str) {
    let () = command(port, &["CONFIG", "SET", name, value])
        .await
        .unwrap();
}

/// A server whose memory is full for any write: `maxmemory` 1 byte, evicting nothing.
async fn full_server() -> RedisServer {
    let server = RedisServer::standalone();
    config_set(server.port(), "maxmemory-policy", "noeviction").await;
    config_set(server.port(), "maxmemory", "1").await;
    server
}

/// A server turned replica of another, its link to the primary up: every write is refused
/// with `READONLY`.
async fn replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::standalone();
    let replica = RedisServer::standalone();
    let primary_port = primary.port().to_string();
    let () = command(replica.port(), &["REPLICAOF", "127.0.0.1", &primary_port])
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = command(replica.port(), &["INFO", "replication"])
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never synced: {info}"
        );
        sleep(Duration::from_millis(20)).await;
    }
    (primary, replica)
}

/// A server with `min-replicas-to-write 1` and no replica: every write is refused with
/// `NOREPLICAS`.
async fn lone_server_wanting_a_replica() -> RedisServer {
    let server = RedisServer::standalone();
    config_set(server.port(), "min-replicas-to-write", "1").await;
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_turned_replica_turns_flushes_away_redis_rs() {
    let (_primary, replica) = replica().await;
    let store = redis_rs(&replica.url()).await;
    assert_turned_away(&store, replica.port(), "write against a read only replica").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_turned_replica_turns_flushes_away_fred() {
    let (_primary, replica) = replica().await;
    let store = fred(&replica.url()).await;
    assert_turned_away(&store, replica.port(), "write against a read only replica").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_replicas_turn_flushes_away_redis_rs() {
    let server = lone_server_wanting_a_replica().await;
    let store = redis_rs(&server.url()).await;
    assert_turned_away(&store, server.port(), "Not enough good replicas").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_replicas_turn_flushes_away_fred() {
    let server = lone_server_wanting_a_replica().await;
    let store = fred(&server.url()).await;
    assert_turned_away(&store, server.port(), "Not enough good replicas").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_turns_flushes_away_redis_rs() {
    let server = full_server().await;
    let store = redis_rs(&server.url()).await;
    assert_turned_away(&store, server.port(), "not allowed when used memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_turns_flushes_away_fred() {
    let server = full_server().await;
    let store = fred(&server.url()).await;
    assert_turned_away(&store, server.port(), "not allowed when used memory").await;
}

/// The events of `events` with `message`, waited for until `found` holds of them.
async fn await_events(
    events: &Recorder,
    message: &str,
    found: impl Fn(&[Record]) -> bool,
) -> Vec<Record> {
    let deadline = Instant::now() + patience();
    loop {
        let records = events.with_message(message);
        if found(&records) {
            return records;
        }
        assert!(
            Instant::now() < deadline,
            "no fitting {message:?} in {:?}",
            events.records()
        );
        sleep(settings::interval() / 4).await;
    }
}

/// A counter on `store`, over a server whose memory is full, sends its flush again while the
/// memory stays full, and counts it once the memory is freed: no unit is dropped.
async fn keeps_its_units_through_a_full_memory<S: Store>(store: S, server: &RedisServer) {
    let prefix = settings::unique_prefix("writeerr");
    let events = Recorder::new();
    let (counter, worker) = Counter::builder("full", settings::interval())
        .prefix(&prefix)
        .diagnostics(events.clone())
        .build(store, TokioTimer::new())
        .unwrap();
    tokio::spawn(worker);
    assert_eq!(counter.increment(5), 5);
    let turned_away = |records: &[Record]| {
        records.iter().any(|r| {
            r.attribute("reason") == Some("failed")
                && r.attribute("error")
                    .is_some_and(|e| e.contains("not allowed when used memory"))
        })
    };
    await_events(&events, "copy resent", turned_away).await;
    assert_eq!(
        events.with_message("flush failed"),
        [],
        "dropped while full"
    );

    config_set(server.port(), "maxmemory", "0").await;
    let counted = |records: &[Record]| records.iter().any(|r| r.attribute("amount") == Some("5"));
    let completed = await_events(&events, "flush completed", counted).await;
    let n = completed
        .iter()
        .find_map(|r| (r.attribute("amount") == Some("5")).then(|| r.attribute("interval")))
        .flatten()
        .unwrap();
    let stored: Option<String> = command(server.port(), &["GET", &format!("{prefix}{{full}}:{n}")])
        .await
        .unwrap();
    assert_eq!(stored.as_deref(), Some("5"));
    assert_eq!(events.with_message("flush failed"), []);
    counter.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_keeps_its_units_through_a_full_memory_redis_rs() {
    let server = full_server().await;
    keeps_its_units_through_a_full_memory(redis_rs(&server.url()).await, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_keeps_its_units_through_a_full_memory_fred() {
    let server = full_server().await;
    keeps_its_units_through_a_full_memory(fred(&server.url()).await, &server).await;
}

/// A server with a user `flusher` (password `secret`) that may do anything but `denied`; the
/// URL to connect as it.
async fn server_with_a_user_denied(denied: &[&str]) -> (RedisServer, String) {
    let server = RedisServer::standalone();
    let mut args = vec!["ACL", "SETUSER", "flusher", "on", ">secret", "~*", "+@all"];
    let denied: Vec<String> = denied.iter().map(|c| format!("-{c}")).collect();
    args.extend(denied.iter().map(String::as_str));
    let () = command(server.port(), &args).await.unwrap();
    let url = format!("redis://flusher:secret@127.0.0.1:{}/", server.port());
    (server, url)
}

/// Refused, with the hint of what to grant and the server's words, which name the command
/// the user may not run: only Redis 7.2 and later name one the script calls, 7.0 and 7.1 say
/// that the script's user cannot run it.
fn assert_lacks_permission(error: &StoreError, command: &str, what: &str) {
    let text = error.to_string();
    assert_eq!(error.kind(), StoreErrorKind::Refused, "{what}: {text}");
    assert!(!error.worth_resending(), "{what}: {text}");
    assert!(
        text.contains("lacks a permission the flush needs") && text.contains("grant it"),
        "{what}: no hint of what to grant in {text}"
    );
    assert!(
        text.contains(&format!("'{command}'"))
            || text.contains("The user executing the script can't run this command"),
        "{what}: the server's words on {command} missing from {text}"
    );
    assert!(
        text.contains(&command.to_ascii_uppercase()),
        "{what}: {command} missing from {text}"
    );
}

/// A counter's flush by a user who may not `INCRBY`, and a family's by one who may not
/// `HSET`: the first write of each.
async fn refused_a_command_the_script_calls<S: Store, F>(connect: impl Fn(String) -> F)
where
    F: std::future::Future<Output = S>,
{
    let (server, url) = server_with_a_user_denied(&["incrby", "hset"]).await;
    let store = connect(url).await;
    let counter = failure(&store, &counter_flush(server.port()).await).await;
    assert_lacks_permission(&counter, "incrby", store.name());
    let family = failure(&store, &family_flush(server.port()).await).await;
    assert_lacks_permission(&family, "hset", store.name());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_a_command_of_the_script_is_refused_redis_rs() {
    refused_a_command_the_script_calls(|url| async move { redis_rs(&url).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_a_command_of_the_script_is_refused_fred() {
    refused_a_command_the_script_calls(|url| async move { fred(&url).await }).await;
}

/// A user denied a write that the script runs after its first (`PEXPIRE`, or the fence's
/// `SET`) is refused before the first: nothing is written, so no flush is ever counted without
/// the fence that keeps a replayed copy from counting it again.
async fn refused_a_later_write<S: Store, F>(connect: impl Fn(String) -> F)
where
    F: std::future::Future<Output = S>,
{
    for denied in ["pexpire", "set"] {
        let (server, url) = server_with_a_user_denied(&[denied]).await;
        let store = connect(url).await;
        for request in [
            counter_flush(server.port()).await,
            family_flush(server.port()).await,
        ] {
            let layout = request.space.layout();
            let error = failure(&store, &request).await;
            assert_lacks_permission(&error, denied, &format!("{} {layout:?}", store.name()));
        }
        let keys: i64 = command(server.port(), &["DBSIZE"]).await.unwrap();
        assert_eq!(
            keys,
            0,
            "{}: flushes by a user denied {denied} wrote {keys} keys",
            store.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_a_later_write_gets_nothing_written_redis_rs() {
    refused_a_later_write(|url| async move { redis_rs(&url).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_a_later_write_gets_nothing_written_fred() {
    refused_a_later_write(|url| async move { fred(&url).await }).await;
}

/// A counter whose user may not `EVALSHA` reports its flush failed, its units dropped, with
/// the server's words naming the command and the hint of what to grant.
async fn reports_evalsha_denied<S: Store>(store: S) {
    let events = Recorder::new();
    let (counter, worker) = Counter::builder("denied", settings::interval())
        .prefix(settings::unique_prefix("writeerr"))
        .diagnostics(events.clone())
        .build(store, TokioTimer::new())
        .unwrap();
    tokio::spawn(worker);
    counter.increment(5);
    let failed = await_events(&events, "flush failed", |records| !records.is_empty()).await;
    let error = failed[0].attribute("error").unwrap();
    assert!(error.contains("'evalsha'"), "{error}");
    assert!(
        error.contains("lacks a permission the flush needs") && error.contains("grant it"),
        "{error}"
    );
    assert_eq!(failed[0].attribute("dropped"), Some("5"), "{:?}", failed[0]);
    counter.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_evalsha_is_told_what_to_grant_redis_rs() {
    let (_server, url) = server_with_a_user_denied(&["evalsha"]).await;
    reports_evalsha_denied(redis_rs(&url).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_evalsha_is_told_what_to_grant_fred() {
    let (_server, url) = server_with_a_user_denied(&["evalsha"]).await;
    reports_evalsha_denied(fred(&url).await).await;
}

/// A server with the user the README's ACL notes grant what a flush needs, made with the
/// command they give, as written; the URL to connect as it.
async fn server_with_the_readme_grant() -> (RedisServer, String) {
    let readme = include_str!("../../README.md");
    let grant = readme
        .lines()
        .find(|line| line.starts_with("ACL SETUSER "))
        .expect("the README's ACL notes give no ACL SETUSER command");
    let args: Vec<&str> = grant.split_whitespace().collect();
    assert_eq!(
        &args[..6],
        ["ACL", "SETUSER", "counters", "on", ">secret", "~app:*"]
    );
    let server = RedisServer::standalone();
    let () = command(server.port(), &args).await.unwrap();
    let url = format!("redis://counters:secret@127.0.0.1:{}/", server.port());
    (server, url)
}

/// A counter's flush and a family's by the user the README's grant makes, under its prefix:
/// both applied, the script loaded on the way.
async fn flushes_with_the_readme_grant<S: Store>(store: S, port: u16) {
    let prefix = settings::unique_prefix("app");
    let report = Reporter::new("write_errors", std::sync::Arc::new(Recorder::new()));
    for request in [
        counter_flush_under(&prefix, port).await,
        family_flush_under(&prefix, port).await,
    ] {
        let reply = store
            .flush(&request, &report)
            .await
            .unwrap_or_else(|e| panic!("{} {:?}: {e}", store.name(), request.space.layout()));
        assert_eq!(reply.outcome, Outcome::Applied, "{reply:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_grant_is_enough_to_flush_redis_rs() {
    let (server, url) = server_with_the_readme_grant().await;
    flushes_with_the_readme_grant(redis_rs(&url).await, server.port()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_grant_is_enough_to_flush_fred() {
    let (server, url) = server_with_the_readme_grant().await;
    flushes_with_the_readme_grant(fred(&url).await, server.port()).await;
}
