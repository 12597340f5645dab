//! The copies of one flush in the air, each awaited until it answers. What their answers mean
//! for the flush is [`Settling`](crate::engine::policy::settling::Settling)'s to decide.
//!
//! A copy is never given up on while the flush is open: a reply that comes after the timeout
//! still settles the flush, so a store slower than the timeout costs extra copies, not the
//! flush. All copies carry the same sequence number, so the store's fence applies at most one
//! of them.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::noop_waker_ref;

use crate::diagnostics::Reporter;
use crate::engine::policy::settling::push_sparingly;
use crate::error::StoreError;
use crate::protocol::reply::FlushReply;
use crate::protocol::request::FlushRequest;
use crate::protocol::store::Store;

/// One copy's answer.
pub(crate) struct Answer {
    /// When the copy was sent, on the counter's timer.
    pub(crate) sent: Duration,
    pub(crate) result: Result<FlushReply, StoreError>,
}

type Copy = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// Kept by its flush loop from one flush to the next, so that a flush allocates nothing here
/// but its copies.
#[derive(Default)]
pub(crate) struct Flight {
    /// Each copy still awaited, with when it was sent. At most
    /// [`MAX_COPIES`](crate::engine::policy::settling::MAX_COPIES), so they are polled in turn on every wake of
    /// the loop: cheaper than a set that tracks which one woke.
    awaited: Vec<(Duration, Copy)>,
}

impl Flight {
    /// Ready for a new flush: the copies of the last one are no longer awaited (dropping
    /// them stops the wait, not the store; one may still land).
    pub(crate) fn clear(&mut self) {
        self.awaited.clear();
    }

    /// Sends one copy of `request` and polls it once, so that it is in the store's hands on
    /// return. Returns its answer at once if it has one.
    pub(crate) fn send<S: Store>(
        &mut self,
        store: &Arc<S>,
        request: &Arc<FlushRequest>,
        report: &Reporter,
        now: Duration,
    ) -> Option<Answer> {
        let store = Arc::clone(store);
        let request = Arc::clone(request);
        let report = report.clone();
        let mut copy: Copy = Box::pin(async move {
            let result = store.flush(&request, &report).await;
            Answer { sent: now, result }
        });
        match copy
            .as_mut()
            .poll(&mut Context::from_waker(noop_waker_ref()))
        {
            Poll::Ready(answer) => Some(answer),
            Poll::Pending => {
                push_sparingly(&mut self.awaited, (now, copy));
                None
            }
        }
    }

    /// Stops waiting for the copy sent at `sent`: it may still land, unheard of.
    pub(crate) fn stop_awaiting(&mut self, sent: Duration) {
        self.awaited.retain(|(at, _)| *at != sent);
    }

    /// The next answer of a copy still awaited; pending forever when none is.
    ///
    /// No copy is polled once `closed` says so: one polled before may have closed the counter
    /// (its store, or the diagnostics it reported to), and the next may hand its command over
    /// on this poll.
    pub(crate) async fn next_answer(&mut self, closed: impl Fn() -> bool) -> Answer {
        poll_fn(|cx| {
            for (i, (_, copy)) in self.awaited.iter_mut().enumerate() {
                if closed() {
                    // Woken by the close, the caller sees it next.
                    return Poll::Pending;
                }
                if let Poll::Ready(answer) = copy.as_mut().poll(cx) {
                    drop(self.awaited.swap_remove(i));
                    return Poll::Ready(answer);
                }
            }
            Poll::Pending
        })
        .await
    }
}
