//! One `redis-server` process, started for the tests on a free loopback port and stopped when
//! dropped, or by its watchdog when the test process ends.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a server may take to answer its first PING.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A `redis-server` child process with its own data directory.
pub struct RedisServer {
    port: u16,
    extra: Vec<String>,
    /// The CA's certificate (PEM) when the server speaks TLS only.
    tls: Option<Vec<u8>>,
    /// A configuration file to start from (a sentinel's, which it rewrites).
    config: Option<String>,
    dir: TempDir,
    process: Option<Running>,
}

struct Running {
    server: Child,
    watchdog: Child,
}

impl RedisServer {
    /// Starts a standalone server.
    pub fn standalone() -> Self {
        Self::start(Vec::new(), false)
    }

    /// Starts a standalone server with more arguments, `--replicaof 127.0.0.1 PORT` say.
    pub fn start_with(args: &[&str]) -> Self {
        Self::start(args.iter().map(|a| a.to_string()).collect(), false)
    }

    /// Starts a server that speaks TLS only, with the certificate of `ca`, and does not ask
    /// clients for theirs; its [`url`](Self::url) is `rediss://`.
    pub fn tls(ca: &crate::tls::TestCa) -> Self {
        let mut extra = Vec::new();
        for (option, path) in [
            ("--tls-cert-file", ca.cert_file()),
            ("--tls-key-file", ca.key_file()),
            ("--tls-ca-cert-file", ca.ca_file()),
        ] {
            extra.push(option.to_owned());
            extra.push(
                path.to_str()
                    .expect("a non-UTF-8 temporary path")
                    .to_owned(),
            );
        }
        extra.extend(["--tls-auth-clients".to_owned(), "no".to_owned()]);
        Self::launch(extra, false, Some(ca.ca_pem()), None)
    }

    /// Starts a sentinel (`redis-server FILE --sentinel`) from the configuration `config`,
    /// written to a file of its own that the sentinel may rewrite.
    pub fn sentinel(config: &str) -> Self {
        Self::launch(
            vec!["--sentinel".to_owned()],
            false,
            None,
            Some(config.to_owned()),
        )
    }

    /// Starts a server in cluster mode, not yet part of a cluster.
    pub fn cluster_node() -> Self {
        Self::start(
            vec![
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-config-file".into(),
                "nodes.conf".into(),
                "--cluster-node-timeout".into(),
                "5000".into(),
            ],
            true,
        )
    }

    /// Starts a server in cluster mode, not yet part of a cluster, that speaks TLS only: to its
    /// clients, on its cluster bus (`--tls-cluster yes`) and to its primary
    /// (`--tls-replication yes`), with a node certificate of its own issued by `ca`
    /// ([`TestCa::issue_node_certificate`](crate::tls::TestCa::issue_node_certificate)). It does
    /// not ask clients for their certificate; its [`url`](Self::url) is `rediss://`.
    pub fn tls_cluster_node(ca: &crate::tls::TestCa) -> Self {
        let (cert, key) = ca.issue_node_certificate();
        let mut extra = Vec::new();
        for (option, path) in [
            ("--tls-cert-file", cert),
            ("--tls-key-file", key),
            ("--tls-ca-cert-file", ca.ca_file()),
        ] {
            extra.push(option.to_owned());
            extra.push(
                path.to_str()
                    .expect("a non-UTF-8 temporary path")
                    .to_owned(),
            );
        }
        for argument in [
            "--tls-auth-clients",
            "no",
            "--tls-cluster",
            "yes",
            "--tls-replication",
            "yes",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ] {
            extra.push(argument.to_owned());
        }
        Self::launch(extra, true, Some(ca.ca_pem()), None)
    }

    fn start(extra: Vec<String>, cluster_bus: bool) -> Self {
        Self::launch(extra, cluster_bus, None, None)
    }

