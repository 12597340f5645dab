//! What a key update costs Redis in a fleet of many participants in one process: each
//! participant a family of its own on a connection of its own, all incrementing keys drawn at
//! random from one set, on one Redis this example starts.
//!
//! ```sh
//! cargo run -p comcount-tests --release --example key_updates
//! cargo run -p comcount-tests --release --example key_updates -- --participants 8 --partitions 2
//! ```
//!
//! Flags: `--participants` (100), `--keys` (20000), `--rate` of increments a second over the
//! whole fleet (200000), `--partitions` (29, about 700 keys each), `--interval-ms` (1000),
//! `--seconds` measured (10), and `--cores-apart` (Redis on a CPU of its own, as in
//! `families`).
//!
//! After three intervals it measures, over the window: **entries/s**, the entries (a key of a
//! participant's flush) of the flushes counted, from the `FlushCompleted` events; **Redis
//! CPU**, the delta of `used_cpu_user + used_cpu_sys`, in cores and per entry (a key update:
//! one key of one participant flushed); **slowest run**, the longest `EVALSHA` in the
//! `SLOWLOG` (every command logged), and its 99.9th percentile, the server's wall time; and
//! **known**, the share of increments whose key had its group total known right then
//! (`group_total` read before each increment, which puts in the flushes no key the increment
//! does not).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use comcount_core::Family;
use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_redis_rs::RedisStore;
use comcount_tests::bench::{
    command, connect, cores_apart, evalsha_calls, redis_cpu, script_runs, take_flag, until_idle,
    watch_slow_runs,
};
use comcount_tests::server::RedisServer;
use redis::aio::ConnectionManager;

/// How often the drivers increment: the rate is spread over ticks of this length.
const TICK: Duration = Duration::from_millis(10);

struct Settings {
    participants: usize,
    keys: usize,
    rate: u64,
    partitions: u32,
    interval: Duration,
    window: Duration,
    cores_apart: bool,
}

impl Settings {
    fn from_args() -> Self {
        let mut settings = Self {
            participants: 100,
            keys: 20_000,
            rate: 200_000,
            partitions: 29,
            interval: Duration::from_millis(1000),
            window: Duration::from_secs(10),
            cores_apart: false,
        };
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        settings.cores_apart = take_flag(&mut args, "--cores-apart");
        for pair in args.chunks(2) {
            let value = pair.get(1).map(String::as_str).unwrap_or_default();
            let number = || -> u64 {
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value {value:?} for {}", pair[0]))
            };
            match pair[0].as_str() {
                "--participants" => settings.participants = number().max(1) as usize,
                "--keys" => settings.keys = number().max(1) as usize,
                "--rate" => settings.rate = number(),
                "--partitions" => settings.partitions = number().max(1) as u32,
                "--interval-ms" => settings.interval = Duration::from_millis(number()),
                "--seconds" => settings.window = Duration::from_secs(number()),
                other => panic!("unknown flag {other}"),
            }
        }
        settings
    }
}

/// Counts the entries and the flushes counted, over every participant.
#[derive(Clone, Default)]
struct Flushed {
    entries: Arc<AtomicU64>,
    flushes: Arc<AtomicU64>,
}

impl Diagnostics for Flushed {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        if let Event::FlushCompleted { keys, .. } = event {
            self.entries.fetch_add(*keys as u64, Relaxed);
            self.flushes.fetch_add(1, Relaxed);
        }
    }
}

/// Increments and, of those, the ones whose key knew its total.
#[derive(Default)]
struct Known {
    increments: AtomicU64,
    known: AtomicU64,
}

/// Redis's CPU (µs) and `EVALSHA` calls, then the fleet's counts, read together.
struct Snapshot {
    at: Instant,
    /// CPU, calls, entries, flushes, increments, increments that knew their total.
    counts: [u64; 6],
}

