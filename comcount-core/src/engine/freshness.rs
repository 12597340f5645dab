//! Waiting on anything while watching for three other things: the counter being closed, the
//! end of a drain asked for, and the group's totals going stale.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::task::Poll;
use std::time::Duration;

use crate::clock::Timer;
use crate::diagnostics::{Event, Reporter};
use crate::engine::batch::Batch;
use crate::engine::parts::Parts;
use crate::engine::policy::lanes::MAX_LANES;
use crate::handle::settings;
use crate::handle::shared::Shared;
use crate::protocol::keys::Layout;
use crate::protocol::reply::{FlushReply, Outcome};
use crate::protocol::request::FlushRequest;

/// Keeps how fresh a partition's totals are. Totals that nothing refreshed for two intervals
/// become unknown, whatever the background task is busy with: a hanging flush included.
/// Totals that took a long round trip to arrive keep that much longer (up to three intervals
/// more), since the next ones will take as long. The lanes of a partition ([`TotalsClock`]) keep
/// one time for their totals: a refresh by any lane keeps them fresh.
pub(crate) struct Freshness<'a, T> {
    timer: &'a T,
    shared: &'a Shared,
    partition: u32,
    report: &'a Reporter,
    interval: Duration,
    /// When the partition's totals go stale, shared by its lanes.
    totals: &'a TotalsClock,
    /// A counter's total of the interval its last flush was counted in, waiting for that
    /// interval to end.
    landed: Option<Landed>,
}

/// When a partition's totals came and when they go stale, as all its lanes
/// ([`lanes`](crate::engine::policy::lanes)) see them: a refresh by any lane keeps them fresh,
/// and a lane's reply that comes after a later one of another lane's is not taken.
#[derive(Debug)]
pub(crate) struct TotalsClock {
    /// The store's interval of the newest reply whose totals were taken.
    totals_from: AtomicU64,
    /// The lane that reply answered.
    totals_lane: AtomicU32,
    /// When the partition's totals go stale, in nanoseconds of the worker's timer
    /// ([`NONE`]: no total is known).
    stale_at: AtomicU64,
    /// When a reply last brought a known total.
    refreshed_at: AtomicU64,
    /// When the totals went stale, until a reply brings one again ([`NONE`]: they did not).
    went_stale_at: AtomicU64,
}

/// An instant that is not set.
const NONE: u64 = u64::MAX;

impl Default for TotalsClock {
    fn default() -> Self {
        Self {
            totals_from: AtomicU64::new(0),
            totals_lane: AtomicU32::new(0),
            stale_at: AtomicU64::new(NONE),
            refreshed_at: AtomicU64::new(0),
            went_stale_at: AtomicU64::new(NONE),
        }
    }
}

impl TotalsClock {
    /// Claims the totals of a reply to lane `lane` from the store's interval `interval` as
    /// the newest, and returns whether they are: a lane's reply that comes after a later one of another lane's brings older
    /// totals, which are not taken. A lane's own replies are taken as they come, and so is one
    /// from much further back: the store's clock gone back (a failover to a server whose clock
    /// is behind, say), which the later ones follow from.
    pub(crate) fn claim_reply(&self, interval: u64, lane: u32) -> bool {
        let newest = self.totals_from.load(Relaxed);
        let other_lane = self.totals_lane.load(Relaxed) != lane;
        if other_lane && interval < newest && newest - interval <= u64::from(MAX_LANES) {
            return false;
        }
        self.totals_from.store(interval, Relaxed);
        self.totals_lane.store(lane, Relaxed);
        true
    }

    /// Claims a counter's total of `interval`, taken just after a flush counted there, as the
    /// newest now that the interval has ended, and returns whether it is: no reply from a
    /// later interval brought totals since. If so, the totals are from the interval after it from now on, so that a
    /// later reply of another lane from `interval` or before is not taken over it.
    pub(crate) fn claim_landed(&self, interval: u64) -> bool {
        if self.totals_from.load(Relaxed) > interval {
            return false;
        }
        self.totals_from.store(interval.saturating_add(1), Relaxed);
        true
    }

