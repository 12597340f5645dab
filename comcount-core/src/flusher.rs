//! The flush loop of one lane ([`lanes`](crate::lanes)): one flush at a time, each settled
//! before the next, and the pause between them.
//!
//! A flush keeps its sequence number and its amount from its first copy to its settling, so
//! that every copy of it ever sent, by this loop or by a client replaying it, is the same flush
//! to the store's fence: applied at most once. Copies are awaited side by side, so a reply
//! that comes late settles the flush as well as a prompt one. Another copy goes out only when
//! the last one has gone unanswered for the measured timeout (which then doubles), or when an
//! answer proves that no copy was applied: a slow store gets fewer copies, not more.
//!
//! A copy the store turned away for now ([`Unavailable`](StoreErrorKind::Unavailable)) was not
//! applied: another goes after a short backoff (a fiftieth of the interval, doubling up to half
//! of one) for as long as the resend window lasts, the flush keeping its amount meanwhile. That
//! carries a flush through a cluster slot held open by a resharding, which turns away every
//! flush until the slot is given: the script declares the key of the interval after its aim,
//! which no write has made yet, and a node migrating or importing the slot answers `TRYAGAIN`
//! to a script whose keys it does not all hold. The first copy after the slot is given lands,
//! and what was counted meanwhile goes in the next flush. The stores do not retry on their
//! own: they have no timer, and a copy held in a store past the resend timeout would only
//! bring more copies.
//!
//! The amount goes back to the buffer only when no copy was or ever can be applied. It is
//! reported dropped only when the store refused it, and unsettled when whether it was counted
//! cannot be known.

use std::fmt;
use std::future::pending;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::aim::Aim;
use crate::batch::{Ages, Batch};
use crate::clock::Timer;
use crate::diagnostics::{Event, Reporter, ResendReason};
use crate::error::{StoreError, StoreErrorKind};
use crate::flight::{Answer, Flight};
use crate::keys::Layout;
use crate::lanes::{self, Lanes, Opener, Start};
use crate::round_trip::RoundTrip;
use crate::settings::Settings;
use crate::shared::Shared;
use crate::slow_alarm::SharedAlarm;
use crate::store::{FlushReply, FlushRequest, Outcome, Store};
use crate::timing::Timing;
use crate::turns::Turns;
use crate::watch::{Waited, Watch, stale_after};
use crate::worker::Tick;

/// How many wrong-interval replies in a row a flush may get before it waits for the next
/// interval; each costs a round trip, so a run of them is short and never a busy loop.
const MAX_WRONG_IN_A_ROW: u32 = 3;

pub(crate) struct Flusher<S, T> {
    shared: Arc<Shared>,
    /// Which of the family's partitions this loop flushes (0 for a counter).
    partition: u32,
    /// Which of the partition's lanes this loop is (0 for the one always there).
    lane: u32,
    /// What the partition's lanes share.
    lanes: Arc<Lanes>,
    /// How many lanes to flush through, as the first lane decides.
    opener: Opener,
    store: Arc<S>,
    timer: T,
    settings: Settings,
    report: Reporter,
    watch: Watch<T>,
    aim: Aim,
    round_trip: RoundTrip,
    alarm: SharedAlarm,
    turns: Turns,
    /// The flush, shared with its copies in flight rather than copied into each: a flush of
    /// many keys would otherwise hold its entries twice while it is awaited.
    request: Arc<FlushRequest>,
    /// The keys the flush carries.
    batch: Batch,
    /// The copies of the flush in the air, kept from one flush to the next.
    flight: Flight,
    /// The last interval this participant is known to have added to.
    last_added: Option<u64>,
    /// Spreads participants that cannot add to every interval over different ones. Seeded from
    /// the participant and the partition alone, so that a run on virtual time with fixed
    /// participant ids repeats exactly.
    spread: fastrand::Rng,
    /// Whether the flush's amounts were taken from the buffers and are not accounted for yet:
    /// what a drop of the loop must settle.
    unsettled: bool,
    /// The windows of the flush's copies sent so far: the intervals one of them may have been
    /// counted in. Kept from one flush to the next, so that it allocates once.
    windows: Vec<RangeInclusive<u64>>,
}

