//! The flush loop of one lane ([`lanes`](crate::lanes)): it takes the buffers as a flush, sends
//! its copies and awaits their answers as [`Settling`] decides, learns the group's totals from
//! the replies, and pauses before the next flush as [`Pause`] decides.

use std::future::pending;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::aim::Aim;
use crate::batch::{self, Ages, Batch};
use crate::clock::Timer;
use crate::diagnostics::{Event, Reporter, ResendReason};
use crate::doubt::Held;
use crate::error::{Abandoned, StoreError};
use crate::flight::{Answer, Flight};
use crate::keys::Layout;
use crate::lanes::{Lanes, Opener, Start};
use crate::pause::{Pause, Settled};
use crate::round_trip::RoundTrip;
use crate::settings::Settings;
use crate::settling::{Limits, Settling, Step, Why};
use crate::shared::Shared;
use crate::slow_alarm::SharedAlarm;
use crate::steadiness::Steadiness;
use crate::store::{FlushReply, FlushRequest, Outcome, Store};
use crate::watch::{Waited, Watch, stale_after};
use crate::worker::Tick;

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
    settling: Settling,
    pause: Pause,
    alarm: SharedAlarm,
    /// The flush, shared with its copies in flight rather than copied into each: a flush of
    /// many keys would otherwise hold its entries twice while it is awaited.
    request: Arc<FlushRequest>,
    /// The keys the flush carries.
    batch: Batch,
    /// The copies of the flush in the air, kept from one flush to the next.
    flight: Flight,
    /// Tells a far store from a queue, for the lanes.
    steadiness: Steadiness,
    /// A flush given up with its fate unknown, until a later reply tells it.
    held: Option<Held>,
    /// Whether the flush's amounts were taken from the buffers and are not accounted for yet:
    /// what a drop of the loop must settle.
    unsettled: bool,
}

impl<S, T> Flusher<S, T> {
    /// Accounts for a flush that ends with copies maybe in the air: its amounts go back to
    /// the buffers if no copy can ever be applied, and are reported unsettled otherwise.
    fn abandon(&self, why: Abandoned) {
        match self.settling.abandon(why) {
            Step::GiveUp { .. } if self.request.amount() == 0 => {}
            step => self.end(step),
        }
    }

    /// Accounts for a flush that ended without being counted.
    fn end(&self, step: Step) {
        match step {
            Step::PutBack => self.batch.put_back(&self.request, &self.report),
            Step::GiveUp { error, dropped } => {
                batch::give_up(&self.request, &error, dropped, &self.report);
            }
            Step::InDoubt(error) => batch::give_up(&self.request, &error, false, &self.report),
            _ => {}
        }
    }
}

