//! The hot path: `Counter::increment`, a family's `KeyCounter::increment` and
//! `Family::increment(key, n)` on an existing key, each against a bare atomic add, alone and
//! contended, and what a counter costs in memory.
//!
//! Run with `cargo bench -p comcount-core --bench hot_path --all-features` (the features add
//! the task sizes of the tokio and smol timers). `COMCOUNT_BENCH_ROUNDS=N` sets how many rounds
//! to make (31 by default). `BENCHMARKS.md` at the root of the repository holds the results.
//!
//! Divan rather than criterion: its `threads` option runs one benchmark on several threads at
//! once, each timing its own samples after a shared barrier, which is contention on one counter
//! without a hand-made thread harness; and its `AllocProfiler` shows, next to the timings, any
//! allocation made inside a timed loop. It also builds with far fewer dependencies.
//!
//! Divan has no API to hand its figures back, so `main` runs this binary again as a child
//! process per measurement, in which divan runs one benchmark on one thread count; it echoes
//! the child's table and reads back the median time per operation. A round measures, for each
//! thread count, the bare add and `increment` one right after the other (the order alternating
//! between rounds), so that the ratio of the pair compares two measurements made on the same
//! machine in the same state: on a shared machine, that matters more than anything else. The
//! summary takes the median ratio over the rounds, with its spread; see [`summarize`] for the
//! contended rounds. The memory figures come last.
//!
//! Setting `COMCOUNT_BENCH_CHILD=1` runs divan alone, with all its usual options, over every
//! benchmark and thread count.

use std::alloc::System;
use std::env;
use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

use comcount_core::clock::{Timer, VirtualClock};
use comcount_core::{Counter, Family, MemoryStore, Store, Worker};
use divan::{AllocProfiler, Bencher, black_box};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

/// Divan's profiler, for allocations inside timed loops, over a plain counting allocator, for
/// what building a counter allocates.
#[global_allocator]
static ALLOC: AllocProfiler<&StatsAlloc<System>> = AllocProfiler::new(&INSTRUMENTED_SYSTEM);

/// Set in a child process, which only runs divan.
const CHILD: &str = "COMCOUNT_BENCH_CHILD";
/// How many rounds to make.
const ROUNDS: &str = "COMCOUNT_BENCH_ROUNDS";
const DEFAULT_ROUNDS: usize = 31;

/// The thread counts, as in the `threads` options below.
const THREADS: [usize; 4] = [1, 2, 4, 8];
const BASELINE: &str = "bare_add";
/// What is measured against the baseline, and its targets.
const MEASURED: [Subject; 3] = [
    Subject {
        bench: "increment",
        alone: Target::Ratio(1.5),
        contended: Some(1.3),
    },
    Subject {
        bench: "key_handle",
        alone: Target::Ratio(1.5),
        contended: Some(1.3),
    },
    Subject {
        bench: "family_increment",
        alone: Target::Nanos(60.0),
        contended: None,
    },
];

/// One benchmark measured against the bare add.
#[derive(Clone, Copy)]
struct Subject {
    bench: &'static str,
    /// The target uncontended.
    alone: Target,
    /// The target ratio contended, if any.
    contended: Option<f64>,
}

/// A target: a ratio to the bare add, or a time per operation.
#[derive(Clone, Copy)]
enum Target {
    Ratio(f64),
    Nanos(f64),
}

impl Target {
    fn met(self, ratio: f64, nanos: f64) -> bool {
        match self {
            Target::Ratio(target) => ratio <= target,
            Target::Nanos(target) => nanos <= target,
        }
    }

    fn label(self) -> String {
        match self {
            Target::Ratio(target) => format!("<={target}"),
            Target::Nanos(target) => format!("<={target}ns"),
        }
    }
}
/// How many times slower than the uncontended bare add a contended pair's two medians must
/// both be for the pair to count as contended (see [`summarize`]).
const CONTENDED: f64 = 3.0;

/// The baseline's atomic, alone on its cache lines so that nothing else shares them.
#[repr(align(128))]
struct Padded(AtomicI64);

// Samples of 100 000 operations: long enough (about 0.2 ms) for the threads to overlap after
// the barrier that starts each sample, and far above the timer's precision.

