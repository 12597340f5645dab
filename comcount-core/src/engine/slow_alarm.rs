//! Telling when the store's round trip stays above a safe share of the interval, and when it
//! comes back under it: once each time the situation changes.
//!
//! Above half an interval, a participant can no longer aim a flush at every interval, and the
//! group's total it learns grows old before it arrives. A copy still unanswered after half an
//! interval is evidence as good as a slow reply, so a store that answers nothing at all is
//! reported as well as one that answers late.
//!
//! A family's partitions share one alarm, and each may reach another shard of a cluster: a
//! quick answer to one partition does not count as calm while another has waited past the
//! threshold for one of its own.
//!
//! Once raised, the alarm comes down only after the round trip has stayed well under the
//! threshold for a whole interval: a store that is slow in bursts (a queue that fills and
//! drains) would otherwise raise and clear it with every other reply. An alarm raised again
//! soon after it came down is damped, as routers damp a flapping route: each time, the round
//! trip must then stay calm twice as long before it comes down, up to [`MAX_HOLD`] intervals,
//! and stay slow longer before it is raised again, up to four intervals. Counters that take
//! turns at a store find it quick after each rest and slow after each pair, and would
//! otherwise say so every few intervals.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::diagnostics::{Event, Reporter};

/// The longest the round trip must stay calm, in intervals, before the alarm comes down.
pub(crate) const MAX_HOLD: u32 = 64;

/// A raise this many holds or fewer after the alarm came down is a flap: the next hold doubles.
const FLAP_WITHIN_HOLDS: u32 = 8;

/// The most the patience before a raise is multiplied by, while the alarm flaps.
const MAX_PATIENCE_HOLDS: u32 = 8;

/// One alarm for all the partitions of a family, which share a store: the store is reported
/// slow once, not once per partition.
#[derive(Debug)]
pub(crate) struct SharedAlarm {
    alarm: Mutex<SlowAlarm>,
    /// How many partitions share it.
    partitions: u32,
}

impl SharedAlarm {
    pub(crate) fn new(interval: Duration, partitions: u32) -> Self {
        Self {
            alarm: Mutex::new(SlowAlarm::new(interval)),
            partitions,
        }
    }

    fn lock(&self) -> MutexGuard<'_, SlowAlarm> {
        self.alarm
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// See [`SlowAlarm::answered`].
    pub(crate) fn answered(
        &self,
        partition: u32,
        sent: Duration,
        now: Duration,
        report: &Reporter,
    ) {
        self.lock().answered(partition, sent, now, report);
    }

    /// See [`SlowAlarm::awaiting`]; only for a family of more than one partition, whose
    /// others it tells: a counter has none to tell.
    pub(crate) fn awaiting(&self, partition: u32, oldest: Option<Duration>) {
        if self.partitions > 1 {
            self.lock().awaiting(partition, oldest);
        }
    }

    /// See [`SlowAlarm::waiting`].
    pub(crate) fn waiting(&self, sent: Duration, now: Duration, report: &Reporter) {
        self.lock().waiting(sent, now, report);
    }

    /// See [`SlowAlarm::next_check`].
    pub(crate) fn next_check(&self, sent: Duration) -> Option<Duration> {
        self.lock().next_check(sent)
    }
}

#[derive(Debug)]
pub(crate) struct SlowAlarm {
    interval: Duration,
    /// When the round trip was first seen above the threshold, since it was last seen fine.
    since: Option<Duration>,
    /// The longest round trip seen since then: a reply's, or an unanswered copy's age.
    worst: Duration,
    raised: bool,
    /// While raised: when the replies began to come well under the threshold, with none
    /// slower since.
    calm_since: Option<Duration>,
    /// How many intervals the replies must stay calm before the alarm comes down.
    hold: u32,
    /// When it last came down.
    cleared_at: Option<Duration>,
    /// For each partition of a family that told it, when its oldest copy still unanswered was
    /// sent (`None`: none is).
    awaited: Vec<Option<Duration>>,
    /// The same, oldest first, so that an answer finds the longest wait of another partition
    /// in a step or two however many partitions the family has.
    by_age: BTreeSet<(Duration, u32)>,
}