impl<S, T> Flusher<S, T> {
    /// Accounts for a flush that will never settle: its amounts go back to the buffers if no
    /// copy can ever be applied, and are reported unsettled otherwise.
    fn abandon(&self, why: Abandoned) {
        if self.flight.certainly_not_counted(self.last_added) {
            self.batch.put_back(&self.request, &self.report);
        } else if self.request.amount() > 0 {
            self.give_up(&StoreError::unanswered(why), false);
        }
    }

    /// Reports the flush's amounts as never sent again: `dropped` when certainly not counted,
    /// unsettled otherwise.
    fn give_up(&self, error: &StoreError, dropped: bool) {
        self.batch
            .give_up(&self.request, error, dropped, &self.report);
    }
}

impl<S, T> Drop for Flusher<S, T> {
    /// The loop dropped in the middle of a flush (its runtime shut down, the task was dropped,
    /// or a panic unwinds through it, the store's or the application's) accounts for the flush
    /// as a close does. If the diagnostics are what panicked, nothing more is reported to
    /// them, and only amounts that certainly were not counted go back.
    fn drop(&mut self) {
        if !self.unsettled {
            return;
        }
        if !self.report.sink_panicked() {
            self.abandon(Abandoned::DroppedInFlight);
        } else if self.flight.certainly_not_counted(self.last_added) {
            self.batch.put_back(&self.request, &self.report);
        }
    }
}

/// What became of one flush.
enum Settled {
    /// Counted by the store in this interval.
    Counted {
        interval: u64,
        /// Whether the reply brought a group total: the interval's before, or, for a single
        /// counter, its own.
        learnt: bool,
    },
    /// Not counted as far as this participant knows: back in the buffer, or reported dropped
    /// or unsettled.
    NotCounted,
}

/// Why another copy is sent.
#[derive(Clone, Copy)]
enum Why {
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

/// How a copy's sending went.
enum Sent {
    /// It is in the store's hands, awaited.
    Awaited,
    /// It answered at once.
    Answered(Answer),
    /// The counter is closed: nothing was sent.
    Closed,
}

/// What the flush does next, as the answers so far decide it.
struct Plan {
    /// When to send another copy, and why, if one is due.
    next_copy: Option<(Duration, Why)>,
    /// A refusal: no more copies are sent.
    refusal: Option<StoreError>,
    /// The last error that left it unknown whether a copy was applied.
    last_error: Option<StoreError>,
    backoff: Backoff,
    wrong_in_a_row: u32,
}

impl<S: Store, T: Timer> Flusher<S, T> {
    /// The flush loop of lane `lane` of `partition` (0 and 0 for a counter's first).
    pub(crate) fn new(
        tick: &Tick<Arc<S>, T>,
        partition: u32,
        lane: u32,
        lanes: &Arc<Lanes>,
    ) -> Self {
        let Tick {
            shared,
            store,
            timer,
            settings,
            report,
            participant,
            first_seq,
            alarm,
        } = tick;
        let participant = participant.lane(lane);
        let (aim, round_trip) = match lanes.start().filter(|_| lane > 0) {
            Some(Start { aim, round_trip }) => (aim, round_trip),
            None => (
                Aim::spread(settings.interval_ms, partition, settings.partitions()),
                RoundTrip::new(settings.policy.flush_timeout),
            ),
        };
        Self {
            watch: Watch::new(
                timer.clone(),
                Arc::clone(shared),
                partition,
                report.clone(),
                settings.interval,
                Arc::clone(lanes),
            ),
            batch: Batch::new(Arc::clone(shared), partition),
            flight: Flight::default(),
            aim,
            round_trip,
            alarm: alarm.clone(),
            turns: Turns::new(settings.interval),
            request: Arc::new(
                FlushRequest::new(settings.space(partition), participant, settings.interval_ms)
                    .with_seq(lanes.resume_seq(*first_seq))
                    .with_fence_ttl_ms(settings.fence_ttl_ms),
            ),
            last_added: None,
            unsettled: false,
            windows: Vec::new(),
            partition,
            lane,
            lanes: Arc::clone(lanes),
            opener: Opener::default(),
            spread: fastrand::Rng::with_seed(participant.as_u64() ^ (u64::from(partition) << 32)),
            shared: Arc::clone(shared),
            store: Arc::clone(store),
            timer: timer.clone(),
            settings: settings.clone(),
            report: report.clone(),
        }
    }

