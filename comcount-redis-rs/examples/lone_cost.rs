//! What a lone counter's flush costs Redis, per flush applied.
//!
//! Builds `COUNTERS` counters (default 2,000), each with a name of its own and so a
//! participant alone, at `INTERVAL_MS` (default 1,000), all sharing one redis-rs
//! `ConnectionManager` (one multiplexed connection, with the settings
//! `RedisStore::manager_config` gives), and increments every one of them every 20 ms. After
//! `WARMUP_S` (default 10) it measures a window of `WINDOW_S` (default 20) and prints one line
//! of `name=value` pairs:
//!
//! - from the server, as deltas over the window: Redis CPU (`INFO cpu`, user + sys), `EVALSHA`
//!   calls and their `usec` (`INFO commandstats`), the script's `INCRBY` calls (one per flush
//!   applied), bytes in and out (`INFO stats`);
//! - from the counters' diagnostics, over the same window: `flush completed` events, and each
//!   other event by its message and its `outcome`, `reason` or `lanes`, where it has one;
//! - worked out: Redis CPU (µs) per flush applied, `EVALSHA` calls per flush applied, µs per
//!   call, bytes per call.
//!
//! It uses only what every version of the crate has, so that one copy of this file builds
//! against an older commit as well, for the same workload side by side on one server:
//!
//! ```sh
//! redis-server --port 6390 --save '' --appendonly no --daemonize yes
//! cargo run --release -p comcount-redis-rs --example lone_cost -- redis://127.0.0.1:6390
//! ```
//!
//! Every key is under the prefix `lone-cost:<pid>:`, and expires by itself.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_redis_rs::clock::TokioTimer;
use comcount_redis_rs::diagnostics::{Diagnostics, Event};
use comcount_redis_rs::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use comcount_redis_rs::{Counter, RedisStore, redis};

/// How often every counter is incremented.
const TICK: Duration = Duration::from_millis(20);

/// The counters' events, counted by message and by the attribute that tells them apart.
#[derive(Clone, Default)]
struct Tally(Arc<Mutex<BTreeMap<String, u64>>>);

impl Diagnostics for Tally {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        let mut key = event.message().to_string();
        event.attributes(|name, value| {
            if matches!(name, "outcome" | "reason" | "lanes") {
                key.push_str(&format!(" {name}={value}"));
            }
        });
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *counts.entry(key).or_default() += 1;
    }
}

impl Tally {
    fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The figures of `INFO cpu commandstats stats` this measures, by name.
async fn info(connection: &mut ConnectionManager) -> BTreeMap<String, f64> {
    let text: String = redis::cmd("INFO")
        .arg("cpu")
        .arg("commandstats")
        .arg("stats")
        .query_async(connection)
        .await
        .expect("INFO");
    let mut figures = BTreeMap::new();
    for line in text.lines() {
        let Some((name, value)) = line.trim().split_once(':') else {
            continue;
        };
        if let Some(command) = name.strip_prefix("cmdstat_") {
            // calls=N,usec=N,usec_per_call=F,...
            for field in value.split(',') {
                if let Some((k @ ("calls" | "usec"), v)) = field.split_once('=') {
                    figures.insert(format!("{command}_{k}"), v.parse().unwrap_or(0.0));
                }
            }
        } else if let Ok(v) = value.parse::<f64>() {
            figures.insert(name.to_string(), v);
        }
    }
    figures
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let counters = env_or("COUNTERS", 2000) as usize;
    let interval = Duration::from_millis(env_or("INTERVAL_MS", 1000));
    let warmup = Duration::from_secs(env_or("WARMUP_S", 10));
    let window = Duration::from_secs(env_or("WINDOW_S", 20));

    // The settings of RedisStore::manager_config, written out: older versions have none.
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_secs(60)))
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_number_of_retries(6)
        .set_min_delay(Duration::from_millis(100))
        .set_exponent_base(2.0)
        .set_max_delay(Duration::from_secs(1))
        .set_pipeline_buffer_size(65_536);
    let client = redis::Client::open(url.as_str()).expect("REDIS URL");
    let connection = ConnectionManager::new_with_config(client.clone(), config)
        .await
        .expect("connect");
    let mut admin = ConnectionManager::new(client).await.expect("connect");
    let store = RedisStore::new(connection);

    let tally = Tally::default();
    let prefix = format!("lone-cost:{}:", std::process::id());
    let mut handles = Vec::with_capacity(counters);
    for i in 0..counters {
        let (counter, worker) = Counter::builder(format!("c{i}"), interval)
            .prefix(prefix.clone())
            .diagnostics(tally.clone())
            .build(store.clone(), TokioTimer::new())
            .expect("counter");
        tokio::spawn(worker);
        handles.push(counter);
    }
    let handles: Arc<[Counter]> = handles.into();
    let driver = Arc::clone(&handles);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        loop {
            tick.tick().await;
            for counter in driver.iter() {
                counter.increment(1);
            }
        }
    });

    tokio::time::sleep(warmup).await;
    let (events_before, info_before) = (tally.snapshot(), info(&mut admin).await);
    tokio::time::sleep(window).await;
    let (events_after, info_after) = (tally.snapshot(), info(&mut admin).await);

    let delta = |name: &str| {
        info_after.get(name).copied().unwrap_or(0.0) - info_before.get(name).copied().unwrap_or(0.0)
    };
    let cpu_us = (delta("used_cpu_user") + delta("used_cpu_sys")) * 1e6;
    let calls = delta("evalsha_calls");
    let usec = delta("evalsha_usec");
    let incrby = delta("incrby_calls");
    let bytes_in = delta("total_net_input_bytes");
    let bytes_out = delta("total_net_output_bytes");
    let mut events = BTreeMap::new();
    for (key, after) in &events_after {
        let n = after - events_before.get(key).copied().unwrap_or(0);
        if n > 0 {
            events.insert(key.clone(), n);
        }
    }
    let completed = events.get("flush completed").copied().unwrap_or(0) as f64;
    let per = |x: f64, n: f64| if n > 0.0 { x / n } else { f64::NAN };

    let mut line = format!(
        "counters={counters} interval_ms={} window_s={} cpu_us={cpu_us:.0} evalsha={calls:.0} \
         evalsha_usec={usec:.0} incrby={incrby:.0} completed={completed:.0} bytes_in={bytes_in:.0} \
         bytes_out={bytes_out:.0} cpu_us_per_applied={:.2} calls_per_applied={:.4} \
         usec_per_call={:.2} cpu_us_per_call={:.2} in_per_call={:.1} out_per_call={:.1}",
        interval.as_millis(),
        window.as_secs(),
        per(cpu_us, incrby),
        per(calls, incrby),
        per(usec, calls),
        per(cpu_us, calls),
        per(bytes_in, calls),
        per(bytes_out, calls),
    );
    for (key, n) in &events {
        line.push_str(&format!(" [{key}]={n}"));
    }
    println!("{line}");
    // The counters' tasks and the driver go with the runtime; their keys expire.
    std::process::exit(0);
}
