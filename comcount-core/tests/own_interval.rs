//! A counter whose flushes never find a total in the interval before (its flushes wait behind
//! a queue, say) still learns one: what its own interval held right after its flush, once that
//! interval has ended.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::Reporter;
use comcount_core::{Counter, FlushReply, FlushRequest, Outcome, Store, StoreError};
use common::runtime::run_virtual_until;
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

const INTERVAL: Duration = Duration::from_millis(100);

/// A store that applies every flush at once, in the interval its clock is in, and always
/// answers that the interval before holds no total, as it would for a counter that skipped
/// it. Each reply carries the running sum of every amount as its own interval's total.
#[derive(Clone)]
struct NothingBefore {
    clock: VirtualClock,
    /// Every reply: when, its interval, the total it carried.
    replies: Arc<Mutex<Vec<(Duration, u64, u64)>>>,
}

impl Store for NothingBefore {
    fn name(&self) -> &str {
        "nothing-before"
    }

    async fn flush(
        &self,
        request: &FlushRequest,
        _report: &Reporter,
    ) -> Result<FlushReply, StoreError> {
        let now = self.clock.now();
        let interval_ms = INTERVAL.as_millis() as u64;
        let now_ms = now.as_millis() as u64;
        let n = now_ms / interval_ms;
        let mut replies = self.replies.lock().unwrap();
        let total = replies.last().map_or(0, |r| r.2) + request.amount();
        replies.push((now, n, total));
        Ok(FlushReply::new(
            Outcome::Applied,
            n,
            Duration::from_millis(now_ms % interval_ms),
            Some(n),
        )
        .with_totals(vec![None])
        .with_landed_totals(vec![Some(total)]))
    }
}

#[test]
fn a_counter_that_finds_no_total_before_takes_its_own_intervals_once_it_has_ended() {
    let clock = VirtualClock::new();
    let store = NothingBefore {
        clock: clock.clone(),
        replies: Arc::default(),
    };
    let mut pool = LocalPool::new();
    let (counter, worker) = Counter::builder("skipping", INTERVAL)
        .build(store.clone(), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    let (mut known, mut unknown) = (0, 0);
    // Samples 5 ms off every edge of 10 ms, over 30 intervals.
    for step in 0..300u64 {
        counter.increment(1);
        run_virtual_until(&mut pool, &clock, Duration::from_millis(step * 10 + 5));
        let now = clock.now();
        let replies = store.replies.lock().unwrap().clone();
        let Some(&(at, n, total)) = replies.last() else {
            continue;
        };
        assert!(at <= now);
        // Unknown until the reply's interval has ended; then what it held after the flush.
        let ended = now >= INTERVAL * (n as u32 + 1);
        let expected = ended.then_some(total);
        assert_eq!(
            counter.group_total(),
            expected,
            "at {now:?}, the last reply came at {at:?} from interval {n} with {total}"
        );
        if ended {
            known += 1;
        } else {
            unknown += 1;
        }
    }
    assert!(
        known > 50 && unknown > 50,
        "{known} samples known, {unknown} unknown"
    );
}

/// Answers the first flush as [`NothingBefore`] does, and never answers another.
#[derive(Clone)]
struct AnswersOnce(NothingBefore);

impl Store for AnswersOnce {
    fn name(&self) -> &str {
        "answers-once"
    }

    async fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> Result<FlushReply, StoreError> {
        if self.0.replies.lock().unwrap().is_empty() {
            self.0.flush(request, report).await
        } else {
            std::future::pending().await
        }
    }
}

/// A worker that stalls past the time its landed total would have gone stale does not take it
/// when it runs again: whether it is still fresh is decided by the time the worker runs, not
/// by the time its alarm was set for. (Taken, it would be the group's total until the same
/// run of the worker found it stale.)
#[test]
fn a_landed_total_gone_stale_during_a_stall_is_not_taken() {
    let clock = VirtualClock::new();
    let store = NothingBefore {
        clock: clock.clone(),
        replies: Arc::default(),
    };
    let recorder = comcount_core::diagnostics::Recorder::new();
    let mut pool = LocalPool::new();
    let (counter, worker) = Counter::builder("stalled", INTERVAL)
        .diagnostics(recorder.clone())
        .build(AnswersOnce(store.clone()), clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    counter.increment(5);
    // Up to the first reply, which brings its own interval's total of 5.
    let mut step = 0;
    while store.replies.lock().unwrap().is_empty() {
        step += 1;
        assert!(step < 100, "no flush was answered");
        run_virtual_until(&mut pool, &clock, Duration::from_millis(step));
    }
    assert_eq!(counter.group_total(), None);
    // The worker does not run for five intervals, far past the two (and the round trip) for
    // which the total would be fresh, then runs at once.
    clock.advance_to(clock.now() + INTERVAL * 5);
    pool.run_until_stalled();
    assert_eq!(counter.group_total(), None);
    let messages = recorder.messages();
    assert!(
        !messages.contains(&"total went stale") && !messages.contains(&"total fresh again"),
        "the stale landed total was taken: {messages:?}"
    );
}

/// Answers as a [`MemoryStore`](comcount_core::MemoryStore), and tells a family's applied
/// flush an own interval's total too, which the flush protocol gives only a single counter.
#[derive(Clone)]
struct LandedForEveryLayout(comcount_core::MemoryStore<VirtualClock>);

impl Store for LandedForEveryLayout {
    fn name(&self) -> &str {
        "landed-for-every-layout"
    }

    async fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> Result<FlushReply, StoreError> {
        let reply = self.0.flush(request, report).await?;
        Ok(match reply.outcome {
            Outcome::Applied => reply.with_landed_totals(vec![Some(99)]),
            _ => reply,
        })
    }
}

/// A store that tells a family's flush an own interval's total does not give it to a key: a
/// partition holds many keys' totals, and one number is none of theirs.
#[test]
fn a_familys_flush_takes_no_landed_total() {
    let clock = VirtualClock::new();
    let store = LandedForEveryLayout(comcount_core::MemoryStore::with_clock(clock.clone()));
    let mut pool = LocalPool::new();
    let (family, worker) = comcount_core::Family::builder("tenants", INTERVAL)
        .build(store, clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    family.increment("acme", 1);
    // Sampled every 5 ms over three intervals: the only total there is, is the 1 counted.
    for step in 1..=60u64 {
        run_virtual_until(&mut pool, &clock, Duration::from_millis(step * 5));
        let total = family.group_total("acme");
        assert!(total <= Some(1), "at {:?}: {total:?}", clock.now());
    }
}
