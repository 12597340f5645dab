//! Distributed counting on Redis through the [redis-rs](redis) client.
//!
//! Every participant of a distributed system holds a [`Counter`]; [`Counter::increment`] adds to
//! a local buffer and returns at once the best lower bound on what the whole group has counted.
//! Once an interval the counter's [`Worker`] sends the buffer to Redis, where one Lua script adds
//! it to the running total of the interval the server's clock is in and answers with the total
//! of the interval before. A fence key per participant makes sure a participant adds to each
//! interval at most once, whatever the client replays.
//!
//! This crate provides [`RedisStore`], the [`Store`] for redis-rs 1.x async connections, and
//! re-exports both [`comcount_core`] (everything at the crate root) and [`redis`], so one
//! dependency is enough.
//!
//! # A complete program
//!
//! It counts 1,000 requests a second for five seconds, prints what it knows of the fleet's
//! count once a second, and sends what is left before it exits.
//!
//! ```no_run
//! # #[cfg(all(feature = "tokio", feature = "connection-manager"))]
//! # mod program {
//! use std::time::Duration;
//!
//! use comcount_redis_rs::{Counter, RedisStore, clock::TokioTimer};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // One connection for every counter of the process; it reconnects by itself.
//!     let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
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
//! # }
//! # fn main() {}
//! ```
//!
//! Alone against a local Redis, from the third second on it prints `count 1000, fleet total
//! last interval Some(1000)`: the fleet's 1,000 of the interval before. `close()` instead of
//! `drain` stops at once and sends nothing more.
//!
//! # Features
//!
//! | feature | default | gives |
//! | --- | --- | --- |
//! | `tokio` | yes | redis-rs on tokio (`redis/tokio-comp`) and `clock::TokioTimer` |
//! | `connection-manager` | yes | redis-rs's reconnecting `redis::aio::ConnectionManager` |
//! | `smol` | no | redis-rs on smol (`redis/smol-comp`) and `clock::SmolTimer` |
//! | `cluster` | no | Redis Cluster through `redis::cluster_async::ClusterConnection` |
//! | `tokio-rustls` | no | TLS (`rediss://`) on tokio through rustls (`redis/tokio-rustls-comp`), with ring as rustls's crypto provider |
//! | `smol-rustls` | no | the same on smol (`redis/smol-rustls-comp`) |
//! | `sentinel` | no | Redis Sentinel: `redis::sentinel` (`redis/sentinel`), and [`SentinelConnection`], which follows the primary through a failover; turns on `connection-manager` |
//! | `tracing` | no | the core's `diagnostics::TracingDiagnostics`: events as `tracing` events with typed fields |
//! | `metrics` | no | the core's `diagnostics::MetricsDiagnostics`: events as metrics through the `metrics` facade |
//!
//! One of `tokio` or `smol` is needed. With both on, redis-rs uses tokio inside a tokio runtime
//! and smol elsewhere; with TLS and both runtimes, enable both TLS features.
//!
//! The TLS features trust the system's certificates; a private authority is added with
//! `redis::Client::build_with_tls`. rustls picks ring by itself only while no other crate
//! turns on another provider of its (aws-lc-rs); if one does, install one for the process at
//! start, `rustls::crypto::ring::default_provider().install_default()`.
//!
//! Counters can share one connection: build each with a clone of the store.
//!
//! # Connections that survive
//!
//! A counter flushes for as long as the process runs, across server restarts, failovers and
//! dropped connections, so its connection must reconnect. [`RedisStore::connect`] opens a
//! `ConnectionManager` (feature `connection-manager`, on by default) and
//! [`RedisStore::connect_cluster`] a cluster connection (feature `cluster`), both with
//! timeouts and retries chosen for a counter: [`RedisStore::manager_config`] and
//! [`RedisStore::cluster_builder`] say which and why, and are where to start to build one
//! yourself. A bare `MultiplexedConnection` (`get_multiplexed_async_connection`) never
//! reconnects: once it is lost every flush fails, and the counter warns of it when it starts.
//!
//! # One URL
//!
//! [`RedisStore::connect_any`] reads the URL forms fred reads, so one setting serves both
//! crates, and opens what the scheme names, as an [`AnyConnection`]:
//!
//! - `redis://host:port/db`, `rediss://`, `redis+unix:///path`: one server, through the
//!   `ConnectionManager` of [`RedisStore::connect`];
//! - `redis-cluster://host:port?node=host:port&node=...` (feature `cluster`): the cluster
//!   connection of [`RedisStore::connect_cluster`], seeded with every node named;
//! - `redis-sentinel://host:26379?sentinelServiceName=NAME&node=host:port` (feature
//!   `sentinel`): the primary those sentinels name, through a
//!   [`SentinelConnection`], which asks them again when a
//!   failover makes a command fail, and moves to the primary they name.
//!
//! ```no_run
//! # #[cfg(all(feature = "cluster", feature = "tokio"))]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use comcount_redis_rs::RedisStore;
//!
//! let store =
//!     RedisStore::connect_any("redis-cluster://10.0.0.1:7000?node=10.0.0.2:7000").await?;
//! # Ok(())
//! # }
//! ```
//!
//! A URL that is none of these, or whose scheme needs a feature this build leaves out, is a
//! [`ConnectError`] that says what to write or which feature to turn on.
//!
//! # On smol
//!
//! The same store, on smol's executor and timer. redis-rs's smol runtime and the smol timer
//! run under async-std's executor too, or any other (they drive themselves).
//!
//! ```no_run
//! # #[cfg(all(feature = "smol", feature = "connection-manager"))]
//! # fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use comcount_redis_rs::{Counter, RedisStore, clock::SmolTimer};
//!
//! smol::block_on(async {
//!     let store = RedisStore::connect("redis://127.0.0.1/").await?;
//!     let (counter, worker) = Counter::builder("requests", Duration::from_secs(5))
//!         .build(store, SmolTimer::new())?;
//!     smol::spawn(worker).detach();
//!     counter.increment(1);
//!     Ok(())
//! })
//! # }
//! ```
//!
//! # Redis Cluster
//!
//! Every key of a counter carries its name as a hash tag, `prefix{name}:N` for the total of
//! interval `N` and `prefix{name}:f:ID` for a participant's fence, so all keys of one counter
//! live in one slot and the script declares every key it touches: it runs on the node that owns
//! the counter's slot, and follows that slot through resharding and failover. Different
//! counters spread over the cluster by name.
//!
//! ```no_run
//! # #[cfg(all(feature = "cluster", feature = "tokio"))]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use comcount_redis_rs::{Counter, RedisStore, clock::TokioTimer};
//!
//! let store =
//!     RedisStore::connect_cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]).await?;
//! let (counter, worker) = Counter::builder("requests", Duration::from_secs(5))
//!     .build(store, TokioTimer::new())?;
//! tokio::spawn(worker);
//! counter.increment(1);
//! # Ok(())
//! # }
//! ```
//!
//! The cluster client retries a command whose connection dropped, and one that ran into its
//! response timeout, so a flush may reach the server twice. The participant's fence turns the
//! second copy into a duplicate: it is never counted twice. Since only the last attempt's
//! answer comes back, a flush the cluster client fails is taken as perhaps applied: refused
//! after such a retry, it is reported `unsettled`, not `dropped`. `SCRIPT LOAD` goes to every primary,
//! so a primary that was promoted or restarted gets the script on the first `NOSCRIPT`.
//!
//! # Errors
//!
//! A flush that fails never reaches the caller of `increment`; the counter reports it as
//! `flush failed`. The store sorts redis-rs errors into the kinds of [`StoreErrorKind`] by the
//! server's error code, whether redis-rs knows the code ([`redis::ErrorKind::Server`]) or not
//! ([`redis::ErrorKind::Extension`]), and whether the server refused the `EVALSHA` or a
//! command of the script got the error. An error reply that says "not now" (`MOVED`, `ASK`,
//! `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `BUSY`), or that refuses the script's
//! first write for the server's state (`READONLY`, `NOREPLICAS`, `OOM`, `MISCONF`), is
//! [`Unavailable`](StoreErrorKind::Unavailable), sent again after a backoff. One that says the
//! user lacks a permission (`NOPERM`, or the `ERR` a command of the script gets from the ACL)
//! is [`Refused`](StoreErrorKind::Refused), and its text says what to grant (the README's ACL
//! notes list it all). Any other error reply (a script error, an overflowing total) is
//! [`Refused`](StoreErrorKind::Refused), nothing written. A lost connection, a timeout or an
//! error line without an upper-case code (a proxy's, say) is
//! [`Unanswered`](StoreErrorKind::Unanswered); a reply that is not the script's is
//! [`Malformed`](StoreErrorKind::Malformed).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(any(feature = "tokio", feature = "smol")))]
compile_error!(
    "comcount-redis-rs needs an async runtime for redis-rs: enable the `tokio` feature \
     (the default) or the `smol` feature"
);

// The one-line constructors need a reconnecting connection: without either, nothing is left.
#[cfg(any(feature = "connection-manager", feature = "cluster"))]
mod any;
#[cfg(any(feature = "connection-manager", feature = "cluster"))]
mod connect;
mod errors;
mod reply;
#[cfg(feature = "sentinel")]
mod sentinel;
mod store;
#[cfg(any(feature = "connection-manager", feature = "cluster"))]
mod urls;

#[cfg(any(feature = "connection-manager", feature = "cluster"))]
pub use any::AnyConnection;
pub use comcount_core::*;
pub use redis;
#[cfg(feature = "sentinel")]
pub use sentinel::SentinelConnection;
pub use store::RedisStore;
#[cfg(any(feature = "connection-manager", feature = "cluster"))]
pub use urls::ConnectError;

/// The README crates.io shows, its examples compiled as doctests.
#[cfg(all(doctest, feature = "tokio"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
