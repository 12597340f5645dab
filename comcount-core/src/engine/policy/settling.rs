//! How one flush settles: a state machine with no I/O and no clock of its own. The flush loop
//! tells it what happened (a copy sent, a reply, an error, a deadline passed) with the time,
//! and asks it what to do next ([`Settling::next`]): send a copy, wait, or end the flush as
//! counted, put back, or given up.
//!
//! A flush keeps its sequence number and its amount from its first copy to its settling, so
//! that every copy of it ever sent, by the loop or by a client replaying it, is the same flush
//! to the store's fence: applied at most once. Copies are awaited side by side, so a reply
//! that comes late settles the flush as well as a prompt one. Another copy goes out only when
//! the last one has gone unanswered for the measured timeout (which then doubles), or when an
//! answer proves that no copy was applied: a slow store gets fewer copies, not more.
//!
//! A copy the store turned away for now ([`Unavailable`](crate::StoreErrorKind::Unavailable))
//! was not applied: another goes after a short backoff (a fiftieth of the interval, doubling up
//! to half of one) for as long as the resend window lasts, the flush keeping its amount
//! meanwhile. That carries a flush through a cluster slot held open by a resharding, which
//! turns away every flush until the slot is given: the script declares the key of the interval
//! after its aim, which no write has made yet, and a node migrating or importing the slot
//! answers `TRYAGAIN` to a script whose keys it does not all hold. The stores do not retry on
//! their own: they have no timer, and a copy held in a store past the resend timeout would only
//! bring more copies.
//!
//! The amount goes back to the buffer only when no copy was or ever can be applied. It is
//! reported dropped only when the store refused it, and unsettled when whether it was counted
//! cannot be known.

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::diagnostics::{Event, Reporter, ResendReason};
use crate::engine::policy::aim::Aim;
use crate::engine::policy::backoff::Backoff;
use crate::engine::policy::round_trip::RoundTrip;
use crate::error::{
    Abandoned, NeverLanded, NoReply, NumberTaken, StaleFlush, StoreError, StoreErrorKind,
};
use crate::handle::settings::Settings;
use crate::protocol::reply::{FlushReply, Outcome};

/// How many wrong-interval replies in a row a flush may get before it waits for the next
/// interval; each costs a round trip, so a run of them is short and never a busy loop.
const MAX_WRONG_IN_A_ROW: u32 = 3;

/// The most copies of one flush awaited at once; a copy sent past it stops the wait for the
/// oldest (which may still land, once).
pub(crate) const MAX_COPIES: usize = 4;

/// What the flush loop does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Send a copy now, then tell [`Settling::sent`].
    Send(Why),
    /// Wait for an answer of a copy in the air, or until this time.
    Wait(Duration),
    /// Counted by the store in this interval.
    Counted(u64),
    /// No copy was or ever can be applied: the amounts join a later flush.
    PutBack,
    /// No more copies: the amounts are reported `dropped` (certainly not counted) or
    /// unsettled (whether they were counted is unknown).
    GiveUp { error: StoreError, dropped: bool },
    /// No more copies, none refused, and whether one was counted is unknown: a later applied
    /// flush of this participant may tell ([`doubt`](crate::engine::doubt)).
    InDoubt(StoreError),
}

/// Why a copy is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// The first.
    First,
    /// The last one went unanswered, or failed on the way: sent again within the resend
    /// window.
    Resend(ResendReason),
    /// The last one answered that it landed in an interval it could not be added to: sent
    /// again, aimed at another, for as long as the flush is kept.
    Retarget(ResendReason),
}

impl Why {
    /// Why a copy is sent again; `None` for the first.
    fn resent(self) -> Option<ResendReason> {
        match self {
            Why::First => None,
            Why::Resend(reason) | Why::Retarget(reason) => Some(reason),
        }
    }
}

/// The limits a flush is settled within, from the counter's settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) interval: Duration,
    /// How long copies of an unanswered flush are sent again.
    pub(crate) resend_window: Duration,
    /// How long the store's fence keeps a participant's last flush.
    pub(crate) fence_ttl: Duration,
}

impl From<&Settings> for Limits {
    fn from(settings: &Settings) -> Self {
        Self {
            interval: settings.interval,
            resend_window: settings.policy.resend_window,
            fence_ttl: settings.fence_ttl(),
        }
    }
}