/// The baseline: a bare `fetch_add` on one atomic, shared by all the threads.
#[divan::bench(threads = [1, 2, 4, 8], sample_size = 100_000, sample_count = 30)]
fn bare_add(bencher: Bencher<'_, '_>) {
    let atomic = Padded(AtomicI64::new(0));
    bencher.bench(|| atomic.0.fetch_add(black_box(1), Relaxed));
}

/// `increment` on one counter, shared by all the threads. The worker is kept but never
/// polled: nothing is flushed, and the buffer only grows, as it may up to `i64::MAX`.
#[divan::bench(threads = [1, 2, 4, 8], sample_size = 100_000, sample_count = 30)]
fn increment(bencher: Bencher<'_, '_>) {
    let (counter, _worker) = build(MemoryStore::new(), VirtualClock::new());
    // The first increment starts the worker, once; it is not what is measured.
    counter.increment(1);
    bencher.bench(|| counter.increment(black_box(1)));
}

/// `increment` through a handle on one key of a family, shared by all the threads.
#[divan::bench(threads = [1, 2, 4, 8], sample_size = 100_000, sample_count = 30)]
fn key_handle(bencher: Bencher<'_, '_>) {
    let (family, _worker) = build_family();
    let handle = family.counter("tenant-42").expect("a valid key");
    handle.increment(1);
    bencher.bench(|| handle.increment(black_box(1)));
}

/// `Family::increment(key, n)` on a key the family holds, among a thousand others, shared by
/// all the threads: the lookup and the add.
#[divan::bench(threads = [1, 2, 4, 8], sample_size = 100_000, sample_count = 30)]
fn family_increment(bencher: Bencher<'_, '_>) {
    let (family, _worker) = build_family();
    bencher.bench(|| family.increment(black_box("tenant-42"), black_box(1)));
}

/// A family of a thousand keys, "tenant-0" to "tenant-999", each counted once.
fn build_family() -> (Family, Worker) {
    let (family, worker) = Family::builder("bench", Duration::from_secs(5))
        .partitions(2)
        .build(MemoryStore::new(), VirtualClock::new())
        .expect("the bench family's settings are valid");
    for k in 0..1_000 {
        family.increment(&format!("tenant-{k}"), 1);
    }
    (family, worker)
}

fn build<S: Store, T: Timer>(store: S, timer: T) -> (Counter, Worker) {
    Counter::builder("bench", Duration::from_secs(5))
        .build(store, timer)
        .expect("the bench counter's settings are valid")
}

fn main() {
    if env::var_os(CHILD).is_some() {
        // One measurement: divan runs the one benchmark the parent named, on the threads it
        // asked for.
        divan::Divan::from_args().color(false).main();
        return;
    }
    let args: Vec<OsString> = env::args_os().skip(1).collect();
    if !args.iter().any(|arg| arg == "--bench") {
        // `cargo test --benches` and listings: divan runs each benchmark once, untimed.
        divan::main();
        return;
    }
    let rounds = env::var(ROUNDS).map_or(DEFAULT_ROUNDS, |rounds| {
        rounds
            .parse()
            .expect("COMCOUNT_BENCH_ROUNDS is a whole number")
    });
    // For each subject, for each thread count, the pairs of the rounds.
    let mut rows: Vec<Vec<Vec<Pair>>> = vec![vec![Vec::new(); THREADS.len()]; MEASURED.len()];
    for round in 1..=rounds {
        println!("== round {round} of {rounds}");
        for (t, threads) in THREADS.into_iter().enumerate() {
            for (subject, row) in MEASURED.iter().zip(rows.iter_mut()) {
                // Alternate which goes first, so that neither is always the one measured
                // after the other warmed the machine up.
                let bench = subject.bench;
                let (base, measured) = if round % 2 == 1 {
                    let base = measure(&args, BASELINE, threads);
                    (base, measure(&args, bench, threads))
                } else {
                    let measured = measure(&args, bench, threads);
                    (measure(&args, BASELINE, threads), measured)
                };
                let pair = Pair { base, measured };
                println!(
                    "   t={threads}: {bench} {:.3} ns / {BASELINE} {:.3} ns = {:.2}",
                    pair.measured.median,
                    pair.base.median,
                    pair.ratio()
                );
                row[t].push(pair);
            }
        }
        println!();
    }
    for (subject, row) in MEASURED.iter().zip(&rows) {
        summarize(subject, row);
    }
    for (subject, row) in MEASURED.iter().zip(&rows) {
        if subject.contended.is_some() {
            paired(subject, row);
        }
    }
    memory();
}

