//! How long a flush loop waits after a flush before it takes the next.
//!
//! A participant whose round trip keeps it from adding to every interval skips one more, half
//! the time: participants that started together would otherwise all add to the same intervals,
//! leave the others without a key, and never learn a total. A partition's lanes take the
//! intervals in turn ([`lanes`](crate::engine::policy::lanes)).

use std::time::Duration;

use crate::engine::policy::aim::Aim;
use crate::engine::policy::lanes;
use crate::handle::timing::Timing;

/// What became of one flush.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Settled {
    /// Counted by the store in this interval.
    Counted(u64),
    /// Not counted as far as this participant knows: back in the buffer, or reported dropped
    /// or unsettled.
    NotCounted,
}

#[derive(Debug)]
pub(crate) struct Pause {
    timing: Timing,
    interval: Duration,
    /// Spreads participants that cannot add to every interval over different ones. Seeded from
    /// the participant and the partition alone, so that a run on virtual time with fixed
    /// participant ids repeats exactly.
    coin: fastrand::Rng,
}

impl Pause {
    pub(crate) fn new(timing: Timing, interval: Duration, seed: u64) -> Self {
        Self {
            timing,
            interval,
            coin: fastrand::Rng::with_seed(seed),
        }
    }

    /// How long to wait from `now` after a flush that `settled`, the participant having added
    /// to `last_added` last; it flushes through lane `lane` of `lanes`.
    pub(crate) fn after(
        &mut self,
        settled: Settled,
        now: Duration,
        aim: &Aim,
        last_added: Option<u64>,
        (lane, lanes): (u32, u32),
    ) -> Duration {
        let interval = self.interval;
        if self.timing == Timing::AfterReply {
            return interval;
        }
        // After a flush that did not count, not again in the same interval: what failed there
        // would likely fail again.
        let floor = match settled {
            Settled::Counted(_) => last_added,
            Settled::NotCounted => last_added.max(Some(aim.expected_interval(now))),
        };
        let Some(delay) = aim.delay_to_aim(now, floor) else {
            return interval;
        };
        if lanes > 1 {
            // Each lane in its turn: the store is far, not busy, and the lanes together add one
            // flush an interval.
            let lands = aim.expected_interval(now + delay);
            let turn = lanes::turn(lands, lane, lanes);
            // Fewer than `lanes` intervals later.
            let later = u32::try_from(turn - lands).unwrap_or(0);
            return delay + interval * later;
        }
        let Settled::Counted(n) = settled else {
            return delay;
        };
        let skipping = aim.expected_interval(now + delay) > n + 1;
        if skipping && self.coin.bool() {
            delay + interval
        } else {
            delay
        }
    }
}
