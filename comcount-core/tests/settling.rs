//! How a flush settles under faults, one schedule at a time: turned-away copies the client
//! retries on its own, refusals after them, unanswered copies thinning out, the resend window
//! running out, and a close or a fence passing a flush in the air. Each was written to fail
//! for a change of the engine that the broader tests let through or caught only by chance
//! (the mutation runs of TESTING.md name them).
//!
//! Each runs one participant on virtual time against the simulated store and checks that
//! every unit incremented is accounted for once: counted, buffered, dropped or reported
//! unsettled (and then counted at most by a client's replay).
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::builder::Builder;
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_core::{Counter, Outcome, ParticipantId};
use common::sim::{Fault, Sim};
use futures::task::LocalSpawnExt;

const INTERVAL: Duration = Duration::from_millis(100);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The amounts the counter reported dropped and unsettled.
#[derive(Clone, Default)]
struct Failed {
    dropped: Arc<Mutex<u64>>,
    unsettled: Arc<Mutex<u64>>,
}

impl Diagnostics for Failed {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        if let Event::FlushFailed {
            dropped, unsettled, ..
        } = event
        {
            *self.dropped.lock().unwrap() += dropped;
            *self.unsettled.lock().unwrap() += unsettled;
        }
    }
}

struct World {
    sim: Sim,
    counter: Counter,
    failed: Failed,
}

const ID: u64 = 1;

impl World {
    /// A participant that has flushed once, so that it knows the store's clock, and whose
    /// next copies meet `faults`.
    fn new(faults: Vec<Fault>, configure: impl FnOnce(Builder) -> Builder) -> Self {
        let sim = Sim::new(INTERVAL, []);
        let failed = Failed::default();
        let builder = Counter::builder("killed", INTERVAL)
            .participant(ParticipantId::from_u64(ID))
            .diagnostics(failed.clone());
        let (counter, worker) = configure(builder)
            .build(sim.store.clone(), sim.clock.clone())
            .unwrap();
        sim.pool.spawner().spawn_local(worker).unwrap();
        let mut world = Self {
            sim,
            counter,
            failed,
        };
        world.counter.increment(1);
        world.run_for(INTERVAL * 3);
        assert_eq!(world.counted(), 1);
        world.sim.store.set_faults(faults);
        world
    }

    /// Runs everything for `by`, stopping at every timer and replay on the way.
    fn run_for(&mut self, by: Duration) {
        self.sim.run_for(by);
    }

    /// Runs until the participant has sent `n` copies in all.
    fn run_until_sent(&mut self, n: usize) {
        for _ in 0..1_000 {
            if self.sim.store.sends(ID).len() >= n {
                return;
            }
            self.run_for(ms(1));
        }
        panic!("the participant never sent copy {n}");
    }

    /// The amount the store applied from the participant, each flush at most once.
    fn counted(&self) -> u64 {
        self.sim
            .store
            .applied()
            .iter()
            .map(|app| app.request.amount())
            .sum()
    }

    fn dropped(&self) -> u64 {
        *self.failed.dropped.lock().unwrap()
    }

    fn unsettled(&self) -> u64 {
        *self.failed.unsettled.lock().unwrap()
    }

    /// Every unit incremented is counted, buffered or dropped, once; an unsettled amount the
    /// store went on to count is counted, not lost.
    fn assert_accounted(&self, incremented: u64, unsettled_then_counted: u64) {
        assert_eq!(
            incremented,
            self.counted() + self.counter.buffered() + self.dropped() + self.unsettled()
                - unsettled_then_counted,
            "units lost or doubled: counted {}, buffered {}, dropped {}, unsettled {}; \
             applications {:#?}",
            self.counted(),
            self.counter.buffered(),
            self.dropped(),
            self.unsettled(),
            self.sim.store.applications()
        );
    }
}

/// Under the after-reply rule without resends a copy turned away is not resent: the flush ends at once with
/// every copy answered "not applied". The client retries the copy on its own and it lands,
/// so the amount must not be put back (which `all_answered_unapplied` alone would do, and
/// count it twice): it waits in doubt, and the next flush applied finds it counted.
#[test]
fn a_turned_away_copy_the_client_retries_is_not_put_back_when_the_flush_ends() {
    let mut w = World::new(
        vec![Fault::TurnedAwayThenReplayed { after: ms(30) }],
        Builder::after_reply_without_resend,
    );
    let sent = w.sim.store.sends(ID).len();
    w.counter.increment(5);
    w.run_until_sent(sent + 1);
    w.run_for(INTERVAL * 10);
    assert_eq!(w.counted(), 6, "the retried copy is counted, once");
    assert_eq!(w.counter.buffered(), 0, "and its amount is not put back");
    // The next flush applied finds the retried copy's number in the fence: it was counted.
    w.counter.increment(1);
    w.run_for(INTERVAL * 5);
    assert_eq!(w.counted(), 7);
    assert_eq!(
        w.unsettled(),
        0,
        "settled as counted, not reported unsettled"
    );
    assert_eq!(w.counter.buffered(), 0);
    w.assert_accounted(7, 0);
}

