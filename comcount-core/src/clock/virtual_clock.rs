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
    /// Room for the wakers of the sleepers due, kept between advances: with the sleepers'
    /// own, it makes the clock allocate nothing in a steady run, so that a test can count
    /// what the code under it allocates.
    due: Vec<Waker>,
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
        let mut due = {
            let mut state = self.lock();
            state.now += by;
            let now = state.now;
            let mut due = std::mem::take(&mut state.due);
            due.extend(
                state
                    .sleepers
                    .extract_if(.., |(at, _)| *at <= now)
                    .map(|(_, waker)| waker),
            );
            due
        };
        // Woken with the lock released: a waker may poll, and the sleep it polls locks.
        for waker in due.drain(..) {
            waker.wake();
        }
        let mut state = self.lock();
        if state.due.capacity() < due.capacity() {
            state.due = due;
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