/// One divan measurement of one benchmark on a number of threads.
#[derive(Clone, Copy)]
struct Measurement {
    /// Median time per operation on each thread, in nanoseconds.
    median: f64,
    /// Whether divan reported allocations inside the timed loop.
    allocated: bool,
}

/// A measurement of `increment` and one of the baseline, made one right after the other.
#[derive(Clone, Copy)]
struct Pair {
    base: Measurement,
    measured: Measurement,
}

impl Pair {
    fn ratio(&self) -> f64 {
        self.measured.median / self.base.median
    }
}

/// Runs this binary again as a divan child for `bench` alone on `threads` threads, echoes its
/// table and reads the median back.
fn measure(args: &[OsString], bench: &str, threads: usize) -> Measurement {
    let exe = env::current_exe().expect("the path of this bench binary");
    let path = format!("{}::{bench}", env!("CARGO_CRATE_NAME"));
    let output = Command::new(exe)
        .args(args)
        .args(["--exact", &path, "--threads", &threads.to_string()])
        .env(CHILD, bench)
        .stderr(Stdio::null())
        .output()
        .expect("the divan child runs");
    assert!(
        output.status.success(),
        "the divan child for {bench} failed: {}",
        output.status
    );
    let table = String::from_utf8_lossy(&output.stdout);
    print!("{table}");
    parse(&table, bench)
        .unwrap_or_else(|| panic!("no median for {bench} in divan's table:\n{table}"))
}

/// Reads divan's table for one benchmark on one thread count: a heading, then a line named
/// after the benchmark whose columns are fastest, slowest, median, mean, samples and
/// iterations; allocation rows, when there are any, follow with labels such as `alloc:`.
fn parse(table: &str, bench: &str) -> Option<Measurement> {
    let mut median = None;
    let mut allocated = false;
    for line in table.lines() {
        let line = line.trim_start_matches(|c: char| "│├╰─ ".contains(c));
        let columns: Vec<&str> = line.split('│').collect();
        let mut words = columns[0].split_whitespace();
        match words.next() {
            Some(name) if name == bench => median = columns.get(2).and_then(|c| nanos(c)),
            Some(label) if label.ends_with(':') => allocated = true,
            _ => {}
        }
    }
    Some(Measurement {
        median: median?,
        allocated,
    })
}

