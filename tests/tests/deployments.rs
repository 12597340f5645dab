//! The deployments the README's table calls supported, each against servers the test starts:
//! TLS (`rediss://`, a throwaway CA trusted through the client's TLS configuration), RESP3,
//! Sentinel (a primary, a replica and a sentinel; for fred, counting on after the primary dies
//! and the sentinel promotes the replica), and a Redis Cluster behind TLS (six nodes that speak
//! TLS only, to their clients, to each other and to their primaries). Each runs two
//! participants of one counter, one of which adds nothing and must learn the other's amount
//! from a flush reply, and TLS and RESP3 run the whole conformance suite too (the plain cluster
//! runs it in `conformance.rs`). On the TLS cluster, two participants of a family count too,
//! its partitions spread over several primaries.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use comcount_core::clock::{SmolTimer, Timer, TokioTimer};
use comcount_core::diagnostics::Recorder;
use comcount_core::keys::partition_of;
use comcount_core::{Counter, Family, KeySpace, Store, Worker};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::cluster::Cluster;
use comcount_tests::conformance::check_store;
use comcount_tests::connect;
use comcount_tests::inspect::{Inspector, RedisInspector};
use comcount_tests::sentinel::{Sentinel, patience};
use comcount_tests::server::RedisServer;
use comcount_tests::settings::{self, sleep};
use comcount_tests::tls::TestCa;
use fred::prelude::{Builder, ClientLike, Config, ReconnectPolicy, ServerConfig};
use fred::types::RespVersion;
use fred::types::config::TlsConnector;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};

/// Two participants of one counter `deploy` under a fresh prefix.
struct Pair {
    prefix: String,
    a: Counter,
    b: Counter,
    a_events: Recorder,
    b_events: Recorder,
}

impl Pair {
    /// Builds the pair on `a` and `b`, handing each worker to `spawn`.
    fn new<S: Store, T: Timer>(a: S, b: S, timer: T, spawn: impl Fn(Worker)) -> Self {
        let prefix = settings::unique_prefix("deploy");
        let build = |store: S, events: &Recorder| {
            let (counter, worker) = Counter::builder("deploy", settings::interval())
                .prefix(&prefix)
                .diagnostics(events.clone())
                .build(store, timer.clone())
                .unwrap();
            spawn(worker);
            counter
        };
        let (a_events, b_events) = (Recorder::new(), Recorder::new());
        Self {
            a: build(a, &a_events),
            b: build(b, &b_events),
            prefix,
            a_events,
            b_events,
        }
    }

    /// `a` adds `amount`; `b`, which adds nothing, must come to answer the total `a` reached,
    /// which only a flush reply, decoded, can tell it. Checks the interval's key through
    /// `inspector`, and that `a` reported no failed flush. Returns the interval the amount
    /// went into.
    async fn count(&self, amount: u64, total: u64, inspector: &impl Inspector) -> u64 {
        let completed_before = self.completed(amount).len();
        assert_eq!(self.a.increment(amount), amount);
        self.b.increment(0);
        let deadline = Instant::now() + patience();
        loop {
            if self.b.increment(0) == total && self.completed(amount).len() > completed_before {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "b never answered {total}: a's events {:?}, b's events {:?}",
                self.a_events.records(),
                self.b_events.records()
            );
            sleep(settings::interval() / 4).await;
        }
        let n = self.completed(amount)[completed_before]
            .attribute("interval")
            .unwrap()
            .parse::<u64>()
            .unwrap();
        let key = format!("{}{{deploy}}:{n}", self.prefix);
        let stored = inspector.key(&key).await.map(|k| k.value);
        assert_eq!(stored.as_deref(), Some(total.to_string().as_str()), "{key}");
        n
    }

    /// `a`'s completed flushes of `amount`.
    fn completed(&self, amount: u64) -> Vec<comcount_core::diagnostics::Record> {
        let amount = amount.to_string();
        self.a_events
            .with_message("flush completed")
            .into_iter()
            .filter(|r| r.attribute("amount") == Some(amount.as_str()))
            .collect()
    }

    /// Whether either participant loaded the script.
    fn loaded_the_script(&self) -> bool {
        !self.a_events.with_message("script loaded").is_empty()
            || !self.b_events.with_message("script loaded").is_empty()
    }

    fn close(&self) {
        self.a.close();
        self.b.close();
    }
}

fn on_tokio(worker: Worker) {
    tokio::spawn(worker);
}

/// Counts with two participants, on a server that has never seen the script, through stores
/// `make` connects; then runs the conformance suite on one more.
async fn count_and_conform<S, F>(make: impl Fn() -> F, inspector: &impl Inspector)
where
    S: Store,
    F: Future<Output = S>,
{
    let pair = Pair::new(make().await, make().await, TokioTimer::new(), on_tokio);
    pair.count(100, 100, inspector).await;
    assert!(pair.loaded_the_script(), "the script was never loaded");
    pair.close();
    check_store(&make().await, inspector).await;
}

