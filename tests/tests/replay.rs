//! A flush whose connection is killed while it is in flight is never counted twice, whatever
//! the client does next: the redis-rs cluster client and a fred client with its default
//! command attempts send it again after reconnecting, and the participant's fence answers the
//! copy as a duplicate (or, when the copy lands in a later interval, as a wrong interval, after
//! which the same flush aimed anew is a duplicate).
//!
//! The server is held in `DEBUG SLEEP` while the flush and a `CLIENT KILL TYPE normal` queue
//! behind it; when it wakes it runs the flush, then cuts the connection before the reply leaves.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::{
    FlushReply, FlushRequest, Outcome, ParticipantId, Store, StoreError, StoreErrorKind,
};
use comcount_fred::FredStore;
use comcount_fred::fred::clients::Client;
use comcount_fred::fred::interfaces::LuaInterface;
use comcount_fred::fred::types::Value;
use comcount_redis_rs::RedisStore;
use comcount_tests::conformance::{Requests, flush};
use comcount_tests::inspect::{Inspector, RedisInspector};
use comcount_tests::server::RedisServer;
use comcount_tests::settings::{self, sleep};
use comcount_tests::{connect, shared};

/// The shortest hold of the server; the flush is sent a quarter into it, the kill halfway.
const HOLD: Duration = Duration::from_millis(200);

/// EVALSHA through fred with the client's default command attempts: a client that writes a
/// command again after a reconnection and cannot be told otherwise.
struct FredDefaultAttempts(Client);

impl Store for FredDefaultAttempts {
    fn name(&self) -> &str {
        "fred, default attempts"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let client = self.0.clone();
        let sha = comcount_fred::fred::util::sha1_hash(comcount_core::script::SOURCE);
        let keys = request.keys().to_vec();
        let args: Vec<Value> = comcount_core::script::arguments(request)
            .into_iter()
            .map(|arg| Value::Bytes(arg.into_owned().into()))
            .collect();
        async move {
            let value: Value = client
                .evalsha(sha, keys, args)
                .await
                .map_err(StoreError::unanswered)?;
            let Value::Array(items) = value else {
                return Err(StoreError::malformed("not an array"));
            };
            let fields: Vec<_> = items
                .iter()
                .map(|item| match item {
                    Value::Integer(n) => comcount_core::script::Field::Int(*n),
                    Value::String(s) => comcount_core::script::Field::Bytes(s.as_bytes()),
                    Value::Bytes(b) => comcount_core::script::Field::Bytes(b),
                    _ => comcount_core::script::Field::Nil,
                })
                .collect();
            comcount_core::script::decode(request, &fields)
        }
    }
}

/// What became of a flush sent into a killed connection.
struct Replayed {
    first: Result<FlushReply, StoreError>,
    /// The same flush sent again when the first reply was a wrong interval or an error.
    again: Option<FlushReply>,
    /// The interval key the flush was aimed at.
    key: String,
    amount: u64,
}

/// Sends one flush of `amount` to the node on `port` while that node's normal connections are
/// killed, and sends the very same flush again, aimed anew, if the first attempt did not
/// settle it. The script must be loaded on the node already.
async fn flush_into_a_kill<S: Store>(store: &S, requests: &Requests, port: u16) -> Replayed {
    let interval = Duration::from_millis(requests.interval_ms);
    let url = format!("redis://127.0.0.1:{port}/");
    let mut sleeper = connect::multiplexed(&url).await;
    let mut killer = connect::multiplexed(&url).await;
    let participant = ParticipantId::random();
    let amount = 1 + u64::from(fastrand::u16(..));

    // Where the server's clock is, and how long to hold the server so that it wakes in the
    // middle of an interval: the flush queued behind the hold runs there.
    let probe = flush(store, &requests.flush(participant, 1, amount, 0)).await;
    let asked = Instant::now();
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap();
    let now = probe.interval * requests.interval_ms + ms(probe.phase);
    let earliest = now + ms(HOLD);
    let half = requests.interval_ms / 2;
    let wake = (earliest.saturating_sub(half)).div_ceil(requests.interval_ms)
        * requests.interval_ms
        + half;
    let hold = Duration::from_millis(wake - now).saturating_sub(asked.elapsed());
    let request = requests.flush(participant, 1, amount, wake / requests.interval_ms);

    let holding = tokio::spawn(async move {
        let _: redis::RedisResult<()> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(format!("{:.3}", hold.as_secs_f64()))
            .query_async(&mut sleeper)
            .await;
    });
    sleep(hold / 4).await;
    let report = Reporter::new("replay", Arc::new(Recorder::new()));
    let kill = async {
        sleep(hold / 4).await;
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query_async::<i64>(&mut killer)
            .await
    };
    let (first, killed) = futures::join!(store.flush(&request, &report), kill);
    holding.await.unwrap();
    assert!(killed.unwrap() >= 1, "CLIENT KILL killed no connection");

    // As the counter does: a wrong interval is sent again, same sequence number and amount,
    // aimed at the interval the store named; an unanswered flush may be sent again likewise.
    let mut again = None;
    let settled = matches!(&first, Ok(r) if r.outcome != Outcome::WrongInterval);
    if !settled {
        for _ in 0..20 {
            let probe =
                flush_after_kill(store, &requests.flush(ParticipantId::random(), 1, 1, 0)).await;
            if probe.phase > interval * 2 / 3 {
                sleep(interval / 2).await;
                continue;
            }
            let resend = request.clone().with_expect(probe.interval);
            let reply = flush_after_kill(store, &resend).await;
            if reply.outcome != Outcome::WrongInterval {
                again = Some(reply);
                break;
            }
        }
        assert!(again.is_some(), "the resent flush never settled");
    }
    Replayed {
        first,
        again,
        key: requests.interval_key(request.expect),
        amount,
    }
}

