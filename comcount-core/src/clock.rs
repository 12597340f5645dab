//! Time, as a counter and a store see it.
//!
//! A [`Clock`] tells the time; a [`Timer`] also sleeps. The counter's background task needs a
//! [`Timer`]; the in-memory store needs only a [`Clock`]. Pick the timer of your runtime
//! ([`TokioTimer`] with the `tokio` feature, [`SmolTimer`] with the `smol` feature), or drive
//! everything by hand with a [`VirtualClock`] in tests.

use std::future::Future;
use std::time::{Duration, SystemTime};

mod virtual_clock;
pub use virtual_clock::{VirtualClock, VirtualSleep};

#[cfg(feature = "tokio")]
mod tokio_timer;
#[cfg(feature = "tokio")]
pub use tokio_timer::TokioTimer;

#[cfg(feature = "smol")]
mod smol_timer;
#[cfg(feature = "smol")]
pub use smol_timer::{SmolSleep, SmolTimer};

/// A source of the current time, as a duration since the clock's own epoch.
///
/// Only differences between two readings of one clock carry meaning, except where the clock says
/// otherwise (as [`SystemClock`] does).
pub trait Clock: Send + Sync + 'static {
    /// The time now, since this clock's epoch.
    fn now(&self) -> Duration;
}

/// A [`Clock`] that can also wait.
pub trait Timer: Clock + Clone {
    /// The future [`sleep`](Timer::sleep) returns.
    type Sleep: Future<Output = ()> + Send + 'static;

    /// A future that completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Self::Sleep;
}

/// The wall clock: time since the Unix epoch, as the operating system tells it.
#[derive(Clone, Copy, Default, Debug)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        // A clock set before 1970 reads as the epoch itself rather than failing.
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
    }
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now(&self) -> Duration {
        (**self).now()
    }
}
