//! Progress at any latency: a small fleet on a Redis whose round trip is a fraction of the
//! interval up to several intervals, under the default rules and under `original_rules()`.
//!
//! For each round trip (0.2, 0.5, 1, 1.5, 2 and 3 intervals, injected by a proxy that holds
//! every reply back) it runs two fleets side by side through the same proxy, one per rule.
//! Each participant is a `Counter` on its own redis-rs `ConnectionManager` (no client-side
//! response timeout, so that only the counter decides when a reply is late), and counts one
//! unit a millisecond. Over the steady state (after a warm-up) it reports per rule:
//!
//! - **asked**: participant-intervals, the flushes a participant would make at one per
//!   interval; **applied**: `flush completed` events; **copies**: every call to `Store::flush`;
//! - **known**: the share of samples (every 5 ms, every participant) in which
//!   `group_total()` was known;
//! - the share of intervals that some flush of the fleet was counted in, and the share of
//!   counted replies that carried no total (the interval before had no key, so the
//!   participant learns no total from it);
//!
//! and over the whole run, once the fleet has stopped counting and its last flushes settled:
//!
//! - **landed**: the units in Redis (each interval key `prefix{name}:N` read as it closes)
//!   against the units counted; `flush completed` amounts as a cross-check;
//! - **dropped** (`flush failed`), **unsettled** (`flush failed`'s `unsettled`), still buffered;
//! - whether `round trip slow` was raised, by how many participants, and how long after the
//!   start (or after the change, with `--near-first`).
//!
//! ```sh
//! cargo run -p comcount-tests --release --example slow_store
//! cargo run -p comcount-tests --release --example slow_store -- --interval-ms 200 --intervals 50
//! ```
//!
//! Flags: `--interval-ms` (100), `--intervals` in steady state (100), `--participants` per
//! rule (8), `--round-trips` in intervals (`0.2,0.5,1,1.5,2,3`), `--stagger` (0): the
//! participants start counting spread evenly over this many intervals instead of all at once
//! (they are then measured from when the last has started); `--near-first` (0): the fleets
//! count this many intervals on a path with no delay before the round trip is put on it, as
//! when a store fails over to a distant replica, and are measured from that change (the
//! alarm's delay too). A run at the defaults takes about a minute and a half.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_core::testing::{FlushLog, Recorded};
use comcount_core::{Counter, FlushReply, FlushRequest, KeySpace, StoreError};
use comcount_redis_rs::RedisStore;
use comcount_tests::bench::{Rules, load_average, wall_interval};
use comcount_tests::connect::manager_with;
use comcount_tests::proxy::Proxy;
use comcount_tests::server::RedisServer;
use redis::aio::ConnectionManager;

fn parse<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| panic!("bad value {value:?} for {flag}"))
}

/// Each participant counts one unit per tick.
const TICK: Duration = Duration::from_millis(1);
/// How often every participant is asked whether it knows the group's total.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);
/// Intervals left out at the start, besides the round trip itself.
const WARMUP_INTERVALS: u32 = 5;

struct Settings {
    interval: Duration,
    intervals: u32,
    participants: usize,
    round_trips: Vec<f64>,
    /// Participants start counting spread evenly over this many intervals (0: all at once).
    stagger: f64,
    /// Intervals counted with no delay on the path before the round trip is put on it (0:
    /// from the start).
    near_first: u32,
}

