//! `BoxStore`: a store chosen at run time behaves as the store inside it.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

use std::future::{Future, ready};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use comcount_core::clock::VirtualClock;
use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::{
    BoxStore, Counter, FlushReply, FlushRequest, KeySpace, MemoryStore, Outcome, ParticipantId,
    Store, StoreError, StoreErrorKind,
};
use futures::executor::{LocalPool, block_on};
use futures::task::LocalSpawnExt;

/// Refuses every flush, and counts them.
#[derive(Default)]
struct Failing {
    flushes: AtomicU64,
}

impl Store for Failing {
    fn name(&self) -> &str {
        "failing"
    }

    fn caveat(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some("this store refuses every flush".into())
    }

    fn flush(
        &self,
        _request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        ready(Err(StoreError::refused("this store refuses every flush")))
    }
}

/// The store a setting picks, as a service would choose it from its configuration.
fn chosen(failing: bool, memory: &MemoryStore<VirtualClock>, refusals: &Arc<Failing>) -> BoxStore {
    if failing {
        BoxStore::new(refusals.clone())
    } else {
        BoxStore::new(memory.clone())
    }
}

#[test]
fn counters_on_a_boxed_memory_store_share_its_total() {
    let clock = VirtualClock::new();
    let memory = MemoryStore::with_clock(clock.clone());
    let refusals = Arc::new(Failing::default());
    let store = chosen(false, &memory, &refusals);
    let recorder = Recorder::new();
    let mut pool = LocalPool::new();
    let mut counters = Vec::new();
    for _ in 0..2 {
        let (counter, worker) = Counter::builder("requests", Duration::from_secs(1))
            .diagnostics(recorder.clone())
            .build(store.clone(), clock.clone())
            .unwrap();
        pool.spawner().spawn_local(worker).unwrap();
        counters.push(counter);
    }
    for counter in &counters {
        counter.increment(5);
    }
    pool.run_until_stalled();
    assert_eq!(memory.total("{requests}:0"), Some(10));
    clock.advance(Duration::from_millis(1500));
    pool.run_until_stalled();
    assert_eq!(counters[0].increment(0), 10);
    assert_eq!(counters[1].group_total(), Some(10));

    // The box names itself as the store inside it.
    let started = recorder.with_message("counter started");
    assert_eq!(started.len(), 2);
    assert!(
        started
            .iter()
            .all(|r| r.attribute("store") == Some("memory"))
    );
    assert!(recorder.with_message("flush failed").is_empty());
    assert_eq!(refusals.flushes.load(Ordering::SeqCst), 0);
    assert_eq!(format!("{store:?}"), r#"BoxStore("memory")"#);
}

#[test]
fn a_boxed_failing_store_reports_each_refused_flush() {
    let clock = VirtualClock::new();
    let memory = MemoryStore::with_clock(clock.clone());
    let refusals = Arc::new(Failing::default());
    let store = chosen(true, &memory, &refusals);
    let recorder = Recorder::new();
    let mut pool = LocalPool::new();
    let (counter, worker) = Counter::builder("requests", Duration::from_secs(1))
        .diagnostics(recorder.clone())
        .build(store, clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();

    assert_eq!(counter.increment(5), 5);
    pool.run_until_stalled();
    assert_eq!(refusals.flushes.load(Ordering::SeqCst), 1);
    let failed = recorder.with_message("flush failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].attribute("dropped"), Some("5"));
    assert_eq!(failed[0].attribute("unsettled"), Some("0"));
    assert!(
        failed[0]
            .attribute("error")
            .unwrap()
            .contains("refuses every flush")
    );
    assert_eq!(
        recorder.with_message("counter started")[0].attribute("store"),
        Some("failing")
    );
    // Nothing reached the store it was not chosen over, and no total is known.
    assert_eq!(memory.total("{requests}:0"), None);
    assert_eq!(counter.group_total(), None);
}

#[test]
fn a_boxed_store_passes_each_flush_and_its_reply_through() {
    let clock = VirtualClock::new();
    let memory = MemoryStore::with_clock(clock.clone());
    let store = BoxStore::new(memory.clone());
    let report = Reporter::new("requests", Arc::new(Recorder::new()));
    let space = KeySpace::counter("", "requests");
    let request = FlushRequest::new(space, ParticipantId::from_u64(7), 1_000)
        .with_seq(1)
        .with_amount(3);

    let reply = block_on(store.flush(&request, &report)).unwrap();
    assert_eq!(reply.outcome, Outcome::Applied);
    assert_eq!(reply.counted_in, Some(0));
    assert_eq!(memory.total("{requests}:0"), Some(3));

    // The same flush again is a duplicate, as the store itself answers.
    let again = block_on(store.flush(&request, &report)).unwrap();
    assert_eq!(again.outcome, Outcome::Duplicate);
    assert_eq!(memory.total("{requests}:0"), Some(3));

    let refused = block_on(BoxStore::new(Failing::default()).flush(&request, &report));
    assert_eq!(refused.unwrap_err().kind(), StoreErrorKind::Refused);
}

#[test]
fn a_boxed_store_keeps_the_caveat_of_the_store_inside() {
    let memory = MemoryStore::new();
    let refusals = Arc::new(Failing::default());
    assert_eq!(
        BoxStore::new(refusals).caveat().as_deref(),
        Some("this store refuses every flush")
    );
    assert_eq!(BoxStore::new(memory).caveat(), None);
}