/// Sends a flush while the client may still be reconnecting after the kill: an unanswered
/// one is sent again, the very same (safe: the fence refuses a second application).
async fn flush_after_kill<S: Store>(store: &S, request: &FlushRequest) -> FlushReply {
    let report = Reporter::new("replay", Arc::new(Recorder::new()));
    let deadline = Instant::now() + connect::RECONNECT_TIMEOUT;
    loop {
        match store.flush(request, &report).await {
            Ok(reply) => return reply,
            Err(error) => {
                assert_eq!(error.kind(), StoreErrorKind::Unanswered, "{error}");
                assert!(
                    Instant::now() < deadline,
                    "the client never reconnected: {error}"
                );
                sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The flush was counted exactly once: it ran (the kill came after it), and every later copy
/// was refused by the fence. `inspector` must be connected after the kill.
async fn assert_counted_once<I: Inspector>(replayed: &Replayed, inspector: &I, store: &str) {
    let total: Option<u64> = inspector
        .key(&replayed.key)
        .await
        .map(|k| k.value.parse().unwrap());
    eprintln!(
        "{store}: first reply {:?}, sent again {:?}",
        replayed
            .first
            .as_ref()
            .map(|r| r.outcome)
            .map_err(|e| e.kind()),
        replayed.again.as_ref().map(|r| r.outcome)
    );
    assert_eq!(
        total,
        Some(replayed.amount),
        "{store}: the interval must hold the amount exactly once"
    );
    if let Some(again) = &replayed.again {
        assert!(
            matches!(again.outcome, Outcome::Duplicate | Outcome::Stale),
            "{store}: the copy sent again must be refused by the fence, got {again:?}"
        );
    }
    if let Ok(first) = &replayed.first {
        assert!(
            matches!(
                first.outcome,
                Outcome::Applied | Outcome::Duplicate | Outcome::WrongInterval
            ),
            "{store}: {first:?}"
        );
    }
}

async fn warm_up<S: Store>(store: &S) {
    let requests = Requests::fresh(settings::interval());
    flush(store, &requests.flush(ParticipantId::random(), 1, 1, 0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_cluster_retries_are_fenced() {
    let cluster = shared::cluster();
    let store = RedisStore::new(connect::cluster(cluster).await);
    warm_up(&store).await;
    let requests = Requests::fresh(settings::interval());
    let port = cluster.primary_of(&requests.interval_key(0));
    let replayed = flush_into_a_kill(&store, &requests, port).await;
    let inspector = RedisInspector(connect::cluster(cluster).await);
    assert_counted_once(&replayed, &inspector, "redis-rs cluster").await;

    // fred on the same cluster, after redis-rs: the test owns the cluster's connections.
    let store = FredStore::new(connect::fred_cluster(cluster).await);
    warm_up(&store).await;
    let requests = Requests::fresh(settings::interval());
    let port = cluster.primary_of(&requests.interval_key(0));
    let replayed = flush_into_a_kill(&store, &requests, port).await;
    let inspector = RedisInspector(connect::cluster(cluster).await);
    assert_counted_once(&replayed, &inspector, "fred cluster").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fred_default_attempts_are_fenced() {
    let server = RedisServer::standalone();
    let client = connect::fred_client(&server.url()).await;
    // Load the script through the store; the raw client then finds it.
    warm_up(&FredStore::new(client.clone())).await;
    let store = FredDefaultAttempts(client);
    let requests = Requests::fresh(settings::interval());
    let replayed = flush_into_a_kill(&store, &requests, server.port()).await;
    let inspector = RedisInspector(connect::multiplexed(&server.url()).await);
    assert_counted_once(&replayed, &inspector, "fred, default attempts").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fred_store_does_not_resend() {
    let server = RedisServer::standalone();
    let store = FredStore::new(connect::fred_client(&server.url()).await);
    warm_up(&store).await;
    let requests = Requests::fresh(settings::interval());
    let replayed = flush_into_a_kill(&store, &requests, server.port()).await;
    let inspector = RedisInspector(connect::multiplexed(&server.url()).await);
    assert_counted_once(&replayed, &inspector, "fred store").await;
    let error = replayed
        .first
        .as_ref()
        .expect_err("the reply was cut off, and the store must not have sent the flush again");
    assert!(error.may_have_applied(), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_connection_manager_reports_the_lost_reply() {
    let server = RedisServer::standalone();
    let store = RedisStore::new(connect::manager(&server.url()).await);
    warm_up(&store).await;
    let requests = Requests::fresh(settings::interval());
    let replayed = flush_into_a_kill(&store, &requests, server.port()).await;
    let inspector = RedisInspector(connect::multiplexed(&server.url()).await);
    assert_counted_once(&replayed, &inspector, "redis-rs connection manager").await;
    let error = replayed.first.as_ref().expect_err("the reply was cut off");
    assert!(error.may_have_applied(), "{error}");
}