/// A counter closed while a flush waits to resend a copy that was turned away: the client
/// retries that copy on its own and it lands, so the amount must be reported unsettled, not
/// put back (which `all_answered_unapplied` alone would do, in `Flusher::closed`).
#[test]
fn a_turned_away_copy_the_client_retries_is_not_put_back_when_the_counter_closes() {
    let mut w = World::new(vec![Fault::TurnedAwayThenReplayed { after: ms(30) }], |b| b);
    let sent = w.sim.store.sends(ID).len();
    w.counter.increment(5);
    w.run_until_sent(sent + 1);
    // The resend waits a fiftieth of the interval: close within it.
    w.run_for(ms(1));
    assert_eq!(w.sim.store.sends(ID).len(), sent + 1);
    w.counter.close();
    w.run_for(INTERVAL * 10);
    assert_eq!(w.counted(), 6, "the retried copy is counted, once");
    assert_eq!(w.unsettled(), 5, "the flush is reported unsettled");
    assert_eq!(w.counter.buffered(), 0, "and its amount is not put back");
    w.assert_accounted(6, 5);
}

/// A copy turned away that the client retries on its own, then a copy of the same flush
/// refused: the retry lands, so the refusal must not report the amount dropped (certainly not
/// counted), as it did when every copy had answered "not applied".
#[test]
fn a_refusal_after_a_turned_away_copy_the_client_retries_is_reported_unsettled() {
    let mut w = World::new(
        vec![
            Fault::TurnedAwayThenReplayed { after: ms(30) },
            Fault::Refused,
        ],
        |b| b,
    );
    let sent = w.sim.store.sends(ID).len();
    w.counter.increment(5);
    w.run_until_sent(sent + 2);
    w.run_for(INTERVAL * 10);
    assert_eq!(w.counted(), 6, "the retried copy is counted, once");
    assert_eq!(w.dropped(), 0, "nothing is reported dropped");
    assert_eq!(w.unsettled(), 5, "the flush is reported unsettled");
    w.assert_accounted(6, 5);
}

/// A copy applied, its reply lost, then refused when the client sent it again on its own
/// (redis-rs's cluster client after a lost connection): the refusal is the only answer, yet
/// the flush was counted, so it is reported unsettled, not dropped.
#[test]
fn a_refusal_after_the_clients_own_resend_of_an_applied_copy_is_unsettled() {
    let mut w = World::new(vec![Fault::AppliedThenRefused], |b| b);
    let sent = w.sim.store.sends(ID).len();
    w.counter.increment(5);
    w.run_until_sent(sent + 1);
    w.run_for(INTERVAL * 10);
    assert_eq!(w.counted(), 6, "the applied attempt is counted, once");
    assert_eq!(w.dropped(), 0, "nothing is reported dropped");
    assert_eq!(w.unsettled(), 5, "the flush is reported unsettled");
    w.assert_accounted(6, 5);
}

/// Every copy of a flush refused outright: the amount is reported dropped.
#[test]
fn a_flush_refused_outright_is_reported_dropped() {
    let mut w = World::new(vec![Fault::Refused], |b| b);
    let sent = w.sim.store.sends(ID).len();
    w.counter.increment(5);
    w.run_until_sent(sent + 1);
    w.run_for(INTERVAL * 10);
    assert_eq!(w.dropped(), 5);
    assert_eq!(w.unsettled(), 0);
    w.assert_accounted(6, 0);
}

/// A store on the participant's own clock that answers each copy as staged: passed to a
/// memory store at once, answered with an outcome or an error after a delay, or never.
mod staged {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use comcount_core::builder::Builder;
    use comcount_core::clock::{Clock, Timer, VirtualClock};
    use comcount_core::diagnostics::{Diagnostics, Event, Recorder, Reporter};
    use comcount_core::{
        Counter, FlushReply, FlushRequest, MemoryStore, Outcome, Store, StoreError,
    };
    use futures::FutureExt;
    use futures::executor::LocalPool;
    use futures::task::LocalSpawnExt;

