//! What flushing costs Redis, next to what Redis can do at best and to the naive design.
//!
//! On one loopback redis-server of its own, it measures, in one run:
//!
//! 1. **Baseline.** `redis-benchmark`'s ceiling against that server for plain `INCRBY`, for
//!    `EVALSHA` of a script that does nothing but `INCRBY`, and for `EVALSHA` of the flush
//!    script itself (a fresh fence key per call, so that every call is applied).
//! 2. **Flushes.** Fleets of counters × participants (each participant its own `Counter`, all
//!    the counters of one participant sharing its connection, a `ConnectionManager`) with 10 and 50 ms
//!    intervals, up to more flushes than the machine can drive: flushes counted per second, and
//!    Redis's cost per flush from `INFO commandstats` (`cmdstat_evalsha`) and `INFO cpu`.
//! 3. **Events.** One event stream driven through counters and through the naive design, one
//!    `INCRBY` per event, at the same offered rates: events handled per second, Redis commands
//!    and Redis CPU per event.
//! 4. **Memory.** `MEMORY USAGE` of an interval key and a fence key after a real flush, and the
//!    size of a counter handle and of its background task with a `RedisStore`.
//!
//! Every figure is printed as a Markdown table.
//!
//! ```sh
//! cargo run -p comcount-tests --release --example flush_cost
//! ```
//!
//! Needs `redis-server` and `redis-benchmark` on the `PATH` (Debian: `redis-server` and
//! `redis-tools`). A run takes about a minute and a half; `FLUSH_COST_WINDOW_S` (default 5)
//! sets how long each fleet is measured, after 2 s of warm-up.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_core::{Counter, FlushRequest, KeySpace, ParticipantId, Worker};
use comcount_redis_rs::RedisStore;
use comcount_tests::bench::{info, load_average};
use comcount_tests::connect;
use comcount_tests::recording::{self, FlushRecords};
use comcount_tests::server::RedisServer;
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, MultiplexedConnection};

/// The flush fleets, as (interval in ms, counters, participants). Every participant has its
/// own `Counter` for each counter name, so a fleet offers `counters × participants / interval`
/// flushes a second. Short intervals, so that few counters make many flushes.
const SWEEP: [(u64, usize, usize); 5] = [
    (10, 10, 10),
    (10, 20, 25),
    (50, 20, 25),
    (50, 40, 25),
    (50, 40, 50),
];

/// The interval of the counters in the events comparison.
const EVENTS_INTERVAL: Duration = Duration::from_millis(100);

/// Participants (processes, one connection each) in the events comparison.
const EVENT_PARTICIPANTS: usize = 8;

/// Tasks per participant that each handle events one after the other, like request handlers.
const TASKS_PER_PARTICIPANT: usize = 8;

/// `redis-benchmark` requests per run.
const BENCHMARK_REQUESTS: u64 = 150_000;

/// `redis-benchmark` connections.
const BENCHMARK_CLIENTS: u32 = 50;

/// How long a fleet runs before it is measured: the first flushes find their interval.
const WARMUP: Duration = Duration::from_secs(2);

/// The script `redis-benchmark` runs as the floor of any script call.
const BARE_SCRIPT: &str = "return redis.call('INCRBY', KEYS[1], ARGV[1])";

