//! The auto traits of the public handles: they go to any thread, and across `catch_unwind`.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

use std::panic::{self, RefUnwindSafe, UnwindSafe};
use std::time::Duration;

use comcount_core::clock::VirtualClock;
use comcount_core::{Counter, Family, KeyCounter, MemoryStore};

const fn handle<T: Send + Sync + UnwindSafe + RefUnwindSafe>() {}

// Checked when this file compiles: a handle that lost one of these traits fails the build.
const _: () = {
    handle::<Counter>();
    handle::<Family>();
    handle::<KeyCounter>();
};

#[test]
fn a_handle_counts_on_after_a_panic_it_was_borrowed_across() {
    let (counter, _worker) = Counter::builder("requests", Duration::from_secs(1))
        .build(MemoryStore::new(), VirtualClock::new())
        .unwrap();
    let (family, _family_worker) = Family::builder("tenants", Duration::from_secs(1))
        .build(MemoryStore::new(), VirtualClock::new())
        .unwrap();
    let acme = family.counter("acme").unwrap();

    // No `AssertUnwindSafe`: the closure borrows the handles as they are.
    let caught = panic::catch_unwind(|| {
        counter.increment(2);
        family.increment("globex", 3);
        acme.increment(4);
        // An amount over i64::MAX panics, and counts nothing.
        counter.increment(u64::MAX);
    });
    assert!(caught.is_err());

    assert_eq!(counter.increment(1), 3);
    assert_eq!(family.increment("globex", 1), 4);
    assert_eq!(acme.increment(1), 5);
    assert_eq!(family.count("acme"), 5);

    // Owned handles move into a closure as well.
    let moved = counter.clone();
    let caught = panic::catch_unwind(move || moved.increment(u64::MAX));
    assert!(caught.is_err());
    assert_eq!(counter.increment(0), 3);
}
