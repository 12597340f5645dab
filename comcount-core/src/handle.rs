//! What an application holds: the [`Counter`](crate::Counter) and [`Family`](crate::Family)
//! handles, their settings, and the buffers and totals they share with their worker.
//!
//! `increment` touches only this layer: it adds to a key's buffer ([`tally`]) and reads the
//! total last learned, with no lock and no I/O. Everything the worker needs of a handle is in
//! [`shared`].

pub(crate) mod counter;
pub(crate) mod family;
pub(crate) mod registry;
pub(crate) mod sequence;
pub(crate) mod settings;
pub(crate) mod shared;
pub(crate) mod slot;
pub(crate) mod tally;
pub(crate) mod timing;
