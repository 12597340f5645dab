//! How long the store takes to answer, measured reply by reply: the one estimate of the round
//! trip that every decision of a flush loop reads.
//!
//! - **The timeout**, how long to wait for a reply before sending another copy, is TCP's
//!   (RFC 6298): a smoothed round trip and its mean deviation, and a timeout of the one plus
//!   four times the other.
//! - **The round trip planned with**, for aiming a flush ([`aim`](super::aim)), is the newest,
//!   or the lower median of the last few when that is less: a copy held up once (in a client's
//!   queue through a failover, say) says little about the next one, while a store that is slow
//!   every time is slow in all of them, and the first quick reply after an outage is taken at
//!   once. It is **steady** while the last few lie within a quarter interval of each other.
//! - **The spread** of the round trips seen lately ([`steadiness`](super::steadiness)) tells a
//!   store far away from a queue, for the [`lanes`](super::lanes).
//!
//!  Each copy of a flush is its own future, so
//! every reply times the copy it answers and no sample is ambiguous. A timeout that passes
//! doubles the next one (twice at most), until a reply comes: a store that slows down, for
//! whatever reason, gets fewer copies, not more.

use std::time::Duration;

use crate::engine::policy::steadiness::Steadiness;

/// How many recent round trips the round trip planned with is the lower median of.
const RECENT: usize = 4;

/// The longest a copy is waited for before another is sent, however slow the store.
const CAP: Duration = Duration::from_secs(60);

/// The most the timeout is doubled in a row: four times the estimate at most, so that once
/// an outage ends a copy goes out within a few round trips, while a store that slows down
/// still sees copies thin out.
const MAX_DOUBLINGS: u32 = 2;

#[derive(Clone, Debug)]
pub(crate) struct RoundTrip {
    /// The timeout before the first reply, and the least it ever is.
    floor: Duration,
    interval: Duration,
    smoothed: Option<Duration>,
    deviation: Duration,
    doublings: u32,
    /// The last few round trips, newest at `next - 1`.
    recent: [Option<Duration>; RECENT],
    next: usize,
    steadiness: Steadiness,
}

impl RoundTrip {
    /// An estimator for a counter flushed every `interval`, whose timeout starts at, and
    /// never goes below, `floor`.
    pub(crate) fn new(floor: Duration, interval: Duration) -> Self {
        Self {
            floor,
            interval,
            smoothed: None,
            deviation: Duration::ZERO,
            doublings: 0,
            recent: [None; RECENT],
            next: 0,
            steadiness: Steadiness::new(interval),
        }
    }

    /// Takes the round trip of one answered copy.
    pub(crate) fn sample(&mut self, round_trip: Duration) {
        match self.smoothed {
            None => {
                self.smoothed = Some(round_trip);
                self.deviation = round_trip / 2;
            }
            Some(smoothed) => {
                let error = smoothed.abs_diff(round_trip);
                self.deviation = (self.deviation * 3 + error) / 4;
                self.smoothed = Some((smoothed * 7 + round_trip) / 8);
            }
        }
        self.doublings = 0;
        self.recent[self.next] = Some(round_trip);
        self.next = (self.next + 1) % RECENT;
        self.steadiness.observe(round_trip);
    }

    /// Doubles the timeout, after one passed with no reply.
    pub(crate) fn back_off(&mut self) {
        self.doublings = (self.doublings + 1).min(MAX_DOUBLINGS);
    }

    /// How long to wait for a reply before another copy may go: at least twice the smoothed
    /// round trip, since a copy that a queue merely holds up gains nothing from company.
    pub(crate) fn timeout(&self) -> Duration {
        let estimate = self.smoothed.map_or(Duration::ZERO, |smoothed| {
            (smoothed + (self.deviation * 4).max(Duration::from_millis(1))).max(smoothed * 2)
        });
        estimate
            .max(self.floor)
            .saturating_mul(1 << self.doublings)
            .min(CAP.max(self.floor))
    }

