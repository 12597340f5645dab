//! What the integration tests share: Redis servers started for them, clients, key inspection,
//! a flush recorder, the invariants every fleet test checks (key by key, for counters and
//! families), skewed keys, the conformance suite every store passes, a throwaway TLS authority,
//! and what the benchmark examples have in common.

pub mod bench;
pub mod cluster;
pub mod cluster_admin;
pub mod conformance;
pub mod connect;
pub mod faulty_fleet;
pub mod inspect;
pub mod invariants;
pub mod proxy;
pub mod reader;
pub mod recording;
pub mod sentinel;
pub mod server;
pub mod settings;
pub mod shared;
pub mod tls;
pub mod zipf;

/// The root README's examples, compiled (and those that need no server, run) as doctests here,
/// where every crate and client they use is a dependency.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// The examples of the diagnostics reference, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/diagnostics.md")]
struct DiagnosticsDoctests;
