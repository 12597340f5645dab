//! Flushing through more than one lane when the store is farther away than an interval.
//!
//! One flush loop keeps one flush in the air, so with a round trip longer than an interval it
//! cannot add to every interval, and a participant alone then rarely adds to two in a row: the
//! interval before each of its flushes holds no key, and it learns no total. While the round
//! trip is steady (the path's own time, not a queue behind other counters), the partition's
//! loop opens more lanes: more flush loops over the same buffers, each under a participant id
//! of its own, derived from the participant's, so that each has its own fence. Each lane
//! takes its turn: lane `k` of `K` aims only at the intervals `n` where `n % K == k`. Each
//! lane thus has `K` intervals for its round trip, and together they add to every interval:
//! one flush an interval, as at a store close by, never more.
//!
//! Every lane is a participant as the store's protocol knows one: an amount is taken from the
//! buffer by one lane's flush, and its fence applies that flush at most once. Nothing about
//! the protocol changes.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::diagnostics::{Event, Reporter};
use crate::engine::policy::aim::Aim;
use crate::engine::policy::round_trip::RoundTrip;
use crate::handle::settings::Settings;

/// The most lanes a partition flushes through: enough for a round trip of three and a half
/// intervals.
pub(crate) const MAX_LANES: u32 = 4;

/// What the lanes of one partition share: how many of them flush, and where an opened one
/// starts from.
#[derive(Debug)]
pub(crate) struct Lanes {
    /// How many lanes flush, as lane 0 decides; 1 while the store answers within an interval.
    wanted: AtomicU32,
    /// What the first lane knew when it last opened a lane, for the new lane to start from.
    start: Mutex<Option<Box<Start>>>,
    /// The largest sequence number any lane took: a lane opened again goes on from it, past
    /// the number its own fence in the store still holds.
    last_seq: AtomicU64,
}

impl Default for Lanes {
    fn default() -> Self {
        Self {
            wanted: AtomicU32::new(1),
            start: Mutex::new(None),
            last_seq: AtomicU64::new(0),
        }
    }
}

impl Lanes {
    /// How many lanes flush.
    pub(crate) fn wanted(&self) -> u32 {
        self.wanted.load(Relaxed)
    }

    /// Notes that a lane took the sequence number `seq` for a flush.
    pub(crate) fn took_seq(&self, seq: u64) {
        self.last_seq.fetch_max(seq, Relaxed);
    }

    /// The sequence number a lane opened now goes on from, `first` unless a lane flushed
    /// before: a lane that closed and opened again is the same participant to the store, whose
    /// fence holds the number of its last flush. Started again from `first`, its flushes would
    /// come back stale, or as duplicates of flushes it made before. Numbers need only grow per
    /// lane, so the largest any lane took will do.
    pub(crate) fn resume_seq(&self, first: u64) -> u64 {
        first.max(self.last_seq.load(Relaxed))
    }

    /// Sets how many lanes flush: `wanted`; a lane opened now starts from `start`.
    fn set(&self, wanted: u32, start: impl FnOnce() -> Start) {
        if wanted > self.wanted() {
            *self.lock_start() = Some(Box::new(start()));
        }
        self.wanted.store(wanted, Relaxed);
    }

    /// What a lane opened now starts from.
    pub(crate) fn start(&self) -> Option<Start> {
        self.lock_start().as_deref().cloned()
    }

