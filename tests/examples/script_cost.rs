//! What the flush script costs Redis, per call and per key: a counter's flush against a family
//! partition's flushes, on a Redis server this example starts. The figures are the server's:
//! the client's build plays no part in them.
//!
//! ```sh
//! cargo run -p comcount-tests --release --example script_cost            # 30 calls a row
//! cargo run -p comcount-tests --release --example script_cost -- 50      # 50 calls a row
//! ```
//!
//! A family's interval key is a hash of family key → total. A flush reads the totals of N-1
//! for its own keys (the reply), reads N's, and writes the new totals with one `HSET`: a run
//! costs a constant and a term per entry, whatever else the hash holds. The rows:
//!
//! - **batches** of 1 to 1000 entries into a **fresh** interval (neither N nor N-1 holds
//!   anything) and into a **full** one (N and N-1 both hold the partition's 1000 keys, the
//!   batch's among them: every flush of a busy interval but the first);
//! - **100 × 1000 distinct keys**: 100 participants flush 1000 keys each of their own into one
//!   partition whose interval before holds all 100,000: while N fills (the 100 first flushes),
//!   and once it holds 100,000 fields too.
//!
//! Figures per row:
//!
//! - **run time**, Redis's own time for one `EVALSHA` (`usec` of `INFO commandstats`, read
//!   before and after each call, sent alone): the script with the commands it calls, without
//!   the network. The least, the median and the most of the row's calls; the least is the one
//!   a busy machine disturbs least, the most counts any time the server was descheduled.
//! - **CPU**, `used_cpu_user + used_cpu_sys` of `INFO cpu` over a pipeline of as many calls,
//!   per call: reading and parsing the arguments included.
//! - **reply**, the reply's length in RESP2 (as sent on the wire), per entry of the flush.

use comcount_core::{Entry, FlushRequest, KeySpace, ParticipantId, script};
use comcount_tests::bench::{info, redis_cpu};
use comcount_tests::server::RedisServer;
use redis::Value;
use redis::aio::MultiplexedConnection;

/// An interval of 1000 days: every call lands in the interval it aims at.
const INTERVAL_MS: u64 = 1000 * 86_400_000;
/// The batch sizes measured.
const SIZES: [usize; 6] = [1, 10, 100, 500, 700, 1000];
/// Counter flushes in one pipeline.
const COUNTER_BATCH: usize = 200;
/// The keys a full interval holds, and the most a flush carries.
const FULL: usize = FlushRequest::MAX_ENTRIES;
/// Participants, and distinct keys of each, in the partition of distinct keys.
const DISTINCT: (usize, usize) = (100, 1000);

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|r| r.parse().expect("ROUNDS is a number"))
        .unwrap_or(30);
    let server = RedisServer::standalone();
    let client = redis::Client::open(server.url()).unwrap();
    // No response timeout: a pipeline of 100 batches of 1000 takes longer than the default.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let stats = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script::SOURCE)
        .query_async(&mut connection)
        .await
        .unwrap();
    let (seconds, _): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut connection)
        .await
        .unwrap();
    let n = seconds * 1000 / INTERVAL_MS;
    let mut bench = Bench {
        sha,
        n,
        connection,
        stats,
        next: 0,
        participant: 0,
    };

    let counter = bench.counter(rounds).await;
    println!("## The flush script's cost on Redis");
    println!();
    println!(
        "{rounds} calls a row, `redis-server` {}.",
        bench.server_info("server", "redis_version").await,
    );
    println!();
    println!(
        "A counter's flush: run time {:.1} µs (least {:.1}), CPU {:.1} µs.",
        counter.median, counter.least, counter.cpu
    );
    println!();
    println!(
        "| partition | entries | run time, least | median | most | CPU per call | µs per key (least) | CPU per key | reply bytes per entry |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for full in [false, true] {
        for size in SIZES {
            let row = bench.batch(size, full, rounds).await;
            let what = if full { "full" } else { "fresh" };
            print_row(what, size, &row);
        }
    }
    let (participants, keys) = DISTINCT;
    let (filling, full) = bench.distinct(participants, keys, rounds).await;
    print_row(
        &format!("{participants} × {keys} distinct keys, N filling"),
        keys,
        &filling,
    );
    print_row(
        &format!("{participants} × {keys} distinct keys, N full"),
        keys,
        &full,
    );
    drop(server);
}

fn print_row(what: &str, entries: usize, row: &Row) {
    println!(
        "| {what} | {entries} | {:.0} µs | {:.0} µs | {:.0} µs | {:.0} µs | {:.2} µs | {:.2} µs | {:.1} |",
        row.least,
        row.median,
        row.most,
        row.cpu,
        row.least / entries as f64,
        row.cpu / entries as f64,
        row.reply_bytes / entries as f64,
    );
}