    /// Waits for the first increment, then flushes, pauses and flushes again until stopped.
    pub(crate) async fn run(&mut self) -> Option<()> {
        self.watch
            .until(self.shared.started(self.partition), None)
            .await?;
        loop {
            if self.lane >= self.lanes.wanted() {
                // A lane after the first that is no longer wanted, between its flushes.
                return Some(());
            }
            let settled = self.flush().await?;
            if self.partition == 0 && self.lane == 0 {
                // At most once an interval: a partition flushes at most once in each.
                report_refused_keys(&self.shared, &self.report);
            }
            self.tell_alarm_awaiting(None);
            self.batch.release(Arc::make_mut(&mut self.request));
            let added_before = self.last_added;
            if let Settled::Counted { interval, .. } = settled {
                self.last_added = self.last_added.max(Some(interval));
            }
            self.decide_lanes();
            let resume_at = self.timer.now() + self.pause(&settled, added_before);
            self.watch.until(pending::<()>(), Some(resume_at)).await?;
        }
    }

    /// How long to wait before the next flush, `added_before` being the last interval added
    /// to before the flush that just settled.
    ///
    /// A participant whose round trip keeps it from adding to every interval skips one more,
    /// half the time: participants that started together would otherwise all add to the same
    /// intervals, leave the others without a key, and never learn a total. One whose flushes
    /// queue behind others' rests a few intervals after each pair ([`Turns`]).
    fn pause(&mut self, settled: &Settled, added_before: Option<u64>) -> Duration {
        match self.settings.policy.timing {
            Timing::AfterReply => self.settings.interval,
            Timing::MidInterval => {
                let now = self.timer.now();
                // After a flush that did not count, not again in the same interval: what
                // failed there would likely fail again.
                let floor = match settled {
                    Settled::Counted { .. } => self.last_added,
                    Settled::NotCounted => {
                        self.last_added.max(Some(self.aim.expected_interval(now)))
                    }
                };
                let Some(delay) = self.aim.delay_to_aim(now, floor) else {
                    return self.settings.interval;
                };
                let lanes = self.lanes.wanted();
                if lanes > 1 {
                    // Each lane in its turn: the store is far, not busy, and the lanes
                    // together add one flush an interval.
                    let lands = self.aim.expected_interval(now + delay);
                    let turn = lanes::turn(lands, self.lane, lanes);
                    // Fewer than `lanes` intervals later.
                    let later = u32::try_from(turn - lands).unwrap_or(0);
                    return delay + self.settings.interval * later;
                }
                let (skipping, rest) = match settled {
                    &Settled::Counted {
                        interval: n,
                        learnt,
                    } => {
                        let after_pair = n.checked_sub(1).is_some_and(|n| added_before == Some(n));
                        let spread = &mut self.spread;
                        let rest = self
                            .turns
                            .after_counted(learnt, after_pair, |range| spread.u32(range));
                        (self.aim.expected_interval(now + delay) > n + 1, rest)
                    }
                    Settled::NotCounted => (false, 0),
                };
                let delay = delay + self.settings.interval * rest;
                if skipping && rest == 0 && self.spread.bool() {
                    delay + self.settings.interval
                } else {
                    delay
                }
            }
        }
    }

    /// Takes the buffers as one new flush and keeps at it until it is settled; `None` once the
    /// counter is closed.
    async fn flush(&mut self) -> Option<Settled> {
        let settled = self.fly().await;
        self.unsettled = false;
        self.flight.clear();
        settled
    }

