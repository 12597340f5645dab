use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::{Clock, Timer};

/// A clock that only moves when told to: time for tests.
///
/// Clones share one time. [`advance`](VirtualClock::advance) moves it forward and wakes every
/// sleeper whose time has come; [`next_wake`](VirtualClock::next_wake) says when the next one
/// is due, so a test can jump straight to it.
///
/// ```
/// use std::time::Duration;
/// use comcount_core::clock::{Clock, Timer, VirtualClock};
/// use futures::FutureExt;
///
/// let clock = VirtualClock::new();
/// let mut nap = clock.sleep(Duration::from_millis(10));
/// assert!((&mut nap).now_or_never().is_none());
/// assert_eq!(clock.next_wake(), Some(Duration::from_millis(10)));
/// clock.advance(Duration::from_millis(10));
/// assert!(nap.now_or_never().is_some());
/// assert_eq!(clock.now(), Duration::from_millis(10));
/// ```
#[derive(Clone, Default, Debug)]
pub struct VirtualClock {
    state: Arc<Mutex<State>>,
}

#[derive(Default, Debug)]
struct State {
    now: Duration,
    sleepers: Vec<(Duration, Waker)>,
}

impl VirtualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock at `now`.
    pub fn starting_at(now: Duration) -> Self {
        let clock = Self::new();
        clock.lock().now = now;
        clock
    }

    /// Moves the time forward by `by` and wakes the sleepers that are due.
    pub fn advance(&self, by: Duration) {
        let due = {
            let mut state = self.lock();
            state.now += by;
            let now = state.now;
            let (due, waiting) = std::mem::take(&mut state.sleepers)
                .into_iter()
                .partition::<Vec<_>, _>(|(at, _)| *at <= now);
            state.sleepers = waiting;
            due
        };
        for (_, waker) in due {
            waker.wake();
        }
    }

    /// Moves the time forward to `at`, if it is later than now.
    pub fn advance_to(&self, at: Duration) {
        let now = self.now();
        if at > now {
            self.advance(at - now);
        }
    }

    /// When the earliest pending sleep is due, if any sleeper waits.
    pub fn next_wake(&self) -> Option<Duration> {
        self.lock().sleepers.iter().map(|(at, _)| *at).min()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent even if a waker panicked while it was held.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        self.lock().now
    }
}

impl Timer for VirtualClock {
    type Sleep = VirtualSleep;

    fn sleep(&self, duration: Duration) -> VirtualSleep {
        VirtualSleep {
            deadline: self.now().saturating_add(duration),
            clock: self.clone(),
        }
    }
}

/// The future of [`VirtualClock`]'s [`sleep`](Timer::sleep).
#[derive(Debug)]
pub struct VirtualSleep {
    clock: VirtualClock,
    deadline: Duration,
}

impl Future for VirtualSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.clock.lock();
        if state.now >= self.deadline {
            return Poll::Ready(());
        }
        let waker = cx.waker();
        match state
            .sleepers
            .iter_mut()
            .find(|(at, w)| *at == self.deadline && w.will_wake(waker))
        {
            Some(_) => {}
            None => state.sleepers.push((self.deadline, waker.clone())),
        }
        Poll::Pending
    }
}
