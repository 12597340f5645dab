//! One URL for any deployment: [`RedisStore::connect_any`] reads the URL's scheme, fred's
//! forms, and opens the connection it names.

use std::fmt;

use redis::aio::ConnectionLike;
#[cfg(feature = "connection-manager")]
use redis::aio::ConnectionManager;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::RedisStore;
#[cfg(feature = "sentinel")]
use crate::SentinelConnection;
use crate::urls::{self, ConnectError, Target};

/// The connection [`RedisStore::connect_any`] opens: the one its URL names.
///
/// Each reconnects by itself. Clones are handles on the same connection; the rest of your code
/// can send its own commands over one, `store.connection().clone()`.
#[derive(Clone)]
#[non_exhaustive]
pub enum AnyConnection {
    /// One server (`redis://`, `rediss://`, `redis+unix://`), through the `ConnectionManager`
    /// that [`RedisStore::connect`] opens.
    #[cfg(feature = "connection-manager")]
    Server(ConnectionManager),
    /// A Redis Cluster (`redis-cluster://`, `rediss-cluster://`), through the cluster
    /// connection that [`RedisStore::connect_cluster`] opens.
    #[cfg(feature = "cluster")]
    Cluster(ClusterConnection),
    /// The primary that sentinels name (`redis-sentinel://`, `rediss-sentinel://`).
    #[cfg(feature = "sentinel")]
    Sentinel(SentinelConnection),
}

