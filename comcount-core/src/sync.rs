//! Atomics, from loom when the crate is model-checked (`--cfg comcount_loom`), from std otherwise.

#[cfg(comcount_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(comcount_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
