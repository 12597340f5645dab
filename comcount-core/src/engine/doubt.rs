//! A flush whose fate is unknown, kept until a later flush of the same participant tells it.
//!
//! A flush all of whose copies went unanswered may or may not have been counted. The store's
//! fence holds the sequence number of the participant's last applied flush, and each reply
//! says what the fence held as the flush ran ([`FlushReply::fence`]). So the next applied
//! flush of the same participant settles the one in doubt: counted if the fence held its
//! number, certainly not counted if it held an earlier one or none, since from then on the
//! fence holds a later number and turns every copy of it away. Its amount then goes back to
//! the buffer, to be sent with a later flush.
//!
//! That holds while the fence lives: a fence that expired between the two flushes holds
//! nothing whatever was applied before. A flush in doubt is kept for half the fence's life at
//! most, as long as any of its copies can land, and reported unsettled after. It is reported
//! unsettled too when another flush goes into doubt before it is settled (the fence tells only
//! the last applied flush), when the store does not say what the fence held, and when the
//! counter stops.

use std::sync::Arc;
use std::time::Duration;

use crate::diagnostics::{Event, Reporter};
use crate::engine::batch;
use crate::error::StoreError;
use crate::handle::slot::Slot;
use crate::protocol::reply::{Fence, FlushReply, Outcome};
use crate::protocol::request::FlushRequest;

/// What a later reply tells of a flush in doubt.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Told {
    /// Counted, in this interval.
    Counted(u64),
    /// Never counted, and never will be.
    NotCounted,
    /// Nothing yet: wait for a later applied flush.
    Nothing,
    /// Nothing, and nothing later will: report it unsettled.
    Never,
}

/// When a flush in doubt began, and its number: all the settling of it needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Doubt {
    pub(crate) seq: u64,
    pub(crate) started: Duration,
}

impl Doubt {
    /// What `reply`, to a later flush of the same participant that came at `now`, tells.
    pub(crate) fn told_by(&self, reply: &FlushReply, now: Duration, fence_ttl: Duration) -> Told {
        if self.expired(now, fence_ttl) {
            return Told::Never;
        }
        // Only an applied flush moved the fence past this one's number for good.
        if reply.outcome != Outcome::Applied {
            return Told::Nothing;
        }
        match reply.fence {
            Fence::Held { seq, interval } if seq == self.seq => Told::Counted(interval),
            Fence::Held { seq, .. } if seq < self.seq => Told::NotCounted,
            Fence::Empty => Told::NotCounted,
            // A flush after this one was applied unheard of, or the store does not tell.
            _ => Told::Never,
        }
    }

    /// Whether the fence may have expired since the flush began: from half its life on, as
    /// long as a copy of it may still be in a queue.
    pub(crate) fn expired(&self, now: Duration, fence_ttl: Duration) -> bool {
        now >= self.started.saturating_add(fence_ttl / 2)
    }
}

/// A flush in doubt with what it carried: its request, and the slots its amounts came from,
/// which it holds so that no eviction takes them meanwhile.
pub(crate) struct Held {
    pub(crate) doubt: Doubt,
    request: Arc<FlushRequest>,
    slots: Vec<Arc<Slot>>,
    error: StoreError,
}

impl Held {
    pub(crate) fn new(
        started: Duration,
        request: Arc<FlushRequest>,
        slots: Vec<Arc<Slot>>,
        error: StoreError,
    ) -> Self {
        Self {
            doubt: Doubt {
                seq: request.seq,
                started,
            },
            request,
            slots,
            error,
        }
    }

    /// Accounts for it as `told`, at `now`; returns it back for [`Told::Nothing`].
    pub(crate) fn settle(
        self: Box<Self>,
        told: Told,
        now: Duration,
        report: &Reporter,
    ) -> Option<Box<Self>> {
        match told {
            Told::Counted(interval) => {
                let (total, total_age) = batch::total(&self.slots, &self.request, now);
                report.emit(Event::FlushCompleted {
                    interval,
                    amount: self.request.amount(),
                    keys: self.request.entries.len(),
                    count: self.slots.iter().map(|s| s.count()).max().unwrap_or(0),
                    total,
                    total_age,
                });
            }
            Told::NotCounted => batch::put_back(&self.slots, &self.request, report),
            Told::Never => self.unsettled(report),
            Told::Nothing => return Some(self),
        }
        None
    }