    /// When the partition's totals go stale, while one is known.
    pub(crate) fn stale_at(&self) -> Option<Duration> {
        instant(self.stale_at.load(Relaxed))
    }

    /// Notes a refresh at `now` that keeps the totals fresh until `fresh_until`; returns when
    /// the totals went stale before it, if they did.
    pub(crate) fn refreshed(&self, now: Duration, fresh_until: Duration) -> Option<Duration> {
        self.refreshed_at.store(nanos(now), Relaxed);
        self.stale_at.store(nanos(fresh_until), Relaxed);
        instant(self.went_stale_at.swap(NONE, Relaxed))
    }

    /// Takes the time the totals go stale, if it is set and not after `at`: whoever takes it
    /// makes them stale.
    pub(crate) fn take_stale_at(&self, at: Duration) -> bool {
        let stale_at = self.stale_at.load(Relaxed);
        stale_at != NONE
            && stale_at <= nanos(at)
            && self
                .stale_at
                .compare_exchange(stale_at, NONE, Relaxed, Relaxed)
                .is_ok()
    }

    /// Notes that the totals went stale at `now`; returns when they were last refreshed.
    pub(crate) fn went_stale(&self, now: Duration) -> Duration {
        self.went_stale_at.store(nanos(now), Relaxed);
        Duration::from_nanos(self.refreshed_at.load(Relaxed))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(NONE - 1)
}

fn instant(nanos: u64) -> Option<Duration> {
    (nanos != NONE).then(|| Duration::from_nanos(nanos))
}

/// A counter's total of the interval a flush was counted in, taken just after the flush: a
/// lower bound on what that interval holds once it has ended, and so the group's total from
/// then on, unless a reply brings the whole of it or a larger one is known. A lone counter
/// whose flushes wait behind a queue seldom adds to two intervals in a row, and learns its
/// total this way.
#[derive(Clone, Copy, Debug)]
struct Landed {
    total: u64,
    /// The store's interval the flush was counted in.
    interval: u64,
    /// When that interval has ended, on the timer, at the latest.
    ends_at: Duration,
    /// When the reply came.
    at: Duration,
    /// The round trip of the copy that brought it.
    round_trip: Duration,
}

enum Woke<O> {
    Done(O),
    Stopped,
    Alarm,
    /// Something changed that the next wake time depends on.
    Again,
}

/// How a wait that the counter's close did not cut ended.
pub(crate) enum Waited<O> {
    /// The future awaited completed.
    Done(O),
    /// The deadline came first.
    Deadline,
}

impl<'a, T: Timer> Freshness<'a, T> {
    /// Watches the totals of `partition`, whose lanes keep their time in `totals`.
    pub(crate) fn new<S>(parts: &'a Parts<S, T>, partition: u32, totals: &'a TotalsClock) -> Self {
        Self {
            timer: &parts.timer,
            shared: &parts.shared,
            partition,
            report: &parts.report,
            interval: parts.settings.interval,
            totals,
            landed: None,
        }
    }

    /// Notes the store's clock as `reply` shows it, and learns the group's totals from it, a
    /// reply to `request` sent by lane `lane` of the partition, whose copy took `round_trip`: the totals of the interval before, for the keys
    /// of `batch`, unless a later reply of another lane brought newer ones; and a counter's
    /// landed total, which becomes its group's total once its interval has ended.
    pub(crate) fn learn(
        &mut self,
        reply: &FlushReply,
        request: &FlushRequest,
        lane: u32,
        round_trip: Duration,
        batch: &Batch,
    ) {
        // Any reply shows the store's clock, a wrong interval's too.
        let now = self.timer.now();
        let interval_ms = u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX);
        self.shared
            .note_store_clock(now, reply.phase, round_trip, interval_ms);
        if reply.outcome == Outcome::WrongInterval || !self.totals.claim_reply(reply.interval, lane)
        {
            return;
        }
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let totals = &reply.previous_totals;
        // Not once closed: a reply that comes as the family closes must not bring a total
        // back after `close()` forgot them all.
        let open = self
            .shared
            .while_open(|| batch.refresh(totals, now_ms))
            .is_some();
        self.refreshed(open && totals.iter().any(Option::is_some), round_trip);
        // A counter that did not add to the interval before learns no total from this reply;
        // it takes its own interval's once that has ended. (A total of 0 says nothing that an
        // unknown one does not.)
        let landed = landed_total(reply, request);
        if reply.previous_total().is_none() && landed > 0 {
            // The flush ran before its reply came: its interval ends no later than this.
            let ends_at = now + self.interval.saturating_sub(reply.phase);
            self.landed = Some(Landed {
                total: landed,
                interval: reply.interval,
                ends_at,
                at: now,
                round_trip,
            });
        }
    }

