//! The counter's behaviour, scenario by scenario, on virtual time, under tokio and under smol.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::time::Duration;

use comcount_core::builder::Builder;
use comcount_core::clock::{Clock, Timer};
use comcount_core::diagnostics::{Level, Record, Recorder};
use comcount_core::{Counter, FlushReply, Outcome, StoreError};
use common::runtime::{Runtime, eventually};
use common::scripted::{Action, ScriptedStore};

/// A counter on a scripted store, with its events recorded and its worker spawned.
struct Setup<R: Runtime> {
    rt: R,
    timer: R::Timer,
    store: ScriptedStore<R::Timer>,
    events: Recorder,
    counter: Counter,
    finished: common::runtime::Finished,
}

impl<R: Runtime> Setup<R> {
    fn new(rt: R) -> Self {
        Self::with(rt, |b| b)
    }

    fn with(rt: R, configure: impl FnOnce(Builder) -> Builder) -> Self {
        let timer = rt.timer();
        let store = ScriptedStore::new(timer.clone());
        let events = Recorder::new();
        let builder = Counter::builder("requests", rt.interval())
            .prefix("test:")
            .diagnostics(events.clone());
        let (counter, worker) = configure(builder)
            .build(store.clone(), timer.clone())
            .unwrap();
        let finished = rt.spawn(worker);
        Self {
            rt,
            timer,
            store,
            events,
            counter,
            finished,
        }
    }

    fn interval(&self) -> Duration {
        self.rt.interval()
    }

    /// A reply as the store would give it now, with the given outcome and total.
    fn reply(&self, outcome: Outcome, previous_total: Option<u64>) -> FlushReply {
        let now = self.timer.now().as_millis();
        let interval = self.interval().as_millis();
        let n = (now / interval) as u64;
        let totals = match outcome {
            Outcome::WrongInterval => vec![],
            _ => vec![previous_total],
        };
        FlushReply::new(
            outcome,
            n,
            Duration::from_millis((now % interval) as u64),
            outcome.is_counted().then_some(n),
        )
        .with_totals(totals)
    }

    async fn sleep_intervals(&self, n: u32) {
        self.timer.sleep(self.interval() * n).await;
    }

    /// Waits (up to `n` intervals) for `condition`, and fails the test with `what` if it never
    /// holds.
    async fn expect_within(&self, n: u32, what: &str, condition: impl FnMut() -> bool) {
        assert!(
            eventually(&self.timer, self.interval() * n, condition).await,
            "{what} did not happen within {n} intervals; events: {:?}",
            self.events.messages()
        );
    }
}

fn lost() -> StoreError {
    StoreError::unanswered("connection reset")
}

async fn silent_until_the_first_increment<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.sleep_intervals(3).await;
    assert_eq!(
        s.store.calls(),
        0,
        "a counter never incremented must not flush"
    );
    assert_eq!(s.events.messages(), ["counter started"]);
    let started = &s.events.records()[0];
    assert_eq!(started.level, Level::Info);
    assert_eq!(started.counter, "requests");
    assert_eq!(started.attribute("prefix"), Some("test:"));
    assert_eq!(started.attribute("store"), Some("scripted"));
    let interval_ms = s.interval().as_millis().to_string();
    assert_eq!(started.attribute("interval_ms"), Some(interval_ms.as_str()));

    assert_eq!(s.counter.increment(2), 2);
    s.expect_within(2, "a completed flush", || {
        !s.events.with_message("flush completed").is_empty()
    })
    .await;
    let completed = &s.events.with_message("flush completed")[0];
    assert_eq!(completed.level, Level::Debug);
    assert_eq!(completed.attribute("amount"), Some("2"));
    let n = completed.attribute("interval").unwrap();
    assert_eq!(
        s.store.memory.total(&format!("test:{{requests}}:{n}")),
        Some(2)
    );
    assert!(s.events.records().iter().all(|r| r.level <= Level::Info));
}

