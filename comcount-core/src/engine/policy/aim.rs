//! Which interval the store's clock will be in when a flush arrives, estimated from the last
//! reply: the store's interval and phase then, and the round trip it took.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::policy::round_trip::RoundTrip;
use crate::protocol::reply::FlushReply;
use crate::protocol::request::FlushRequest;

#[derive(Clone, Debug)]
pub(crate) struct Aim {
    interval_ms: u64,
    /// Where in an interval flushes aim to arrive: the middle for a counter.
    phase: Duration,
    anchor: Option<Anchor>,
}

/// The store's clock as one reply showed it.
#[derive(Clone, Copy, Debug)]
struct Anchor {
    /// When the reply arrived, on the local timer.
    received: Duration,
    /// The store's time when it ran the flush: interval start plus phase.
    store_time: Duration,
    /// How long the flush took there and back.
    round_trip: Duration,
}

impl Aim {
    /// The aim of a counter: the middle of the interval.
    #[cfg(test)]
    pub(crate) fn new(interval_ms: u64) -> Self {
        Self::for_partition(interval_ms, 0, 1)
    }

    /// The aim of partition `partition` of `partitions`: the partitions of a family aim at
    /// phases spread over the middle half of the interval, so that their flushes reach the
    /// store one after another instead of all at once; one partition alone aims at the middle.
    pub(crate) fn for_partition(interval_ms: u64, partition: u32, partitions: u32) -> Self {
        // A quarter in, plus the partition's share of the middle half, at its own middle:
        // I/4 + I/2 * (p + 1/2) / P, in whole milliseconds.
        // In u128: the longest interval times the most partitions passes u64. The share is
        // under three quarters of the interval, which fits.
        let (p, n) = (u128::from(partition), u128::from(partitions.max(1)));
        let share = u128::from(interval_ms) * (2 * p + 1) / (4 * n);
        Self {
            interval_ms,
            phase: Duration::from_millis(interval_ms / 4 + share as u64),
            anchor: None,
        }
    }

    /// Learns the store's clock from a reply that came at `received` (local time), planning
    /// with the round trip `round_trip` has estimated, this reply's included.
    pub(crate) fn observe(
        &mut self,
        reply: &FlushReply,
        received: Duration,
        round_trip: &RoundTrip,
    ) {
        let start = self.start_of(reply.interval);
        self.anchor = Some(Anchor {
            received,
            store_time: start.saturating_add(reply.phase),
            round_trip: round_trip.planned().unwrap_or_default(),
        });
    }

    /// The store's time when a flush sent at `now` arrives: the anchor's time, half a round
    /// trip for the reply to come back, the time since, and half a round trip for the flush to
    /// get there.
    fn arrival(&self, now: Duration) -> Option<Duration> {
        self.anchor
            .map(|a| a.store_time + a.round_trip + now.saturating_sub(a.received))
    }

    /// Aims `request` at the interval the store will be in when a copy sent at `now` arrives.
    /// The request is copied only when an earlier copy in the air still holds it.
    pub(crate) fn aim(&self, request: &mut Arc<FlushRequest>, now: Duration) {
        let (expect, reach) = (self.expected_interval(now), self.reach());
        if (request.expect, request.reach) != (expect, reach) {
            let request = Arc::make_mut(request);
            request.expect = expect;
            request.reach = reach;
        }
    }

    /// The interval a flush sent at `now` should land in; 0 before any reply, which costs one
    /// wrong-interval reply and teaches the store's clock.
    pub(crate) fn expected_interval(&self, now: Duration) -> u64 {
        self.arrival(now).map_or(0, |at| self.interval_of(at))
    }

    /// How many intervals either side of the expected one a flush sent now may land in: 1,
    /// and one more for each whole interval of the round trip planned with, up to
    /// [`FlushRequest::MAX_REACH`]. A round trip of intervals is a queue, and a queue's length
    /// changes by more than an interval from one flush to the next: aimed within one interval,
    /// a copy that a queue held up more than the last one would come back a wrong interval and
    /// go to the back of the queue again.
    pub(crate) fn reach(&self) -> u64 {
        self.anchor.map_or(1, |a| {
            let intervals = a.round_trip.as_millis() as u64 / self.interval_ms.max(1);
            intervals.saturating_add(1).min(FlushRequest::MAX_REACH)
        })
    }

    /// How long to wait from `now` so that the next flush arrives at the aimed phase (the
    /// middle, for a counter) of an interval this participant has not added to yet
    /// (`last_added` is the last one it has). `None` before any reply.
    ///
    /// Past the aimed phase of such an interval, a flush that would still arrive within a
    /// quarter interval of it, and in the first three quarters, goes at once rather than give
    /// the interval up; later than that it waits for the aimed phase of the next one.
    pub(crate) fn delay_to_aim(&self, now: Duration, last_added: Option<u64>) -> Option<Duration> {
        let arrival = self.arrival(now)?;
        let current = self.interval_of(arrival);
        let aimed = self.phase;
        let target = match last_added {
            Some(n) if n >= current => n + 1,
            _ => {
                let phase = arrival.saturating_sub(self.start_of(current));
                if phase <= aimed {
                    current
                } else if phase < self.at_once_until(aimed) {
                    return Some(Duration::ZERO);
                } else {
                    current + 1
                }
            }
        };
        Some((self.start_of(target) + aimed).saturating_sub(arrival))
    }

