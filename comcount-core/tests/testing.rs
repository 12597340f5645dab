//! The `testing` feature: the conformance checks pass on the memory store and fail, naming the
//! rule, on a store that breaks one; the scripted store takes each step as told; a recorded
//! store tells its log of every copy and answer and passes the answer on unchanged.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::testing::conformance::Conformance;
use comcount_core::testing::{FlushLog, Recorded, ScriptedStore, Step};
use comcount_core::{
    Fence, FlushReply, FlushRequest, MemoryStore, Outcome, ParticipantId, Store, StoreError,
    StoreErrorKind,
};
use futures::FutureExt;
use futures::executor::block_on;

fn suite() -> Conformance {
    Conformance::new().interval(Duration::from_millis(100))
}

#[test]
fn the_memory_store_passes_every_check() {
    block_on(suite().all(&MemoryStore::new()));
}

/// A store that forgets who sent a flush: every copy looks like a new participant's, so no
/// fence ever holds.
struct Forgetful(MemoryStore);

impl Store for Forgetful {
    fn name(&self) -> &str {
        "forgetful"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let mut request = request.clone();
        request.participant = ParticipantId::random();
        let reply = self.0.flush(&request, report).now_or_never().unwrap();
        std::future::ready(reply)
    }
}

#[test]
fn a_store_without_a_fence_fails_naming_the_rule() {
    let store = Forgetful(MemoryStore::new());
    let panic = std::panic::catch_unwind(|| block_on(suite().fences_a_replayed_flush(&store)))
        .expect_err("a store without a fence passed");
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("\"forgetful\"")
            && message.contains("a replayed flush is a duplicate")
            && message.contains("must be Duplicate"),
        "{message}"
    );
}

/// A store that changes the `fence` of the memory store's replies.
struct Fenced<F>(MemoryStore, F);

impl<F: Fn(&FlushRequest, FlushReply) -> FlushReply + Send + Sync + 'static> Store for Fenced<F> {
    fn name(&self) -> &str {
        "fence"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let reply = self.0.flush(request, report).now_or_never().unwrap();
        std::future::ready(reply.map(|reply| (self.1)(request, reply)))
    }
}

#[test]
fn a_store_that_does_not_tell_the_fence_fails_naming_the_rule() {
    let store = Fenced(MemoryStore::new(), |_: &FlushRequest, reply: FlushReply| {
        reply.with_fence(Fence::Untold)
    });
    // What it does not tell fits any outcome: the other checks pass.
    block_on(suite().fences_a_replayed_flush(&store));
    let panic = std::panic::catch_unwind(|| block_on(suite().tells_what_the_fence_held(&store)))
        .expect_err("a store that does not tell the fence passed");
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("the participant's fence held before the flush")
            && message.contains("must tell that the fence held Empty"),
        "{message}"
    );
}

#[test]
fn a_store_that_tells_the_fence_after_its_write_fails_any_check() {
    // The applied flush's own number: what the fence holds once the flush wrote it.
    let store = Fenced(
        MemoryStore::new(),
        |request: &FlushRequest, reply: FlushReply| match reply.outcome {
            Outcome::Applied => {
                let interval = reply.interval;
                reply.with_fence(Fence::Held {
                    seq: request.seq,
                    interval,
                })
            }
            _ => reply,
        },
    );
    let panic = std::panic::catch_unwind(|| block_on(suite().applies_a_flush(&store)))
        .expect_err("a store that tells the fence after its write passed");
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("a reply's fence is Held { seq: 1, interval: ")
            && message.contains("which a Applied of sequence number 1 cannot have"),
        "{message}"
    );
}

/// A store on a clock that never moves.
#[test]
fn a_store_whose_clock_stands_still_fails_saying_so() {
    let store = MemoryStore::with_clock(VirtualClock::starting_at(Duration::from_secs(100)));
    let panic = std::panic::catch_unwind(|| block_on(suite().applies_a_flush(&store))).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("clock did not move"), "{message}");
}

/// A clock that moves 50 ms, two and a half of the check's intervals, each time it is read:
/// every flush lands intervals after the one before.
#[derive(Default)]
struct Racing(AtomicU64);

impl Clock for Racing {
    fn now(&self) -> Duration {
        Duration::from_millis(1_000_000 + 50 * self.0.fetch_add(1, Ordering::Relaxed))
    }
}

#[test]
fn a_check_that_keeps_slipping_gives_up_in_bounded_time() {
    let store = MemoryStore::with_clock(Racing::default());
    let suite = Conformance::new().interval(Duration::from_millis(20));
    let started = std::time::Instant::now();
    let panic = std::panic::catch_unwind(|| block_on(suite.applies_a_flush(&store))).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("slipped over an interval boundary"),
        "{message}"
    );
    // Sixty intervals of trying (1.2 s), the flushes under way and a loaded machine.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

fn request(expect: u64) -> FlushRequest {
    FlushRequest::new(
        comcount_core::KeySpace::counter("", "c"),
        ParticipantId::from_u64(1),
        1000,
    )
    .with_amount(5)
    .with_expect(expect)
}

fn report() -> Reporter {
    Reporter::new("test", Arc::new(Recorder::new()))
}

