//! Progress at any latency: a small fleet on a Redis whose round trip is a fraction of the
//! interval up to several intervals, under the default rules and under `after_reply_without_resend()`.
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

mod fleet;
mod options;
mod record;
mod round_trip;
mod table;

use std::net::SocketAddr;
use std::time::Duration;

use comcount_tests::bench::load_average;
use comcount_tests::server::RedisServer;

use options::Settings;
use round_trip::run_round_trip;
use table::{print_header, print_row};

/// Each participant counts one unit per tick.
const TICK: Duration = Duration::from_millis(1);
/// How often every participant is asked whether it knows the group's total.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);
/// Intervals left out at the start, besides the round trip itself.
const WARMUP_INTERVALS: u32 = 5;

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