async fn the_group_total_comes_back_with_the_next_flush<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    let timer = s.timer.clone();
    let (other, worker) = Counter::builder("requests", s.interval())
        .prefix("test:")
        .build(s.store.clone(), timer.clone())
        .unwrap();
    let _other_finished = s.rt.spawn(worker);
    // Both count in the same interval; the totals meet in the store.
    s.counter.increment(5);
    other.increment(7);
    s.expect_within(4, "the group's total reaching both participants", || {
        s.counter.group_total() == Some(12) && other.group_total() == Some(12)
    })
    .await;
    assert!(s.counter.increment(1) >= 12);
}

async fn no_previous_total_leaves_the_buffer_as_the_count<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.store
        .then([Action::Reply(s.reply(Outcome::Applied, Some(100)))]);
    s.store
        .then([Action::Reply(s.reply(Outcome::Applied, None))]);
    s.counter.increment(1);
    s.expect_within(1, "the first reply", || {
        s.counter.group_total() == Some(100)
    })
    .await;
    assert_eq!(s.counter.increment(1), 100);
    s.expect_within(3, "the second reply", || s.counter.group_total().is_none())
        .await;
    // The second flush took the 1 counted in between; the buffer holds only what came since.
    assert_eq!(s.counter.increment(2), 2);
}

async fn a_hanging_flush_makes_the_total_go_stale<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.store.then([
        Action::Reply(s.reply(Outcome::Applied, Some(100))),
        Action::Hang,
    ]);
    s.counter.increment(1);
    s.expect_within(1, "the first reply", || {
        s.counter.group_total() == Some(100)
    })
    .await;
    s.expect_within(6, "the total going stale", || {
        s.counter.group_total().is_none()
    })
    .await;
    let refreshed = s.store.call_times()[0];
    assert!(
        s.timer.now() - refreshed >= s.interval() * 2,
        "stale before two intervals"
    );
    assert_eq!(
        s.counter.increment(3),
        3,
        "with no total, the count is the buffer"
    );
    let stale = s.events.with_message("total went stale");
    assert_eq!(stale.len(), 1);
    assert_eq!(stale[0].level, Level::Warn);
    let after: u128 = stale[0].attribute("after_ms").unwrap().parse().unwrap();
    assert!(after >= 2 * s.interval().as_millis());
    // One flush is in the air: every copy sent since the hang carries its sequence number.
    let requests = s.store.requests();
    assert!(requests.len() >= 2);
    assert!(
        requests[1..].iter().all(|r| r.seq == requests[1].seq),
        "a new flush went out while one was unsettled"
    );
}

async fn under_the_after_reply_without_resend_an_unanswered_flush_is_settled_by_the_next_one<
    R: Runtime,
>(
    rt: R,
) {
    let s = Setup::with(rt, Builder::after_reply_without_resend);
    s.store.then([Action::Fail(lost)]);
    s.counter.increment(5);
    // Given up at once, not sent again: the next flush goes an interval later, with only what
    // came since.
    s.sleep_intervals(1).await;
    s.counter.increment(1);
    s.expect_within(3, "the next flush", || {
        !s.events.with_message("flush completed").is_empty()
    })
    .await;
    assert_eq!(
        s.events.with_message("flush completed")[0].attribute("amount"),
        Some("1")
    );
    let requests = s.store.requests();
    assert_ne!(
        requests[0].seq, requests[1].seq,
        "an unanswered flush was resent"
    );
    let times = s.store.call_times();
    assert!(times[1] - times[0] >= s.interval());
    // Its reply said the fence held nothing: the lost flush was never counted, and its amount
    // goes with the flush after, instead of being reported unsettled.
    s.expect_within(3, "the lost amount sent again", || {
        s.events.with_message("flush completed").len() >= 2
    })
    .await;
    assert_eq!(
        s.events.with_message("flush completed")[1].attribute("amount"),
        Some("5")
    );
    assert!(s.events.with_message("flush failed").is_empty());
}

