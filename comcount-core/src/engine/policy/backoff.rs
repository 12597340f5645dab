//! The pause between copies of a flush the store turned away for now.

use std::time::Duration;

/// Pauses between copies of a flush that failed at once: from a fiftieth of the interval,
/// doubling up to half an interval.
#[derive(Debug)]
pub(crate) struct Backoff {
    first: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(interval: Duration) -> Self {
        let first = (interval / 50).max(Duration::from_millis(1));
        Self {
            first,
            cap: (interval / 2).max(first),
            next: first,
        }
    }

    pub(crate) fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.cap);
        now
    }

    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}