    pub(crate) const INTERVAL: Duration = Duration::from_millis(100);

    /// What the store does with one copy.
    pub(crate) enum Act {
        /// Runs it on the memory store, answering at once.
        Pass,
        /// Answers with this outcome after this long, without running it.
        Answer(Duration, Outcome),
        /// Fails with this error after this long.
        Fail(Duration, fn() -> StoreError),
        /// Never answers.
        Hang,
        /// Answers at once that the participant added to the interval the copy landed in
        /// already, that interval being this many after the one the copy aimed at.
        Fenced(u64),
        /// Answers at once as `Fenced(0)`, and the client runs the copy again on its own
        /// this long after.
        FencedThenReplayed(Duration),
    }

    #[derive(Clone)]
    pub(crate) struct Staged {
        pub(crate) memory: MemoryStore<VirtualClock>,
        clock: VirtualClock,
        interval: Duration,
        acts: Arc<Mutex<VecDeque<Act>>>,
        /// When each copy was sent, and its request.
        pub(crate) sent: Arc<Mutex<Vec<(Duration, FlushRequest)>>>,
        /// The copies clients will run again, and when.
        replays: Arc<Mutex<Vec<(Duration, FlushRequest)>>>,
        /// The amount the memory store applied, replays included.
        applied: Arc<Mutex<u64>>,
    }

    impl Staged {
        pub(crate) fn then(&self, acts: impl IntoIterator<Item = Act>) {
            self.acts.lock().unwrap().extend(acts);
        }

        pub(crate) fn sends(&self) -> usize {
            self.sent.lock().unwrap().len()
        }

        pub(crate) fn applied(&self) -> u64 {
            *self.applied.lock().unwrap()
        }

        fn next_replay(&self) -> Option<Duration> {
            self.replays.lock().unwrap().iter().map(|(at, _)| *at).min()
        }

        /// Runs the replays that are due, on the memory store.
        fn run_due_replays(&self) {
            let now = self.clock.now();
            let due: Vec<_> = {
                let mut replays = self.replays.lock().unwrap();
                let (due, later) = std::mem::take(&mut *replays)
                    .into_iter()
                    .partition::<Vec<_>, _>(|(at, _)| *at <= now);
                *replays = later;
                due
            };
            let report = Reporter::new("replay", Arc::new(Recorder::new()));
            for (_, request) in due {
                let reply = self.memory.flush(&request, &report).now_or_never().unwrap();
                Self::note(&self.applied, &request, &reply);
            }
        }

        fn note(
            applied: &Mutex<u64>,
            request: &FlushRequest,
            reply: &Result<FlushReply, StoreError>,
        ) {
            if reply
                .as_ref()
                .is_ok_and(|reply| reply.outcome == Outcome::Applied)
            {
                *applied.lock().unwrap() += request.amount();
            }
        }

        /// A reply as the store's clock (the participant's) has it now.
        fn reply(clock: &VirtualClock, interval: Duration, outcome: Outcome) -> FlushReply {
            let now = clock.now().as_millis() as u64;
            let interval = interval.as_millis() as u64;
            FlushReply::new(
                outcome,
                now / interval,
                Duration::from_millis(now % interval),
                None,
            )
            .with_totals(vec![None])
        }
    }

    impl Store for Staged {
        fn name(&self) -> &str {
            "staged"
        }

        fn flush(
            &self,
            request: &FlushRequest,
            report: &Reporter,
        ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
            self.sent
                .lock()
                .unwrap()
                .push((self.clock.now(), request.clone()));
            let act = self.acts.lock().unwrap().pop_front().unwrap_or(Act::Pass);
            let clock = self.clock.clone();
            let interval = self.interval;
            let future: Pin<Box<dyn Future<Output = _> + Send>> = match act {
                Act::Pass => {
                    let memory = self.memory.clone();
                    let request = request.clone();
                    let report = report.clone();
                    let applied = Arc::clone(&self.applied);
                    Box::pin(async move {
                        let reply = memory.flush(&request, &report).await;
                        Self::note(&applied, &request, &reply);
                        reply
                    })
                }
                Act::Fenced(landed) => {
                    let mut reply = Self::reply(&clock, interval, Outcome::Fenced);
                    reply.interval = request.expect + landed;
                    Box::pin(std::future::ready(Ok(reply)))
                }
                Act::FencedThenReplayed(after) => {
                    self.replays
                        .lock()
                        .unwrap()
                        .push((clock.now() + after, request.clone()));
                    let mut reply = Self::reply(&clock, interval, Outcome::Fenced);
                    reply.interval = request.expect;
                    Box::pin(std::future::ready(Ok(reply)))
                }
                Act::Answer(after, outcome) => {
                    let sleep = clock.sleep(after);
                    Box::pin(async move {
                        sleep.await;
                        Ok(Self::reply(&clock, interval, outcome))
                    })
                }
                Act::Fail(after, error) => {
                    let sleep = clock.sleep(after);
                    Box::pin(async move {
                        sleep.await;
                        Err(error())
                    })
                }
                Act::Hang => Box::pin(std::future::pending()),
            };
            future
        }
    }