    /// How late in an interval, past the aimed phase, a flush still goes at once.
    fn at_once_until(&self, aimed: Duration) -> Duration {
        let interval = Duration::from_millis(self.interval_ms);
        (aimed + interval / 4).min(interval * 3 / 4)
    }

    fn interval_of(&self, at: Duration) -> u64 {
        at.as_millis() as u64 / self.interval_ms
    }

    fn start_of(&self, interval: u64) -> Duration {
        Duration::from_millis(interval.saturating_mul(self.interval_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::reply::Outcome;

    /// An aim and the round trip it plans with, learning from replies as a flush loop does.
    struct Learning {
        aim: Aim,
        round_trip: RoundTrip,
    }

    impl Learning {
        fn new(aim: Aim) -> Self {
            let interval = Duration::from_millis(aim.interval_ms);
            Self {
                aim,
                round_trip: RoundTrip::new(interval, interval),
            }
        }

        /// Learns from `reply`, to a copy sent at `sent` and answered at `received`.
        fn observe(&mut self, reply: &FlushReply, sent: Duration, received: Duration) {
            self.round_trip.sample(received.saturating_sub(sent));
            self.aim.observe(reply, received, &self.round_trip);
        }
    }

    impl std::ops::Deref for Learning {
        type Target = Aim;

        fn deref(&self) -> &Aim {
            &self.aim
        }
    }

    fn reply(interval: u64, phase_ms: u64) -> FlushReply {
        FlushReply::new(
            Outcome::Applied,
            interval,
            Duration::from_millis(phase_ms),
            Some(interval),
        )
    }

    #[test]
    fn knows_nothing_before_a_reply() {
        assert_eq!(Aim::new(100).expected_interval(Duration::from_secs(9)), 0);
    }

    #[test]
    fn carries_the_store_clock_forward_by_local_time_and_the_round_trip() {
        let mut aim = Learning::new(Aim::new(100));
        let ms = Duration::from_millis;
        // Sent at 1000, answered at 1010 (round trip 10): the store was at 7*100 + 40.
        aim.observe(&reply(7, 40), ms(1000), ms(1010));
        assert_eq!(aim.expected_interval(ms(1010)), 7); // arrives at 750
        assert_eq!(aim.expected_interval(ms(1059)), 7); // arrives at 799
        assert_eq!(aim.expected_interval(ms(1060)), 8); // arrives at 800
    }

    #[test]
    fn one_held_up_copy_does_not_throw_the_aim_off() {
        let mut aim = Learning::new(Aim::new(100));
        let ms = Duration::from_millis;
        aim.observe(&reply(7, 40), ms(1000), ms(1010));
        // A copy held two seconds in a queue, then run and answered at once.
        aim.observe(&reply(30, 0), ms(1010), ms(3010));
        // A flush sent now arrives about 10 ms after the store's 3000: in interval 30.
        assert_eq!(aim.expected_interval(ms(3010)), 30);
    }

    #[test]
    fn a_queue_that_fills_and_drains_is_planned_for_with_the_middle_of_its_round_trips() {
        let mut aim = Learning::new(Aim::new(100));
        let ms = Duration::from_millis;
        // Round trips of 100, 300, 200 and 250 ms, each reply from interval 7 at phase 40.
        for (sent, received) in [(0, 100), (0, 300), (0, 200), (50, 300)] {
            aim.observe(&reply(7, 40), ms(sent), ms(received));
        }
        // Planned with 200 ms, the lower median, not the least (100): a flush sent at once
        // arrives at 740 + 200 = 940, in interval 9, not 8.
        assert_eq!(aim.expected_interval(ms(300)), 9);
        assert_eq!(aim.expected_interval(ms(359)), 9);
        assert_eq!(aim.expected_interval(ms(360)), 10);
    }

    #[test]
    fn the_first_quick_reply_after_slow_ones_is_planned_with_at_once() {
        let mut aim = Learning::new(Aim::new(100));
        let ms = Duration::from_millis;
        for _ in 0..3 {
            aim.observe(&reply(7, 40), ms(0), ms(2000));
        }
        aim.observe(&reply(30, 40), ms(3000), ms(3010));
        // Planned with 10 ms: a flush sent at once arrives at 3040 + 10, in interval 30.
        assert_eq!(aim.expected_interval(ms(3010)), 30);
        assert_eq!(aim.expected_interval(ms(3060)), 31);
    }

    #[test]
    fn reaches_one_interval_further_for_each_whole_interval_of_round_trip() {
        let ms = Duration::from_millis;
        let reach = |round_trip: u64| {
            let mut aim = Learning::new(Aim::new(100));
            aim.observe(&reply(7, 40), ms(1000), ms(1000 + round_trip));
            aim.reach()
        };
        assert_eq!(Aim::new(100).reach(), 1);
        assert_eq!(reach(0), 1);
        assert_eq!(reach(99), 1);
        assert_eq!(reach(100), 2);
        assert_eq!(reach(199), 2);
        assert_eq!(reach(200), 3);
        assert_eq!(reach(5_000), FlushRequest::MAX_REACH);
    }

    #[test]
    fn aims_at_the_middle_of_the_next_interval_not_yet_added_to() {
        let mut aim = Learning::new(Aim::new(100));
        let ms = Duration::from_millis;
        assert_eq!(aim.delay_to_aim(ms(0), None), None);
        // Applied in 7 at phase 40, round trip 10: a flush sent now arrives at 750.
        aim.observe(&reply(7, 40), ms(1000), ms(1010));
        assert_eq!(aim.delay_to_aim(ms(1010), Some(7)), Some(ms(100))); // arrives at 850
        // Nothing added to 7 yet, and 750 is just past its middle: go at once.
        assert_eq!(aim.delay_to_aim(ms(1010), Some(6)), Some(ms(0)));
        // Late in 7 (arrival 780): wait for the middle of 8.
        assert_eq!(aim.delay_to_aim(ms(1040), None), Some(ms(70)));
        // Early in 7 (applied at phase 20, so arriving at 730): wait for the middle.
        aim.observe(&reply(7, 20), ms(1000), ms(1010));
        assert_eq!(aim.delay_to_aim(ms(1010), None), Some(ms(20)));
    }

    #[test]
    fn a_flush_late_in_an_interval_not_added_to_waits_for_the_next() {
        let mut aim = Learning::new(Aim::new(100));
        let ms = Duration::from_millis;
        // Applied in 7 at phase 40, round trip 10: a flush sent at 1010 + d arrives at 750 + d.
        aim.observe(&reply(7, 40), ms(1000), ms(1010));
        // Added to 6, not 7: up to a quarter past 7's middle a flush still goes at once...
        assert_eq!(aim.delay_to_aim(ms(1034), Some(6)), Some(ms(0))); // arrives at 774
        // ...but from then on it waits for the middle of 8, however long ago the last was.
        assert_eq!(aim.delay_to_aim(ms(1035), Some(6)), Some(ms(75))); // arrives at 775
        assert_eq!(aim.delay_to_aim(ms(1040), Some(3)), Some(ms(70)));
        assert_eq!(aim.delay_to_aim(ms(1040), None), Some(ms(70)));
    }

    #[test]
    fn a_partition_goes_at_once_only_within_a_quarter_of_its_phase_and_the_first_three() {
        let ms = Duration::from_millis;
        // Arriving at `phase` of interval 7, with nothing added to it yet.
        let delay = |partition: u32, phase: u64| {
            let mut aim = Learning::new(Aim::for_partition(1000, partition, 4));
            aim.observe(&reply(7, phase), Duration::ZERO, Duration::ZERO);
            aim.delay_to_aim(Duration::ZERO, Some(6)).unwrap()
        };
        // Partition 0 aims at 312: at once up to 562, a quarter past it.
        assert_eq!(delay(0, 561), ms(0));
        assert_eq!(delay(0, 562), ms(1000 - 562 + 312));
        // Partition 3 aims at 687: at once only up to 750, three quarters in.
        assert_eq!(delay(3, 749), ms(0));
        assert_eq!(delay(3, 750), ms(1000 - 750 + 687));
    }

    #[test]
    fn partitions_aim_at_phases_spread_over_the_middle_half() {
        let phases: Vec<u64> = (0..4)
            .map(|p| Aim::for_partition(1000, p, 4).phase.as_millis() as u64)
            .collect();
        assert_eq!(phases, [312, 437, 562, 687]);
        assert_eq!(Aim::new(1000).phase, Duration::from_millis(500));
        // Each aims its flush at its own phase of the next interval.
        let mut aim = Learning::new(Aim::for_partition(1000, 0, 4));
        aim.observe(&reply(7, 600), Duration::ZERO, Duration::ZERO);
        assert_eq!(
            aim.delay_to_aim(Duration::ZERO, Some(7)),
            Some(Duration::from_millis(712))
        );
    }

    /// The longest interval with the most partitions: the share of the middle half passes
    /// u64 on the way, not in the end.
    #[test]
    fn the_longest_interval_spreads_the_most_partitions_over_its_middle_half() {
        let longest = FlushRequest::MAX_INTERVAL_MS;
        for (partition, partitions) in [(0, 1), (4095, 4096), (65_535, 65_536)] {
            let phase = Aim::for_partition(longest, partition, partitions)
                .phase
                .as_millis() as u64;
            assert!(
                (longest / 4..=longest / 4 * 3 + 1).contains(&phase),
                "partition {partition} of {partitions}: {phase}"
            );
        }
    }
}
