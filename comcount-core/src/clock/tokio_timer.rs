use std::time::Duration;

use super::{Clock, Timer};

/// The tokio runtime's timer, paused time included.
///
/// Time is read from `tokio::time::Instant`, so a test runtime with paused time moves this
/// clock as it moves tokio's. Sleeping needs a tokio runtime with its timer enabled.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub struct TokioTimer {
    epoch: tokio::time::Instant,
}

impl TokioTimer {
    /// A timer whose epoch is now.
    pub fn new() -> Self {
        Self {
            epoch: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioTimer {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioTimer {
    fn now(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.epoch)
    }
}

impl Timer for TokioTimer {
    type Sleep = tokio::time::Sleep;

    fn sleep(&self, duration: Duration) -> tokio::time::Sleep {
        tokio::time::sleep(duration)
    }
}
