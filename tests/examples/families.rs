//! Fleets of counter families on one Redis. (What one key costs Redis inside a batch, against
//! a counter's flush, is the `script_cost` example's.)
//!
//! On a redis-server of its own it measures, in one run:
//!
//! 1. **Scale.** Participants (8 by default), each with a family of 100,000 keys at 1 s
//!    intervals, every key incremented every interval, all on one Redis. Over a window it
//!    reports the share of keys whose group total is known (sampled at every participant),
//!    Redis's CPU (`INFO cpu`, in cores), the slowest script run (`SLOWLOG`), flushes per
//!    second, and the client's heap per key (a counting allocator): once the keys are added,
//!    and the most it was while the fleet counted and flushed, sampled every interval. After
//!    the table, each CPU's steal time over each window (`/proc/stat`): on a virtual machine,
//!    time the hypervisor took from it, which the slow log counts into any run it fell in.
//! 2. **Many tenants.** One participant with a family of 20,000 keys at 100 ms intervals on one
//!    connection, every key incremented every 50 ms: the share of keys whose total is known,
//!    and Redis's CPU.
//!
//! ```sh
//! cargo run -p comcount-tests --release --example families
//! cargo run -p comcount-tests --release --example families -- --participants 4 --keys 50000
//! ```
//!
//! Flags: `--participants` (8), `--keys` per participant (100000), `--keys-per-partition`
//! (700: the partitions are the keys over it, rounded up), `--interval-ms` (1000),
//! `--tenants` of the second part (20000), `--seconds` measured per part (10), and
//! `--redis-first`, which lowers the priority of this process's threads (nice 10) once Redis
//! has started, so that on cores shared with the client Redis runs whenever it has work, as
//! on cores of its own, and `--cores-apart`, which gives Redis a CPU of its own (the last)
//! and this process the others, with `taskset`. A run at the defaults takes about a minute.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use comcount_core::Family;
use comcount_core::clock::TokioTimer;
use comcount_redis_rs::RedisStore;
use comcount_tests::bench::{
    Quiet, connect, cores_apart, evalsha_calls, redis_cpu, script_runs, steal_ms, take_flag,
    until_idle, watch_slow_runs,
};
use comcount_tests::server::RedisServer;
use redis::aio::ConnectionManager;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Keys per partition by default, the README's advice: well under the 1000 keys a flush
/// carries.
const KEYS_PER_PARTITION: usize = 700;

struct Settings {
    participants: usize,
    keys: usize,
    keys_per_partition: usize,
    interval: Duration,
    tenants: usize,
    window: Duration,
    redis_first: bool,
    cores_apart: bool,
}

impl Settings {
    fn from_args() -> Self {
        let mut settings = Self {
            participants: 8,
            keys: 100_000,
            keys_per_partition: KEYS_PER_PARTITION,
            interval: Duration::from_millis(1000),
            tenants: 20_000,
            window: Duration::from_secs(10),
            redis_first: false,
            cores_apart: false,
        };
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        settings.redis_first = take_flag(&mut args, "--redis-first");
        settings.cores_apart = take_flag(&mut args, "--cores-apart");
        for pair in args.chunks(2) {
            let value = pair.get(1).map(String::as_str).unwrap_or_default();
            let number = || -> u64 {
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value {value:?} for {}", pair[0]))
            };
            match pair[0].as_str() {
                "--participants" => settings.participants = number() as usize,
                "--keys" => settings.keys = number() as usize,
                "--keys-per-partition" => settings.keys_per_partition = number().max(1) as usize,
                "--interval-ms" => settings.interval = Duration::from_millis(number()),
                "--tenants" => settings.tenants = number() as usize,
                "--seconds" => settings.window = Duration::from_secs(number()),
                other => panic!("unknown flag {other}"),
            }
        }
        settings
    }
}