    /// When an event came, its message, and the whole of it.
    type Record = (Duration, &'static str, String);

    /// Each event's message, with when it came.
    #[derive(Clone)]
    pub(crate) struct Timed {
        clock: VirtualClock,
        pub(crate) events: Arc<Mutex<Vec<Record>>>,
    }

    impl Diagnostics for Timed {
        fn record(&self, _counter: &str, event: &Event<'_>) {
            let mut text = format!("{event:?}");
            if let Event::FlushFailed { error, .. } = event {
                text = format!("{text}: {error}");
            }
            self.events
                .lock()
                .unwrap()
                .push((self.clock.now(), event.message(), text));
        }
    }

    impl Timed {
        /// When each event with this message came.
        pub(crate) fn times(&self, message: &str) -> Vec<Duration> {
            self.events
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, m, _)| *m == message)
                .map(|(at, ..)| *at)
                .collect()
        }
    }

    pub(crate) struct Rig {
        pub(crate) clock: VirtualClock,
        pub(crate) store: Staged,
        pub(crate) pool: LocalPool,
        pub(crate) counter: Counter,
        pub(crate) events: Timed,
    }

    impl Rig {
        /// A counter that has flushed once (so that it knows the store's clock), ten seconds
        /// into the store's time.
        pub(crate) fn new(configure: impl FnOnce(Builder) -> Builder) -> Self {
            Self::with_interval(INTERVAL, configure)
        }

        /// The same with another interval.
        pub(crate) fn with_interval(
            interval: Duration,
            configure: impl FnOnce(Builder) -> Builder,
        ) -> Self {
            let clock = VirtualClock::starting_at(interval * 100);
            let store = Staged {
                memory: MemoryStore::with_clock(clock.clone()),
                clock: clock.clone(),
                interval,
                acts: Arc::default(),
                sent: Arc::default(),
                replays: Arc::default(),
                applied: Arc::default(),
            };
            let events = Timed {
                clock: clock.clone(),
                events: Arc::default(),
            };
            let builder = Counter::builder("staged", interval).diagnostics(events.clone());
            let (counter, worker) = configure(builder)
                .build(store.clone(), clock.clone())
                .unwrap();
            let pool = LocalPool::new();
            pool.spawner().spawn_local(worker).unwrap();
            let mut rig = Self {
                clock,
                store,
                pool,
                counter,
                events,
            };
            rig.counter.increment(1);
            rig.run_for(interval * 3);
            rig
        }

        pub(crate) fn run_for(&mut self, by: Duration) {
            let target = self.clock.now() + by;
            loop {
                self.pool.run_until_stalled();
                let next = [self.clock.next_wake(), self.store.next_replay()]
                    .into_iter()
                    .flatten()
                    .min()
                    .filter(|at| *at <= target);
                self.clock.advance_to(next.unwrap_or(target));
                self.store.run_due_replays();
                if next.is_none() {
                    self.pool.run_until_stalled();
                    return;
                }
            }
        }

        /// Runs until the store has had `n` copies in all.
        pub(crate) fn run_until_sent(&mut self, n: usize) {
            for _ in 0..10_000 {
                if self.store.sends() >= n {
                    return;
                }
                self.run_for(self.store.interval / 100);
            }
            panic!("copy {n} was never sent");
        }
    }
}

use staged::{Act, Rig};

