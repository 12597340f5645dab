//! A counter's flush loop sets one timer for each wait: the wait for an answer and the pause
//! after it each take one, the time the total goes stale included.
//!
//! A runtime's timer wheel inserts and removes an entry for every timer, and thousands of
//! counters on one connection flush tens of thousands of times a second (BENCHMARKS.md,
//! Overload).

#![allow(clippy::unwrap_used)] // a panic is how a test fails (in the shared support too)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use comcount_core::Counter;
use comcount_core::clock::{Clock, Timer, VirtualClock, VirtualSleep};
use common::applies::{Answers, Applies, Completed, Stepped};

const INTERVAL: Duration = Duration::from_millis(100);
/// Flushes measured, after as many to warm up.
const FLUSHES: u64 = 200;

#[test]
fn a_flush_answered_later_sets_one_timer_for_the_answer_and_one_for_the_pause() {
    let per_flush = timers_per_flush();
    assert!(
        per_flush <= 2.0,
        "a flush set {per_flush} timers, with the group's total known"
    );
}

/// Runs a counter for `2 * FLUSHES` intervals on virtual time, its store answering every flush
/// on the poll after the first with a group total, and counts the timers of the last
/// `FLUSHES` flushes.
fn timers_per_flush() -> f64 {
    let timer = Counted::default();
    let flushes = Arc::new(AtomicU64::new(0));
    let store = Applies {
        answers: Answers::OnTheNextPoll,
        total: Some(7),
    };
    let (counter, worker) = Counter::builder("timers", INTERVAL)
        .diagnostics(Completed(Arc::clone(&flushes)))
        .build(store, timer.clone())
        .expect("valid settings");
    let mut stepped = Stepped::new(counter, worker, timer.clock.clone(), INTERVAL);
    stepped.run(FLUSHES);
    assert!(
        stepped.counter.group_total().is_some(),
        "the replies bring a total"
    );
    let (timers, flushed) = (timer.sleeps.load(Relaxed), flushes.load(Relaxed));
    stepped.run(FLUSHES);
    let (timers, flushed) = (
        timer.sleeps.load(Relaxed) - timers,
        flushes.load(Relaxed) - flushed,
    );
    assert!(
        flushed >= FLUSHES - 1,
        "{flushed} flushes completed in {FLUSHES} intervals"
    );
    timers as f64 / flushed as f64
}

/// The virtual clock, counting the timers set on it.
#[derive(Clone, Default)]
struct Counted {
    clock: VirtualClock,
    sleeps: Arc<AtomicU64>,
}

impl Clock for Counted {
    fn now(&self) -> Duration {
        self.clock.now()
    }
}

impl Timer for Counted {
    type Sleep = VirtualSleep;

    fn sleep(&self, duration: Duration) -> VirtualSleep {
        self.sleeps.fetch_add(1, Relaxed);
        self.clock.sleep(duration)
    }
}
