//! Distributed counting on Redis through the [fred] client.
//!
//! Every participant of a distributed system holds a [`Counter`]; [`Counter::increment`] adds to
//! a local buffer and returns at once the best lower bound on what the whole group has counted.
//! Once an interval the counter's [`Worker`] sends the buffer to Redis, where one Lua script adds
//! it to the running total of the interval the server's clock is in and answers with the total
//! of the interval before. A fence key per participant makes sure a participant adds to each
//! interval at most once, whatever the client replays.
//!
//! This crate provides [`FredStore`], the [`Store`] for fred 10 clients and pools on tokio, and
//! re-exports both [`comcount_core`] (everything at the crate root) and [`fred`], so one
//! dependency is enough.
//!
//! # Usage
//!
//! A complete program: it counts 1,000 requests a second for five seconds, prints what it
//! knows of the fleet's count once a second, and sends what is left before it exits.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use comcount_fred::{Counter, FredStore, clock::TokioTimer};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // A client that reconnects for ever, initialized; every counter may share it.
//!     let store = FredStore::connect("redis://127.0.0.1:6379").await?;
//!     let (requests, worker) = Counter::builder("requests", Duration::from_secs(1))
//!         .prefix("demo:")
//!         .build(store, TokioTimer::new())?;
//!     tokio::spawn(worker); // sends the local count to Redis once a second
//!
//!     let mut tick = tokio::time::interval(Duration::from_millis(10));
//!     for step in 1..=500 {
//!         tick.tick().await;
//!         let mut count = 0;
//!         for _ in 0..10 {
//!             count = requests.increment(1); // one atomic add: no lock, no I/O
//!         }
//!         if step % 100 == 0 {
//!             let total = requests.group_total();
//!             println!("{} s: count {count}, fleet total last interval {total:?}", step / 100);
//!         }
//!     }
//!     // Send what is still buffered before the process exits.
//!     let unsent = requests.drain(Duration::from_secs(3)).await;
//!     println!("stopped with {unsent} units unsent");
//!     Ok(())
//! }
//! ```
//!
//! Alone against a local Redis, from the third second on it prints `count 1000, fleet total
//! last interval Some(1000)`: the fleet's 1,000 of the interval before. `close()` instead of
//! `drain` stops at once and sends nothing more. The client is yours to quit.
//!
//! fred needs tokio: the store works on tokio's runtime only, with
//! [`TokioTimer`](clock::TokioTimer).
//!
//! # Connections that survive
//!
//! A counter flushes for as long as the process runs, across server restarts, failovers and
//! dropped connections, so its client must reconnect, for ever. [`FredStore::connect`] builds
//! one that does, with a connection timeout of a second; [`FredStore::builder`] says why, and
//! gives the same settings to build a pool or add your own. A fred client built without a
//! reconnect policy never reconnects, and one whose policy has a `max_attempts` gives up; the
//! counter warns of either when it starts.
//!
//! A pool works the same way:
//!
//! ```no_run
//! # use std::time::Duration;
//! # use comcount_fred::{Counter, FredStore, clock::TokioTimer};
//! # use comcount_fred::fred::prelude::*;
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = FredStore::builder("redis://127.0.0.1:6379")?.build_pool(4)?;
//! pool.init().await?;
//! let (counter, worker) = Counter::builder("requests", Duration::from_secs(5))
//!     .build(FredStore::new(pool), TokioTimer::new())?;
//! tokio::spawn(worker);
//! # Ok(())
//! # }
//! ```
//!
//! # Redis Cluster
//!
//! Connect with a cluster URL; the store is the same.
//!
//! ```no_run
//! # use std::time::Duration;
//! # use comcount_fred::{Counter, FredStore, clock::TokioTimer};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = FredStore::connect("redis-cluster://10.0.0.1:7000?node=10.0.0.2:7000").await?;
//! let (counter, worker) = Counter::builder("requests", Duration::from_secs(5))
//!     .build(store, TokioTimer::new())?;
//! tokio::spawn(worker);
//! # Ok(())
//! # }
//! ```
//!
//! Every key of a counter carries its name as a hash tag, `prefix{name}:N` for the total of
//! interval `N` and `prefix{name}:f:ID` for a participant's fence, so all keys of one counter
//! live in one slot; the store sends each `EVALSHA` to the node of that slot and fred follows
//! `MOVED` and `ASK` through resharding. `SCRIPT LOAD` goes to every primary.
//!
//! # Features
//!
//! | feature | default | gives |
//! | --- | --- | --- |
//! | `enable-rustls-ring` | no | TLS (`rediss://`) through rustls, with ring as rustls's crypto provider (`fred/enable-rustls-ring`) |
//! | `tracing` | no | the core's `diagnostics::TracingDiagnostics`: events as `tracing` events with typed fields |
//! | `metrics` | no | the core's `diagnostics::MetricsDiagnostics`: events as metrics through the `metrics` facade |
//!
//! With it, `Config::from_url("rediss://...")` trusts the system's certificates; a private
//! authority goes in `Config::tls`, from a `rustls::ClientConfig` (fred re-exports rustls).
//! Sentinel needs no feature: `ServerConfig::new_sentinel`.
//!
//! # Replayed commands
//!
//! fred writes a command again after a reconnection, up to `max_command_attempts` times (3 by
//! default). The store turns that off for its own `EVALSHA` (`Options { fail_fast: true }` on
//! each flush), so a flush whose connection closed comes back as an unanswered error instead
//! of being sent again. (It does not do so with `max_attempts: Some(1)`: fred would end the
//! client's connection task at the first `ASK` of a resharding.) That is a courtesy, not what
//! the guarantee rests on: a copy of a flush
//! that reaches the server anyway (from a client that cannot be told, a proxy, or a command
//! already in a socket buffer) meets the participant's fence and is answered as a duplicate,
//! never counted twice.
//!
//! # Errors
//!
//! A flush that fails never reaches the caller of `increment`; the counter reports it as
//! `flush failed`. fred gives an error reply as its text, the server's error code first, whether
//! the server refused the `EVALSHA` or a command of the script got the error; the store sorts
//! it by that code. An error reply that says "not now" (`MOVED`, `ASK`, `TRYAGAIN`,
//! `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `BUSY`), or that refuses the script's first write
//! for the server's state (`READONLY`, `NOREPLICAS`, `OOM`, `MISCONF`), is
//! [`Unavailable`](StoreErrorKind::Unavailable), sent again after a backoff. One that says the
//! user lacks a permission (`NOPERM`, or the `ERR` a command of the script gets from the ACL)
//! is [`Refused`](StoreErrorKind::Refused), and its text says what to grant (the README's ACL
//! notes list it all). Any other error reply (a script error, an overflowing total) is
//! [`Refused`](StoreErrorKind::Refused), nothing written. A lost connection, a timeout or a
//! command fred gave up on is [`Unanswered`](StoreErrorKind::Unanswered); a reply that is not
//! the script's is [`Malformed`](StoreErrorKind::Malformed).
//!
//! fred drops a connection on a `CLUSTERDOWN` reply and hands that reply to every command still
//! waiting on it, some of which may have run. The counter allows for it: a flush with a copy
//! turned away is reported dropped only once its fence proves that no copy landed or can.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;
mod errors;
mod reply;
mod store;

pub use comcount_core::*;
pub use fred;
pub use store::FredStore;

/// The README crates.io shows, its examples compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
