//! How long the machine takes a CPU away from a process that wants it all the time: the floor
//! under any wall-time figure taken on it, such as the slowest script run in `SLOWLOG`.
//!
//! One thread spins for `--seconds` (20), reading the monotonic clock, and counts the gaps
//! between two readings: a gap is time the thread did not run. Run it pinned to one CPU at a
//! real-time priority, so that no other process on the machine can take that CPU from it:
//!
//! ```sh
//! cargo build -p comcount-tests --release --example stalls
//! taskset -c 1 chrt -f 50 target/release/examples/stalls
//! ```
//!
//! What is left is what the kernel's interrupts and, on a virtual machine, the hypervisor take.
//! It also prints the steal time each CPU's line of `/proc/stat` counted over the same seconds:
//! the time the hypervisor ran something else while this guest's CPU had work.

use std::time::{Duration, Instant};

use comcount_tests::bench::steal_ms;

/// The gap lengths counted, in milliseconds.
const GAPS_MS: [f64; 5] = [0.5, 1.0, 2.0, 5.0, 10.0];

fn main() {
    let seconds = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => 20,
        [flag, value] if flag == "--seconds" => value.parse().expect("--seconds takes a number"),
        other => panic!("unknown arguments {other:?}; the only flag is --seconds N"),
    };
    let window = Duration::from_secs(seconds);
    let steal_before = steal_ms();
    let (counts, longest) = spin(window);
    let steal_after = steal_ms();

    println!("One thread spinning for {seconds} s; gaps between two readings of the clock:");
    println!();
    println!("| gaps over | count | per second |");
    println!("| ---: | ---: | ---: |");
    for (at, count) in GAPS_MS.iter().zip(counts) {
        println!(
            "| {at} ms | {count} | {:.2} |",
            count as f64 / window.as_secs_f64()
        );
    }
    println!();
    println!("Longest gap: {:.2} ms.", longest.as_secs_f64() * 1000.0);
    for ((cpu, before), (_, after)) in steal_before.iter().zip(&steal_after) {
        println!("Steal on {cpu} over the window: {} ms.", after - before);
    }
}

/// Spins for `window`; returns how many gaps passed each of [`GAPS_MS`], and the longest.
fn spin(window: Duration) -> ([u64; GAPS_MS.len()], Duration) {
    let thresholds = GAPS_MS.map(|ms| Duration::from_secs_f64(ms / 1000.0));
    let mut counts = [0u64; GAPS_MS.len()];
    let mut longest = Duration::ZERO;
    let start = Instant::now();
    let mut last = start;
    loop {
        let now = Instant::now();
        let gap = now - last;
        last = now;
        longest = longest.max(gap);
        for (count, threshold) in counts.iter_mut().zip(&thresholds) {
            *count += u64::from(gap > *threshold);
        }
        if now - start >= window {
            return (counts, longest);
        }
    }
}