/// A copy that answers is no longer awaited: the slow-store alarm measures from the oldest
/// copy still unanswered, not from one that answered (`Flight::next_answer` must forget the
/// copy that answered, and only it).
#[test]
fn the_slow_alarm_measures_from_the_copy_still_unanswered() {
    let mut r = Rig::new(|b| b);
    let sent = r.store.sends();
    // The first copy answers after 40 ms (under half the interval) that it landed in the
    // wrong interval; the next one never answers.
    r.store.then([
        Act::Answer(ms(40), Outcome::WrongInterval),
        Act::Hang,
        Act::Hang,
        Act::Hang,
        Act::Hang,
    ]);
    r.counter.increment(5);
    r.run_until_sent(sent + 2);
    let second = r.store.sent.lock().unwrap()[sent + 1].0;
    r.run_for(INTERVAL * 3);
    let slow = r.events.times("round trip slow");
    assert_eq!(slow.len(), 1, "{:?}", r.events.events.lock().unwrap());
    // Half an interval unanswered is evidence, half an interval more of it is an alarm.
    assert_eq!(
        slow[0],
        second + INTERVAL,
        "{:?}",
        r.events.events.lock().unwrap()
    );
}

/// A copy sent again after the first went unanswered answers late that the participant had
/// added to its interval, while the first is still awaited: the next copy goes at the aim for
/// the next interval, as a retarget, not at the late copy's timeout as if it were unanswered.
#[test]
fn a_late_answer_to_the_last_copy_keeps_its_retarget_while_an_older_copy_is_awaited() {
    let mut r = Rig::new(|b| b);
    let sent = r.store.sends();
    r.store
        .then([Act::Hang, Act::Answer(ms(150), Outcome::Fenced), Act::Hang]);
    let start = comcount_core::clock::Clock::now(&r.clock);
    r.counter.increment(5);
    r.run_until_sent(sent + 3);
    let events = r.events.events.lock().unwrap().clone();
    let resent: Vec<_> = events
        .iter()
        .filter(|(at, message, _)| *at >= start && *message == "copy resent")
        .map(|(_, _, text)| text.clone())
        .collect();
    assert_eq!(resent.len(), 2, "{events:?}");
    assert!(resent[0].contains("Unanswered"), "{resent:?}");
    assert!(
        resent[1].contains("Fenced"),
        "the copy after the fenced answer went as {}",
        resent[1]
    );
}

/// However long a store leaves copies unanswered, copies thin out: the timeout doubles twice,
/// then one copy goes every four timeouts (0, 0.1, 0.3, 0.7, 1.1, 1.5 s, ...), never faster.
#[test]
fn unanswered_copies_thin_out_to_one_every_four_timeouts() {
    let mut r = Rig::new(|b| b);
    let sent = r.store.sends();
    r.store.then((0..40).map(|_| Act::Hang));
    r.counter.increment(5);
    r.run_for(Duration::from_secs(5));
    let copies = r.store.sends() - sent;
    assert!((4..=14).contains(&copies), "{copies} copies in 5 s");
}

/// Copies unanswered past the resend window, when no copy may follow them: the flush must wait
/// for an answer or for giving up, not wake again at once for a timeout already dealt with.
/// On the virtual clock a spinning loop never gives the time back, so this test runs the
/// counter on a thread of its own and fails when that thread is not done in ten seconds.
#[test]
fn unanswered_copies_past_the_resend_window_do_not_make_the_flush_loop_spin() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // With no resending, the window is over at the first timeout; with a short timeout,
        // its doublings are all over long before the flush is given up.
        let mut r = Rig::new(|b| {
            b.after_reply_without_resend()
                .flush_timeout(Duration::from_millis(10))
        });
        r.store.then((0..20).map(|_| Act::Hang));
        r.counter.increment(5);
        r.run_for(Duration::from_secs(90));
        done.send(r.store.sends()).unwrap();
    });
    let sends = finished.recv_timeout(Duration::from_secs(10));
    assert!(
        sends.is_ok(),
        "ninety seconds of virtual time did not pass in ten of real time: the flush loop spins"
    );
}

/// A copy answered "fenced" in an interval after the one it aimed at: the fence is past every
/// interval a copy of the flush was aimed at, so none can ever land, and a counter closed
/// while the flush waits to retarget puts the amount back (`Flight::certainly_not_counted`).
#[test]
fn a_flush_the_fence_has_passed_goes_back_to_the_buffer_on_close() {
    let mut r = Rig::new(|b| b);
    let sent = r.store.sends();
    r.store.then([Act::Fenced(1)]);
    r.counter.increment(5);
    r.run_until_sent(sent + 1);
    r.run_for(ms(1));
    assert_eq!(r.store.sends(), sent + 1, "the retargeted copy waits");
    r.counter.close();
    r.run_for(INTERVAL * 5);
    assert_eq!(
        r.counter.buffered(),
        5,
        "{:?}",
        r.events.events.lock().unwrap()
    );
    assert!(r.events.times("flush failed").is_empty());
}

