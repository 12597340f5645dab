//! `comcount inspect`, run as a process against a `redis-server` started here on a free port,
//! after a counter and a family have flushed to it; and its answers to command lines it cannot
//! run. The tests need `redis-server` on the `PATH` and fail without it.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use comcount_redis_rs::clock::TokioTimer;
use comcount_redis_rs::keys::partition_of;
use comcount_redis_rs::{Counter, Family, ParticipantId, RedisStore};

/// A `redis-server` of this test's own, killed when dropped.
struct Server {
    port: u16,
    process: Child,
}

impl Server {
    fn start() -> Self {
        let port = free_port();
        let process = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run redis-server ({e}): these tests start their own, so it must be \
                     on the PATH (apt-get install redis-server)"
                )
            });
        let mut server = Self { port, process };
        let deadline = Instant::now() + Duration::from_secs(15);
        while !server.answers() {
            if let Ok(Some(status)) = server.process.try_wait() {
                panic!("redis-server on port {port} exited with {status}");
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {port} never answered"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn answers(&mut self) -> bool {
        let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) else {
            return false;
        };
        let mut reply = [0; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A loopback port that nothing listened on a moment ago.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// The interval the counters flush at: `TEST_INTERVAL` ms, 300 by default, as in the
/// workspace's other tests.
fn interval() -> Duration {
    let ms = std::env::var("TEST_INTERVAL")
        .ok()
        .and_then(|ms| ms.trim().parse().ok())
        .unwrap_or(300);
    Duration::from_millis(ms)
}

/// Runs `comcount` with `args`, without `REDIS_URL`.
fn comcount(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_comcount"))
        .args(args)
        .env_remove("REDIS_URL")
        .output()
        .expect("comcount runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("UTF-8")
}

/// `comcount inspect` on `url`, with the test's interval and `args`; it must succeed.
fn inspect(url: &str, args: &[&str]) -> String {
    let interval_ms = interval().as_millis().to_string();
    let mut line = vec!["inspect", "--url", url, "--interval-ms", &interval_ms];
    line.extend(args);
    let output = comcount(&line);
    assert!(output.status.success(), "{line:?}: {}", stderr(&output));
    stdout(&output)
}

/// The rows of the first table after the line that starts with `title`, as cells: the table's
/// header first.
fn table<'a>(text: &'a str, title: &str) -> Vec<Vec<&'a str>> {
    text.lines()
        .skip_while(|line| !line.starts_with(title))
        .skip(1)
        .skip_while(|line| line.is_empty())
        .take_while(|line| !line.is_empty())
        .map(|line| line.split_whitespace().collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_prints_a_counters_totals_and_its_participants_fences() {
    let server = Server::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    for (id, amount) in [(0xa1, 40), (0xb2, 2)] {
        let (counter, worker) = Counter::builder("requests", interval())
            .prefix("cli:")
            .participant(ParticipantId::from_u64(id))
            .build(store.clone(), TokioTimer::new())
            .unwrap();
        tokio::spawn(worker);
        counter.increment(amount);
        assert_eq!(counter.drain(Duration::from_secs(10)).await, 0);
    }

    let printed = inspect(&server.url(), &["--prefix", "cli:", "counter", "requests"]);
    let interval_ms = interval().as_millis();
    assert!(
        printed.starts_with(&format!(
            "counter requests: keys cli:{{requests}}:N, interval {interval_ms} ms\n"
        )),
        "{printed}"
    );
    // Three intervals, the newest open; the fences' intervals hold what their participants
    // sent, 42 in all.
    let totals = table(&printed, "server time");
    assert_eq!(totals[0], ["interval", "state", "total"], "{printed}");
    let rows = &totals[1..];
    assert_eq!(rows.len(), 3, "{printed}");
    assert_eq!(rows[0][1], "open", "{printed}");
    assert!(rows[1..].iter().all(|row| row[1] == "closed"), "{printed}");
    let total = |interval: &str| {
        let row = rows.iter().find(|row| row[0] == interval);
        row.and_then(|row| row[2].parse::<u64>().ok()).unwrap_or(0)
    };
    let sum: u64 = rows.iter().map(|row| total(row[0])).sum();
    assert_eq!(sum, 42, "{printed}");

    let fences = table(&printed, "2 participants flushed");
    assert_eq!(
        fences[0],
        ["participant", "seq", "interval", "ttl"],
        "{printed}"
    );
    let participants: Vec<&str> = fences[1..].iter().map(|row| row[0]).collect();
    assert_eq!(
        participants,
        ["00000000000000a1", "00000000000000b2"],
        "{printed}"
    );
    for row in &fences[1..] {
        assert!(row[1].parse::<u64>().is_ok_and(|seq| seq > 0), "{printed}");
        assert!(total(row[2]) >= 2, "{printed}");
        assert_eq!(row[4], "s", "{printed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_prints_a_familys_top_keys_in_order_and_one_key() {
    let server = Server::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let (family, worker) = Family::builder("tenants", interval())
        .partitions(3)
        .participant(ParticipantId::from_u64(7))
        .build(store, TokioTimer::new())
        .unwrap();
    tokio::spawn(worker);
    for (key, amount) in [("a", 1), ("b", 7), ("c", 3), ("d", 11), ("e", 4), ("f", 3)] {
        family.increment(key, amount);
    }
    assert_eq!(family.drain(Duration::from_secs(10)).await, 0);

    let printed = inspect(
        &server.url(),
        &["--partitions", "3", "--top", "4", "family", "tenants"],
    );
    assert!(
        printed.starts_with("family tenants: 3 partitions, keys {tenants@0}:N to {tenants@2}:N"),
        "{printed}"
    );
    // The keys counted most first; c before f, of equal totals, by name.
    let top = table(&printed, "top 4 of 6 keys");
    assert_eq!(top[0][..2], ["key", "partition"], "{printed}");
    let ranked: Vec<(&str, &str, &str)> = top[1..]
        .iter()
        .map(|row| (row[0], row[1], *row.last().unwrap()))
        .collect();
    let partition = |key| partition_of(key, 3).to_string();
    assert_eq!(
        ranked,
        [
            ("d", &*partition("d"), "11"),
            ("b", &*partition("b"), "7"),
            ("e", &*partition("e"), "4"),
            ("c", &*partition("c"), "3"),
        ],
        "{printed}"
    );
    let participants = table(&printed, "1 participant flushed");
    assert_eq!(participants[1][0], "0000000000000007", "{printed}");
    let partitions_fenced = [
        partition("a"),
        partition("b"),
        partition("c"),
        partition("d"),
        partition("e"),
        partition("f"),
    ]
    .into_iter()
    .collect::<std::collections::BTreeSet<_>>()
    .len();
    assert_eq!(
        participants[1][1],
        partitions_fenced.to_string(),
        "{printed}"
    );

    let one = inspect(
        &server.url(),
        &["--partitions", "3", "family", "tenants", "b"],
    );
    assert!(
        one.starts_with(&format!(
            "family tenants, key \"b\": partition {} of 3, keys {{tenants@{}}}:N",
            partition("b"),
            partition("b")
        )),
        "{one}"
    );
    let totals = table(&one, "server time");
    let sum: u64 = totals[1..]
        .iter()
        .filter_map(|row| row[2].parse::<u64>().ok())
        .sum();
    assert_eq!(sum, 7, "{one}");
    assert_eq!(
        table(&one, "1 participant flushed")[1][0],
        "0000000000000007"
    );
}

#[test]
fn inspect_says_what_a_command_line_lacks() {
    let missing = comcount(&["inspect", "counter", "requests"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("--interval-ms is missing"),
        "{}",
        stderr(&missing)
    );

    let unknown = comcount(&["inspect", "--interval-ms", "100", "--nope", "counter", "x"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("--nope"), "{}", stderr(&unknown));

    let help = comcount(&["inspect", "--help"]);
    assert!(help.status.success());
    assert!(
        stdout(&help).contains("--interval-ms MS"),
        "{}",
        stdout(&help)
    );
}

#[test]
fn inspect_says_when_redis_cannot_be_read() {
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let unreachable = comcount(&[
        "inspect",
        "--url",
        &url,
        "--interval-ms",
        "100",
        "counter",
        "x",
    ]);
    assert_eq!(unreachable.status.code(), Some(1));
    assert!(
        stderr(&unreachable).contains(&format!("cannot reach Redis at {url}")),
        "{}",
        stderr(&unreachable)
    );

    let bad = comcount(&[
        "inspect",
        "--url",
        "localhost:6379",
        "--interval-ms",
        "100",
        "counter",
        "x",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("is not a Redis URL"),
        "{}",
        stderr(&bad)
    );
}
