//! The test's own commands to Redis servers and cluster nodes: plain admin connections, roles,
//! `CLUSTER NODES`, replicas, slots and the keys in them, a slot moved to another primary. For
//! breaking and inspecting a server or a [`Cluster`] from outside the clients under test.

use std::collections::BTreeMap;
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

/// Which node holds each key of `slot`, asked of every primary; panics on a key held by two.
pub async fn where_keys_are(primaries: &[Node], slot: u16) -> BTreeMap<String, u16> {
    let mut held: BTreeMap<String, u16> = BTreeMap::new();
    for node in primaries {
        for key in keys_in_slot(node.port, slot).await {
            if let Some(other) = held.insert(key.clone(), node.port) {
                panic!(
                    "{key} is split across the nodes on {other} and {}",
                    node.port
                );
            }
        }
    }
    held
}

/// A slot [`move_slot`] moved from one primary to another.
#[derive(Debug)]
pub struct SlotMove {
    /// The slot.
    pub slot: u16,
    /// Its owner before.
    pub source: Node,
    /// Its owner after.
    pub target: Node,
    /// The primaries, as they were before.
    pub primaries: Vec<Node>,
    /// How many keys were moved.
    pub moved: usize,
    /// When the slot was open: importing on the target, migrating on the source.
    pub opened: Instant,
    /// When its keys were all on the target, just before the new owner was given to it.
    pub closing: Instant,
    /// When every primary had been told of the new owner.
    pub done: Instant,
}

/// Moves `slot` from its owner to another primary as a resharding does, while clients keep
/// writing to it: the target set importing and the source migrating, the slot's keys moved one
/// at a time with `MIGRATE`, `pace` apart, then the new owner given to the target first, the
/// source next, the other primaries last. `any` is the port of any node.
pub async fn move_slot(any: u16, slot: u16, pace: Duration) -> SlotMove {
    move_slot_held(any, slot, pace, Duration::ZERO).await
}

/// As [`move_slot`], with the slot held open (importing on the target, migrating on the
/// source) for `hold` at least: its keys are moved one at a time, `pace` apart, and the new
/// owner is given only once `hold` is over and the source holds none of them. A slow
/// resharding, say of a slot with many keys, keeps a slot open that long.
pub async fn move_slot_held(any: u16, slot: u16, pace: Duration, hold: Duration) -> SlotMove {
    let primaries = primaries(any).await;
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    let source = primaries
        .iter()
        .find(|n| n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
        .unwrap_or_else(|| panic!("no primary owns slot {slot}: {primaries:?}"))
        .clone();
    let target = primaries
        .iter()
        .find(|n| n.id != source.id)
        .unwrap()
        .clone();
    let slot_arg = slot.to_string();

    let () = command(
        target.port,
        &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &source.id],
    )
    .await
    .unwrap();
    let () = command(
        source.port,
        &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &target.id],
    )
    .await
    .unwrap();
    let opened = Instant::now();
    let mut moved = 0;
    loop {
        let held = where_keys_are(&primaries, slot).await;
        let Some(key) = held
            .iter()
            .find(|(_, port)| **port == source.port)
            .map(|(key, _)| key.clone())
        else {
            if opened.elapsed() >= hold {
                break;
            }
            tokio::time::sleep(pace.min(hold.saturating_sub(opened.elapsed()))).await;
            continue;
        };
        let target_port = target.port.to_string();
        let reply: redis::RedisResult<String> = command(
            source.port,
            &[
                "MIGRATE",
                "127.0.0.1",
                &target_port,
                "",
                "0",
                "5000",
                "KEYS",
                &key,
            ],
        )
        .await;
        let reply = reply.unwrap_or_else(|e| panic!("MIGRATE of {key} failed: {e}"));
        assert!(
            reply == "OK" || reply == "NOKEY",
            "MIGRATE of {key}: {reply}"
        );
        moved += 1;
        assert!(moved < 200, "the slot never emptied");
        tokio::time::sleep(pace).await;
    }
    let closing = Instant::now();
    let mut order = vec![target.clone(), source.clone()];
    order.extend(
        primaries
            .iter()
            .filter(|n| n.id != source.id && n.id != target.id)
            .cloned(),
    );
    for node in &order {
        let () = command(
            node.port,
            &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &target.id],
        )
        .await
        .unwrap();
    }
    SlotMove {
        slot,
        source,
        target,
        primaries,
        moved,
        opened,
        closing,
        done: Instant::now(),
    }
}
