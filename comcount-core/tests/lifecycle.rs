//! A counter's life at its edges, on virtual time: closed at the worst moment, its worker
//! dropped or panicking, and built again under a fixed participant id after a restart.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use comcount_core::clock::{Clock, TokioTimer, VirtualClock};
use comcount_core::diagnostics::{Record, Recorder, Reporter};
use comcount_core::{
    Counter, Family, FlushReply, FlushRequest, MemoryStore, Outcome, ParticipantId, Store,
    StoreError,
};
use common::runtime::run_virtual_until;
use common::scripted::{Action, ScriptedStore};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

const INTERVAL: Duration = Duration::from_secs(1);

/// A counter named `name` on `store`, its worker spawned on a local pool.
fn spawned<S: Store>(
    name: &str,
    store: S,
    clock: &VirtualClock,
    diagnostics: impl comcount_core::diagnostics::Diagnostics,
) -> (Counter, LocalPool) {
    let pool = LocalPool::new();
    let (counter, worker) = Counter::builder(name, INTERVAL)
        .diagnostics(diagnostics)
        .build(store, clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    (counter, pool)
}

#[test]
fn closing_as_the_pause_ends_sends_nothing() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    let (counter, mut pool) = spawned("edge", store.clone(), &clock, Recorder::new());
    counter.increment(1);
    run_virtual_until(&mut pool, &clock, INTERVAL * 3);
    let sent = store.calls();
    assert!(sent >= 2, "the counter flushed {sent} times");
    counter.increment(5);
    // The pause ends: the worker is woken, but has not run yet when close lands.
    let wake = clock.next_wake().unwrap();
    clock.advance_to(wake);
    counter.close();
    pool.run_until_stalled();
    assert_eq!(store.calls(), sent, "a flush went out after close returned");
    assert_eq!(counter.buffered(), 5, "the buffer was taken after close");
}

#[test]
fn dropping_the_worker_forgets_the_total_and_closes_the_counter() {
    let clock = VirtualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let recorder = Recorder::new();
    let (counter, mut pool) = spawned("dropped", store, &clock, recorder.clone());
    for n in 1..=3 {
        counter.increment(10_000);
        run_virtual_until(&mut pool, &clock, INTERVAL * n);
    }
    assert_eq!(counter.group_total(), Some(10_000));
    assert!(!counter.is_closed());
    // The runtime goes away with the worker on it.
    drop(pool);
    assert_eq!(counter.group_total(), None);
    assert_eq!(counter.increment(1), 1);
    assert!(
        counter.is_closed(),
        "nothing flushes it, yet it reads as open"
    );
    let messages = recorder.messages();
    assert_eq!(
        recorder.with_message("counter stopped").len(),
        1,
        "{messages:?}"
    );
    assert_eq!(messages.last(), Some(&"counter stopped"));
}

#[test]
fn a_worker_never_spawned_closes_its_counter_when_dropped() {
    let clock = VirtualClock::new();
    let (counter, worker) = Counter::builder("never run", INTERVAL)
        .build(MemoryStore::with_clock(clock.clone()), clock.clone())
        .unwrap();
    counter.increment(2);
    assert!(!counter.is_closed());
    drop(worker);
    assert!(counter.is_closed());
    assert_eq!(
        counter.increment(1),
        3,
        "the counter stopped counting locally"
    );
}

#[test]
fn a_counter_closed_then_its_worker_run_out_says_stopped_once() {
    let clock = VirtualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let recorder = Recorder::new();
    let (counter, mut pool) = spawned("closed", store, &clock, recorder.clone());
    counter.increment(1);
    run_virtual_until(&mut pool, &clock, INTERVAL * 2);
    counter.close();
    pool.run_until_stalled();
    drop(pool);
    let messages = recorder.messages();
    assert_eq!(
        recorder.with_message("counter stopped").len(),
        1,
        "{messages:?}"
    );
}

