//! The background task of a counter: the tick that flushes its buffer, once an interval.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::StreamExt;
use futures::future::{join, poll_fn};
use futures::stream::FuturesUnordered;

use crate::clock::Timer;
use crate::diagnostics::{Event, Reporter};
use crate::engine::flusher::Flusher;
use crate::engine::freshness::TotalsClock;
use crate::engine::parts::Parts;
use crate::engine::policy::lanes::Lanes;
use crate::handle::shared::Shared;
use crate::protocol::store::Store;

/// The background task of a [`Counter`](crate::Counter) or a [`Family`](crate::Family): a
/// future to spawn on any executor.
///
/// It does nothing until the first increment, then flushes once an interval (a family: once
/// per partition, side by side). It completes after [`Counter::close`](crate::Counter::close)
/// or when every handle is dropped, once it has accounted for the flush it had in the air
/// (without waiting for its reply: it puts the amount back where the store's fence proves it
/// was not counted, and reports it unsettled otherwise). If it is dropped first (its runtime
/// shut down, say, or a panic unwound through it), the drop closes the counter, so that
/// `is_closed()` tells that nothing flushes it any more, and accounts for that flush the same
/// way. Either way it ends with `counter stopped`. If the diagnostics sink is what panicked,
/// nothing more is reported to it: the amount is put back where the fence proves it safe, and
/// otherwise goes unreported.
///
/// ```no_run
/// # #[cfg(feature = "tokio")]
/// # async fn doc() -> Result<(), comcount_core::ConfigError> {
/// use std::time::Duration;
/// use comcount_core::{Counter, MemoryStore, clock::TokioTimer};
///
/// let (counter, worker) = Counter::builder("requests", Duration::from_secs(5))
///     .build(MemoryStore::new(), TokioTimer::new())?;
/// tokio::spawn(worker);
/// counter.increment(1);
/// # Ok(())
/// # }
/// ```
#[must_use = "a worker does nothing unless spawned or polled"]
pub struct Worker {
    future: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Closed when the worker is dropped, whether it ended or not: nothing flushes after.
    shared: Arc<Shared>,
}

impl Worker {
    pub(crate) fn new<S: Store, T: Timer>(parts: Parts<Arc<S>, T>) -> Self {
        Self {
            shared: Arc::clone(&parts.shared),
            future: Box::pin(run(Box::new(parts))),
        }
    }

    /// The size in bytes of the background task this worker keeps on the heap: the state
    /// machine of its flush loop, which depends on the store and timer it was built with.
    ///
    /// For benchmarks and memory budgets; not part of the stable API.
    #[doc(hidden)]
    pub fn task_size(&self) -> usize {
        std::mem::size_of_val(&*self.future)
    }
}

impl Future for Worker {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.future.as_mut().poll(cx)
    }
}

impl Drop for Worker {
    /// A worker dropped before it ended (its runtime shut down, a panic unwound through it, or
    /// it was never spawned) closes its counter: nothing will flush it again, and
    /// [`Counter::is_closed`](crate::Counter::is_closed) says so. Its flush in the air is
    /// accounted for as the future drops, just after.
    fn drop(&mut self) {
        self.shared.close();
        // The task first, which accounts for its flush and reports the stop, if it ran; then
        // whoever waits for the stop, whether it ran or not.
        self.future = Box::pin(std::future::ready(()));
        self.shared.stop();
    }
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker").finish_non_exhaustive()
    }
}

/// Ends the background task's life however it ends (stopped, panicking in a store or a
/// diagnostics sink, or dropped with its runtime): the group's totals become unknown, since
/// nothing refreshes them after, and `counter stopped` is reported with what was never sent,
/// unless the diagnostics sink is what panicked. It is the last thing the task drops, after
/// its flushes in the air have put back what they certainly did not count.
struct StopOnExit<'a> {
    shared: &'a Shared,
    report: &'a Reporter,
}

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.shared.forget_totals();
        if !self.report.sink_panicked() {
            self.shared.report_keys(self.report);
            let unsent = self.shared.unsent();
            self.report.emit(Event::CounterStopped { unsent });
        }
        self.shared.stop();
    }
}

/// Reports the start, then runs the flush loops of every partition until the counter is
/// closed and they have accounted for their flushes.
///
/// `parts` is used in place, not taken apart and put together again, and boxed: an async fn
/// keeps room for its arguments both as passed and as moved into its body.
async fn run<S: Store, T: Timer>(parts: Box<Parts<Arc<S>, T>>) {
    let parts = &*parts;
    let _stop = StopOnExit {
        shared: &parts.shared,
        report: &parts.report,
    };
    let (report, store) = (&parts.report, &parts.store);
    report.emit(Event::CounterStarted {
        interval: parts.settings.interval,
        prefix: &parts.settings.prefix,
        store: store.name(),
    });
    if let Some(caveat) = store.caveat() {
        report.emit(Event::StoreCaveat {
            store: store.name(),
            caveat: &caveat,
        });
    }
    let partitions = parts.settings.partitions();
    if partitions == 1 {
        // A counter, or a family of one partition: its loops alone, without a join to poll
        // them through.
        flush_partition(parts, 0).await;
    } else {
        // Each partition is polled when its own waker fires: a join that polls every child on
        // any wake (as `join_all` does up to 30) would poll all the partitions for the answer
        // of one.
        let mut loops: FuturesUnordered<_> = (0..partitions)
            .map(|partition| flush_partition(parts, partition))
            .collect();
        while loops.next().await.is_some() {}
    }
    // The loops end once closed, or once drained; closed either way from here on.
    parts.shared.close();
}

/// The flush loops of one partition: its first lane, and the others it opens while the store
/// is farther away than an interval ([`lanes`](crate::engine::policy::lanes)). Every lane is polled on any of
/// their wakes: they share the partition's waker, which a close wakes.
async fn flush_partition<S: Store, T: Timer>(parts: &Parts<Arc<S>, T>, partition: u32) {
    let (lanes, totals) = (Lanes::default(), TotalsClock::default());
    let mut first = Flusher::new(parts, partition, 0, &lanes, &totals);
    if parts.settings.lanes_allowed() {
        join(first.run(), more_lanes(parts, partition, &lanes, &totals)).await;
    } else {
        first.run().await;
    }
}

/// The lanes after the first, each started when the first wants it, each ending when it is
/// no longer wanted, the counter is closed, or its partition is drained; completes once closed
/// or draining and every lane has ended.
async fn more_lanes<S: Store, T: Timer>(
    parts: &Parts<Arc<S>, T>,
    partition: u32,
    lanes: &Lanes,
    totals: &TotalsClock,
) {
    type Lane<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
    let mut running: Vec<(u32, Lane<'_>)> = Vec::new();
    poll_fn(|cx| {
        // The first lane decides how many are wanted as it runs, and it is polled just before
        // this, in the same join: no wake is needed for a change.
        let ending = parts.shared.is_closed() || parts.shared.drain_by().is_some();
        if !ending {
            for lane in 1..lanes.wanted() {
                if running.iter().all(|(open, _)| *open != lane) {
                    let mut flusher = Flusher::new(parts, partition, lane, lanes, totals);
                    let run: Lane<'_> = Box::pin(async move {
                        flusher.run().await;
                    });
                    running.push((lane, run));
                }
            }
        }
        running.retain_mut(|(_, run)| run.as_mut().poll(cx).is_pending());
        if ending && running.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}
