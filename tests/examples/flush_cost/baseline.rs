//! 1. The baseline: redis-benchmark against the same server.

use std::process::Command;

use comcount_core::{FlushRequest, KeySpace, ParticipantId};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

use crate::server::Snapshot;

/// `redis-benchmark` requests per run.
pub(crate) const BENCHMARK_REQUESTS: u64 = 150_000;

/// `redis-benchmark` connections.
pub(crate) const BENCHMARK_CLIENTS: u32 = 50;

/// The script `redis-benchmark` runs as the floor of any script call.
pub(crate) const BARE_SCRIPT: &str = "return redis.call('INCRBY', KEYS[1], ARGV[1])";

pub(crate) struct Benchmarked {
    pub(crate) requests_per_s: f64,
    /// Redis's own time per call, `usec` / `calls` of the command.
    pub(crate) usec_per_call: f64,
    /// Redis CPU (user + system) per call, in µs: what the call costs the server in all,
    /// network included.
    pub(crate) cpu_per_call: f64,
}

pub(crate) struct Baseline {
    pub(crate) incrby: Benchmarked,
    pub(crate) bare_script: Benchmarked,
    pub(crate) flush_script: Benchmarked,
    pub(crate) flush_args: String,
}

pub(crate) async fn baseline(port: u16, stats: &mut MultiplexedConnection) -> Baseline {
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
pub(crate) async fn benchmark(
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
    pub(crate) fn print(&self) {
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
