//! A Redis Cluster of three primaries with one replica each, made of [`RedisServer`]s: plain,
//! or speaking TLS only.

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use crate::server::RedisServer;
use crate::tls::TestCa;

/// How long the cluster may take to agree on its slots.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// Six cluster nodes: three primaries, three replicas.
pub struct Cluster {
    nodes: Vec<RedisServer>,
    /// The CA's certificate (PEM) when the nodes speak TLS only.
    tls: Option<Vec<u8>>,
}

impl Cluster {
    /// Starts six nodes, joins them with `redis-cli --cluster create`, and waits until every
    /// node reports `cluster_state:ok`.
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..6).map(|_| RedisServer::cluster_node()).collect();
        Self::form(nodes, None)
    }

    /// As [`start`](Self::start), with nodes that speak TLS only, to their clients, to each
    /// other and to their primaries ([`RedisServer::tls_cluster_node`]), with certificates
    /// issued by `ca`, and do not ask clients for theirs. Its [`urls`](Self::urls) are
    /// `rediss://`, its [`fred_url`](Self::fred_url) `rediss-cluster://`.
    pub fn start_tls(ca: &TestCa) -> Self {
        let nodes: Vec<RedisServer> = (0..6).map(|_| RedisServer::tls_cluster_node(ca)).collect();
        Self::form(nodes, Some(ca))
    }

    /// Joins `nodes` with `redis-cli --cluster create` (over TLS, trusting `ca`, when given),
    /// and waits until every node reports `cluster_state:ok`.
    fn form(nodes: Vec<RedisServer>, ca: Option<&TestCa>) -> Self {
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let mut command = Command::new("redis-cli");
        if let Some(ca) = ca {
            command.arg("--tls").arg("--cacert").arg(ca.ca_file());
        }
        let mut child = command
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect(
                "cannot run redis-cli, which makes the test cluster: install it with \
                 `apt-get install redis-server` (it comes with redis-tools)",
            );
        // redis-cli waits for ever for nodes that cannot reach each other's bus.
        let deadline = Instant::now() + FORM_TIMEOUT;
        while child.try_wait().is_ok_and(|status| status.is_none()) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        let timed_out = child.try_wait().is_ok_and(|status| status.is_none());
        if timed_out {
            let _ = child.kill();
        }
        let output = child
            .wait_with_output()
            .expect("cannot read what redis-cli wrote");
        assert!(
            !timed_out && output.status.success(),
            "redis-cli --cluster create failed{}: {}{}",
            if timed_out {
                format!(" to join the nodes in {FORM_TIMEOUT:?}")
            } else {
                String::new()
            },
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = Self {
            nodes,
            tls: ca.map(TestCa::ca_pem),
        };
        cluster.wait_until_formed();
        cluster
    }

    fn wait_until_formed(&self) {
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            let formed = self.nodes.iter().all(|node| {
                let info = self.cluster_info(node.port());
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

    /// A fred URL for the cluster: `redis-cluster://127.0.0.1:P?node=127.0.0.1:Q...`, or
    /// `rediss-cluster://` for a TLS cluster.
    pub fn fred_url(&self) -> String {
        let ports = self.ports();
        let others: Vec<String> = ports[1..]
            .iter()
            .map(|p| format!("node=127.0.0.1:{p}"))
            .collect();
        let scheme = if self.tls.is_some() {
            "rediss-cluster"
        } else {
            "redis-cluster"
        };
        format!("{scheme}://127.0.0.1:{}?{}", ports[0], others.join("&"))
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
        let mut connection = self.connect(self.nodes[0].port());
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

    /// A connection to the node on `port`, over TLS for a TLS cluster.
    fn connect(&self, port: u16) -> redis::Connection {
        match &self.tls {
            None => connect(port),
            Some(ca) => {
                let url = format!("rediss://127.0.0.1:{port}/");
                crate::tls::redis_rs_client(&url, ca.clone())
                    .get_connection_with_timeout(Duration::from_secs(2))
                    .unwrap_or_else(|e| panic!("cannot connect to the cluster node on {port}: {e}"))
            }
        }
    }

    fn cluster_info(&self, port: u16) -> String {
        redis::cmd("CLUSTER")
            .arg("INFO")
            .query::<String>(&mut self.connect(port))
            .unwrap_or_default()
    }
}

fn connect(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .unwrap_or_else(|e| panic!("cannot connect to the cluster node on {port}: {e}"))
}