/// Parses a divan duration such as `2.41 ns` or `1.2 µs` into nanoseconds.
fn nanos(cell: &str) -> Option<f64> {
    let mut parts = cell.split_whitespace();
    let value: f64 = parts.next()?.parse().ok()?;
    let scale = match parts.next()? {
        "ps" => 1e-3,
        "ns" => 1.0,
        "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return None,
    };
    Some(value * scale)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Summarizes the rounds. With more threads than cores, or while other work holds a core,
/// the threads of a contended benchmark may take turns on one core instead of running at once:
/// then neither measurement of the pair sees contention. A contended pair counts only when
/// both its medians are at least [`CONTENDED`] times the uncontended bare add; the ratio over
/// all rounds is shown beside it.
fn summarize(subject: &Subject, rows: &[Vec<Pair>]) {
    let measured_name = subject.bench;
    let rounds = rows.first().map_or(0, Vec::len);
    let alone = rows.first().map_or(f64::NAN, |pairs| {
        median(pairs.iter().map(|p| p.base.median).collect())
    });
    let floor = CONTENDED * alone;
    println!("== hot path: {measured_name} / {BASELINE}, {rounds} rounds");
    println!(
        "{:>7}  {:>7}  {:>11}  {:>12}  {:>6}  {:>11}  {:>6}  {:>8}  met",
        "threads", "rounds", "bare add ns", "measured ns", "ratio", "min..max", "all", "target"
    );
    for (pairs, threads) in rows.iter().zip(THREADS) {
        let all = median(pairs.iter().map(Pair::ratio).collect());
        let used: Vec<&Pair> = pairs
            .iter()
            .filter(|p| threads == 1 || p.base.median.min(p.measured.median) >= floor)
            .collect();
        if used.is_empty() {
            println!(
                "{threads:>7}  {:>7}  no round ran contended",
                format!("0/{rounds}")
            );
            continue;
        }
        let base = median(used.iter().map(|p| p.base.median).collect());
        let measured = median(used.iter().map(|p| p.measured.median).collect());
        let ratios: Vec<f64> = used.iter().map(|p| p.ratio()).collect();
        let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let high = ratios.iter().copied().fold(0.0, f64::max);
        let ratio = median(ratios);
        let target = if threads == 1 {
            Some(subject.alone)
        } else {
            subject.contended.map(Target::Ratio)
        };
        let (label, met) = match target {
            Some(target) => (
                target.label(),
                if target.met(ratio, measured) {
                    "yes"
                } else {
                    "NO"
                },
            ),
            None => ("-".to_owned(), "-"),
        };
        println!(
            "{threads:>7}  {:>7}  {base:>11.3}  {measured:>12.3}  {ratio:>6.2}  {:>11}  {all:>6.2}  {label:>8}  {met}",
            format!("{}/{rounds}", used.len()),
            format!("{low:.2}..{high:.2}"),
        );
    }
    let allocated = rows
        .iter()
        .flatten()
        .any(|pair| pair.base.allocated || pair.measured.allocated);
    println!(
        "allocations inside the timed loops: {}",
        if allocated {
            "SOME, see the tables"
        } else {
            "none"
        }
    );
    println!("ns: median over the rounds used of divan's median time per op on each thread");
    println!("ratio: median over the rounds used of each round's ratio; min..max: its spread");
    println!(
        "rounds used, with threads > 1: both medians >= {CONTENDED} x the uncontended bare add \
         ({floor:.3} ns), so the threads did run at once; all: ratio over every round"
    );
    println!();
}

/// Operations per block in [`paired`].
const BLOCK: u64 = 20_000;
/// Blocks of each kind per thread and thread count in [`paired`].
const BLOCKS: usize = 500;

/// A cross-check of the contended ratios, paired at a finer grain than whole divan runs.
///
/// On a 2-core machine shared with other work, whether two threads of a benchmark run at once
/// changes from one millisecond to the next, so few whole divan runs are contended throughout.
/// Here every thread alternates blocks of [`BLOCK`] bare adds and [`BLOCK`] increments, all
/// threads starting each block together after a barrier, and each thread's block of
/// increments is paired with its block of bare adds just before or after it (the order
/// alternates). A pair counts when both its blocks were contended, as in [`summarize`].
fn paired(subject: &Subject, rows: &[Vec<Pair>]) {
    let measured_name = subject.bench;
    let target = subject.contended.unwrap_or(f64::INFINITY);
    let alone = rows.first().map_or(f64::NAN, |pairs| {
        median(pairs.iter().map(|p| p.base.median).collect())
    });
    let floor = CONTENDED * alone;
    println!(
        "== paired blocks: {measured_name} / {BASELINE}, blocks of {BLOCK} ops, {BLOCKS} pairs per thread"
    );
    println!(
        "{:>7}  {:>11}  {:>11}  {:>12}  {:>6}  {:>11}  {:>6}  met",
        "threads", "pairs", "bare add ns", "measured ns", "ratio", "p25..p75", "target"
    );
    for threads in THREADS.into_iter().skip(1) {
        let pairs = match measured_name {
            "key_handle" => {
                let (family, _worker) = build_family();
                let handle = family.counter("tenant-42").expect("a valid key");
                blocks(threads, || {
                    black_box(handle.increment(black_box(1)));
                })
            }
            _ => {
                let (counter, _worker) = build(MemoryStore::new(), VirtualClock::new());
                counter.increment(1);
                blocks(threads, || {
                    black_box(counter.increment(black_box(1)));
                })
            }
        };
        let total = pairs.len();
        let used: Vec<(f64, f64)> = pairs
            .into_iter()
            .filter(|&(base, measured)| base.min(measured) >= floor)
            .collect();
        if used.is_empty() {
            println!(
                "{threads:>7}  {:>11}  no pair ran contended",
                format!("0/{total}")
            );
            continue;
        }
        let base = median(used.iter().map(|p| p.0).collect());
        let measured = median(used.iter().map(|p| p.1).collect());
        let mut ratios: Vec<f64> = used.iter().map(|p| p.1 / p.0).collect();
        ratios.sort_by(f64::total_cmp);
        let (p25, p75) = (ratios[ratios.len() / 4], ratios[ratios.len() * 3 / 4]);
        let ratio = median(ratios);
        let met = if ratio <= target { "yes" } else { "NO" };
        println!(
            "{threads:>7}  {:>11}  {base:>11.3}  {measured:>12.3}  {ratio:>6.2}  {:>11}  {:>6}  {met}",
            format!("{}/{total}", used.len()),
            format!("{p25:.2}..{p75:.2}"),
            format!("<={target}"),
        );
    }
    println!("pairs: those whose two blocks both took >= {CONTENDED} x the uncontended bare add");
    println!("ns: median time per op over those blocks; ratio: median of the pairs' ratios");
    println!();
}

/// Runs the blocks of [`paired`] on `threads` threads, `increment` against the bare add;
/// returns each thread's pairs of times per operation in nanoseconds, bare add first.
fn blocks(threads: usize, increment: impl Fn() + Sync) -> Vec<(f64, f64)> {
    let atomic = Padded(AtomicI64::new(0));
    let barrier = Barrier::new(threads);
    let bare = || {
        black_box(atomic.0.fetch_add(black_box(1), Relaxed));
    };
    let increment = &increment;
    thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    (0..BLOCKS)
                        .map(|block| {
                            if block % 2 == 0 {
                                let base = time(&barrier, bare);
                                (base, time(&barrier, increment))
                            } else {
                                let measured = time(&barrier, increment);
                                (time(&barrier, bare), measured)
                            }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|handle| handle.join().expect("a paired-block thread panicked"))
            .collect()
    })
}

