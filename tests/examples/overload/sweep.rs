//! 2. The sweep: many counters on one shared connection, under each rule.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use comcount_core::Counter;
use comcount_core::clock::TokioTimer;
use comcount_core::testing::Recorded;
use comcount_redis_rs::RedisStore;
use comcount_tests::bench::{Rules, evalsha_calls, process_cpu, redis_cpu};
use redis::aio::ConnectionManager;

use crate::connect;
use crate::options::Settings;
use crate::record::{Counting, Gaps, Reading, Tallied, Tally};

/// How often every counter is incremented.
pub(crate) const TOUCH_EVERY: Duration = Duration::from_millis(50);
/// How often every counter is asked whether it knows the group's total.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(100);

pub(crate) struct Row {
    pub(crate) counters: usize,
    pub(crate) rules: Rules,
    pub(crate) seconds: f64,
    pub(crate) counts: Reading,
    pub(crate) redis_cpu: f64,
    /// This process's CPU time in the window, the counters' and the driver's, in seconds.
    pub(crate) client_cpu: f64,
    pub(crate) evalsha: u64,
    pub(crate) known: Known,
    pub(crate) longest_gap_ms: u64,
    pub(crate) p99_gap_ms: u64,
}

/// Builds `n` counters on one fresh shared connection, drives them, and measures the window.
pub(crate) async fn run(
    url: &str,
    stats: &mut ConnectionManager,
    settings: &Settings,
    n: usize,
    rules: Rules,
) -> Row {
    let connection = connect(url, settings.response_timeout, settings.pipeline_buffer).await;
    let tally = Arc::new(Tally::default());
    let gaps = Arc::new(Gaps::new(n));
    let prefix = format!("overload:{}:{n}:", rules.label());
    let mut counters = Vec::with_capacity(n);
    for index in 0..n {
        let counting = Counting {
            tally: Arc::clone(&tally),
            last_seq: Mutex::default(),
        };
        let store = Recorded::new(RedisStore::new(connection.clone()), Arc::new(counting));
        let diagnostics = Tallied {
            index,
            tally: Arc::clone(&tally),
            gaps: Arc::clone(&gaps),
        };
        let builder = Counter::builder(format!("tenant{index}"), settings.interval)
            .prefix(prefix.as_str())
            .diagnostics(diagnostics);
        let (counter, worker) = rules
            .configure(builder)
            .build(store, TokioTimer::new())
            .expect("valid settings");
        let tally = Arc::clone(&tally);
        tokio::spawn(async move {
            let mut worker = std::pin::pin!(worker);
            std::future::poll_fn(|cx| {
                tally.polls.fetch_add(1, Ordering::Relaxed);
                worker.as_mut().poll(cx)
            })
            .await
        });
        counters.push(counter);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let driver = tokio::spawn(drive(counters.clone(), Arc::clone(&stop)));
    tokio::time::sleep(settings.warmup).await;

    gaps.open_window();
    let before = tally.read();
    let (start, cpu_before, client_before, evalsha_before) = (
        Instant::now(),
        redis_cpu(stats).await,
        process_cpu(),
        evalsha_calls(stats).await,
    );
    let known = sample_known(&counters, settings.window).await;
    let (seconds, cpu_after, client_after, evalsha_after) = (
        start.elapsed().as_secs_f64(),
        redis_cpu(stats).await,
        process_cpu(),
        evalsha_calls(stats).await,
    );
    let counts = tally.read().since(before);
    let mut longest = gaps.close_window();

    stop.store(true, Ordering::Relaxed);
    driver.await.expect("the driver ends");
    for counter in &counters {
        counter.close();
    }
    drop(connection);
    longest.sort_unstable();
    Row {
        counters: n,
        rules,
        seconds,
        counts,
        redis_cpu: cpu_after - cpu_before,
        client_cpu: client_after - client_before,
        evalsha: evalsha_after - evalsha_before,
        known,
        longest_gap_ms: longest.last().copied().unwrap_or(0),
        p99_gap_ms: longest[(longest.len() * 99 / 100).min(longest.len() - 1)],
    }
}

/// Increments every counter every few ms, so that each has something to flush every interval.
pub(crate) async fn drive(counters: Vec<Counter>, stop: Arc<AtomicBool>) {
    let mut ticks = tokio::time::interval(TOUCH_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        ticks.tick().await;
        for counter in &counters {
            counter.increment(1);
        }
    }
}

/// How often the counters knew the group's total over the window.
pub(crate) struct Known {
    /// The share of (sample, counter) pairs in which the counter knew it.
    pub(crate) share: f64,
    /// The share of counters that knew it in no sample.
    pub(crate) never: f64,
}

/// Samples every counter every [`SAMPLE_EVERY`] for `window`.
pub(crate) async fn sample_known(counters: &[Counter], window: Duration) -> Known {
    let deadline = Instant::now() + window;
    let mut known = vec![0u32; counters.len()];
    let mut rounds = 0u64;
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    while Instant::now() < deadline {
        ticks.tick().await;
        for (known, counter) in known.iter_mut().zip(counters) {
            *known += u32::from(counter.group_total().is_some());
        }
        rounds += 1;
    }
    let samples = (rounds * counters.len() as u64).max(1) as f64;
    let never = known.iter().filter(|k| **k == 0).count();
    Known {
        share: known.iter().map(|k| u64::from(*k)).sum::<u64>() as f64 / samples,
        never: never as f64 / counters.len().max(1) as f64,
    }
}