    /// Flies one new flush of the buffers; `flight` is clear.
    async fn fly(&mut self) -> Option<Settled> {
        let ages = self.ages();
        self.shared.epoch.fetch_max(ages.epoch, Relaxed);
        let Self {
            shared,
            batch,
            request,
            ..
        } = self;
        // No copy of the last flush is left to share the request, so this takes no copy.
        let request = Arc::make_mut(request);
        if !shared.while_open(|| batch.gather(request, ages))? {
            return Some(Settled::NotCounted);
        }
        request.seq += 1;
        self.lanes.took_seq(request.seq);
        self.unsettled = true;
        let started = self.timer.now();
        let mut copies: u32 = 0;
        let mut plan = Plan {
            next_copy: Some((started, Why::First)),
            refusal: None,
            last_error: None,
            backoff: Backoff::new(self.settings.interval),
            wrong_in_a_row: 0,
        };
        self.windows.clear();
        loop {
            let now = self.timer.now();
            if let Some((at, why)) = plan.next_copy
                && at <= now
            {
                plan.next_copy = None;
                if self.may_send(why, started, now) {
                    let sent = self.send(now);
                    if !matches!(sent, Sent::Closed) {
                        let window = self.request.window();
                        if self.windows.last() != Some(&window) {
                            self.windows.push(window);
                        }
                        copies = copies.saturating_add(1);
                        self.report_resent(why, copies, &plan);
                    }
                    match sent {
                        Sent::Closed => return self.closed(),
                        Sent::Answered(answer) => {
                            if let Some(settled) = self.take(answer, &mut plan) {
                                return Some(settled);
                            }
                            continue;
                        }
                        Sent::Awaited => {}
                    }
                }
            }
            if !self.flight.awaiting() && plan.next_copy.is_none() {
                return Some(self.conclude(plan));
            }
            self.tell_alarm_awaiting(self.flight.waiting_since());
            let wake_at = self.next_wake(&plan, started);
            let Self {
                watch,
                flight,
                shared,
                ..
            } = self;
            let answer = flight.next_answer(|| shared.is_closed());
            let woke = watch.until(answer, Some(wake_at)).await;
            match woke {
                None => return self.closed(),
                Some(Waited::Done(answer)) => {
                    if let Some(settled) = self.take(answer, &mut plan) {
                        return Some(settled);
                    }
                }
                Some(Waited::Deadline) => {
                    if self.timed_out(&mut plan, started) {
                        return Some(self.conclude(plan));
                    }
                }
            }
        }
    }

    /// How many lanes the partition flushes through, as the first lane decides after each of
    /// its flushes: more than one only while the round trip is over an interval, steady, and
    /// the path's own time rather than a queue behind other flushes, where more flushes in the
    /// air would only lengthen the queue.
    fn decide_lanes(&mut self) {
        if self.lane != 0 || !self.settings.lanes_allowed() {
            return;
        }
        let interval = self.settings.interval;
        let path = self.aim.steady_round_trip().filter(|_| {
            self.turns
                .spread()
                .is_some_and(|spread| spread <= interval / 4)
        });
        let (aim, round_trip) = (&self.aim, &self.round_trip);
        let before = self.lanes.wanted();
        self.opener.decide(&self.lanes, path, interval, || Start {
            aim: aim.clone(),
            round_trip: round_trip.clone(),
        });
        let lanes = self.lanes.wanted();
        if lanes != before {
            self.report.emit(Event::FlushLanesChanged {
                lanes,
                round_trip: path.or(self.round_trip.smoothed()).unwrap_or_default(),
                interval,
            });
        }
    }

    /// Tells the slow-store alarm when this partition's oldest copy still unanswered was sent
    /// (`None`: none is), for the other partitions of a family; a counter has none to tell.
    fn tell_alarm_awaiting(&self, oldest: Option<Duration>) {
        if self.settings.partitions() > 1 {
            self.alarm.awaiting(self.partition, oldest);
        }
    }