/// What a stopped counter never sent is said as it stops, each unit once: what was counted
/// since the last flush is `unsent`; a flush that close cut short is reported apart, as
/// `flush failed` (unsettled here: the client might still replay a copy of it).
#[test]
fn counter_stopped_says_what_was_never_sent() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    let recorder = Recorder::new();
    let (counter, mut pool) = spawned("unsent", store.clone(), &clock, recorder.clone());
    counter.increment(1);
    run_virtual_until(&mut pool, &clock, INTERVAL * 3);
    assert_eq!(counter.buffered(), 0);
    store.then([(); 50].map(|()| Action::Fail(|| StoreError::unavailable("not now"))));
    counter.increment(4);
    run_virtual_until(&mut pool, &clock, INTERVAL * 5);
    assert!(store.calls() >= 3, "no flush of the 4 went out");
    counter.increment(2);
    counter.close();
    pool.run_until_stalled();
    let stopped = recorder.with_message("counter stopped");
    assert_eq!(stopped.len(), 1, "{:?}", recorder.messages());
    assert_eq!(stopped[0].attribute("unsent"), Some("2"));
    assert_eq!(stopped[0].level, comcount_core::diagnostics::Level::Warn);
    assert_eq!(one_failure(&recorder), ("0".into(), "4".into()));
}

/// A counter closed before its worker ever ran sent nothing: all of it is `unsent`.
#[test]
fn a_counter_closed_before_it_flushed_says_all_of_it_was_never_sent() {
    let clock = VirtualClock::new();
    let recorder = Recorder::new();
    let store = MemoryStore::with_clock(clock.clone());
    let (counter, mut pool) = spawned("early", store, &clock, recorder.clone());
    counter.increment(9);
    counter.close();
    pool.run_until_stalled();
    let stopped = recorder.with_message("counter stopped");
    assert_eq!(stopped.len(), 1, "{:?}", recorder.messages());
    assert_eq!(stopped[0].attribute("unsent"), Some("9"));
}

/// A family's keys a client controls cannot make `increment` panic: an empty key, one too
/// long and a new one past the cap each return the call's own amount, count nothing, and are
/// reported once an interval with how many calls were refused.
#[test]
fn a_family_refuses_keys_it_cannot_count_without_panicking() {
    let clock = VirtualClock::new();
    let store = MemoryStore::with_clock(clock.clone());
    let recorder = Recorder::new();
    let mut pool = LocalPool::new();
    let (family, worker) = Family::builder("hostile", INTERVAL)
        .max_keys(2)
        .diagnostics(recorder.clone())
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    let long = "k".repeat(FlushRequest::MAX_KEY_LEN + 1);
    assert_eq!(family.increment("", 3), 3);
    assert_eq!(family.increment(&long, 4), 4);
    assert_eq!(family.increment("a", 1), 1);
    assert_eq!(family.increment("b", 1), 1);
    for i in 0..10 {
        assert_eq!(family.increment(&format!("new{i}"), 5), 5);
    }
    assert_eq!(family.len(), 2);
    run_virtual_until(&mut pool, &clock, INTERVAL * 2);
    let refused: Vec<(String, String)> = recorder
        .with_message("key refused")
        .iter()
        .map(|r| {
            let attribute = |name| r.attribute(name).unwrap().to_owned();
            (attribute("reason"), attribute("calls"))
        })
        .collect();
    let expected = [("empty", "1"), ("too_long", "1"), ("full", "10")]
        .map(|(r, c)| (r.to_owned(), c.to_owned()));
    assert_eq!(refused, expected);
    // Nothing of the refused calls was counted.
    let mut counted = std::collections::BTreeMap::new();
    for (key, total) in store.keys().iter().flat_map(|key| store.fields(key)) {
        *counted.entry(key).or_insert(0) += total;
    }
    let counted: Vec<_> = counted.into_iter().collect();
    assert_eq!(counted, [("a".to_owned(), 1), ("b".to_owned(), 1)]);
    // Refused again after the report: reported again, not before the next flush.
    family.increment("", 1);
    family.close();
    pool.run_until_stalled();
    let last = recorder.with_message("key refused");
    assert_eq!(last.len(), 4);
    assert_eq!(last[3].attribute("calls"), Some("1"));
}