/// The settling of a participant's flushes, one at a time. What it learns of the store (the
/// round trip, the last interval added to) carries from one flush to the next.
#[derive(Debug)]
pub(crate) struct Settling {
    limits: Limits,
    round_trip: RoundTrip,
    /// The last interval this participant is known to have added to.
    last_added: Option<u64>,
    /// When the flush began.
    started: Duration,
    /// Copies sent so far.
    copies: u32,
    /// When to send another copy, and why, if one is due.
    next_copy: Option<(Duration, Why)>,
    /// A refusal: no more copies are sent.
    refusal: Option<StoreError>,
    /// The last error that left it unknown whether a copy was applied.
    last_error: Option<StoreError>,
    backoff: Backoff,
    wrong_in_a_row: u32,
    /// The flush ended: counted, or given up on while copies were still awaited.
    verdict: Option<Verdict>,
    /// The windows of the copies sent: the intervals one of them may have been counted in.
    windows: Vec<RangeInclusive<u64>>,
    /// When each copy still awaited was sent, oldest first.
    awaited: Vec<Duration>,
    /// When the last copy was sent.
    last_sent: Option<Duration>,
    /// Whether some copy may have been applied without this flush hearing of it: one that
    /// went unanswered, or answered with an error that leaves it unknown.
    maybe_counted: bool,
    /// Whether a copy answered as not applied may land yet: one turned away for now, which a
    /// client may send again on its own, or one answered as a wrong interval or fenced, which
    /// a client's replay would carry into another interval of its window.
    may_land_later: bool,
    /// When the first copy sent since the store last answered went.
    unheard_since: Option<Duration>,
}

/// Pushes `item`, making room for just one at first: most flushes send one copy, and a
/// counter keeps the room from one flush to the next, where `push` would make room for four.
pub(crate) fn push_sparingly<T>(vec: &mut Vec<T>, item: T) {
    if vec.capacity() == 0 {
        vec.reserve_exact(1);
    }
    vec.push(item);
}

#[derive(Debug, Clone, Copy)]
enum Verdict {
    Counted(u64),
    Expired,
}

impl Settling {
    pub(crate) fn new(limits: Limits, round_trip: RoundTrip) -> Self {
        Self {
            limits,
            round_trip,
            last_added: None,
            started: Duration::ZERO,
            copies: 0,
            next_copy: None,
            refusal: None,
            last_error: None,
            backoff: Backoff::new(limits.interval),
            wrong_in_a_row: 0,
            verdict: None,
            windows: Vec::new(),
            awaited: Vec::new(),
            last_sent: None,
            maybe_counted: false,
            may_land_later: false,
            unheard_since: None,
        }
    }

    /// Begins a new flush at `now`: its first copy is due.
    pub(crate) fn start(&mut self, now: Duration) {
        self.started = now;
        self.copies = 0;
        self.next_copy = Some((now, Why::First));
        self.refusal = None;
        self.last_error = None;
        self.backoff = Backoff::new(self.limits.interval);
        self.wrong_in_a_row = 0;
        self.verdict = None;
        self.windows.clear();
        self.awaited.clear();
        self.last_sent = None;
        self.maybe_counted = false;
        self.may_land_later = false;
        self.unheard_since = None;
    }

    /// What to do at `now`, the aim having learnt from every reply so far.
    pub(crate) fn next(&mut self, now: Duration) -> Step {
        match self.verdict {
            Some(Verdict::Counted(interval)) => return Step::Counted(interval),
            Some(Verdict::Expired) => return self.conclude(),
            None => {}
        }
        if let Some((at, why)) = self.next_copy
            && at <= now
        {
            self.next_copy = None;
            if self.may_send(why, now) {
                return Step::Send(why);
            }
        }
        if self.awaited.is_empty() && self.next_copy.is_none() {
            return self.conclude();
        }
        Step::Wait(self.next_wake(now))
    }

    /// A copy went at `now`, aimed at `window`; `awaited` unless it answered at once. Returns
    /// when the copy was sent that is no longer awaited to make room for this one, if any.
    pub(crate) fn sent(
        &mut self,
        now: Duration,
        window: RangeInclusive<u64>,
        awaited: bool,
    ) -> Option<Duration> {
        if self.windows.last() != Some(&window) {
            push_sparingly(&mut self.windows, window);
        }
        self.unheard_since.get_or_insert(now);
        self.last_sent = Some(now);
        self.copies = self.copies.saturating_add(1);
        if !awaited {
            return None;
        }
        let dropped = (self.awaited.len() >= MAX_COPIES).then(|| {
            // It may still land, unheard of.
            self.maybe_counted = true;
            self.awaited.remove(0)
        });
        push_sparingly(&mut self.awaited, now);
        dropped
    }

