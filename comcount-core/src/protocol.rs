//! The flush protocol: what a flush carries ([`request`]), what the store answers
//! ([`reply`]), the contract every store keeps ([`store`]), where keys live in Redis
//! ([`keys`]) and the script that runs a flush there ([`script`]), and the stores this crate
//! brings: [`MemoryStore`](crate::MemoryStore) and [`BoxStore`](crate::BoxStore).
//!
//! Nothing here knows of counters, workers or time beyond the interval numbers a request
//! carries: a store, or a reader in another language, needs only this layer.

pub(crate) mod boxed;
pub mod keys;
pub(crate) mod memory;
pub(crate) mod participant;
pub(crate) mod reply;
pub(crate) mod request;
pub mod script;
pub(crate) mod script_loader;
pub(crate) mod store;