#[tokio::main]
async fn main() {
    let window = Duration::from_secs(
        std::env::var("FLUSH_COST_WINDOW_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5),
    );
    let server = RedisServer::standalone();
    let url = server.url();
    let mut stats = connect::multiplexed(&url).await;
    let started = Instant::now();
    let load_before = load_average();

    let machine = Machine::read(&mut stats).await;
    let baseline = baseline(server.port(), &mut stats).await;
    let mut fleets = Vec::new();
    for (interval_ms, counters, participants) in SWEEP {
        let interval = Duration::from_millis(interval_ms);
        fleets.push(flush_fleet(&url, &mut stats, interval, counters, participants, window).await);
    }
    // Rates relative to what plain INCRBY reached: one both designs should keep up with, and
    // one well past the naive design's reach.
    let ceiling = baseline.incrby.requests_per_s;
    let mut events = Vec::new();
    for factor in [0.5, 10.0] {
        let rate = (ceiling * factor / 1000.0).round() * 1000.0;
        events.push(event_run(&url, &mut stats, Design::Counters, rate, window).await);
        events.push(event_run(&url, &mut stats, Design::Naive, rate, window).await);
    }
    let memory = memory(&url, &mut stats).await;
    let load_after = load_average();

    machine.print(&load_before, &load_after, started.elapsed(), window);
    baseline.print();
    print_fleets(&fleets, &baseline);
    print_events(&events);
    memory.print();
}

// ---------------------------------------------------------------------------------------------
// Reading the server and the process.

/// One moment's counters of the server and of this process.
struct Snapshot {
    at: Instant,
    /// `cmdstat_NAME` → (calls, usec).
    commands: HashMap<String, (u64, u64)>,
    /// used_cpu_sys + used_cpu_user, in seconds.
    redis_cpu: f64,
    /// This process's user + system time, in seconds.
    client_cpu: f64,
    used_memory: u64,
    keys: u64,
}

impl Snapshot {
    async fn take(stats: &mut MultiplexedConnection) -> Self {
        let commands = info(stats, "commandstats").await;
        let cpu = info(stats, "cpu").await;
        let memory = info(stats, "memory").await;
        let keys: u64 = redis::cmd("DBSIZE")
            .query_async(stats)
            .await
            .expect("DBSIZE answers");
        let number = |map: &HashMap<String, String>, key: &str| -> f64 {
            map.get(key)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("INFO has no number {key}"))
        };
        Self {
            at: Instant::now(),
            commands: commands
                .iter()
                .filter_map(|(name, value)| {
                    let name = name.strip_prefix("cmdstat_")?;
                    Some((name.to_owned(), calls_and_usec(value)?))
                })
                .collect(),
            redis_cpu: number(&cpu, "used_cpu_sys") + number(&cpu, "used_cpu_user"),
            client_cpu: process_cpu(),
            used_memory: number(&memory, "used_memory") as u64,
            keys,
        }
    }

    /// Calls and usec of `command` since `before`.
    fn command_since(&self, before: &Snapshot, command: &str) -> (u64, u64) {
        let now = self.commands.get(command).copied().unwrap_or_default();
        let then = before.commands.get(command).copied().unwrap_or_default();
        (now.0 - then.0, now.1 - then.1)
    }
}

/// `calls=…,usec=…,…` from `INFO commandstats`.
fn calls_and_usec(value: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        value
            .split(',')
            .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
    };
    Some((field("calls")?, field("usec")?))
}

/// User + system CPU seconds of this process, from `/proc/self/stat`.
fn process_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("Linux has /proc/self/stat");
    // Fields after the command name, which ends with the last ')': state is field 3, utime 14
    // and stime 15.
    let rest = &stat[stat.rfind(')').expect("stat has a command name") + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().expect("utime is a number")
        + fields[12].parse::<f64>().expect("stime is a number");
    ticks / clock_ticks_per_s()
}

fn clock_ticks_per_s() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// What the run ran on.
struct Machine {
    cores: usize,
    cpu: String,
    redis: String,
}

impl Machine {
    async fn read(stats: &mut MultiplexedConnection) -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let server = info(stats, "server").await;
        Self {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu,
            redis: server
                .get("redis_version")
                .cloned()
                .unwrap_or_else(|| "unknown".into()),
        }
    }

    fn print(&self, load_before: &str, load_after: &str, took: Duration, window: Duration) {
        println!("## Run");
        println!();
        println!(
            "{} cores ({}), Redis {}, load average {load_before} before and {load_after} after. \
             Client and server share the cores. Each fleet measured for {window:?} after \
             {WARMUP:?} of warm-up; the whole run took {:.0} s.",
            self.cores,
            self.cpu,
            self.redis,
            took.as_secs_f64()
        );
        println!();
    }
}

