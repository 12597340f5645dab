//! The flush loop: one flush in the air at a time, each settled before the next, and the pause
//! between them.
//!
//! A flush keeps its sequence number and its amount from its first send to its settling, so
//! that every copy of it that is ever sent, by this loop or by a client replaying it, is the
//! same flush to the store's fence: applied at most once. An amount goes back to the buffer
//! (and so into a flush with another number) only when no copy of its flush can ever be
//! applied.

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::oneshot;
use futures::future::{Either, select};

use crate::aim::Aim;
use crate::clock::Timer;
use crate::diagnostics::{Event, Reporter};
use crate::error::{AmountError, StoreError, StoreErrorKind};
use crate::settings::Settings;
use crate::shared::Shared;
use crate::store::{FlushReply, FlushRequest, Outcome, ParticipantId, Store};
use crate::timing::Timing;
use crate::watch::Watch;

/// How many wrong-interval replies in a row a flush may get before it waits for the next
/// interval; each costs a round trip, so a run of them is short and never a busy loop.
const MAX_WRONG_IN_A_ROW: u32 = 3;

pub(crate) struct Flusher<S, T> {
    shared: Arc<Shared>,
    store: S,
    timer: T,
    settings: Settings,
    report: Reporter,
    watch: Watch<T>,
    aim: Aim,
    request: FlushRequest,
    /// The last interval this participant is known to have added to.
    last_added: Option<u64>,
}

/// What became of one flush.
enum Settled {
    /// Counted by the store in this interval.
    Counted(u64),
    /// Not counted, and never will be: the amount is back in the buffer, or reported dropped.
    NotCounted,
}

impl<S: Store, T: Timer> Flusher<S, T> {
    pub(crate) fn new(
        shared: Arc<Shared>,
        store: S,
        timer: T,
        settings: Settings,
        report: Reporter,
        participant: ParticipantId,
    ) -> Self {
        Self {
            watch: Watch::new(
                timer.clone(),
                Arc::clone(&shared),
                report.clone(),
                settings.interval,
            ),
            aim: Aim::new(settings.interval_ms),
            request: FlushRequest {
                key_base: Arc::clone(&settings.key_base),
                participant,
                seq: 0,
                amount: 0,
                interval_ms: settings.interval_ms,
                expect: 0,
                fence_ttl_ms: settings.fence_ttl_ms,
            },
            last_added: None,
            shared,
            store,
            timer,
            settings,
            report,
        }
    }

    /// Waits for the first increment, then flushes, pauses and flushes again until stopped.
    pub(crate) async fn run(&mut self, stop: &mut oneshot::Receiver<()>) -> Option<()> {
        self.watch.until(self.shared.started(), stop).await?;
        loop {
            let settled = self.flush(stop).await?;
            if let Settled::Counted(interval) = settled {
                self.last_added = Some(interval);
            }
            let pause = self.pause(&settled);
            self.watch.until(self.timer.sleep(pause), stop).await?;
        }
    }

    /// How long to wait before the next flush.
    fn pause(&self, settled: &Settled) -> Duration {
        match self.settings.policy.timing {
            Timing::AfterReply => self.settings.interval,
            Timing::MidInterval => {
                let now = self.timer.now();
                // After a flush that did not count, not again in the same interval: what
                // failed there would likely fail again.
                let floor = match settled {
                    Settled::Counted(_) => self.last_added,
                    Settled::NotCounted => {
                        self.last_added.max(Some(self.aim.expected_interval(now)))
                    }
                };
                self.aim
                    .delay_to_aim(now, floor)
                    .unwrap_or(self.settings.interval)
            }
        }
    }

