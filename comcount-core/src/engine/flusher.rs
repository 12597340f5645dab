//! The flush loop of one lane ([`lanes`](crate::engine::policy::lanes)): it takes the buffers as a flush, sends
//! its copies and awaits their answers as [`Settling`] decides, learns the group's totals from
//! the replies, and pauses before the next flush as [`Pause`] decides.

use std::future::pending;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::clock::Timer;
use crate::diagnostics::Event;
use crate::engine::batch::{Ages, Batch};
use crate::engine::doubt::{Held, InDoubt};
use crate::engine::flight::{Answer, Flight};
use crate::engine::freshness::{Freshness, TotalsClock, Waited};
use crate::engine::parts::Parts;
use crate::engine::policy::aim::Aim;
use crate::engine::policy::lanes::{Lanes, Opener, Start};
use crate::engine::policy::pause::{Pause, Settled};
use crate::engine::policy::round_trip::RoundTrip;
use crate::engine::policy::settling::{Limits, Settling, Step};
use crate::error::Abandoned;
use crate::protocol::request::FlushRequest;
use crate::protocol::store::Store;

pub(crate) struct Flusher<'a, S, T> {
    parts: &'a Parts<Arc<S>, T>,
    /// Which of the family's partitions this loop flushes (0 for a counter).
    partition: u32,
    /// Which of the partition's lanes this loop is (0 for the one always there).
    lane: u32,
    /// What the partition's lanes share.
    lanes: &'a Lanes,
    /// How many lanes to flush through, as the first lane decides.
    opener: Opener,
    freshness: Freshness<'a, T>,
    aim: Aim,
    settling: Settling,
    pause: Pause,
    /// The flush, shared with its copies in flight rather than copied into each: a flush of
    /// many keys would otherwise hold its entries twice while it is awaited.
    request: Arc<FlushRequest>,
    /// The keys the flush carries.
    batch: Batch,
    /// The copies of the flush in the air, kept from one flush to the next.
    flight: Flight,
    /// A flush given up with its fate unknown, until a later reply tells it.
    doubt: InDoubt,
    /// Whether the flush's amounts were taken from the buffers and are not accounted for yet:
    /// what a drop of the loop must settle.
    unsettled: bool,
}

impl<S, T> Flusher<'_, S, T> {
    /// Accounts for a flush that ends with copies maybe in the air, as [`Settling::abandon`]
    /// decides; a flush of nothing needs no report.
    fn abandon(&self, why: Abandoned) {
        match self.settling.abandon(why) {
            Step::GiveUp { .. } if self.request.amount() == 0 => {}
            step => self.batch.end(&self.request, step, &self.parts.report),
        }
    }
}

impl<S, T> Drop for Flusher<'_, S, T> {
    /// The loop dropped in the middle of a flush (its runtime shut down, the task was dropped,
    /// or a panic unwinds through it, the store's or the application's) accounts for the flush
    /// as a close does. If the diagnostics are what panicked, nothing more is reported to
    /// them, and only amounts that certainly were not counted go back.
    fn drop(&mut self) {
        let report = &self.parts.report;
        if !report.sink_panicked() {
            self.doubt.end(report);
            if self.unsettled {
                self.abandon(Abandoned::DroppedInFlight);
            }
        } else if self.unsettled
            && matches!(
                self.settling.abandon(Abandoned::DroppedInFlight),
                Step::PutBack
            )
        {
            self.batch.put_back(&self.request, report);
        }
    }
}