impl Settings {
    fn from_args() -> Self {
        let mut settings = Self {
            interval: Duration::from_millis(100),
            intervals: 100,
            participants: 8,
            round_trips: vec![0.2, 0.5, 1.0, 1.5, 2.0, 3.0],
            stagger: 0.0,
            near_first: 0,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        for pair in args.chunks(2) {
            let (flag, value) = (pair[0].as_str(), pair.get(1).map_or("", String::as_str));
            match flag {
                "--interval-ms" => settings.interval = Duration::from_millis(parse(flag, value)),
                "--intervals" => settings.intervals = parse(flag, value),
                "--participants" => settings.participants = parse(flag, value),
                "--round-trips" => {
                    settings.round_trips = value.split(',').map(|r| parse(flag, r)).collect()
                }
                "--stagger" => settings.stagger = parse(flag, value),
                "--near-first" => settings.near_first = parse(flag, value),
                _ => panic!(
                    "unknown flag {flag}; use --interval-ms, --intervals, --participants, \
                     --round-trips, --stagger, --near-first"
                ),
            }
        }
        settings
    }
}

/// What a fleet's counters and stores did, from their events and their store calls.
#[derive(Default)]
struct Tally {
    copies: AtomicU64,
    applied: AtomicU64,
    applied_amount: AtomicU64,
    dropped: AtomicU64,
    unsettled: AtomicU64,
    stale: AtomicU64,
    slow_raised: AtomicU64,
    back_to_normal: AtomicU64,
    /// Counted replies that carried no total: the interval before had no key.
    counted_without_total: AtomicU64,
    /// Counted replies in all.
    counted_replies: AtomicU64,
    /// The intervals some flush of the fleet was counted in.
    intervals_reached: Mutex<BTreeSet<u64>>,
    /// Milliseconds from the first count to the first `round trip slow`; `u64::MAX` if none.
    first_slow_ms: AtomicU64,
    /// When the fleet began to count.
    started: OnceLock<Instant>,
    /// Why the first flush that was reported unsettled or failed was.
    first_error: OnceLock<String>,
}

/// A moment's reading of the tallies that the steady-state window is measured by.
#[derive(Clone, Copy, Default)]
struct Reading {
    copies: u64,
    applied: u64,
    counted_replies: u64,
    counted_without_total: u64,
    /// The fleet's interval number by the wall clock.
    interval: u64,
}

impl Tally {
    fn new() -> Self {
        Self {
            first_slow_ms: AtomicU64::new(u64::MAX),
            ..Self::default()
        }
    }

    fn read(&self, interval: Duration) -> Reading {
        Reading {
            copies: self.copies.load(Ordering::Relaxed),
            applied: self.applied.load(Ordering::Relaxed),
            counted_replies: self.counted_replies.load(Ordering::Relaxed),
            counted_without_total: self.counted_without_total.load(Ordering::Relaxed),
            interval: wall_interval(interval),
        }
    }