/// The one `flush failed` event, with its `dropped` and `unsettled` amounts.
fn one_failure(events: &Recorder) -> (String, String) {
    let failed = events.with_message("flush failed");
    assert_eq!(failed.len(), 1, "{:?}", events.records());
    let amount = |name| failed[0].attribute(name).unwrap_or_default().to_owned();
    (amount("dropped"), amount("unsettled"))
}

/// The runtime goes away while a flush is in the store's hands: whether it was counted is
/// unknown, and it is reported so, as a close would report it.
#[test]
fn a_worker_dropped_with_a_flush_in_the_air_reports_it_unsettled() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    let events = Recorder::new();
    let (counter, mut pool) = spawned("dropped", store.clone(), &clock, events.clone());
    store.then([Action::Hang]);
    counter.increment(7);
    pool.run_until_stalled();
    assert_eq!(store.calls(), 1);
    drop(pool);
    assert_eq!(one_failure(&events), ("0".into(), "7".into()));
    let error = events.with_message("flush failed")[0]
        .attribute("error")
        .map(str::to_owned);
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("background task was dropped")),
        "{error:?}"
    );
    assert_eq!(counter.buffered(), 0);
}

/// A family closed with a flush in the air, whose runtime shuts down before the worker runs
/// again (as a service's often does right after closing): the flush is reported unsettled,
/// with its key.
#[test]
fn a_family_closed_and_dropped_with_a_flush_in_the_air_reports_it_unsettled() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    let events = Recorder::new();
    let mut pool = LocalPool::new();
    let (family, worker) = Family::builder("closing", INTERVAL)
        .diagnostics(events.clone())
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    store.then([Action::Hang]);
    family.increment("acme", 7);
    pool.run_until_stalled();
    assert_eq!(store.calls(), 1);
    family.close();
    drop(pool);
    assert_eq!(one_failure(&events), ("0".into(), "7".into()));
    let failed = events.with_message("flush failed");
    assert_eq!(failed[0].attribute("key"), Some("acme"));
}

/// The application panics with a flush in the store's hands, and its runtime is dropped while
/// the panic unwinds (as with a runtime owned by the panicking frame): the counter's store and
/// diagnostics did not panic, so the flush is reported unsettled as on any other drop.
#[test]
fn a_worker_dropped_while_the_application_panics_reports_its_flush_unsettled() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    let events = Recorder::new();
    let (counter, mut pool) = spawned("unwound", store.clone(), &clock, events.clone());
    store.then([Action::Hang]);
    counter.increment(7);
    pool.run_until_stalled();
    assert_eq!(store.calls(), 1);
    let application = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _runtime = pool;
        panic!("the application's own bug");
    }));
    assert!(application.is_err());
    assert_eq!(one_failure(&events), ("0".into(), "7".into()));
    assert_eq!(counter.buffered(), 0);
}

/// A store that hangs on the flushes that carry `hang` and panics on the others, half an
/// interval after they are sent.
#[derive(Clone)]
struct HangsOrPanics {
    clock: VirtualClock,
    hang: &'static str,
}

impl Store for HangsOrPanics {
    fn name(&self) -> &str {
        "hangs-or-panics"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let hang = request.entries.iter().any(|entry| &*entry.key == self.hang);
        let sleep = comcount_core::clock::Timer::sleep(&self.clock, INTERVAL / 2);
        async move {
            if hang {
                std::future::pending::<()>().await;
            }
            sleep.await;
            panic!("a store's bug");
        }
    }
}