    /// A copy sent at `sent` was answered at `now` with `reply`: the round trip and `aim`
    /// learn from it first.
    pub(crate) fn replied(
        &mut self,
        reply: &FlushReply,
        sent: Duration,
        now: Duration,
        aim: &mut Aim,
    ) {
        self.answered(sent);
        self.unheard_since = None;
        self.round_trip.sample(now.saturating_sub(sent));
        aim.observe(reply, now, &self.round_trip);
        self.backoff.reset();
        match reply.outcome {
            Outcome::Duplicate if reply.counted_in.is_some_and(|n| !self.may_land_in(n)) => {
                // The fence holds this flush's number, but from a flush counted where none of
                // its copies can land: another run's, under the same id.
                self.refuse(StoreError::refused(NumberTaken));
            }
            Outcome::Applied | Outcome::Duplicate => {
                let interval = reply.counted_in.unwrap_or(reply.interval);
                self.verdict = Some(Verdict::Counted(interval));
                self.last_added = self.last_added.max(Some(interval));
            }
            Outcome::Stale => self.refuse(StoreError::refused(StaleFlush)),
            Outcome::Fenced => {
                // This participant added to this interval already: the same flush goes to a
                // later one.
                self.may_land_later = true;
                self.last_added = self.last_added.max(Some(reply.interval));
                self.wrong_in_a_row = 0;
                let wait = aim
                    .delay_to_aim(now, self.last_added)
                    .unwrap_or(self.limits.interval);
                self.plan_copy(sent, now + wait, Why::Retarget(ResendReason::Fenced));
            }
            Outcome::WrongInterval => {
                self.may_land_later = true;
                self.wrong_in_a_row += 1;
                let wait = self.after_wrong_interval(now, aim);
                self.plan_copy(sent, now + wait, Why::Retarget(ResendReason::WrongInterval));
            }
        }
    }

    /// A copy sent at `sent` failed at `now` with `error`.
    pub(crate) fn failed(&mut self, error: StoreError, sent: Duration, now: Duration) {
        self.answered(sent);
        // An error the store gave, not one its client made up for want of a reply.
        let from_store = error.kind() != StoreErrorKind::Unanswered;
        if from_store {
            self.unheard_since = None;
        }
        if error.may_have_applied() {
            // One of the client's own resends, or the copy itself, may have run.
            self.maybe_counted = true;
        } else if error.worth_resending() {
            self.may_land_later = true;
        }
        if !error.worth_resending() {
            self.refuse(error);
            return;
        }
        // Again after the backoff. A copy that got no answer may still wait in the store's
        // queue: not again sooner than it took, so as not to add to the queue. An answer,
        // however long the client took to get it (its own resends through a failover), left
        // nothing queued.
        let mut wait = self.backoff.next();
        if !from_store {
            wait = wait.max(now.saturating_sub(sent));
        }
        self.last_error = Some(error);
        self.plan_copy(sent, now + wait, Why::Resend(ResendReason::Failed));
    }

    /// The deadline of the last [`Step::Wait`] passed at `now` with no answer.
    pub(crate) fn timed_out(&mut self, now: Duration) {
        let last_timed_out = self
            .last_awaited()
            .is_some_and(|sent| now >= sent.saturating_add(self.round_trip.timeout()));
        if last_timed_out {
            // The last copy went unanswered for the timeout: it may land yet, or never.
            self.maybe_counted = true;
            self.round_trip.back_off();
            if self.refusal.is_none() {
                self.next_copy = Some((now, Why::Resend(ResendReason::Unanswered)));
            }
        }
        if !self.awaited.is_empty() && now >= self.started + self.give_up_after() {
            self.verdict = Some(Verdict::Expired);
        }
    }

    /// The flush must end with copies maybe still in the air (the counter closed, or its loop
    /// dropped): put back if none can ever be applied, given up as unsettled otherwise.
    pub(crate) fn abandon(&self, why: Abandoned) -> Step {
        if self.certainly_not_counted() {
            Step::PutBack
        } else {
            Step::GiveUp {
                error: StoreError::unanswered(why),
                dropped: false,
            }
        }
    }