    /// Whether a copy may be sent now: the first always, one that answered landing in the
    /// wrong interval while the flush is kept, and one that went unanswered within the resend
    /// window.
    fn may_send(&self, why: Why, started: Duration, now: Duration) -> bool {
        let trying_for = now.saturating_sub(started);
        match why {
            Why::First => true,
            Why::Retarget(_) => trying_for < self.give_up_after(),
            Why::Resend(_) => trying_for < self.settings.policy.resend_window,
        }
    }

    /// Reports a copy sent again, the `copies`-th of its flush.
    fn report_resent(&self, why: Why, copies: u32, plan: &Plan) {
        if let Some(reason) = why.resent() {
            let error = match reason {
                ResendReason::Failed => plan.last_error.as_ref(),
                _ => None,
            };
            self.report.emit(Event::CopyResent {
                reason,
                copy: copies,
                error,
            });
        }
    }

    /// Sends a copy aimed at the interval the store will be in when it arrives, unless the
    /// counter is closed.
    fn send(&mut self, now: Duration) -> Sent {
        let (expect, reach) = (self.aim.expected_interval(now), self.aim.reach());
        if (self.request.expect, self.request.reach) != (expect, reach) {
            // Copied only when an earlier copy still holds the request.
            let request = Arc::make_mut(&mut self.request);
            request.expect = expect;
            request.reach = reach;
        }
        let Self {
            shared,
            store,
            request,
            report,
            flight,
            ..
        } = self;
        match shared.while_open(|| flight.send(store, request, report, now)) {
            None => Sent::Closed,
            Some(Some(answer)) => Sent::Answered(answer),
            Some(None) => Sent::Awaited,
        }
    }

    /// When the flush loop must look again: for the next copy, the last copy's timeout, the
    /// slow-store alarm, or giving up on copies that never answer.
    fn next_wake(&self, plan: &Plan, started: Duration) -> Duration {
        let flight = &self.flight;
        let mut at = plan.next_copy.map(|(at, _)| at);
        if flight.awaiting() {
            let now = self.timer.now();
            let candidates = [
                // A timeout already past was dealt with: no copy may follow it (the resend
                // window is over), and waking for it again would spin. A last copy that
                // answered has no timeout: its answer planned what follows.
                flight
                    .last_awaited()
                    .map(|sent| sent.saturating_add(self.round_trip.timeout()))
                    .filter(|at| *at > now),
                flight
                    .waiting_since()
                    .and_then(|sent| self.alarm.next_check(sent)),
                Some(started + self.give_up_after()),
            ];
            at = candidates.into_iter().flatten().chain(at).min();
        }
        at.unwrap_or(started + self.give_up_after())
    }

    /// Looks at the copies still awaited after a wait with no answer. Returns whether to give
    /// up on them.
    fn timed_out(&mut self, plan: &mut Plan, started: Duration) -> bool {
        let now = self.timer.now();
        if let Some(oldest) = self.flight.waiting_since() {
            self.alarm.waiting(oldest, now, &self.report);
        }
        let last_timed_out = self
            .flight
            .last_awaited()
            .is_some_and(|sent| now >= sent.saturating_add(self.round_trip.timeout()));
        if last_timed_out {
            // The last copy went unanswered for the timeout: it may land yet, or never.
            self.flight.may_have_counted();
            self.round_trip.back_off();
            if plan.refusal.is_none() {
                plan.next_copy = Some((now, Why::Resend(ResendReason::Unanswered)));
            }
        }
        self.flight.awaiting() && now >= started + self.give_up_after()
    }

