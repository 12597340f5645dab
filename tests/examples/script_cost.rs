//! What the flush script costs Redis, per call and per key: a counter's flush against a family
//! partition's flushes, on a Redis server this example starts. The figures are the server's:
//! the client's build plays no part in them.
//!
//! ```sh
//! cargo run -p comcount-tests --example script_cost            # 20 rounds a row
//! cargo run -p comcount-tests --example script_cost -- 50      # 50 rounds a row
//! ```
//!
//! A family's flush writes its entries to a field of its own; the first flush of each interval
//! also sums the interval before from every participant's field. So two tables:
//!
//! - **writes**: batches of 1 to 1000 entries into an interval with nothing to sum before it;
//! - **sums**: the first flush of an interval, a batch of 700, with the interval before holding
//!   the batches of 1 to 10 participants (700 or 1000 entries each, all the same keys, as in a
//!   fleet that counts every key everywhere, and once with keys of each participant's own, for
//!   the longest run there is); its cost beyond a write is the cost of summing,
//!   per amount summed; and, all in, what each key sent costs when each of those participants
//!   sends one batch an interval: its write and its share of the sum.
//!
//! Two figures per row:
//!
//! - **run time**, Redis's own time for one `EVALSHA` (`usec` of `INFO commandstats`, read
//!   before and after each call): the script with the commands it calls, without the network.
//!   The least and the median of the row's calls; the least is the one a busy machine disturbs
//!   least.
//! - **CPU**, `used_cpu_user + used_cpu_sys` of `INFO cpu` over a pipeline of the row's calls,
//!   per call: what the call costs the server in all, reading and parsing its arguments
//!   included.
//!
//! Each per-key figure is set against a counter's flush, the cost the target is measured in:
//! a key of a batch should cost at most a fifth of a counter's flush.

use comcount_core::{Entry, FlushRequest, KeySpace, ParticipantId, script};
use comcount_tests::bench::{info, redis_cpu};
use comcount_tests::server::RedisServer;
use redis::aio::MultiplexedConnection;

/// An interval of 1000 days: every call lands in the interval it aims at.
const INTERVAL_MS: u64 = 1000 * 86_400_000;
/// The batch sizes measured.
const SIZES: [usize; 6] = [1, 10, 100, 500, 700, 1000];
/// Counter flushes in one pipeline.
const COUNTER_BATCH: usize = 200;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|r| r.parse().expect("ROUNDS is a number"))
        .unwrap_or(20);
    let server = RedisServer::standalone();
    let client = redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let stats = client.get_multiplexed_async_connection().await.unwrap();
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
    };

    let counter = bench.counter(rounds).await;
    println!("## The flush script's cost on Redis");
    println!();
    println!(
        "{rounds} rounds a row, `redis-server` {}.",
        bench.server_info("server", "redis_version").await,
    );
    println!();
    println!(
        "A counter's flush: run time {:.1} µs (least {:.1}), CPU {:.1} µs.",
        counter.median, counter.least, counter.cpu
    );
    println!();
    println!("### Writes");
    println!();
    println!(
        "| entries | run time, least | median | per key (median) | CPU per call | CPU per key | CPU per key / counter flush |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut writes = Vec::new();
    for size in SIZES {
        let row = bench.write(size, rounds).await;
        println!(
            "| {size} | {:.0} µs | {:.0} µs | {:.2} µs | {:.0} µs | {:.2} µs | {:.3} |",
            row.least,
            row.median,
            row.median / size as f64,
            row.cpu,
            row.cpu / size as f64,
            row.cpu / size as f64 / counter.cpu
        );
        writes.push((size, row));
    }
    println!();
    println!("### Sums: the first flush of an interval, a batch of {SUM_BATCH}");
    println!();
    println!(
        "| participants × entries before | fields summed in the run | run time, least | median | CPU per call | CPU per amount summed | all in, CPU per key sent | / counter flush |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let write_of = |size: usize| {
        writes
            .iter()
            .find(|(s, _)| *s == size)
            .map(|(_, row)| row.cpu)
            .expect("the batch sizes include it")
    };
    for (participants, entries, own_keys) in SUMS {
        let row = bench.sum(participants, entries, own_keys, rounds).await;
        let fields = fields_summed(participants, entries);
        let summed = (fields * entries) as f64;
        let extra = (row.cpu - write_of(SUM_BATCH)).max(0.0);
        // Each key sent is written once, with its participant's batch, and summed once, by
        // this run or a later one at the same cost an amount.
        let all_in = write_of(entries) / entries as f64 + extra / summed;
        let keys = if own_keys { ", keys of its own" } else { "" };
        println!(
            "| {participants} × {entries}{keys} | {fields} | {:.0} µs | {:.0} µs | {:.0} µs | {:.3} µs | {:.2} µs | {:.3} |",
            row.least,
            row.median,
            row.cpu,
            extra / summed,
            all_in,
            all_in / counter.cpu
        );
    }
    drop(server);
}

/// How many of `participants` fields of `entries` the first run sums: whole fields, one at
/// least, until it has summed the script's budget of entries (`FOLD_BUDGET`).
fn fields_summed(participants: usize, entries: usize) -> usize {
    let budget: usize = script::SOURCE
        .lines()
        .find_map(|line| line.strip_prefix("local FOLD_BUDGET = "))
        .and_then(|n| n.trim().parse().ok())
        .expect("the script sets FOLD_BUDGET");
    let mut fields = 1;
    while fields < participants && fields * entries < budget {
        fields += 1;
    }
    fields
}

