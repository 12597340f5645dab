//! Overload: many counters (one per tenant) on one shared redis-rs `ConnectionManager` (one
//! multiplexed connection that reconnects) to one Redis, asking for more flushes than the store
//! can serve.
//!
//! On a redis-server of its own it measures, in one run:
//!
//! 1. **Capacity.** Closed loops at saturation on the same client path: 256 tasks on one
//!    shared multiplexed connection, each sending the flush script through `RedisStore` and
//!    sending the next as soon as its reply comes. Applied flushes per second is the capacity;
//!    it is measured before and after the sweep, on two kinds of keys. On the keys of 20,000
//!    counters (or of the sweep's largest count) with the sweep's interval, taken in turn, each by its own participant, every
//!    call does what a flush of the sweep does (an interval key made and expired, a fence read
//!    and set): the reference for applied/capacity. On one key with an interval of 1000 days
//!    and a fresh participant per call, every call is the cheapest flush there is:
//!    applied/one-key.
//! 2. **Sweep.** 2 000, 5 000, 10 000 and 20 000 counters with a 100 ms interval, each
//!    incremented every 50 ms, under the default rules and then under `after_reply_without_resend()`, each
//!    on a fresh shared connection. After a warm-up, over a window it reports flushes asked
//!    (counters × intervals), applied (`flush completed`), resent copies (copies of a flush
//!    beyond its first), wrong-interval replies and error replies (counted in a wrapping
//!    `Store`), Redis CPU per applied flush (`INFO cpu`), this process's CPU per applied flush
//!    (`/proc/self/stat`; the closed loops print it too), polls of the counters' background
//!    tasks per applied flush (each poll is a wake-up: two a flush at the least, one to send
//!    and one for the reply), the share of counters that know the group's total (sampled
//!    every 100 ms), the most it could be given what was applied, the share of counters that
//!    never knew it in the window, the longest gap between two applied flushes of any
//!    counter, and the applied rate against both capacities.
//!
//! redis-rs gives a connection a response timeout of 500 ms by default
//! (`redis::aio::ConnectionManagerConfig`); with thousands of commands queued on one connection it
//! turns waiting into errors. The example sets none, so that only the counters decide when a
//! reply is late; `--response-timeout-ms 500` restores the default.
//!
//! ```sh
//! cargo run -p comcount-tests --release --example overload
//! cargo run -p comcount-tests --release --example overload -- --counters 2000,20000 --seconds 10
//! ```
//!
//! Flags: `--counters` (`2000,5000,10000,20000`), `--interval-ms` (100), `--warmup-s` (3),
//! `--seconds` measured per setting (12), `--response-timeout-ms` (`none`),
//! `--pipeline-buffer` (the commands the sweep's connection queues before a caller waits;
//! `RedisStore::manager_config`'s 4096 unless given, redis-rs's own default is 50), and
//! `--cores-apart`, which gives Redis a CPU of its own (the last) and this process the others,
//! with `taskset`, as a server has in production: the closed loops and the sweep then measure
//! the store's capacity and the counters' rate without the client taking Redis's CPU (on two
//! CPUs, the client then has one). A run at the defaults takes about three minutes.

mod capacity;
mod options;
mod record;
mod sweep;
mod table;

use std::time::Duration;

use comcount_redis_rs::RedisStore;
use comcount_tests::bench::{Rules, cores_apart, load_average, until_idle};
use comcount_tests::connect::manager_with;
use comcount_tests::server::RedisServer;
use redis::aio::ConnectionManager;

use capacity::{Load, capacity};
use options::Settings;
use sweep::run;
use table::{print_capacity, print_header, print_row};

/// One shared connection (a `ConnectionManager`: one multiplexed connection that reconnects)
/// with the chosen response timeout and, if one is given, pipeline buffer.
async fn connect(
    url: &str,
    response_timeout: Option<Duration>,
    pipeline_buffer: Option<usize>,
) -> ConnectionManager {
    let mut config = RedisStore::manager_config().set_response_timeout(response_timeout);
    if let Some(size) = pipeline_buffer {
        config = config.set_pipeline_buffer_size(size);
    }
    manager_with(url, config).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let settings = Settings::from_args();
    let server = RedisServer::standalone();
    let url = server.url();
    let mut stats = connect(&url, Some(Duration::from_secs(30)), None).await;
    println!(
        "Redis 127.0.0.1:{}, load average {} at the start",
        server.port(),
        load_average()
    );
    if settings.cores_apart {
        let core = cores_apart(&mut stats).await;
        println!("Cores apart: Redis on CPU {core} alone, this process on the others");
    }
    println!();
    let names = settings
        .counters
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(20_000) as u64;
    let counters = Load::Counters {
        names,
        interval_ms: settings.interval.as_millis() as u64,
    };
    let mut capacities = Vec::new();
    for load in [Load::OneKey, counters] {
        capacities.push(("before the sweep", capacity(&url, &mut stats, load).await));
        until_idle(&mut stats).await;
    }
    let mut rows = Vec::new();
    for &n in &settings.counters {
        for rules in Rules::BOTH {
            rows.push(run(&url, &mut stats, &settings, n, rules).await);
            until_idle(&mut stats).await;
            eprintln!("{n} counters, {}: done", rules.label());
        }
    }
    for load in [Load::OneKey, counters] {
        capacities.push(("after the sweep", capacity(&url, &mut stats, load).await));
        until_idle(&mut stats).await;
    }
    // The reference: the mean of the closed loops on the counters' keys, which do the sweep's
    // work per call; the one-key loop is printed next to it, as the cheapest flush there is.
    let mean = |one_key: bool| {
        let runs: Vec<f64> = capacities
            .iter()
            .filter(|(_, c)| matches!(c.load, Load::OneKey) == one_key)
            .map(|(_, c)| c.applied_per_s)
            .collect();
        runs.iter().sum::<f64>() / runs.len().max(1) as f64
    };
    let (reference, one_key) = (mean(false), mean(true));
    print_capacity(&capacities);
    print_header(&settings);
    for row in &rows {
        print_row(row, settings.interval, reference, one_key);
    }
    println!();
    println!(
        "applied/capacity is against the mean of the two closed loops on the counters' keys, \
         {reference:.0} applied/s; applied/one-key against the mean of the two on one key, \
         {one_key:.0} applied/s. Load average {} at the end.",
        load_average()
    );
}