async fn a_fenced_flush_goes_to_a_later_interval_as_the_same_flush<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.store
        .then([Action::Reply(s.reply(Outcome::Fenced, Some(40)))]);
    s.counter.increment(4);
    s.expect_within(1, "the fenced reply", || {
        s.counter.group_total() == Some(40)
    })
    .await;
    s.expect_within(3, "the amount counted by the same flush", || {
        s.events
            .with_message("flush completed")
            .iter()
            .any(|r| r.attribute("amount") == Some("4"))
    })
    .await;
    let requests = s.store.requests();
    assert_eq!(requests[0].seq, requests[1].seq);
    assert_eq!(requests[1].amount(), 4);
    assert!(
        requests[1].expect > requests[0].expect,
        "sent to a later interval"
    );
    assert!(s.events.with_message("flush failed").is_empty());
}

async fn a_run_of_wrong_intervals_is_bounded<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    // A store that keeps saying it is past the middle of an interval: each reply invites an
    // immediate resend, but only a few in a row.
    let mut late = s.reply(Outcome::WrongInterval, None);
    late.phase = s.interval() * 5 / 8;
    s.store.then((0..3).map(|_| Action::Reply(late.clone())));
    s.counter.increment(6);
    s.expect_within(3, "a flush after the wrong intervals", || {
        s.store.calls() >= 4
    })
    .await;
    let times = s.store.call_times();
    if s.rt.exact_time() {
        assert!(times[1] - times[0] < s.interval() / 4 && times[2] - times[1] < s.interval() / 4);
    }
    // Whatever the machine's load, a fourth attempt never follows at once.
    assert!(
        times[3] - times[2] >= s.interval() / 2,
        "after three in a row, the next attempt waits for the next interval"
    );
    s.expect_within(1, "the amount counted", || {
        s.events
            .with_message("flush completed")
            .iter()
            .any(|r| r.attribute("amount") == Some("6"))
    })
    .await;
    assert!(s.events.with_message("flush failed").is_empty());
}

async fn an_unanswered_flush_is_resent_as_the_same_flush<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.store.then([Action::Fail(lost), Action::Fail(lost)]);
    s.counter.increment(5);
    s.expect_within(2, "the resent flush counted", || {
        !s.events.with_message("flush completed").is_empty()
    })
    .await;
    let requests = s.store.requests();
    let (first, last) = (&requests[0], &requests[2]);
    assert_eq!((first.seq, first.amount()), (last.seq, last.amount()));
    assert_eq!(
        s.events.with_message("flush completed")[0].attribute("amount"),
        Some("5")
    );
    assert!(s.events.with_message("flush failed").is_empty());
}

async fn a_hung_flush_times_out_and_is_resent<R: Runtime>(rt: R) {
    let timeout = rt.interval() / 4;
    let s = Setup::with(rt, |b| b.flush_timeout(timeout));
    s.store.then([Action::Hang]);
    s.counter.increment(3);
    s.expect_within(2, "the resent flush counted", || {
        !s.events.with_message("flush completed").is_empty()
    })
    .await;
    let times = s.store.call_times();
    assert!(times[1] - times[0] >= timeout, "resent before the timeout");
    let requests = s.store.requests();
    assert_eq!(requests[0].seq, requests[1].seq);
    assert_eq!(
        s.events.with_message("flush completed")[0].attribute("amount"),
        Some("3")
    );
}

async fn a_refused_flush_is_dropped_not_resent<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.store.then([Action::Fail(|| {
        StoreError::refused("increment or decrement would overflow")
    })]);
    s.counter.increment(9);
    s.expect_within(1, "the failure report", || {
        !s.events.with_message("flush failed").is_empty()
    })
    .await;
    assert_eq!(
        s.events.with_message("flush failed")[0].attribute("dropped"),
        Some("9")
    );
    assert_eq!(s.counter.buffered(), 0);
}

