//! A counter's flush loop sets one timer for each wait: the wait for an answer and the pause
//! after it each take one, the time the total goes stale included.
//!
//! A runtime's timer wheel inserts and removes an entry for every timer, and thousands of
//! counters on one connection flush tens of thousands of times a second (BENCHMARKS.md,
//! Overload).

use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use comcount_core::clock::{Clock, Timer, VirtualClock, VirtualSleep};
use comcount_core::diagnostics::{Diagnostics, Event, Reporter};
use comcount_core::{Counter, FlushReply, FlushRequest, Outcome, Store, StoreError};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

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
    let (counter, worker) = Counter::builder("timers", INTERVAL)
        .diagnostics(Completed(Arc::clone(&flushes)))
        .build(Applies, timer.clone())
        .expect("valid settings");
    let mut pool = LocalPool::new();
    pool.spawner()
        .spawn_local(async move {
            worker.await;
        })
        .expect("the pool takes the worker");
    let clock = &timer.clock;
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
    assert!(counter.group_total().is_some(), "the replies bring a total");
    let (timers, flushed) = (timer.sleeps.load(Relaxed), flushes.load(Relaxed));
    run(FLUSHES);
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

/// A store that applies every flush in the interval it expects, answering on the poll after
/// the first, as on a network, with a group total.
struct Applies;

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
        )
        .with_totals(vec![Some(7)]);
        NextPoll {
            pending: true,
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