impl Snapshot {
    async fn take(stats: &mut ConnectionManager, flushed: &Flushed, known: &Known) -> Self {
        let calls = evalsha_calls(stats).await;
        let cpu = (redis_cpu(stats).await * 1e6) as u64;
        Self {
            at: Instant::now(),
            counts: [
                cpu,
                calls,
                flushed.entries.load(Relaxed),
                flushed.flushes.load(Relaxed),
                known.increments.load(Relaxed),
                known.known.load(Relaxed),
            ],
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let settings = Settings::from_args();
    let Settings {
        participants,
        keys,
        rate,
        partitions,
        interval,
        window,
        ..
    } = settings;
    let server = RedisServer::standalone();
    let url = server.url();
    let mut stats = connect(&url).await;
    if settings.cores_apart {
        let core = cores_apart(&mut stats).await;
        println!("Cores apart: Redis on CPU {core} alone, this process on the others");
    }
    let flushed = Flushed::default();
    let names: Arc<[String]> = (0..keys).map(|k| format!("tenant-{k}")).collect();
    let mut families = Vec::new();
    for _ in 0..participants {
        let (family, worker) = Family::builder("updates", interval)
            .prefix("bench:")
            .partitions(partitions)
            .max_keys(keys)
            .diagnostics(flushed.clone())
            .build(RedisStore::new(connect(&url).await), TokioTimer::new())
            .expect("valid settings");
        tokio::spawn(worker);
        families.push(family);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let known = Arc::new(Known::default());
    // Two drivers, each for half the participants, each tick incrementing the tick's share of
    // the rate on keys drawn at random.
    let mut drivers = Vec::new();
    for half in families.chunks(participants.div_ceil(2)) {
        let (half, names, stop, known) = (
            half.to_vec(),
            Arc::clone(&names),
            Arc::clone(&stop),
            Arc::clone(&known),
        );
        let per_tick = rate as f64 * TICK.as_secs_f64() / participants as f64;
        drivers.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(TICK);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut owed = vec![0f64; half.len()];
            while !stop.load(Relaxed) {
                ticks.tick().await;
                let (mut increments, mut with_total) = (0, 0);
                for (family, owed) in half.iter().zip(&mut owed) {
                    *owed += per_tick;
                    while *owed >= 1.0 {
                        *owed -= 1.0;
                        let name = &names[fastrand::usize(..names.len())];
                        with_total += u64::from(family.group_total(name).is_some());
                        family.increment(name, 1);
                        increments += 1;
                    }
                }
                known.increments.fetch_add(increments, Relaxed);
                known.known.fetch_add(with_total, Relaxed);
            }
        }));
    }
    tokio::time::sleep(interval * 3).await;
    watch_slow_runs(&mut stats).await;
    // Only the runs of half a millisecond or more: a log of every run would hold more than
    // this process could read back while the fleet runs.
    command(
        &mut stats,
        &["CONFIG", "SET", "slowlog-log-slower-than", "500"],
    )
    .await;
    let before = Snapshot::take(&mut stats, &flushed, &known).await;
    tokio::time::sleep(window).await;
    let after = Snapshot::take(&mut stats, &flushed, &known).await;
    let elapsed = (after.at - before.at).as_secs_f64();
    let [cpu, calls, entries, flushes, increments, with_total] =
        std::array::from_fn(|i| after.counts[i] - before.counts[i]);
    let cores = cpu as f64 / 1e6 / elapsed;
    let runs = script_runs(&mut stats).await;
    stop.store(true, Relaxed);
    for driver in drivers {
        driver.await.expect("the driver runs");
    }
    for family in &families {
        family.close();
    }
    until_idle(&mut stats).await;

    let slowest = runs.last().copied().unwrap_or(0);
    // The runs logged are the longest: the 99.9th percentile is one of them if there are
    // enough, else under the threshold.
    let above = (calls / 1000) as usize;
    let p999 = match runs.len().checked_sub(above + 1) {
        Some(at) => format!("{:.2} ms", runs[at] as f64 / 1000.0),
        None => "< 0.50 ms".to_owned(),
    };
    println!(
        "| participants | keys | partitions | increments/s | entries/s | flushes/s (EVALSHA/s) | Redis CPU | Redis CPU per entry | slowest run (99.9th percentile) | known |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| {participants} | {keys} | {partitions} | {:.0} | {:.0} | {:.0} ({:.0}) | {cores:.2} | {:.2} µs | {:.2} ms ({p999}) | {:.1} % |",
        increments as f64 / elapsed,
        entries as f64 / elapsed,
        flushes as f64 / elapsed,
        calls as f64 / elapsed,
        cpu as f64 / entries.max(1) as f64,
        slowest as f64 / 1000.0,
        100.0 * with_total as f64 / increments.max(1) as f64,
    );
}