async fn a_flush_turned_away_or_cut_short_is_resent<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.store.then([
        Action::Fail(|| StoreError::unavailable("TRYAGAIN")),
        Action::Fail(|| StoreError::malformed("a reply cut short")),
    ]);
    s.counter.increment(4);
    s.expect_within(2, "the resent flush counted", || {
        !s.events.with_message("flush completed").is_empty()
    })
    .await;
    let requests = s.store.requests();
    assert_eq!(
        (requests[0].seq, requests[0].amount()),
        (requests[2].seq, 4)
    );
    assert!(s.events.with_message("flush failed").is_empty());
}

/// A cluster client that follows a failover on its own answers a copy only after its own
/// resends, most of an interval later (here, just within the resend timeout); by then the slot
/// may have a new owner, and the next copy goes after the short backoff, not after as long
/// again.
async fn a_copy_turned_away_after_the_clients_own_resends_is_sent_again_soon<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    let held = s.interval() * 9 / 10;
    s.store.then([Action::FailAfter(held, || {
        StoreError::unavailable("MOVED 15143 127.0.0.1:7002").after_unseen_resends()
    })]);
    s.counter.increment(3);
    s.expect_within(8, "the resent flush counted", || {
        !s.events.with_message("flush completed").is_empty()
    })
    .await;
    let times = s.store.call_times();
    let answered = times[0] + held;
    let resent = times
        .iter()
        .find(|at| **at >= answered)
        .expect("a copy after the turned-away one");
    assert!(
        *resent - answered <= s.interval() / 2,
        "the next copy went {:?} after the answer (sent at {times:?})",
        *resent - answered
    );
    assert!(s.events.with_message("flush failed").is_empty());
}

async fn refused_flushes_do_not_spin<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.counter.increment(1);
    s.expect_within(2, "a first flush", || {
        !s.events.with_message("flush completed").is_empty()
    })
    .await;
    let refused = || StoreError::refused("ERR something is wrong");
    s.store.then((0..4).map(|_| Action::Fail(refused)));
    s.expect_within(8, "four refused flushes", || {
        s.events.with_message("flush failed").len() >= 4
    })
    .await;
    // Each refusal waits for the next interval before the next flush goes out.
    let times = s.store.call_times();
    let last = &times[times.len() - 4..];
    for pair in last.windows(2) {
        assert!(
            pair[1] - pair[0] >= s.interval() / 2,
            "flushes {pair:?} follow a refusal too closely"
        );
    }
}

async fn flushes_aim_at_the_middle_of_each_interval<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    for _ in 0..6 {
        s.counter.increment(1);
        s.sleep_intervals(1).await;
    }
    let interval = s.interval();
    let times = s.store.call_times();
    // The first flushes learn the store's clock; from then on each lands mid-interval, one
    // per interval.
    let settled: Vec<_> = times.iter().skip(2).collect();
    assert!(settled.len() >= 4, "only {} flushes", settled.len());
    if s.rt.exact_time() {
        for at in &settled {
            let phase = at.as_millis() % interval.as_millis();
            assert_eq!(
                phase,
                interval.as_millis() / 2,
                "a flush at {at:?} is off the middle"
            );
        }
    }
    let intervals: Vec<u128> = settled
        .iter()
        .map(|t| t.as_millis() / interval.as_millis())
        .collect();
    // On real time a stall of a quarter interval may push one over an edge; the fence then
    // keeps it from counting twice, which the model tests check.
    if s.rt.exact_time() {
        assert!(
            intervals.windows(2).all(|w| w[1] == w[0] + 1),
            "skipped or doubled: {intervals:?}"
        );
    }
}

async fn close_stops_the_tick_and_keeps_counting_locally<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.counter.increment(1);
    s.expect_within(2, "a completed flush", || {
        !s.events.with_message("flush completed").is_empty()
    })
    .await;
    assert!(!s.counter.is_closed());
    s.counter.close();
    s.counter.close();
    assert!(s.counter.is_closed());
    s.expect_within(1, "the worker ending", || s.finished.is_finished())
        .await;
    let calls = s.store.calls();
    assert_eq!(s.counter.increment(2), 2);
    assert_eq!(s.counter.increment(3), 5);
    s.sleep_intervals(3).await;
    assert_eq!(s.store.calls(), calls, "nothing may be sent after close");
    assert_eq!(s.events.messages().last(), Some(&"counter stopped"));
    assert_eq!(s.events.with_message("counter stopped").len(), 1);
}

