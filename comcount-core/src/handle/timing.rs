//! When a counter sends its flushes, and what it does with one whose reply never comes.

use std::time::Duration;

/// When the next flush goes out after a reply.
///
/// Either way a participant adds to each interval at most once: the store's fence sees to
/// that, whatever the timing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[non_exhaustive]
pub enum Timing {
    /// Aim each flush at the middle of the next interval, from the store's phase in the last
    /// reply and the measured round trip. Flushes stay clear of interval edges, so a
    /// participant adds to every interval while the round trip's jitter stays under a quarter
    /// of an interval. The default.
    #[default]
    MidInterval,
    /// Wait one interval after each reply. Each flush lands a
    /// round trip later in its interval than the last, until one steps over an edge and leaves
    /// an interval without this participant's contribution: about one interval in
    /// `interval / round trip`.
    AfterReply,
}

/// The tick's policy: timing, and how long to keep a flush alive.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Policy {
    pub(crate) timing: Timing,
    /// A flush whose reply takes longer is taken as unanswered.
    pub(crate) flush_timeout: Duration,
    /// How long an unanswered flush is resent before its amount is dropped; zero drops it at
    /// once.
    pub(crate) resend_window: Duration,
}

impl Policy {
    /// The default flush timeout: the interval, within 100 ms and 2 s.
    pub(crate) fn default_flush_timeout(interval: Duration) -> Duration {
        interval.clamp(Duration::from_millis(100), Duration::from_secs(2))
    }

    /// The default resend window: a tenth of the fence's life (at least a minute), so that a
    /// resent flush can never outlive the fence that keeps it from counting twice.
    pub(crate) fn default_resend_window(fence_ttl: Duration) -> Duration {
        fence_ttl / 10
    }
}
