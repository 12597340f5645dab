//! The counter's buffer, model-checked with loom.
//!
//! This crate compiles the core's buffer (`tally.rs`) with the modules it uses, straight from
//! the core's source, so that the model runs against the very code that ships. With
//! `--cfg comcount_loom` its atomics come from loom and the buffer's loom tests run:
//!
//! ```sh
//! RUSTFLAGS="--cfg comcount_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p comcount-loom --release --lib
//! ```
//!
//! Built as part of the core instead, those tests would need every dev-dependency of the core
//! rebuilt under the flag.
#![allow(dead_code, unreachable_pub, missing_docs)]

#[path = "../../../comcount-core/src/error.rs"]
mod error;
#[path = "../../../comcount-core/src/sync.rs"]
mod sync;
#[path = "../../../comcount-core/src/handle/tally.rs"]
mod tally;
