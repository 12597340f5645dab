//! What the flush script costs Redis, per call and per key: a counter's flush against family
//! batches of 1 to 1000 entries, each into a fresh hash (the first participant to flush a
//! partition in an interval) and into a hash that holds its keys already (every later one),
//! on a Redis server this example starts. The figures are the server's: the client's build
//! plays no part in them.
//!
//! ```sh
//! cargo run -p comcount-tests --example script_cost            # 20 rounds a row
//! cargo run -p comcount-tests --example script_cost -- 50      # 50 rounds a row
//! ```
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
//!
//! Then where a key's time goes: a 1000-key batch into a hash that holds its keys, the
//! interval before holding them too, run by copies of the script cut short after each part;
//! and what the Lua operations and Redis commands it is made of cost alone.

use comcount_core::{Entry, FlushRequest, KeySpace, ParticipantId, script};
use comcount_tests::bench::{info, redis_cpu};
use comcount_tests::server::RedisServer;
use redis::aio::MultiplexedConnection;

/// An interval of 1000 days: every call lands in the interval it aims at.
const INTERVAL_MS: u64 = 1000 * 86_400_000;
/// The batch sizes measured.
const SIZES: [usize; 7] = [1, 10, 100, 250, 500, 512, 1000];
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
        "{rounds} rounds a row, `redis-server` {}, `hash-max-listpack-entries` {}.",
        bench.server_info("server", "redis_version").await,
        bench.config("hash-max-listpack-entries").await
    );
    println!();
    println!(
        "A counter's flush: run time {:.1} µs (least {:.1}), CPU {:.1} µs.",
        counter.median, counter.least, counter.cpu
    );
    println!();
    println!(
        "| entries | hash | run time, least | median | per key (median) | CPU per call | CPU per key | CPU per key / counter flush |"
    );
    println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for size in SIZES {
        for row in bench.family(size, rounds).await {
            println!(
                "| {size} | {} | {:.0} µs | {:.0} µs | {:.2} µs | {:.0} µs | {:.2} µs | {:.2} |",
                row.hash,
                row.least,
                row.median,
                row.median / size as f64,
                row.cpu,
                row.cpu / size as f64,
                row.cpu / size as f64 / counter.cpu
            );
        }
    }
    println!();
    println!("### Where a key's time goes: {PARTS_SIZE} keys into a hash that holds them");
    println!();
    println!("| the script up to | run time per key (least) | the part alone |");
    println!("| --- | ---: | ---: |");
    let mut before = 0.0;
    for (part, per_key) in bench.parts(rounds).await {
        println!("| {part} | {per_key:.2} µs | {:.2} µs |", per_key - before);
        before = per_key;
    }
    println!();
    println!("| operation | run time |");
    println!("| --- | ---: |");
    for (operation, time) in bench.operations().await {
        println!("| {operation} | {time:.2} µs |");
    }
    drop(server);
}

/// The batch the parts are timed on.
const PARTS_SIZE: usize = 1000;