    /// Takes one copy's answer; returns how the flush settled, if it did.
    fn take(&mut self, answer: Answer, plan: &mut Plan) -> Option<Settled> {
        let now = self.timer.now();
        let round_trip = now.saturating_sub(answer.sent);
        // A reply, or an error the store gave: not one its client made up for want of one.
        let from_store = match &answer.result {
            Ok(_) => true,
            Err(error) => error.kind() != StoreErrorKind::Unanswered,
        };
        if from_store {
            self.flight.heard();
        }
        let reply = match answer.result {
            Ok(reply) => reply,
            Err(error) if !error.worth_resending() => {
                if error.may_have_applied() {
                    // Refused after the client's own resends, one of which may have run.
                    self.flight.may_have_counted();
                }
                plan.refusal = Some(error);
                plan.next_copy = None;
                return None;
            }
            Err(error) => {
                // Again after the backoff. A copy that got no answer may still wait in the
                // store's queue: not again sooner than it took, so as not to add to the queue.
                // An answer, however long the client took to get it (its own resends through
                // a failover), left nothing queued.
                let mut wait = plan.backoff.next();
                if !from_store {
                    wait = wait.max(round_trip);
                }
                if error.may_have_applied() {
                    self.flight.may_have_counted();
                } else {
                    self.flight.not_applied_yet();
                }
                plan.last_error = Some(error);
                self.plan_copy(
                    plan,
                    answer.sent,
                    now + wait,
                    Why::Resend(ResendReason::Failed),
                );
                return None;
            }
        };
        self.report.emit(Event::FlushAnswered {
            outcome: reply.outcome,
            interval: reply.interval,
            round_trip,
        });
        self.round_trip.sample(round_trip);
        self.turns.observe(round_trip);
        self.aim.observe(&reply, answer.sent, now);
        self.alarm
            .answered(self.partition, answer.sent, now, &self.report);
        plan.backoff.reset();
        match reply.outcome {
            Outcome::Duplicate if reply.counted_in.is_some_and(|n| !self.may_land_in(n)) => {
                // The fence holds this flush's number, but from a flush counted where none of
                // its copies can land: another run's, under the same id.
                self.refresh(reply.interval, &reply.previous_totals, round_trip);
                plan.refusal = Some(StoreError::refused(NumberTaken));
                plan.next_copy = None;
            }
            Outcome::Applied | Outcome::Duplicate => {
                let taken = self.refresh(reply.interval, &reply.previous_totals, round_trip);
                // A counter that did not add to the interval before learns no total from this
                // reply; it takes its own interval's once that has ended. (A total of 0 says
                // nothing that an unknown one does not.)
                let landed = self.landed_total(&reply);
                if taken && reply.previous_total().is_none() && landed > 0 {
                    self.watch
                        .landed(landed, reply.interval, reply.phase, round_trip);
                }
                let interval = reply.counted_in.unwrap_or(reply.interval);
                self.report.emit(Event::FlushCompleted {
                    interval,
                    amount: self.request.amount(),
                    keys: self.request.entries.len(),
                    count: self.batch.count(),
                });
                return Some(Settled::Counted {
                    interval,
                    learnt: reply.previous_totals.iter().any(Option::is_some) || landed > 0,
                });
            }
            Outcome::Stale => {
                self.refresh(reply.interval, &reply.previous_totals, round_trip);
                plan.refusal = Some(StoreError::refused(StaleFlush));
                plan.next_copy = None;
            }
            Outcome::Fenced => {
                // This participant added to this interval already: the same flush goes to a
                // later one.
                self.refresh(reply.interval, &reply.previous_totals, round_trip);
                self.flight.not_applied_yet();
                self.last_added = self.last_added.max(Some(reply.interval));
                plan.wrong_in_a_row = 0;
                let wait = self
                    .aim
                    .delay_to_aim(now, self.last_added)
                    .unwrap_or(self.settings.interval);
                let why = Why::Retarget(ResendReason::Fenced);
                self.plan_copy(plan, answer.sent, now + wait, why);
            }
            Outcome::WrongInterval => {
                self.flight.not_applied_yet();
                plan.wrong_in_a_row += 1;
                let wait = self.after_wrong_interval(now, &mut plan.wrong_in_a_row);
                let why = Why::Retarget(ResendReason::WrongInterval);
                self.plan_copy(plan, answer.sent, now + wait, why);
            }
        }
        None
    }