struct Bench {
    sha: String,
    n: u64,
    connection: MultiplexedConnection,
    stats: MultiplexedConnection,
    /// The next fresh key space's number.
    next: u64,
    /// The last participant's number: each call is a participant's first in the interval.
    participant: u64,
}

/// The figures of one row.
#[derive(Default)]
struct Row {
    least: f64,
    median: f64,
    most: f64,
    cpu: f64,
    /// The mean reply's length in RESP2, in bytes.
    reply_bytes: f64,
}

impl Row {
    fn of(mut times: Vec<f64>, cpu: f64, replies: &[usize]) -> Self {
        Self {
            least: times.iter().copied().fold(f64::INFINITY, f64::min),
            most: times.iter().copied().fold(0.0, f64::max),
            median: median(&mut times),
            cpu,
            reply_bytes: replies.iter().sum::<usize>() as f64 / replies.len().max(1) as f64,
        }
    }
}

impl Bench {
    fn space(&mut self, family: bool) -> KeySpace {
        self.next += 1;
        let prefix = format!("cost:{}:", self.next);
        if family {
            KeySpace::partition(&prefix, "f", 0)
        } else {
            KeySpace::counter(&prefix, "c")
        }
    }

    fn evalsha(&self, request: &FlushRequest) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        let keys = request.keys();
        cmd.arg(&self.sha).arg(keys.len()).arg(&keys[..]);
        cmd.arg(&script::arguments(request)[..]);
        cmd
    }

    /// A new participant's flush into `space`: the amount 3 for a counter, else `keys`.
    fn request(&mut self, space: &KeySpace, keys: Option<Vec<String>>) -> FlushRequest {
        self.participant += 1;
        let participant = ParticipantId::from_u64(self.participant);
        let request =
            FlushRequest::new(space.clone(), participant, INTERVAL_MS).with_expect(self.n);
        match keys {
            None => request.with_amount(3),
            Some(keys) => request.with_entries(
                keys.into_iter()
                    .enumerate()
                    .map(|(i, key)| Entry::new(key, i as u64 % 5 + 1))
                    .collect(),
            ),
        }
    }

    /// Writes `fields` × `total` into interval `n` of `space`, as the script would have.
    async fn fill(&mut self, space: &KeySpace, n: u64, fields: &[String], total: u64) {
        for chunk in fields.chunks(FULL) {
            let mut hset = redis::cmd("HSET");
            hset.arg(space.interval(n));
            for field in chunk {
                hset.arg(field).arg(total);
            }
            let _: () = hset.query_async(&mut self.connection).await.unwrap();
        }
        let _: () = redis::cmd("PEXPIRE")
            .arg(space.interval(n))
            .arg(3_600_000)
            .query_async(&mut self.connection)
            .await
            .unwrap();
    }

    /// `usec` and `calls` of `EVALSHA`.
    async fn evalsha_stats(&mut self) -> (f64, f64) {
        let stats = info(&mut self.stats, "commandstats").await;
        let Some(line) = stats.get("cmdstat_evalsha") else {
            return (0.0, 0.0);
        };
        let field = |name: &str| -> f64 {
            line.split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line}"))
        };
        (field("usec"), field("calls"))
    }

    async fn server_info(&mut self, section: &str, key: &str) -> String {
        info(&mut self.stats, section)
            .await
            .remove(key)
            .unwrap_or_default()
    }

    /// Runs `requests` in one pipeline; each must be applied. Returns the CPU per call.
    async fn pipeline(&mut self, requests: &[FlushRequest]) -> f64 {
        let mut pipe = redis::pipe();
        for request in requests {
            pipe.add_command(self.evalsha(request));
        }
        let before = redis_cpu(&mut self.stats).await;
        let replies: Vec<Value> = pipe.query_async(&mut self.connection).await.unwrap();
        let after = redis_cpu(&mut self.stats).await;
        for reply in &replies {
            assert_applied(reply);
        }
        (after - before) * 1e6 / requests.len() as f64
    }

    /// Runs one request alone; returns Redis's time for it, in µs, and the reply's length.
    async fn alone(&mut self, request: &FlushRequest) -> (f64, usize) {
        let (usec, calls) = self.evalsha_stats().await;
        let reply: Value = self
            .evalsha(request)
            .query_async(&mut self.connection)
            .await
            .unwrap();
        let (usec_after, calls_after) = self.evalsha_stats().await;
        assert_eq!(calls_after - calls, 1.0, "another EVALSHA ran in between");
        assert_applied(&reply);
        (usec_after - usec, resp2_len(&reply))
    }

    async fn counter(&mut self, rounds: usize) -> Row {
        let mut times = Vec::new();
        let mut cpu = Vec::new();
        for _ in 0..rounds {
            let space = self.space(false);
            let requests: Vec<_> = (0..COUNTER_BATCH)
                .map(|_| self.request(&space, None))
                .collect();
            let (usec, calls) = self.evalsha_stats().await;
            cpu.push(self.pipeline(&requests).await);
            let (usec_after, calls_after) = self.evalsha_stats().await;
            times.push((usec_after - usec) / (calls_after - calls));
        }
        Row::of(times, median(&mut cpu), &[])
    }

    /// Batches of `size` entries, one a participant: into a fresh partition each, or into one
    /// whose N and N-1 hold [`FULL`] keys, the batch's among them.
    async fn batch(&mut self, size: usize, full: bool, rounds: usize) -> Row {
        let all: Vec<String> = (0..FULL).map(|i| format!("key-{i}")).collect();
        let keys = || all[..size].to_vec();
        let shared = self.space(true);
        if full {
            self.fill(&shared, self.n - 1, &all, 123_456).await;
            self.fill(&shared, self.n, &all, 123_456).await;
        }
        let mut space = || {
            if full {
                shared.clone()
            } else {
                self.space(true)
            }
        };
        let spaces: Vec<_> = (0..2 * rounds).map(|_| space()).collect();
        let requests: Vec<_> = spaces[..rounds]
            .iter()
            .map(|space| self.request(space, Some(keys())))
            .collect();
        let cpu = self.pipeline(&requests).await;
        let (mut times, mut replies) = (Vec::new(), Vec::new());
        for space in &spaces[rounds..] {
            let request = self.request(space, Some(keys()));
            let (time, reply) = self.alone(&request).await;
            times.push(time);
            replies.push(reply);
        }
        Row::of(times, cpu, &replies)
    }

    /// `participants` flush `keys` keys each of their own into one partition whose N-1 holds
    /// all of them: each once while N fills, then `rounds` more once N holds them all, each
    /// sent alone. The CPU per call is that of the same calls pipelined, into a partition of
    /// its own.
    async fn distinct(&mut self, participants: usize, keys: usize, rounds: usize) -> (Row, Row) {
        let own = |p: usize| -> Vec<String> { (0..keys).map(|i| format!("{p}-key-{i}")).collect() };
        let all: Vec<String> = (0..participants).flat_map(own).collect();
        let (timed, piped) = (self.space(true), self.space(true));
        for space in [&timed, &piped] {
            self.fill(space, self.n - 1, &all, 123_456).await;
        }
        let filling: Vec<_> = (0..participants)
            .map(|p| self.request(&piped, Some(own(p))))
            .collect();
        let filling_cpu = self.pipeline(&filling).await;
        let full: Vec<_> = (0..rounds)
            .map(|r| self.request(&piped, Some(own(r % participants))))
            .collect();
        let full_cpu = self.pipeline(&full).await;
        let (mut times, mut replies) = (Vec::new(), Vec::new());
        for p in 0..participants {
            let request = self.request(&timed, Some(own(p)));
            let (time, reply) = self.alone(&request).await;
            times.push(time);
            replies.push(reply);
        }
        let filling = Row::of(times, filling_cpu, &replies);
        let (mut times, mut replies) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            let request = self.request(&timed, Some(own(r % participants)));
            let (time, reply) = self.alone(&request).await;
            times.push(time);
            replies.push(reply);
        }
        (filling, Row::of(times, full_cpu, &replies))
    }
}

/// The length of `value` in RESP2, as the server sent it.
fn resp2_len(value: &Value) -> usize {
    // A type byte, the number's digits, CRLF.
    let line = |n: i64| 1 + n.to_string().len() + 2;
    match value {
        Value::Nil => 5,
        Value::Int(i) => line(*i),
        Value::BulkString(bytes) => line(bytes.len() as i64) + bytes.len() + 2,
        Value::Array(items) => {
            line(items.len() as i64) + items.iter().map(resp2_len).sum::<usize>()
        }
        Value::Okay => 5,
        Value::SimpleString(s) => 1 + s.len() + 2,
        other => panic!("not a RESP2 reply: {other:?}"),
    }
}

fn assert_applied(reply: &Value) {
    match reply {
        Value::Array(fields) if fields.first() == Some(&Value::Int(0)) => {}
        other => panic!("the flush was not applied: {other:?}"),
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
