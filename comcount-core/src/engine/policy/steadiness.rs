//! Whether the store's round trip is the path's own time or a queue's.
//!
//! A store far away answers as late whatever is asked of it, while a queue behind other
//! counters fills and drains, and answers later the more is asked. The least round trip seen
//! lately is the path's and the store's own time; how far the others spread above it tells the
//! two apart. Lanes ([`lanes`](crate::engine::policy::lanes)) open only on a path that is long and steady: on a
//! queue, more flushes in the air would only lengthen it.
//!
//! A store that became farther away for good (a failover to a distant replica) would look like
//! a queue for as long as the least round trip remembers the path before: two windows. A run of
//! [`SHIFT_AFTER`] round trips alike, all longer than those before, is taken for the path's new
//! time instead.

use std::time::Duration;

/// How many round trips one window of the least-round-trip estimate spans. The least is kept
/// over the last two windows, so a path that became slower for good is learnt within two, and
/// within [`SHIFT_AFTER`] round trips if they are alike.
const WINDOW: u32 = 32;

/// How many round trips must be seen before their spread is told.
const SPREAD_AFTER: u32 = 8;

/// How many of the longest round trips of a window say nothing of a queue: copies held up
/// once, as the first two are, which connect and load the script.
const HELD_UP: usize = 2;

/// How many round trips in a row, within a quarter interval of each other, longer than all
/// before them but the [`HELD_UP`] longest and more than a quarter interval above the least,
/// show that the path itself became slower.
const SHIFT_AFTER: u32 = 8;

#[derive(Clone, Debug)]
pub(crate) struct Steadiness {
    interval: Duration,
    /// The least round trip in the current window, and in the one before it.
    least: [Option<Duration>; 2],
    /// The [`HELD_UP`] + 1 longest in the current window, longest first, and in the one
    /// before it.
    most: [[Duration; HELD_UP + 1]; 2],
    /// Round trips taken in the current window.
    taken: u32,
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

impl Steadiness {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            least: [None; 2],
            most: [[Duration::ZERO; HELD_UP + 1]; 2],
            taken: 0,
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
        let current = &mut self.least[0];
        *current = Some(current.map_or(round_trip, |least| least.min(round_trip)));
        let mut carried = round_trip;
        for longest in &mut self.most[0] {
            if carried > *longest {
                carried = std::mem::replace(longest, carried);
            }
        }
        self.follow_run(round_trip, longest_before);
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
    fn queued(&self, round_trip: Duration) -> Duration {
        let least = self.least.iter().flatten().min().copied();
        round_trip.saturating_sub(least.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_path_that_became_slower_for_good_is_learnt_within_two_windows() {
        let mut steadiness = Steadiness::new(ms(100));
        steadiness.observe(ms(1));
        for _ in 0..2 * WINDOW {
            steadiness.observe(ms(120));
        }
        // Only the queue above the new least counts.
        assert_eq!(steadiness.queued(ms(160)), ms(40));
        assert_eq!(steadiness.spread(), Some(Duration::ZERO));
    }

    #[test]
    fn a_store_that_became_far_is_no_queue_after_eight_round_trips_alike() {
        let mut steadiness = Steadiness::new(ms(100));
        for _ in 0..2 * WINDOW {
            steadiness.observe(ms(20));
        }
        // The store is two and a half intervals away from now on, give or take a few ms.
        for i in 0..SHIFT_AFTER - 1 {
            steadiness.observe(ms(250 + u64::from(i % 3) * 10));
            assert!(steadiness.queued(ms(250)) > ms(200), "forgotten after {i}");
        }
        steadiness.observe(ms(255));
        assert_eq!(steadiness.queued(ms(270)), ms(20));
        assert_eq!(steadiness.spread(), Some(ms(20)));
    }

    #[test]
    fn round_trips_that_vary_like_a_queues_are_not_taken_for_a_far_store() {
        let mut steadiness = Steadiness::new(ms(100));
        steadiness.observe(ms(20));
        // A queue that fills and drains: more than a quarter interval between round trips.
        for i in 0..4 * WINDOW {
            steadiness.observe(ms(if i % 5 == 4 { 220 } else { 250 }));
            steadiness.observe(ms(if i % 2 == 0 { 150 } else { 280 }));
        }
        assert!(steadiness.queued(ms(280)) >= ms(130));
        assert!(steadiness.spread().is_some_and(|spread| spread > ms(25)));
    }

    #[test]
    fn the_spread_leaves_out_copies_held_up_once_and_shows_a_queue() {
        let mut steadiness = Steadiness::new(ms(100));
        // The first copies connect and load the script: held up.
        steadiness.observe(ms(360));
        steadiness.observe(ms(250));
        for _ in 0..SPREAD_AFTER - 3 {
            steadiness.observe(ms(120));
        }
        assert_eq!(steadiness.spread(), None, "told after a few round trips");
        steadiness.observe(ms(121));
        assert_eq!(steadiness.spread(), Some(ms(1)));
        // A queue that fills and drains: more than two long round trips. The two held up
        // at the start are still left out, and the third longest counts.
        for round_trip in [150, 200, 170] {
            steadiness.observe(ms(round_trip));
        }
        assert_eq!(steadiness.spread(), Some(ms(80)));
        // Forgotten once two windows have passed.
        for _ in 0..WINDOW * 2 {
            steadiness.observe(ms(130));
        }
        assert_eq!(steadiness.spread(), Some(ms(0)));
    }
}
