//! A counter's flush loop allocates one thing a flush: the copy it hands to the store. Its
//! flight, its entry and its slot are kept from one flush to the next.
//!
//! Thousands of counters on one connection flush tens of thousands of times a second, and
//! there every allocation that glibc's allocator serves from fragmented memory shows in the
//! client's CPU per flush (BENCHMARKS.md, Overload).
//!
//! This file is a test binary of its own so that the counting allocator below is the global
//! allocator of these tests alone (see `no_alloc.rs`), and the allocator counts for the whole
//! process, so everything is measured in one test.

#![allow(clippy::unwrap_used)] // a panic is how a test fails (in the shared support too)

mod common;

use std::alloc::System;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use comcount_core::Counter;
use comcount_core::clock::VirtualClock;
use common::applies::{Answers, Applies, Completed, Stepped};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const INTERVAL: Duration = Duration::from_millis(100);
/// Flushes measured, after as many to warm up.
const FLUSHES: u64 = 1_000;

#[test]
fn a_counters_flush_allocates_only_its_copy() {
    let at_once = allocations_per_flush(Answers::AtOnce);
    let later = allocations_per_flush(Answers::OnTheNextPoll);
    assert!(
        at_once <= 1.0,
        "a flush answered at once allocated {at_once} times"
    );
    assert!(
        later <= 1.0,
        "a flush answered on the next poll allocated {later} times"
    );
}

/// Runs a counter for `2 * FLUSHES` intervals on virtual time and counts the allocations of
/// the last `FLUSHES` flushes, each of which a store answers as `answers` says.
fn allocations_per_flush(answers: Answers) -> f64 {
    let clock = VirtualClock::new();
    let flushes = Arc::new(AtomicU64::new(0));
    let store = Applies {
        answers,
        total: None,
    };
    let (counter, worker) = Counter::builder("allocations", INTERVAL)
        .diagnostics(Completed(Arc::clone(&flushes)))
        .build(store, clock.clone())
        .expect("valid settings");
    let mut stepped = Stepped::new(worker, clock, INTERVAL, move || {
        counter.increment(1);
    });
    stepped.run(FLUSHES);
    let (region, before) = (Region::new(GLOBAL), flushes.load(Relaxed));
    stepped.run(FLUSHES);
    let (allocated, flushed) = (region.change(), flushes.load(Relaxed) - before);
    assert!(
        flushed >= FLUSHES - 1,
        "{answers:?}: {flushed} flushes completed in {FLUSHES} intervals"
    );
    // The virtual clock keeps its room between wakes, so what is counted is the counter's.
    allocated.allocations as f64 / flushed as f64
}