async fn dropping_every_handle_stops_the_tick<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    let clone = s.counter.clone();
    clone.increment(1);
    let Setup {
        counter,
        finished,
        timer,
        events,
        ..
    } = s;
    drop(counter);
    timer.sleep(Duration::from_millis(50)).await;
    assert!(
        !finished.is_finished() && !events.messages().contains(&"counter stopped"),
        "the worker ended while a handle was alive"
    );
    drop(clone);
    assert!(
        eventually(&timer, Duration::from_secs(1), || finished.is_finished()).await,
        "the worker must end once every handle is gone"
    );
    assert_eq!(events.messages().last(), Some(&"counter stopped"));
    assert_eq!(events.with_message("counter stopped").len(), 1);
}

async fn a_store_slower_than_the_timeout_still_settles_each_flush<R: Runtime>(rt: R) {
    let timeout = rt.interval() / 4;
    let s = Setup::with(rt, |b| b.flush_timeout(timeout));
    // Every reply takes twice the timeout.
    s.store
        .then((0..40).map(|_| Action::Delay(s.interval() / 2)));
    for _ in 0..6 {
        s.counter.increment(1);
        s.sleep_intervals(1).await;
    }
    s.expect_within(3, "every unit counted", || completed_amount(&s.events) == 6)
        .await;
    let failed = s.events.with_message("flush failed");
    assert!(failed.is_empty(), "{failed:?}");
    // Once a reply has timed the round trip, the timeout is above it: copies stop.
    let completed = s.events.with_message("flush completed").len();
    assert!(completed >= 4, "only {completed} flushes completed");
    assert!(
        s.store.calls() <= completed + 4,
        "{} copies for {completed} flushes",
        s.store.calls()
    );
    assert!(s.counter.group_total().is_some(), "the total is known");
}

/// A flush timeout longer than a flush is ever kept (`Duration::MAX`, say) never times out: each
/// flush waits for its one copy's answer, however slow.
async fn a_flush_timeout_of_duration_max_never_times_out<R: Runtime>(rt: R) {
    let s = Setup::with(rt, |b| b.flush_timeout(Duration::MAX));
    s.store
        .then((0..6).map(|_| Action::Delay(s.interval() * 3 / 2)));
    for _ in 0..4 {
        s.counter.increment(1);
        s.sleep_intervals(1).await;
    }
    s.expect_within(8, "every unit counted", || completed_amount(&s.events) == 4)
        .await;
    let timed_out: Vec<_> = s
        .events
        .with_message("copy resent")
        .into_iter()
        .filter(|r| r.attribute("reason") == Some("unanswered"))
        .collect();
    assert!(timed_out.is_empty(), "{timed_out:?}");
    assert!(s.events.with_message("flush failed").is_empty());
    assert!(!s.finished.is_finished(), "the worker ended");
}

async fn a_store_slower_than_four_intervals_settles_each_flush_with_one_copy<R: Runtime>(rt: R) {
    // One copy a flush, kept four intervals, or four round trips once replies have timed them.
    let s = Setup::with(rt, |b| b.resend_window(Duration::ZERO));
    let interval = s.interval();
    // Every reply takes three and a half intervals. The first flush takes two copies, since
    // the first is aimed before the store's clock is known: seven intervals.
    s.store
        .then((0..40).map(|_| Action::Delay(interval * 7 / 2)));
    for _ in 0..20 {
        s.counter.increment(1);
        s.sleep_intervals(1).await;
    }
    s.expect_within(14, "every unit counted", || {
        completed_amount(&s.events) == 20
    })
    .await;
    let failed = s.events.with_message("flush failed");
    assert!(failed.is_empty(), "{failed:?}");
}

/// The sum of the amounts of the completed flushes.
fn completed_amount(events: &Recorder) -> u64 {
    events
        .with_message("flush completed")
        .iter()
        .map(|r| r.attribute("amount").unwrap().parse::<u64>().unwrap())
        .sum()
}

