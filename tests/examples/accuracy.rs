//! How much each timing rule loses, on a real Redis behind a proxy that adds a round trip.
//!
//! For every setting (injected round trip × interval) it runs two fleets side by side, one
//! under the after-reply rule (a flush an interval after each reply, lost flushes dropped) and one
//! under this library's default (flushes aimed at mid-interval, lost flushes resent), and
//! reports for each:
//!
//! - **missed**: the fraction of participant-intervals, in steady state, to which a participant
//!   added nothing;
//! - **undercount**: how far the group's total per interval fell short of what the fleet really
//!   counted in it, as a fraction of the true count (shortfalls only, averaged over intervals).
//!
//! ```sh
//! cargo run -p comcount-tests --release --example accuracy
//! ```
//!
//! `ACCURACY_SCALE` (default 1) multiplies every run's length.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::builder::Builder;
use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_core::{Counter, KeySpace};
use comcount_redis_rs::RedisStore;
use comcount_tests::bench::wall_interval;
use comcount_tests::proxy::Proxy;
use comcount_tests::server::RedisServer;
use redis::AsyncCommands;

const PARTICIPANTS: usize = 24;
/// Each participant counts this many units per millisecond-tick.
const UNITS_PER_TICK: u64 = 1;
const TICK: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Rules {
    AfterReply,
    Aimed,
}

impl Rules {
    fn configure(self, builder: Builder) -> Builder {
        match self {
            Rules::AfterReply => builder.after_reply_without_resend(),
            Rules::Aimed => builder,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Rules::AfterReply => "after-reply",
            Rules::Aimed => "aimed",
        }
    }
}

/// The intervals one participant added to, from its `flush completed` events.
#[derive(Clone, Default)]
struct Added(Arc<Mutex<BTreeSet<u64>>>);

impl Diagnostics for Added {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        if let Event::FlushCompleted { interval, .. } = event {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(*interval);
        }
    }
}

/// What the fleet really counted, per wall-clock interval.
#[derive(Clone, Default)]
struct Truth(Arc<Mutex<HashMap<u64, u64>>>);

impl Truth {
    fn add(&self, interval: u64, amount: u64) {
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(interval)
            .or_default() += amount;
    }

    fn get(&self, interval: u64) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&interval)
            .copied()
            .unwrap_or(0)
    }
}

struct Fleet {
    rules: Rules,
    prefix: String,
    name: String,
    counters: Vec<Counter>,
    added: Vec<Added>,
    truth: Truth,
}

struct Outcome {
    missed: f64,
    undercount: f64,
    participant_intervals: usize,
}

async fn start_fleet(
    rules: Rules,
    proxy_url: &str,
    interval: Duration,
    tag: &str,
    stop: &Arc<AtomicBool>,
) -> Fleet {
    let prefix = format!("accuracy:{tag}:");
    let name = rules.label().to_string();
    let truth = Truth::default();
    let mut counters = Vec::new();
    let mut added = Vec::new();
    for _ in 0..PARTICIPANTS {
        // The store's own settings: its 60 s response timeout is far above the round trips
        // measured here, as redis-rs's default of 500 ms was.
        let store = RedisStore::connect(proxy_url)
            .await
            .expect("a connection through the proxy");
        let events = Added::default();
        let builder = Counter::builder(name.as_str(), interval)
            .prefix(prefix.as_str())
            .diagnostics(events.clone());
        let (counter, worker) = rules
            .configure(builder)
            .build(store, TokioTimer::new())
            .expect("valid settings");
        tokio::spawn(worker);
        let (c, t, s) = (counter.clone(), truth.clone(), Arc::clone(stop));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(TICK);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            while !s.load(Ordering::Relaxed) {
                ticks.tick().await;
                c.increment(UNITS_PER_TICK);
                t.add(wall_interval(interval), UNITS_PER_TICK);
            }
        });
        counters.push(counter);
        added.push(events);
    }
    Fleet {
        rules,
        prefix,
        name,
        counters,
        added,
        truth,
    }
}

