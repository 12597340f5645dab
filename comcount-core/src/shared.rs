//! The state a counter's handles share with its background task.

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

use futures::channel::oneshot;
use futures::task::AtomicWaker;

use crate::error::AmountError;
use crate::tally::{self, Buffer, GroupTotal};

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) name: Arc<str>,
    pub(crate) buffer: Buffer,
    pub(crate) group: GroupTotal,
    started: AtomicBool,
    start: AtomicWaker,
    /// The background task's stop signal, until the counter is closed. Whatever the task sends
    /// to the store, it sends while holding this lock and seeing the signal still there, so
    /// that nothing is sent once [`close`](Shared::close) has returned.
    open: Mutex<Option<oneshot::Sender<()>>>,
}

impl Shared {
    /// The shared state, and the receiving end of its stop signal for the background task.
    pub(crate) fn new(name: Arc<str>) -> (Self, oneshot::Receiver<()>) {
        let (stop, stopped) = oneshot::channel();
        let shared = Self {
            name,
            buffer: Buffer::default(),
            group: GroupTotal::default(),
            started: AtomicBool::new(false),
            start: AtomicWaker::new(),
            open: Mutex::new(Some(stop)),
        };
        (shared, stopped)
    }

    /// Stops the background task for good: nothing is sent to the store after this returns,
    /// and the group's total is no longer known.
    pub(crate) fn close(&self) {
        let sender = self.lock_open().take();
        drop(sender);
        self.group.set(None);
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

    /// The hot path: one compare-and-swap, two loads, and a wake only on the very first call.
    #[inline]
    pub(crate) fn increment(&self, amount: u64) -> Result<u64, AmountError> {
        let buffered = self.buffer.add(amount)?;
        if !self.started.load(Ordering::Relaxed) {
            self.start();
        }
        Ok(tally::count(self.group.get(), buffered))
    }

    /// What `increment(0)` would return, without starting anything.
    pub(crate) fn count(&self) -> u64 {
        tally::count(self.group.get(), self.buffer.get())
    }

    #[cold]
    fn start(&self) {
        if !self.started.swap(true, Ordering::AcqRel) {
            self.start.wake();
        }
    }

    /// Completes once the first increment has happened.
    pub(crate) async fn started(&self) {
        poll_fn(|cx| {
            if self.started.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            self.start.register(cx.waker());
            if self.started.load(Ordering::Acquire) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}
