//! A store that applies every flush and allocates nothing, a sink that counts the flushes
//! completed, and a counter run on virtual time: for tests that count what a flush costs the
//! counter itself.

use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::{Diagnostics, Event, Reporter};
use comcount_core::{FlushReply, FlushRequest, Outcome, Store, StoreError, Worker};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

/// When the store's future is ready.
#[derive(Clone, Copy, Debug)]
pub enum Answers {
    /// When first polled.
    AtOnce,
    /// Pending when first polled, as on a network, and ready on the next poll.
    OnTheNextPoll,
}

/// Applies every flush in the interval it expects, halfway through it, and answers as
/// `answers` says, with `total` as the group's total of the interval before.
pub struct Applies {
    pub answers: Answers,
    pub total: Option<u64>,
}

impl Store for Applies {
    fn name(&self) -> &str {
        "applies"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let phase = Duration::from_millis(request.interval_ms / 2);
        let mut reply = FlushReply::new(
            Outcome::Applied,
            request.expect,
            phase,
            Some(request.expect),
        );
        if self.total.is_some() {
            reply = reply.with_totals(vec![self.total]);
        }
        NextPoll {
            pending: matches!(self.answers, Answers::OnTheNextPoll),
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
pub struct Completed(pub Arc<AtomicU64>);

impl Diagnostics for Completed {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        if let Event::FlushCompleted { .. } = event {
            self.0.fetch_add(1, Relaxed);
        }
    }
}

/// A worker on a local pool, on virtual time, with `touch` (an increment) called before each
/// of its wakes.
pub struct Stepped {
    touch: Box<dyn FnMut()>,
    clock: VirtualClock,
    pool: LocalPool,
    interval: Duration,
}

impl Stepped {
    pub fn new(
        worker: Worker,
        clock: VirtualClock,
        interval: Duration,
        touch: impl FnMut() + 'static,
    ) -> Self {
        let pool = LocalPool::new();
        pool.spawner()
            .spawn_local(async move {
                worker.await;
            })
            .expect("the pool takes the worker");
        Self {
            touch: Box::new(touch),
            clock,
            pool,
            interval,
        }
    }

    /// Runs `intervals` intervals on.
    pub fn run(&mut self, intervals: u64) {
        let until = self.clock.now() + self.interval * intervals as u32;
        loop {
            (self.touch)();
            self.pool.run_until_stalled();
            match self.clock.next_wake() {
                Some(at) if at <= until => self.clock.advance_to(at),
                _ => break,
            }
        }
    }
}