    /// Reports a copy sent again for `why`, with the error that left the copy before it
    /// unknown when it failed on the way.
    pub(crate) fn report_resent(&self, why: Why, report: &Reporter) {
        if let Some(reason) = why.resent() {
            let error = match reason {
                ResendReason::Failed => self.last_error.as_ref(),
                _ => None,
            };
            report.emit(Event::CopyResent {
                reason,
                copy: self.copies,
                error,
            });
        }
    }

    /// When the flush began.
    pub(crate) fn started(&self) -> Duration {
        self.started
    }

    /// The last interval this participant is known to have added to.
    pub(crate) fn last_added(&self) -> Option<u64> {
        self.last_added
    }

    pub(crate) fn round_trip(&self) -> &RoundTrip {
        &self.round_trip
    }

    /// How long the flush has waited on the store: since its oldest copy still awaited was
    /// sent, or the first copy since the store last answered if that is older. A store that
    /// answers nothing is slow however often copies go. `None` while nothing is awaited.
    pub(crate) fn waiting_since(&self) -> Option<Duration> {
        let oldest = *self.awaited.first()?;
        Some(
            self.unheard_since
                .map_or(oldest, |unheard| unheard.min(oldest)),
        )
    }

    /// Whether a copy may be sent now: the first always, one that answered landing in the
    /// wrong interval while the flush is kept, and one that went unanswered within the resend
    /// window.
    fn may_send(&self, why: Why, now: Duration) -> bool {
        let trying_for = now.saturating_sub(self.started);
        match why {
            Why::First => true,
            Why::Retarget(_) => trying_for < self.give_up_after(),
            Why::Resend(_) => trying_for < self.limits.resend_window,
        }
    }

    /// When to look again: for the next copy, the last copy's timeout, or giving up on copies
    /// that never answer.
    fn next_wake(&self, now: Duration) -> Duration {
        let give_up_at = self.started + self.give_up_after();
        let next_copy = self.next_copy.map(|(at, _)| at);
        if self.awaited.is_empty() {
            return next_copy.unwrap_or(give_up_at);
        }
        // A timeout already past was dealt with: no copy may follow it (the resend window is
        // over), and waking for it again would spin.
        let timeout = self
            .last_awaited()
            .map(|sent| sent.saturating_add(self.round_trip.timeout()))
            .filter(|at| *at > now);
        [timeout, next_copy, Some(give_up_at)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(give_up_at)
    }

    /// Ends a flush that no answer settled.
    fn conclude(&mut self) -> Step {
        let certainly_not_counted = self.certainly_not_counted();
        match self.refusal.take() {
            // A refusal is final: a copy run again is refused again, and a stale one is
            // behind a later flush of this participant for good. Dropped only if no other
            // copy can land: one turned away may be sent again by its client, or may have run
            // (fred hands a dropped connection's error to every command waiting on it).
            Some(error) => Step::GiveUp {
                error,
                dropped: self.refused_outright() || certainly_not_counted,
            },
            None if certainly_not_counted => Step::PutBack,
            None => {
                let error = self.last_error.take().unwrap_or_else(|| {
                    if self.all_answered_unapplied() {
                        StoreError::unanswered(NeverLanded)
                    } else {
                        StoreError::unanswered(NoReply)
                    }
                });
                Step::InDoubt(error)
            }
        }
    }

    fn refuse(&mut self, error: StoreError) {
        self.refusal = Some(error);
        self.next_copy = None;
    }

    /// Plans the next copy for `at`, after an answer to the copy sent at `answered`: unless
    /// the flush is refused, or a copy sent later is still awaited (its answer, or its
    /// timeout, decides then). Older copies still awaited do not hold it back: the store
    /// answered a later one, so they are likely lost, and each answer adds one copy at most.
    fn plan_copy(&mut self, answered: Duration, at: Duration, why: Why) {
        let newer_awaited = self.awaited.iter().any(|sent| *sent > answered);
        if self.refusal.is_none() && !newer_awaited {
            self.next_copy = Some((at, why));
        }
    }

    /// How long to wait after a wrong-interval reply: at once while a short run of them lasts
    /// and the aim allows, else until the middle of the next interval not yet added to.
    fn after_wrong_interval(&mut self, now: Duration, aim: &Aim) -> Duration {
        let mut floor = self.last_added;
        if self.wrong_in_a_row >= MAX_WRONG_IN_A_ROW {
            self.wrong_in_a_row = 0;
            floor = floor.max(Some(aim.expected_interval(now)));
        }
        let wait = aim.delay_to_aim(now, floor).unwrap_or(self.limits.interval);
        if !wait.is_zero() {
            self.wrong_in_a_row = 0;
        }
        wait
    }

    /// How long a flush is kept before it is given up: the resend window, at least four
    /// intervals and four round trips, and never more than half the fence's life, so that no
    /// copy can outlive the fence that keeps it from counting twice.
    pub(crate) fn give_up_after(&self) -> Duration {
        let Limits {
            interval,
            resend_window,
            fence_ttl,
        } = self.limits;
        let round_trip = self.round_trip.smoothed().unwrap_or(Duration::ZERO);
        resend_window
            .max(interval * 4)
            .max(round_trip * 4)
            .min(fence_ttl / 2)
    }

    /// Takes the copy sent at `sent` off the awaited ones.
    fn answered(&mut self, sent: Duration) {
        if let Some(i) = self.awaited.iter().position(|at| *at == sent) {
            self.awaited.remove(i);
        }
    }

    /// When the last copy was sent, if it is still awaited.
    fn last_awaited(&self) -> Option<Duration> {
        self.last_sent.filter(|last| self.awaited.contains(last))
    }

    /// Whether a copy of the flush sent so far may have been counted in `interval`: a
    /// duplicate counted elsewhere is another flush's, which took this one's number.
    fn may_land_in(&self, interval: u64) -> bool {
        self.windows.iter().any(|window| window.contains(&interval))
    }

    /// Whether every copy sent has answered, and none was applied or left it unknown. That
    /// settles what the copies did when they ran, not what a client may still do with them:
    /// one that replays a command it already had an answer to would run it again.
    fn all_answered_unapplied(&self) -> bool {
        !self.maybe_counted && self.awaited.is_empty()
    }

    /// Whether every copy sent has been refused outright: answered, none applied or left
    /// unknown, and none can land later.
    fn refused_outright(&self) -> bool {
        self.all_answered_unapplied() && !self.may_land_later
    }

    /// Whether no copy was or can ever be applied, given that this participant's fence holds
    /// [`last_added`](Self::last_added) or a later interval.
    ///
    /// A copy can only be applied within its window (`expect - reach ..= expect + reach`),
    /// and only in an interval later than the fence's: once the fence is at the end of the
    /// latest window, every copy, replayed or not, is turned away for good.
    fn certainly_not_counted(&self) -> bool {
        let latest_reach = self.windows.iter().map(|window| *window.end()).max();
        let out_of_reach = match (latest_reach, self.last_added) {
            (None, _) => true,
            (Some(end), Some(fenced)) => fenced >= end,
            (Some(_), None) => false,
        };
        self.all_answered_unapplied() && out_of_reach
    }
}

#[cfg(test)]
mod tests {
    //! Every transition of the settling, as tables: each row is an event at a time, and what
    //! the flush loop is told to do next.

