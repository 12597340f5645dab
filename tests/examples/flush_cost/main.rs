//! What flushing costs Redis, next to what Redis can do at best and to the naive design.
//!
//! On one loopback redis-server of its own, it measures, in one run:
//!
//! 1. **Baseline.** `redis-benchmark`'s ceiling against that server for plain `INCRBY`, for
//!    `EVALSHA` of a script that does nothing but `INCRBY`, and for `EVALSHA` of the flush
//!    script itself (a fresh fence key per call, so that every call is applied).
//! 2. **Flushes.** Fleets of counters × participants (each participant its own `Counter`, all
//!    the counters of one participant sharing its connection, a `ConnectionManager`) with 10 and 50 ms
//!    intervals, up to more flushes than the machine can drive: flushes counted per second, and
//!    Redis's cost per flush from `INFO commandstats` (`cmdstat_evalsha`) and `INFO cpu`.
//! 3. **Events.** One event stream driven through counters and through the naive design, one
//!    `INCRBY` per event, at the same offered rates: events handled per second, Redis commands
//!    and Redis CPU per event.
//! 4. **Memory.** `MEMORY USAGE` of an interval key and a fence key after a real flush, and the
//!    size of a counter handle and of its background task with a `RedisStore`.
//!
//! Every figure is printed as a Markdown table.
//!
//! ```sh
//! cargo run -p comcount-tests --release --example flush_cost
//! ```
//!
//! Needs `redis-server` and `redis-benchmark` on the `PATH` (Debian: `redis-server` and
//! `redis-tools`). A run takes about a minute and a half; `FLUSH_COST_WINDOW_S` (default 5)
//! sets how long each fleet is measured, after 2 s of warm-up.

mod baseline;
mod events;
mod fleets;
mod memory;
mod server;
mod table;

use std::time::{Duration, Instant};

use comcount_tests::bench::load_average;
use comcount_tests::connect;
use comcount_tests::server::RedisServer;

use baseline::baseline;
use events::{Design, event_run};
use fleets::flush_fleet;
use memory::memory;
use server::Machine;
use table::{print_events, print_fleets};

/// The flush fleets, as (interval in ms, counters, participants). Every participant has its
/// own `Counter` for each counter name, so a fleet offers `counters × participants / interval`
/// flushes a second. Short intervals, so that few counters make many flushes.
const SWEEP: [(u64, usize, usize); 5] = [
    (10, 10, 10),
    (10, 20, 25),
    (50, 20, 25),
    (50, 40, 25),
    (50, 40, 50),
];

/// How long a fleet runs before it is measured: the first flushes find their interval.
const WARMUP: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() {
    let window = Duration::from_secs(
        std::env::var("FLUSH_COST_WINDOW_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5),
    );
    let server = RedisServer::standalone();
    let url = server.url();
    let mut stats = connect::multiplexed(&url).await;
    let started = Instant::now();
    let load_before = load_average();

    let machine = Machine::read(&mut stats).await;
    let baseline = baseline(server.port(), &mut stats).await;
    let mut fleets = Vec::new();
    for (interval_ms, counters, participants) in SWEEP {
        let interval = Duration::from_millis(interval_ms);
        fleets.push(flush_fleet(&url, &mut stats, interval, counters, participants, window).await);
    }
    // Rates relative to what plain INCRBY reached: one both designs should keep up with, and
    // one well past the naive design's reach.
    let ceiling = baseline.incrby.requests_per_s;
    let mut events = Vec::new();
    for factor in [0.5, 10.0] {
        let rate = (ceiling * factor / 1000.0).round() * 1000.0;
        events.push(event_run(&url, &mut stats, Design::Counters, rate, window).await);
        events.push(event_run(&url, &mut stats, Design::Naive, rate, window).await);
    }
    let memory = memory(&url, &mut stats).await;
    let load_after = load_average();

    machine.print(&load_before, &load_after, started.elapsed(), window);
    baseline.print();
    print_fleets(&fleets, &baseline);
    print_events(&events);
    memory.print();
}