    /// Takes the landed total as the group's, once its interval has ended (by `now`), fresh
    /// for as long as a reply's total that came with it would be: unless a reply from a later
    /// interval was taken since, the counter is closed, it went stale meanwhile, or the total
    /// known is as large.
    fn take_landed(&mut self, now: Duration) {
        let Some(landed) = self.landed.filter(|l| l.ends_at <= now) else {
            return;
        };
        self.landed = None;
        let fresh_until = landed.at + settings::stale_after(self.interval, landed.round_trip);
        if fresh_until <= now || !self.totals.claim_landed(landed.interval) {
            return;
        }
        let at_ms = u64::try_from(landed.at.as_millis()).unwrap_or(u64::MAX);
        let raised = self.shared.while_open(|| {
            self.shared.keys.with_members(
                self.partition,
                |_| false,
                |members| {
                    let Some(slot) = members.first() else {
                        return false;
                    };
                    let larger = slot.total.get().is_none_or(|known| known < landed.total);
                    if larger {
                        slot.refresh(Some(landed.total), at_ms);
                    }
                    larger
                },
            )
        });
        if raised != Some(true) {
            return;
        }
        if let Some(went_stale_at) = self.totals.refreshed(landed.at, fresh_until) {
            self.report.emit(Event::TotalFreshAgain {
                stale_for: now.saturating_sub(went_stale_at),
            });
        }
    }

    /// Notes that a reply refreshed the partition's totals (`known`: some of them are known);
    /// the copy that brought them took `round_trip`. A known total after a stale one is
    /// reported, once.
    ///
    /// A reply that brings none leaves the time to go stale as it was: a family's keys outside
    /// that flush still hold the totals of the replies before.
    fn refreshed(&mut self, known: bool, round_trip: Duration) {
        if !known {
            return;
        }
        let now = self.timer.now();
        let fresh_until = now + settings::stale_after(self.interval, round_trip);
        if let Some(went_stale_at) = self.totals.refreshed(now, fresh_until) {
            self.report.emit(Event::TotalFreshAgain {
                stale_for: now.saturating_sub(went_stale_at),
            });
        }
    }

