//! `Counter::increment`, `Family::increment` on an existing key and `KeyCounter::increment`
//! allocate nothing, on one thread or on several at once.
//!
//! This file is a test binary of its own so that the counting allocator below is the global
//! allocator of these tests alone. It comes from `stats_alloc`, a small wrapper around the
//! system allocator without dependencies: it counts in global atomics, so it sees the
//! allocations of every thread (a thread-local count would miss those of the other threads),
//! and it keeps the `unsafe impl GlobalAlloc` out of this workspace, which forbids unsafe code.
//!
//! The allocator counts for the whole process, so everything is measured in one test: tests
//! running side by side would count each other's allocations.

use std::alloc::System;
use std::future::Future;
use std::pin::Pin;
use std::sync::Barrier;
use std::task::{Context, Poll};
use std::thread;
use std::time::Duration;

use comcount_core::{Counter, Family, MemoryStore, clock::VirtualClock};
use futures::task::noop_waker_ref;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, Stats, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Increments per thread in each measurement.
const N: u64 = 100_000;
/// Threads incrementing at once, besides the test's own.
const THREADS: usize = 3;

#[test]
fn increments_after_the_first_allocate_nothing() {
    let (counter, mut worker) = Counter::builder("no-alloc", Duration::from_secs(1))
        .build(MemoryStore::new(), VirtualClock::new())
        .unwrap();
    // Polled once, the worker waits for the first increment with its waker registered, so
    // that the first increment really wakes it, as it would on an executor.
    let mut cx = Context::from_waker(noop_waker_ref());
    assert_eq!(Pin::new(&mut worker).poll(&mut cx), Poll::Pending);
    assert_no_allocation("a counter", || counter.increment(1));

    let (family, mut worker) = Family::builder("no-alloc", Duration::from_secs(1))
        .partitions(4)
        .build(MemoryStore::new(), VirtualClock::new())
        .unwrap();
    assert_eq!(Pin::new(&mut worker).poll(&mut cx), Poll::Pending);
    for key in ["a", "b", "c"] {
        family.increment(key, 1);
    }
    assert_no_allocation("a family's existing key", || {
        family.increment("tenant-42", 1)
    });
    let handle = family.counter("tenant-42").unwrap();
    assert_no_allocation("a handle on a family's key", || handle.increment(1));
    drop((counter, family, handle, worker));
}

/// Calls `increment` once on each thread to set it up, then `N` times on one thread, then `N`
/// times on each of several threads at once, and checks that none of those allocated.
/// `increment` adds 1 and returns the count.
fn assert_no_allocation(what: &str, increment: impl Fn() -> u64 + Sync) {
    let before = increment();

    // One thread.
    let region = Region::new(GLOBAL);
    let mut last = 0;
    for _ in 0..N {
        last = increment();
    }
    let alone = region.change();
    assert_eq!(last, before + N, "{what}");
    assert_eq!(
        (alone.allocations, alone.reallocations),
        (0, 0),
        "{what}: {N} increments on one thread allocated: {alone:?}"
    );

    // Several threads at once. The allocator counts for the whole process, and on a busy
    // machine something outside the counter has been seen to allocate a few hundred bytes,
    // once, while the threads counted; an increment that allocated would do so in every
    // attempt, so the count is taken up to three times and one clean attempt passes.
    let mut attempts = Vec::new();
    for _ in 0..3 {
        let together = count_on_threads(&increment);
        attempts.push(together);
        if (together.allocations, together.reallocations) == (0, 0) {
            break;
        }
    }
    let done = attempts.len() as u64;
    let expected = before + N + done * (THREADS as u64 + (THREADS as u64 + 1) * N);
    assert_eq!(increment(), expected + 1, "{what}");
    let last = attempts.last().expect("one attempt at least");
    assert_eq!(
        (last.allocations, last.reallocations),
        (0, 0),
        "{what}: {N} increments on each of {} threads allocated, in each of {done} attempts: \
         {attempts:?}",
        THREADS + 1
    );
}

/// Counts `N` increments on each of `THREADS + 1` threads at once, after one each to set the
/// thread up, and returns what was allocated meanwhile.
fn count_on_threads(increment: &(impl Fn() -> u64 + Sync)) -> Stats {
    // Spawning allocates, and so does a new thread setting itself up (and its first lookup),
    // so the threads are spawned, count once, and wait until all are running before the count
    // starts; they are released together once it has, and stay alive until it has been read,
    // so that nothing they do on exit is counted. They are joined before the next count
    // starts: a thread's locals are torn down after its closure returns, which is all the
    // scope waits for, and what that frees or allocates would otherwise land in the next count.
    let ready = Barrier::new(THREADS + 1);
    let start = Barrier::new(THREADS + 1);
    let done = Barrier::new(THREADS + 1);
    let exit = Barrier::new(THREADS + 1);
    thread::scope(|scope| {
        let mut threads = Vec::with_capacity(THREADS);
        for _ in 0..THREADS {
            let increment = &increment;
            let (ready, start, done, exit) = (&ready, &start, &done, &exit);
            threads.push(scope.spawn(move || {
                increment();
                ready.wait();
                start.wait();
                for _ in 0..N {
                    increment();
                }
                done.wait();
                exit.wait();
            }));
        }
        ready.wait();
        let region = Region::new(GLOBAL);
        start.wait();
        for _ in 0..N {
            increment();
        }
        done.wait();
        let together = region.change();
        exit.wait();
        for thread in threads {
            thread.join().expect("a counting thread panicked");
        }
        together
    })
}
