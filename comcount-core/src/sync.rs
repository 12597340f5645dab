//! Atomics, and the wait of the worker side, from loom when the buffer is model-checked
//! (`--cfg comcount_loom`, in the `comcount-loom` crate), from std otherwise.

#[cfg(comcount_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(comcount_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

/// Lets another thread run while this one waits for it to finish a few instructions.
///
/// The thread waited for may have been preempted in the middle of them, so this gives up the
/// core rather than spinning on it. Under loom, it lets the model schedule another thread.
#[cfg(comcount_loom)]
pub(crate) fn spin() {
    loom::thread::yield_now();
}

/// Lets another thread run while this one waits for it to finish a few instructions.
///
/// The thread waited for may have been preempted in the middle of them, so this gives up the
/// core rather than spinning on it. Under loom, it lets the model schedule another thread.
#[cfg(not(comcount_loom))]
pub(crate) fn spin() {
    std::thread::yield_now();
}
