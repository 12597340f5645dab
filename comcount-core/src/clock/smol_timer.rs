use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::{Clock, Timer};

/// The timer of smol, through `async-io`: it works on any executor, since `async-io` runs its
/// own reactor when no other drives it.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "smol")))]
pub struct SmolTimer {
    epoch: Instant,
}

impl SmolTimer {
    /// A timer whose epoch is now.
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }
}

impl Default for SmolTimer {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SmolTimer {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }
}

impl Timer for SmolTimer {
    type Sleep = SmolSleep;

    fn sleep(&self, duration: Duration) -> SmolSleep {
        SmolSleep(async_io::Timer::after(duration))
    }
}

/// The future of [`SmolTimer`]'s [`sleep`](Timer::sleep).
#[derive(Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "smol")))]
pub struct SmolSleep(async_io::Timer);

impl Future for SmolSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}