impl SlowAlarm {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            since: None,
            worst: Duration::ZERO,
            raised: false,
            calm_since: None,
            hold: 1,
            cleared_at: None,
            awaited: Vec::new(),
            by_age: BTreeSet::new(),
        }
    }

    /// Above this, the round trip is too slow for the interval.
    fn threshold(&self) -> Duration {
        self.interval / 2
    }

    /// How long the round trip must stay slow, from `since`, before it is reported: half an
    /// interval, and longer while the alarm flaps.
    fn patience(&self, since: Duration) -> Duration {
        if self.flapping(since) {
            self.interval / 2 * self.hold.min(MAX_PATIENCE_HOLDS)
        } else {
            self.interval / 2
        }
    }

    /// Whether slowness seen at `at` comes soon after the alarm came down.
    fn flapping(&self, at: Duration) -> bool {
        self.cleared_at.is_some_and(|cleared| {
            at.saturating_sub(cleared) <= self.interval * self.hold * FLAP_WITHIN_HOLDS
        })
    }

    /// Under this, a round trip is well within the threshold: a round trip hovering at the
    /// threshold neither raises the alarm nor clears it.
    fn calm(&self) -> Duration {
        self.interval * 3 / 8
    }

    /// A copy of `partition`'s sent at `sent` was answered at `now`. A quick answer counts as
    /// calm only while no other partition has waited past the threshold for one of its own:
    /// the partitions of a family over a cluster each reach one shard, and a shard that hangs
    /// is not made well by the others' answers.
    pub(crate) fn answered(
        &mut self,
        partition: u32,
        sent: Duration,
        now: Duration,
        report: &Reporter,
    ) {
        let round_trip = now.saturating_sub(sent);
        if round_trip > self.threshold() {
            self.evidence(sent, round_trip);
            self.check(now, report);
        } else if round_trip < self.calm() && !self.another_waits_long(partition, now) {
            let calm_since = *self.calm_since.get_or_insert(now);
            if self.raised && now.saturating_sub(calm_since) < self.interval * self.hold {
                return;
            }
            if self.raised {
                report.emit(Event::RoundTripNormal {
                    round_trip,
                    interval: self.interval,
                });
                self.cleared_at = Some(now);
            }
            self.raised = false;
            self.since = None;
            self.worst = Duration::ZERO;
            self.calm_since = None;
        } else {
            self.calm_since = None;
            if !self.raised && !self.another_waits_long(partition, now) {
                // Not above the threshold: the slowness seen before did not last.
                self.since = None;
                self.worst = Duration::ZERO;
            }
        }
    }

    /// Notes when `partition`'s oldest copy still unanswered was sent (`None`: none is).
    pub(crate) fn awaiting(&mut self, partition: u32, oldest: Option<Duration>) {
        let i = partition as usize;
        if self.awaited.len() <= i {
            if oldest.is_none() {
                return;
            }
            self.awaited.resize(i + 1, None);
        }
        if let Some(before) = std::mem::replace(&mut self.awaited[i], oldest) {
            self.by_age.remove(&(before, partition));
        }
        if let Some(sent) = oldest {
            self.by_age.insert((sent, partition));
        }
    }

    /// Whether a partition other than `partition` has waited past the threshold at `now` for a
    /// copy still unanswered.
    fn another_waits_long(&self, partition: u32, now: Duration) -> bool {
        self.by_age
            .iter()
            .find(|(_, other)| *other != partition)
            .is_some_and(|(sent, _)| now.saturating_sub(*sent) > self.threshold())
    }

    /// A copy sent at `sent` is still unanswered at `now`. It raises the alarm only once it has
    /// waited past the threshold itself: slowness seen before, by a reply that came, is not
    /// evidence that the round trip is still slow.
    pub(crate) fn waiting(&mut self, sent: Duration, now: Duration, report: &Reporter) {
        let age = now.saturating_sub(sent);
        if age > self.threshold() {
            self.evidence(sent, age);
            self.check(now, report);
        }
    }

    /// When to call [`waiting`](SlowAlarm::waiting) next, for an unanswered copy sent at
    /// `sent`: once it has waited past the threshold, and the slowness seen so far has lasted
    /// the patience; `None` while the alarm is raised.
    pub(crate) fn next_check(&self, sent: Duration) -> Option<Duration> {
        if self.raised {
            return None;
        }
        let past_threshold = sent + self.threshold() + Duration::from_millis(1);
        Some(match self.since {
            Some(since) => (since + self.patience(since)).max(past_threshold),
            None => past_threshold,
        })
    }

    fn evidence(&mut self, sent: Duration, round_trip: Duration) {
        self.calm_since = None;
        let began = sent + self.threshold();
        self.since = Some(self.since.map_or(began, |since| since.min(began)));
        self.worst = self.worst.max(round_trip);
    }

    fn check(&mut self, now: Duration, report: &Reporter) {
        let Some(since) = self.since else { return };
        if !self.raised && now.saturating_sub(since) >= self.patience(since) {
            self.raised = true;
            self.hold = if self.flapping(since) {
                (self.hold * 2).min(MAX_HOLD)
            } else {
                1
            };
            report.emit(Event::RoundTripSlow {
                round_trip: self.worst,
                interval: self.interval,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::Recorder;
    use std::sync::Arc;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn reporter() -> (Reporter, Recorder) {
        let recorder = Recorder::new();
        (Reporter::new("c", Arc::new(recorder.clone())), recorder)
    }

    #[test]
    fn fast_replies_raise_nothing() {
        let (report, recorder) = reporter();
        let mut alarm = SlowAlarm::new(ms(100));
        for i in 0..20 {
            alarm.answered(0, ms(i * 100), ms(i * 100 + 40), &report);
        }
        assert!(recorder.records().is_empty());
    }

    #[test]
    fn an_unanswered_copy_raises_it_within_an_interval_and_only_once() {
        let (report, recorder) = reporter();
        let mut alarm = SlowAlarm::new(ms(100));
        assert_eq!(alarm.next_check(ms(0)), Some(ms(51)));
        alarm.waiting(ms(0), ms(51), &report);
        assert!(recorder.records().is_empty());
        assert_eq!(alarm.next_check(ms(0)), Some(ms(100)));
        alarm.waiting(ms(0), ms(100), &report);
        let raised = recorder.with_message("round trip slow");
        assert_eq!(raised.len(), 1);
        assert_eq!(raised[0].attribute("round_trip_ms"), Some("100"));
        assert_eq!(raised[0].attribute("interval_ms"), Some("100"));
        alarm.answered(0, ms(0), ms(300), &report);
        alarm.waiting(ms(300), ms(700), &report);
        assert_eq!(alarm.next_check(ms(300)), None);
        assert_eq!(recorder.records().len(), 1);
    }

    #[test]
    fn another_partitions_long_wait_keeps_quick_answers_from_calming_it() {
        let (report, recorder) = reporter();
        let mut alarm = SlowAlarm::new(ms(100));
        // Partition 1 sends at 0 and hears nothing; the alarm is raised at 100.
        alarm.awaiting(1, Some(ms(0)));
        alarm.waiting(ms(0), ms(51), &report);
        alarm.waiting(ms(0), ms(100), &report);
        assert_eq!(recorder.with_message("round trip slow").len(), 1);
        // Partition 0's quick answers do not bring it down while partition 1 waits.
        for t in (100..1_000).step_by(50) {
            alarm.answered(0, ms(t), ms(t + 10), &report);
        }
        assert!(recorder.with_message("round trip normal").is_empty());
        // Partition 1's copy settles (given up): they do, after a calm interval.
        alarm.awaiting(1, None);
        for t in (1_000..1_200).step_by(50) {
            alarm.answered(0, ms(t), ms(t + 10), &report);
        }
        assert_eq!(recorder.with_message("round trip normal").len(), 1);
        // A partition's own unanswered copy is not held against its own answers.
        alarm.awaiting(0, Some(ms(1_200)));
        assert!(!alarm.another_waits_long(0, ms(2_000)));
        assert!(alarm.another_waits_long(1, ms(2_000)));
    }

    #[test]
    fn a_slow_reply_among_replies_under_the_threshold_is_not_reported() {
        let (report, recorder) = reporter();
        let mut alarm = SlowAlarm::new(ms(100));
        alarm.answered(0, ms(0), ms(60), &report);
        // Every later reply takes 45 ms: under the threshold, though not calm.
        for t in (100..3_000).step_by(100) {
            alarm.answered(0, ms(t), ms(t + 45), &report);
            if let Some(at) = alarm.next_check(ms(t + 50)) {
                alarm.waiting(ms(t + 50), at.min(ms(t + 99)), &report);
            }
        }
        assert!(recorder.records().is_empty(), "{:?}", recorder.records());
    }

    #[test]
    fn a_single_slow_reply_is_not_reported() {
        let (report, recorder) = reporter();
        let mut alarm = SlowAlarm::new(ms(100));
        alarm.answered(0, ms(0), ms(60), &report);
        alarm.answered(0, ms(100), ms(110), &report);
        alarm.answered(0, ms(200), ms(210), &report);
        assert!(recorder.records().is_empty());
    }

    #[test]
    fn recovery_is_reported_once_and_a_new_slowdown_again() {
        let (report, recorder) = reporter();
        let mut alarm = SlowAlarm::new(ms(100));
        alarm.answered(0, ms(0), ms(150), &report);
        alarm.answered(0, ms(150), ms(300), &report);
        // Hovering just under the threshold changes nothing.
        alarm.answered(0, ms(300), ms(345), &report);
        alarm.answered(0, ms(400), ms(410), &report);
        alarm.answered(0, ms(500), ms(510), &report);
        alarm.answered(0, ms(600), ms(800), &report);
        alarm.answered(0, ms(800), ms(1000), &report);
        assert_eq!(
            recorder.messages(),
            ["round trip slow", "round trip normal", "round trip slow"]
        );
    }

    #[test]
    fn a_store_slow_in_bursts_stays_reported_until_fast_for_an_interval() {
        let (report, recorder) = reporter();
        let mut alarm = SlowAlarm::new(ms(100));
        alarm.answered(0, ms(0), ms(150), &report);
        alarm.answered(0, ms(150), ms(300), &report);
        // A queue that fills and drains: every other reply is fast.
        for i in 0..10 {
            let t = 300 + i * 200;
            alarm.answered(0, ms(t), ms(t + 10), &report);
            alarm.answered(0, ms(t + 20), ms(t + 200), &report);
        }
        assert_eq!(recorder.messages(), ["round trip slow"]);
        // Fast for a whole interval: recovered.
        for t in [2300, 2400, 2500] {
            alarm.answered(0, ms(t), ms(t + 10), &report);
        }
        assert_eq!(
            recorder.messages(),
            ["round trip slow", "round trip normal"]
        );
    }

    #[test]
    fn a_round_trip_of_exactly_the_threshold_is_not_slow() {
        let (report, recorder) = reporter();
        let mut alarm = SlowAlarm::new(ms(100));
        for i in 0..10 {
            alarm.answered(0, ms(i * 100), ms(i * 100 + 50), &report);
        }
        assert!(recorder.records().is_empty());
        // Nor is a copy unanswered for exactly that long: evidence starts past it.
        alarm.waiting(ms(1000), ms(1050), &report);
        alarm.answered(0, ms(1000), ms(1050), &report);
        alarm.answered(0, ms(1100), ms(1160), &report);
        assert!(recorder.records().is_empty());
    }

    #[test]
    fn only_replies_well_under_the_threshold_bring_it_down() {
        let (report, recorder) = reporter();
        let mut alarm = SlowAlarm::new(ms(80));
        alarm.answered(0, ms(0), ms(120), &report);
        alarm.answered(0, ms(120), ms(240), &report);
        assert_eq!(recorder.messages(), ["round trip slow"]);
        // Hovering just under the threshold, or at three eighths of the interval exactly,
        // for more than an interval: still slow.
        for (sent, round_trip) in [(240, 35), (320, 35), (400, 30), (480, 30), (560, 30)] {
            alarm.answered(0, ms(sent), ms(sent + round_trip), &report);
        }
        assert_eq!(recorder.messages(), ["round trip slow"]);
        alarm.answered(0, ms(640), ms(650), &report);
        alarm.answered(0, ms(720), ms(730), &report);
        assert_eq!(
            recorder.messages(),
            ["round trip slow", "round trip normal"]
        );
    }

    #[test]
    fn a_store_that_keeps_flapping_is_reported_ever_less_often() {
        let (report, recorder) = reporter();
        let mut alarm = SlowAlarm::new(ms(100));
        // Slow for two replies, then quick, over and over: each clear needs twice the calm
        // of the one before.
        let mut t = 0;
        let mut calm_needed = Vec::new();
        for _ in 0..4 {
            alarm.answered(0, ms(t), ms(t + 150), &report);
            alarm.answered(0, ms(t + 150), ms(t + 300), &report);
            t += 300;
            let calm_from = t;
            let before = recorder.with_message("round trip normal").len();
            while recorder.with_message("round trip normal").len() == before {
                alarm.answered(0, ms(t), ms(t + 10), &report);
                t += 100;
            }
            calm_needed.push(t - 100 + 10 - calm_from);
        }
        assert_eq!(calm_needed, [110, 210, 410, 810]);
        assert_eq!(recorder.with_message("round trip slow").len(), 4);
        // Raising it again now takes four intervals of slowness, not half of one.
        alarm.answered(0, ms(t), ms(t + 150), &report);
        alarm.answered(0, ms(t + 150), ms(t + 300), &report);
        assert_eq!(alarm.next_check(ms(t + 300)), Some(ms(t + 50 + 400)));
        alarm.answered(0, ms(t + 300), ms(t + 310), &report);
        t += 400;
        assert_eq!(recorder.with_message("round trip slow").len(), 4);
        // Long after the last clear, a new slowdown starts over at one interval.
        t += 100 * 64 * 8;
        alarm.answered(0, ms(t), ms(t + 150), &report);
        alarm.answered(0, ms(t + 150), ms(t + 300), &report);
        t += 300;
        alarm.answered(0, ms(t), ms(t + 10), &report);
        alarm.answered(0, ms(t + 100), ms(t + 110), &report);
        alarm.answered(0, ms(t + 200), ms(t + 210), &report);
        assert_eq!(recorder.with_message("round trip normal").len(), 5);
    }
}
