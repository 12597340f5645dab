//! Fleet-wide rate limits for [tower](https://docs.rs/tower) and
//! [axum](https://docs.rs/axum) services, with no round trip per request.
//!
//! [`RateLimitLayer`] takes a key from each request (an API key header, the peer's address, a
//! route), counts the request under it in a [`comcount_core::Family`], and answers it itself,
//! `429 Too Many Requests` by default, once the key has passed its limit. Every instance of a
//! service that counts in the same family (the same name, on the same store) shares each
//! key's count, so the limit holds for the fleet, not for each instance: a limiter that counts
//! alone lets a fleet of `P` instances through `P` times the limit.
//!
//! The decision makes no I/O: a request costs one lookup of its key (three with
//! [`Counting::Admitted`]), and the family's worker sends every key's count to the store once an
//! interval, in one round trip per partition. The family's interval is the limit's window:
//! a limit of 100 on a family of 1 s is 100 requests a second.
//!
//! ```
//! use std::borrow::Cow;
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use comcount_core::{Family, MemoryStore, clock::VirtualClock};
//! use comcount_tower::RateLimitLayer;
//! use futures::{executor::LocalPool, task::LocalSpawnExt};
//! use http::{Request, Response, StatusCode};
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! // The family is built as any other: on Redis in production (comcount-redis-rs or
//! // comcount-fred), with its worker spawned on your runtime. Here on the in-memory store,
//! // on virtual time, with the worker on a local executor.
//! let clock = VirtualClock::new();
//! let (family, worker) = Family::builder("api", Duration::from_secs(1))
//!     .max_keys(10_000)
//!     .build(MemoryStore::with_clock(clock.clone()), clock.clone())?;
//! let mut pool = LocalPool::new();
//! pool.spawner().spawn_local(worker)?;
//!
//! // Two requests per API key and second, across every instance counting in "api".
//! let layer = RateLimitLayer::new(family, 2, |request: &Request<()>| {
//!     let key = request.headers().get("x-api-key")?.to_str().ok()?;
//!     Some(Cow::Borrowed(key))
//! });
//! let service = layer.layer(service_fn(|_request: Request<()>| async {
//!     Ok::<_, Infallible>(Response::new(String::from("hello")))
//! }));
//! let mut call = |key: &str| {
//!     let request = Request::builder().header("x-api-key", key).body(()).unwrap();
//!     let response = pool.run_until(service.clone().oneshot(request));
//!     pool.run_until_stalled(); // the worker's turn
//!     response.map(|response| response.status())
//! };
//!
//! // The first request starts the family's flushes; the store answers the first at once.
//! assert_eq!(call("globex")?, StatusCode::OK);
//! assert_eq!(call("acme")?, StatusCode::OK);
//! assert_eq!(call("acme")?, StatusCode::OK);
//! assert_eq!(call("acme")?, StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(call("globex")?, StatusCode::OK);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The crate's example, `axum_limit`, is an axum service with a limit per API key, on Redis
//! when one answers and on the in-memory store otherwise.
//!
//! # What it guarantees
//!
//! The count a decision reads is what `Family::increment` returns: the larger of the key's
//! group total over the last closed interval and this instance's count not yet sent. Both
//! halves are lower bounds on what was counted, so:
//!
//! - **No false rejection.** A request is refused only when the group counted more than the
//!   limit in one interval of the store, or this instance alone counted more since its last
//!   flush ([`decide`]); a count never overstates. A request counts in the interval its
//!   flush lands in, and a flush carries what was counted since the one before: one
//!   interval's worth while flushes go out every interval, which is the case a steady load
//!   at the limit never is refused in. An instance's first flushes, and the first of a
//!   partition that had nothing to send for an interval, can carry up to about an interval
//!   and a half: a key whose traffic starts then, at its limit, can be
//!   counted past it once. While the store does not answer (no reply for two intervals, or
//!   the family closed), the instance's unsent count grows over as many intervals as that
//!   lasts, and is not held against the limit: only a group total still fresh refuses then.
//!   Whether the store answers is the family's to say, not a partition's: on a Redis Cluster
//!   where one shard stops answering while the others still do, the keys of that shard's
//!   partitions are still held to their unsent counts, which then span the outage.
//! - **Over-admission is bounded by the instances.** A key's group total arrives about an
//!   interval late, and each instance knows only its own unsent count of the interval under
//!   way. So in the interval where a key's traffic starts (a burst, or an instance that has
//!   just started and knows no total yet), each of `P` instances may let the whole limit
//!   through before the total catches up: up to `P` times the limit, as separate limiters
//!   would, and up to as much again in the next interval, before the first total arrives
//!   with the flush in its middle. Once the total is known, [`Counting::Every`] holds the fleet to the limit.
//!   Measured with three axum instances on one Redis, a limit of 20 an interval and a key
//!   asking 60 evenly over them (`tests/tests/tower_fleet.rs` in the repository): 60
//!   admitted in the first interval, 25 to 60 in the second, up to 20 in the third, none
//!   after (the first total reaches each instance with its first flush after the key's
//!   first interval has ended, about half an interval to an interval late). An instance that
//!   joins a fleet holds nothing against the limit until the store's first reply (a round
//!   trip after its first request), then its own count until a reply brings the key's total:
//!   it let through 1 to 23 requests of a key the fleet was refusing, within 180 ms. While
//!   the store does not answer, keys whose totals went stale are not limited: the limiter
//!   fails open rather than refuse what it cannot count.
//!
//! # Which requests count
//!
//! [`Counting::Every`], the default, counts every request, refused ones included, with one
//! lookup of the key: once a key's total is known, the fleet admits no more than its limit,
//! and a client that keeps asking for more is refused until it slows down.
//! [`Counting::Admitted`] counts only the requests let through, at the cost of two lookups
//! more, and lets a client that keeps asking past its limit through in waves. [`Counting`]
//! has the figures.
//!
//! # Keys from clients
//!
//! A key comes from the client, so nothing about it makes the layer panic, and it cannot grow
//! memory without bound: the family holds at most its `max_keys` (100,000 by default), and
//! forgets keys unused for its `evict_after`.
//!
//! A key the family refuses is **not limited**, and the family reports the refused calls as
//! the diagnostic event `key refused` (`reason` `full`, `too_long` or `empty`), at most once
//! an interval: a new key once the family holds `max_keys`, a key over 256 bytes, an empty
//! key. Keys it already holds keep their limits. The other choice, counting every refused key
//! under one shared overflow key, would refuse a client that never passed its own limit
//! because of what other clients did, which is the false rejection this crate rules out; and
//! a limit per key cannot stop a flood of distinct keys anyway, since each new key starts
//! from nothing: that is authentication's job, or a limit per peer address. Size `max_keys`
//! for the keys in use at once, and watch for `key refused`. A key that may be longer than
//! 256 bytes is best hashed in the key function (with a hash every instance computes alike).
//!
//! # The refusal
//!
//! A refused request never reaches the wrapped service. [`TooManyRequests`] answers it with
//! `429 Too Many Requests` and `Retry-After`: the seconds until the store's current interval
//! ends, by the store's own clock, which every instance shares
//! (`Family::until_interval_end`), rounded up. The total of the interval ending then comes
//! with the flush after it, so a key refused for its group total can be refused once more
//! right after, until that total arrives. While the store's clock is unknown (before its first
//! reply, or while it does not answer) the header is left out. [`RateLimitLayer::on_reject`]
//! builds a response of your own from the [`Rejection`].
#![cfg_attr(docsrs, feature(doc_cfg))]

mod decision;
mod layer;
mod response;

pub use decision::{Decision, Knowledge, decide};
pub use layer::{Counting, RateLimit, RateLimitLayer, ResponseFuture};
pub use response::{OnReject, Rejection, TooManyRequests};

/// This crate's README (the one crates.io shows), compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