    /// Reports its amounts unsettled.
    pub(crate) fn unsettled(self, report: &Reporter) {
        batch::give_up(&self.request, &self.error, false, report);
    }
}

/// The flush in doubt of one flush loop, if it has one: the fence tells only of the last
/// flush applied, so it keeps one at most.
pub(crate) struct InDoubt {
    /// Boxed: rarely there, and 80 bytes in every counter's task if kept inline.
    held: Option<Box<Held>>,
    fence_ttl: Duration,
}

impl InDoubt {
    /// Nothing in doubt, for a store whose fences live `fence_ttl`.
    pub(crate) fn new(fence_ttl: Duration) -> Self {
        Self {
            held: None,
            fence_ttl,
        }
    }

    /// Keeps `held` until a later reply tells it; one kept before is reported unsettled.
    pub(crate) fn hold(&mut self, held: Held, report: &Reporter) {
        if let Some(earlier) = self.held.replace(Box::new(held)) {
            earlier.unsettled(report);
        }
    }

    /// Settles the flush kept, if `reply`, which came at `now`, tells what became of it.
    pub(crate) fn hear(&mut self, reply: &FlushReply, now: Duration, report: &Reporter) {
        if let Some(held) = self.held.take() {
            let told = held.doubt.told_by(reply, now, self.fence_ttl);
            self.held = held.settle(told, now, report);
        }
    }

    /// Reports the flush kept unsettled if it has been kept as long as it may be by `now`.
    pub(crate) fn expire(&mut self, now: Duration, report: &Reporter) {
        let fence_ttl = self.fence_ttl;
        if let Some(held) = self.held.take_if(|held| held.doubt.expired(now, fence_ttl)) {
            held.unsettled(report);
        }
    }

    /// Reports the flush kept unsettled: the loop ends.
    pub(crate) fn end(&mut self, report: &Reporter) {
        if let Some(held) = self.held.take() {
            held.unsettled(report);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    fn applied(fence: Fence) -> FlushReply {
        FlushReply::new(Outcome::Applied, 9, Duration::ZERO, Some(9)).with_fence(fence)
    }

    #[test]
    fn a_later_reply_tells_what_became_of_a_flush_in_doubt() {
        let doubt = Doubt {
            seq: 5,
            started: Duration::from_secs(1),
        };
        let soon = Duration::from_secs(2);
        let held = |seq, interval| Fence::Held { seq, interval };
        let cases = [
            (
                "the fence held its number",
                applied(held(5, 7)),
                Told::Counted(7),
            ),
            ("an earlier number", applied(held(4, 7)), Told::NotCounted),
            ("nothing", applied(Fence::Empty), Told::NotCounted),
            (
                "a later number: one applied unheard of",
                applied(held(6, 8)),
                Told::Never,
            ),
            (
                "a store that does not tell",
                applied(Fence::Untold),
                Told::Never,
            ),
            (
                "a duplicate moved no fence",
                FlushReply::new(Outcome::Duplicate, 9, Duration::ZERO, Some(8))
                    .with_fence(held(6, 8)),
                Told::Nothing,
            ),
            (
                "fenced: a copy of it may land yet",
                FlushReply::new(Outcome::Fenced, 9, Duration::ZERO, None).with_fence(held(4, 9)),
                Told::Nothing,
            ),
            (
                "a wrong interval reads no fence",
                FlushReply::new(Outcome::WrongInterval, 9, Duration::ZERO, None),
                Told::Nothing,
            ),
        ];
        for (case, reply, told) in cases {
            assert_eq!(doubt.told_by(&reply, soon, TTL), told, "{case}");
        }
        // From half the fence's life on, the fence may be gone: nothing can be told.
        let late = Duration::from_secs(31);
        assert_eq!(doubt.told_by(&applied(held(5, 7)), late, TTL), Told::Never);
        assert_eq!(
            doubt.told_by(&applied(Fence::Empty), late, TTL),
            Told::Never
        );
        assert!(!doubt.expired(late - Duration::from_millis(1), TTL));
    }
}