// ---------------------------------------------------------------------------------------------
// 1. The baseline: redis-benchmark against the same server.

struct Benchmarked {
    requests_per_s: f64,
    /// Redis's own time per call, `usec` / `calls` of the command.
    usec_per_call: f64,
    /// Redis CPU (user + system) per call, in µs: what the call costs the server in all,
    /// network included.
    cpu_per_call: f64,
}

struct Baseline {
    incrby: Benchmarked,
    bare_script: Benchmarked,
    flush_script: Benchmarked,
    flush_args: String,
}

async fn baseline(port: u16, stats: &mut MultiplexedConnection) -> Baseline {
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(BARE_SCRIPT)
        .query_async(stats)
        .await
        .expect("SCRIPT LOAD answers");
    let incrby = benchmark(port, stats, "incrby", &["incrby", "bench:plain", "1"]).await;
    let bare_script = benchmark(
        port,
        stats,
        "evalsha",
        &["evalsha", &sha, "1", "bench:script", "1"],
    )
    .await;
    // The flush script on its applied path: an interval of 1000 days, so that EXPECT stays
    // right for the whole run, and a fresh fence key per call (`__rand_int__`, drawn from a
    // billion), so that no call is fenced.
    let flush_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(comcount_core::script::SOURCE)
        .query_async(stats)
        .await
        .expect("SCRIPT LOAD answers");
    let interval_ms: u64 = 1000 * 86_400_000;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_millis() as u64;
    let n = now_ms / interval_ms;
    // The keys of FlushRequest::keys (intervals n-2 ..= n+1, then the fence), the fence's
    // participant id replaced by redis-benchmark's random number.
    let participant = ParticipantId::from_u64(0);
    let request = FlushRequest::new(
        KeySpace::counter("bench:", "flush"),
        participant,
        interval_ms,
    )
    .with_amount(1)
    .with_expect(n)
    .with_fence_ttl_ms(600_000);
    let mut keys = request.keys();
    keys[4] = keys[4].replace(&participant.to_string(), "__rand_int__");
    // A counter's arguments are text.
    let args: Vec<String> = comcount_core::script::arguments(&request)
        .iter()
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    let key_count = keys.len().to_string();
    let mut command = vec!["evalsha", flush_sha.as_str(), key_count.as_str()];
    command.extend(keys.iter().map(String::as_str));
    command.extend(args.iter().map(String::as_str));
    let flush_args = command[2..].join(" ");
    let flush_script = benchmark(port, stats, "evalsha", &command).await;
    let applied: u64 = stats.get(&keys[2]).await.expect("GET answers");
    assert!(
        applied * 100 >= BENCHMARK_REQUESTS * 99,
        "only {applied} of the flush script's calls were applied"
    );
    Baseline {
        incrby,
        bare_script,
        flush_script,
        flush_args,
    }
}

