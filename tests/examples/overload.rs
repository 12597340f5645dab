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
//!    incremented every 50 ms, under the default rules and then under `original_rules()`, each
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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::{Diagnostics, Event, Reporter};
use comcount_core::testing::{FlushLog, Recorded};
use comcount_core::{
    Counter, FlushReply, FlushRequest, KeySpace, Outcome, ParticipantId, Store, StoreError,
};
use comcount_redis_rs::RedisStore;
use comcount_tests::bench::{
    Quiet, Rules, cores_apart, evalsha_calls, load_average, process_cpu, redis_cpu, take_flag,
    until_idle,
};
use comcount_tests::connect::manager_with;
use comcount_tests::server::RedisServer;
use redis::aio::ConnectionManager;

/// Tasks in the capacity loop, each with one flush in flight.
const CAPACITY_TASKS: usize = 256;
/// How long the capacity loop is measured, after a second of warm-up.
const CAPACITY_WINDOW: Duration = Duration::from_secs(5);
/// How often every counter is incremented.
const TOUCH_EVERY: Duration = Duration::from_millis(50);
/// How often every counter is asked whether it knows the group's total.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

struct Settings {
    counters: Vec<usize>,
    interval: Duration,
    warmup: Duration,
    window: Duration,
    response_timeout: Option<Duration>,
    /// The connection's pipeline buffer; `None` keeps `RedisStore::manager_config`'s.
    pipeline_buffer: Option<usize>,
    cores_apart: bool,
}

impl Settings {
    fn from_args() -> Self {
        let mut settings = Self {
            counters: vec![2_000, 5_000, 10_000, 20_000],
            interval: Duration::from_millis(100),
            warmup: Duration::from_secs(3),
            window: Duration::from_secs(12),
            response_timeout: None,
            pipeline_buffer: None,
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
                "--counters" => {
                    settings.counters = value
                        .split(',')
                        .map(|n| n.parse().expect("--counters takes numbers"))
                        .collect()
                }
                "--interval-ms" => settings.interval = Duration::from_millis(number()),
                "--warmup-s" => settings.warmup = Duration::from_secs(number()),
                "--seconds" => settings.window = Duration::from_secs(number()),
                "--pipeline-buffer" => settings.pipeline_buffer = Some(number() as usize),
                "--response-timeout-ms" => {
                    settings.response_timeout =
                        (value != "none").then(|| Duration::from_millis(number()))
                }
                flag => panic!(
                    "unknown flag {flag}; use --counters, --interval-ms, --warmup-s, --seconds, \
                     --response-timeout-ms, --pipeline-buffer, --cores-apart"
                ),
            }
        }
        settings
    }

    fn timeout_label(&self) -> String {
        self.response_timeout
            .map_or("none".to_owned(), |t| format!("{} ms", t.as_millis()))
    }
}

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

// 1. Capacity: a closed loop at saturation.

struct Capacity {
    load: Load,
    applied_per_s: f64,
    /// The share of calls applied.
    applied_share: f64,
    cpu_per_applied_us: f64,
    client_cpu_per_applied_us: f64,
}

/// What the capacity loop's flushes write.
#[derive(Clone, Copy)]
enum Load {
    /// One counter's key, with an interval of 1000 days and a fresh participant per call, so
    /// that every call is applied: the cheapest flush there is, since it finds its keys in
    /// the CPU's cache and no key expires.
    OneKey,
    /// The keys of `names` counters with the sweep's interval, taken in turn, each by its own
    /// participant, as many counters that flush back to back would write them: every call
    /// makes an interval key that expires three intervals later, and reads and sets a fence
    /// of its own.
    Counters { names: u64, interval_ms: u64 },
}

impl Load {
    fn label(self) -> String {
        match self {
            Load::OneKey => "one key".to_owned(),
            Load::Counters { names, .. } => format!("{names} counters' keys"),
        }
    }

