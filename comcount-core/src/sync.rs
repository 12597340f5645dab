//! Atomics, from loom when the buffer is model-checked (`--cfg comcount_loom`, in the
//! `comcount-loom` crate), from std otherwise.

#[cfg(comcount_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(comcount_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