    /// A single counter's total of the interval its flush was counted in, just after it; 0
    /// when the store did not tell it, and for a family's flush, whose partition holds many
    /// keys' totals: a store that told one would give it to whichever key comes first.
    fn landed_total(&self, reply: &FlushReply) -> u64 {
        match reply.landed_totals.as_slice() {
            &[Some(total)]
                if reply.outcome == Outcome::Applied
                    && self.request.space.layout() == Layout::Counter =>
            {
                total
            }
            _ => 0,
        }
    }

    /// Whether a copy of the flush sent so far may have been counted in `interval`: a
    /// duplicate counted elsewhere is another flush's, which took this one's number.
    fn may_land_in(&self, interval: u64) -> bool {
        self.windows.iter().any(|window| window.contains(&interval))
    }

    /// Plans the next copy for `at`, after an answer to the copy sent at `answered`: unless
    /// the flush is refused, or a copy sent later is still awaited (its answer, or its
    /// timeout, decides then). Older copies still awaited do not hold it back: the store
    /// answered a later one, so they are likely lost, and each answer adds one copy at most.
    fn plan_copy(&self, plan: &mut Plan, answered: Duration, at: Duration, why: Why) {
        if plan.refusal.is_none() && !self.flight.newer_awaited(answered) {
            plan.next_copy = Some((at, why));
        }
    }

    /// How long to wait after a wrong-interval reply: at once while a short run of them lasts
    /// and the aim allows, else until the middle of the next interval not yet added to.
    fn after_wrong_interval(&self, now: Duration, wrong_in_a_row: &mut u32) -> Duration {
        let mut floor = self.last_added;
        if *wrong_in_a_row >= MAX_WRONG_IN_A_ROW {
            *wrong_in_a_row = 0;
            floor = floor.max(Some(self.aim.expected_interval(now)));
        }
        let wait = self
            .aim
            .delay_to_aim(now, floor)
            .unwrap_or(self.settings.interval);
        if !wait.is_zero() {
            *wrong_in_a_row = 0;
        }
        wait
    }

    /// Ends a flush that no answer settled.
    fn conclude(&self, plan: Plan) -> Settled {
        let flight = &self.flight;
        match plan.refusal {
            // A refusal is final: a copy run again is refused again, and a stale one is
            // behind a later flush of this participant for good. Dropped only if no other
            // copy can land: one turned away may be sent again by its client, or may have run
            // (fred hands a dropped connection's error to every command waiting on it).
            Some(refusal)
                if flight.refused_outright() || flight.certainly_not_counted(self.last_added) =>
            {
                self.give_up(&refusal, true)
            }
            Some(refusal) => self.give_up(&refusal, false),
            // No copy can ever be applied: the amounts join a later flush.
            None if flight.certainly_not_counted(self.last_added) => {
                self.batch.put_back(&self.request, &self.report);
            }
            None => {
                let error = plan.last_error.unwrap_or_else(|| {
                    if flight.all_answered_unapplied() {
                        StoreError::unanswered(NeverLanded)
                    } else {
                        StoreError::unanswered(NoReply)
                    }
                });
                self.give_up(&error, false);
            }
        }
        Settled::NotCounted
    }

    /// Accounts for the flush in the air when the counter is closed.
    fn closed(&self) -> Option<Settled> {
        self.abandon(Abandoned::ClosedInFlight);
        None
    }

    /// How long a flush is kept before it is given up: the resend window, at least four
    /// intervals and four round trips, and never more than half the fence's life, so that no
    /// copy can outlive the fence that keeps it from counting twice.
    fn give_up_after(&self) -> Duration {
        let interval = self.settings.interval;
        let round_trip = self.round_trip.smoothed().unwrap_or(Duration::ZERO);
        let fence_ttl = Duration::from_millis(self.settings.fence_ttl_ms);
        self.settings
            .policy
            .resend_window
            .max(interval * 4)
            .max(round_trip * 4)
            .min(fence_ttl / 2)
    }