/// The store panics on one partition's flush while another partition's flush is in its hands:
/// the panic ends the family's worker, and the other partition's flush is reported unsettled.
#[test]
fn a_store_panic_reports_another_partitions_flush_in_the_air_unsettled() {
    let clock = VirtualClock::new();
    let events = Recorder::new();
    let mut pool = LocalPool::new();
    let partitions = 2;
    let hung = "acme";
    let other = (0..)
        .map(|i| format!("k{i}"))
        .find(|key| {
            comcount_core::keys::partition_of(key, partitions)
                != comcount_core::keys::partition_of(hung, partitions)
        })
        .unwrap();
    let store = HangsOrPanics {
        clock: clock.clone(),
        hang: hung,
    };
    let (family, worker) = Family::builder("panicky", INTERVAL)
        .partitions(partitions)
        .diagnostics(events.clone())
        .build(store, clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    family.increment(hung, 7);
    family.increment(&other, 1);
    pool.run_until_stalled();
    assert_eq!(
        family.buffered(hung),
        0,
        "the flush of {hung} is in the air"
    );
    clock.advance(INTERVAL);
    let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.run_until_stalled();
    }));
    assert!(ended.is_err(), "the store panicked");
    let failed = events.with_message("flush failed");
    let reported = failed
        .iter()
        .find(|event| event.attribute("key") == Some(hung))
        .unwrap_or_else(|| panic!("7 units of {hung} vanished: {:?}", events.records()));
    assert_eq!(reported.attribute("unsettled"), Some("7"));
}

/// A sink that panics on its first `flush failed` event.
#[derive(Clone, Default)]
struct PanicsOnFailure(Recorder);

impl comcount_core::diagnostics::Diagnostics for PanicsOnFailure {
    fn record(&self, counter: &str, event: &comcount_core::diagnostics::Event<'_>) {
        self.0.record(counter, event);
        if matches!(event, comcount_core::diagnostics::Event::FlushFailed { .. }) {
            panic!("a sink's bug");
        }
    }
}

/// The diagnostics panic while a family's worker reports a failed flush: the worker ends, and
/// the flush still in the air in another partition is not reported to the sink that panicked
/// (a second panic while unwinding would abort the process).
#[test]
fn a_sink_that_panicked_is_told_nothing_more() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::new(clock.clone());
    let sink = PanicsOnFailure::default();
    let mut pool = LocalPool::new();
    let (family, worker) = Family::builder("sunk", INTERVAL)
        .partitions(2)
        .diagnostics(sink.clone())
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    store.then([Action::Hang, Action::Fail(|| StoreError::refused("NOPERM"))]);
    let (first, second) = ("acme", "globex");
    assert_ne!(
        comcount_core::keys::partition_of(first, 2),
        comcount_core::keys::partition_of(second, 2)
    );
    family.increment(first, 7);
    family.increment(second, 3);
    let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.run_until_stalled();
    }));
    assert!(ended.is_err(), "the sink panicked");
    drop(pool);
    assert_eq!(sink.0.with_message("flush failed").len(), 1);
}

