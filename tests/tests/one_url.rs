//! One URL for every deployment: `RedisStore::connect_any` reads fred's URL forms and opens
//! what each names, on servers the tests start. Through a server's URL (with a database), a
//! cluster's (`redis-cluster://...?node=...`) and a sentinel's (`redis-sentinel://...`,
//! counting on after the primary is killed and the replica promoted), a redis-rs participant and
//! a fred participant (`FredStore::connect`) connected with the same URL share one counter: the
//! fred one, which adds nothing, must learn the redis-rs one's amount from a flush reply. And a
//! URL that names no deployment, or the wrong one, is refused before anything connects.

use std::sync::Arc;
use std::time::Instant;

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::{Record, Recorder, Reporter};
use comcount_core::{Counter, ParticipantId, Store, StoreError, StoreErrorKind};
use comcount_fred::FredStore;
use comcount_redis_rs::{AnyConnection, ConnectError, RedisStore};
use comcount_tests::cluster::Cluster;
use comcount_tests::conformance::Requests;
use comcount_tests::connect;
use comcount_tests::inspect::{Inspector, RedisInspector};
use comcount_tests::sentinel::{Sentinel, patience, wait_for};
use comcount_tests::server::RedisServer;
use comcount_tests::settings::{self, sleep};
use comcount_tests::shared;
use redis::ConnectionAddr;

/// Two participants of one counter under a fresh prefix: `a` on redis-rs, `b` on fred.
struct Pair {
    prefix: String,
    a: Counter,
    b: Counter,
    a_events: Recorder,
    b_events: Recorder,
}

impl Pair {
    fn new(a: RedisStore<AnyConnection>, b: impl Store) -> Self {
        let prefix = settings::unique_prefix("url");
        let (a_events, b_events) = (Recorder::new(), Recorder::new());
        Self {
            a: participant(a, &prefix, &a_events),
            b: participant(b, &prefix, &b_events),
            prefix,
            a_events,
            b_events,
        }
    }

    /// `a` adds `amount`; `b`, which adds nothing, must come to answer `total`, which only a
    /// flush reply can tell it. Checks the interval's key through `inspector`.
    async fn count(&self, amount: u64, total: u64, inspector: &impl Inspector) {
        let completed_before = self.completed(amount).len();
        assert_eq!(self.a.increment(amount), amount);
        let deadline = Instant::now() + patience();
        loop {
            if self.b.increment(0) == total && self.completed(amount).len() > completed_before {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the fred participant never answered {total}: redis-rs's events {:?}, fred's \
                 events {:?}",
                self.a_events.records(),
                self.b_events.records()
            );
            sleep(settings::interval() / 4).await;
        }
        let n = self.completed(amount)[completed_before]
            .attribute("interval")
            .unwrap()
            .to_owned();
        let key = format!("{}{{url}}:{n}", self.prefix);
        let stored = inspector.key(&key).await.map(|k| k.value);
        assert_eq!(stored.as_deref(), Some(total.to_string().as_str()), "{key}");
    }

    /// `a`'s completed flushes of `amount`.
    fn completed(&self, amount: u64) -> Vec<Record> {
        let amount = amount.to_string();
        self.a_events
            .with_message("flush completed")
            .into_iter()
            .filter(|r| r.attribute("amount") == Some(amount.as_str()))
            .collect()
    }

    fn close(&self) {
        self.a.close();
        self.b.close();
    }
}

fn participant(store: impl Store, prefix: &str, events: &Recorder) -> Counter {
    let (counter, worker) = Counter::builder("url", settings::interval())
        .prefix(prefix)
        .diagnostics(events.clone())
        .build(store, TokioTimer::new())
        .unwrap();
    tokio::spawn(worker);
    counter
}

async fn redis_rs(url: &str) -> RedisStore<AnyConnection> {
    RedisStore::connect_any(url)
        .await
        .unwrap_or_else(|e| panic!("connect_any cannot connect with {url}: {e}"))
}

async fn fred(url: &str) -> FredStore<comcount_fred::fred::clients::Client> {
    FredStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("fred cannot connect with {url}: {e}"))
}