async fn a_round_trip_above_half_the_interval_is_reported_once<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    let slow = s.interval() * 3 / 2;
    s.store.then((0..12).map(|_| Action::Delay(slow)));
    let first = s.timer.now();
    s.counter.increment(1);
    let raised = expect_slow_warning(&s, first).await;
    assert_eq!(raised[0].level, Level::Warn);
    let interval_ms = s.interval().as_millis().to_string();
    assert_eq!(
        raised[0].attribute("interval_ms"),
        Some(interval_ms.as_str())
    );
    // Still slow: no second warning.
    for _ in 0..4 {
        s.counter.increment(1);
        s.sleep_intervals(1).await;
    }
    assert_eq!(s.events.with_message("round trip slow").len(), 1);
    // Fast again: said once.
    s.store.clear();
    s.expect_within(12, "the recovery", || {
        !s.events.with_message("round trip normal").is_empty()
    })
    .await;
    s.sleep_intervals(2).await;
    assert_eq!(s.events.with_message("round trip normal").len(), 1);
    assert_eq!(s.events.with_message("round trip slow").len(), 1);
}

async fn a_store_that_answers_nothing_is_reported_slow<R: Runtime>(rt: R) {
    // A flush timeout of three intervals: the warning does not wait for it.
    let interval = rt.interval();
    let s = Setup::with(rt, |b| b.flush_timeout(interval * 3));
    s.store.then((0..12).map(|_| Action::Hang));
    let first = s.timer.now();
    s.counter.increment(1);
    // No reply ever comes: the copy's age alone is the evidence.
    expect_slow_warning(&s, first).await;
}

/// Waits for `round trip slow` and checks that it names a round trip above half the interval
/// and (on exact time) came within two intervals of `first`; returns the warnings.
async fn expect_slow_warning<R: Runtime>(s: &Setup<R>, first: Duration) -> Vec<Record> {
    s.expect_within(3, "the warning", || {
        !s.events.with_message("round trip slow").is_empty()
    })
    .await;
    let raised = s.events.with_message("round trip slow");
    let round_trip: u128 = raised[0]
        .attribute("round_trip_ms")
        .unwrap()
        .parse()
        .unwrap();
    assert!(round_trip > s.interval().as_millis() / 2);
    if s.rt.exact_time() {
        assert!(
            s.timer.now() - first <= s.interval() * 2,
            "raised after {:?}",
            s.timer.now() - first
        );
    }
    raised
}

async fn closing_with_a_flush_in_flight_reports_it_unsettled<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.store.then([Action::Hang]);
    s.counter.increment(7);
    s.expect_within(1, "the flush sent", || s.store.calls() == 1)
        .await;
    s.counter.close();
    s.expect_within(1, "the worker ending", || s.finished.is_finished())
        .await;
    let failed = s.events.with_message("flush failed");
    assert_eq!(failed.len(), 1, "{:?}", s.events.messages());
    assert_eq!(failed[0].attribute("unsettled"), Some("7"));
    assert_eq!(failed[0].attribute("dropped"), Some("0"));
    s.sleep_intervals(3).await;
    assert_eq!(s.store.calls(), 1, "nothing may be sent after close");
}

async fn closing_while_a_flush_is_resent_reports_it_unsettled<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.store
        .then((0..50).map(|_| Action::Fail(|| StoreError::unavailable("TRYAGAIN"))));
    s.counter.increment(4);
    s.expect_within(2, "a resend", || s.store.calls() >= 2)
        .await;
    s.counter.close();
    s.expect_within(1, "the worker ending", || s.finished.is_finished())
        .await;
    let calls = s.store.calls();
    let kept = s.counter.buffered();
    let reported: u64 = s
        .events
        .with_message("flush failed")
        .iter()
        .map(|r| r.attribute("unsettled").unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(
        kept + reported,
        4,
        "the amount is neither kept nor reported"
    );
    s.sleep_intervals(3).await;
    assert_eq!(s.store.calls(), calls, "nothing may be sent after close");
}