    /// Takes a reply's totals as the group's numbers, unless a later reply of another lane
    /// brought newer ones; the copy that brought them took `round_trip`, and ran in the
    /// store's interval `interval`. Returns whether they were taken.
    fn refresh(&mut self, interval: u64, totals: &[Option<u64>], round_trip: Duration) -> bool {
        if !self.lanes.newest_totals(interval, self.lane) {
            return false;
        }
        let now_ms = self.now_ms();
        // Not once closed: a reply that comes as the family closes must not bring a total
        // back after `close()` forgot them all.
        let open = self
            .shared
            .while_open(|| self.batch.refresh(totals, now_ms))
            .is_some();
        self.watch
            .refreshed(open && totals.iter().any(Option::is_some), round_trip);
        true
    }

    /// What decides which keys the next flush takes, and which it forgets or evicts.
    fn ages(&self) -> Ages {
        let now = self.timer.now();
        let round_trip = self.round_trip.smoothed().unwrap_or(Duration::ZERO);
        Ages {
            epoch: millis(now) / self.settings.interval_ms,
            evict_after: self.settings.evict_after_intervals(),
            now_ms: self.now_ms(),
            stale_after_ms: millis(stale_after(self.settings.interval, round_trip)),
        }
    }

    fn now_ms(&self) -> u64 {
        millis(self.timer.now())
    }
}

/// Reports the calls of a family's `increment` refused for their key since the last report.
pub(crate) fn report_refused_keys(shared: &Shared, report: &Reporter) {
    shared.take_refused_keys(|reason, calls| report.emit(Event::KeyRefused { reason, calls }));
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Pauses between copies of a flush that failed at once: from a fiftieth of the interval,
/// doubling up to half an interval.
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

/// A flush none of whose copies answered.
#[derive(Debug)]
struct NoReply;

impl fmt::Display for NoReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "no copy of the flush was answered before it was given up (the store may be \
             overloaded), so whether it was counted is unknown",
        )
    }
}

impl std::error::Error for NoReply {}

/// A flush whose copies kept landing in intervals they could not be added to.
#[derive(Debug)]
struct NeverLanded;

impl fmt::Display for NeverLanded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the flush kept arriving in another interval than the store's clock was in, and a \
             copy replayed by the client may still land; check that the interval is well \
             above the round trip to the store",
        )
    }
}

impl std::error::Error for NeverLanded {}

/// Why a flush still in the air was left unsettled.
#[derive(Debug, Clone, Copy)]
enum Abandoned {
    /// The counter was closed.
    ClosedInFlight,
    /// The background task was dropped before it ended.
    DroppedInFlight,
}

impl fmt::Display for Abandoned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Abandoned::ClosedInFlight => {
                "the counter was closed while the flush was in the store's hands, so whether \
                 it was counted is unknown"
            }
            Abandoned::DroppedInFlight => {
                "the counter's background task was dropped (its runtime shut down, or a panic \
                 unwound through it) while the flush was in the store's hands, so whether it \
                 was counted is unknown"
            }
        })
    }
}

impl std::error::Error for Abandoned {}

/// A flush the store found older than one it already applied from this participant: two live
/// participants share an id.
#[derive(Debug)]
struct StaleFlush;

impl fmt::Display for StaleFlush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the store already applied a later flush under this participant id: give every \
             live participant its own id, and keep the wall clock of one restarting under a \
             fixed id from going back",
        )
    }
}

impl std::error::Error for StaleFlush {}

/// The store's fence held this flush's number from another flush, counted in an interval none
/// of this one's copies could reach.
#[derive(Debug)]
struct NumberTaken;

impl fmt::Display for NumberTaken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the store answered that a flush with this number was already applied, in an \
             interval this flush could not reach: another run under this participant id used \
             the number (a restart whose wall clock went back, or two live participants with \
             one id); give every live participant its own id, and keep the wall clock of one \
             restarting under a fixed id from going back",
        )
    }
}

impl std::error::Error for NumberTaken {}
