//! Tools for your own tests (feature `testing`): a store that does what each test tells it to,
//! a store that writes down what passes through it, and the conformance suite a
//! [`Store`](crate::Store) of your own must pass.
//!
//! - [`ScriptedStore`] answers flushes as a queue of [`Step`]s says: passes them to a
//!   [`MemoryStore`](crate::MemoryStore), answers with a reply of your choosing, fails, hangs
//!   (for good, or until released) or applies a flush twice, as a client that resends after a
//!   reconnect does; and keeps every request it received. With a
//!   [`VirtualClock`](crate::clock::VirtualClock) and a
//!   [`Recorder`](crate::diagnostics::Recorder), it shows what your code does when the store
//!   misbehaves, without a network or a real clock.
//! - [`Recorded`] passes every flush on to another store and tells a [`FlushLog`] of your own
//!   of each copy sent and each answer: copies counted, replies looked at, flushes cut off.
//! - [`conformance`] holds the behaviours of the flush protocol as functions, one per rule,
//!   that check a store through its replies alone.
//!
//! None needs an async runtime: their futures run on any executor.

pub mod conformance;
mod recorded;
mod scripted;
mod sleep;

pub use recorded::{FlushLog, Recorded};
pub use scripted::{ScriptedStore, Step};