/// A store whose copies hand their command over on their second poll (a connection that
/// reconnects first, a pool's checkout), and whose second poll closes the counter from another
/// thread, noting whether `close()` returned before the command went.
#[derive(Clone, Default)]
struct SendsOnSecondPoll {
    counter: Arc<std::sync::OnceLock<Counter>>,
    sent_after_close: Arc<AtomicBool>,
    closer: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl Store for SendsOnSecondPoll {
    fn name(&self) -> &str {
        "sends-on-second-poll"
    }

    fn flush(
        &self,
        _request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let this = self.clone();
        let mut polls = 0;
        std::future::poll_fn(move |_| {
            polls += 1;
            if polls == 2 {
                let counter = this.counter.get().unwrap().clone();
                let (closed, returned) = std::sync::mpsc::channel();
                let closer = std::thread::spawn(move || {
                    counter.close();
                    let _ = closed.send(());
                });
                *this.closer.lock().unwrap() = Some(closer);
                if returned.recv_timeout(Duration::from_secs(2)).is_ok() {
                    // close() has returned, and the command goes out now.
                    this.sent_after_close.store(true, Ordering::SeqCst);
                }
            }
            std::task::Poll::Pending
        })
    }
}

/// `close()` on another thread lands while the worker polls a copy that hands its command over
/// on that poll: `close()` returns only after the poll, never before the command goes.
#[test]
fn a_copy_polled_as_close_lands_goes_before_close_returns() {
    let clock = VirtualClock::new();
    let store = SendsOnSecondPoll::default();
    let (counter, mut pool) = spawned("second-poll", store.clone(), &clock, Recorder::new());
    store.counter.set(counter.clone()).ok().unwrap();
    counter.increment(1);
    pool.run_until_stalled();
    // The first poll sent the copy; the second comes with the pause's end or the timeout.
    run_virtual_until(&mut pool, &clock, INTERVAL * 3);
    let closer = store.closer.lock().unwrap().take();
    closer
        .expect("the store's second poll closes the counter")
        .join()
        .unwrap();
    assert!(counter.is_closed());
    assert!(
        !store.sent_after_close.load(Ordering::SeqCst),
        "a copy handed its command to the store after close() returned"
    );
}

/// Diagnostics that close the counter on the event a store reports from inside its flush.
#[derive(Clone, Default)]
struct ClosesOnScriptLoaded(Arc<std::sync::OnceLock<Counter>>);

impl comcount_core::diagnostics::Diagnostics for ClosesOnScriptLoaded {
    fn record(&self, _counter: &str, event: &comcount_core::diagnostics::Event<'_>) {
        if matches!(
            event,
            comcount_core::diagnostics::Event::ScriptLoaded { .. }
        ) && let Some(counter) = self.0.get()
        {
            counter.close();
        }
    }
}

/// A memory store that reports `script loaded` as each flush is handed to it.
#[derive(Clone)]
struct ReportsOnFlush(MemoryStore<VirtualClock>);

impl Store for ReportsOnFlush {
    fn name(&self) -> &str {
        "reports-on-flush"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        report.emit(comcount_core::diagnostics::Event::ScriptLoaded { sha: "abc" });
        self.0.flush(request, report)
    }
}

/// Diagnostics that call `close()` on an event the store reports while the worker hands it a
/// flush: `close()` returns, and the counter is closed.
#[test]
fn close_called_from_diagnostics_during_a_send_returns() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let clock = VirtualClock::new();
        let sink = ClosesOnScriptLoaded::default();
        let mut pool = LocalPool::new();
        let (counter, worker) = Counter::builder("reentrant", INTERVAL)
            .diagnostics(sink.clone())
            .build(
                ReportsOnFlush(MemoryStore::with_clock(clock.clone())),
                clock.clone(),
            )
            .unwrap();
        sink.0.set(counter.clone()).ok().unwrap();
        pool.spawner().spawn_local(worker).unwrap();
        counter.increment(1);
        pool.run_until_stalled();
        let _ = done.send(counter.is_closed());
    });
    assert_eq!(
        finished.recv_timeout(Duration::from_secs(20)),
        Ok(true),
        "close() from within the diagnostics never returned"
    );
}

/// A store whose first copy closes the counter on a later poll (as its store or diagnostics
/// might) once a second copy is out, and whose second copy notes, on its second poll (when it
/// would hand its command over), whether the counter was closed by then.
#[derive(Clone, Default)]
struct FirstCopyCloses {
    counter: Arc<std::sync::OnceLock<Counter>>,
    calls: Arc<std::sync::atomic::AtomicUsize>,
    polled_after_close: Arc<AtomicBool>,
}

impl Store for FirstCopyCloses {
    fn name(&self) -> &str {
        "first-copy-closes"
    }

    fn flush(
        &self,
        _request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let this = self.clone();
        let copy = self.calls.fetch_add(1, Ordering::SeqCst);
        let mut polls = 0;
        std::future::poll_fn(move |_| {
            polls += 1;
            let counter = this.counter.get().unwrap();
            if copy == 0 && polls >= 2 && this.calls.load(Ordering::SeqCst) >= 2 {
                counter.close();
            }
            if copy == 1 && polls == 2 && counter.is_closed() {
                this.polled_after_close.store(true, Ordering::SeqCst);
            }
            std::task::Poll::Pending
        })
    }
}