async fn the_total_is_forgotten_when_the_counter_closes<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.store
        .then([Action::Reply(s.reply(Outcome::Applied, Some(10_000)))]);
    s.counter.increment(1);
    s.expect_within(1, "the total", || s.counter.group_total() == Some(10_000))
        .await;
    assert_eq!(s.counter.increment(1), 10_000);
    s.counter.close();
    assert_eq!(s.counter.group_total(), None);
    assert_eq!(
        s.counter.increment(1),
        2,
        "after close, the count is the buffer"
    );
    s.sleep_intervals(3).await;
    assert_eq!(s.counter.group_total(), None);
}

async fn a_duplicate_reports_the_interval_it_was_counted_in<R: Runtime>(rt: R) {
    let s = Setup::new(rt);
    s.counter.increment(1);
    let completed = || s.events.with_message("flush completed");
    s.expect_within(3, "the first flush", || !completed().is_empty())
        .await;
    let first: u64 = completed()[0]
        .attribute("interval")
        .unwrap()
        .parse()
        .unwrap();
    // The next flush aims at the interval after the first's, or later: its window holds
    // `first + 1`. It is answered an interval after that, as the duplicate of a copy that
    // was counted there.
    let counted_in = first + 1;
    let mut reply = s.reply(Outcome::Duplicate, Some(3));
    reply.interval = counted_in + 1;
    reply.counted_in = Some(counted_in);
    s.store.then([Action::Reply(reply)]);
    s.counter.increment(2);
    s.expect_within(3, "the completed flush", || completed().len() >= 2)
        .await;
    let expected = counted_in.to_string();
    assert_eq!(
        completed()[1].attribute("interval"),
        Some(expected.as_str())
    );
    assert_eq!(completed()[1].attribute("amount"), Some("2"));
}

macro_rules! on_every_runtime {
    ($($scenario:ident),* $(,)?) => {
        mod virtual_time {
            $(#[test] fn $scenario() { crate::common::runtime::Virtual::run(super::$scenario) })*
        }
        mod tokio_paused_time {
            $(#[test] fn $scenario() { crate::common::runtime::Tokio::run(super::$scenario) })*
        }
        mod smol_real_time {
            $(#[test] fn $scenario() { crate::common::runtime::Smol::run(super::$scenario) })*
        }
    };
}

on_every_runtime!(
    silent_until_the_first_increment,
    the_group_total_comes_back_with_the_next_flush,
    no_previous_total_leaves_the_buffer_as_the_count,
    a_hanging_flush_makes_the_total_go_stale,
    under_the_after_reply_without_resend_an_unanswered_flush_is_settled_by_the_next_one,
    an_unanswered_flush_is_resent_as_the_same_flush,
    a_hung_flush_times_out_and_is_resent,
    a_refused_flush_is_dropped_not_resent,
    a_flush_turned_away_or_cut_short_is_resent,
    a_copy_turned_away_after_the_clients_own_resends_is_sent_again_soon,
    refused_flushes_do_not_spin,
    flushes_aim_at_the_middle_of_each_interval,
    a_fenced_flush_goes_to_a_later_interval_as_the_same_flush,
    a_run_of_wrong_intervals_is_bounded,
    close_stops_the_tick_and_keeps_counting_locally,
    dropping_every_handle_stops_the_tick,
    a_store_slower_than_the_timeout_still_settles_each_flush,
    a_flush_timeout_of_duration_max_never_times_out,
    a_store_slower_than_four_intervals_settles_each_flush_with_one_copy,
    a_round_trip_above_half_the_interval_is_reported_once,
    a_store_that_answers_nothing_is_reported_slow,
    closing_with_a_flush_in_flight_reports_it_unsettled,
    closing_while_a_flush_is_resent_reports_it_unsettled,
    the_total_is_forgotten_when_the_counter_closes,
    a_duplicate_reports_the_interval_it_was_counted_in,
);