    use super::*;

    /// The interval, in ms.
    const I: u64 = 100;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[derive(Clone, Copy)]
    enum Ev {
        /// Nothing happened: what now?
        Next,
        /// A copy went, aimed at this interval with a reach of 1; awaited, or answered at once.
        Sent(u64, bool),
        /// The copy sent at `.0` was answered: the outcome, the store's interval and, for a
        /// duplicate, where it was counted.
        Reply(u64, Outcome, u64, Option<u64>),
        /// The copy sent at `.0` failed.
        Failed(u64, fn() -> StoreError),
        /// The deadline of the last wait passed.
        TimedOut,
        /// The counter closed.
        Abandon,
    }
    use Ev::*;
    use Outcome::*;

    fn unavailable() -> StoreError {
        StoreError::unavailable("TRYAGAIN")
    }
    fn unanswered() -> StoreError {
        StoreError::unanswered("connection dropped")
    }
    fn refused() -> StoreError {
        StoreError::refused("WRONGTYPE")
    }
    fn refused_after_resends() -> StoreError {
        StoreError::refused("WRONGTYPE").after_unseen_resends()
    }

    #[test]
    fn a_flush_is_kept_for_four_round_trips_on_a_far_store() {
        // Each bound in turn: the resend window, four intervals, four round trips, and never
        // past half the fence's life.
        let limits = |resend_window, fence_ttl| Limits {
            interval: ms(I),
            resend_window,
            fence_ttl,
        };
        let kept = |limits, round_trip: Option<u64>| {
            let mut estimate = RoundTrip::new(ms(100), ms(I));
            if let Some(round_trip) = round_trip {
                estimate.sample(ms(round_trip));
            }
            Settling::new(limits, estimate).give_up_after()
        };
        assert_eq!(kept(limits(ms(1_000), ms(60_000)), None), ms(1_000));
        assert_eq!(kept(limits(ms(0), ms(60_000)), None), ms(4 * I));
        assert_eq!(kept(limits(ms(0), ms(60_000)), Some(900)), ms(3_600));
        assert_eq!(kept(limits(ms(1_000), ms(60_000)), Some(900)), ms(3_600));
        assert_eq!(kept(limits(ms(0), ms(2_000)), Some(900)), ms(1_000));
    }

