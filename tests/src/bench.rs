//! What the benchmark examples share: the two rule sets they compare, Redis's own figures, and
//! the machine's load and clock.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use comcount_core::builder::Builder;
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_redis_rs::RedisStore;
use redis::aio::{ConnectionLike, ConnectionManager};

use crate::connect::manager_with;

/// The rules a fleet counts under: this library's defaults, or a flush an interval after each reply with no resends.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Rules {
    /// The defaults: aimed flushes, copies resent.
    Default,
    /// [`Builder::after_reply_without_resend`]: a flush an interval after each reply, none resent.
    AfterReply,
}

impl Rules {
    /// Both, defaults first.
    pub const BOTH: [Rules; 2] = [Rules::Default, Rules::AfterReply];

    /// Applies the rules to a counter being built.
    pub fn configure(self, builder: Builder) -> Builder {
        match self {
            Rules::Default => builder,
            Rules::AfterReply => builder.after_reply_without_resend(),
        }
    }

    /// The rules' name in a table.
    pub fn label(self) -> &'static str {
        match self {
            Rules::Default => "default",
            Rules::AfterReply => "after-reply",
        }
    }
}

/// The `key:value` lines of one `INFO` section.
pub async fn info(stats: &mut impl ConnectionLike, section: &str) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(stats)
        .await
        .expect("INFO answers");
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// Takes a flag without a value (`--cores-apart`) out of `args`; whether it was there.
pub fn take_flag(args: &mut Vec<String>, flag: &str) -> bool {
    let at = args.iter().position(|arg| arg == flag);
    at.map(|at| args.remove(at)).is_some()
}

/// Gives Redis a core of its own, as a server has in production: the server's threads on the
/// last CPU, this process's on the others (`taskset`). Returns Redis's CPU.
pub async fn cores_apart(stats: &mut impl ConnectionLike) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    assert!(
        cpus >= 2,
        "--cores-apart needs two CPUs or more, this machine has {cpus}"
    );
    let redis = info(stats, "server").await;
    let pid = redis.get("process_id").expect("INFO server has process_id");
    let pin = |cpus: String, pid: &str| {
        let status = std::process::Command::new("taskset")
            .args(["-a", "-p", "-c", &cpus, pid])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("taskset runs");
        assert!(status.success(), "taskset -c {cpus} of {pid}: {status}");
    };
    pin((cpus - 1).to_string(), pid);
    pin(format!("0-{}", cpus - 2), &std::process::id().to_string());
    cpus - 1
}

/// The CPU time Redis has used, `used_cpu_sys + used_cpu_user`, in seconds.
pub async fn redis_cpu(stats: &mut impl ConnectionLike) -> f64 {
    let cpu = info(stats, "cpu").await;
    let number = |key: &str| -> f64 {
        cpu.get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("INFO cpu has no {key}"))
    };
    number("used_cpu_sys") + number("used_cpu_user")
}

/// `EVALSHA` calls so far, from `INFO commandstats`.
pub async fn evalsha_calls(stats: &mut impl ConnectionLike) -> u64 {
    info(stats, "commandstats")
        .await
        .get("cmdstat_evalsha")
        .and_then(|v| {
            v.split(',')
                .find_map(|part| part.strip_prefix("calls="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Waits until Redis has worked off what earlier runs queued: no `EVALSHA` for 300 ms.
pub async fn until_idle(stats: &mut impl ConnectionLike) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = evalsha_calls(stats).await;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = evalsha_calls(stats).await;
        if now == last {
            return;
        }
        last = now;
    }
}

/// Diagnostics that drop every event, for benchmarks that count in a store of their own.
pub struct Quiet;

impl Diagnostics for Quiet {
    fn record(&self, _name: &str, _event: &Event<'_>) {}
}

/// Each CPU's steal time so far, in milliseconds, from `/proc/stat` (empty where there is
/// none, as off Linux).
pub fn steal_ms() -> Vec<(String, u64)> {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return Vec::new();
    };
    // The eighth number of a `cpuN` line is steal, in clock ticks of 1/100 s.
    stat.lines()
        .filter(|line| line.starts_with("cpu") && !line.starts_with("cpu "))
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let cpu = fields.next()?.to_owned();
            let ticks: u64 = fields.nth(7)?.parse().ok()?;
            Some((cpu, ticks * 10))
        })
        .collect()
}

/// The CPU time this process has used so far, user and system, in seconds, from
/// `/proc/self/stat` (0 where there is none, as off Linux).
pub fn process_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // The command name, in parentheses, may hold spaces: count fields after its end. `utime`
    // and `stime` are fields 14 and 15, in clock ticks of 1/100 s.
    let Some((_, after_name)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|ticks| ticks.parse::<u64>().ok())
        .sum::<u64>() as f64
        / 100.0
}

/// The load average over the last 1, 5 and 15 minutes, from `/proc/loadavg` ("unknown" where
/// there is none).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The number of the interval of length `interval` that the wall clock is in: the store's,
/// when the store runs on this machine.
pub fn wall_interval(interval: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_millis() / interval.as_millis()) as u64
}

/// A connection that reconnects, with the store's settings but no response timeout: a
/// family's first flushes queue behind each other.
pub async fn connect(url: &str) -> ConnectionManager {
    let config = RedisStore::manager_config()
        .set_response_timeout(None)
        .set_connection_timeout(Some(Duration::from_secs(60)));
    manager_with(url, config).await
}

pub async fn command(stats: &mut ConnectionManager, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async::<redis::Value>(stats)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
}

/// Clears the slow log and logs every script run from now on.
pub async fn watch_slow_runs(stats: &mut ConnectionManager) {
    command(stats, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]).await;
    command(stats, &["CONFIG", "SET", "slowlog-max-len", "100000"]).await;
    command(stats, &["SLOWLOG", "RESET"]).await;
}

/// The script runs (`EVALSHA`) in the slow log, in microseconds, shortest first.
pub async fn script_runs(stats: &mut ConnectionManager) -> Vec<u64> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100_000)
        .query_async(stats)
        .await
        .expect("SLOWLOG GET answers");
    let evalsha = |args: Option<&redis::Value>| match args {
        Some(redis::Value::Array(args)) => matches!(
            args.first(),
            Some(redis::Value::BulkString(name)) if name.eq_ignore_ascii_case(b"evalsha")
        ),
        _ => false,
    };
    let mut runs: Vec<u64> = entries
        .iter()
        .filter_map(|entry| match entry {
            redis::Value::Array(fields) if evalsha(fields.get(3)) => match fields.get(2) {
                Some(redis::Value::Int(us)) => Some(*us as u64),
                _ => None,
            },
            _ => None,
        })
        .collect();
    runs.sort_unstable();
    runs
}
