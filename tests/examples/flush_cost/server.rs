//! Reading the server and the process, and the connections to the server.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use comcount_redis_rs::RedisStore;
use comcount_tests::bench::info;
use comcount_tests::connect;
use redis::aio::{ConnectionManager, MultiplexedConnection};

use crate::WARMUP;

/// One moment's counters of the server and of this process.
pub(crate) struct Snapshot {
    pub(crate) at: Instant,
    /// `cmdstat_NAME` → (calls, usec).
    pub(crate) commands: HashMap<String, (u64, u64)>,
    /// used_cpu_sys + used_cpu_user, in seconds.
    pub(crate) redis_cpu: f64,
    /// This process's user + system time, in seconds.
    pub(crate) client_cpu: f64,
    pub(crate) used_memory: u64,
    pub(crate) keys: u64,
}

impl Snapshot {
    pub(crate) async fn take(stats: &mut MultiplexedConnection) -> Self {
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
    pub(crate) fn command_since(&self, before: &Snapshot, command: &str) -> (u64, u64) {
        let now = self.commands.get(command).copied().unwrap_or_default();
        let then = before.commands.get(command).copied().unwrap_or_default();
        (now.0 - then.0, now.1 - then.1)
    }
}

/// `calls=…,usec=…,…` from `INFO commandstats`.
pub(crate) fn calls_and_usec(value: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        value
            .split(',')
            .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
    };
    Some((field("calls")?, field("usec")?))
}

/// User + system CPU seconds of this process, from `/proc/self/stat`.
pub(crate) fn process_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("Linux has /proc/self/stat");
    // Fields after the command name, which ends with the last ')': state is field 3, utime 14
    // and stime 15.
    let rest = &stat[stat.rfind(')').expect("stat has a command name") + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().expect("utime is a number")
        + fields[12].parse::<f64>().expect("stime is a number");
    ticks / clock_ticks_per_s()
}

pub(crate) fn clock_ticks_per_s() -> f64 {
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
pub(crate) struct Machine {
    pub(crate) cores: usize,
    pub(crate) cpu: String,
    pub(crate) redis: String,
}

impl Machine {
    pub(crate) async fn read(stats: &mut MultiplexedConnection) -> Self {
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

    pub(crate) fn print(
        &self,
        load_before: &str,
        load_after: &str,
        took: Duration,
        window: Duration,
    ) {
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

/// A participant's connection, which reconnects: the store's settings, with redis-rs's default
/// response timeout of 500 ms, which the figures were first measured with.
pub(crate) async fn participant_connection(url: &str) -> ConnectionManager {
    let config =
        RedisStore::manager_config().set_response_timeout(Some(Duration::from_millis(500)));
    connect::manager_with(url, config).await
}

/// Drops every key, after letting closed counters' last flushes land.
pub(crate) async fn clear(stats: &mut MultiplexedConnection) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let () = redis::cmd("FLUSHALL")
        .query_async(stats)
        .await
        .expect("FLUSHALL answers");
}