impl<'a, S: Store, T: Timer> Flusher<'a, S, T> {
    /// The flush loop of lane `lane` of `partition` (0 and 0 for a counter's first), whose
    /// lanes share `lanes` and `totals`.
    pub(crate) fn new(
        parts: &'a Parts<Arc<S>, T>,
        partition: u32,
        lane: u32,
        lanes: &'a Lanes,
        totals: &'a TotalsClock,
    ) -> Self {
        let settings = &parts.settings;
        let participant = parts.participant.lane(lane);
        let (aim, round_trip) = match lanes.start().filter(|_| lane > 0) {
            Some(Start { aim, round_trip }) => (aim, round_trip),
            None => (
                Aim::for_partition(settings.interval_ms, partition, settings.partitions()),
                RoundTrip::new(settings.policy.flush_timeout, settings.interval),
            ),
        };
        let seed = participant.as_u64() ^ (u64::from(partition) << 32);
        let request = settings.request(partition, participant);
        let request = request.with_seq(lanes.resume_seq(parts.first_seq));
        Self {
            freshness: Freshness::new(parts, partition, totals),
            batch: Batch::new(Arc::clone(&parts.shared), partition),
            flight: Flight::default(),
            aim,
            settling: Settling::new(Limits::from(settings), round_trip),
            pause: Pause::new(settings.policy.timing, settings.interval, seed),
            request: Arc::new(request),
            doubt: InDoubt::new(settings.fence_ttl()),
            unsettled: false,
            opener: Opener::default(),
            parts,
            partition,
            lane,
            lanes,
        }
    }

    /// Waits for the first increment, then flushes, pauses and flushes again until stopped.
    pub(crate) async fn run(&mut self) -> Option<()> {
        let parts = self.parts;
        let started = parts.shared.started(self.partition);
        self.freshness.until(started, None).await?;
        loop {
            if self.lane >= self.lanes.wanted() {
                // A lane after the first that is no longer wanted, between its flushes.
                return Some(());
            }
            let settled = self.fly().await;
            self.unsettled = false;
            self.flight.clear();
            let settled = settled?;
            if self.partition == 0 && self.lane == 0 {
                // At most once an interval: a partition flushes at most once in each.
                parts.shared.report_keys(&parts.report);
            }
            if parts.shared.drain_by().is_some() && parts.shared.unsent_in(self.partition) == 0 {
                // Drained: what the partition counted went out, and this loop's flush settled.
                return Some(());
            }
            parts.alarm.awaiting(self.partition, None);
            self.batch.release(Arc::make_mut(&mut self.request));
            if self.lane == 0 {
                let estimates = (&self.aim, self.settling.round_trip());
                let (lanes, settings) = (self.lanes, &parts.settings);
                self.opener
                    .after_flush(lanes, settings, estimates, &parts.report);
            }
            let now = parts.timer.now();
            let lanes = (self.lane, self.lanes.wanted());
            let last_added = self.settling.last_added();
            let pause = self.pause.after(settled, now, &self.aim, last_added, lanes);
            let resume_at = Some(now + pause);
            self.freshness.until(pending::<()>(), resume_at).await?;
        }
    }

    /// Takes the buffers as one new flush and keeps at it until it is settled; `None` once the
    /// counter is closed. `flight` is clear.
    async fn fly(&mut self) -> Option<Settled> {
        let parts = self.parts;
        if !self.gather()? {
            return Some(Settled::NotCounted);
        }
        self.lanes.took_seq(self.request.seq);
        self.unsettled = true;
        self.settling.start(parts.timer.now());
        loop {
            let now = parts.timer.now();
            match self.settling.next(now) {
                Step::Send(why) => {
                    let answer = self.send(now)?;
                    let window = self.request.window();
                    if let Some(dropped) = self.settling.sent(now, window, answer.is_none()) {
                        self.flight.stop_awaiting(dropped);
                    }
                    self.settling.report_resent(why, &parts.report);
                    if let Some(answer) = answer {
                        self.hear(answer);
                    }
                }
                Step::Wait(until) => self.wait(until).await?,
                Step::Counted(interval) => {
                    let (total, total_age) = self.batch.total(&self.request, parts.timer.now());
                    parts.report.emit(Event::FlushCompleted {
                        interval,
                        amount: self.request.amount(),
                        keys: self.request.entries.len(),
                        count: self.batch.count(),
                        total,
                        total_age,
                    });
                    return Some(Settled::Counted(interval));
                }
                Step::InDoubt(error) => {
                    let (request, slots) = (Arc::clone(&self.request), self.batch.hand_over());
                    let held = Held::new(self.settling.started(), request, slots, error);
                    self.doubt.hold(held, &parts.report);
                    return Some(Settled::NotCounted);
                }
                step => {
                    self.batch.end(&self.request, step, &parts.report);
                    return Some(Settled::NotCounted);
                }
            }
        }
    }

