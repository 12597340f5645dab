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