    /// Runs `rows` from a flush whose first copy is due at 0: a resend window of a second, a
    /// fence of a minute, and a flush timeout of 100 ms until a reply times the round trip.
    fn run(name: &str, rows: &[(u64, Ev, &str)]) {
        run_within(ms(1_000), name, rows);
    }

    /// Runs `rows` with a resend window of `resend_window`.
    fn run_within(resend_window: Duration, name: &str, rows: &[(u64, Ev, &str)]) {
        let limits = Limits {
            interval: ms(I),
            resend_window,
            fence_ttl: ms(60_000),
        };
        let mut settling = Settling::new(limits, RoundTrip::new(ms(100), ms(I)));
        let mut aim = Aim::new(I);
        settling.start(Duration::ZERO);
        assert_eq!(
            describe(&settling.next(Duration::ZERO)),
            "send",
            "{name}: the first copy"
        );
        for (row, &(at, event, expected)) in rows.iter().enumerate() {
            let now = ms(at);
            let mut seen = String::new();
            let step = match event {
                Next => settling.next(now),
                Sent(expect, awaited) => {
                    let window = expect.saturating_sub(1)..=expect + 1;
                    if let Some(dropped) = settling.sent(now, window, awaited) {
                        seen = format!("stop awaiting {}, ", dropped.as_millis());
                    }
                    if !awaited {
                        // Its answer is heard before anything else.
                        assert_eq!(expected, "answered at once", "{name}, row {row}");
                        continue;
                    }
                    settling.next(now)
                }
                Reply(sent, outcome, interval, duplicate_of) => {
                    let counted_in = match outcome {
                        Applied => Some(interval),
                        _ => duplicate_of,
                    };
                    // The store ran it 40 ms into its interval.
                    let reply = FlushReply::new(outcome, interval, ms(40), counted_in);
                    settling.replied(&reply, ms(sent), now, &mut aim);
                    settling.next(now)
                }
                Failed(sent, error) => {
                    settling.failed(error(), ms(sent), now);
                    settling.next(now)
                }
                TimedOut => {
                    settling.timed_out(now);
                    settling.next(now)
                }
                Abandon => settling.abandon(Abandoned::ClosedInFlight),
            };
            seen.push_str(&describe(&step));
            assert_eq!(seen, expected, "{name}, row {row} (at {at} ms)");
        }
    }

    fn describe(step: &Step) -> String {
        match step {
            Step::Send(Why::First) => "send".into(),
            Step::Send(Why::Resend(reason)) => format!("send again: {reason:?}"),
            Step::Send(Why::Retarget(reason)) => format!("retarget: {reason:?}"),
            Step::Wait(until) => format!("wait until {}", until.as_millis()),
            Step::Counted(interval) => format!("counted in {interval}"),
            Step::PutBack => "put back".into(),
            Step::GiveUp { error, dropped } => {
                let how = if *dropped { "dropped" } else { "unsettled" };
                format!("{how}: {:?}", error.kind())
            }
            Step::InDoubt(error) => format!("in doubt: {:?}", error.kind()),
        }
    }

    #[test]
    fn a_reply_that_counts_it_ends_the_flush() {
        run(
            "applied",
            &[
                // Awaited for the flush timeout.
                (0, Sent(0, true), "wait until 100"),
                (30, Reply(0, Applied, 0, None), "counted in 0"),
            ],
        );
        run(
            "answered at once",
            &[
                (0, Sent(0, false), "answered at once"),
                (0, Reply(0, Applied, 1, None), "counted in 1"),
            ],
        );
        run(
            "a duplicate of a copy within reach",
            &[
                (0, Sent(5, true), "wait until 100"),
                (30, Reply(0, Duplicate, 6, Some(5)), "counted in 5"),
            ],
        );
    }

