//! Taking turns at a store that is asked for more flushes than it serves.
//!
//! A lone participant learns its group's total only from two flushes in consecutive
//! intervals: the reply to the second carries the first's interval. When every counter on a
//! store keeps a flush in its queue, each flush waits as long as the whole queue takes, and
//! once that is longer than an interval no counter adds to two in a row: the store is busy,
//! and no total is known anywhere. Counters that rest a few intervals after a pair keep the
//! queue short for the others, and each pair then lands in consecutive intervals.
//!
//! A single counter's reply also carries its own interval's total
//! ([`FlushReply::landed_totals`](crate::FlushReply::landed_totals)), which it takes once that
//! interval has ended: each of its flushes brings a total, and it never rests. The turns are
//! for a family's partitions, and for stores that do not report that total.
//!
//! The signal is the queue, not the round trip: the round trip less the least one seen
//! lately, which is the path's and the store's own time. A store that is merely far away
//! (every reply 150 ms late) queues nothing, and its counters never rest; nor does one whose
//! replies bring totals, which others in its group add to the intervals it skips. The rest
//! grows by two intervals each time [`DRY`] flushes in a row bring no total and the last met a
//! long queue, and shrinks by one with each reply that brings one through a short queue (a
//! pair that lands through a long one says the counter's turns work, not that the queue is
//! gone, and resting less would lengthen it again); each rest is drawn at
//! random from its upper half, so that counters that backed off together do not come back
//! together.
//!
//! A counter rests only after the second flush of a pair. The first goes for the next interval
//! at once, even after flushes that brought nothing: a counter that rested after each of those
//! would never add to two intervals in a row, and behind a queue that stays long it would
//! never learn a total at all. After a pair that brought a total it rests at least until that
//! total would go stale: a flush sooner lands after an interval it skipped, brings none, and
//! only ends the one it has.
//!
//! A store that became farther away for good (a failover to a distant replica) would look like
//! a queue for as long as the least round trip remembers the path before: two windows, some
//! 250 intervals at two or three intervals away, in which a lone counter rests, opens no lanes
//! and knows no total. A run of [`SHIFT_AFTER`] round trips alike, all longer than those
//! before, is taken for the path's new time instead.

use std::ops::RangeInclusive;
use std::time::Duration;

/// The longest rest, in intervals, less the whole intervals of the last round trip: resting
/// adds no more than that to a counter's wait for its next flush, however long the queue.
/// Where the queue is too long for resting to shorten it, resting would only add to the wait.
pub(crate) const MAX_REST: u32 = 6;

/// How many round trips one window of the least-round-trip estimate spans. The least is kept
/// over the last two windows, so a path that became slower for good is learnt within two, and
/// within [`SHIFT_AFTER`] round trips if they are alike.
const WINDOW: u32 = 32;

/// How many round trips must be seen before their spread is told.
const SPREAD_AFTER: u32 = 8;

/// How many of the longest round trips of a window say nothing of a queue: copies held up
/// once, as the first two are, which connect and load the script.
const HELD_UP: usize = 2;

/// How many counted flushes in a row must bring no total before a counter rests longer: under
/// a queue that lets it add to consecutive intervals now and then, it learns enough without,
/// and a store near its capacity, whose queue is long only now and then, is not left idle.
const DRY: u32 = 3;

/// How many round trips in a row, within a quarter interval of each other, longer than all
/// before them but the [`HELD_UP`] longest and more than a quarter interval above the least,
/// show that the path itself became slower.
const SHIFT_AFTER: u32 = 8;

#[derive(Debug)]
pub(crate) struct Turns {
    interval: Duration,
    /// The least round trip in the current window, and in the one before it.
    least: [Option<Duration>; 2],
    /// The [`HELD_UP`] + 1 longest in the current window, longest first, and in the one
    /// before it.
    most: [[Duration; HELD_UP + 1]; 2],
    /// Round trips taken in the current window.
    taken: u32,
    /// The longest queue seen since the last flush was counted.
    queue: Duration,
    /// How many intervals to rest after a pair, for now.
    rest: u32,
    /// How many counted flushes in a row brought no total.
    dry: u32,
    /// Whether the last flush counted was the first of a pair, and went without a rest.
    pairing: bool,
    /// The last round trip taken.
    last: Duration,
    /// The last round trips in a row that lie within a quarter interval of each other.
    run: Run,
}

