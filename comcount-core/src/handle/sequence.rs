//! Where a participant's flush numbers start: from the wall clock, so that a participant that
//! restarts under a fixed id numbers its flushes after the ones its fence still holds.

use std::time::Duration;

use crate::protocol::request::FlushRequest;

/// The largest sequence number the flush script takes: integers are exact in Lua below 2^53.
pub(crate) const MAX: u64 = FlushRequest::MAX_SEQ;

/// How many sequence numbers each millisecond of wall-clock time leaves room for: more flushes
/// than a participant sends in a millisecond, by far.
const PER_MILLI: u64 = 1000;

/// The numbers of a millisecond that a start may be placed at, at random: the lower half, so
/// that the upper half stays free for the flushes of that millisecond.
pub(crate) const SPREAD: u64 = PER_MILLI / 2;

/// The number the first flush of a participant started at `wall` (since the Unix epoch)
/// follows, `jitter` (below [`SPREAD`]) into its millisecond. It grows by a thousand a
/// millisecond until October 2219, and stops there, 2^50 below [`MAX`], so that a participant
/// started then still has 2^50 flushes before it reaches the script's largest number (a
/// restart after that begins at the same number as the one before, and its first flushes are
/// answered `stale`).
///
/// Two participants under one id (a mistake, but one that happens: two pods given the same
/// name) started in the same millisecond would otherwise number their flushes alike, and the
/// second's would be answered as the first's duplicates: lost, and reported completed. Drawn
/// apart, one's flushes come after the other's, and the store answers the older ones `stale`,
/// which is reported.
pub(crate) fn first(wall: Duration, jitter: u64) -> u64 {
    let millis = u64::try_from(wall.as_millis()).unwrap_or(u64::MAX);
    millis
        .saturating_mul(PER_MILLI)
        .saturating_add(jitter % SPREAD)
        .min(MAX - (1 << 50))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_numbers_its_flushes_after_the_last_run() {
        let start = Duration::from_secs(1_790_000_000);
        let first_run = first(start, SPREAD - 1);
        // A run of a year at one flush a millisecond.
        let last_sent = first_run + 365 * 24 * 3600 * 1000;
        let restart = start + Duration::from_secs(365 * 24 * 3600) + Duration::from_millis(1);
        assert!(first(restart, 0) > last_sent);
        // A restart a millisecond later, after a flush in that millisecond.
        let soon = start + Duration::from_millis(1);
        assert!(first(soon, 0) > first_run + 1);
    }

    #[test]
    fn starts_in_the_same_millisecond_are_spread_apart() {
        let start = Duration::from_millis(1_790_000_000_123);
        assert_eq!(first(start, 0), 1_790_000_000_123_000);
        assert_eq!(first(start, 7), first(start, 0) + 7);
        assert_eq!(first(start, SPREAD + 7), first(start, 7));
        assert!(first(start, SPREAD - 1) < first(start + Duration::from_millis(1), 0));
    }

    #[test]
    fn the_largest_number_is_the_scripts() {
        assert_eq!(MAX, 9_007_199_254_740_991);
        let source = crate::protocol::script::SOURCE;
        assert!(source.contains(&format!("seq <= {MAX}")));
        assert!(source.contains(&format!("out_of_range(1, 'sequence number', '1', '{MAX}')")));
    }

    #[test]
    fn starts_grow_until_october_2219_and_stop_there() {
        let september_2219 = Duration::from_secs(7_879_000_000);
        let november_2219 = Duration::from_secs(7_884_000_000);
        assert!(first(september_2219, 0) < first(september_2219 + Duration::from_millis(1), 0));
        assert_eq!(first(november_2219, 0), MAX - (1 << 50));
    }

    #[test]
    fn stays_exact_in_the_script() {
        assert!(first(Duration::from_secs(1_790_000_000), SPREAD - 1) < MAX);
        assert!(first(Duration::MAX, SPREAD - 1) + (1 << 50) <= MAX);
        assert_eq!(first(Duration::ZERO, 0), 0);
    }
}