    #[test]
    fn a_refusal_gives_the_flush_up() {
        run(
            "a duplicate counted where no copy could land: another run's number",
            &[
                (0, Sent(5, true), "wait until 100"),
                (30, Reply(0, Duplicate, 6, Some(9)), "dropped: Refused"),
            ],
        );
        run(
            "stale: a later flush of this id was applied",
            &[
                (0, Sent(5, true), "wait until 100"),
                (30, Reply(0, Stale, 5, None), "dropped: Refused"),
            ],
        );
        run(
            "refused outright",
            &[
                (0, Sent(5, true), "wait until 100"),
                (30, Failed(0, refused), "dropped: Refused"),
            ],
        );
        run(
            "refused after the client's own resends, one of which may have run",
            &[
                (0, Sent(5, true), "wait until 100"),
                (30, Failed(0, refused_after_resends), "unsettled: Refused"),
            ],
        );
        run(
            "refused while an earlier copy may still land",
            &[
                (0, Sent(5, true), "wait until 100"),
                (100, TimedOut, "send again: Unanswered"),
                // The timeout doubled.
                (100, Sent(5, true), "wait until 300"),
                (130, Failed(100, refused), "wait until 1000"),
                (1_000, TimedOut, "unsettled: Refused"),
            ],
        );
    }

    #[test]
    fn a_copy_turned_away_for_now_goes_again_after_a_backoff_that_doubles() {
        run(
            "unavailable",
            &[
                (0, Sent(5, true), "wait until 100"),
                (1, Failed(0, unavailable), "wait until 3"),
                (3, Next, "send again: Failed"),
                (3, Sent(5, true), "wait until 103"),
                (4, Failed(3, unavailable), "wait until 8"),
                (8, Next, "send again: Failed"),
                (8, Sent(5, true), "wait until 108"),
                (20, Reply(8, Applied, 5, None), "counted in 5"),
            ],
        );
        run(
            "unanswered by the client: not again sooner than it took",
            &[
                (0, Sent(5, true), "wait until 100"),
                (60, Failed(0, unanswered), "wait until 120"),
                (120, Next, "send again: Failed"),
            ],
        );
        run(
            "a reply resets the backoff",
            &[
                (0, Sent(0, true), "wait until 100"),
                (1, Failed(0, unavailable), "wait until 3"),
                (3, Next, "send again: Failed"),
                (3, Sent(0, true), "wait until 103"),
                // The store is at 0, 40 ms in: 9 ms to the aim's middle, less the way there.
                (4, Reply(3, WrongInterval, 0, None), "wait until 13"),
                (13, Next, "retarget: WrongInterval"),
                (13, Sent(0, true), "wait until 113"),
                // From the first backoff again.
                (14, Failed(13, unavailable), "wait until 16"),
            ],
        );
        run(
            "not past the resend window: then unsettled, as its client may send it again",
            &[
                (0, Sent(5, true), "wait until 100"),
                (999, Failed(0, unavailable), "wait until 1001"),
                (1_001, Next, "in doubt: Unavailable"),
            ],
        );
    }

    #[test]
    fn a_copy_unanswered_for_the_timeout_is_sent_again_and_the_timeout_doubles() {
        run(
            "late replies still count",
            &[
                (0, Sent(5, true), "wait until 100"),
                (100, TimedOut, "send again: Unanswered"),
                (100, Sent(5, true), "wait until 300"),
                (300, TimedOut, "send again: Unanswered"),
                (300, Sent(5, true), "wait until 700"),
                // The first copy's reply, late: it counted.
                (350, Reply(0, Applied, 5, None), "counted in 5"),
            ],
        );
        run(
            "no copy past the resend window, and unsettled when none answers",
            &[
                (0, Sent(5, true), "wait until 100"),
                (100, TimedOut, "send again: Unanswered"),
                (100, Sent(5, true), "wait until 300"),
                (300, TimedOut, "send again: Unanswered"),
                (300, Sent(5, true), "wait until 700"),
                (700, TimedOut, "send again: Unanswered"),
                (700, Sent(5, true), "wait until 1000"),
                (1_000, TimedOut, "in doubt: Unanswered"),
            ],
        );
        run_within(
            ms(2_000),
            "the fifth copy in the air stops the wait for the first",
            &[
                (0, Sent(5, true), "wait until 100"),
                (100, TimedOut, "send again: Unanswered"),
                (100, Sent(5, true), "wait until 300"),
                (300, TimedOut, "send again: Unanswered"),
                // Doubled twice at most.
                (300, Sent(5, true), "wait until 700"),
                (700, TimedOut, "send again: Unanswered"),
                (700, Sent(5, true), "wait until 1100"),
                (1_100, TimedOut, "send again: Unanswered"),
                (1_100, Sent(5, true), "stop awaiting 0, wait until 1500"),
                // Its reply is not waited for: a later copy's settles the flush.
                (1_200, Reply(700, Applied, 12, None), "counted in 12"),
            ],
        );
        run(
            "a timeout already dealt with is not waited for again",
            &[
                (0, Sent(5, true), "wait until 100"),
                (100, TimedOut, "send again: Unanswered"),
                (100, Sent(5, true), "wait until 300"),
                (150, Failed(0, refused), "wait until 300"),
                // Refused: no copy follows the timeout, which doubles again.
                (300, TimedOut, "wait until 500"),
                (500, TimedOut, "wait until 1000"),
                (1_000, TimedOut, "unsettled: Refused"),
            ],
        );
    }

