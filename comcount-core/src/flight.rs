//! One flush in the air: every copy of it sent so far, each awaited until it answers, and what
//! the answers prove about its amount.
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
use crate::error::StoreError;
use crate::store::{FlushReply, FlushRequest, Store};

/// The most copies of one flush awaited at once; a copy sent past it stops the wait for the
/// oldest (which may still land, once).
const MAX_COPIES: usize = 4;

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
    /// Each copy still awaited, with when it was sent. At most [`MAX_COPIES`], so they are
    /// polled in turn on every wake of the loop: cheaper than a set that tracks which one woke.
    awaited: Vec<(Duration, Copy)>,
    /// When the last copy was sent.
    last_sent: Option<Duration>,
    /// Whether some copy may have been applied without this flush hearing of it: one that
    /// went unanswered, or answered with an error that leaves it unknown.
    maybe_counted: bool,
    /// Whether a copy answered as not applied may land yet: one turned away for now, which a
    /// client may send again on its own, or one answered as a wrong interval or fenced, which
    /// a client's replay would carry into another interval of its window.
    may_land_later: bool,
    /// The latest interval a copy could land in: the end of its window.
    latest_reach: Option<u64>,
    /// When the first copy sent since the store last answered went: copies the flush stopped
    /// waiting for, or that failed without a word from the store, still count.
    unheard_since: Option<Duration>,
}

impl Flight {
    /// Ready for a new flush: the copies of the last one are no longer awaited (dropping
    /// them stops the wait, not the store; one may still land).
    pub(crate) fn clear(&mut self) {
        self.awaited.clear();
        self.last_sent = None;
        self.maybe_counted = false;
        self.may_land_later = false;
        self.latest_reach = None;
        self.unheard_since = None;
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
        self.latest_reach = self.latest_reach.max(Some(*request.window().end()));
        self.unheard_since.get_or_insert(now);
        let store = Arc::clone(store);
        let request = Arc::clone(request);
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
                if self.awaited.len() >= MAX_COPIES {
                    self.stop_awaiting_oldest();
                }
                self.awaited.push((now, copy));
                None
            }
        }
    }

    /// When the last copy was sent, if it is still awaited.
    pub(crate) fn last_awaited(&self) -> Option<Duration> {
        self.last_sent
            .filter(|last| self.awaited.iter().any(|(sent, _)| sent == last))
    }

    /// Stops waiting for the oldest copy: it may still land, unheard of.
    fn stop_awaiting_oldest(&mut self) {
        let oldest = (0..self.awaited.len()).min_by_key(|&i| self.awaited[i].0);
        if let Some(i) = oldest {
            drop(self.awaited.swap_remove(i));
            self.maybe_counted = true;
        }
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

    /// Whether some copy is still awaited.
    pub(crate) fn awaiting(&self) -> bool {
        !self.awaited.is_empty()
    }

    /// Whether a copy sent after `sent` is still awaited: its answer will say more than the
    /// one just come.
    pub(crate) fn newer_awaited(&self, sent: Duration) -> bool {
        self.awaited.iter().any(|(at, _)| *at > sent)
    }

    /// When the oldest copy still awaited was sent.
    fn oldest_awaited(&self) -> Option<Duration> {
        self.awaited.iter().map(|(sent, _)| *sent).min()
    }

    /// Notes that the store answered a copy (a reply, or an error of its own).
    pub(crate) fn heard(&mut self) {
        self.unheard_since = None;
    }

    /// How long the flush has waited on the store, as the time its oldest copy still awaited
    /// was sent, or the first copy since the store last answered if that is older: a store
    /// that answers nothing is slow however often copies go, and whatever its client gives up
    /// on. `None` while nothing is awaited.
    pub(crate) fn waiting_since(&self) -> Option<Duration> {
        let oldest = self.oldest_awaited()?;
        Some(
            self.unheard_since
                .map_or(oldest, |unheard| unheard.min(oldest)),
        )
    }

    /// Notes that some copy may have been applied unheard of.
    pub(crate) fn may_have_counted(&mut self) {
        self.maybe_counted = true;
    }

    /// Notes a copy answered as not applied for now: turned away, in a wrong interval, or
    /// fenced. It may land yet, if a client sends it again.
    pub(crate) fn not_applied_yet(&mut self) {
        self.may_land_later = true;
    }

    /// Whether every copy sent has been refused outright: answered, none applied or left
    /// unknown, and none can land later. Such a flush was certainly not counted, and never
    /// will be.
    pub(crate) fn refused_outright(&self) -> bool {
        self.all_answered_unapplied() && !self.may_land_later
    }

    /// Whether every copy sent has answered, and none was applied or left it unknown.
    ///
    /// That settles what the copies did when they ran, not what a client may still do with
    /// them: one that replays a command it already had an answer to would run it again.
    pub(crate) fn all_answered_unapplied(&self) -> bool {
        !self.maybe_counted && self.awaited.is_empty()
    }

    /// Whether no copy was or can ever be applied, given that this participant's fence holds
    /// interval `fenced` or a later one.
    ///
    /// A copy can only be applied within its window (`expect - reach ..= expect + reach`),
    /// and only in an interval later than the fence's: once the fence is at the end of the
    /// latest window, every copy, replayed or not, is turned away for good.
    pub(crate) fn certainly_not_counted(&self, fenced: Option<u64>) -> bool {
        let out_of_reach = match (self.latest_reach, fenced) {
            (None, _) => true,
            (Some(end), Some(fenced)) => fenced >= end,
            (Some(_), None) => false,
        };
        self.all_answered_unapplied() && out_of_reach
    }
}

#[cfg(all(test, not(comcount_loom)))]
mod tests {
    use super::*;
    use crate::clock::{Clock, VirtualClock};
    use crate::diagnostics::Recorder;
    use crate::keys::KeySpace;
    use crate::store::Outcome;
    use crate::{MemoryStore, ParticipantId};
    use futures::executor::block_on;

    /// A copy aimed at interval 5 with a reach of 2, answered "fenced" by a fence at 6: a
    /// client's replay of it an interval later lands in 7, past the fence, and is applied. So
    /// the fence being past the aim does not make the flush certainly not counted; only a fence
    /// at the end of the copy's window does.
    #[test]
    fn a_fence_past_the_aim_but_within_the_reach_does_not_rule_out_a_replay() {
        const INTERVAL_MS: u64 = 1000;
        let clock = VirtualClock::new();
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        let report = Reporter::new("flight", Arc::new(Recorder::new()));
        let space = KeySpace::counter("", "reach");
        let request = |seq, expect| {
            FlushRequest::new(space.clone(), ParticipantId::from_u64(1), INTERVAL_MS)
                .with_seq(seq)
                .with_expect(expect)
                .with_reach(2)
                .with_amount(5)
        };
        clock.advance(Duration::from_millis(6 * INTERVAL_MS + 500));
        let earlier = block_on(store.flush(&request(1, 6), &report)).unwrap();
        assert_eq!(earlier.outcome, Outcome::Applied);

        let flush = Arc::new(request(2, 5));
        let mut flight = Flight::default();
        let answer = flight.send(&store, &flush, &report, clock.now()).unwrap();
        assert_eq!(answer.result.unwrap().outcome, Outcome::Fenced);
        assert!(!flight.certainly_not_counted(Some(6)));
        // The replay the check allows for.
        clock.advance(Duration::from_millis(INTERVAL_MS));
        let replay = block_on(store.flush(&flush, &report)).unwrap();
        assert_eq!(replay.outcome, Outcome::Applied);
        // A fence at the end of the window keeps every copy out.
        assert!(flight.certainly_not_counted(Some(7)));
    }
}