/// Lowers the priority of every thread of this process, so that Redis, a process of its own
/// at the usual priority, runs first whenever it has work.
fn yield_to_redis() {
    let threads = std::fs::read_dir("/proc/self/task").expect("/proc/self/task lists threads");
    for thread in threads {
        let id = thread.expect("a thread").file_name();
        let status = std::process::Command::new("renice")
            .args(["-n", "10", "-p"])
            .arg(&id)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("renice runs");
        assert!(status.success(), "renice of thread {id:?}: {status}");
    }
}

// Fleets of families.

struct FleetRow {
    label: String,
    keys: usize,
    partitions: u32,
    known: f64,
    cores: f64,
    flushes_per_s: f64,
    slowest_us: u64,
    p999_us: u64,
    /// The client's live heap per key once every key is added.
    bytes_per_key: f64,
    /// The most it was, sampled every interval, while the fleet counts and flushes.
    running_bytes_per_key: f64,
    /// Each CPU's steal time over the window, in milliseconds: time the hypervisor took it.
    steal_ms: Vec<(String, u64)>,
}

/// One fleet to run: `participants` families of `keys` keys each at `interval`, every key
/// incremented every `touch_every`, measured over `window` after three intervals of warm-up.
struct Fleet {
    label: &'static str,
    participants: usize,
    keys: usize,
    keys_per_partition: usize,
    interval: Duration,
    touch_every: Duration,
    window: Duration,
}