/// How a copy of the script is cut short.
enum Cut {
    /// It returns just before this line.
    ReturnBefore(&'static str),
    /// It leaves this line out.
    Without(&'static str),
    /// It is whole.
    Whole,
}

/// The copies of the script timed, each with the last part it runs.
const CUTS: [(&str, Cut); 4] = [
    (
        "checking the arguments",
        Cut::ReturnBefore("local time = redis.call('TIME')"),
    ),
    (
        "`TIME` and the `HMGET` of the interval before",
        Cut::ReturnBefore("local function answer("),
    ),
    (
        "the fence, this interval's `HMGET` and the new totals",
        Cut::Without("      write(unpack(changes))\n"),
    ),
    ("the `HSET`: the whole script", Cut::Whole),
];

impl Cut {
    fn apply(&self, source: &str) -> String {
        let find = |line: &str| {
            source
                .find(line)
                .unwrap_or_else(|| panic!("the script has no {line:?} to cut at"))
        };
        match *self {
            Cut::ReturnBefore(line) => {
                let at = find(line);
                format!("{}do return 0 end\n{}", &source[..at], &source[at..])
            }
            Cut::Without(line) => {
                let at = find(line);
                format!("{}{}", &source[..at], &source[at + line.len()..])
            }
            Cut::Whole => source.to_owned(),
        }
    }
}

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
    hash: &'static str,
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

    async fn config(&mut self, name: &str) -> String {
        let pair: (String, String) = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(&mut self.stats)
            .await
            .unwrap();
        pair.1
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
        let (reply, usec) = self.alone_with(&self.sha.clone(), request).await;
        assert_applied(&reply);
        usec
    }

    /// Runs one request alone through the script `sha`; returns its reply and Redis's time
    /// for it, in µs.
    async fn alone_with(&mut self, sha: &str, request: &FlushRequest) -> (redis::Value, f64) {
        let (usec, calls) = self.evalsha_stats().await;
        let keys = request.keys();
        let reply: redis::Value = redis::cmd("EVALSHA")
            .arg(sha)
            .arg(keys.len())
            .arg(&keys[..])
            .arg(&script::arguments(request)[..])
            .query_async(&mut self.connection)
            .await
            .unwrap();
        let (usec_after, calls_after) = self.evalsha_stats().await;
        assert_eq!(calls_after - calls, 1.0, "another EVALSHA ran in between");
        (reply, usec_after - usec)
    }

    /// The script up to each cut of [`CUTS`], and its least run time per key: the call a busy
    /// machine disturbed least.
    async fn parts(&mut self, rounds: usize) -> Vec<(&'static str, f64)> {
        let mut parts = Vec::new();
        for (part, cut) in CUTS {
            let source = cut.apply(script::SOURCE);
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(&source)
                .query_async(&mut self.connection)
                .await
                .unwrap();
            let mut times = Vec::new();
            for _ in 0..rounds {
                let space = self.space(true);
                // The first flush makes this interval's hash; the one before is written here.
                let first = self.request(space.clone(), 1, Some(PARTS_SIZE));
                self.alone(&first).await;
                let mut before = redis::cmd("HSET");
                before.arg(&first.keys()[1]);
                for entry in &first.entries {
                    before.arg(&*entry.key).arg(entry.amount * 7);
                }
                before.arg("").arg("-".repeat(1025));
                let mut pipe = redis::pipe();
                pipe.add_command(before)
                    .cmd("HDEL")
                    .arg(&first.keys()[1])
                    .arg("");
                let _: () = pipe.query_async(&mut self.connection).await.unwrap();
                let second = self.request(space, 2, Some(PARTS_SIZE));
                let (_, usec) = self.alone_with(&sha, &second).await;
                times.push(usec / PARTS_SIZE as f64);
            }
            parts.push((part, least(&times)));
        }
        parts
    }

    /// What the script's operations cost alone: Lua's per call, Redis's commands per field
    /// of a 1000-field hash table.
    async fn operations(&mut self) -> Vec<(&'static str, f64)> {
        const CALLS: usize = 200_000;
        let lua = [
            (
                "a pattern match of a total",
                "x = string.match(s, '^[1-9]%d*$')",
            ),
            ("`tonumber`", "x = tonumber(s)"),
            ("`string.format('%d')`", "x = string.format('%d', n)"),
        ];
        let mut costs = Vec::new();
        let empty = self.eval_time(&lua_loop("x = i"), &[]).await;
        for (name, body) in lua {
            let time = self.eval_time(&lua_loop(body), &[]).await;
            costs.push((name, (time - empty) / CALLS as f64));
        }
        let fields: Vec<String> = (0..PARTS_SIZE).map(|i| format!("key-{i}")).collect();
        let mut set = redis::cmd("HSET");
        set.arg("ops{h}");
        for field in &fields {
            set.arg(field).arg(12_345);
        }
        set.arg("").arg("-".repeat(1025));
        let _: () = set.query_async(&mut self.connection).await.unwrap();
        let _: () = redis::cmd("HDEL")
            .arg("ops{h}")
            .arg("")
            .query_async(&mut self.connection)
            .await
            .unwrap();
        let commands = [
            (
                "`HMGET`, a field",
                "redis.call('HMGET', KEYS[1], unpack(ARGV))",
            ),
            (
                "`HSET`, a field (its arguments built in Lua included)",
                "local t = {} for i = 1, #ARGV do t[2 * i - 1] = ARGV[i] t[2 * i] = '12352' end \
                 redis.call('HSET', KEYS[1], unpack(t))",
            ),
            (
                "`HINCRBY`, one `redis.call` a field",
                "for i = 1, #ARGV do redis.call('HINCRBY', KEYS[1], ARGV[i], 7) end",
            ),
        ];
        let bare = self.eval_time("return 0", &fields).await;
        for (name, body) in commands {
            let time = self.eval_time(&format!("{body} return 0"), &fields).await;
            costs.push((name, (time - bare) / PARTS_SIZE as f64));
        }
        costs
    }

    /// Redis's time for one `EVAL` of `body` on the key `ops{h}` with `fields` as `ARGV`, in
    /// µs: the least of five.
    async fn eval_time(&mut self, body: &str, fields: &[String]) -> f64 {
        let mut times = Vec::new();
        for _ in 0..5 {
            let before = eval_usec(&mut self.stats).await;
            let _: redis::Value = redis::cmd("EVAL")
                .arg(body)
                .arg(1)
                .arg("ops{h}")
                .arg(fields)
                .query_async(&mut self.connection)
                .await
                .unwrap();
            times.push(eval_usec(&mut self.stats).await - before);
        }
        least(&times)
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
            hash: "",
            least: least(&times),
            median: median(&mut times),
            cpu: median(&mut cpu),
        }
    }