    fn lock_start(&self) -> std::sync::MutexGuard<'_, Option<Box<Start>>> {
        // It is replaced whole: one left by a panic is as good as any.
        self.start
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What a lane starts from: the first lane's aim and round trip, so that its first flush is
/// aimed as well as the first lane's next, and waited for as long, rather than learn the
/// store's clock from a wrong-interval reply and its round trip from a copy sent again.
#[derive(Clone, Debug)]
pub(crate) struct Start {
    pub(crate) aim: Aim,
    pub(crate) round_trip: RoundTrip,
}

/// How the first lane decides how many lanes flush, after each of its flushes.
///
/// A store far away answers as late whatever is asked of it, while a queue behind other
/// counters answers later the more is asked: opened on one, lanes would only lengthen it. The
/// two look alike until lanes open, so the round trip they opened at is kept, and if it grows
/// by more than a quarter interval while they are open they close, and stay closed for a
/// while: [`FIRST_HOLD`] of the first lane's flushes, twice as many each time after, up to
/// [`MAX_HOLD`].
#[derive(Debug)]
pub(crate) struct Opener {
    /// The round trip the lanes opened at, while more than one is open.
    opened_at: Option<Duration>,
    /// How many more of the first lane's flushes the lanes stay closed for.
    hold: u32,
    /// How long the next hold is.
    next_hold: u32,
}

/// How many of the first lane's flushes lanes stay closed for, the first time they close
/// after the round trip grew.
const FIRST_HOLD: u32 = 8;

/// The longest hold, in the first lane's flushes.
const MAX_HOLD: u32 = 128;

impl Default for Opener {
    fn default() -> Self {
        Self {
            opened_at: None,
            hold: 0,
            next_hold: FIRST_HOLD,
        }
    }
}

impl Opener {
    /// Decides how many lanes the partition flushes through, after one of the first lane's
    /// flushes: more than one only while the round trip is over an interval, steady, and the
    /// path's own time rather than a queue behind other flushes, where more flushes in the air
    /// would only lengthen the queue. Reports a change.
    pub(crate) fn after_flush(
        &mut self,
        lanes: &Lanes,
        settings: &Settings,
        (aim, round_trip): (&Aim, &RoundTrip),
        report: &Reporter,
    ) {
        if !settings.lanes_allowed() {
            return;
        }
        let (interval, path) = (settings.interval, round_trip.path());
        let before = lanes.wanted();
        self.decide(lanes, path, interval, || Start {
            aim: aim.clone(),
            round_trip: round_trip.clone(),
        });
        let wanted = lanes.wanted();
        if wanted != before {
            report.emit(Event::FlushLanesChanged {
                lanes: wanted,
                round_trip: path.or(round_trip.smoothed()).unwrap_or_default(),
                interval,
            });
        }
    }

