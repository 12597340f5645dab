//! Support shared by the core's integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod applies;
pub mod runtime;
pub mod scripted;
pub mod sim;
