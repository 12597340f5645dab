//! One-line constructors: a store on a connection that survives a server restart, a failover or
//! a dropped connection, with settings that suit a counter. The one that reads any URL,
//! `connect_any`, is in `any`.
//!
//! The settings are documented, with their reasons, on `manager_config` and `cluster_builder`.

use std::time::Duration;

#[cfg(feature = "cluster")]
use redis::IntoConnectionInfo;
#[cfg(feature = "connection-manager")]
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
#[cfg(feature = "cluster")]
use redis::cluster::ClusterClientBuilder;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;

use crate::RedisStore;

/// How long a command waits for its reply before the client gives up on it.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one attempt to connect may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);

/// How many commands a multiplexed connection queues before its callers wait: a flush from
/// each of tens of thousands of counters at once.
#[cfg(feature = "connection-manager")]
const PIPELINE_BUFFER: usize = 1 << 16;

#[cfg(feature = "connection-manager")]
impl RedisStore<ConnectionManager> {
    /// Connects to the Redis server at `url` (`redis://host:port/db`, `rediss://` for TLS)
    /// with a `ConnectionManager` that reconnects by itself, set up with
    /// [`manager_config`](Self::manager_config).
    ///
    /// It connects before it returns, and fails, after its reconnection attempts (a few seconds),
    /// when the server cannot be reached, or at once when `url` is not a valid Redis URL. Works on
    /// tokio and smol alike.
    ///
    /// For a URL that may name a cluster (`redis-cluster://`) or a primary behind sentinels
    /// (`redis-sentinel://`) as well, the forms fred reads, use
    /// [`connect_any`](RedisStore::connect_any): it opens whichever the scheme names. This
    /// function refuses those schemes, with an error that says so.
    ///
    /// ```no_run
    /// # #[cfg(feature = "tokio")]
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use comcount_redis_rs::{Counter, RedisStore, clock::TokioTimer};
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1/").await?;
    /// let (counter, worker) = Counter::builder("requests", Duration::from_secs(5))
    ///     .build(store, TokioTimer::new())?;
    /// tokio::spawn(worker);
    /// counter.increment(1);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Counters can share the connection: build each with `store.clone()`. So can the rest of
    /// your code, through [`connection`](Self::connection).
    pub async fn connect(url: &str) -> Result<Self, redis::RedisError> {
        if let Some((scheme, deployment)) = crate::urls::deployment(url)
            && deployment != crate::urls::Deployment::Server
        {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "not the URL of one server",
                format!(
                    "a {scheme}:// URL names a {}: connect with RedisStore::connect_any, which \
                     reads it (feature `{}`)",
                    match deployment {
                        crate::urls::Deployment::Cluster => "Redis Cluster",
                        _ => "primary through sentinels",
                    },
                    deployment.feature()
                ),
            )));
        }
        let client = redis::Client::open(url)?;
        let connection = ConnectionManager::new_with_config(client, Self::manager_config()).await?;
        Ok(Self::new(connection))
    }

    /// The settings [`connect`](Self::connect) uses, to start from when you build a
    /// `ConnectionManager` yourself (from a `redis::ConnectionInfo`, say, or lazily with
    /// `ConnectionManager::new_lazy_with_config`):
    ///
    /// - **Response timeout: 60 s.** The counter has its own timeout for a flush's reply,
    ///   which follows the measured round trip, and sends another copy when it passes; it
    ///   keeps waiting for every copy, so a reply that comes late still settles its flush. A
    ///   client that gives up on a reply first turns that late reply into an error: against a
    ///   store slower than the client's timeout every copy fails, and no flush settles until
    ///   the store is quick again. redis-rs's own default, 500 ms, is shorter than a round trip
    ///   a busy or distant server can take. 60 s is as long as the counter ever waits for one
    ///   copy, and as long as it resends a flush before giving it up (for intervals up to
    ///   200 s), so the client does not give up first, while a request the server never
    ///   answers is still let go of in the end.
    /// - **Connection timeout: 1 s.** Connecting to Redis on the same network takes about a
    ///   millisecond; a second covers a distant or congested one, and a dead address holds a
    ///   flush no longer than that per attempt.
    /// - **Reconnection: up to 6 retries**, after waits of a random time up to 100 ms, then
    ///   200 ms, 400 ms, doubling, never more than 1 s. Once the server is back, so is the
    ///   connection, within about a second. The retries are bounded so that a flush waiting
    ///   for the connection fails, as unanswered, after ten seconds or so instead of waiting
    ///   for as long as the server is away: the counter reports it and sends the flush again,
    ///   which starts the next round of attempts. The manager never gives up for good.
    /// - **Pipeline buffer: 65,536 commands.** Counters aim their flushes at the same moment
    ///   of each interval, so the commands of many counters on one connection come in bursts,
    ///   and once the server falls behind, every counter has a flush in the queue. redis-rs
    ///   queues 50 before a caller waits for room, and each wait costs the waiting counter
    ///   another wake-up and another poll. Room for a flush from each of tens of thousands of
    ///   counters lets a burst in at once; the buffer grows only as far as it is used, and the
    ///   counters themselves keep what they queue bounded (one flush each, and a few copies of
    ///   it at most).
    ///
    /// ```
    /// use std::time::Duration;
    /// use comcount_redis_rs::RedisStore;
    ///
    /// let config = RedisStore::manager_config();
    /// assert_eq!(config.response_timeout(), Some(Duration::from_secs(60)));
    /// assert_eq!(config.number_of_retries(), 6);
    /// ```
    pub fn manager_config() -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
            .set_number_of_retries(6)
            .set_min_delay(Duration::from_millis(100))
            .set_exponent_base(2.0)
            .set_max_delay(Duration::from_secs(1))
            .set_pipeline_buffer_size(PIPELINE_BUFFER)
    }
}