    /// The share of the intervals in `[from, to)` that some flush was counted in.
    fn reached(&self, from: u64, to: u64) -> f64 {
        let reached = self
            .intervals_reached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .range(from..to)
            .count();
        reached as f64 / to.saturating_sub(from).max(1) as f64
    }
}

/// Diagnostics that add every event to the fleet's tally.
struct Tallied(Arc<Tally>);

impl Diagnostics for Tallied {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        let t = &self.0;
        match event {
            Event::FlushCompleted { amount, .. } => {
                t.applied.fetch_add(1, Ordering::Relaxed);
                t.applied_amount.fetch_add(*amount, Ordering::Relaxed);
            }
            Event::FlushFailed {
                dropped,
                unsettled,
                error,
                ..
            } => {
                t.dropped.fetch_add(*dropped, Ordering::Relaxed);
                t.unsettled.fetch_add(*unsettled, Ordering::Relaxed);
                let _ = t.first_error.set(format!("flush failed: {error}"));
            }
            Event::TotalWentStale { .. } => {
                t.stale.fetch_add(1, Ordering::Relaxed);
            }
            Event::RoundTripNormal { .. } => {
                t.back_to_normal.fetch_add(1, Ordering::Relaxed);
            }
            Event::RoundTripSlow { .. } => {
                t.slow_raised.fetch_add(1, Ordering::Relaxed);
                if let Some(started) = t.started.get() {
                    let ms = started.elapsed().as_millis() as u64;
                    t.first_slow_ms.fetch_min(ms, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }
}

/// Counts every copy of a flush the fleet's stores are asked to send, and what the counted
/// replies carried.
impl FlushLog for Tally {
    type Sent = ();

    fn sent(&self, _: &FlushRequest) {
        self.copies.fetch_add(1, Ordering::Relaxed);
    }

    fn answered(&self, (): (), answer: &Result<FlushReply, StoreError>) {
        if let Ok(reply) = answer
            && reply.outcome.is_counted()
        {
            self.counted_replies.fetch_add(1, Ordering::Relaxed);
            if reply.previous_total().is_none() {
                self.counted_without_total.fetch_add(1, Ordering::Relaxed);
            }
            let interval = reply.counted_in.unwrap_or(reply.interval);
            self.intervals_reached
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(interval);
        }
    }
}

/// A connection that reconnects, with no response timeout of its own: redis-rs's default
/// (500 ms) would turn the slowest round trips into errors before the counter's own timeout
/// saw them.
async fn connect(url: &str) -> ConnectionManager {
    manager_with(url, RedisStore::manager_config().set_response_timeout(None)).await
}

struct Fleet {
    rules: Rules,
    space: KeySpace,
    counters: Vec<Counter>,
    tally: Arc<Tally>,
    /// Units counted by every participant together.
    counted: Arc<AtomicU64>,
}

async fn start_fleet(rules: Rules, settings: &Settings, proxy_url: &str, tag: &str) -> Fleet {
    let prefix = format!("slow:{tag}:");
    let name = rules.label();
    let tally = Arc::new(Tally::new());
    let mut counters = Vec::new();
    for _ in 0..settings.participants {
        let store = Recorded::new(
            RedisStore::new(connect(proxy_url).await),
            Arc::clone(&tally),
        );
        let builder = Counter::builder(name, settings.interval)
            .prefix(prefix.as_str())
            .diagnostics(Tallied(Arc::clone(&tally)));
        let (counter, worker) = rules
            .configure(builder)
            .build(store, TokioTimer::new())
            .expect("valid settings");
        tokio::spawn(worker);
        counters.push(counter);
    }
    Fleet {
        rules,
        space: KeySpace::counter(&prefix, name),
        counters,
        tally,
        counted: Arc::new(AtomicU64::new(0)),
    }
}

/// Starts counting on every participant of the fleet, participant `i` after `i` × `stagger`.
fn start_counting(fleet: &Fleet, stagger: Duration, stop: &Arc<AtomicBool>) {
    let starts = (0..fleet.counters.len() as u32)
        .map(|i| stagger * i)
        .collect();
    tokio::spawn(drive(
        fleet.counters.clone(),
        starts,
        Arc::clone(&fleet.counted),
        Arc::clone(stop),
    ));
}

/// Counts a unit on every participant that has started, every tick until `stop`.
async fn drive(
    counters: Vec<Counter>,
    starts: Vec<Duration>,
    counted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let began = Instant::now();
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    while !stop.load(Ordering::Relaxed) {
        ticks.tick().await;
        let elapsed = began.elapsed();
        let mut units = 0;
        for (counter, start) in counters.iter().zip(&starts) {
            if elapsed >= *start {
                counter.increment(1);
                units += 1;
            }
        }
        counted.fetch_add(units, Ordering::Relaxed);
    }
}

/// Reads every interval key of the fleets once it has closed, before it expires, and adds up
/// what landed; runs until `done`.
async fn read_totals(
    mut direct: ConnectionManager,
    spaces: Vec<KeySpace>,
    interval: Duration,
    done: Arc<AtomicBool>,
) -> Vec<u64> {
    let mut landed = vec![0u64; spaces.len()];
    let mut next = wall_interval(interval);
    loop {
        let last_round = done.load(Ordering::Relaxed);
        // Interval N is complete once the server's clock has left it; at the end, when
        // nothing is flushed any more, the current one too.
        let upto = wall_interval(interval) + u64::from(last_round);
        while next < upto {
            for (space, sum) in spaces.iter().zip(landed.iter_mut()) {
                let total: Option<u64> = redis::cmd("GET")
                    .arg(space.interval(next))
                    .query_async(&mut direct)
                    .await
                    .expect("GET answers");
                *sum += total.unwrap_or(0);
            }
            next += 1;
        }
        if last_round {
            return landed;
        }
        tokio::time::sleep(interval / 5).await;
    }
}

/// Asks every participant whether it knows the group's total, every few ms for `window`;
/// returns the share of yes per fleet.
async fn sample_known(fleets: &[Fleet], window: Duration) -> Vec<f64> {
    let deadline = Instant::now() + window;
    let mut known = vec![0u64; fleets.len()];
    let mut samples = vec![0u64; fleets.len()];
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    while Instant::now() < deadline {
        ticks.tick().await;
        for (i, fleet) in fleets.iter().enumerate() {
            for counter in &fleet.counters {
                known[i] += u64::from(counter.group_total().is_some());
                samples[i] += 1;
            }
        }
    }
    known
        .iter()
        .zip(&samples)
        .map(|(k, s)| *k as f64 / (*s).max(1) as f64)
        .collect()
}

/// One rule's figures at one round trip.
struct Row {
    rules: Rules,
    asked: u64,
    applied: u64,
    copies: u64,
    known: f64,
    counted: u64,
    landed: u64,
    applied_amount: u64,
    dropped: u64,
    unsettled: u64,
    buffered: u64,
    stale: u64,
    back_to_normal: u64,
    /// Counted replies with no total for the interval before, as a share of counted replies.
    without_total: f64,
    /// The share of intervals in the window that some flush reached.
    reached: f64,
    slow_raised: u64,
    first_slow_ms: Option<u64>,
}

async fn run_round_trip(
    settings: &Settings,
    server: SocketAddr,
    redis_url: &str,
    ratio: f64,
) -> Vec<Row> {
    let interval = settings.interval;
    let round_trip = interval.mul_f64(ratio);
    let proxy = Proxy::start(server).await.expect("a proxy");
    if settings.near_first == 0 {
        proxy.delay_replies(round_trip);
    }
    let tag = format!("{}-{:x}", round_trip.as_millis(), fastrand::u32(..));
    let stop = Arc::new(AtomicBool::new(false));
    let mut fleets = Vec::new();
    for rules in Rules::BOTH {
        fleets.push(start_fleet(rules, settings, &proxy.url(), &tag).await);
    }
    let reading_done = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn(read_totals(
        connect(redis_url).await,
        fleets.iter().map(|f| f.space.clone()).collect(),
        interval,
        Arc::clone(&reading_done),
    ));
    // Both fleets count from the same moment, once every connection is up.
    let spread = interval.mul_f64(settings.stagger);
    let stagger = spread / settings.participants as u32;
    for fleet in &fleets {
        start_counting(fleet, stagger, &stop);
    }
    if settings.near_first > 0 {
        // A store close by, then farther away for good: measured from the change.
        tokio::time::sleep(interval * settings.near_first + spread).await;
        proxy.delay_replies(round_trip);
    }
    for fleet in &fleets {
        let _ = fleet.tally.started.set(Instant::now());
    }

    tokio::time::sleep(interval * WARMUP_INTERVALS + round_trip + spread).await;
    let before: Vec<Reading> = fleets.iter().map(|f| f.tally.read(interval)).collect();
    let window = interval * settings.intervals;
    let known = sample_known(&fleets, window).await;
    let after: Vec<Reading> = fleets.iter().map(|f| f.tally.read(interval)).collect();
    stop.store(true, Ordering::Relaxed);

    // Let the last counts go out and settle: the flushes after the stop carry them.
    let drain = round_trip * 4 + interval * 6;
    let deadline = Instant::now() + drain.max(Duration::from_secs(2));
    while Instant::now() < deadline && !fleets.iter().all(settled) {
        tokio::time::sleep(interval / 2).await;
    }
    tokio::time::sleep(interval * 2).await;
    reading_done.store(true, Ordering::Relaxed);
    let landed = reader.await.expect("the reader ends");
    for fleet in &fleets {
        for counter in &fleet.counters {
            counter.close();
        }
    }
    fleets
        .iter()
        .enumerate()
        .map(|(i, fleet)| row(fleet, settings, before[i], after[i], known[i], landed[i]))
        .collect()
}

/// Whether every unit a fleet counted is accounted for by its events.
fn settled(fleet: &Fleet) -> bool {
    let t = &fleet.tally;
    let accounted = t.applied_amount.load(Ordering::Relaxed)
        + t.dropped.load(Ordering::Relaxed)
        + t.unsettled.load(Ordering::Relaxed);
    accounted >= fleet.counted.load(Ordering::Relaxed)
}

fn row(
    fleet: &Fleet,
    settings: &Settings,
    before: Reading,
    after: Reading,
    known: f64,
    landed: u64,
) -> Row {
    let t = &fleet.tally;
    let first_slow = t.first_slow_ms.load(Ordering::Relaxed);
    if let Some(error) = t.first_error.get() {
        eprintln!("{}: first of its errors: {error}", fleet.space.base());
    }
    Row {
        rules: fleet.rules,
        asked: settings.participants as u64 * u64::from(settings.intervals),
        applied: after.applied - before.applied,
        copies: after.copies - before.copies,
        known,
        counted: fleet.counted.load(Ordering::Relaxed),
        landed,
        applied_amount: t.applied_amount.load(Ordering::Relaxed),
        dropped: t.dropped.load(Ordering::Relaxed),
        unsettled: t.unsettled.load(Ordering::Relaxed),
        buffered: fleet.counters.iter().map(Counter::buffered).sum(),
        stale: t.stale.load(Ordering::Relaxed),
        back_to_normal: t.back_to_normal.load(Ordering::Relaxed),
        without_total: (after.counted_without_total - before.counted_without_total) as f64
            / (after.counted_replies - before.counted_replies).max(1) as f64,
        reached: t.reached(before.interval + 1, after.interval),
        slow_raised: t.slow_raised.load(Ordering::Relaxed),
        first_slow_ms: (first_slow != u64::MAX).then_some(first_slow),
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

fn print_header() {
    println!(
        "| round trip | rule | flushes asked | applied | copies sent | copies/applied | total known | landed in Redis / counted | `flush completed` amounts / counted | dropped | unsettled | left in buffers | `total went stale` | intervals with a flush | counted replies with no total | `round trip slow` |"
    );
    println!(
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    );
}

fn print_row(ratio: f64, interval: Duration, row: &Row, participants: usize) {
    let slow = match row.first_slow_ms {
        Some(ms) => format!(
            "{} of {participants}, first after {ms} ms; {} back to normal",
            row.slow_raised, row.back_to_normal
        ),
        None => "no".to_owned(),
    };
    println!(
        "| {ratio} × = {} ms | {} | {} | {} ({:.1}%) | {} | {:.2} | {:.1}% | {} / {} ({:.2}%) | {:.2}% | {} | {} | {} | {} | {:.0}% | {:.0}% | {slow} |",
        interval.mul_f64(ratio).as_millis(),
        row.rules.label(),
        row.asked,
        row.applied,
        percent(row.applied, row.asked),
        row.copies,
        row.copies as f64 / row.applied.max(1) as f64,
        100.0 * row.known,
        row.landed,
        row.counted,
        percent(row.landed, row.counted),
        percent(row.applied_amount, row.counted),
        row.dropped,
        row.unsettled,
        row.buffered,
        row.stale,
        100.0 * row.reached,
        100.0 * row.without_total,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let settings = Settings::from_args();
    let server = RedisServer::standalone();
    let address: SocketAddr = ([127, 0, 0, 1], server.port()).into();
    println!(
        "interval {} ms, {} participants per rule, each counting {} units/s; {} intervals measured \
         after {WARMUP_INTERVALS} intervals and one round trip of warm-up; participants start \
         spread over {} intervals; {} intervals close by first; Redis 127.0.0.1:{}; \
         load average {}",
        settings.interval.as_millis(),
        settings.participants,
        1000 / TICK.as_millis(),
        settings.intervals,
        settings.stagger,
        settings.near_first,
        server.port(),
        load_average(),
    );
    println!();
    print_header();
    for &ratio in &settings.round_trips {
        let rows = run_round_trip(&settings, address, &server.url(), ratio).await;
        for row in &rows {
            print_row(ratio, settings.interval, row, settings.participants);
        }
    }
    println!();
    println!("load average at the end: {}", load_average());
}