impl AnyConnection {
    /// Whether the connection may send a command more than once on its own: the cluster
    /// connection's retries.
    pub(crate) fn resends_unseen(&self) -> bool {
        match self {
            #[cfg(feature = "cluster")]
            AnyConnection::Cluster(_) => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }
}

impl RedisStore<AnyConnection> {
    /// Connects to whatever `url` names, one server, a Redis Cluster or the primary that
    /// sentinels name, with a connection that reconnects by itself. The URL forms are fred's
    /// (`Config::from_url`), so one URL serves both crates:
    ///
    /// | URL | connects to | feature |
    /// | --- | --- | --- |
    /// | `redis://[[user]:password@]host[:port][/db][?protocol=resp3]` | one server, as [`connect`](RedisStore::connect) | `connection-manager` (default) |
    /// | `rediss://...` | the same over TLS (`#insecure` at the end skips the certificate check) | `tokio-rustls` or `smol-rustls` too |
    /// | `redis+unix:///path/to/redis.sock[?db=N&user=U&pass=P]` | one server over a Unix socket (redis-rs's form) | `connection-manager` |
    /// | `redis-cluster://[[user]:password@]host[:port][?node=host:port&node=...]` | a cluster: the host and each `node` are seed nodes, as [`connect_cluster`](RedisStore::connect_cluster) | `cluster` |
    /// | `redis-sentinel://[[user]:password@]host[:port][/db]?sentinelServiceName=NAME[&node=host:port...]` | the primary that the sentinels at the host (port 26379 by default) and at each `node` name for `NAME`: a [`SentinelConnection`] | `sentinel` |
    ///
    /// `rediss-cluster://` and `rediss-sentinel://` speak TLS to every node; `valkey`
    /// stands for `redis` in any scheme. The URL's credentials, database and parameters
    /// redis-rs reads (`protocol=resp3`) apply to every node of a cluster, and to the
    /// primary behind sentinels. The sentinels get the same credentials, unless the URL gives
    /// theirs as `sentinelUsername=` and `sentinelPassword=` (an empty one: none).
    ///
    /// It reads the whole URL before it connects, and fails at once with
    /// [`ConnectError::InvalidUrl`] when the URL is none of these, with
    /// [`ConnectError::FeatureDisabled`] when the scheme needs a feature this build leaves
    /// out, and with [`ConnectError::Redis`] when it cannot connect, after the connection's
    /// own attempts (a few seconds). Works on tokio and smol alike.
    ///
    /// ```no_run
    /// # #[cfg(feature = "tokio")]
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use comcount_redis_rs::{Counter, RedisStore, clock::TokioTimer};
    ///
    /// // From the configuration: a server, a cluster or a primary behind sentinels.
    /// let url = std::env::var("REDIS_URL")?;
    /// let store = RedisStore::connect_any(&url).await?;
    /// let (counter, worker) = Counter::builder("requests", Duration::from_secs(5))
    ///     .build(store, TokioTimer::new())?;
    /// tokio::spawn(worker);
    /// counter.increment(1);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A URL is read without a server, so a wrong one is found at once:
    ///
    /// ```
    /// # #[cfg(feature = "tokio")]
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// use comcount_redis_rs::{ConnectError, RedisStore};
    ///
    /// let missing = RedisStore::connect_any("redis-sentinel://10.0.0.1:26379").await;
    /// assert!(matches!(missing, Err(ConnectError::InvalidUrl { .. })));
    /// let unknown = RedisStore::connect_any("http://10.0.0.1:6379").await;
    /// assert!(matches!(unknown, Err(ConnectError::InvalidUrl { .. })));
    /// # });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub async fn connect_any(url: &str) -> Result<Self, ConnectError> {
        let connection = match urls::parse(url, urls::built)? {
            #[cfg(feature = "connection-manager")]
            Target::Server(info) => {
                let client = redis::Client::open(info).map_err(ConnectError::Redis)?;
                let config = RedisStore::<ConnectionManager>::manager_config();
                let manager = ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(ConnectError::Redis)?;
                AnyConnection::Server(manager)
            }
            #[cfg(feature = "cluster")]
            Target::Cluster(nodes) => {
                let connection = RedisStore::<ClusterConnection>::cluster_builder(nodes)
                    .build()
                    .map_err(ConnectError::Redis)?
                    .get_async_connection()
                    .await
                    .map_err(ConnectError::Redis)?;
                AnyConnection::Cluster(connection)
            }
            #[cfg(feature = "sentinel")]
            Target::Sentinel(target) => AnyConnection::Sentinel(
                SentinelConnection::connect(target)
                    .await
                    .map_err(ConnectError::Redis)?,
            ),
            // `parse` refuses the deployments this build leaves out.
            #[allow(unreachable_patterns)]
            other => {
                let deployment = match other {
                    Target::Server(_) => urls::Deployment::Server,
                    Target::Cluster(_) => urls::Deployment::Cluster,
                    Target::Sentinel(_) => urls::Deployment::Sentinel,
                };
                return Err(ConnectError::FeatureDisabled {
                    scheme: url.split_once("://").map_or("", |(s, _)| s).to_owned(),
                    feature: deployment.feature(),
                });
            }
        };
        Ok(Self::new(connection))
    }
}

impl ConnectionLike for AnyConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            #[cfg(feature = "connection-manager")]
            AnyConnection::Server(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            AnyConnection::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(feature = "sentinel")]
            AnyConnection::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            #[cfg(feature = "connection-manager")]
            AnyConnection::Server(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            AnyConnection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "sentinel")]
            AnyConnection::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            #[cfg(feature = "connection-manager")]
            AnyConnection::Server(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            AnyConnection::Cluster(c) => c.get_db(),
            #[cfg(feature = "sentinel")]
            AnyConnection::Sentinel(c) => c.get_db(),
        }
    }
}

impl fmt::Debug for AnyConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(feature = "connection-manager")]
            AnyConnection::Server(_) => f.write_str("AnyConnection::Server"),
            #[cfg(feature = "cluster")]
            AnyConnection::Cluster(_) => f.write_str("AnyConnection::Cluster"),
            #[cfg(feature = "sentinel")]
            AnyConnection::Sentinel(c) => {
                f.debug_tuple("AnyConnection::Sentinel").field(c).finish()
            }
        }
    }
}