/// A copy answered "fenced" in the very interval it aimed at: the fence is not past it, and a
/// client's replay of the copy may land in the next interval, so a counter closed while the
/// flush waits to retarget must report the amount unsettled, not put it back
/// (`Flight::certainly_not_counted` compares the fence with the aim strictly).
#[test]
fn a_flush_the_fence_has_only_reached_is_unsettled_on_close() {
    let mut r = Rig::new(|b| b);
    let sent = r.store.sends();
    let before = r.store.applied();
    r.store.then([Act::FencedThenReplayed(INTERVAL / 2)]);
    r.counter.increment(5);
    r.run_until_sent(sent + 1);
    r.run_for(ms(1));
    assert_eq!(r.store.sends(), sent + 1, "the retargeted copy waits");
    r.counter.close();
    r.run_for(INTERVAL * 5);
    assert_eq!(r.store.applied() - before, 5, "the replay landed");
    assert_eq!(r.counter.buffered(), 0, "so the amount must not be back");
    assert_eq!(r.events.times("flush failed").len(), 1);
}

/// A copy turned away whose resend would go exactly at the end of the resend window is not
/// sent: the window is half-open (`Flusher::may_send`).
#[test]
fn no_copy_goes_at_the_end_of_the_resend_window() {
    let window = ms(200);
    let mut r = Rig::new(|b| b.resend_window(window).flush_timeout(window * 2));
    let sent = r.store.sends();
    // Turned away 198 ms after it went: the resend waits a fiftieth of the interval, 2 ms.
    r.store.then([Act::Fail(window - ms(2), || {
        comcount_core::StoreError::unavailable("busy")
    })]);
    r.counter.increment(5);
    r.run_for(INTERVAL * 5);
    let sends = r.store.sent.lock().unwrap().clone();
    let seq = sends[sent].1.seq;
    let copies: Vec<_> = sends[sent..].iter().filter(|(_, q)| q.seq == seq).collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    // The next flush applied finds the fence empty: the amount was never counted, goes
    // again, and nothing is reported failed.
    assert!(r.events.times("flush failed").is_empty());
    assert_eq!(r.counter.buffered(), 0);
}

/// A copy that answers "wrong interval" just as the flush is due to be given up is not
/// followed by another, even one the aim would send at once: the time to give up is
/// half-open too (`Flusher::may_send`).
#[test]
fn no_copy_goes_when_the_flush_is_given_up() {
    // Given up after four intervals: the resend window is zero, and four round trips of the
    // smoothed 50 ms (one sample of 400 ms after the warm-up's of 0) are less.
    let mut r = Rig::new(|b| b.resend_window(Duration::ZERO).flush_timeout(ms(1_000)));
    let sent = r.store.sends();
    r.store
        .then([Act::Answer(INTERVAL * 4, Outcome::WrongInterval)]);
    r.counter.increment(5);
    r.run_for(INTERVAL * 10);
    let sends = r.store.sent.lock().unwrap().clone();
    let seq = sends[sent].1.seq;
    let copies: Vec<_> = sends[sent..].iter().filter(|(_, q)| q.seq == seq).collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    // The next flush applied finds the fence empty: the amount was never counted, goes
    // again, and nothing is reported failed.
    assert!(r.events.times("flush failed").is_empty());
    assert_eq!(r.counter.buffered(), 0);
}

/// The failures reported, as their debug text.
fn failures(r: &Rig) -> Vec<String> {
    r.events
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, message, _)| *message == "flush failed")
        .map(|(.., event)| event.clone())
        .collect()
}

/// The flush failed once, its amount reported unsettled.
fn assert_one_failure_unsettled(r: &Rig, amount: u64) {
    let failures = failures(r);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].contains(&format!("dropped: 0, unsettled: {amount}")),
        "{failures:?}"
    );
}

/// A copy that answers "wrong interval" while a later copy is still awaited sends no copy of
/// its own: the awaited copy's timeout decides (`Flusher::plan_copy`).
#[test]
fn an_answer_sends_no_copy_while_another_is_awaited() {
    let mut r = Rig::new(|b| b.flush_timeout(INTERVAL));
    let sent = r.store.sends();
    // The first copy answers after 150 ms, past its 100 ms timeout, when the second (sent at
    // 100 ms) is awaited; that one never answers, and its timeout is 100 ms.
    r.store
        .then([Act::Answer(ms(150), Outcome::WrongInterval), Act::Hang]);
    r.counter.increment(5);
    r.run_until_sent(sent + 1);
    let first = r.store.sent.lock().unwrap()[sent].0;
    r.run_for(ms(190));
    let copies: Vec<_> = r.store.sent.lock().unwrap()[sent..]
        .iter()
        .map(|(at, _)| *at - first)
        .collect();
    assert_eq!(copies, [ms(0), ms(100)]);
}

