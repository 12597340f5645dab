//! A Redis Cluster of three primaries with one replica each, made of [`RedisServer`]s.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use crate::server::RedisServer;

/// How long the cluster may take to agree on its slots.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// Six cluster nodes: three primaries, three replicas.
pub struct Cluster {
    nodes: Vec<RedisServer>,
}

impl Cluster {
    /// Starts six nodes, joins them with `redis-cli --cluster create`, and waits until every
    /// node reports `cluster_state:ok`.
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..6).map(|_| RedisServer::cluster_node()).collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect(
                "cannot run redis-cli, which makes the test cluster: install it with \
                 `apt-get install redis-server` (it comes with redis-tools)",
            );
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = Self { nodes };
        cluster.wait_until_formed();
        cluster
    }

    fn wait_until_formed(&self) {
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            let formed = self.nodes.iter().all(|node| {
                let info = cluster_info(node.port());
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && info.contains("cluster_known_nodes:6")
            });
            if formed {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the test cluster did not reach cluster_state:ok in {FORM_TIMEOUT:?}"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The URL of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The ports of every node.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// A fred URL for the cluster: `redis-cluster://127.0.0.1:P?node=127.0.0.1:Q...`.
    pub fn fred_url(&self) -> String {
        let ports = self.ports();
        let others: Vec<String> = ports[1..]
            .iter()
            .map(|p| format!("node=127.0.0.1:{p}"))
            .collect();
        format!(
            "redis-cluster://127.0.0.1:{}?{}",
            ports[0],
            others.join("&")
        )
    }

    /// Kills the node on `port` with SIGKILL ([`RedisServer::kill`]); it stays down.
    pub fn kill_node(&mut self, port: u16) {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node of the cluster listens on {port}"))
            .kill();
    }

    /// The port of the primary that holds `key`'s slot.
    pub fn primary_of(&self, key: &str) -> u16 {
        let mut connection = connect(self.nodes[0].port());
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut connection)
            .expect("CLUSTER KEYSLOT failed");
        let slots: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut connection)
            .expect("CLUSTER SLOTS failed");
        let Value::Array(ranges) = slots else {
            panic!("CLUSTER SLOTS gave {slots:?}");
        };
        for range in ranges {
            let Value::Array(fields) = range else {
                continue;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                continue;
            };
            if (*start..=*end).contains(&slot)
                && let Some(Value::Int(port)) = primary.get(1)
            {
                return u16::try_from(*port).expect("a port");
            }
        }
        panic!("no primary holds slot {slot}");
    }
}

fn connect(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .unwrap_or_else(|e| panic!("cannot connect to the cluster node on {port}: {e}"))
}

fn cluster_info(port: u16) -> String {
    redis::cmd("CLUSTER")
        .arg("INFO")
        .query::<String>(&mut connect(port))
        .unwrap_or_default()
}
