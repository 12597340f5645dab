//! Waiting on the wall clock without an async runtime: each wait has a thread of its own,
//! which wakes the waiting task when the time is up. The suite waits a few times per check,
//! so a thread per wait costs nothing that matters.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[derive(Default)]
struct State {
    done: bool,
    waker: Option<Waker>,
}

/// A future that completes once `duration` has passed on the wall clock.
pub(crate) struct Sleep {
    state: Arc<Mutex<State>>,
}

/// Sleeps for `duration` on any executor.
///
/// # Panics
///
/// If the operating system cannot start a thread.
pub(crate) fn sleep(duration: Duration) -> Sleep {
    let state = Arc::new(Mutex::new(State::default()));
    let shared = Arc::clone(&state);
    std::thread::Builder::new()
        .name("comcount-testing-sleep".into())
        .spawn(move || {
            std::thread::sleep(duration);
            let waker = {
                let mut state = shared.lock().unwrap_or_else(PoisonError::into_inner);
                state.done = true;
                state.waker.take()
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        })
        .expect("the conformance suite starts a thread for each of its waits");
    Sleep { state }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.done {
            Poll::Ready(())
        } else {
            state.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

/// Runs `future` for at most `limit`: `None` when the time ran out first.
pub(crate) async fn within<F: Future>(limit: Duration, future: F) -> Option<F::Output> {
    let future = pin!(future);
    let timer = sleep(limit);
    match futures::future::select(future, timer).await {
        futures::future::Either::Left((output, _)) => Some(output),
        futures::future::Either::Right(((), _)) => None,
    }
}