/// Runs `redis-benchmark` with `command` and reads its requests/s, and the server's cost of
/// `stat` (the `cmdstat_` name) over the run.
async fn benchmark(
    port: u16,
    stats: &mut MultiplexedConnection,
    stat: &str,
    command: &[&str],
) -> Benchmarked {
    let before = Snapshot::take(stats).await;
    let mut args: Vec<String> = [
        "-p",
        &port.to_string(),
        "-n",
        &BENCHMARK_REQUESTS.to_string(),
        "-c",
        &BENCHMARK_CLIENTS.to_string(),
        "-P",
        "1",
        "-r",
        "1000000000",
        "--csv",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(command.iter().map(|s| s.to_string()));
    let output =
        tokio::task::spawn_blocking(move || Command::new("redis-benchmark").args(&args).output())
            .await
            .expect("the redis-benchmark thread ends")
            .expect("redis-benchmark runs; install it with `apt-get install redis-tools`");
    assert!(
        output.status.success(),
        "redis-benchmark failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let after = Snapshot::take(stats).await;
    // --csv: a header line, then `"command","rps",...`.
    let text = String::from_utf8_lossy(&output.stdout);
    let requests_per_s = text
        .lines()
        .filter(|line| !line.starts_with("\"test\""))
        .find_map(|line| line.split("\",\"").nth(1)?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no requests/s in redis-benchmark's output: {text}"));
    let (calls, usec) = after.command_since(&before, stat);
    assert!(
        calls >= BENCHMARK_REQUESTS,
        "redis-benchmark ran {calls} {stat}"
    );
    Benchmarked {
        requests_per_s,
        usec_per_call: usec as f64 / calls as f64,
        cpu_per_call: (after.redis_cpu - before.redis_cpu) * 1e6 / calls as f64,
    }
}

impl Baseline {
    fn print(&self) {
        println!("## Baseline: redis-benchmark on the same server");
        println!();
        println!(
            "`redis-benchmark -p PORT -n {BENCHMARK_REQUESTS} -c {BENCHMARK_CLIENTS} -P 1 \
             -r 1000000000 --csv …`, no pipelining. Redis usec/call is `cmdstat_*` usec / calls; \
             Redis CPU/call is the `used_cpu_sys + used_cpu_user` delta / calls. The flush script \
             ran as `evalsha SHA {}` (an interval of 1000 days, a fresh fence key per call: \
             every call applied).",
            self.flush_args
        );
        println!();
        println!("| command | requests/s | Redis usec/call | Redis CPU µs/call |");
        println!("| --- | ---: | ---: | ---: |");
        for (name, b) in [
            ("`INCRBY key 1`", &self.incrby),
            ("`EVALSHA` of a bare `INCRBY` script", &self.bare_script),
            ("`EVALSHA` of the flush script", &self.flush_script),
        ] {
            println!(
                "| {name} | {:.0} | {:.2} | {:.2} |",
                b.requests_per_s, b.usec_per_call, b.cpu_per_call
            );
        }
        println!();
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Flush fleets.

/// What the counters of a fleet reported, through their diagnostics.
#[derive(Default)]
struct Tally {
    completed: AtomicU64,
    failed: AtomicU64,
}

struct Tallied(Arc<Tally>);

impl Diagnostics for Tallied {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        match event {
            Event::FlushCompleted { .. } => {
                self.0.completed.fetch_add(1, Ordering::Relaxed);
            }
            Event::FlushFailed { .. } => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

struct FleetRow {
    /// What became of the flushes sent in the window.
    outcomes: recording::Tally,
    interval: Duration,
    counters: usize,
    participants: usize,
    seconds: f64,
    flushes: u64,
    failed: u64,
    evalsha: (u64, u64),
    redis_cpu: f64,
    client_cpu: f64,
    keys: u64,
    memory_growth: i64,
}

impl FleetRow {
    fn handles(&self) -> usize {
        self.counters * self.participants
    }

    fn offered(&self) -> f64 {
        self.handles() as f64 / self.interval.as_secs_f64()
    }

    fn flushes_per_s(&self) -> f64 {
        self.flushes as f64 / self.seconds
    }

    fn usec_per_call(&self) -> f64 {
        self.evalsha.1 as f64 / self.evalsha.0.max(1) as f64
    }

    fn cpu_per_flush(&self) -> f64 {
        self.redis_cpu * 1e6 / self.flushes.max(1) as f64
    }

    fn cpu_per_call(&self) -> f64 {
        self.redis_cpu * 1e6 / self.evalsha.0.max(1) as f64
    }

    fn calls_per_s(&self) -> f64 {
        self.evalsha.0 as f64 / self.seconds
    }
}

/// Runs `counters × participants` counter handles with the sweep interval and measures them.
async fn flush_fleet(
    url: &str,
    stats: &mut MultiplexedConnection,
    interval: Duration,
    counters: usize,
    participants: usize,
    window: Duration,
) -> FleetRow {
    clear(stats).await;
    let empty = Snapshot::take(stats).await;
    let tally = Arc::new(Tally::default());
    let records = FlushRecords::tally_only();
    let stop = Arc::new(AtomicBool::new(false));
    let mut drivers = Vec::new();
    let mut all = Vec::new();
    for _ in 0..participants {
        // A participant is a process: one connection for all its counters.
        let connection = participant_connection(url).await;
        let mut handles = Vec::new();
        for c in 0..counters {
            let (counter, worker) = Counter::builder(format!("c{c}"), interval)
                .prefix("flush:")
                .diagnostics(Tallied(Arc::clone(&tally)))
                .build(
                    records.wrap(RedisStore::new(connection.clone()), 0),
                    TokioTimer::new(),
                )
                .expect("the settings are valid");
            tokio::spawn(worker);
            handles.push(counter);
        }
        all.extend(handles.iter().cloned());
        let stop = Arc::clone(&stop);
        // Something to flush in every interval of every counter.
        drivers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for counter in &handles {
                    counter.increment(1);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    tokio::time::sleep(WARMUP).await;
    let (completed, failed) = tally_now(&tally);
    let outcomes_before = records.tally();
    let before = Snapshot::take(stats).await;
    tokio::time::sleep(window).await;
    let after = Snapshot::take(stats).await;
    let (completed_after, failed_after) = tally_now(&tally);
    let outcomes_after = records.tally();
    stop.store(true, Ordering::Relaxed);
    for driver in drivers {
        driver.await.expect("a driver ends");
    }
    for counter in &all {
        counter.close();
    }
    FleetRow {
        outcomes: outcomes_after - outcomes_before,
        interval,
        counters,
        participants,
        seconds: (after.at - before.at).as_secs_f64(),
        flushes: completed_after - completed,
        failed: failed_after - failed,
        evalsha: after.command_since(&before, "evalsha"),
        redis_cpu: after.redis_cpu - before.redis_cpu,
        client_cpu: after.client_cpu - before.client_cpu,
        keys: after.keys,
        memory_growth: after.used_memory as i64 - empty.used_memory as i64,
    }
}

fn tally_now(tally: &Tally) -> (u64, u64) {
    (
        tally.completed.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
    )
}

/// Drops every key, after letting closed counters' last flushes land.
/// A participant's connection, which reconnects: the store's settings, with redis-rs's default
/// response timeout of 500 ms, which the figures were first measured with.
async fn participant_connection(url: &str) -> ConnectionManager {
    let config =
        RedisStore::manager_config().set_response_timeout(Some(Duration::from_millis(500)));
    connect::manager_with(url, config).await
}

async fn clear(stats: &mut MultiplexedConnection) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let () = redis::cmd("FLUSHALL")
        .query_async(stats)
        .await
        .expect("FLUSHALL answers");
}

fn print_fleets(fleets: &[FleetRow], baseline: &Baseline) {
    println!("## Flush cost");
    println!();
    println!(
        "Every participant has its own `Counter` per counter name and one multiplexed \
         connection for all of them; each counter is incremented every 5 ms. A flush is one \
         `EVALSHA` of the flush script. 'Counted/s' is the flushes the counters report counted \
         (`flush completed`); 'EVALSHA/s' is every call, wrong-interval replies and resends \
         included. Redis usec/call is `cmdstat_evalsha` usec / calls. CPU is user + system \
         time, of redis-server (`INFO cpu`) and of this process (`/proc/self/stat`)."
    );
    println!();
    println!(
        "| interval | counters × participants | offered flushes/s | counted/s | EVALSHA/s | \
         failed | Redis usec/call | Redis CPU µs/call | Redis CPU µs/counted | \
         client CPU µs/counted | keys | used_memory growth |"
    );
    println!(
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for f in fleets {
        println!(
            "| {} ms | {} × {} | {:.0} | {:.0} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} MB |",
            f.interval.as_millis(),
            f.counters,
            f.participants,
            f.offered(),
            f.flushes_per_s(),
            f.calls_per_s(),
            f.failed,
            f.usec_per_call(),
            f.cpu_per_call(),
            f.cpu_per_flush(),
            f.client_cpu * 1e6 / f.flushes.max(1) as f64,
            f.keys,
            f.memory_growth as f64 / 1e6,
        );
    }
    println!();
    println!(
        "What became of the flushes sent in the window, per 100 sent ('cut off' is a flush the \
         counter stopped waiting for, after its timeout; 'in flight' one still unanswered at \
         the window's end; the ends in the window include those of flushes sent just before \
         it, so a row may add up to a little over 100):"
    );
    println!();
    println!(
        "| interval | counters × participants | sent | applied | duplicate | stale | fenced | \
         wrong interval | error | cut off | in flight |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for f in fleets {
        let o = f.outcomes;
        let per_100 = |n: u64| format!("{:.1}", n as f64 * 100.0 / o.sent.max(1) as f64);
        println!(
            "| {} ms | {} × {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f.interval.as_millis(),
            f.counters,
            f.participants,
            o.sent,
            per_100(o.applied),
            per_100(o.duplicate),
            per_100(o.stale),
            per_100(o.fenced),
            per_100(o.wrong_interval),
            per_100(o.failed),
            per_100(o.cut),
            per_100(o.in_flight()),
        );
    }
    println!();
    let Some(best) = fleets
        .iter()
        .max_by(|a, b| a.flushes_per_s().total_cmp(&b.flushes_per_s()))
    else {
        return;
    };
    println!(
        "Ratios to the baseline, at the most flushes counted per second ({} ms, {} × {}):",
        best.interval.as_millis(),
        best.counters,
        best.participants
    );
    println!();
    println!(
        "| ratio | to plain `INCRBY` | to `EVALSHA` bare `INCRBY` | to `EVALSHA` flush script |"
    );
    println!("| --- | ---: | ---: | ---: |");
    let row = |what: &str, ours: f64, of: fn(&Benchmarked) -> f64| {
        println!(
            "| {what} | {:.2} | {:.2} | {:.2} |",
            ours / of(&baseline.incrby),
            ours / of(&baseline.bare_script),
            ours / of(&baseline.flush_script),
        );
    };
    row("Redis usec/call", best.usec_per_call(), |b| b.usec_per_call);
    row("Redis CPU per call", best.cpu_per_call(), |b| {
        b.cpu_per_call
    });
    row("Redis CPU per counted flush", best.cpu_per_flush(), |b| {
        b.cpu_per_call
    });
    row(
        "throughput: counted/s ÷ requests/s",
        best.flushes_per_s(),
        |b| b.requests_per_s,
    );
    row(
        "throughput: EVALSHA/s ÷ requests/s",
        best.calls_per_s(),
        |b| b.requests_per_s,
    );
    println!();
}

// ---------------------------------------------------------------------------------------------
// 3. Events: counters against one INCRBY per event.

#[derive(Clone, Copy, PartialEq)]
enum Design {
    /// `Counter::increment` per event; the counters flush.
    Counters,
    /// One `INCRBY` per event, awaited by the task that handles the event.
    Naive,
}

struct EventRow {
    design: Design,
    offered: f64,
    seconds: f64,
    events: u64,
    /// Top-level commands the design sent: `evalsha` or `incrby`.
    commands: u64,
    redis_cpu: f64,
    client_cpu: f64,
}

/// Drives `rate` events a second, spread over the participants' tasks, through `design`.
async fn event_run(
    url: &str,
    stats: &mut MultiplexedConnection,
    design: Design,
    rate: f64,
    window: Duration,
) -> EventRow {
    clear(stats).await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks = EVENT_PARTICIPANTS * TASKS_PER_PARTICIPANT;
    let per_task = rate / tasks as f64;
    let mut drivers = Vec::new();
    let mut counters = Vec::new();
    let start = tokio::time::Instant::now();
    for _ in 0..EVENT_PARTICIPANTS {
        let connection = participant_connection(url).await;
        let counter = match design {
            Design::Counters => {
                let (counter, worker) = Counter::builder("events", EVENTS_INTERVAL)
                    .prefix("events:")
                    .build(RedisStore::new(connection.clone()), TokioTimer::new())
                    .expect("the settings are valid");
                tokio::spawn(worker);
                counters.push(counter.clone());
                Some(counter)
            }
            Design::Naive => None,
        };
        for _ in 0..TASKS_PER_PARTICIPANT {
            let mut connection = connection.clone();
            let counter = counter.clone();
            let stop = Arc::clone(&stop);
            let done = Arc::clone(&done);
            drivers.push(tokio::spawn(async move {
                let mut handled = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Events arrive on a fixed schedule; a task that falls behind works
                    // through its backlog without pause.
                    let due = (start.elapsed().as_secs_f64() * per_task) as u64;
                    while handled < due && !stop.load(Ordering::Relaxed) {
                        match &counter {
                            Some(counter) => {
                                counter.increment(1);
                            }
                            None => {
                                let _: u64 = connection
                                    .incr("naive:{events}", 1u64)
                                    .await
                                    .expect("INCRBY answers");
                            }
                        }
                        handled += 1;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }));
        }
    }
    tokio::time::sleep(WARMUP).await;
    let events_before = done.load(Ordering::Relaxed);
    let before = Snapshot::take(stats).await;
    tokio::time::sleep(window).await;
    let after = Snapshot::take(stats).await;
    let events_after = done.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for driver in drivers {
        driver.await.expect("a driver ends");
    }
    for counter in &counters {
        counter.close();
    }
    let command = match design {
        Design::Counters => "evalsha",
        Design::Naive => "incrby",
    };
    EventRow {
        design,
        offered: rate,
        seconds: (after.at - before.at).as_secs_f64(),
        events: events_after - events_before,
        commands: after.command_since(&before, command).0,
        redis_cpu: after.redis_cpu - before.redis_cpu,
        client_cpu: after.client_cpu - before.client_cpu,
    }
}

fn print_events(rows: &[EventRow]) {
    println!("## Events: counters against one INCRBY per event");
    println!();
    println!(
        "{EVENT_PARTICIPANTS} participants, each with one multiplexed connection and \
         {TASKS_PER_PARTICIPANT} tasks that handle events one after the other on a fixed \
         schedule (the offered rate, shared out). Counters: each participant has one `Counter` \
         (interval {EVENTS_INTERVAL:?}) and calls `increment(1)` per event. Naive: each event \
         is an `INCRBY` that its task awaits before the next; the connection pipelines the \
         commands of a participant's tasks. Offered rates are a half and ten times the \
         `INCRBY` requests/s of the baseline."
    );
    println!();
    println!(
        "| design | offered events/s | events/s handled | Redis commands/event | \
         Redis CPU µs/event | client CPU µs/event |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        let events = r.events.max(1) as f64;
        println!(
            "| {} | {:.0} | {:.0} | {} | {:.4} | {:.4} |",
            match r.design {
                Design::Counters => "counters",
                Design::Naive => "naive INCRBY",
            },
            r.offered,
            r.events as f64 / r.seconds,
            significant(r.commands as f64 / events),
            r.redis_cpu * 1e6 / events,
            r.client_cpu * 1e6 / events,
        );
    }
    println!();
    for pair in rows.chunks(2) {
        if let [ours, naive] = pair {
            let per = |r: &EventRow| r.redis_cpu / r.events.max(1) as f64;
            println!(
                "At {:.0} events/s offered: counters handled {:.2}× the events/s of the naive \
                 design, at {} of its Redis CPU per event.",
                ours.offered,
                (ours.events as f64 / ours.seconds) / (naive.events as f64 / naive.seconds),
                significant(per(ours) / per(naive)),
            );
        }
    }
    println!();
}

/// A small ratio with three significant digits, without exponent.
fn significant(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}

// ---------------------------------------------------------------------------------------------
// 4. Memory.

struct Memory {
    interval_key: (String, u64, String),
    fence_key: (String, u64, String),
    counter: usize,
    worker: usize,
    store: usize,
    task_multiplexed: usize,
    task_manager: usize,
}

async fn memory(url: &str, stats: &mut MultiplexedConnection) -> Memory {
    clear(stats).await;
    let tally = Arc::new(Tally::default());
    let participant = ParticipantId::from_u64(0x0123_4567_89ab_cdef);
    let (counter, worker) = Counter::builder("memory", Duration::from_secs(1))
        .prefix("mem:")
        .participant(participant)
        .diagnostics(Tallied(Arc::clone(&tally)))
        .build(
            RedisStore::new(participant_connection(url).await),
            TokioTimer::new(),
        )
        .expect("the settings are valid");
    let task_manager = worker.task_size();
    tokio::spawn(worker);
    counter.increment(1_000_000);
    let deadline = Instant::now() + Duration::from_secs(5);
    while tally.completed.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "no flush within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    counter.close();
    let space = KeySpace::counter("mem:", "memory");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*", space.base()))
        .query_async(stats)
        .await
        .expect("KEYS answers");
    let mut interval_key = None;
    let mut fence_key = None;
    for key in keys {
        let usage: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .arg("SAMPLES")
            .arg(0)
            .query_async(stats)
            .await
            .expect("MEMORY USAGE answers");
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&key)
            .query_async(stats)
            .await
            .expect("OBJECT ENCODING answers");
        let slot = if key == space.fence(participant) {
            &mut fence_key
        } else {
            &mut interval_key
        };
        *slot = Some((key, usage, encoding));
    }

    // Built for its size only, never run: a bare connection does not reconnect.
    let multiplexed = connect::multiplexed(url).await;
    let (other, worker) = Counter::builder("memory-multiplexed", Duration::from_secs(1))
        .prefix("mem:")
        .build(RedisStore::new(multiplexed), TokioTimer::new())
        .expect("the settings are valid");
    let task_multiplexed = worker.task_size();
    drop((other, worker));
    Memory {
        interval_key: interval_key.expect("the flush wrote an interval key"),
        fence_key: fence_key.expect("the flush wrote a fence key"),
        counter: size_of::<Counter>(),
        worker: size_of::<Worker>(),
        store: size_of::<RedisStore<MultiplexedConnection>>(),
        task_multiplexed,
        task_manager,
    }
}

impl Memory {
    fn print(&self) {
        println!("## Redis memory");
        println!();
        println!(
            "After one real flush (`MEMORY USAGE key SAMPLES 0`, Redis's estimate with its \
             allocator's overhead):"
        );
        println!();
        println!("| key | value | encoding | bytes |");
        println!("| --- | --- | --- | ---: |");
        let (key, usage, encoding) = &self.interval_key;
        println!("| interval total `{key}` | an integer | {encoding} | {usage} |");
        let (key, usage, encoding) = &self.fence_key;
        println!("| fence `{key}` | `SEQ:N` | {encoding} | {usage} |");
        println!();
        println!("## Process memory with a RedisStore");
        println!();
        println!("| what | bytes |");
        println!("| --- | ---: |");
        println!("| `size_of::<Counter>()` | {} |", self.counter);
        println!("| `size_of::<Worker>()` | {} |", self.worker);
        println!(
            "| `size_of::<RedisStore<MultiplexedConnection>>()` | {} |",
            self.store
        );
        println!(
            "| `Worker::task_size()`, `RedisStore<MultiplexedConnection>` and `TokioTimer` | {} |",
            self.task_multiplexed
        );
        println!(
            "| `Worker::task_size()`, `RedisStore<ConnectionManager>` and `TokioTimer` | {} |",
            self.task_manager
        );
        println!();
    }
}