/// Times one block of `op` on this thread, once every thread has reached `barrier`; returns
/// nanoseconds per operation.
fn time(barrier: &Barrier, op: impl Fn()) -> f64 {
    barrier.wait();
    let start = Instant::now();
    for _ in 0..BLOCK {
        op();
    }
    start.elapsed().as_secs_f64() * 1e9 / BLOCK as f64
}

fn memory() {
    println!("== memory");
    println!(
        "size_of::<Counter>()  {:>5} bytes",
        std::mem::size_of::<Counter>()
    );
    println!(
        "size_of::<Worker>()   {:>5} bytes",
        std::mem::size_of::<Worker>()
    );
    task(
        "MemoryStore, VirtualClock",
        MemoryStore::new(),
        VirtualClock::new(),
    );
    #[cfg(feature = "tokio")]
    task(
        "MemoryStore, TokioTimer",
        MemoryStore::new(),
        comcount_core::clock::TokioTimer::new(),
    );
    #[cfg(feature = "smol")]
    task(
        "MemoryStore, SmolTimer",
        MemoryStore::new(),
        comcount_core::clock::SmolTimer::new(),
    );

    let (store, clock) = (MemoryStore::new(), VirtualClock::new());
    let region = Region::new(&INSTRUMENTED_SYSTEM);
    let (counter, worker) = build(store, clock);
    let built = region.change();
    counter.increment(1);
    let first = region.change();
    for _ in 0..1_000_000 {
        black_box(counter.increment(black_box(1)));
    }
    let counted = region.change();
    println!(
        "building a counter:   {} allocations, {} bytes, {} bytes live after",
        built.allocations,
        built.bytes_allocated,
        built.bytes_allocated - built.bytes_deallocated,
    );
    println!(
        "first increment:      {} allocations",
        first.allocations - built.allocations
    );
    println!(
        "1 000 000 increments: {} allocations",
        counted.allocations - first.allocations
    );
    drop((counter, worker));
}

fn task<S: Store, T: Timer>(what: &str, store: S, timer: T) {
    let (_counter, worker) = build(store, timer);
    println!(
        "Worker::task_size()   {:>5} bytes  ({what})",
        worker.task_size()
    );
}
