//! Every store passes the same suite: the public conformance checks of
//! `comcount_core::testing::conformance`, then the keys a counter and families write, read
//! from outside. MemoryStore, redis-rs and fred, standalone and cluster; and a cluster spreads
//! a family's partitions over its slots.

use comcount_core::MemoryStore;
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::conformance::check_store;
use comcount_tests::conformance::family::check_partitions_spread;
use comcount_tests::inspect::{MemoryInspector, RedisInspector};
use comcount_tests::{connect, shared};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store() {
    let store = MemoryStore::new();
    check_store(&store, &MemoryInspector(store.clone())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_multiplexed_connection() {
    let url = shared::standalone_url();
    let store = RedisStore::new(connect::multiplexed(&url).await);
    check_store(&store, &RedisInspector(connect::multiplexed(&url).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_connection_manager() {
    let url = shared::standalone_url();
    let store = RedisStore::new(connect::manager(&url).await);
    check_store(&store, &RedisInspector(connect::multiplexed(&url).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_cluster() {
    let cluster = shared::cluster();
    let store = RedisStore::new(connect::cluster(cluster).await);
    check_store(&store, &RedisInspector(connect::cluster(cluster).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_rs_cluster_spreads_a_familys_partitions() {
    let cluster = shared::cluster();
    let store = RedisStore::new(connect::cluster(cluster).await);
    check_partitions_spread(&store, &connect::cluster(cluster).await, cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fred_cluster_spreads_a_familys_partitions() {
    let cluster = shared::cluster();
    let store = FredStore::new(connect::fred_cluster(cluster).await);
    check_partitions_spread(&store, &connect::cluster(cluster).await, cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fred_client() {
    let url = shared::standalone_url();
    let store = FredStore::new(connect::fred_client(&url).await);
    check_store(&store, &RedisInspector(connect::multiplexed(&url).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fred_pool() {
    let url = shared::standalone_url();
    let store = FredStore::new(connect::fred_pool(&url, 3).await);
    check_store(&store, &RedisInspector(connect::multiplexed(&url).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fred_cluster() {
    let cluster = shared::cluster();
    let store = FredStore::new(connect::fred_cluster(cluster).await);
    check_store(&store, &RedisInspector(connect::cluster(cluster).await)).await;
}

#[test]
fn redis_rs_multiplexed_connection_on_smol() {
    // Outside a tokio runtime, redis-rs (built with both runtimes) runs on smol.
    smol::block_on(async {
        let url = shared::standalone_url();
        let store = RedisStore::new(connect::multiplexed(&url).await);
        check_store(&store, &RedisInspector(connect::multiplexed(&url).await)).await;
    });
}