/// A flush refused after an earlier copy went unanswered may have been counted: it is
/// reported unsettled, not dropped (`Flusher::conclude`).
#[test]
fn a_refusal_after_an_unanswered_copy_is_unsettled() {
    let mut r = Rig::new(|b| b);
    r.store.then([
        Act::Fail(ms(0), || {
            comcount_core::StoreError::unanswered("connection reset")
        }),
        Act::Fail(ms(0), || comcount_core::StoreError::refused("NOPERM")),
    ]);
    r.counter.increment(5);
    r.run_for(INTERVAL * 3);
    assert_one_failure_unsettled(&r, 5);
}

/// A copy turned away, then a copy answered `stale` (a later flush of this id was applied):
/// the copy turned away may have run (fred hands one command's CLUSTERDOWN to every command
/// on the connection it drops), so the flush is reported unsettled, not dropped.
#[test]
fn a_stale_answer_after_a_copy_turned_away_is_unsettled() {
    let mut r = Rig::new(|b| b);
    r.store.then([
        Act::Fail(ms(0), || {
            comcount_core::StoreError::unavailable("CLUSTERDOWN The cluster is down")
        }),
        Act::Answer(ms(0), Outcome::Stale),
    ]);
    r.counter.increment(5);
    r.run_for(INTERVAL * 3);
    assert_one_failure_unsettled(&r, 5);
}

/// A flush given up after its copies were fenced in intervals past every one they aimed at is
/// certainly not counted: its amount goes back to the buffer and into the next flush, with no
/// failure reported (`Flusher::conclude`).
#[test]
fn a_flush_given_up_past_the_fence_goes_back_to_the_buffer() {
    let mut r = Rig::new(|b| b.resend_window(Duration::ZERO));
    let before = r.store.applied();
    let sent = r.store.sends();
    // Four copies, a retarget every interval, before the flush is given up after four
    // intervals; each is fenced in the interval after the one it aimed at.
    r.store.then((0..4).map(|_| Act::Fenced(1)));
    r.counter.increment(5);
    r.run_until_sent(sent + 5);
    let copies: Vec<_> = r.store.sent.lock().unwrap()[sent..]
        .iter()
        .map(|(_, q)| (q.seq, q.amount()))
        .collect();
    assert_eq!(copies[3].0, copies[0].0, "{copies:?}");
    assert_ne!(
        copies[4].0, copies[0].0,
        "the fifth copy is the next flush's"
    );
    assert_eq!(copies[4].1, 5, "with the amount put back");
    r.run_for(INTERVAL * 30);
    assert!(failures(&r).is_empty(), "{:?}", failures(&r));
    assert_eq!(r.store.applied() - before, 5);
}

/// A flush given up after its copies kept landing in the wrong interval is reported
/// unsettled for that reason, not for want of an answer (`Flusher::conclude`).
#[test]
fn a_flush_that_never_landed_says_so() {
    let mut r = Rig::new(|b| b.resend_window(Duration::ZERO));
    r.store
        .then((0..40).map(|_| Act::Answer(ms(0), Outcome::WrongInterval)));
    r.counter.increment(5);
    r.run_for(INTERVAL * 10);
    let failures = failures(&r);
    let ours: Vec<_> = failures
        .iter()
        .filter(|f| f.contains("unsettled: 5"))
        .collect();
    assert_eq!(ours.len(), 1, "{failures:?}");
    assert!(ours[0].contains("NeverLanded"), "{failures:?}");
    assert!(
        ours[0].contains("kept arriving in another interval"),
        "{failures:?}"
    );
}

/// A counter closed while a flush of nothing is in the air reports no failure
/// (`Flusher::closed`).
#[test]
fn closing_during_an_empty_flush_reports_nothing() {
    let mut r = Rig::new(|b| b);
    let sent = r.store.sends();
    r.store.then([Act::Hang]);
    r.run_until_sent(sent + 1);
    assert_eq!(r.store.sent.lock().unwrap()[sent].1.amount(), 0);
    r.counter.close();
    r.run_for(INTERVAL * 3);
    assert!(failures(&r).is_empty(), "{:?}", failures(&r));
}