/// Round trips in a row that lie within a quarter interval of each other.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    least: Duration,
    most: Duration,
    len: u32,
    /// The longest round trip seen before the run began, the [`HELD_UP`] longest left out.
    above: Duration,
}

impl Turns {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            least: [None; 2],
            most: [[Duration::ZERO; HELD_UP + 1]; 2],
            taken: 0,
            queue: Duration::ZERO,
            rest: 0,
            dry: 0,
            pairing: false,
            last: Duration::ZERO,
            run: Run::default(),
        }
    }

    /// Takes the round trip of one answered copy.
    pub(crate) fn observe(&mut self, round_trip: Duration) {
        let longest_before = self.longest();
        if self.taken == WINDOW {
            self.least = [None, self.least[0]];
            self.most = [[Duration::ZERO; HELD_UP + 1], self.most[0]];
            self.taken = 0;
        }
        self.taken += 1;
        self.last = round_trip;
        let current = &mut self.least[0];
        *current = Some(current.map_or(round_trip, |least| least.min(round_trip)));
        let mut carried = round_trip;
        for longest in &mut self.most[0] {
            if carried > *longest {
                carried = std::mem::replace(longest, carried);
            }
        }
        self.follow_run(round_trip, longest_before);
        self.queue = self.queue.max(self.queued(round_trip));
    }

    /// Extends the run of round trips alike with `round_trip`, or starts a new one above
    /// `longest_before`. A run long enough, above all that was seen before it (the
    /// [`HELD_UP`] longest left out), is the path's new time: the store became farther away,
    /// and what came before says nothing of a queue now. A queue's round trips, which fill and
    /// drain, seldom stay alike so long, still less above all of its own before.
    fn follow_run(&mut self, round_trip: Duration, longest_before: Duration) {
        let run = &mut self.run;
        let (least, most) = (run.least.min(round_trip), run.most.max(round_trip));
        if run.len > 0 && most - least <= self.interval / 4 {
            *run = Run {
                least,
                most,
                len: run.len + 1,
                ..*run
            };
        } else {
            *run = Run {
                least: round_trip,
                most: round_trip,
                len: 1,
                above: longest_before,
            };
        }
        let run = self.run;
        if run.len >= SHIFT_AFTER
            && run.least > run.above
            && self.queued(run.least) > self.interval / 4
        {
            self.least = [Some(run.least), None];
            self.most = [[run.most; HELD_UP + 1], [Duration::ZERO; HELD_UP + 1]];
            self.taken = run.len.min(WINDOW);
        }
    }

    /// The longest round trip seen lately, the [`HELD_UP`] longest left out.
    fn longest(&self) -> Duration {
        let mut longest = [Duration::ZERO; 2 * (HELD_UP + 1)];
        longest.copy_from_slice(self.most.as_flattened());
        longest.sort_unstable_by(|a, b| b.cmp(a));
        longest[HELD_UP]
    }

    /// How far apart the round trips seen lately are, the [`HELD_UP`] longest left out:
    /// little on a path that is merely long, and more behind a queue, which fills and drains.
    /// `None` until [`SPREAD_AFTER`] were seen: a few round trips in a row alike say little.
    pub(crate) fn spread(&self) -> Option<Duration> {
        let seen = self.taken + if self.least[1].is_some() { WINDOW } else { 0 };
        if seen < SPREAD_AFTER {
            return None;
        }
        let most = self.longest();
        let least = self.least.iter().flatten().min().copied();
        Some(most.saturating_sub(least.unwrap_or(most)))
    }

    /// How long a copy that took `round_trip` queued: how much longer it took than the least
    /// round trip seen lately.
    pub(crate) fn queued(&self, round_trip: Duration) -> Duration {
        let least = self.least.iter().flatten().min().copied();
        round_trip.saturating_sub(least.unwrap_or_default())
    }

    /// How many intervals to rest after a flush was counted: `learnt` when its reply brought
    /// a group total, `after_pair` when the counter had added to the interval before too.
    /// `draw` picks a number from the range it is given.
    pub(crate) fn after_counted(
        &mut self,
        learnt: bool,
        after_pair: bool,
        draw: impl FnOnce(RangeInclusive<u32>) -> u32,
    ) -> u32 {
        let queue = std::mem::take(&mut self.queue);
        let second = std::mem::take(&mut self.pairing);
        if learnt {
            // Once a pair (or, in a group, another participant's part) brings a total.
            self.dry = 0;
            if queue <= self.interval / 2 {
                self.rest = self.rest.saturating_sub(1);
            }
        } else {
            self.dry = self.dry.saturating_add(1);
            if self.dry >= DRY && queue > self.interval / 2 {
                // Flushes in a row learnt nothing, and the queue held them up.
                self.rest = (self.rest + 2).min(MAX_REST);
            }
            if !after_pair && !second {
                // The first of a pair: the next flush goes for the next interval.
                self.pairing = true;
                return 0;
            }
        }
        let waited = (self.last.as_nanos() / self.interval.as_nanos().max(1)) as u32;
        let most = self.rest.min(MAX_REST.saturating_sub(waited));
        // A total just learnt stays fresh for two intervals and the round trip. After a rest,
        // the next flush lands after an interval this counter skipped and brings no total:
        // landing before this one goes stale, it only ends it sooner.
        let least = if learnt { (1 + waited).min(most) } else { 0 };
        if most == 0 {
            0
        } else {
            draw(most.div_ceil(2).max(least)..=most)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The largest rest the range allows, for tests that follow the rule's bound.
    fn most(range: RangeInclusive<u32>) -> u32 {
        *range.end()
    }

    /// The range a rest is drawn from after a flush, and the rest when the least is drawn.
    fn least_drawn(
        turns: &mut Turns,
        learnt: bool,
        after_pair: bool,
    ) -> (RangeInclusive<u32>, u32) {
        let mut asked = None;
        let rest = turns.after_counted(learnt, after_pair, |range| {
            asked = Some(range.clone());
            *range.start()
        });
        (asked.expect("a rest drawn"), rest)
    }

    /// The rests after `n` flushes in a row that bring no total, each after `round_trip`.
    fn dry_rests(turns: &mut Turns, round_trip: Duration, n: u32) -> Vec<u32> {
        (0..n)
            .map(|_| {
                turns.observe(round_trip);
                turns.after_counted(false, false, most)
            })
            .collect()
    }

    /// The rests after `n` flushes in a row that bring no total, each after `round_trip`
    /// behind a queue that drains now and then: before each reply, another copy comes back in
    /// `least`, having found the queue empty. (Round trips alike, many in a row, are a path's,
    /// not a queue's.)
    fn queue_rests(turns: &mut Turns, least: Duration, round_trip: Duration, n: u32) -> Vec<u32> {
        (0..n)
            .map(|_| {
                turns.observe(least);
                turns.observe(round_trip);
                turns.after_counted(false, false, most)
            })
            .collect()
    }

    #[test]
    fn a_far_store_with_no_queue_never_rests() {
        let mut turns = Turns::new(ms(100));
        for i in 0..200 {
            turns.observe(ms(150 + i % 3));
            let second = i % 2 == 1;
            assert_eq!(turns.after_counted(second, second, most), 0);
        }
    }

    #[test]
    fn a_queue_longer_than_half_an_interval_lengthens_the_rest_up_to_the_most() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(2));
        let rests = queue_rests(&mut turns, ms(2), ms(80), DRY + 3);
        // A few flushes without a total are no reason to rest yet: a pair may miss now and
        // then. Then each pair, missed again, adds two intervals, and the first flush of each
        // still goes at once.
        assert_eq!(rests, [0, 0, 0, 4, 0, MAX_REST]);
    }

    #[test]
    fn a_queue_of_exactly_half_an_interval_is_not_long() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(2));
        let rests = queue_rests(&mut turns, ms(2), ms(52), DRY + 2);
        assert_eq!(rests, vec![0; DRY as usize + 2]);
        assert_eq!(queue_rests(&mut turns, ms(2), ms(53), 1), [2]);
    }

    #[test]
    fn replies_that_bring_a_total_behind_a_short_queue_shorten_the_rest_one_interval_each() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(2));
        let rests = dry_rests(&mut turns, ms(90), DRY + 1);
        assert_eq!(rests, [0, 0, 0, 4]);
        // The first of a pair goes for the next interval at once, with or without a queue
        // under half an interval, and the second rests.
        turns.observe(ms(40));
        assert_eq!(turns.after_counted(false, false, most), 0);
        turns.observe(ms(3));
        assert_eq!(turns.after_counted(true, true, most), 3);
        for rest in [2, 1, 0] {
            turns.observe(ms(3));
            assert_eq!(turns.after_counted(false, false, most), 0);
            turns.observe(ms(3));
            assert_eq!(turns.after_counted(true, true, most), rest);
        }
    }

    #[test]
    fn a_total_that_came_through_a_long_queue_keeps_the_rest() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(2));
        let rests = queue_rests(&mut turns, ms(2), ms(80), DRY + 1);
        assert_eq!(rests.last(), Some(&4));
        // A pair landed, but the queue is as long as before: resting less would lengthen it.
        turns.observe(ms(80));
        assert_eq!(turns.after_counted(true, true, most), 4);
        // Once the queue is short, each total shortens the rest by one interval.
        turns.observe(ms(30));
        assert_eq!(turns.after_counted(true, true, most), 3);
    }

    #[test]
    fn a_counter_that_rests_still_sends_the_second_flush_of_each_pair_at_once() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(2));
        // Pairs that miss behind a queue: the rest grows to the most, but only the second
        // flush of each pair rests. Resting after the first too, a counter would never add to
        // two intervals in a row, and never learn a total while the queue stays long.
        let rests = queue_rests(&mut turns, ms(2), ms(80), 10);
        assert_eq!(rests, [0, 0, 0, 4, 0, 6, 0, 6, 0, 6]);
    }

    #[test]
    fn after_a_pair_that_brings_a_total_the_counter_rests_until_the_total_would_go_stale() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(2));
        // A rest of two intervals, the round trip one and a fifth.
        let rests = queue_rests(&mut turns, ms(2), ms(120), DRY);
        assert_eq!(rests, [0, 0, 0]);
        // The pair lands and brings a total, fresh for two intervals and the round trip. A
        // flush one interval later than the next would land after an interval this counter
        // skipped, bring no total and end this one an interval early: the least rest is the
        // round trip's whole intervals and one more.
        turns.observe(ms(120));
        assert_eq!(least_drawn(&mut turns, true, true), (2..=2, 2));
        // Never past the most, less the round trip.
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(2));
        queue_rests(&mut turns, ms(2), ms(420), DRY + 1);
        turns.observe(ms(420));
        assert_eq!(least_drawn(&mut turns, true, true), (2..=2, 2));
    }

    #[test]
    fn a_counter_whose_group_brings_totals_never_rests_however_long_the_queue() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(1));
        for _ in 0..20 {
            turns.observe(ms(250));
            assert_eq!(turns.after_counted(true, false, most), 0);
        }
    }

    #[test]
    fn a_rest_is_drawn_from_the_upper_half_of_the_current_one() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(1));
        // Behind a queue of two intervals and a half, which leaves room for the whole rest.
        for _ in 0..DRY {
            turns.observe(ms(250));
            turns.after_counted(false, false, most);
        }
        turns.observe(ms(250));
        assert_eq!(least_drawn(&mut turns, false, false), (2..=4, 2));
    }

    #[test]
    fn a_path_that_became_slower_for_good_is_learnt_within_two_windows() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(1));
        for _ in 0..2 * WINDOW {
            turns.observe(ms(120));
            turns.after_counted(false, false, most);
        }
        // The rest it took meanwhile winds down, one interval a reply with a total.
        for _ in 0..MAX_REST {
            turns.observe(ms(120));
            turns.after_counted(true, true, most);
        }
        assert_eq!(
            dry_rests(&mut turns, ms(120), DRY - 1),
            vec![0; DRY as usize - 1]
        );
        // Only the queue above the new least counts: 160 ms is 40 over it, short...
        assert_eq!(dry_rests(&mut turns, ms(160), 1), [0]);
        // ... and 230 ms is 110 over it, long.
        assert_eq!(dry_rests(&mut turns, ms(230), 1), [2]);
    }

    #[test]
    fn a_store_that_became_far_is_no_queue_after_eight_round_trips_alike() {
        let mut turns = Turns::new(ms(100));
        for _ in 0..2 * WINDOW {
            turns.observe(ms(20));
        }
        // The store is two and a half intervals away from now on, give or take a few ms.
        for i in 0..SHIFT_AFTER - 1 {
            turns.observe(ms(250 + u64::from(i % 3) * 10));
            assert!(turns.queued(ms(250)) > ms(200), "forgotten after {i}");
        }
        turns.observe(ms(255));
        assert_eq!(turns.queued(ms(270)), ms(20));
        assert_eq!(turns.spread(), Some(ms(20)));
        // So it does not rest, as it would behind a queue.
        assert_eq!(
            dry_rests(&mut turns, ms(260), DRY + 2),
            vec![0; DRY as usize + 2]
        );
    }

    #[test]
    fn round_trips_that_vary_like_a_queues_are_not_taken_for_a_far_store() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(20));
        // A queue that fills and drains: more than a quarter interval between round trips.
        for i in 0..4 * WINDOW {
            turns.observe(ms(if i % 5 == 4 { 220 } else { 250 }));
            turns.observe(ms(if i % 2 == 0 { 150 } else { 280 }));
        }
        assert!(turns.queued(ms(280)) >= ms(130));
        assert!(turns.spread().is_some_and(|spread| spread > ms(25)));
    }

    #[test]
    fn a_rest_and_the_round_trip_stay_within_the_most_together() {
        let mut turns = Turns::new(ms(100));
        turns.observe(ms(1));
        let rests = queue_rests(&mut turns, ms(1), ms(250), DRY + 3);
        // Two whole intervals of round trip leave four of the six to rest.
        assert_eq!(&rests[DRY as usize - 1..], [0, 4, 0, MAX_REST - 2]);
        // A queue as long as the most: no rest at all, after either flush of a pair.
        for _ in 0..2 {
            turns.observe(ms(650));
            assert_eq!(turns.after_counted(false, false, most), 0);
        }
    }

    #[test]
    fn the_spread_leaves_out_copies_held_up_once_and_shows_a_queue() {
        let mut turns = Turns::new(ms(100));
        // The first copies connect and load the script: held up.
        turns.observe(ms(360));
        turns.observe(ms(250));
        for _ in 0..SPREAD_AFTER - 3 {
            turns.observe(ms(120));
        }
        assert_eq!(turns.spread(), None, "told after a few round trips");
        turns.observe(ms(121));
        assert_eq!(turns.spread(), Some(ms(1)));
        // A queue that fills and drains: more than two long round trips. The two held up
        // at the start are still left out, and the third longest counts.
        for round_trip in [150, 200, 170] {
            turns.observe(ms(round_trip));
        }
        assert_eq!(turns.spread(), Some(ms(80)));
        // Forgotten once two windows have passed.
        for _ in 0..WINDOW * 2 {
            turns.observe(ms(130));
        }
        assert_eq!(turns.spread(), Some(ms(0)));
    }
}