    /// Batches of `size` entries: into a fresh hash, then into the same hash again.
    async fn family(&mut self, size: usize, rounds: usize) -> [Row; 2] {
        let spaces: Vec<KeySpace> = (0..rounds).map(|_| self.space(true)).collect();
        // CPU: a pipeline of first flushes into fresh hashes, then one of second flushes.
        let first: Vec<_> = spaces
            .iter()
            .map(|s| self.request(s.clone(), 1, Some(size)))
            .collect();
        let second: Vec<_> = spaces
            .iter()
            .map(|s| self.request(s.clone(), 2, Some(size)))
            .collect();
        let cpu_fresh = self.pipeline(&first).await;
        let cpu_existing = self.pipeline(&second).await;
        // Run time: the same, one call at a time, on other hashes.
        let mut fresh = Vec::new();
        let mut existing = Vec::new();
        for _ in 0..rounds {
            let space = self.space(true);
            fresh.push(
                self.alone(&self.request(space.clone(), 1, Some(size)))
                    .await,
            );
            existing.push(self.alone(&self.request(space, 2, Some(size))).await);
        }
        [
            Row {
                hash: "fresh",
                least: least(&fresh),
                median: median(&mut fresh),
                cpu: cpu_fresh,
            },
            Row {
                hash: "holds the keys",
                least: least(&existing),
                median: median(&mut existing),
                cpu: cpu_existing,
            },
        ]
    }
}

fn assert_applied(reply: &redis::Value) {
    match reply {
        redis::Value::Array(fields) if fields.first() == Some(&redis::Value::Int(0)) => {}
        other => panic!("the flush was not applied: {other:?}"),
    }
}

/// A Lua loop that runs `body` 200,000 times, with a total `s` and a number `n` at hand.
fn lua_loop(body: &str) -> String {
    format!(
        "local s, n, x = '123456789', 123456796, nil \
         for i = 1, 200000 do {body} end return 0"
    )
}

/// The `usec` of `EVAL` in `INFO commandstats`.
async fn eval_usec(stats: &mut MultiplexedConnection) -> f64 {
    info(stats, "commandstats")
        .await
        .get("cmdstat_eval")
        .and_then(|line| {
            line.split(',')
                .find_map(|kv| kv.strip_prefix("usec=")?.parse().ok())
        })
        .unwrap_or(0.0)
}

fn least(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
