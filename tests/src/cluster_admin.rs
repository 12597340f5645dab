//! The test's own commands to Redis servers and cluster nodes: plain admin connections, roles,
//! `CLUSTER NODES`, replicas, slots and the keys in them. For breaking and inspecting a server
//! or a [`Cluster`] from outside the clients under test.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::cluster::Cluster;

/// A plain connection to one server, for the test's own commands, which waits up to 30 s for
/// a reply (a `DEBUG SLEEP` takes its time).
pub async fn admin(port: u16) -> MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(30)));
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the server on {port}: {e}"))
}

/// Sends a command to the server on `port` on a connection of its own, and returns its reply.
pub async fn command<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> redis::RedisResult<T> {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(&mut admin(port).await).await
}

/// Waits until the server on `port` reports `role:ROLE` (`master` or `slave`) and a cluster
/// state of ok, polling every few milliseconds; returns when it did.
pub async fn await_role(port: u16, role: &str, patience: Duration) -> Instant {
    match role_within(port, role, patience).await {
        Some(at) => at,
        None => panic!("the node on {port} did not become a {role} in {patience:?}"),
    }
}

/// As [`await_role`], but says `None` when the node did not take the role in time.
pub async fn role_within(port: u16, role: &str, patience: Duration) -> Option<Instant> {
    let deadline = Instant::now() + patience;
    let wanted = format!("role:{role}");
    loop {
        let replication: String = command(port, &["INFO", "replication"])
            .await
            .unwrap_or_default();
        let cluster: String = command(port, &["CLUSTER", "INFO"])
            .await
            .unwrap_or_default();
        if replication.contains(&wanted) && cluster.contains("cluster_state:ok") {
            return Some(Instant::now());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
pub struct Node {
    /// The node's id.
    pub id: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Whether it is a primary.
    pub primary: bool,
    /// Whether the cluster has marked it failed.
    pub failed: bool,
    /// For a replica, its primary's id.
    pub replica_of: Option<String>,
    /// The slot ranges it owns.
    pub slots: Vec<(u16, u16)>,
}

/// The cluster as the node on `port` sees it.
pub async fn cluster_nodes(port: u16) -> Vec<Node> {
    let text: String = command(port, &["CLUSTER", "NODES"])
        .await
        .unwrap_or_else(|e| panic!("CLUSTER NODES on {port} failed: {e}"));
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let address = fields[1].split('@').next().unwrap();
            let port = address.rsplit(':').next().unwrap().parse().unwrap();
            let flags = fields[2];
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .map(|s| match s.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => (s.parse().unwrap(), s.parse().unwrap()),
                })
                .collect();
            Node {
                id: fields[0].to_owned(),
                port,
                primary: flags.contains("master"),
                failed: flags.contains("fail") && !flags.contains("fail?"),
                replica_of: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            }
        })
        .collect()
}

/// The port of a replica of the primary on `primary` that is in sync with it, asking every
/// node for its own role (other nodes learn of replicas by gossip, some time after the cluster
/// is formed).
pub async fn replica_of(cluster: &Cluster, primary: u16) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let master = format!("master_port:{primary}\r\n");
    loop {
        for port in cluster.ports() {
            let info: String = command(port, &["INFO", "replication"])
                .await
                .unwrap_or_default();
            if info.contains("role:slave")
                && info.contains(&master)
                && info.contains("master_link_status:up")
            {
                return port;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the primary on {primary} has no replica in sync"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The primaries that own slots, as the node on `port` sees them.
pub async fn primaries(port: u16) -> Vec<Node> {
    cluster_nodes(port)
        .await
        .into_iter()
        .filter(|n| n.primary && !n.slots.is_empty())
        .collect()
}

/// The slot of `key`, asked of the node on `port`.
pub async fn slot_of(port: u16, key: &str) -> u16 {
    command(port, &["CLUSTER", "KEYSLOT", key]).await.unwrap()
}

/// The keys the node on `port` holds in `slot`, whether or not it owns the slot.
pub async fn keys_in_slot(port: u16, slot: u16) -> Vec<String> {
    command(
        port,
        &["CLUSTER", "GETKEYSINSLOT", &slot.to_string(), "1000"],
    )
    .await
    .unwrap()
}
