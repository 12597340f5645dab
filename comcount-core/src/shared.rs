//! The state a counter's handles share with its background task.

use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

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
}

impl Shared {
    pub(crate) fn new(name: Arc<str>) -> Self {
        Self {
            name,
            buffer: Buffer::default(),
            group: GroupTotal::default(),
            started: AtomicBool::new(false),
            start: AtomicWaker::new(),
        }
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
