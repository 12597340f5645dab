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

use std::alloc::System;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::{Diagnostics, Event, Reporter};
use comcount_core::{Counter, FlushReply, FlushRequest, Outcome, Store, StoreError};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
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
    let (counter, worker) = Counter::builder("allocations", INTERVAL)
        .diagnostics(Completed(Arc::clone(&flushes)))
        .build(Applies(answers), clock.clone())
        .expect("valid settings");
    let mut pool = LocalPool::new();
    pool.spawner()
        .spawn_local(async move {
            worker.await;
        })
        .expect("the pool takes the worker");
    let mut run = |intervals: u64| {
        let until = clock.now() + INTERVAL * intervals as u32;
        loop {
            counter.increment(1);
            pool.run_until_stalled();
            match clock.next_wake() {
                Some(at) if at <= until => clock.advance_to(at),
                _ => break,
            }
        }
    };
    run(FLUSHES);
    let (region, before) = (Region::new(GLOBAL), flushes.load(Relaxed));
    run(FLUSHES);
    let (allocated, flushed) = (region.change(), flushes.load(Relaxed) - before);
    assert!(
        flushed >= FLUSHES - 1,
        "{answers:?}: {flushed} flushes completed in {FLUSHES} intervals"
    );
    // The virtual clock keeps its room between wakes, so what is counted is the counter's.
    allocated.allocations as f64 / flushed as f64
}

#[derive(Clone, Copy, Debug)]
enum Answers {
    /// The store's future is ready when first polled.
    AtOnce,
    /// The store's future is pending when first polled, as on a network, and ready on the
    /// next.
    OnTheNextPoll,
}

/// A store that applies every flush in the interval it expects, and allocates nothing.
struct Applies(Answers);

impl Store for Applies {
    fn name(&self) -> &str {
        "applies"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let reply = FlushReply::new(
            Outcome::Applied,
            request.expect,
            INTERVAL / 2,
            Some(request.expect),
        );
        NextPoll {
            pending: matches!(self.0, Answers::OnTheNextPoll),
            reply: ready(Ok(reply)),
        }
    }
}

/// `reply`, once a first poll has returned pending if `pending`.
struct NextPoll {
    pending: bool,
    reply: Ready<Result<FlushReply, StoreError>>,
}

impl Future for NextPoll {
    type Output = Result<FlushReply, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if std::mem::take(&mut self.pending) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Pin::new(&mut self.reply).poll(cx)
    }
}

/// Counts completed flushes.
struct Completed(Arc<AtomicU64>);

impl Diagnostics for Completed {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        if let Event::FlushCompleted { .. } = event {
            self.0.fetch_add(1, Relaxed);
        }
    }
}
