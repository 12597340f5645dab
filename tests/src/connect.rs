//! Clients for the test servers, in every flavour the stores support.

use std::time::Duration;

use comcount_redis_rs::RedisStore;
use fred::prelude::{Builder, ClientLike, Config, ReconnectPolicy};

use crate::cluster::Cluster;

/// A redis-rs multiplexed connection.
pub async fn multiplexed(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// A redis-rs connection manager, which reconnects by itself.
pub async fn manager(url: &str) -> redis::aio::ConnectionManager {
    redis::Client::open(url)
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// A redis-rs connection manager built with `config`: for the benchmarks, which start from
/// the store's settings (`RedisStore::manager_config`) and keep the response timeout their
/// figures were measured with.
pub async fn manager_with(
    url: &str,
    config: redis::aio::ConnectionManagerConfig,
) -> redis::aio::ConnectionManager {
    redis::Client::open(url)
        .unwrap()
        .get_connection_manager_with_config(config)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// A redis-rs cluster connection, with the store's settings
/// (`RedisStore::connect_cluster`): its retries sleep 10 ms to 500 ms after a node fails, where
/// the client's defaults sleep at least 1.28 s, past several short intervals.
pub async fn cluster(cluster: &Cluster) -> redis::cluster_async::ClusterConnection {
    RedisStore::connect_cluster(cluster.urls())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the cluster: {e}"))
        .connection()
        .clone()
}

fn policy() -> ReconnectPolicy {
    ReconnectPolicy::new_constant(0, 50)
}

/// An initialized fred client, with fred's default command attempts and a reconnect policy.
pub async fn fred_client(url: &str) -> fred::clients::Client {
    let client = Builder::from_config(Config::from_url(url).unwrap())
        .set_policy(policy())
        .build()
        .unwrap();
    client
        .init()
        .await
        .unwrap_or_else(|e| panic!("fred cannot connect to {url}: {e}"));
    client
}

/// An initialized fred pool of `size` clients.
pub async fn fred_pool(url: &str, size: usize) -> fred::clients::Pool {
    let pool = Builder::from_config(Config::from_url(url).unwrap())
        .set_policy(policy())
        .build_pool(size)
        .unwrap();
    pool.init()
        .await
        .unwrap_or_else(|e| panic!("fred pool cannot connect to {url}: {e}"));
    pool
}

/// An initialized clustered fred client.
pub async fn fred_cluster(cluster: &Cluster) -> fred::clients::Client {
    let client = Builder::from_config(Config::from_url(&cluster.fred_url()).unwrap())
        .set_policy(policy())
        .build()
        .unwrap();
    client
        .init()
        .await
        .unwrap_or_else(|e| panic!("fred cannot connect to the cluster: {e}"));
    client
}

/// How long a test waits at most for a server to come back.
pub const RECONNECT_TIMEOUT: Duration = Duration::from_secs(10);