impl<S, T> Drop for Flusher<S, T> {
    /// The loop dropped in the middle of a flush (its runtime shut down, the task was dropped,
    /// or a panic unwinds through it, the store's or the application's) accounts for the flush
    /// as a close does. If the diagnostics are what panicked, nothing more is reported to
    /// them, and only amounts that certainly were not counted go back.
    fn drop(&mut self) {
        let held = self.held.take();
        if let Some(held) = held.filter(|_| !self.report.sink_panicked()) {
            held.unsettled(&self.report);
        }
        if !self.unsettled {
            return;
        }
        if !self.report.sink_panicked() {
            self.abandon(Abandoned::DroppedInFlight);
        } else if matches!(
            self.settling.abandon(Abandoned::DroppedInFlight),
            Step::PutBack
        ) {
            self.batch.put_back(&self.request, &self.report);
        }
    }
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
        let limits = Limits {
            interval: settings.interval,
            resend_window: settings.policy.resend_window,
            fence_ttl: Duration::from_millis(settings.fence_ttl_ms),
        };
        let seed = participant.as_u64() ^ (u64::from(partition) << 32);
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
            settling: Settling::new(limits, round_trip),
            pause: Pause::new(settings.policy.timing, settings.interval, seed),
            alarm: alarm.clone(),
            request: Arc::new(
                FlushRequest::new(settings.space(partition), participant, settings.interval_ms)
                    .with_seq(lanes.resume_seq(*first_seq))
                    .with_fence_ttl_ms(settings.fence_ttl_ms),
            ),
            steadiness: Steadiness::new(settings.interval),
            held: None,
            unsettled: false,
            partition,
            lane,
            lanes: Arc::clone(lanes),
            opener: Opener::default(),
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
            self.decide_lanes();
            let now = self.timer.now();
            let lanes = (self.lane, self.lanes.wanted());
            let last_added = self.settling.last_added();
            let pause = self.pause.after(settled, now, &self.aim, last_added, lanes);
            self.watch.until(pending::<()>(), Some(now + pause)).await?;
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
        let (now, fence_ttl) = (self.timer.now(), self.fence_ttl());
        if let Some(held) = self.held.take_if(|held| held.doubt.expired(now, fence_ttl)) {
            held.unsettled(&self.report);
        }
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
        self.settling.start(self.timer.now());
        loop {
            let now = self.timer.now();
            match self.settling.next(now) {
                Step::Send(why) => {
                    let answer = self.send(now)?;
                    let window = self.request.window();
                    if let Some(dropped) = self.settling.sent(now, window, answer.is_none()) {
                        self.flight.stop_awaiting(dropped);
                    }
                    self.report_resent(why);
                    if let Some(answer) = answer {
                        self.hear(answer);
                    }
                }
                Step::Wait(until) => self.wait(until).await?,
                Step::Counted(interval) => {
                    self.report.emit(Event::FlushCompleted {
                        interval,
                        amount: self.request.amount(),
                        keys: self.request.entries.len(),
                        count: self.batch.count(),
                    });
                    return Some(Settled::Counted(interval));
                }
                Step::InDoubt(error) => {
                    self.hold(error);
                    return Some(Settled::NotCounted);
                }
                step => {
                    self.end(step);
                    return Some(Settled::NotCounted);
                }
            }
        }
    }

    /// Waits for an answer of a copy in the air, until `until` or the slow-store alarm's next
    /// look; `None` once the counter is closed.
    async fn wait(&mut self, until: Duration) -> Option<()> {
        let waiting_since = self.settling.waiting_since();
        self.tell_alarm_awaiting(waiting_since);
        let alarm = waiting_since.and_then(|sent| self.alarm.next_check(sent));
        let wake_at = alarm.map_or(until, |alarm| alarm.min(until));
        let Self {
            watch,
            flight,
            shared,
            ..
        } = self;
        let answer = flight.next_answer(|| shared.is_closed());
        match watch.until(answer, Some(wake_at)).await {
            None => {
                self.abandon(Abandoned::ClosedInFlight);
                return None;
            }
            Some(Waited::Done(answer)) => self.hear(answer),
            Some(Waited::Deadline) => {
                let now = self.timer.now();
                if let Some(oldest) = waiting_since {
                    self.alarm.waiting(oldest, now, &self.report);
                }
                self.settling.timed_out(now);
            }
        }
        Some(())
    }

    /// Takes one copy's answer: learns from a reply, and tells the settling.
    fn hear(&mut self, answer: Answer) {
        let now = self.timer.now();
        match answer.result {
            Ok(reply) => {
                self.learn(&reply, answer.sent, now);
                if let Some(held) = self.held.take() {
                    let told = held.doubt.told_by(&reply, now, self.fence_ttl());
                    self.held = held.settle(told, &self.report);
                }
                self.settling.replied(&reply, answer.sent, now, &self.aim);
            }
            Err(error) => self.settling.failed(error, answer.sent, now),
        }
    }

    /// Keeps the flush, given up with its fate unknown, until a later reply tells it
    /// ([`doubt`](crate::doubt)). One kept before is reported unsettled: the fence tells only
    /// of the last flush applied.
    fn hold(&mut self, error: StoreError) {
        if let Some(earlier) = self.held.take() {
            earlier.unsettled(&self.report);
        }
        let (request, slots) = (Arc::clone(&self.request), self.batch.hand_over());
        let started = self.settling.started();
        self.held = Some(Held::new(started, request, slots, error));
    }

    fn fence_ttl(&self) -> Duration {
        Duration::from_millis(self.settings.fence_ttl_ms)
    }

    /// Learns the store's clock, the round trip and the group's totals from a reply.
    fn learn(&mut self, reply: &FlushReply, sent: Duration, now: Duration) {
        let round_trip = now.saturating_sub(sent);
        self.report.emit(Event::FlushAnswered {
            outcome: reply.outcome,
            interval: reply.interval,
            round_trip,
        });
        self.steadiness.observe(round_trip);
        self.aim.observe(reply, sent, now);
        self.alarm.answered(self.partition, sent, now, &self.report);
        if reply.outcome == Outcome::WrongInterval {
            return;
        }
        let taken = self.refresh(reply.interval, &reply.previous_totals, round_trip);
        // A counter that did not add to the interval before learns no total from this reply;
        // it takes its own interval's once that has ended. (A total of 0 says nothing that an
        // unknown one does not.)
        let landed = self.landed_total(reply);
        if taken && reply.previous_total().is_none() && landed > 0 {
            self.watch
                .landed(landed, reply.interval, reply.phase, round_trip);
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
            let spread = self.steadiness.spread();
            spread.is_some_and(|spread| spread <= interval / 4)
        });
        let (aim, round_trip) = (&self.aim, self.settling.round_trip());
        let before = self.lanes.wanted();
        self.opener.decide(&self.lanes, path, interval, || Start {
            aim: aim.clone(),
            round_trip: round_trip.clone(),
        });
        let lanes = self.lanes.wanted();
        if lanes != before {
            self.report.emit(Event::FlushLanesChanged {
                lanes,
                round_trip: path.or(round_trip.smoothed()).unwrap_or_default(),
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

    /// Reports a copy sent again.
    fn report_resent(&self, why: Why) {
        if let Some(reason) = why.resent() {
            let error = match reason {
                ResendReason::Failed => self.settling.last_error(),
                _ => None,
            };
            self.report.emit(Event::CopyResent {
                reason,
                copy: self.settling.copies(),
                error,
            });
        }
    }

    /// Sends a copy aimed at the interval the store will be in when it arrives. Returns its
    /// answer if it came at once; `None` once the counter is closed, when nothing was sent and
    /// the flush is accounted for.
    fn send(&mut self, now: Duration) -> Option<Option<Answer>> {
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
        let sent = shared.while_open(|| flight.send(store, request, report, now));
        if sent.is_none() {
            self.abandon(Abandoned::ClosedInFlight);
        }
        sent
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

    /// Takes a reply's totals as the group's numbers, unless a later reply of another lane
    /// brought newer ones; the copy that brought them took `round_trip`, and ran in the
    /// store's interval `interval`. Returns whether they were taken.
    fn refresh(&mut self, interval: u64, totals: &[Option<u64>], round_trip: Duration) -> bool {
        if !self.lanes.newest_totals(interval, self.lane) {
            return false;
        }
        let now_ms = millis(self.timer.now());
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
        let round_trip = self.settling.round_trip().smoothed().unwrap_or_default();
        Ages {
            epoch: millis(now) / self.settings.interval_ms,
            evict_after: self.settings.evict_after_intervals(),
            now_ms: millis(now),
            stale_after_ms: millis(stale_after(self.settings.interval, round_trip)),
        }
    }
}

/// Reports the calls of a family's `increment` refused for their key since the last report.
pub(crate) fn report_refused_keys(shared: &Shared, report: &Reporter) {
    shared.take_refused_keys(|reason, calls| report.emit(Event::KeyRefused { reason, calls }));
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
