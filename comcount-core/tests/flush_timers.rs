//! A flush loop sets one timer for each wait: the wait for an answer and the pause after it
//! each take one, the time the total goes stale included. And a family's partition is polled
//! when its own loop is woken, not whenever another partition's is.
//!
//! A runtime's timer wheel inserts and removes an entry for every timer, and thousands of
//! counters on one connection flush tens of thousands of times a second (BENCHMARKS.md,
//! Overload); a family's partitions share one task.

#![allow(clippy::unwrap_used)] // a panic is how a test fails (in the shared support too)

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use comcount_core::clock::{Clock, Timer, VirtualClock, VirtualSleep};
use comcount_core::{Counter, Family};
use common::applies::{Answers, Applies, Completed, Stepped};

const INTERVAL: Duration = Duration::from_millis(100);
/// Flushes measured, after as many to warm up.
const FLUSHES: u64 = 200;

/// Every flush answered on the poll after the first, as on a network, with a group total.
const STORE: Applies = Applies {
    answers: Answers::OnTheNextPoll,
    total: Some(7),
};

#[test]
fn a_flush_answered_later_sets_one_timer_for_the_answer_and_one_for_the_pause() {
    let timer = Counted::default();
    let flushes = Arc::new(AtomicU64::new(0));
    let (counter, worker) = Counter::builder("timers", INTERVAL)
        .diagnostics(Completed(Arc::clone(&flushes)))
        .build(STORE, timer.clone())
        .expect("valid settings");
    let touched = counter.clone();
    let mut stepped = Stepped::new(worker, timer.clock.clone(), INTERVAL, move || {
        touched.increment(1);
    });
    stepped.run(FLUSHES);
    assert!(counter.group_total().is_some(), "the replies bring a total");
    let per_flush = per_flush(&mut stepped, &flushes, &timer.sleeps);
    assert!(
        per_flush <= 2.0,
        "a flush set {per_flush} timers, with the group's total known"
    );
}

#[test]
fn a_familys_partition_is_polled_when_its_own_loop_is_woken() {
    const PARTITIONS: u32 = 8;
    let timer = Counted::default();
    let flushes = Arc::new(AtomicU64::new(0));
    let (family, worker) = Family::builder("polls", INTERVAL)
        .partitions(PARTITIONS)
        .diagnostics(Completed(Arc::clone(&flushes)))
        .build(STORE, timer.clone())
        .expect("valid settings");
    let keys: Vec<String> = (0..64).map(|i| format!("key-{i}")).collect();
    let mut stepped = Stepped::new(worker, timer.clock.clone(), INTERVAL, move || {
        for key in &keys {
            family.increment(key, 1);
        }
    });
    stepped.run(FLUSHES);
    // A loop polls its timers twice a flush here: its pause's when the pause begins, and when
    // it ends (the answer comes on the poll after the send, before its wait's timer is
    // polled). With every loop polled on each wake of any, it was eight times.
    let per_flush = per_flush(&mut stepped, &flushes, &timer.polls);
    assert!(
        per_flush <= 3.0,
        "a partition's flush polled {per_flush} timers: the loops of the other {} partitions \
         were polled with it",
        PARTITIONS - 1
    );
}

/// Runs `FLUSHES` intervals more and returns how much `counted` grew per flush completed.
fn per_flush(stepped: &mut Stepped, flushes: &AtomicU64, counted: &AtomicU64) -> f64 {
    let (before, flushed) = (counted.load(Relaxed), flushes.load(Relaxed));
    stepped.run(FLUSHES);
    let (counted, flushed) = (
        counted.load(Relaxed) - before,
        flushes.load(Relaxed) - flushed,
    );
    assert!(
        flushed >= FLUSHES - 1,
        "{flushed} flushes completed in {FLUSHES} intervals"
    );
    counted as f64 / flushed as f64
}

/// The virtual clock, counting the timers set on it and their polls.
#[derive(Clone, Default)]
struct Counted {
    clock: VirtualClock,
    sleeps: Arc<AtomicU64>,
    polls: Arc<AtomicU64>,
}

impl Clock for Counted {
    fn now(&self) -> Duration {
        self.clock.now()
    }
}

impl Timer for Counted {
    type Sleep = CountedSleep;

    fn sleep(&self, duration: Duration) -> CountedSleep {
        self.sleeps.fetch_add(1, Relaxed);
        CountedSleep {
            sleep: self.clock.sleep(duration),
            polls: Arc::clone(&self.polls),
        }
    }
}

/// A virtual sleep, counting its polls.
struct CountedSleep {
    sleep: VirtualSleep,
    polls: Arc<AtomicU64>,
}

impl Future for CountedSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.polls.fetch_add(1, Relaxed);
        Pin::new(&mut self.sleep).poll(cx)
    }
}