/// Fails unless some client of the server at `url` speaks RESP3 (`resp=3` in `CLIENT LIST`).
async fn assert_a_client_speaks_resp3(url: &str) {
    let mut admin = connect::multiplexed(url).await;
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(
        clients
            .lines()
            .any(|line| line.split_whitespace().any(|field| field == "resp=3")),
        "no client speaks RESP3: {clients}"
    );
}

fn fred_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_constant(0, 50)
}

async fn fred_init(config: Config) -> fred::clients::Client {
    let client = Builder::from_config(config)
        .set_policy(fred_policy())
        .build()
        .unwrap();
    client
        .init()
        .await
        .unwrap_or_else(|e| panic!("fred cannot connect: {e}"));
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_redis_rs() {
    let ca = TestCa::generate();
    let server = RedisServer::tls(&ca);
    let client = &ca.redis_rs_client(&server.url());
    let inspector = RedisInspector(client.get_multiplexed_async_connection().await.unwrap());
    count_and_conform(
        move || async move {
            RedisStore::new(
                client
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap_or_else(|e| panic!("cannot connect over TLS: {e}")),
            )
        },
        &inspector,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_redis_rs_connection_manager() {
    let ca = TestCa::generate();
    let server = RedisServer::tls(&ca);
    let client = &ca.redis_rs_client(&server.url());
    let inspector = RedisInspector(client.get_multiplexed_async_connection().await.unwrap());
    let make =
        move || async move { RedisStore::new(client.get_connection_manager().await.unwrap()) };
    let pair = Pair::new(make().await, make().await, TokioTimer::new(), on_tokio);
    pair.count(100, 100, &inspector).await;
    pair.close();
}

#[test]
fn tls_redis_rs_on_smol() {
    smol::block_on(async {
        let ca = TestCa::generate();
        let server = RedisServer::tls(&ca);
        let client = &ca.redis_rs_client(&server.url());
        let inspector = RedisInspector(client.get_multiplexed_async_connection().await.unwrap());
        let make = move || async move {
            RedisStore::new(client.get_multiplexed_async_connection().await.unwrap())
        };
        let pair = Pair::new(make().await, make().await, SmolTimer::new(), |worker| {
            smol::spawn(worker).detach()
        });
        pair.count(100, 100, &inspector).await;
        pair.close();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_fred() {
    let ca = TestCa::generate();
    let server = RedisServer::tls(&ca);
    let inspector = RedisInspector(
        ca.redis_rs_client(&server.url())
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
    );
    let (url, ca) = (&server.url(), &ca);
    count_and_conform(
        move || async move {
            let mut config = Config::from_url(url).unwrap();
            config.tls = Some(fred::types::config::TlsConnector::from(ca.rustls_config()).into());
            FredStore::new(fred_init(config).await)
        },
        &inspector,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_redis_rs() {
    let server = RedisServer::standalone();
    let url = &format!("{}?protocol=resp3", server.url());
    let inspector = RedisInspector(connect::multiplexed(&server.url()).await);
    let make = move || async move { RedisStore::new(connect::multiplexed(url).await) };
    let probe = make().await;
    assert_a_client_speaks_resp3(&server.url()).await;
    drop(probe);
    count_and_conform(make, &inspector).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_fred() {
    let server = RedisServer::standalone();
    let inspector = RedisInspector(connect::multiplexed(&server.url()).await);
    let url = &server.url();
    let make = move || async move {
        let mut config = Config::from_url(url).unwrap();
        config.version = RespVersion::RESP3;
        FredStore::new(fred_init(config).await)
    };
    let probe = make().await;
    assert_a_client_speaks_resp3(url).await;
    drop(probe);
    count_and_conform(make, &inspector).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_redis_rs() {
    let setup = Sentinel::start().await;
    let sentinel_url = &setup.sentinel.url();
    let make = move || async move {
        let mut client = SentinelClient::build(
            vec![sentinel_url.as_str()],
            "main",
            None,
            SentinelServerType::Master,
        )
        .unwrap();
        RedisStore::new(
            client
                .get_async_connection()
                .await
                .unwrap_or_else(|e| panic!("no primary through the sentinel: {e}")),
        )
    };
    let pair = Pair::new(make().await, make().await, TokioTimer::new(), on_tokio);
    let inspector = RedisInspector(connect::multiplexed(&setup.primary.url()).await);
    pair.count(100, 100, &inspector).await;
    pair.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_fred_counts_on_after_a_failover() {
    let mut setup = Sentinel::start().await;
    let config = Config {
        server: ServerConfig::new_sentinel(vec![("127.0.0.1", setup.sentinel.port())], "main"),
        ..Config::default()
    };
    let pair = Pair::new(
        FredStore::new(fred_init(config.clone()).await),
        FredStore::new(fred_init(config).await),
        TokioTimer::new(),
        on_tokio,
    );
    let inspector = RedisInspector(connect::multiplexed(&setup.primary.url()).await);
    pair.count(100, 100, &inspector).await;

    // The primary dies; the sentinel promotes the replica.
    setup.primary.kill();
    let promoted = setup.replica.port();
    let deadline = Instant::now() + patience();
    while setup.primary_port().await != promoted {
        assert!(
            Instant::now() < deadline,
            "the sentinel never promoted the replica"
        );
        sleep(Duration::from_millis(100)).await;
    }
    let inspector = RedisInspector(connect::multiplexed(&setup.replica.url()).await);
    pair.count(7, 7, &inspector).await;
    pair.close();
}

/// A cluster whose nodes speak TLS only, and the authority that issued their certificates,
/// started on first use and shared by this binary's tests (each under prefixes of its own):
/// forming a cluster takes seconds. Checks that every node turns away a client that does not
/// speak TLS, so that a client that counts through the cluster spoke TLS to every node it
/// reached.
fn tls_cluster() -> &'static (TestCa, Cluster) {
    static TLS_CLUSTER: OnceLock<(TestCa, Cluster)> = OnceLock::new();
    TLS_CLUSTER.get_or_init(|| {
        let ca = TestCa::generate();
        let cluster = Cluster::start_tls(&ca);
        for url in cluster.urls() {
            assert!(url.starts_with("rediss://"), "{url}");
        }
        for port in cluster.ports() {
            assert_refuses_plain_clients(port);
        }
        (ca, cluster)
    })
}

/// Fails unless the server on `port` turns away a client that does not speak TLS.
fn assert_refuses_plain_clients(port: u16) {
    let timeout = Some(Duration::from_secs(2));
    let answer = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
        .and_then(|mut connection| {
            connection.set_read_timeout(timeout)?;
            redis::cmd("PING").query::<String>(&mut connection)
        });
    assert!(
        answer.is_err(),
        "the node on {port} answered a client that does not speak TLS: {answer:?}"
    );
}

/// The nodes a client of the TLS cluster is given to find it from.
#[derive(Clone, Copy)]
enum Seeds {
    /// Every node.
    Every,
    /// The first node alone, as a deployment with a single endpoint gives: the client finds
    /// the others, and which slots each holds, from it.
    One,
}

/// A redis-rs cluster connection to the TLS cluster, with the store's settings
/// (`RedisStore::cluster_builder`), trusting its authority.
async fn redis_rs_tls_cluster(
    (ca, cluster): &(TestCa, Cluster),
    seeds: Seeds,
) -> ClusterConnection {
    let mut urls = cluster.urls();
    if let Seeds::One = seeds {
        urls.truncate(1);
    }
    RedisStore::cluster_builder(urls)
        .certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca.ca_pem()),
        })
        .build()
        .unwrap_or_else(|e| panic!("cannot make a TLS cluster client: {e}"))
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the cluster over TLS: {e}"))
}

/// A clustered fred client of the TLS cluster, from its `rediss-cluster://` URL, trusting its
/// authority alone.
async fn fred_tls_cluster(
    (ca, cluster): &(TestCa, Cluster),
    seeds: Seeds,
) -> fred::clients::Client {
    let mut url = cluster.fred_url();
    if let Seeds::One = seeds {
        url.truncate(url.find('?').unwrap());
    }
    assert!(url.starts_with("rediss-cluster://"), "{url}");
    let mut config = Config::from_url(&url).unwrap();
    assert!(
        matches!(config.server, ServerConfig::Clustered { .. }),
        "{:?}",
        config.server
    );
    config.tls = Some(TlsConnector::from(ca.rustls_config()).into());
    fred_init(config).await
}

/// How many partitions the families on the TLS cluster have: enough for a dozen keys to fall
/// on every primary.
const PARTITIONS: u32 = 8;

/// Two participants of a family of [`PARTITIONS`] partitions, on `a` and `b`: `a` adds to a
/// dozen keys, and `b`, which adds nothing, must come to answer each key's total, which only
/// flush replies (one a partition) tell it. Checks each key's total in its partition's hash,
/// read through `inspector`, and that the partitions written are on more than one primary of
/// `cluster`.
async fn count_a_family<S: Store>(a: S, b: S, cluster: &Cluster, inspector: &impl Inspector) {
    const NAME: &str = "tenants";
    let prefix = settings::unique_prefix("deploy-family");
    let build = |store: S, events: &Recorder| {
        let (family, worker) = Family::builder(NAME, settings::interval())
            .prefix(&prefix)
            .partitions(PARTITIONS)
            .diagnostics(events.clone())
            .build(store, TokioTimer::new())
            .unwrap();
        tokio::spawn(worker);
        family
    };
    let (a_events, b_events) = (Recorder::new(), Recorder::new());
    let (a, b) = (build(a, &a_events), build(b, &b_events));
    let amounts: BTreeMap<String, u64> = (1..=12).map(|i| (format!("tenant-{i}"), i)).collect();
    for (key, amount) in &amounts {
        assert_eq!(a.increment(key, *amount), *amount);
        b.increment(key, 0);
    }
    let partitions: BTreeSet<u32> = amounts
        .keys()
        .map(|key| partition_of(key, PARTITIONS))
        .collect();
    // Each key's total is b's answer while the interval after the flush that carried it
    // lasts, and its partition's hash lives three intervals: both are watched from the
    // start, as the partitions' flushes may straddle an interval's end.
    let mut learned = BTreeSet::new();
    let mut stored: BTreeMap<(String, u64), u64> = BTreeMap::new();
    let totals = |stored: &BTreeMap<(String, u64), u64>| {
        let mut totals: BTreeMap<String, u64> = BTreeMap::new();
        for ((key, _), total) in stored {
            *totals.entry(key.clone()).or_default() += total;
        }
        totals
    };
    let deadline = Instant::now() + patience();
    while learned.len() < amounts.len() || totals(&stored) != amounts {
        for (key, amount) in &amounts {
            if b.count(key) == *amount {
                learned.insert(key.clone());
            }
        }
        let intervals: BTreeSet<u64> = a_events
            .with_message("flush completed")
            .iter()
            .filter(|r| r.attribute("amount") != Some("0"))
            .map(|r| r.attribute("interval").unwrap().parse::<u64>().unwrap())
            .collect();
        for &partition in &partitions {
            let space = KeySpace::partition(&prefix, NAME, partition);
            for &n in &intervals {
                let Some(state) = inspector.key(&space.interval(n)).await else {
                    continue;
                };
                for (key, total) in state.fields {
                    assert_eq!(
                        partition_of(&key, PARTITIONS),
                        partition,
                        "{key} in {space:?}"
                    );
                    stored.insert((key, n), total.parse::<u64>().unwrap());
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "b learned the totals of {learned:?} only, the partitions' hashes held {:?}: \
             a's events {:?}, b's events {:?}",
            totals(&stored),
            a_events.records(),
            b_events.records()
        );
        sleep(settings::interval() / 4).await;
    }
    let primaries: BTreeSet<u16> = partitions
        .iter()
        .map(|&partition| {
            cluster.primary_of(&KeySpace::partition(&prefix, NAME, partition).interval(0))
        })
        .collect();
    assert!(
        partitions.len() > 1 && primaries.len() > 1,
        "the partitions {partitions:?} are all on the primary {primaries:?}"
    );
    a.close();
    b.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_cluster_redis_rs() {
    let setup = tls_cluster();
    let inspector = RedisInspector(redis_rs_tls_cluster(setup, Seeds::Every).await);
    let make =
        move || async move { RedisStore::new(redis_rs_tls_cluster(setup, Seeds::Every).await) };
    let pair = Pair::new(make().await, make().await, TokioTimer::new(), on_tokio);
    pair.count(100, 100, &inspector).await;
    pair.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_cluster_fred() {
    let setup = tls_cluster();
    let inspector = RedisInspector(redis_rs_tls_cluster(setup, Seeds::Every).await);
    let make = move || async move { FredStore::new(fred_tls_cluster(setup, Seeds::Every).await) };
    let pair = Pair::new(make().await, make().await, TokioTimer::new(), on_tokio);
    pair.count(100, 100, &inspector).await;
    pair.close();
}

/// The stores find the cluster from one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_cluster_family_redis_rs() {
    let setup = tls_cluster();
    let inspector = RedisInspector(redis_rs_tls_cluster(setup, Seeds::Every).await);
    count_a_family(
        RedisStore::new(redis_rs_tls_cluster(setup, Seeds::One).await),
        RedisStore::new(redis_rs_tls_cluster(setup, Seeds::One).await),
        &setup.1,
        &inspector,
    )
    .await;
}

/// The stores find the cluster from one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_cluster_family_fred() {
    let setup = tls_cluster();
    let inspector = RedisInspector(redis_rs_tls_cluster(setup, Seeds::Every).await);
    count_a_family(
        FredStore::new(fred_tls_cluster(setup, Seeds::One).await),
        FredStore::new(fred_tls_cluster(setup, Seeds::One).await),
        &setup.1,
        &inspector,
    )
    .await;
}
