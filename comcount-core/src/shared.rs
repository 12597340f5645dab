//! The state a counter's or a family's handles share with its background task.

use std::future::poll_fn;
use std::panic::RefUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use futures::channel::oneshot;
use futures::task::AtomicWaker;

use crate::clock::Clock;
use crate::registry::Registry;
use crate::slot::Slot;
use crate::tally::Refusal;

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Registry,
    /// The worker's timer, to tell how old a total is.
    clock: WorkerClock,
    /// The interval number the background task last flushed in, for noting when keys are
    /// looked up.
    pub(crate) epoch: AtomicU64,
    started: AtomicBool,
    start: StartWaker,
    /// The background task's stop signal, until the counter is closed. Whatever the task sends
    /// to the store, it sends while holding this lock and seeing the signal still there, so
    /// that nothing is sent once [`close`](Shared::close) has returned.
    open: Mutex<Option<oneshot::Sender<()>>>,
}

impl Shared {
    /// The shared state, and the receiving end of its stop signal for the background task.
    pub(crate) fn new(
        name: Arc<str>,
        keys: Registry,
        clock: Arc<dyn Clock>,
    ) -> (Self, oneshot::Receiver<()>) {
        let (stop, stopped) = oneshot::channel();
        let shared = Self {
            name,
            keys,
            clock: WorkerClock(clock),
            epoch: AtomicU64::new(0),
            started: AtomicBool::new(false),
            start: StartWaker(AtomicWaker::new()),
            open: Mutex::new(Some(stop)),
        };
        (shared, stopped)
    }

    /// Stops the background task for good: nothing is sent to the store after this returns,
    /// and no group total is known any more.
    pub(crate) fn close(&self) {
        let sender = self.lock_open().take();
        drop(sender);
        self.forget_totals();
    }

    /// How long ago a reply last brought `slot`'s total, on the worker's timer.
    pub(crate) fn total_age(&self, slot: &Slot) -> Option<Duration> {
        slot.total_age(self.clock.0.now())
    }

    /// Makes every key's group total unknown.
    pub(crate) fn forget_totals(&self) {
        self.keys.for_each(|slot| slot.total.set(None));
    }

    /// Whether [`close`](Shared::close) was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock_open().is_none()
    }

    /// Runs `f` unless the counter is closed, and keeps it from closing meanwhile.
    pub(crate) fn while_open<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let open = self.lock_open();
        let result = open.is_some().then(f);
        drop(open);
        result
    }

    fn lock_open(&self) -> MutexGuard<'_, Option<oneshot::Sender<()>>> {
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The hot path: adds `amount` to `slot` and returns the max rule's count; wakes the
    /// background task on the very first add.
    #[inline]
    pub(crate) fn increment(&self, slot: &Slot, amount: u64) -> Result<u64, Refusal> {
        let (count, found_empty) = slot.add(amount)?;
        if found_empty {
            self.start();
        }
        Ok(count)
    }

    /// The interval number to note a key's lookup in.
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    #[cold]
    fn start(&self) {
        // Once set, the flag is only read: an add that finds a key's buffer empty (its first
        // after each flush, or an add of 0) costs a read of a line that every core keeps.
        if !self.started.load(Ordering::Relaxed) && !self.started.swap(true, Ordering::AcqRel) {
            self.start.0.wake();
        }
    }

    /// Completes once the first increment has happened.
    pub(crate) async fn started(&self) {
        poll_fn(|cx| {
            if self.started.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            self.start.0.register(cx.waker());
            if self.started.load(Ordering::Acquire) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// Wakes the background task on the first increment.
///
/// `AtomicWaker` keeps its waker in an `UnsafeCell`, so it is not `RefUnwindSafe`, and neither
/// would be the handles that share it. Asserting it here is sound, since no panic leaves it in
/// a state a handle would see broken: handles only ever call `wake`, which takes the waker out
/// and sets the state back before it calls it, so a waker that panics leaves it as any wake
/// does. Only the background task calls `register`; a panic there ends that task, and the
/// handles go on counting locally, as they do whenever it ends.
///
/// The rest of what handles share tolerates a panic anywhere as well: atomics, each changed in
/// one step, and a mutex read through its poison. The handles' own panics (an amount refused)
/// come before anything is counted.
#[derive(Debug)]
struct StartWaker(AtomicWaker);

impl RefUnwindSafe for StartWaker {}

/// The worker's timer, as a clock the handles read.
struct WorkerClock(Arc<dyn Clock>);

impl std::fmt::Debug for WorkerClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkerClock")
    }
}

// Handles only read the time through it, to tell a total's age: a clock that panicked halfway
// through a read leaves at worst one wrong age, never a count.
impl RefUnwindSafe for WorkerClock {}

/// Closes the counter or family when the last handle is dropped, as `close()` does. Every
/// handle holds one reference.
#[derive(Debug)]
pub(crate) struct Lifetime(pub(crate) Arc<Shared>);

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.0.close();
    }
}
