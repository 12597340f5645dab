//! The decision, apart from any request or I/O: what the group counted against the limit.

use std::time::Duration;

/// What the layer does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Let it through.
    Admit,
    /// Refuse it: the group counted more than the limit.
    Reject,
}

/// What the family knew when a key's count passed its limit: which half of the count
/// (`increment`'s max rule) can be held against a limit per interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Knowledge {
    /// The key's group total over the last closed interval, when fresh.
    pub group_total: Option<u64>,
    /// Whether the store answers: a reply came within the last two intervals and the family
    /// is open (`Family::until_interval_end` is `Some`).
    pub store_answers: bool,
}

impl Knowledge {
    /// Whether this participant's unsent count for the key covers about one interval: the
    /// time since its last flush, while flushes are answered. While the store does not
    /// answer, or once the family is closed, the unsent count grows over as many intervals as
    /// that lasts: holding it against a limit per interval would reject requests the group
    /// never counted in any one interval.
    pub fn unsent_covers_one_interval(&self) -> bool {
        self.store_answers
    }
}

/// Decides on a request from `counted`, the count `Family::increment` returns for its key with
/// this request counted (the larger of the group's total over the last closed interval and
/// this participant's unsent count, a lower bound that never overstates), and the key's
/// `limit` per interval.
///
/// A request is rejected only when `counted` exceeds the limit: either the group counted more
/// than the limit over the last closed interval, or this participant alone has counted more
/// since its last flush. `known` is asked only then, to tell whether the count can be held
/// against a limit per interval (see [`Knowledge::unsent_covers_one_interval`]); a count that
/// passes the limit through the group's total alone always can, and so does any request
/// under a limit of 0.
///
/// ```
/// use comcount_tower::{Decision, Knowledge, decide};
///
/// let healthy = || Knowledge { group_total: Some(3), store_answers: true };
/// assert_eq!(decide(10, 10, healthy), Decision::Admit);
/// assert_eq!(decide(11, 10, healthy), Decision::Reject);
/// // The store has not answered for a while: the unsent count spans many intervals.
/// let cut = || Knowledge { group_total: None, store_answers: false };
/// assert_eq!(decide(11, 10, cut), Decision::Admit);
/// ```
pub fn decide(counted: u64, limit: u64, known: impl FnOnce() -> Knowledge) -> Decision {
    if counted <= limit {
        return Decision::Admit;
    }
    // This request alone is more than a limit of 0, in any interval.
    if limit == 0 {
        return Decision::Reject;
    }
    let known = known();
    let by_total = known.group_total.is_some_and(|total| total > limit);
    if by_total || known.unsent_covers_one_interval() {
        Decision::Reject
    } else {
        Decision::Admit
    }
}

/// `Retry-After` in whole seconds for a wait of `wait`: rounded up, at least 1 (0 would ask
/// for a retry at once, which the limit refuses again).
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs();
    let secs = if wait.subsec_nanos() > 0 {
        secs.saturating_add(1)
    } else {
        secs
    };
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(group_total: Option<u64>, store_answers: bool) -> Knowledge {
        Knowledge {
            group_total,
            store_answers,
        }
    }

    #[test]
    fn admits_up_to_the_limit_and_asks_nothing_then() {
        for limit in [0, 1, 10, u64::MAX] {
            for counted in [0, limit / 2, limit] {
                let decision = decide(counted, limit, || panic!("asked on the hot path"));
                assert_eq!(decision, Decision::Admit, "{counted} of {limit}");
            }
        }
    }

    #[test]
    fn rejects_past_the_limit_while_the_store_answers() {
        // A fresh total, by itself past the limit or not.
        assert_eq!(decide(11, 10, || known(Some(11), true)), Decision::Reject);
        assert_eq!(decide(11, 10, || known(Some(2), true)), Decision::Reject);
        // A new key, whose first total is on its way.
        assert_eq!(decide(11, 10, || known(None, true)), Decision::Reject);
        assert_eq!(decide(1, 0, || known(None, true)), Decision::Reject);
        assert_eq!(
            decide(u64::MAX, u64::MAX - 1, || known(None, true)),
            Decision::Reject
        );
    }

    #[test]
    fn an_unsent_count_that_may_span_many_intervals_rejects_nothing() {
        // The store does not answer (or the family is closed): the unsent count grows.
        assert_eq!(decide(11, 10, || known(None, false)), Decision::Admit);
        assert_eq!(decide(11, 10, || known(Some(2), false)), Decision::Admit);
        // Unless the group's total alone passes the limit: that interval really held more.
        assert_eq!(decide(11, 10, || known(Some(11), false)), Decision::Reject);
        assert_eq!(decide(11, 10, || known(Some(10), false)), Decision::Admit);
        // Or the limit is 0: this request alone passes it.
        assert_eq!(decide(1, 0, || known(None, false)), Decision::Reject);
    }

    #[test]
    fn retry_after_rounds_up_to_a_whole_second() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1000)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
    }
}