#[test]
fn the_scripted_store_takes_each_step_in_turn() {
    let clock = VirtualClock::starting_at(Duration::from_millis(10_500));
    let store = ScriptedStore::with_clock(clock.clone());
    let made_up = FlushReply::new(Outcome::Fenced, 7, Duration::ZERO, None).with_totals(vec![None]);
    store
        .then(Step::Reply(made_up.clone()))
        .then(Step::Fail(StoreErrorKind::Unavailable))
        .then(Step::LoseReply)
        .then(Step::Replay)
        .then(Step::Hang);
    assert_eq!(store.steps_left(), 5);
    let flush = |r: &FlushRequest| store.flush(r, &report()).now_or_never();

    assert_eq!(flush(&request(10)).unwrap().unwrap(), made_up);
    let error = flush(&request(10)).unwrap().unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable);
    assert_eq!(
        store.memory().total("{c}:10"),
        None,
        "a failed flush writes nothing"
    );

    let error = flush(&request(10)).unwrap().unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unanswered);
    assert_eq!(
        store.memory().total("{c}:10"),
        Some(5),
        "a lost reply's flush is applied"
    );

    let replayed = request(11).with_seq(2);
    clock.advance(Duration::from_secs(1));
    let reply = flush(&replayed).unwrap().unwrap();
    assert_eq!(reply.outcome, Outcome::Duplicate, "the second copy's reply");
    assert_eq!(reply.counted_in, Some(11));
    assert_eq!(
        store.memory().total("{c}:11"),
        Some(5),
        "a replay counts once"
    );

    assert!(flush(&request(11)).is_none(), "a hung flush never answers");
    assert_eq!(store.steps_left(), 0);
    assert_eq!(store.calls(), 5);
    assert_eq!(store.requests()[3], replayed);

    // Once the queue is empty: pass, or what `otherwise` says.
    let reply = flush(&request(11).with_seq(3)).unwrap().unwrap();
    assert_eq!(reply.outcome, Outcome::Fenced);
    store.otherwise(Step::Fail(StoreErrorKind::Refused));
    let error = flush(&request(11).with_seq(3)).unwrap().unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Refused);
}

#[test]
fn a_held_flush_runs_when_released_in_the_interval_of_that_time() {
    let clock = VirtualClock::starting_at(Duration::from_millis(10_500));
    let store = ScriptedStore::with_clock(clock.clone());
    store.then_each([Step::Hold, Step::Hold]);
    let (one, two, report) = (request(10), request(10).with_seq(2), report());
    let mut first = Box::pin(store.flush(&one, &report));
    let mut second = Box::pin(store.flush(&two, &report));
    assert!((&mut first).now_or_never().is_none());
    assert_eq!(store.held(), 2);
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.release(), 2);
    assert_eq!(store.held(), 0);
    let reply = block_on(first).unwrap();
    assert_eq!((reply.outcome, reply.interval), (Outcome::Applied, 11));
    let reply = block_on(&mut second).unwrap();
    assert_eq!(reply.outcome, Outcome::Fenced);
    assert_eq!(store.memory().total("{c}:11"), Some(5));
}

/// Every call a recorded store made to it, in order: `sent` with the sequence number, then
/// `answered` with the outcome or error kind, or `cut` when the copy's future was dropped.
#[derive(Default)]
struct Calls(Arc<Mutex<Vec<String>>>);

/// What a copy keeps until its answer: says `cut` when dropped unanswered.
struct Open {
    seq: u64,
    calls: Arc<Mutex<Vec<String>>>,
    answered: bool,
}

impl Drop for Open {
    fn drop(&mut self) {
        if !self.answered {
            self.calls.lock().unwrap().push(format!("cut {}", self.seq));
        }
    }
}

impl FlushLog for Calls {
    type Sent = Open;

    fn sent(&self, request: &FlushRequest) -> Open {
        self.0.lock().unwrap().push(format!("sent {}", request.seq));
        Open {
            seq: request.seq,
            calls: Arc::clone(&self.0),
            answered: false,
        }
    }

    fn answered(&self, mut sent: Open, answer: &Result<FlushReply, StoreError>) {
        sent.answered = true;
        let what = match answer {
            Ok(reply) => format!("{:?}", reply.outcome),
            Err(error) => format!("{:?}", error.kind()),
        };
        self.0
            .lock()
            .unwrap()
            .push(format!("answered {} {what}", sent.seq));
    }
}

#[test]
fn a_recorded_store_passes_each_answer_on_and_tells_its_log_of_both_ends() {
    let clock = VirtualClock::starting_at(Duration::from_millis(10_500));
    let scripted = ScriptedStore::with_clock(clock);
    let made_up = FlushReply::new(Outcome::Fenced, 7, Duration::ZERO, None).with_totals(vec![None]);
    scripted
        .then(Step::Reply(made_up.clone()))
        .then(Step::Pass)
        .then(Step::Fail(StoreErrorKind::Unavailable))
        .then(Step::Hang);
    let store = Recorded::new(scripted.clone(), Arc::new(Calls::default()));
    assert_eq!(store.name(), scripted.name());
    assert_eq!(store.caveat(), None);
    let report = report();
    let flush = |seq: u64| {
        store
            .flush(&request(10).with_seq(seq), &report)
            .now_or_never()
            .unwrap()
    };

    assert_eq!(flush(1).unwrap(), made_up);
    assert_eq!(flush(2).unwrap().outcome, Outcome::Applied);
    assert_eq!(store.inner().memory().total("{c}:10"), Some(5));
    assert_eq!(flush(3).unwrap_err().kind(), StoreErrorKind::Unavailable);
    // Told of at the call, before any poll; dropped unanswered, it never reaches `answered`.
    let fourth = request(10).with_seq(4);
    let hung = store.flush(&fourth, &report);
    assert_eq!(store.log().0.lock().unwrap().last().unwrap(), "sent 4");
    drop(hung);

    assert_eq!(
        *store.log().0.lock().unwrap(),
        [
            "sent 1",
            "answered 1 Fenced",
            "sent 2",
            "answered 2 Applied",
            "sent 3",
            "answered 3 Unavailable",
            "sent 4",
            "cut 4",
        ]
    );
    assert_eq!(scripted.calls(), 4);
}