#[cfg(feature = "cluster")]
impl RedisStore<ClusterConnection> {
    /// Connects to the Redis Cluster that `urls` (one or more of its nodes) belong to, with
    /// the client of [`cluster_builder`](Self::cluster_builder). The cluster connection
    /// reconnects to its nodes, and follows the slots through resharding and failover, by
    /// itself.
    ///
    /// ```no_run
    /// # #[cfg(feature = "tokio")]
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use comcount_redis_rs::{Counter, RedisStore, clock::TokioTimer};
    ///
    /// let store =
    ///     RedisStore::connect_cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]).await?;
    /// let (counter, worker) = Counter::builder("requests", Duration::from_secs(5))
    ///     .build(store, TokioTimer::new())?;
    /// tokio::spawn(worker);
    /// counter.increment(1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_cluster<T: IntoConnectionInfo>(
        urls: impl IntoIterator<Item = T>,
    ) -> Result<Self, redis::RedisError> {
        let connection = Self::cluster_builder(urls)
            .build()?
            .get_async_connection()
            .await?;
        Ok(Self::new(connection))
    }

    /// The cluster client [`connect_cluster`](Self::connect_cluster) uses, to add settings of
    /// your own (a password, TLS, ...) before you build it:
    ///
    /// - **Retries**: a command whose node failed, or that the cluster turned away for now
    ///   (`TRYAGAIN`, `CLUSTERDOWN`), is sent again after waits of 10 ms and more, doubling up
    ///   to 500 ms, 8 times at most. redis-rs's default waits at least 1.28 s before the first
    ///   retry, which holds a flush over several short intervals; the counter sends copies of
    ///   an unanswered flush on its own clock anyway, and a flush that fails for now is sent
    ///   again.
    /// - **Response timeout: 60 s; connection timeout: 1 s**, for the reasons given under
    ///   [`manager_config`](RedisStore::manager_config).
    ///
    /// ```no_run
    /// # #[cfg(feature = "tokio")]
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use comcount_redis_rs::RedisStore;
    ///
    /// let client = RedisStore::cluster_builder(["redis://10.0.0.1:7000"])
    ///     .password("secret")
    ///     .build()?;
    /// let store = RedisStore::new(client.get_async_connection().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn cluster_builder<T: IntoConnectionInfo>(
        urls: impl IntoIterator<Item = T>,
    ) -> ClusterClientBuilder {
        redis::cluster::ClusterClient::builder(urls)
            .min_retry_wait(10)
            .max_retry_wait(500)
            .retries(8)
            .response_timeout(RESPONSE_TIMEOUT)
            .connection_timeout(CONNECTION_TIMEOUT)
    }
}

#[cfg(all(test, feature = "connection-manager"))]
mod tests {
    use super::*;

    /// `ConnectionManagerConfig` has no getter for it; its `Debug` shows it. 20,000 counters
    /// on one connection is the largest load of the overload sweep (BENCHMARKS.md).
    #[test]
    fn the_manager_takes_a_burst_of_flushes_without_making_them_wait() {
        let config = format!("{:?}", RedisStore::manager_config());
        let buffer = config
            .split("pipeline_buffer_size: Some(")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .and_then(|n| n.parse::<usize>().ok());
        assert!(
            buffer.is_some_and(|n| n >= 20_000),
            "room for a flush from each of 20,000 counters: {config}"
        );
    }
}
