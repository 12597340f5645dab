//! Reads what Redis holds for [comcount](https://docs.rs/comcount-core) counters and families:
//! the totals of the last intervals by the server's clock, the top keys of a family, and the
//! participants that flushed, with their fences. It writes nothing.
//!
//! A [`Reader`] reads through any redis-rs async connection and returns plain data:
//! [`CounterReport`], [`FamilyKeyReport`] and [`FamilyReport`], each of which also prints as a
//! small table. The `comcount` command of this crate prints them from a shell.
//!
//! ```no_run
//! use std::time::Duration;
//! use comcount_inspect::Reader;
//!
//! # async fn run() -> Result<(), comcount_inspect::Error> {
//! // The prefix and the interval the counters are built with: the interval numbers them.
//! let connection = comcount_inspect::connect("redis://127.0.0.1:6379").await?;
//! let mut reader = Reader::new(connection, "app:", Duration::from_secs(1))?.intervals(3)?;
//!
//! let requests = reader.counter("requests").await?;
//! let last = &requests.intervals[1]; // newest first: [0] is the open interval
//! println!("interval {}: {:?}", last.interval, last.total);
//! for fence in &requests.fences {
//!     println!("{} last flushed in {} (seq {})", fence.participant, fence.interval, fence.seq);
//! }
//!
//! // A family of 8 partitions: one key, and the 10 keys counted most.
//! let acme = reader.family_key("tenants", 8, "acme").await?;
//! println!("{acme}");
//! let tenants = reader.family_top("tenants", 8, 10).await?;
//! for key in &tenants.top {
//!     println!("{}: {}", key.key, key.sum);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # The command
//!
//! ```text
//! comcount inspect --url redis://127.0.0.1:6379 --prefix app: --interval-ms 1000 counter requests
//! comcount inspect --interval-ms 1000 --partitions 8 family tenants acme
//! comcount inspect --interval-ms 1000 --partitions 8 --top 5 family tenants
//! ```
//!
//! `comcount inspect --help` lists every option. It exits with 0 once it has printed, 1 when
//! Redis could not be read, and 2 for a command line it does not take.
//!
//! # What it reads
//!
//! The keys are those of the
//! [flush protocol](https://github.com/comcount/comcount-rs/blob/main/docs/protocol.md), named
//! by [`KeySpace`](comcount_core::KeySpace): a counter `NAME` with prefix `P` keeps interval
//! `N`'s total in `P{NAME}:N` and each participant's fence (`SEQ:N`, its last applied flush) in
//! `P{NAME}:f:ID`; partition `p` of a family keeps a hash of totals per interval in
//! `P{NAME@p}:N`, and its fences beside it. `N` is the server's time in ms divided by the
//! interval in ms, so the interval given must be the counters' own.
//!
//! Interval keys expire three intervals after their last flush: the open interval and the two
//! before it are always readable, older ones are soon gone. Fences live ten minutes (or three
//! intervals, if longer) after a participant's last applied flush: a participant that stopped
//! recently is listed too, with its last interval.
//!
//! # Features
//!
//! | feature | default | gives |
//! | --- | --- | --- |
//! | `cluster` | no | Redis Cluster: [`Reader`] on a `redis::cluster_async::ClusterConnection`, `connect_cluster`, and `comcount inspect --cluster` |

#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;
mod error;
mod reader;
mod report;
mod table;

#[cfg(feature = "cluster")]
pub use connect::connect_cluster;
pub use connect::{TIMEOUT, connect};
pub use error::Error;
pub use reader::{DEFAULT_INTERVALS, MAX_INTERVALS, Reader};
pub use report::{
    CounterReport, FamilyInterval, FamilyKeyReport, FamilyReport, IntervalTotal, KeyTotals,
    ParticipantFence, ServerTime, Totals,
};

pub use comcount_core::ParticipantId;
pub use redis;

/// This crate's README (the one crates.io shows), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