async fn run_setting(
    redis_url: &str,
    server_address: std::net::SocketAddr,
    round_trip: Duration,
    interval: Duration,
    intervals: u64,
) -> BTreeMap<Rules, Outcome> {
    let proxy = Proxy::start(server_address).await.expect("a proxy");
    proxy.delay_replies(round_trip);
    let mut direct = redis::Client::open(redis_url)
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a direct connection");
    let stop = Arc::new(AtomicBool::new(false));
    let tag = format!(
        "{}ms-{}ms-{:x}",
        round_trip.as_millis(),
        interval.as_millis(),
        fastrand::u32(..)
    );
    let mut fleets = Vec::new();
    for rules in [Rules::AfterReply, Rules::Aimed] {
        fleets.push(start_fleet(rules, &proxy.url(), interval, &tag, &stop).await);
    }

    // Read each interval's total from Redis once it has closed, before it expires.
    let first = wall_interval(interval);
    let mut stored: BTreeMap<(Rules, u64), u64> = BTreeMap::new();
    let mut current = first;
    while current < first + intervals {
        tokio::time::sleep(interval / 10).await;
        let now = wall_interval(interval);
        if now == current {
            continue;
        }
        for fleet in &fleets {
            let key = KeySpace::counter(&fleet.prefix, &fleet.name).interval(current);
            let total: Option<u64> = direct
                .get(&key)
                .await
                .expect("GET through the direct connection");
            stored.insert((fleet.rules, current), total.unwrap_or(0));
        }
        current = now;
    }
    stop.store(true, Ordering::Relaxed);
    for fleet in &fleets {
        for counter in &fleet.counters {
            counter.close();
        }
    }

    // Steady state: skip the intervals in which the fleets learn the server's clock, and the
    // last one, which was read as it closed.
    let window: Vec<u64> = (first + 3..current.saturating_sub(1)).collect();
    let mut outcomes = BTreeMap::new();
    for fleet in &fleets {
        let mut missed = 0;
        for added in &fleet.added {
            let added = added.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
            missed += window.iter().filter(|n| !added.contains(n)).count();
        }
        let mut shortfall = 0.0;
        for n in &window {
            let truth = fleet.truth.get(*n) as f64;
            let got = stored.get(&(fleet.rules, *n)).copied().unwrap_or(0) as f64;
            if truth > 0.0 {
                shortfall += ((truth - got) / truth).max(0.0);
            }
        }
        let participant_intervals = window.len() * PARTICIPANTS;
        outcomes.insert(
            fleet.rules,
            Outcome {
                missed: missed as f64 / participant_intervals.max(1) as f64,
                undercount: shortfall / window.len().max(1) as f64,
                participant_intervals,
            },
        );
    }
    outcomes
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let scale: u64 = std::env::var("ACCURACY_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let server = RedisServer::standalone();
    let address: std::net::SocketAddr = ([127, 0, 0, 1], server.port()).into();
    println!(
        "{PARTICIPANTS} participants per rule, each counting {} units/s; Redis 127.0.0.1:{}",
        UNITS_PER_TICK * 1000 / TICK.as_millis() as u64,
        server.port()
    );
    println!();
    println!(
        "| round trip | interval | participant-intervals | missed, after-reply | missed, aimed | undercount, after-reply | undercount, aimed |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for interval in [Duration::from_millis(100), Duration::from_secs(1)] {
        let intervals = scale
            * if interval < Duration::from_secs(1) {
                150
            } else {
                60
            };
        for round_trip in [1, 5, 20].map(Duration::from_millis) {
            let outcomes =
                run_setting(&server.url(), address, round_trip, interval, intervals).await;
            let (after_reply, aimed) = (&outcomes[&Rules::AfterReply], &outcomes[&Rules::Aimed]);
            println!(
                "| {} ms | {} ms | {} | {:.2}% | {:.2}% | {:.3}% | {:.3}% |",
                round_trip.as_millis(),
                interval.as_millis(),
                aimed.participant_intervals,
                100.0 * after_reply.missed,
                100.0 * aimed.missed,
                100.0 * after_reply.undercount,
                100.0 * aimed.undercount,
            );
        }
    }
}