    /// Awaits `future` until `deadline` (on the timer; `None` for none), or returns `None` once
    /// the counter is closed. Meanwhile the total goes stale when its time comes: one timer
    /// serves the deadline and the staleness, whichever is first.
    pub(crate) async fn until<F: Future>(
        &mut self,
        future: F,
        deadline: Option<Duration>,
    ) -> Option<Waited<F::Output>> {
        let mut future = pin!(future);
        loop {
            let now = self.timer.now();
            let drain_by = self.shared.drain_by();
            if drain_by.is_some_and(|by| by <= now) {
                // A drain that ran out of time ends as a close does.
                self.shared.close();
                return None;
            }
            self.take_landed(now);
            let wake_at = deadline
                .into_iter()
                .chain(self.totals.stale_at())
                .chain(self.landed.map(|l| l.ends_at))
                .chain(drain_by)
                .min();
            let mut alarm = pin!(wake_at.map(|at| self.timer.sleep(at.saturating_sub(now))));
            let (shared, partition) = (&self.shared, self.partition);
            let woke = poll_fn(|cx| {
                // The stop first: once closed, nothing more of the future may run. It runs
                // under the gate, as a copy it polls may hand its command over only now.
                if shared.poll_closed(partition, cx) {
                    return Poll::Ready(Woke::Stopped);
                }
                if shared.drain_by() != drain_by {
                    // A drain asked for since: its end is one more time to wake at.
                    return Poll::Ready(Woke::Again);
                }
                match shared.while_open(|| future.as_mut().poll(cx)) {
                    None => return Poll::Ready(Woke::Stopped),
                    Some(Poll::Ready(output)) => return Poll::Ready(Woke::Done(output)),
                    Some(Poll::Pending) => {}
                }
                match alarm.as_mut().as_pin_mut().map(|s| s.poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(Woke::Alarm),
                    _ => Poll::Pending,
                }
            })
            .await;
            match (woke, wake_at) {
                (Woke::Done(output), _) => return Some(Waited::Done(output)),
                (Woke::Stopped, _) => return None,
                (Woke::Again, _) => {}
                (Woke::Alarm, Some(at)) => {
                    // Now, not the time the alarm was set for: a worker that ran late must
                    // not take a total that went stale while it waited.
                    self.take_landed(self.timer.now());
                    if self.totals.take_stale_at(at) {
                        self.go_stale();
                    }
                    if deadline.is_some_and(|deadline| deadline <= at) {
                        return Some(Waited::Deadline);
                    }
                }
                // No alarm is set without a time to wake at.
                (Woke::Alarm, None) => {}
            }
        }
    }

    /// Forgets the partition's totals, once their time to go stale was taken, and reports it
    /// if one was still known: a reply that brought none may have forgotten them all already.
    fn go_stale(&mut self) {
        let forgot = self.shared.keys.with_members(
            self.partition,
            |_| false,
            |members| {
                // Every total is forgotten: no short cut once one was known.
                let mut forgot = false;
                for slot in members {
                    forgot |= slot.total.take().is_some();
                }
                forgot
            },
        );
        if !forgot {
            return;
        }
        let now = self.timer.now();
        let refreshed_at = self.totals.went_stale(now);
        self.report.emit(Event::TotalWentStale {
            after: now.saturating_sub(refreshed_at),
        });
    }
}

/// A single counter's total of the interval its flush was counted in, just after it; 0 when
/// the store did not tell it, and for a family's flush, whose partition holds many keys'
/// totals: a store that told one would give it to whichever key comes first.
fn landed_total(reply: &FlushReply, request: &FlushRequest) -> u64 {
    match reply.landed_totals.as_slice() {
        &[Some(total)]
            if reply.outcome == Outcome::Applied && request.space.layout() == Layout::Counter =>
        {
            total
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_later_reply_of_another_lane_keeps_its_newer_totals() {
        let totals = TotalsClock::default();
        assert!(totals.claim_reply(10, 0));
        assert!(totals.claim_reply(11, 1));
        // Lane 0's reply from interval 10 comes after lane 1's from 11: older totals.
        assert!(!totals.claim_reply(10, 0));
        assert!(totals.claim_reply(12, 0));
        // A lane's own replies are taken as they come.
        assert!(totals.claim_reply(11, 0));
        // A clock gone back far: taken, and the later ones follow from it.
        assert!(totals.claim_reply(3, 1));
        assert!(totals.claim_reply(4, 0));
    }

    #[test]
    fn a_refresh_by_any_lane_keeps_the_totals_fresh_and_reports_the_end_of_a_stale_spell() {
        let totals = TotalsClock::default();
        assert_eq!(totals.stale_at(), None);
        assert_eq!(totals.refreshed(ms(100), ms(400)), None);
        assert!(!totals.take_stale_at(ms(399)));
        // Another lane's refresh moves it on.
        assert_eq!(totals.refreshed(ms(200), ms(500)), None);
        assert!(!totals.take_stale_at(ms(450)));
        assert!(totals.take_stale_at(ms(500)));
        assert!(
            !totals.take_stale_at(ms(500)),
            "the totals went stale twice"
        );
        assert_eq!(totals.went_stale(ms(500)), ms(200));
        assert_eq!(totals.refreshed(ms(700), ms(1000)), Some(ms(500)));
        assert_eq!(totals.refreshed(ms(800), ms(1100)), None);
    }
}