/// One copy's poll closes the counter: the copies after it in the same look are not polled,
/// since one may hand its command over on that poll, after `close()` has returned.
#[test]
fn no_copy_is_polled_after_another_closed_the_counter() {
    let clock = VirtualClock::new();
    let store = FirstCopyCloses::default();
    let (counter, mut pool) = spawned("first-copy-closes", store.clone(), &clock, Recorder::new());
    store.counter.set(counter.clone()).ok().unwrap();
    counter.increment(1);
    run_virtual_until(&mut pool, &clock, INTERVAL * 3);
    assert!(
        store.calls.load(Ordering::SeqCst) >= 2,
        "a second copy went"
    );
    assert!(counter.is_closed());
    assert!(
        !store.polled_after_close.load(Ordering::SeqCst),
        "the second copy was polled after close() returned"
    );
}

type BoxedWorker = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// A store that polls another counter's worker from inside its flush.
#[derive(Clone, Default)]
struct DrivesAnother(Arc<std::sync::Mutex<Option<BoxedWorker>>>);

impl Store for DrivesAnother {
    fn name(&self) -> &str {
        "drives-another"
    }

    fn flush(
        &self,
        _request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let this = self.clone();
        std::future::poll_fn(move |cx| {
            if let Some(worker) = this.0.lock().unwrap().as_mut() {
                let _ = worker.as_mut().poll(cx);
            }
            std::task::Poll::Pending
        })
    }
}

/// A store that closes a counter from inside its flush.
#[derive(Clone, Default)]
struct ClosesAnother(Arc<std::sync::OnceLock<Counter>>);

impl Store for ClosesAnother {
    fn name(&self) -> &str {
        "closes-another"
    }

    fn flush(
        &self,
        _request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let this = self.clone();
        std::future::poll_fn(move |_| {
            if let Some(counter) = this.0.get() {
                counter.close();
            }
            std::task::Poll::Pending
        })
    }
}

/// Counter A's store drives counter B's worker, and B's store closes A: the close comes from
/// inside A's send, though B's send is the one under way on that thread, and returns.
#[test]
fn close_from_a_send_nested_in_the_counters_own_returns() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let clock = VirtualClock::new();
        let (drives, closes) = (DrivesAnother::default(), ClosesAnother::default());
        let (a, a_worker) = Counter::builder("a", INTERVAL)
            .diagnostics(Recorder::new())
            .build(drives.clone(), clock.clone())
            .unwrap();
        let (b, b_worker) = Counter::builder("b", INTERVAL)
            .diagnostics(Recorder::new())
            .build(closes.clone(), clock.clone())
            .unwrap();
        closes.0.set(a.clone()).ok().unwrap();
        *drives.0.lock().unwrap() = Some(Box::pin(b_worker));
        let mut pool = LocalPool::new();
        pool.spawner().spawn_local(a_worker).unwrap();
        b.increment(1);
        a.increment(1);
        run_virtual_until(&mut pool, &clock, INTERVAL * 3);
        let _ = done.send(a.is_closed());
    });
    assert_eq!(
        finished.recv_timeout(Duration::from_secs(20)),
        Ok(true),
        "close() from a send nested in the counter's own never returned"
    );
}

/// A store that answers from memory until told to panic.
#[derive(Clone)]
struct Panicking {
    memory: MemoryStore<TokioTimer>,
    panic: Arc<AtomicBool>,
}

impl Store for Panicking {
    fn name(&self) -> &str {
        "panicking"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        assert!(!self.panic.load(Ordering::SeqCst), "a store's bug");
        self.memory.flush(request, report)
    }
}

#[test]
fn a_worker_that_panics_forgets_the_total() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Panicking {
            memory: MemoryStore::with_clock(TokioTimer::new()),
            panic: Arc::default(),
        };
        let (counter, worker) = Counter::builder("panics", INTERVAL)
            .diagnostics(Recorder::new())
            .build(store.clone(), TokioTimer::new())
            .unwrap();
        let task = tokio::spawn(worker);
        for _ in 0..3 {
            counter.increment(3);
            tokio::time::sleep(INTERVAL).await;
        }
        assert_eq!(counter.group_total(), Some(3));
        store.panic.store(true, Ordering::SeqCst);
        let ended = task.await;
        assert!(ended.unwrap_err().is_panic());
        assert_eq!(counter.group_total(), None);
        assert!(
            counter.is_closed(),
            "a worker that panicked left its counter open"
        );
    });
}

