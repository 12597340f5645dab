//! The flush loops' decisions, as pure functions of what they are told, with no I/O and no
//! clock of their own: each is handed the time.
//!
//! - [`settling`]: what to do with a flush in the air after each event: send a copy, wait,
//!   settle it as counted, put it back, or give it up; with its [`backoff`] and the
//!   [`round_trip`] estimate that times copies out.
//! - [`aim`]: which interval a flush will land in, and when to send it.
//! - [`pause`]: how long to wait before the next flush.
//! - [`lanes`] and [`steadiness`]: when a store is farther away than an interval, flushing
//!   through more than one lane, and telling a far store from a queue.

pub(crate) mod aim;
pub(crate) mod backoff;
pub(crate) mod lanes;
pub(crate) mod pause;
pub(crate) mod round_trip;
pub(crate) mod settling;
pub(crate) mod steadiness;
