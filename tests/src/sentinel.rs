//! A Sentinel deployment for the tests: a primary, its replica, and one sentinel watching them
//! as `main`; and the wait the tests poll it with.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::connect;
use crate::server::RedisServer;
use crate::settings::{self, sleep};

/// How long a test waits for something that takes a few intervals on a quiet machine.
pub fn patience() -> Duration {
    settings::interval() * 20 + Duration::from_secs(10)
}

/// Polls `check` until it holds, failing after [`patience`].
pub async fn wait_for<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + patience();
    while !check().await {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        sleep(Duration::from_millis(50)).await;
    }
}

/// A primary, its replica, and one sentinel watching them as `main`.
pub struct Sentinel {
    /// The primary the sentinel starts with.
    pub primary: RedisServer,
    /// Its replica, which a failover promotes.
    pub replica: RedisServer,
    /// The sentinel.
    pub sentinel: RedisServer,
}

impl Sentinel {
    /// Starts the three, and waits until the replica has synced and the sentinel sees it.
    pub async fn start() -> Self {
        let primary = RedisServer::standalone();
        let replica =
            RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
        let admin = connect::multiplexed(&replica.url()).await;
        wait_for("the replica to sync", || {
            let mut admin = admin.clone();
            async move {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                info.contains("master_link_status:up")
            }
        })
        .await;
        let sentinel = RedisServer::sentinel(&format!(
            "sentinel monitor main 127.0.0.1 {} 1\n\
             sentinel down-after-milliseconds main 500\n\
             sentinel failover-timeout main 10000\n",
            primary.port()
        ));
        let setup = Self {
            primary,
            replica,
            sentinel,
        };
        let admin = connect::multiplexed(&setup.sentinel.url()).await;
        wait_for("the sentinel to see the replica", || {
            let mut admin = admin.clone();
            async move {
                let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
                    .arg(&["REPLICAS", "main"])
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                replicas.iter().any(|fields| {
                    fields
                        .windows(2)
                        .any(|w| w[0] == "flags" && w[1] == "slave")
                })
            }
        })
        .await;
        setup
    }

    /// The port of the server the sentinel names as primary.
    pub async fn primary_port(&self) -> u16 {
        let mut admin = connect::multiplexed(&self.sentinel.url()).await;
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg(&["GET-MASTER-ADDR-BY-NAME", "main"])
            .query_async(&mut admin)
            .await
            .unwrap();
        port
    }
}