#[test]
fn a_restarted_participant_with_a_fixed_id_is_applied_first_time() {
    let clock = VirtualClock::starting_at(Duration::from_secs(1_000));
    let store = ScriptedStore::new(clock.clone());
    let id = ParticipantId::from_u64(7);
    let mut pool = LocalPool::new();
    let (before, worker) = Counter::builder("pod", INTERVAL)
        .participant(id)
        .diagnostics(Recorder::new())
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    for _ in 0..5 {
        before.increment(1);
        let until = clock.now() + INTERVAL;
        run_virtual_until(&mut pool, &clock, until);
    }
    before.close();
    pool.run_until_stalled();
    let last_seq = store.requests().last().unwrap().seq;
    // A restart takes at least a few milliseconds of wall-clock time.
    std::thread::sleep(Duration::from_millis(5));

    let events = Recorder::new();
    let (after, worker) = Counter::builder("pod", INTERVAL)
        .participant(id)
        .diagnostics(events.clone())
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    let first_new = store.requests().len();
    after.increment(3);
    let until = clock.now() + INTERVAL * 3;
    run_virtual_until(&mut pool, &clock, until);
    let requests = store.requests();
    let first = &requests[first_new];
    assert!(
        first.seq > last_seq,
        "the restarted participant numbers its flushes from {} after {}",
        first.seq,
        last_seq
    );
    let completed = events.with_message("flush completed");
    assert!(!completed.is_empty(), "{:?}", events.messages());
    assert_eq!(completed[0].attribute("amount"), Some("3"));
    assert!(
        requests[first_new..]
            .iter()
            .take_while(|r| r.amount() == 3)
            .all(|r| r.seq == first.seq),
        "the first flush was not the one applied"
    );
    assert!(events.with_message("flush failed").is_empty());
}

/// A store in memory whose fence holds, for a participant restarted with its wall clock
/// stepped back, the number of one of its flushes from the run before: the `collide_at`-th
/// copy that reaches the fence (counting from 0; copies aimed elsewhere are answered a wrong
/// interval first, as the script does) is answered as the old flush's duplicate. The old
/// flush was counted long ago for the first copy, and otherwise in the interval the first
/// copy landed in: where an earlier flush of this run could land, but not this one.
struct SteppedBack {
    memory: MemoryStore<VirtualClock>,
    clock: VirtualClock,
    collide_at: usize,
    /// The interval each copy that reached the fence was sent in.
    reached: Arc<std::sync::Mutex<Vec<u64>>>,
}

impl SteppedBack {
    fn new(clock: &VirtualClock, collide_at: usize) -> Self {
        Self {
            memory: MemoryStore::with_clock(clock.clone()),
            clock: clock.clone(),
            collide_at,
            reached: Arc::default(),
        }
    }
}

impl Store for SteppedBack {
    fn name(&self) -> &str {
        "stepped back"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let now = u64::try_from(self.clock.now().as_millis()).unwrap();
        let n = now / request.interval_ms;
        let phase = Duration::from_millis(now % request.interval_ms);
        let mut collision = None;
        if request.window().contains(&n) {
            let mut reached = self.reached.lock().unwrap();
            if reached.len() == self.collide_at {
                let old = reached.first().copied().unwrap_or(n - 600);
                collision = Some(FlushReply::new(Outcome::Duplicate, n, phase, Some(old)));
            }
            reached.push(n);
        }
        let memory = self.memory.flush(request, report);
        async move {
            match collision {
                Some(reply) => Ok(reply),
                None => memory.await,
            }
        }
    }
}