    /// Sends the buffer as one new flush and keeps at it until it is settled.
    async fn flush(&mut self, stop: &mut oneshot::Receiver<()>) -> Option<Settled> {
        self.request.seq += 1;
        self.request.amount = self.shared.buffer.take();
        let first_sent = self.timer.now();
        let mut expects = Expects::default();
        let mut wrong_in_a_row = 0;
        let mut backoff = Backoff::new(self.settings.interval);
        loop {
            self.request.expect = self.aim.expected_interval(self.timer.now());
            expects.note(self.request.expect);
            let sent = self.timer.now();
            let sending = self.store.flush(&self.request, &self.report);
            let timeout = self.settings.policy.flush_timeout;
            let result = self
                .watch
                .until(with_timeout(sending, self.timer.sleep(timeout)), stop)
                .await?;
            let trying_for = self.timer.now().saturating_sub(first_sent);
            let reply = match result {
                Ok(reply) => reply,
                Err(error) => {
                    let may_resend =
                        error.worth_resending() && trying_for < self.settings.policy.resend_window;
                    if !may_resend {
                        self.fail(&error, self.request.amount);
                        return Some(Settled::NotCounted);
                    }
                    self.watch
                        .until(self.timer.sleep(backoff.next()), stop)
                        .await?;
                    continue;
                }
            };
            self.aim.observe(&reply, sent, self.timer.now());
            backoff.reset();
            match reply.outcome {
                Outcome::Applied | Outcome::Duplicate => {
                    self.watch.refresh(reply.previous_total);
                    self.report.emit(Event::FlushCompleted {
                        interval: reply.interval,
                        amount: self.request.amount,
                        count: self.shared.count(),
                    });
                    return Some(Settled::Counted(reply.interval));
                }
                Outcome::Stale => {
                    self.watch.refresh(reply.previous_total);
                    self.fail(&StoreError::refused(StaleFlush), self.request.amount);
                    return Some(Settled::NotCounted);
                }
                Outcome::Fenced if expects.single() => {
                    // Every copy of this flush expects this interval, where the fence stops
                    // them all: none can ever count, so the amount may join a later flush.
                    self.watch.refresh(reply.previous_total);
                    self.last_added = Some(reply.interval);
                    self.put_back(self.request.amount);
                    return Some(Settled::NotCounted);
                }
                Outcome::Fenced => {
                    // A copy aimed at another interval may still be on its way: only this
                    // same flush may carry the amount, in a later interval (the aim below
                    // skips the fenced one).
                    self.watch.refresh(reply.previous_total);
                    self.last_added = Some(reply.interval);
                }
                Outcome::WrongInterval => wrong_in_a_row += 1,
            }
            if trying_for >= self.give_up_after() {
                let error = StoreError::new(StoreErrorKind::Unanswered, NeverLanded);
                self.fail(&error, self.request.amount);
                return Some(Settled::NotCounted);
            }
            // Try again aimed at an interval this participant has not added to: at once
            // while a short run of wrong intervals lasts and the aim allows, else later.
            let now = self.timer.now();
            let mut floor = self.last_added;
            if wrong_in_a_row >= MAX_WRONG_IN_A_ROW {
                wrong_in_a_row = 0;
                floor = floor.max(Some(self.aim.expected_interval(now)));
            }
            let wait = self
                .aim
                .delay_to_aim(now, floor)
                .unwrap_or(self.settings.interval);
            if !wait.is_zero() {
                wrong_in_a_row = 0;
                self.watch.until(self.timer.sleep(wait), stop).await?;
            }
        }
    }

    /// How long a flush that keeps missing its interval is tried before it is dropped.
    fn give_up_after(&self) -> Duration {
        self.settings
            .policy
            .resend_window
            .max(self.settings.interval * 4)
    }

    /// Returns an amount that was certainly not counted to the buffer.
    fn put_back(&self, amount: u64) {
        let overflow = self.shared.buffer.put_back(amount);
        if overflow > 0 {
            let error = StoreError::refused(AmountError::BufferFull { amount });
            self.fail(&error, overflow);
        }
    }

    fn fail(&self, error: &StoreError, dropped: u64) {
        self.report.emit(Event::FlushFailed { error, dropped });
    }
}

/// Awaits `sending`, or fails it as unanswered once `deadline` completes.
async fn with_timeout<F, D>(sending: F, deadline: D) -> Result<FlushReply, StoreError>
where
    F: Future<Output = Result<FlushReply, StoreError>>,
    D: Future<Output = ()>,
{
    match select(pin!(sending), pin!(deadline)).await {
        Either::Left((result, _)) => result,
        Either::Right(((), _)) => Err(StoreError::unanswered(TimedOut)),
    }
}

/// The intervals one flush was sent to expect.
#[derive(Default)]
struct Expects {
    first: Option<u64>,
    mixed: bool,
}

impl Expects {
    fn note(&mut self, expect: u64) {
        match self.first {
            None => self.first = Some(expect),
            Some(first) if first != expect => self.mixed = true,
            Some(_) => {}
        }
    }

    fn single(&self) -> bool {
        !self.mixed
    }
}

/// Pauses between resends of an unanswered flush: from a fiftieth of the interval, doubling up
/// to half an interval.
struct Backoff {
    first: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    fn new(interval: Duration) -> Self {
        let first = (interval / 50).max(Duration::from_millis(1));
        Self {
            first,
            cap: (interval / 2).max(first),
            next: first,
        }
    }

    fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.cap);
        now
    }

    fn reset(&mut self) {
        self.next = self.first;
    }
}

/// A flush that took longer than the flush timeout.
#[derive(Debug)]
struct TimedOut;

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no reply within the flush timeout; raise it with Builder::flush_timeout if the store is slow")
    }
}

impl std::error::Error for TimedOut {}

/// A flush that kept missing the store's interval.
#[derive(Debug)]
struct NeverLanded;

impl fmt::Display for NeverLanded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the flush kept arriving in another interval than the store's clock was in; \
             check that the interval is well above the round trip to the store",
        )
    }
}

impl std::error::Error for NeverLanded {}

/// A flush the store found older than one it already applied from this participant: two live
/// participants share an id.
#[derive(Debug)]
struct StaleFlush;

impl fmt::Display for StaleFlush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the store already applied a later flush under this participant id; \
             give every live participant its own id",
        )
    }
}

impl std::error::Error for StaleFlush {}
