//! Focused schedules, each one written to fail for a change of the engine that the broader
//! tests let through or caught only by chance: the mutation runs of TESTING.md name them.
//!
//! Each runs one participant on virtual time against the simulated store and checks that
//! every unit incremented is accounted for once: counted, buffered, dropped or reported
//! unsettled (and then counted at most by a client's replay).
#![allow(clippy::unwrap_used)] // a panic is how a test fails

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::clock::{Clock, VirtualClock};
use comcount_core::diagnostics::{Diagnostics, Event};
use comcount_core::{Builder, Counter, Outcome, ParticipantId};
use common::sim::{Fault, SimStore};
use futures::executor::LocalPool;
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
    clock: VirtualClock,
    store: SimStore,
    pool: LocalPool,
    counter: Counter,
    failed: Failed,
}

const ID: u64 = 1;

impl World {
    /// A participant that has flushed once, so that it knows the store's clock, and whose
    /// next copies meet `faults`.
    fn new(faults: Vec<Fault>, configure: impl FnOnce(Builder) -> Builder) -> Self {
        let clock = VirtualClock::new();
        let store = SimStore::new(clock.clone());
        let failed = Failed::default();
        let builder = Counter::builder("killed", INTERVAL)
            .participant(ParticipantId::from_u64(ID))
            .diagnostics(failed.clone());
        let (counter, worker) = configure(builder)
            .build(store.clone(), clock.clone())
            .unwrap();
        let pool = LocalPool::new();
        pool.spawner().spawn_local(worker).unwrap();
        let mut world = Self {
            clock,
            store,
            pool,
            counter,
            failed,
        };
        world.counter.increment(1);
        world.run_for(INTERVAL * 3);
        assert_eq!(world.counted(), 1);
        world.store.set_faults(faults);
        world
    }

    /// Runs everything for `by`, stopping at every timer and replay on the way.
    fn run_for(&mut self, by: Duration) {
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

    /// Runs until the participant has sent `n` copies in all.
    fn run_until_sent(&mut self, n: usize) {
        for _ in 0..1_000 {
            if self.store.sends(ID).len() >= n {
                return;
            }
            self.run_for(ms(1));
        }
        panic!("the participant never sent copy {n}");
    }

    /// The amount the store applied from the participant, each flush at most once.
    fn counted(&self) -> u64 {
        self.store
            .applications()
            .iter()
            .filter(|app| {
                app.reply
                    .as_ref()
                    .is_ok_and(|reply| reply.outcome == Outcome::Applied)
            })
            .map(|app| app.request.amount)
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
            self.store.applications()
        );
    }
}

/// Under the original rules a copy turned away is not resent: the flush ends at once with
/// every copy answered "not applied". The client retries the copy on its own and it lands,
/// so the amount must be reported unsettled, not put back (which `all_answered_unapplied`
/// alone would do, in `Flusher::conclude`, and count it twice).
#[test]
fn a_turned_away_copy_the_client_retries_is_not_put_back_when_the_flush_ends() {
    let mut w = World::new(
        vec![Fault::TurnedAwayThenReplayed { after: ms(30) }],
        Builder::original_rules,
    );
    let sent = w.store.sends(ID).len();
    w.counter.increment(5);
    w.run_until_sent(sent + 1);
    w.run_for(INTERVAL * 10);
    assert_eq!(w.counted(), 6, "the retried copy is counted, once");
    assert_eq!(w.unsettled(), 5, "the flush is reported unsettled");
    assert_eq!(w.counter.buffered(), 0, "and its amount is not put back");
    w.assert_accounted(6, 5);
}

/// A counter closed while a flush waits to resend a copy that was turned away: the client
/// retries that copy on its own and it lands, so the amount must be reported unsettled, not
/// put back (which `all_answered_unapplied` alone would do, in `Flusher::closed`).
#[test]
fn a_turned_away_copy_the_client_retries_is_not_put_back_when_the_counter_closes() {
    let mut w = World::new(vec![Fault::TurnedAwayThenReplayed { after: ms(30) }], |b| b);
    let sent = w.store.sends(ID).len();
    w.counter.increment(5);
    w.run_until_sent(sent + 1);
    // The resend waits a fiftieth of the interval: close within it.
    w.run_for(ms(1));
    assert_eq!(w.store.sends(ID).len(), sent + 1);
    w.counter.close();
    w.run_for(INTERVAL * 10);
    assert_eq!(w.counted(), 6, "the retried copy is counted, once");
    assert_eq!(w.unsettled(), 5, "the flush is reported unsettled");
    assert_eq!(w.counter.buffered(), 0, "and its amount is not put back");
    w.assert_accounted(6, 5);
}