/// The batch of the first flush of an interval, in the sums.
const SUM_BATCH: usize = 700;
/// What the interval before holds in the sums: participants, entries each, and whether each
/// participant's keys are its own (so that the totals hold every entry: the longest run).
const SUMS: [(usize, usize, bool); 7] = [
    (1, 700, false),
    (2, 700, false),
    (8, 700, false),
    (10, 700, false),
    (8, 1000, false),
    (10, 1000, false),
    (10, 1000, true),
];

struct Bench {
    sha: String,
    n: u64,
    connection: MultiplexedConnection,
    stats: MultiplexedConnection,
    /// The next fresh key space's number.
    next: u64,
}

/// The figures of one row.
struct Row {
    least: f64,
    median: f64,
    cpu: f64,
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

    fn request(&self, space: KeySpace, participant: u64, entries: Option<usize>) -> FlushRequest {
        let request = FlushRequest::new(space, ParticipantId::from_u64(participant), INTERVAL_MS)
            .with_expect(self.n);
        match entries {
            None => request.with_amount(3),
            Some(size) => request.with_entries(
                (0..size)
                    .map(|i| Entry::new(format!("key-{i}"), i as u64 % 5 + 1))
                    .collect(),
            ),
        }
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
        let replies: Vec<redis::Value> = pipe.query_async(&mut self.connection).await.unwrap();
        let after = redis_cpu(&mut self.stats).await;
        for reply in &replies {
            assert_applied(reply);
        }
        (after - before) * 1e6 / requests.len() as f64
    }

    /// Runs one request alone; returns Redis's time for it, in µs.
    async fn alone(&mut self, request: &FlushRequest) -> f64 {
        let (usec, calls) = self.evalsha_stats().await;
        let reply: redis::Value = self
            .evalsha(request)
            .query_async(&mut self.connection)
            .await
            .unwrap();
        let (usec_after, calls_after) = self.evalsha_stats().await;
        assert_eq!(calls_after - calls, 1.0, "another EVALSHA ran in between");
        assert_applied(&reply);
        usec_after - usec
    }

    async fn counter(&mut self, rounds: usize) -> Row {
        let mut times = Vec::new();
        let mut cpu = Vec::new();
        for _ in 0..rounds {
            let space = self.space(false);
            let requests: Vec<_> = (0..COUNTER_BATCH as u64)
                .map(|p| self.request(space.clone(), p, None))
                .collect();
            let (usec, calls) = self.evalsha_stats().await;
            cpu.push(self.pipeline(&requests).await);
            let (usec_after, calls_after) = self.evalsha_stats().await;
            times.push((usec_after - usec) / (calls_after - calls));
        }
        Row {
            least: least(&times),
            median: median(&mut times),
            cpu: median(&mut cpu),
        }
    }

    /// Batches of `size` entries, each into a fresh partition: a write and nothing to sum.
    async fn write(&mut self, size: usize, rounds: usize) -> Row {
        let requests: Vec<_> = (0..rounds)
            .map(|_| {
                let space = self.space(true);
                self.request(space, 1, Some(size))
            })
            .collect();
        let cpu = self.pipeline(&requests).await;
        let mut times = Vec::new();
        for _ in 0..rounds {
            let space = self.space(true);
            times.push(self.alone(&self.request(space, 1, Some(size))).await);
        }
        Row {
            least: least(&times),
            median: median(&mut times),
            cpu,
        }
    }

    /// The first flush of an interval, a batch of [`SUM_BATCH`], each into a fresh partition
    /// whose interval before holds `participants` batches of `entries` (of the same keys, or
    /// each of its own), written as the script writes them.
    async fn sum(
        &mut self,
        participants: usize,
        entries: usize,
        own_keys: bool,
        rounds: usize,
    ) -> Row {
        let mut spaces = Vec::new();
        for _ in 0..2 * rounds {
            let space = self.space(true);
            let mut hset = redis::cmd("HSET");
            hset.arg(space.interval(self.n - 1));
            for p in 0..participants as u64 {
                let mut before = self.request(space.clone(), 100 + p, Some(entries));
                if own_keys {
                    for entry in &mut before.entries {
                        entry.key = format!("{p}-{}", entry.key).into();
                    }
                }
                hset.arg(before.fence_key())
                    .arg(&script::arguments(&before)[5][..]);
            }
            let mut pipe = redis::pipe();
            pipe.add_command(hset)
                .cmd("PEXPIRE")
                .arg(space.interval(self.n - 1))
                .arg(3_600_000);
            let _: () = pipe.query_async(&mut self.connection).await.unwrap();
            spaces.push(space);
        }
        let (piped, alone) = spaces.split_at(rounds);
        let requests: Vec<_> = piped
            .iter()
            .map(|s| self.request(s.clone(), 1, Some(SUM_BATCH)))
            .collect();
        let cpu = self.pipeline(&requests).await;
        let mut times = Vec::new();
        for space in alone {
            let request = self.request(space.clone(), 1, Some(SUM_BATCH));
            times.push(self.alone(&request).await);
        }
        Row {
            least: least(&times),
            median: median(&mut times),
            cpu,
        }
    }
}

fn assert_applied(reply: &redis::Value) {
    match reply {
        redis::Value::Array(fields) if fields.first() == Some(&redis::Value::Int(0)) => {}
        other => panic!("the flush was not applied: {other:?}"),
    }
}

fn least(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