/// On an interval of five minutes the fence lives three intervals, fifteen minutes, and a flush
/// is given up after half of that, not after four intervals: no copy may outlive the fence
/// that keeps it from counting twice (`Flusher::give_up_after`).
#[test]
fn no_copy_goes_after_half_the_fence_life() {
    let interval = Duration::from_secs(300);
    let half_fence = interval * 3 / 2;
    let mut r = Rig::with_interval(interval, |b| b);
    let sent = r.store.sends();
    r.store
        .then((0..20).map(|_| Act::Answer(ms(0), Outcome::WrongInterval)));
    r.counter.increment(5);
    r.run_until_sent(sent + 1);
    r.run_for(interval * 6);
    let sends = r.store.sent.lock().unwrap().clone();
    let (first, seq) = (sends[sent].0, sends[sent].1.seq);
    let late: Vec<_> = sends[sent..]
        .iter()
        .filter(|(at, q)| q.seq == seq && *at - first >= half_fence)
        .map(|(at, _)| *at - first)
        .collect();
    assert!(late.is_empty(), "copies sent {late:?} after the first");
}

/// An amount put back while the buffer filled up keeps what fits, and reports the rest
/// dropped (`Flusher::put_back`).
#[test]
fn what_does_not_fit_back_in_the_buffer_is_reported_dropped() {
    let max = i64::MAX as u64;
    let mut r = Rig::new(|b| b);
    let sent = r.store.sends();
    r.store.then([Act::Fenced(1)]);
    r.counter.increment(100);
    r.run_until_sent(sent + 1);
    r.run_for(ms(1));
    r.counter.increment(max - 40);
    r.counter.close();
    r.run_for(INTERVAL * 3);
    assert_eq!(r.counter.buffered(), max);
    let failures = failures(&r);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].contains("dropped: 60, unsettled: 0"),
        "{failures:?}"
    );
}

/// Copies turned away at once are resent after a fiftieth of the interval, doubling up to
/// half an interval, and an answer in between starts the doubling over (`Backoff`).
#[test]
fn resends_after_quick_failures_back_off_and_start_over_after_an_answer() {
    fn busy() -> comcount_core::StoreError {
        comcount_core::StoreError::unavailable("busy")
    }
    let mut r = Rig::new(|b| b);
    let sent = r.store.sends();
    let mut acts: Vec<_> = (0..7).map(|_| Act::Fail(ms(0), busy)).collect();
    acts.push(Act::Answer(ms(0), Outcome::WrongInterval));
    acts.push(Act::Fail(ms(0), busy));
    r.store.then(acts);
    r.counter.increment(5);
    r.run_for(INTERVAL * 3);
    let times: Vec<_> = r.store.sent.lock().unwrap()[sent..]
        .iter()
        .map(|(at, _)| *at)
        .collect();
    let gaps: Vec<_> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(
        gaps[..7],
        [ms(2), ms(4), ms(8), ms(16), ms(32), ms(50), ms(50)],
        "{gaps:?}"
    );
    // gaps[7] is the retarget after the answer; the failure after it waits 2 ms again.
    assert_eq!(gaps[8], ms(2), "{gaps:?}");
}

/// Each way a flush can end unsettled or refused says why, in words.
#[test]
fn each_failure_says_why() {
    // No answer within the time to give up (four intervals, with no resend window).
    let mut r = Rig::new(|b| b.resend_window(Duration::ZERO));
    r.store.then([Act::Hang, Act::Hang]);
    r.counter.increment(5);
    // In doubt until a later flush is applied: reported when the next goes in doubt too.
    r.run_for(INTERVAL * 12);
    let failed = failures(&r);
    assert!(
        failed[0].contains("NoReply") && failed[0].contains("no copy of the flush was answered"),
        "{failed:?}"
    );

    // Closed while a copy is in the store's hands.
    let mut r = Rig::new(|b| b);
    let sent = r.store.sends();
    r.store.then([Act::Hang]);
    r.counter.increment(5);
    r.run_until_sent(sent + 1);
    r.counter.close();
    r.run_for(INTERVAL);
    let failed = failures(&r);
    assert!(
        failed[0].contains("ClosedInFlight")
            && failed[0].contains("closed while the flush was in the store's hands"),
        "{failed:?}"
    );

    // Stale: another participant under the same id flushed later.
    let mut r = Rig::new(|b| b);
    r.store.then([Act::Answer(ms(0), Outcome::Stale)]);
    r.counter.increment(5);
    r.run_for(INTERVAL * 3);
    let failed = failures(&r);
    assert!(
        failed[0].contains("StaleFlush")
            && failed[0].contains("already applied a later flush under this participant id"),
        "{failed:?}"
    );
}