    /// The request of the `call`-th flush (counted from 1).
    fn request(self, call: u64) -> FlushRequest {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("the clock is past 1970")
            .as_millis() as u64;
        match self {
            Load::OneKey => {
                let interval_ms: u64 = 1000 * 86_400_000;
                FlushRequest::new(
                    KeySpace::counter("capacity:", "c"),
                    ParticipantId::random(),
                    interval_ms,
                )
                .with_expect(now_ms / interval_ms)
                .with_fence_ttl_ms(60_000)
            }
            Load::Counters { names, interval_ms } => {
                // A name comes round again `names` calls later, after a few intervals at the
                // store's pace, so its participant has not added to the interval yet; the call
                // number is a sequence number that grows for every participant.
                let name = call % names;
                FlushRequest::new(
                    KeySpace::counter("capacity:", &format!("tenant{name}")),
                    ParticipantId::from_u64(name + 1),
                    interval_ms,
                )
                .with_seq(call)
                .with_expect(now_ms / interval_ms)
            }
        }
        .with_amount(1)
    }
}

/// Applied flushes per second when every reply is followed at once by the next flush.
async fn capacity(url: &str, stats: &mut ConnectionManager, load: Load) -> Capacity {
    let store = Arc::new(RedisStore::new(connect(url, None, None).await));
    let report = Reporter::new("capacity", Arc::new(Quiet));
    // Call numbers go on from the last capacity loop, so that a fence left by one is behind
    // every sequence number of the next.
    static CALLS: AtomicU64 = AtomicU64::new(1);
    let calls = &CALLS;
    let applied = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..CAPACITY_TASKS {
        let (store, report, applied, stop) = (
            Arc::clone(&store),
            report.clone(),
            Arc::clone(&applied),
            Arc::clone(&stop),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let request = load.request(calls.fetch_add(1, Ordering::Relaxed));
                let reply = store.flush(&request, &report).await.expect("a reply");
                if reply.outcome == Outcome::Applied {
                    applied.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (start, cpu_before, client_before, applied_before, calls_before) = (
        Instant::now(),
        redis_cpu(stats).await,
        process_cpu(),
        applied.load(Ordering::Relaxed),
        calls.load(Ordering::Relaxed),
    );
    tokio::time::sleep(CAPACITY_WINDOW).await;
    let count = applied.load(Ordering::Relaxed) - applied_before;
    let sent = calls.load(Ordering::Relaxed) - calls_before;
    let client = process_cpu() - client_before;
    let (seconds, cpu_after) = (start.elapsed().as_secs_f64(), redis_cpu(stats).await);
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a capacity task ends");
    }
    Capacity {
        load,
        applied_per_s: count as f64 / seconds,
        applied_share: count as f64 / sent.max(1) as f64,
        cpu_per_applied_us: (cpu_after - cpu_before) * 1e6 / count.max(1) as f64,
        client_cpu_per_applied_us: client * 1e6 / count.max(1) as f64,
    }
}

// 2. The sweep.

/// What every counter of a run did, from the store wrapper and the events.
#[derive(Default)]
struct Tally {
    copies: AtomicU64,
    resent: AtomicU64,
    wrong_interval: AtomicU64,
    errors: AtomicU64,
    applied: AtomicU64,
    dropped: AtomicU64,
    unsettled: AtomicU64,
    slow_raised: AtomicU64,
    /// Polls of the counters' background tasks.
    polls: AtomicU64,
}

#[derive(Clone, Copy)]
struct Reading([u64; 9]);

impl Tally {
    fn read(&self) -> Reading {
        Reading(
            [
                &self.copies,
                &self.resent,
                &self.wrong_interval,
                &self.errors,
                &self.applied,
                &self.dropped,
                &self.unsettled,
                &self.slow_raised,
                &self.polls,
            ]
            .map(|a| a.load(Ordering::Relaxed)),
        )
    }
}

impl Reading {
    fn since(self, before: Reading) -> Reading {
        Reading(std::array::from_fn(|i| self.0[i] - before.0[i]))
    }
}

/// When each counter last had a flush applied, and its longest gap so far, in ms since the
/// run started; gaps count only from the window's start.
struct Gaps {
    started: Instant,
    window_start_ms: AtomicU64,
    last_ms: Vec<AtomicU64>,
    longest_ms: Vec<AtomicU64>,
}

impl Gaps {
    fn new(counters: usize) -> Self {
        Self {
            started: Instant::now(),
            window_start_ms: AtomicU64::new(u64::MAX),
            last_ms: (0..counters).map(|_| AtomicU64::new(0)).collect(),
            longest_ms: (0..counters).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn open_window(&self) {
        self.window_start_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Notes an applied flush of counter `i` at `now` (ms).
    fn applied(&self, i: usize, now: u64) {
        let window_start = self.window_start_ms.load(Ordering::Relaxed);
        let last = self.last_ms[i].swap(now, Ordering::Relaxed);
        if now > window_start {
            // Another thread may have noted a later flush of the counter since `now` was read.
            let gap = now.saturating_sub(last.max(window_start));
            self.longest_ms[i].fetch_max(gap, Ordering::Relaxed);
        }
    }

    /// Each counter's longest gap in the window that ends now, the one still open included.
    fn close_window(&self) -> Vec<u64> {
        let (now, window_start) = (self.now_ms(), self.window_start_ms.load(Ordering::Relaxed));
        self.last_ms
            .iter()
            .zip(&self.longest_ms)
            .map(|(last, longest)| {
                let open = now.saturating_sub(last.load(Ordering::Relaxed).max(window_start));
                longest.load(Ordering::Relaxed).max(open)
            })
            .collect()
    }
}

/// Diagnostics of counter `index`: into the run's tally and gaps.
struct Tallied {
    index: usize,
    tally: Arc<Tally>,
    gaps: Arc<Gaps>,
}

impl Diagnostics for Tallied {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        let t = &self.tally;
        match event {
            Event::FlushCompleted { .. } => {
                t.applied.fetch_add(1, Ordering::Relaxed);
                self.gaps.applied(self.index, self.gaps.now_ms());
            }
            Event::FlushFailed {
                dropped, unsettled, ..
            } => {
                t.dropped.fetch_add(*dropped, Ordering::Relaxed);
                t.unsettled.fetch_add(*unsettled, Ordering::Relaxed);
            }
            Event::RoundTripSlow { .. } => {
                t.slow_raised.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// Counts one counter's copies and replies into the run's tally.
struct Counting {
    tally: Arc<Tally>,
    /// The sequence number of the last flush each participant id sent (a counter's lanes have
    /// ids of their own, and numbers that overlap): a copy with the same one is a resend.
    last_seq: Mutex<Vec<(u64, u64)>>,
}

impl Counting {
    /// Whether the participant's last flush had this one's number: this is a copy sent again.
    fn sent_before(&self, request: &FlushRequest) -> bool {
        let participant = request.participant.as_u64();
        let mut last = self.last_seq.lock().unwrap_or_else(|e| e.into_inner());
        match last.iter_mut().find(|(id, _)| *id == participant) {
            Some((_, seq)) => std::mem::replace(seq, request.seq) == request.seq,
            None => {
                last.push((participant, request.seq));
                false
            }
        }
    }
}

impl FlushLog for Counting {
    type Sent = ();

    fn sent(&self, request: &FlushRequest) {
        self.tally.copies.fetch_add(1, Ordering::Relaxed);
        if self.sent_before(request) {
            self.tally.resent.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn answered(&self, (): (), answer: &Result<FlushReply, StoreError>) {
        match answer {
            Ok(reply) if reply.outcome == Outcome::WrongInterval => {
                self.tally.wrong_interval.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(_) => {
                self.tally.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

struct Row {
    counters: usize,
    rules: Rules,
    seconds: f64,
    counts: Reading,
    redis_cpu: f64,
    /// This process's CPU time in the window, the counters' and the driver's, in seconds.
    client_cpu: f64,
    evalsha: u64,
    known: Known,
    longest_gap_ms: u64,
    p99_gap_ms: u64,
}

/// Builds `n` counters on one fresh shared connection, drives them, and measures the window.
async fn run(
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
async fn drive(counters: Vec<Counter>, stop: Arc<AtomicBool>) {
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
struct Known {
    /// The share of (sample, counter) pairs in which the counter knew it.
    share: f64,
    /// The share of counters that knew it in no sample.
    never: f64,
}

/// Samples every counter every [`SAMPLE_EVERY`] for `window`.
async fn sample_known(counters: &[Counter], window: Duration) -> Known {
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

// Printing.

fn print_capacity(runs: &[(&str, Capacity)]) {
    println!("## Capacity: closed loop on one shared multiplexed connection");
    println!();
    println!(
        "{CAPACITY_TASKS} tasks, each sending the flush script through `RedisStore` as soon as \
         its last reply came. {} s measured after 1 s.",
        CAPACITY_WINDOW.as_secs()
    );
    println!();
    println!(
        "| when | keys | applied/s | calls applied | Redis CPU µs/applied | client CPU µs/applied |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for (when, c) in runs {
        println!(
            "| {when} | {} | {:.0} | {:.1}% | {:.1} | {:.1} |",
            c.load.label(),
            c.applied_per_s,
            100.0 * c.applied_share,
            c.cpu_per_applied_us,
            c.client_cpu_per_applied_us
        );
    }
    println!();
}

fn print_header(settings: &Settings) {
    println!(
        "## Sweep: {} ms interval, every counter incremented every {} ms, one shared \
         connection, response timeout {}",
        settings.interval.as_millis(),
        TOUCH_EVERY.as_millis(),
        settings.timeout_label()
    );
    println!();
    println!(
        "| counters | rule | asked/s | applied/s | applied/asked | applied/capacity | applied/one-key | copies/s | resent copies | wrong-interval replies | error replies | EVALSHA/s | Redis CPU µs/applied | client CPU µs/applied | polls/applied | total known | counters that never knew it | longest gap (p99 of counters) | dropped | unsettled | `round trip slow` raised |"
    );
    println!(
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
}

fn print_row(row: &Row, interval: Duration, capacity: f64, one_key: f64) {
    let [
        copies,
        resent,
        wrong,
        errors,
        applied,
        dropped,
        unsettled,
        slow,
        polls,
    ] = row.counts.0;
    let per_s = |n: u64| n as f64 / row.seconds;
    let asked = row.counters as f64 / interval.as_secs_f64();
    let in_intervals = |ms: u64| ms as f64 / interval.as_millis() as f64;
    println!(
        "| {} | {} | {:.0} | {:.0} | {:.1}% | {:.2} | {:.2} | {:.0} | {} ({:.1}%) | {} ({:.1}%) | {} | {:.0} | {:.1} | {:.1} | {:.2} | {:.1}% | {:.1}% | {:.1} ({:.1}) intervals | {} | {} | {} |",
        row.counters,
        row.rules.label(),
        asked,
        per_s(applied),
        100.0 * per_s(applied) / asked,
        per_s(applied) / capacity,
        per_s(applied) / one_key,
        per_s(copies),
        resent,
        100.0 * resent as f64 / copies.max(1) as f64,
        wrong,
        100.0 * wrong as f64 / copies.max(1) as f64,
        errors,
        per_s(row.evalsha),
        row.redis_cpu * 1e6 / applied.max(1) as f64,
        row.client_cpu * 1e6 / applied.max(1) as f64,
        polls as f64 / applied.max(1) as f64,
        100.0 * row.known.share,
        100.0 * row.known.never,
        in_intervals(row.longest_gap_ms),
        in_intervals(row.p99_gap_ms),
        dropped,
        unsettled,
        slow,
    );
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
