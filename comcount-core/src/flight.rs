//! One flush in the air: every copy of it sent so far, each awaited until it answers, and what
//! the answers prove about its amount.
//!
//! A copy is never given up on while the flush is open: a reply that comes after the timeout
//! still settles the flush, so a store slower than the timeout costs extra copies, not the
//! flush. All copies carry the same sequence number, so the store's fence applies at most one
//! of them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use futures::task::noop_waker_ref;

use crate::diagnostics::Reporter;
use crate::error::StoreError;
use crate::store::{FlushReply, FlushRequest, Store};

/// The most copies of one flush awaited at once; past it, no copy is added until one answers.
const MAX_COPIES: usize = 4;

/// One copy's answer.
pub(crate) struct Answer {
    /// When the copy was sent, on the counter's timer.
    pub(crate) sent: Duration,
    pub(crate) result: Result<FlushReply, StoreError>,
}

type Copy = Pin<Box<dyn Future<Output = Answer> + Send>>;

#[derive(Default)]
pub(crate) struct Flight {
    copies: FuturesUnordered<Copy>,
    /// When each copy still awaited was sent.
    awaited: Vec<Duration>,
    /// When the last copy was sent.
    last_sent: Option<Duration>,
    /// Whether some copy may have been applied without this flush hearing of it: one that
    /// went unanswered, or answered with an error that leaves it unknown.
    maybe_counted: bool,
    /// The latest interval a copy was aimed at.
    latest_aim: Option<u64>,
}

impl Flight {
    /// Sends one copy of `request` and polls it once, so that it is in the store's hands on
    /// return. Returns its answer at once if it has one.
    pub(crate) fn send<S: Store>(
        &mut self,
        store: &Arc<S>,
        request: &FlushRequest,
        report: &Reporter,
        now: Duration,
    ) -> Option<Answer> {
        self.latest_aim = self.latest_aim.max(Some(request.expect));
        let store = Arc::clone(store);
        let request = request.clone();
        let report = report.clone();
        let mut copy: Copy = Box::pin(async move {
            let result = store.flush(&request, &report).await;
            Answer { sent: now, result }
        });
        self.last_sent = Some(now);
        match copy
            .as_mut()
            .poll(&mut Context::from_waker(noop_waker_ref()))
        {
            Poll::Ready(answer) => Some(answer),
            Poll::Pending => {
                self.copies.push(copy);
                self.awaited.push(now);
                None
            }
        }
    }

    /// The next answer of a copy still awaited; pending forever when none is.
    pub(crate) async fn next_answer(&mut self) -> Answer {
        if self.copies.is_empty() {
            return std::future::pending().await;
        }
        let answer = self
            .copies
            .next()
            .await
            .unwrap_or_else(|| unreachable!("a copy is awaited"));
        if let Some(at) = self.awaited.iter().position(|sent| *sent == answer.sent) {
            self.awaited.swap_remove(at);
        }
        answer
    }

    /// Whether some copy is still awaited.
    pub(crate) fn awaiting(&self) -> bool {
        !self.copies.is_empty()
    }

    /// Whether another copy may be added to those awaited.
    pub(crate) fn has_room(&self) -> bool {
        self.copies.len() < MAX_COPIES
    }

    /// When the oldest copy still awaited was sent.
    pub(crate) fn oldest_awaited(&self) -> Option<Duration> {
        self.awaited.iter().min().copied()
    }

    /// When the last copy was sent, if any was.
    pub(crate) fn last_sent(&self) -> Option<Duration> {
        self.last_sent
    }

    /// Notes that some copy may have been applied unheard of.
    pub(crate) fn may_have_counted(&mut self) {
        self.maybe_counted = true;
    }

    /// Whether every copy sent has answered, and none was applied or left it unknown.
    ///
    /// That settles what the copies did when they ran, not what a client may still do with
    /// them: one that replays a command it already had an answer to would run it again.
    pub(crate) fn all_answered_unapplied(&self) -> bool {
        !self.maybe_counted && self.copies.is_empty()
    }

    /// Whether no copy was or can ever be applied, given that this participant's fence holds
    /// interval `fenced` or a later one.
    ///
    /// A copy aimed at interval `e` can only be applied in `e - 1`, `e` or `e + 1`, and only
    /// in an interval later than the fence's: once the fence is at `e + 1` for the latest `e`,
    /// every copy, replayed or not, is turned away for good.
    pub(crate) fn certainly_not_counted(&self, fenced: Option<u64>) -> bool {
        let out_of_reach = match (self.latest_aim, fenced) {
            (None, _) => true,
            (Some(aim), Some(fenced)) => fenced > aim,
            (Some(_), None) => false,
        };
        self.all_answered_unapplied() && out_of_reach
    }
}
