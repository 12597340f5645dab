//! Waiting on anything while watching for two other things: the counter being stopped, and the
//! group's total going stale.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;
use futures::channel::oneshot;

use crate::clock::Timer;
use crate::diagnostics::{Event, Reporter};
use crate::shared::Shared;

/// Keeps the group's total and how fresh it is. A total that nothing refreshed for two
/// intervals becomes unknown, whatever the background task is busy with: a hanging flush
/// included.
pub(crate) struct Watch<T> {
    timer: T,
    shared: Arc<Shared>,
    report: Reporter,
    stale_after: Duration,
    refreshed_at: Option<Duration>,
}

enum Woke<O> {
    Done(O),
    Stopped,
    Stale,
}

impl<T: Timer> Watch<T> {
    pub(crate) fn new(timer: T, shared: Arc<Shared>, report: Reporter, interval: Duration) -> Self {
        Self {
            timer,
            shared,
            report,
            stale_after: interval * 2,
            refreshed_at: None,
        }
    }

    /// Takes a reply's total as the group's number: `None` makes it unknown.
    pub(crate) fn refresh(&mut self, total: Option<u64>) {
        self.shared.group.set(total);
        self.refreshed_at = total.map(|_| self.timer.now());
    }

    /// Awaits `future`, or returns `None` once the counter is stopped. Meanwhile the total goes
    /// stale when its time comes.
    pub(crate) async fn until<F: Future>(
        &mut self,
        future: F,
        stop: &mut oneshot::Receiver<()>,
    ) -> Option<F::Output> {
        let mut future = pin!(future);
        loop {
            let stale_in = self
                .refreshed_at
                .map(|at| (at + self.stale_after).saturating_sub(self.timer.now()));
            let mut stale = pin!(stale_in.map(|d| self.timer.sleep(d)));
            let woke = poll_fn(|cx| {
                if let Poll::Ready(output) = future.as_mut().poll(cx) {
                    return Poll::Ready(Woke::Done(output));
                }
                if stop.poll_unpin(cx).is_ready() {
                    return Poll::Ready(Woke::Stopped);
                }
                match stale.as_mut().as_pin_mut().map(|s| s.poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(Woke::Stale),
                    _ => Poll::Pending,
                }
            })
            .await;
            match woke {
                Woke::Done(output) => return Some(output),
                Woke::Stopped => return None,
                Woke::Stale => self.go_stale(),
            }
        }
    }

    fn go_stale(&mut self) {
        if let Some(at) = self.refreshed_at.take() {
            self.shared.group.set(None);
            self.report.emit(Event::TotalWentStale {
                after: self.timer.now().saturating_sub(at),
            });
        }
    }
}
