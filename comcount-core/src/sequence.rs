//! Where a participant's flush numbers start: from the wall clock, so that a participant that
//! restarts under a fixed id numbers its flushes after the ones its fence still holds.

use std::time::Duration;

use crate::store::FlushRequest;

/// The largest sequence number the flush script takes: integers are exact in Lua below 2^53.
pub(crate) const MAX: u64 = FlushRequest::MAX_SEQ;

/// How many sequence numbers each millisecond of wall-clock time leaves room for: more flushes
/// than a participant sends in a millisecond, by far.
const PER_MILLI: u64 = 1000;

/// The number the first flush of a participant started at `wall` (since the Unix epoch)
/// follows. It grows by a thousand a millisecond, and stays under [`MAX`] for a participant
/// that sends fewer than 2^50 flushes, until the year 2255.
pub(crate) fn first(wall: Duration) -> u64 {
    let millis = u64::try_from(wall.as_millis()).unwrap_or(u64::MAX);
    millis.saturating_mul(PER_MILLI).min(MAX - (1 << 50))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_numbers_its_flushes_after_the_last_run() {
        let start = Duration::from_secs(1_790_000_000);
        let first_run = first(start);
        // A run of a year at one flush a millisecond.
        let last_sent = first_run + 365 * 24 * 3600 * 1000;
        let restart = start + Duration::from_secs(365 * 24 * 3600) + Duration::from_millis(1);
        assert!(first(restart) > last_sent);
    }

    #[test]
    fn the_largest_number_is_the_scripts() {
        assert_eq!(MAX, 9_007_199_254_740_991);
        assert!(
            crate::script::SOURCE.contains(&format!("check(1, 'sequence number', '1', '{MAX}')"))
        );
    }

    #[test]
    fn stays_exact_in_the_script() {
        assert!(first(Duration::from_secs(1_790_000_000)) < MAX);
        assert!(first(Duration::MAX) + (1 << 50) <= MAX);
        assert_eq!(first(Duration::ZERO), 0);
    }
}