/// The error of a flush the script refuses (sequence number 0), sent through `store`.
async fn refusal(store: &impl Store) -> StoreError {
    let request = Requests::fresh(settings::interval()).flush(ParticipantId::from_u64(1), 0, 1, 0);
    let report = Reporter::new("one-url", Arc::new(Recorder::new()));
    let error = store
        .flush(&request, &report)
        .await
        .expect_err("a flush with sequence number 0 is refused");
    assert_eq!(error.kind(), StoreErrorKind::Refused, "{error}");
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_url_opens_a_connection_manager_and_counts() {
    let server = RedisServer::standalone();
    // Database 5: the URL reaches redis-rs, and fred, as it was written.
    let url = format!("{}5", server.url());
    let store = redis_rs(&url).await;
    assert!(
        matches!(store.connection(), AnyConnection::Server(_)),
        "{:?}",
        store.connection()
    );
    // A connection that sends once: a refusal was never applied.
    assert!(!refusal(&store).await.may_have_applied());

    let pair = Pair::new(store, fred(&url).await);
    let inspector = RedisInspector(connect::multiplexed(&url).await);
    pair.count(100, 100, &inspector).await;
    pair.close();

    // A server's URL that names more nodes is refused, not connected to its first node.
    let more = format!("{url}?node=127.0.0.1:{}", server.port());
    let error = RedisStore::connect_any(&more).await.expect_err(&more);
    assert!(
        matches!(&error, ConnectError::InvalidUrl { reason } if reason.contains("redis-cluster://")),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_url_opens_a_cluster_connection_and_counts() {
    let cluster: &Cluster = shared::cluster();
    // redis-cluster://127.0.0.1:P?node=127.0.0.1:Q&..., as fred reads it.
    let url = cluster.fred_url();
    let store = redis_rs(&url).await;
    assert!(
        matches!(store.connection(), AnyConnection::Cluster(_)),
        "{:?}",
        store.connection()
    );
    // The cluster connection sends a command again on its own: a refusal may follow a copy
    // that ran, and is taken as perhaps applied.
    assert!(refusal(&store).await.may_have_applied());

    let pair = Pair::new(store, fred(&url).await);
    let inspector = RedisInspector(connect::cluster(cluster).await);
    pair.count(100, 100, &inspector).await;
    pair.close();

    // One seed node is enough: the connection learns the others from it.
    let one = format!("redis-cluster://127.0.0.1:{}", cluster.ports()[0]);
    let store = redis_rs(&one).await;
    assert!(matches!(store.connection(), AnyConnection::Cluster(_)));
    let pair = Pair::new(store, fred(&one).await);
    pair.count(3, 3, &inspector).await;
    pair.close();
}

/// The port the sentinel connection under `store` sends to.
fn primary_port(store: &RedisStore<AnyConnection>) -> u16 {
    let AnyConnection::Sentinel(connection) = store.connection() else {
        panic!("not a sentinel connection: {:?}", store.connection());
    };
    match connection.primary() {
        ConnectionAddr::Tcp(_, port) => port,
        other => panic!("the primary's address is {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_url_follows_the_primary_through_a_failover() {
    let mut setup = Sentinel::start().await;
    let url = format!(
        "redis-sentinel://127.0.0.1:{}?sentinelServiceName=main",
        setup.sentinel.port()
    );
    let store = redis_rs(&url).await;
    assert_eq!(primary_port(&store), setup.primary.port());
    let a = store.clone();
    let pair = Pair::new(store, fred(&url).await);
    let inspector = RedisInspector(connect::multiplexed(&setup.primary.url()).await);
    pair.count(100, 100, &inspector).await;

    // The primary dies; the sentinel promotes the replica.
    setup.primary.kill();
    let promoted = setup.replica.port();
    wait_for("the sentinel to promote the replica", || async {
        setup.primary_port().await == promoted
    })
    .await;
    let inspector = RedisInspector(connect::multiplexed(&setup.replica.url()).await);
    pair.count(7, 7, &inspector).await;
    assert_eq!(primary_port(&a), promoted);
    pair.close();
}

#[tokio::test]
async fn a_url_that_names_no_deployment_is_refused_before_anything_connects() {
    // Port 1 on the loopback: nothing listens, and nothing is asked.
    for (url, says) in [
        ("127.0.0.1:1", "no scheme"),
        ("http://127.0.0.1:1", "redis-sentinel"),
        (
            "redis-cluster://127.0.0.1:1?node=127.0.0.1",
            "node=host:port",
        ),
        ("redis-sentinel://127.0.0.1:1", "sentinelServiceName=NAME"),
        (
            "redis-cluster://127.0.0.1:1?sentinelServiceName=main",
            "redis-sentinel://",
        ),
    ] {
        match RedisStore::connect_any(url).await {
            Err(ConnectError::InvalidUrl { reason }) => {
                assert!(reason.contains(says), "{url}: {reason}");
            }
            other => panic!("{url}: expected an invalid URL, got {other:?}"),
        }
    }

    // `connect`, which opens one server, sends a cluster's or a sentinel's URL to
    // `connect_any`.
    for url in [
        "redis-cluster://127.0.0.1:1",
        "redis-sentinel://127.0.0.1:1?sentinelServiceName=main",
    ] {
        let error = RedisStore::connect(url).await.expect_err(url).to_string();
        assert!(error.contains("connect_any"), "{url}: {error}");
    }
}