    /// The smoothed round trip, once a reply has come.
    pub(crate) fn smoothed(&self) -> Option<Duration> {
        self.smoothed
    }

    /// The round trip to plan with: the newest, or the lower median of the recent ones when
    /// that is less. `None` before a reply.
    pub(crate) fn planned(&self) -> Option<Duration> {
        let newest = self.recent[(self.next + RECENT - 1) % RECENT]?;
        Some(newest.min(self.lower_median()))
    }

    /// The lower median of the recent round trips: one held-up copy among them does not move
    /// it, and under a queue that fills and drains it sits in the middle of the spread, where
    /// the least of them would have nearly every flush arrive later than aimed.
    fn lower_median(&self) -> Duration {
        let mut recent = self.recent;
        recent.sort_unstable();
        // `None` sorts first: skip the slots not yet filled.
        let filled = &recent[recent.iter().filter(|r| r.is_none()).count()..];
        filled[(filled.len() - 1) / 2].unwrap_or_default()
    }

    /// The round trip planned with, while it is steady: the last few within a quarter
    /// interval of each other.
    pub(crate) fn steady(&self) -> Option<Duration> {
        let (mut least, mut most) = (Duration::MAX, Duration::ZERO);
        for recent in self.recent {
            let recent = recent?;
            least = least.min(recent);
            most = most.max(recent);
        }
        let steady = most - least <= self.interval / 4;
        steady.then(|| self.planned()).flatten()
    }

    /// The path's own round trip, while it is steady and the round trips seen lately spread
    /// over a quarter interval at most: a store far away rather than a queue behind other
    /// flushes, which fills and drains.
    pub(crate) fn path(&self) -> Option<Duration> {
        let spread = self.steadiness.spread();
        let far = spread.is_some_and(|spread| spread <= self.interval / 4);
        self.steady().filter(|_| far)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn waits_the_floor_until_a_reply_is_timed() {
        let rt = RoundTrip::new(ms(100), ms(100));
        assert_eq!(rt.timeout(), ms(100));
        assert_eq!(rt.smoothed(), None);
    }

    #[test]
    fn a_store_slower_than_the_floor_raises_the_timeout_above_its_round_trip() {
        let mut rt = RoundTrip::new(ms(100), ms(100));
        rt.sample(ms(300));
        // 300 + 4 * 150
        assert_eq!(rt.timeout(), ms(900));
        for _ in 0..50 {
            rt.sample(ms(300));
        }
        assert_eq!(rt.timeout(), ms(600));
    }

    #[test]
    fn the_deviation_follows_how_far_replies_stray_from_the_smoothed_round_trip() {
        let mut rt = RoundTrip::new(ms(100), ms(100));
        rt.sample(ms(300));
        rt.sample(ms(100));
        // Smoothed (7 * 300 + 100) / 8 = 275; deviation (3 * 150 + 200) / 4 = 162.5.
        assert_eq!(rt.smoothed(), Some(ms(275)));
        assert_eq!(rt.timeout(), ms(275) + ms(650));
    }

    #[test]
    fn a_fast_store_keeps_the_floor() {
        let mut rt = RoundTrip::new(ms(100), ms(100));
        for _ in 0..10 {
            rt.sample(ms(1));
        }
        assert_eq!(rt.timeout(), ms(100));
    }

    #[test]
    fn each_timeout_doubles_the_next_until_a_reply_comes() {
        let mut rt = RoundTrip::new(ms(100), ms(100));
        rt.back_off();
        assert_eq!(rt.timeout(), ms(200));
        rt.back_off();
        assert_eq!(rt.timeout(), ms(400));
        for _ in 0..20 {
            rt.back_off();
        }
        assert_eq!(rt.timeout(), ms(400));
        rt.sample(ms(10));
        assert_eq!(rt.timeout(), ms(100));
    }

    #[test]
    fn the_timeout_is_capped() {
        let mut rt = RoundTrip::new(ms(100), ms(100));
        rt.sample(Duration::from_secs(50));
        rt.back_off();
        assert_eq!(rt.timeout(), CAP);
    }
}