async fn fleet(url: &str, stats: &mut ConnectionManager, run: Fleet) -> FleetRow {
    let Fleet {
        label,
        participants,
        keys,
        keys_per_partition,
        interval,
        touch_every,
        window,
    } = run;
    let partitions = keys.div_ceil(keys_per_partition) as u32;
    let names: Arc<[String]> = (0..keys).map(|k| format!("tenant-{k}")).collect();
    let mut families = Vec::new();
    let mut workers = Vec::new();
    let heap = Region::new(GLOBAL);
    for _ in 0..participants {
        // A connection each, as participants in processes of their own have.
        let connection = connect(url).await;
        let (family, worker) = Family::builder(label, interval)
            .prefix("bench:")
            .partitions(partitions)
            .max_keys(keys)
            .diagnostics(Quiet)
            .build(RedisStore::new(connection), TokioTimer::new())
            .expect("valid settings");
        for name in names.iter() {
            family.increment(name, 1);
        }
        workers.push(worker);
        families.push(family);
    }
    // The keys alone: no worker has flushed yet.
    let grown = heap.change();
    let bytes_per_key = (grown.bytes_allocated as f64 - grown.bytes_deallocated as f64)
        / (participants * keys) as f64;
    for worker in workers {
        tokio::spawn(worker);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut drivers = Vec::new();
    for family in &families {
        let (family, names, stop) = (family.clone(), Arc::clone(&names), Arc::clone(&stop));
        drivers.push(tokio::spawn(async move {
            // Every key once per `touch_every`, spread over it in slices.
            let slices = 20;
            let slice = names.len().div_ceil(slices);
            while !stop.load(Ordering::Relaxed) {
                for part in names.chunks(slice.max(1)) {
                    for name in part {
                        family.increment(name, 1);
                    }
                    tokio::time::sleep(touch_every / slices as u32).await;
                }
            }
        }));
    }
    tokio::time::sleep(interval * 3).await;
    watch_slow_runs(stats).await;
    let calls = evalsha_calls(stats).await;
    let cpu = redis_cpu(stats).await;
    let steal_before = steal_ms();
    let started = Instant::now();
    let mut known = (0u64, 0u64);
    let mut running_bytes = 0f64;
    while started.elapsed() < window {
        tokio::time::sleep(interval).await;
        let live = heap.change();
        running_bytes =
            running_bytes.max(live.bytes_allocated as f64 - live.bytes_deallocated as f64);
        for family in &families {
            known.0 += names
                .iter()
                .filter(|name| family.group_total(name).is_some())
                .count() as u64;
            known.1 += keys as u64;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let steal = steal_ms()
        .into_iter()
        .zip(steal_before)
        .map(|((cpu, after), (_, before))| (cpu, after.saturating_sub(before)))
        .collect();
    let cores = (redis_cpu(stats).await - cpu) / elapsed;
    let calls_after = evalsha_calls(stats).await;
    let runs = script_runs(stats).await;
    let slowest_us = runs.last().copied().unwrap_or(0);
    let p999_us = runs
        .get(runs.len() * 999 / 1000)
        .copied()
        .unwrap_or(slowest_us);
    stop.store(true, Ordering::Relaxed);
    for driver in drivers {
        driver.await.expect("the driver runs");
    }
    for family in &families {
        family.close();
    }
    until_idle(stats).await;
    FleetRow {
        label: label.to_owned(),
        keys,
        partitions,
        known: known.0 as f64 / known.1.max(1) as f64,
        cores,
        flushes_per_s: (calls_after - calls) as f64 / elapsed,
        slowest_us,
        p999_us,
        bytes_per_key,
        running_bytes_per_key: running_bytes / (participants * keys) as f64,
        steal_ms: steal,
    }
}

fn print_fleet(row: &FleetRow, participants: usize, interval: Duration) {
    println!(
        "| {} | {participants} × {} | {} | {} ms | {:.1} % | {:.2} | {:.0} | {:.2} ms ({:.2} ms) | {:.0} B | {:.0} B |",
        row.label,
        row.keys,
        row.partitions,
        interval.as_millis(),
        100.0 * row.known,
        row.cores,
        row.flushes_per_s,
        row.slowest_us as f64 / 1000.0,
        row.p999_us as f64 / 1000.0,
        row.bytes_per_key,
        row.running_bytes_per_key,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let settings = Settings::from_args();
    let server = RedisServer::standalone();
    let url = server.url();
    let mut stats = connect(&url).await;
    println!("Redis 127.0.0.1:{}", server.port());
    if settings.redis_first {
        yield_to_redis();
        println!("Redis first: this process's threads at nice 10");
    }
    if settings.cores_apart {
        let core = cores_apart(&mut stats).await;
        println!("Cores apart: Redis on CPU {core} alone, this process on the others");
    }

    println!();
    println!("Fleets of families on one Redis ('known': keys whose group total is known, sampled");
    println!("every interval at every participant; 'Redis CPU' in cores; 'heap per key': the");
    println!("client's live heap over the keys, once they are added, and the most it was while");
    println!("the fleet counted and flushed, sampled every interval)");
    println!();
    println!(
        "| run | participants × keys | partitions | interval | known | Redis CPU | flushes/s | slowest run (99.9th percentile) | heap per key, added | heap per key, running (max) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let scale = Fleet {
        label: "scale",
        participants: settings.participants,
        keys: settings.keys,
        keys_per_partition: settings.keys_per_partition,
        interval: settings.interval,
        touch_every: settings.interval,
        window: settings.window,
    };
    let scale = fleet(&url, &mut stats, scale).await;
    print_fleet(&scale, settings.participants, settings.interval);
    let tenants_interval = Duration::from_millis(100);
    let tenants = Fleet {
        label: "tenants",
        participants: 1,
        keys: settings.tenants,
        keys_per_partition: settings.keys_per_partition,
        interval: tenants_interval,
        touch_every: Duration::from_millis(50),
        window: settings.window,
    };
    let tenants = fleet(&url, &mut stats, tenants).await;
    print_fleet(&tenants, 1, tenants_interval);
    println!();
    for row in [&scale, &tenants] {
        let steal: Vec<String> = row
            .steal_ms
            .iter()
            .map(|(cpu, ms)| format!("{cpu} {ms} ms"))
            .collect();
        println!(
            "Steal over the {} window, time the hypervisor took each CPU: {}",
            row.label,
            steal.join(", ")
        );
    }
}
