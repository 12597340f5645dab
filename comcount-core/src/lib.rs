//! Distributed counting: every participant counts locally and learns the group's total.
//!
//! Each participant of a distributed system holds a [`Counter`]. [`Counter::increment`] adds to
//! a local buffer and returns at once the best lower bound on what the whole group has counted:
//! the larger of the group's total over the last closed interval and this participant's unsent
//! buffer. Once an interval, the counter's [`Worker`] sends the buffer to a [`Store`], which adds
//! it to the running total of the interval its own clock is in and answers with the total of the
//! interval before.
//!
//! The total is never overstated: the store fences every participant so that it adds to each
//! interval at most once, and applies each flush at most once, whatever a client replays. It may
//! be understated, when a flush is lost or lands late.
//!
//! To count per something (requests per tenant, calls per API key), a [`Family`] holds any
//! number of keys under one name and interval, each answering as a counter does, and sends them
//! together: one flush per partition and interval, whatever the number of keys.
//!
//! This crate holds the counter, its tick and the [`Store`] contract, with no async runtime of
//! its own: the [`Worker`] is a future for any executor, and time comes from a
//! [`Timer`](clock::Timer) (`tokio` and `smol` features, or a
//! [`VirtualClock`](clock::VirtualClock) in tests). [`MemoryStore`] keeps totals in this process;
//! the `comcount-redis-rs` and `comcount-fred` crates keep them in Redis.
//!
//! ```
//! use std::time::Duration;
//! use comcount_core::{Counter, MemoryStore, clock::VirtualClock};
//! use futures::{FutureExt, executor::LocalPool, task::LocalSpawnExt};
//!
//! let clock = VirtualClock::new();
//! let store = MemoryStore::with_clock(clock.clone());
//! let mut pool = LocalPool::new();
//! let mut counters = Vec::new();
//! for _ in 0..2 {
//!     let (counter, worker) = Counter::builder("requests", Duration::from_secs(1))
//!         .build(store.clone(), clock.clone())?;
//!     pool.spawner().spawn_local(worker).unwrap();
//!     counters.push(counter);
//! }
//! // Each participant counts 5 in the first interval...
//! for counter in &counters {
//!     counter.increment(5);
//! }
//! // The first flushes go out at once and add both buffers to interval 0.
//! pool.run_until_stalled();
//! assert_eq!(store.total("{requests}:0"), Some(10));
//! // The next flushes aim at the middle of interval 1 and bring back interval 0's total:
//! // each participant now knows the group reached 10.
//! clock.advance(Duration::from_millis(1500));
//! pool.run_until_stalled();
//! assert_eq!(counters[0].increment(0), 10);
//! assert_eq!(counters[1].group_total(), Some(10));
//! # Ok::<(), comcount_core::ConfigError>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod builder;
pub mod clock;
pub mod diagnostics;
mod engine;
mod error;
mod handle;
mod protocol;
mod sync;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use engine::worker::Worker;
pub use error::{AmountError, ConfigError, KeyError, StoreError, StoreErrorKind};
pub use handle::counter::Counter;
pub use handle::family::{Family, KeyCounter};
pub use handle::settings::{MAX_NAME_LEN, MAX_PREFIX_LEN};
pub use handle::timing::Timing;
pub use protocol::boxed::BoxStore;
pub use protocol::keys::{self, KeySpace, Layout};
pub use protocol::memory::MemoryStore;
pub use protocol::participant::ParticipantId;
pub use protocol::reply::{Fence, FlushReply, Outcome};
pub use protocol::request::{Entry, FlushRequest};
pub use protocol::script;
pub use protocol::store::Store;

/// This crate's own README (the one crates.io shows), compiled and run as doctests.
#[cfg(all(doctest, feature = "tokio"))]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