    /// Takes the buffers into the request under the next sequence number; whether there is
    /// anything to flush, `None` once the counter is closed. Apart from [`fly`](Self::fly), so
    /// that what it works with takes no room in the task while the flush is awaited.
    fn gather(&mut self) -> Option<bool> {
        let parts = self.parts;
        let now = parts.timer.now();
        let round_trip = self.settling.round_trip().smoothed().unwrap_or_default();
        let ages = Ages::new(now, &parts.settings, round_trip);
        parts.shared.epoch.fetch_max(ages.epoch, Relaxed);
        self.doubt.expire(now, &parts.report);
        // No copy of the last flush is left to share the request, so this takes no copy.
        let request = Arc::make_mut(&mut self.request);
        let gathered = parts
            .shared
            .while_open(|| self.batch.gather(request, ages))?;
        request.seq += u64::from(gathered);
        Some(gathered)
    }

    /// Waits for an answer of a copy in the air, until `until` or the slow-store alarm's next
    /// look; `None` once the counter is closed.
    async fn wait(&mut self, until: Duration) -> Option<()> {
        let parts = self.parts;
        let waiting_since = self.settling.waiting_since();
        parts.alarm.awaiting(self.partition, waiting_since);
        let next_look = waiting_since.and_then(|sent| parts.alarm.next_check(sent));
        let wake_at = next_look.map_or(until, |look| look.min(until));
        let answer = self.flight.next_answer(|| parts.shared.is_closed());
        match self.freshness.until(answer, Some(wake_at)).await {
            None => {
                self.abandon(Abandoned::ClosedInFlight);
                return None;
            }
            Some(Waited::Done(answer)) => self.hear(answer),
            Some(Waited::Deadline) => {
                let now = parts.timer.now();
                if let Some(oldest) = waiting_since {
                    parts.alarm.waiting(oldest, now, &parts.report);
                }
                self.settling.timed_out(now);
            }
        }
        Some(())
    }

    /// Takes one copy's answer: learns the store's clock, the round trip and the group's
    /// totals from a reply, settles a flush in doubt, and tells the settling.
    fn hear(&mut self, answer: Answer) {
        let parts = self.parts;
        let (now, sent) = (parts.timer.now(), answer.sent);
        let reply = match answer.result {
            Ok(reply) => reply,
            Err(error) => return self.settling.failed(error, sent, now),
        };
        let round_trip = now.saturating_sub(sent);
        parts.report.emit(Event::FlushAnswered {
            outcome: reply.outcome,
            interval: reply.interval,
            round_trip,
        });
        parts
            .alarm
            .answered(self.partition, sent, now, &parts.report);
        let (request, batch) = (&self.request, &self.batch);
        self.freshness
            .learn(&reply, request, self.lane, round_trip, batch);
        self.doubt.hear(&reply, now, &parts.report);
        self.settling.replied(&reply, sent, now, &mut self.aim);
    }

    /// Sends a copy aimed at the interval the store will be in when it arrives. Returns its
    /// answer if it came at once; `None` once the counter is closed, when nothing was sent and
    /// the flush is accounted for.
    fn send(&mut self, now: Duration) -> Option<Option<Answer>> {
        self.aim.aim(&mut self.request, now);
        let parts = self.parts;
        let (flight, request) = (&mut self.flight, &self.request);
        let sent = parts
            .shared
            .while_open(|| flight.send(&parts.store, request, &parts.report, now));
        if sent.is_none() {
            self.abandon(Abandoned::ClosedInFlight);
        }
        sent
    }
}
