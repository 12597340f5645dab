//! The background task: the [`Worker`](crate::Worker) and its flush loops.
//!
//! The worker ([`worker`]) runs one flush loop ([`flusher`]) per partition and lane. A loop
//! takes the buffers as a flush ([`batch`]), sends its copies ([`flight`]) and settles it as
//! the pure [`policy::settling`] core decides, keeps a flush whose fate is unknown until a
//! later reply tells it ([`doubt`]), learns the group's totals and forgets them once stale
//! ([`freshness`]), and tells when the store answers too slowly ([`slow_alarm`]). Every
//! decision that needs no I/O is in [`policy`].

pub(crate) mod batch;
pub(crate) mod doubt;
pub(crate) mod flight;
pub(crate) mod flusher;
pub(crate) mod freshness;
pub(crate) mod parts;
pub(crate) mod policy;
pub(crate) mod slow_alarm;
pub(crate) mod worker;