    #[test]
    fn a_copy_in_the_wrong_interval_is_aimed_again() {
        run(
            "aimed at once while a short run lasts, then at the next interval",
            &[
                (0, Sent(0, true), "wait until 100"),
                // The store is at 5, 40 ms in, and the round trip 30 ms: a copy now arrives 70 ms
                // in, past the middle but early enough to go at once.
                (
                    30,
                    Reply(0, WrongInterval, 5, None),
                    "retarget: WrongInterval",
                ),
                (30, Sent(5, true), "wait until 130"),
                (
                    60,
                    Reply(30, WrongInterval, 5, None),
                    "retarget: WrongInterval",
                ),
                (60, Sent(5, true), "wait until 160"),
                // The third in a row: not in this interval again, but the middle of the next.
                (90, Reply(60, WrongInterval, 5, None), "wait until 170"),
                (170, Next, "retarget: WrongInterval"),
            ],
        );
        run(
            "fenced: this participant added to the interval already",
            &[
                (0, Sent(5, true), "wait until 100"),
                (20, Reply(0, Fenced, 5, None), "wait until 110"),
                (110, Next, "retarget: Fenced"),
                (110, Sent(6, true), "wait until 210"),
                (130, Reply(110, Applied, 6, None), "counted in 6"),
            ],
        );
        run(
            "an older copy's answer plans nothing while a newer copy is awaited",
            &[
                (0, Sent(5, true), "wait until 100"),
                (100, TimedOut, "send again: Unanswered"),
                (100, Sent(5, true), "wait until 300"),
                // The reply timed the round trip: the timeout is 120 ms and three deviations.
                (120, Reply(0, WrongInterval, 7, None), "wait until 460"),
            ],
        );
        run(
            "copies that never land are given up as unsettled",
            &[
                (0, Sent(0, false), "answered at once"),
                (0, Reply(0, WrongInterval, 5, None), "wait until 10"),
                (10, Next, "retarget: WrongInterval"),
                (10, Sent(5, true), "wait until 110"),
                (1_000, Reply(10, WrongInterval, 15, None), "wait until 1010"),
                // A client's replay may still land: whether it was counted is unknown.
                (1_010, Next, "in doubt: Unanswered"),
            ],
        );
    }

    #[test]
    fn a_flush_closed_in_the_air_goes_back_only_where_no_copy_can_land() {
        run("nothing sent", &[(0, Abandon, "put back")]);
        run(
            "a copy in the air",
            &[
                (0, Sent(5, true), "wait until 100"),
                (10, Abandon, "unsettled: Unanswered"),
            ],
        );
        run(
            "turned away for now: its client may send it again",
            &[
                (0, Sent(5, true), "wait until 100"),
                (1, Failed(0, unavailable), "wait until 3"),
                (2, Abandon, "unsettled: Unanswered"),
            ],
        );
        // Aimed at 5 with a reach of 1, fenced at 5: a client's replay may land in 6. Aimed at
        // 6 and fenced at 7, every copy is out of reach.
        run(
            "fenced within the window, then at its end",
            &[
                (0, Sent(5, true), "wait until 100"),
                (20, Reply(0, Fenced, 5, None), "wait until 110"),
                (30, Abandon, "unsettled: Unanswered"),
                (110, Next, "retarget: Fenced"),
                (110, Sent(6, false), "answered at once"),
                (110, Reply(110, Fenced, 7, None), "wait until 220"),
                (120, Abandon, "put back"),
            ],
        );
    }
}