    /// Decides how many lanes flush after one of the first lane's flushes: more when its
    /// `round_trip` grows, fewer once it is an eighth of an interval below the step where
    /// fewer would do (so that a round trip near a step does not open and close a lane from
    /// one reply to the next), and one while there is no round trip to go by (`None`: it is
    /// unsteady, or a queue's), or while a hold lasts. A lane opened starts from `start`.
    fn decide(
        &mut self,
        lanes: &Lanes,
        round_trip: Option<Duration>,
        interval: Duration,
        start: impl FnOnce() -> Start,
    ) {
        if self.hold > 0 {
            self.hold -= 1;
            return;
        }
        let open = lanes.wanted();
        let wanted = match (round_trip, self.opened_at) {
            (Some(round_trip), Some(opened_at)) if round_trip > opened_at + interval / 4 => {
                // The round trip grew with lanes open: a queue, perhaps theirs.
                self.hold = self.next_hold;
                self.next_hold = (self.next_hold * 2).min(MAX_HOLD);
                1
            }
            (Some(round_trip), _) => {
                let wanted = needed(round_trip, interval);
                if wanted >= open || needed(round_trip + interval / 8, interval) < open {
                    wanted
                } else {
                    open
                }
            }
            (None, _) => 1,
        };
        if wanted == 1 {
            self.opened_at = None;
        } else if self.opened_at.is_none() {
            self.opened_at = round_trip;
        }
        lanes.set(wanted, start);
    }
}

/// How many lanes a round trip needs: one while it is at most an interval; above, enough that
/// each lane's turn comes a quarter interval or more after its last flush's reply.
fn needed(round_trip: Duration, interval: Duration) -> u32 {
    if round_trip <= interval {
        return 1;
    }
    let span = round_trip + interval / 4;
    let lanes = span.as_nanos().div_ceil(interval.as_nanos().max(1));
    u32::try_from(lanes)
        .unwrap_or(MAX_LANES)
        .clamp(2, MAX_LANES)
}

/// The first interval from `from` on that is lane `lane`'s turn, of `lanes`.
pub(crate) fn turn(from: u64, lane: u32, lanes: u32) -> u64 {
    let lanes = u64::from(lanes.max(1));
    let behind = (u64::from(lane) + lanes - from % lanes) % lanes;
    from.saturating_add(behind)
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: Duration = Duration::from_millis(100);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn start() -> Start {
        Start {
            aim: Aim::new(100),
            round_trip: RoundTrip::new(I, I),
        }
    }

    #[test]
    fn one_lane_within_an_interval_and_enough_for_a_quarter_interval_to_spare_above() {
        assert_eq!(needed(ms(0), I), 1);
        assert_eq!(needed(ms(100), I), 1);
        assert_eq!(needed(ms(101), I), 2);
        assert_eq!(needed(ms(150), I), 2);
        assert_eq!(needed(ms(175), I), 2);
        assert_eq!(needed(ms(176), I), 3);
        assert_eq!(needed(ms(200), I), 3);
        assert_eq!(needed(ms(300), I), 4);
        assert_eq!(needed(ms(10_000), I), MAX_LANES);
    }

    #[test]
    fn each_lane_takes_the_intervals_of_its_turn() {
        assert_eq!(turn(10, 0, 1), 10);
        assert_eq!(turn(10, 0, 2), 10);
        assert_eq!(turn(10, 1, 2), 11);
        assert_eq!(turn(11, 0, 2), 12);
        assert_eq!(turn(11, 2, 3), 11);
        assert_eq!(turn(12, 2, 3), 14);
        let turns: Vec<u64> = (0..4).map(|lane| turn(21, lane, 4)).collect();
        assert_eq!(turns, [24, 21, 22, 23]);
    }

    #[test]
    fn every_lane_after_the_first_has_an_id_of_its_own() {
        use crate::protocol::participant::ParticipantId;
        let id = ParticipantId::from_u64(7);
        let ids: Vec<ParticipantId> = (0..MAX_LANES).map(|lane| id.lane(lane)).collect();
        for (i, a) in ids.iter().enumerate() {
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Neighbouring ids, as fixed ids often are, do not meet each other's lanes.
        let neighbour = ParticipantId::from_u64(8);
        for lane in 1..MAX_LANES {
            assert!(!ids.contains(&neighbour.lane(lane)));
            assert_ne!(id.lane(lane), ParticipantId::from_u64(7 + u64::from(lane)));
        }
    }

    #[test]
    fn lanes_open_with_the_round_trip_and_close_with_a_margin() {
        let lanes = Lanes::default();
        let mut opener = Opener::default();
        opener.decide(&lanes, Some(ms(80)), I, start);
        assert_eq!(lanes.wanted(), 1);
        opener.decide(&lanes, Some(ms(150)), I, start);
        assert_eq!(lanes.wanted(), 2);
        assert!(
            lanes.start().is_some(),
            "a lane opened with nothing to start from"
        );
        // Just under the step back to one: kept.
        opener.decide(&lanes, Some(ms(95)), I, start);
        assert_eq!(lanes.wanted(), 2);
        opener.decide(&lanes, Some(ms(80)), I, start);
        assert_eq!(lanes.wanted(), 1);
        // Unsteady, or a queue's: one.
        opener.decide(&lanes, Some(ms(150)), I, start);
        opener.decide(&lanes, None, I, start);
        assert_eq!(lanes.wanted(), 1);
    }

    #[test]
    fn a_round_trip_that_grows_with_lanes_open_closes_them_for_a_hold_that_doubles() {
        let lanes = Lanes::default();
        let mut opener = Opener::default();
        let mut held_for = Vec::new();
        for _ in 0..3 {
            opener.decide(&lanes, Some(ms(150)), I, start);
            assert_eq!(lanes.wanted(), 2);
            // The queue the lanes made: the round trip grows past the quarter interval.
            opener.decide(&lanes, Some(ms(180)), I, start);
            assert_eq!(lanes.wanted(), 1);
            let mut held = 0;
            loop {
                opener.decide(&lanes, Some(ms(150)), I, start);
                if lanes.wanted() > 1 {
                    break;
                }
                held += 1;
            }
            held_for.push(held);
            // Back at the round trip they opened at: they stay open.
            opener.decide(&lanes, Some(ms(160)), I, start);
            assert_eq!(lanes.wanted(), 2);
            opener.decide(&lanes, Some(ms(80)), I, start);
        }
        assert_eq!(held_for, [FIRST_HOLD, FIRST_HOLD * 2, FIRST_HOLD * 4]);
    }
}