    fn launch(
        extra: Vec<String>,
        cluster_bus: bool,
        tls: Option<Vec<u8>>,
        config: Option<String>,
    ) -> Self {
        require_redis_server();
        let mut last_error = String::new();
        // Another process may take the port between picking it and the server binding it.
        for _ in 0..5 {
            let port = free_port(cluster_bus);
            let mut server = Self {
                port,
                extra: extra.clone(),
                tls: tls.clone(),
                config: config.clone(),
                dir: tempfile::Builder::new()
                    .prefix("comcount-redis-")
                    .tempdir()
                    .expect("cannot make a temporary directory for redis-server"),
                process: None,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new("redis-server");
        if let Some(config) = &self.config {
            let file = self.dir.path().join("redis.conf");
            if !file.exists() {
                std::fs::write(&file, config)
                    .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            }
            command.arg(file);
        }
        let port = self.port.to_string();
        match self.tls {
            None => command.args(["--port", &port]),
            Some(_) => command.args(["--port", "0", "--tls-port", &port]),
        };
        let mut server = command
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"))
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run redis-server: {e}"))?;
        let watchdog = watchdog(server.id());
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = server.try_wait() {
                let _ = watchdog.map(|mut w| w.kill());
                return Err(format!(
                    "redis-server on port {} exited with {status}; its log: {}",
                    self.port,
                    log_tail(&self.dir.path().join("redis.log"))
                ));
            }
            if ping(&self.url(), self.tls.as_ref()) {
                break;
            }
            if Instant::now() > deadline {
                let _ = server.kill();
                return Err(format!("redis-server on port {} never answered", self.port));
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.process = Some(Running {
            server,
            watchdog: watchdog.map_err(|e| format!("cannot start the watchdog: {e}"))?,
        });
        Ok(())
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// Kills the server and starts it again on the same port, empty: its script cache and keys
    /// are gone, and every client connection is cut.
    pub fn restart(&mut self) {
        self.stop();
        let mut last_error = String::new();
        // The port may linger for a moment after the kill.
        for _ in 0..50 {
            match self.spawn() {
                Ok(()) => return,
                Err(error) => last_error = error,
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("redis-server did not restart: {last_error}");
    }

    /// Kills the server with SIGKILL, as `kill -9` does: no shutdown, no goodbye to its
    /// clients or its cluster. It stays down.
    pub fn kill(&mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(mut running) = self.process.take() {
            let _ = running.server.kill();
            let _ = running.server.wait();
            let _ = running.watchdog.kill();
            let _ = running.watchdog.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A shell that kills the server once this test process is gone, so that servers held in
/// statics, which are never dropped, end with the tests (no `unsafe` needed).
fn watchdog(server: u32) -> std::io::Result<Child> {
    let script = format!(
        "while kill -0 {parent} 2>/dev/null && kill -0 {server} 2>/dev/null; do sleep 0.5; done; \
         kill -9 {server} 2>/dev/null",
        parent = std::process::id(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// Fails loudly, with the way out, when `redis-server` is not installed.
fn require_redis_server() {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "redis-server is not installed, and the Redis tests need it to start their own servers: \
         install it (`apt-get install redis-server`, Redis 7 or later) and run the tests again"
    );
}

/// A port on 127.0.0.1 that was free a moment ago; for a cluster node, its bus port (+10000)
/// too.
fn free_port(cluster_bus: bool) -> u16 {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("cannot bind 127.0.0.1");
        let port = listener.local_addr().expect("no local address").port();
        if !cluster_bus {
            return port;
        }
        if port < 55_000 && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Whether a server answers PING at `url`, trusting the CA `tls` for a `rediss://` one.
fn ping(url: &str, tls: Option<&Vec<u8>>) -> bool {
    let client = match tls {
        None => redis::Client::open(url),
        Some(ca) => Ok(crate::tls::redis_rs_client(url, ca.clone())),
    };
    let Ok(client) = client else {
        return false;
    };
    let Ok(mut connection) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
        return false;
    };
    redis::cmd("PING")
        .query::<String>(&mut connection)
        .is_ok_and(|pong| pong == "PONG")
}

fn log_tail(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// How many times the server on `port` ran the commands named (as `INFO commandstats` names
/// them: `evalsha`, `script|load`), together.
pub fn command_calls(port: u16, commands: &[&str]) -> u64 {
    let mut connection = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut connection)
        .unwrap();
    info.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(command, _)| commands.contains(command))
        .filter_map(|(_, stats)| stats.strip_prefix("calls=")?.split(',').next())
        .map(|calls| calls.parse::<u64>().unwrap())
        .sum()
}