/// Runs a counter on `store`, adding `amounts` one an interval, then waits three intervals;
/// returns the `flush failed` events and the sum of the `flush completed` amounts.
fn run_stepped_back(store: SteppedBack, amounts: &[u64]) -> (Vec<Record>, u64) {
    let clock = store.clock.clone();
    let events = Recorder::new();
    let (counter, mut pool) = spawned("pod", store, &clock, events.clone());
    for &amount in amounts {
        counter.increment(amount);
        run_virtual_until(&mut pool, &clock, clock.now() + INTERVAL);
    }
    run_virtual_until(&mut pool, &clock, clock.now() + INTERVAL * 3);
    let completed = events
        .with_message("flush completed")
        .iter()
        .map(|e| e.attribute("amount").unwrap().parse::<u64>().unwrap())
        .sum();
    (events.with_message("flush failed"), completed)
}

/// The amount a `flush failed` event reports, dropped or unsettled: a copy answered a wrong
/// interval may be sent again by a client, so a refusal after one is reported unsettled.
fn failed_amount(failed: &Record) -> u64 {
    let amount = |name| failed.attribute(name).unwrap().parse::<u64>().unwrap();
    amount("dropped") + amount("unsettled")
}

#[test]
fn a_restart_that_meets_its_old_number_in_the_fence_reports_the_flush_failed() {
    let clock = VirtualClock::starting_at(Duration::from_secs(1_000));
    let (failed, completed) = run_stepped_back(SteppedBack::new(&clock, 0), &[3, 0, 4]);
    // The first flush was not added: it is reported failed, not completed, and says why.
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed_amount(&failed[0]), 3, "{:?}", failed[0]);
    let error = failed[0].attribute("error").unwrap();
    assert!(error.contains("wall clock"), "{error}");
    // The next flush is applied, and the failed amount is not in it.
    assert_eq!(completed, 4);
}

#[test]
fn a_duplicate_counted_where_only_an_earlier_flush_could_land_is_failed() {
    let clock = VirtualClock::starting_at(Duration::from_secs(1_000));
    let amounts = [1, 10, 100, 1_000, 10_000];
    let (failed, completed) = run_stepped_back(SteppedBack::new(&clock, 3), &amounts);
    // Only the windows of the flush's own copies count: the fourth flush is failed, although
    // the first one could land where the duplicate was counted.
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed_amount(&failed[0]) > 0, "{failed:?}");
    assert_eq!(failed_amount(&failed[0]) + completed, 11_111, "{failed:?}");
}

/// A store in memory that says it has a caveat, or not.
struct Caveated {
    memory: MemoryStore<VirtualClock>,
    caveat: Option<&'static str>,
}

impl Store for Caveated {
    fn name(&self) -> &str {
        "caveated"
    }

    fn caveat(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.caveat.map(Into::into)
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        self.memory.flush(request, report)
    }
}

#[test]
fn a_stores_caveat_is_a_warning_right_after_the_start() {
    use comcount_core::diagnostics::Level;

    for caveat in [Some("will not reconnect"), None] {
        let clock = VirtualClock::new();
        let store = Caveated {
            memory: MemoryStore::with_clock(clock.clone()),
            caveat,
        };
        let recorder = Recorder::new();
        let mut pool = LocalPool::new();
        // Through an `Arc`, which passes the caveat on.
        let (counter, worker) = Counter::builder("caveat", INTERVAL)
            .diagnostics(recorder.clone())
            .build(Arc::new(store), clock.clone())
            .unwrap();
        pool.spawner().spawn_local(worker).unwrap();
        pool.run_until_stalled();
        counter.close();
        pool.run_until_stalled();
        let records = recorder.records();
        match caveat {
            Some(caveat) => {
                assert_eq!(
                    recorder.messages(),
                    ["counter started", "store caveat", "counter stopped"]
                );
                assert_eq!(records[1].level, Level::Warn);
                assert_eq!(records[1].counter, "caveat");
                assert_eq!(
                    records[1].attributes,
                    [
                        ("store", "caveated".to_owned()),
                        ("caveat", caveat.to_owned())
                    ]
                );
            }
            None => assert_eq!(recorder.messages(), ["counter started", "counter stopped"]),
        }
    }
}
