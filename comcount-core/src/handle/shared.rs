//! The state a counter's or a family's handles share with its background task.

use std::future::{Future, poll_fn};
use std::panic::RefUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::task::AtomicWaker;

use crate::clock::Clock;
use crate::diagnostics::{Event, Reporter};
use crate::error::KeyError;
use crate::handle::registry::Registry;
use crate::handle::slot::Slot;
use crate::handle::tally::Refusal;

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Registry,
    /// The worker's timer, to tell how old a total is.
    clock: WorkerClock,
    /// The interval number the background task last flushed in, for noting when keys are
    /// looked up.
    pub(crate) epoch: AtomicU64,
    started: AtomicBool,
    /// Set once, by [`close`](Shared::close), while holding `gate`.
    closed: AtomicBool,
    /// Whatever the background task sends to the store, it sends while holding this lock and
    /// seeing `closed` still unset, so that nothing is sent once
    /// [`close`](Shared::close) has returned.
    gate: Mutex<()>,
    /// The thread that holds `gate` ([`thread_token`]), 0 while none does.
    gate_holder: AtomicU64,
    /// Each flush loop's waker, woken on the first increment and on close.
    loops: LoopWakers,
    /// Calls to a family's `increment` refused for their key since the last report, by reason.
    refused: [AtomicU64; KEY_REFUSALS.len()],
    /// When a drain asked for must end by, in nanoseconds of the worker's timer
    /// ([`NOT_DRAINING`] while none was asked for).
    drain_by: AtomicU64,
    /// Set once the background task has stopped and made its last report.
    stopped: AtomicBool,
    /// Whoever waits for the background task to stop: a drain.
    stop_waiters: Mutex<Vec<Waker>>,
    /// Where the store's intervals start on the worker's timer, as the last reply showed it.
    store_clock: StoreClock,
}

/// [`Shared::drain_by`] while no drain was asked for.
const NOT_DRAINING: u64 = u64::MAX;

/// The reasons a key is refused, as `key refused` names them, in the order of
/// [`refusal_index`].
const KEY_REFUSALS: [&str; 3] = ["empty", "too_long", "full"];

fn refusal_index(error: &KeyError) -> Option<usize> {
    match error {
        KeyError::Empty => Some(0),
        KeyError::TooLong { .. } => Some(1),
        KeyError::Full { .. } => Some(2),
        _ => None,
    }
}

impl Shared {
    pub(crate) fn new(name: Arc<str>, keys: Registry, clock: Arc<dyn Clock>) -> Self {
        let loops = LoopWakers::new(keys.partitions());
        Self {
            name,
            keys,
            clock: WorkerClock(clock),
            epoch: AtomicU64::new(0),
            started: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            gate: Mutex::new(()),
            gate_holder: AtomicU64::new(0),
            loops,
            refused: Default::default(),
            drain_by: AtomicU64::new(NOT_DRAINING),
            stopped: AtomicBool::new(false),
            stop_waiters: Mutex::new(Vec::new()),
            store_clock: StoreClock::default(),
        }
    }

    /// Asks the background task to flush what is unsent and stop, by `timeout` from now on
    /// its timer at the latest; a drain asked for before keeps its earlier end.
    pub(crate) fn drain(&self, timeout: Duration) {
        let by = self.clock.0.now().saturating_add(timeout);
        let by = u64::try_from(by.as_nanos()).unwrap_or(NOT_DRAINING - 1);
        self.drain_by.fetch_min(by, Ordering::AcqRel);
        // A counter never incremented drains at once: its loops wake to find nothing to send.
        self.started.store(true, Ordering::Release);
        self.loops.wake_all();
    }

    /// When the drain asked for must end by, on the worker's timer; `None` while none was.
    pub(crate) fn drain_by(&self) -> Option<Duration> {
        let by = self.drain_by.load(Ordering::Acquire);
        (by != NOT_DRAINING).then(|| Duration::from_nanos(by))
    }

    /// Notes that the background task has stopped, after its last report, and wakes whoever
    /// waits for it.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let waiters = std::mem::take(&mut *lock(&self.stop_waiters));
        waiters.into_iter().for_each(Waker::wake);
    }

    /// Completes once the background task has stopped.
    pub(crate) async fn stopped(&self) {
        poll_fn(|cx| {
            if self.stopped.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            let mut waiters = lock(&self.stop_waiters);
            if self.stopped.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                waiters.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await;
    }

    /// The units in the buffers of `partition`'s keys, not sent yet.
    pub(crate) fn unsent_in(&self, partition: u32) -> u64 {
        self.keys.with_members(
            partition,
            |_| false,
            |members| {
                members
                    .iter()
                    .fold(0u64, |sum, slot| sum.saturating_add(slot.buffer.get()))
            },
        )
    }

    /// Notes the store's clock as a reply showed it: `phase` into its interval of `interval`
    /// when it ran the flush, answered at `now` on the worker's timer after `round_trip`.
    pub(crate) fn note_store_clock(
        &self,
        now: Duration,
        phase: Duration,
        round_trip: Duration,
        interval_ms: u64,
    ) {
        self.store_clock.note(now, phase, round_trip, interval_ms);
    }

    /// How long until the store's current interval ends, on the worker's timer; `None` before
    /// the first reply, once no reply has come for two intervals, and once closed.
    pub(crate) fn until_interval_end(&self) -> Option<Duration> {
        if self.is_closed() {
            return None;
        }
        self.store_clock.until_end(self.clock.0.now())
    }

    /// Stops the background task for good: nothing is sent to the store after this returns,
    /// and no group total is known any more.
    ///
    /// Called from within the background task's own send (by the store, or by diagnostics that
    /// a send reports to), it does not wait for the gate that send holds: it would never get
    /// it. The send under way is the caller's own.
    pub(crate) fn close(&self) {
        if self.gate_holder.load(Ordering::Relaxed) == thread_token() {
            self.closed.store(true, Ordering::Release);
        } else {
            let gate = self.lock_gate();
            self.closed.store(true, Ordering::Release);
            drop(gate);
        }
        self.loops.wake_all();
        self.forget_totals();
    }

    /// How long ago a reply last brought `slot`'s total, on the worker's timer.
    pub(crate) fn total_age(&self, slot: &Slot) -> Option<Duration> {
        slot.total_age(self.clock.0.now())
    }

    /// Makes every key's group total unknown.
    pub(crate) fn forget_totals(&self) {
        self.keys.for_each(|slot| slot.total.set(None));
    }

    /// Notes a call refused for its key, to be reported by the background task, which it starts
    /// if need be. Whether `error` is about the key (and not the amount).
    #[cold]
    pub(crate) fn refuse_key(&self, error: &KeyError) -> bool {
        let Some(index) = refusal_index(error) else {
            return false;
        };
        self.refused[index].fetch_add(1, Ordering::Relaxed);
        self.start();
        true
    }

    /// Reports the calls of a family's `increment` refused for their key since the last report,
    /// then how many keys the family holds against its cap.
    pub(crate) fn report_keys(&self, report: &Reporter) {
        for (reason, calls) in KEY_REFUSALS.iter().zip(&self.refused) {
            if calls.load(Ordering::Relaxed) > 0 {
                let calls = calls.swap(0, Ordering::Relaxed);
                report.emit(Event::KeyRefused { reason, calls });
            }
        }
        if let Some(max_keys) = self.keys.max_keys() {
            let held = self.keys.len();
            report.emit(Event::KeysHeld { held, max_keys });
        }
    }

    /// The units in every key's buffer, not sent yet.
    pub(crate) fn unsent(&self) -> u64 {
        let mut unsent = 0u64;
        self.keys
            .for_each(|slot| unsent = unsent.saturating_add(slot.buffer.get()));
        unsent
    }

    /// Whether [`close`](Shared::close) was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether [`close`](Shared::close) was called; otherwise the flush loop of `partition`
    /// is woken when it is.
    pub(crate) fn poll_closed(&self, partition: u32, cx: &mut Context<'_>) -> bool {
        if self.is_closed() {
            return true;
        }
        self.loops.register(partition, cx);
        self.is_closed()
    }

    /// Runs `f` unless the counter is closed, and keeps it from closing meanwhile.
    pub(crate) fn while_open<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let gate = self.lock_gate();
        let result = if self.closed.load(Ordering::Relaxed) {
            None
        } else {
            let _held = Holding::enter(&self.gate_holder);
            Some(f())
        };
        drop(gate);
        result
    }

    fn lock_gate(&self) -> MutexGuard<'_, ()> {
        lock(&self.gate)
    }

    /// The hot path: adds `amount` to `slot` and returns the max rule's count; wakes the
    /// background task on the very first add.
    #[inline]
    pub(crate) fn increment(&self, slot: &Slot, amount: u64) -> Result<u64, Refusal> {
        let (count, found_empty) = slot.add(amount)?;
        if found_empty {
            self.start();
        }
        Ok(count)
    }

    /// The interval number to note a key's lookup in.
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    #[cold]
    fn start(&self) {
        // Once set, the flag is only read: an add that finds a key's buffer empty (its first
        // after each flush, or an add of 0) costs a read of a line that every core keeps.
        if !self.started.load(Ordering::Relaxed) && !self.started.swap(true, Ordering::AcqRel) {
            self.loops.wake_all();
        }
    }

    /// Completes once the first increment has happened; `partition` names the flush loop
    /// that waits.
    pub(crate) async fn started(&self, partition: u32) {
        poll_fn(|cx| {
            if self.started.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            self.loops.register(partition, cx);
            if self.started.load(Ordering::Acquire) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// The waker of each partition's flush loop, woken on the first increment and on close: one
/// each, since a family's loops may be polled apart (a join of many wakes only the loop whose
/// waker it is).
///
/// The first is kept inline: it is the only one a counter has, and a loop looks at it on each
/// of its wakes, so it sits beside the rest of the shared state rather than on another
/// allocation.
///
/// `AtomicWaker` keeps its waker in an `UnsafeCell`, so it is not `RefUnwindSafe`, and neither
/// would be the handles that share it. Asserting it here is sound, since no panic leaves it in
/// a state a handle would see broken: handles only ever call `wake`, which takes the waker out
/// and sets the state back before it calls it, so a waker that panics leaves it as any wake
/// does. Only the background task calls `register`; a panic there ends that task, and the
/// handles go on counting locally, as they do whenever it ends.
///
/// The rest of what handles share tolerates a panic anywhere as well: atomics, each changed in
/// one step, and a mutex read through its poison. The handles' own panics (an amount refused)
/// come before anything is counted.
#[derive(Debug)]
struct LoopWakers {
    first: AtomicWaker,
    rest: Box<[AtomicWaker]>,
}

impl RefUnwindSafe for LoopWakers {}

impl LoopWakers {
    fn new(partitions: u32) -> Self {
        let rest = (1..partitions.max(1)).map(|_| AtomicWaker::new()).collect();
        Self {
            first: AtomicWaker::new(),
            rest,
        }
    }

    /// Registers the waker of the loop of `partition`.
    fn register(&self, partition: u32, cx: &mut Context<'_>) {
        let waker = match partition.checked_sub(1) {
            None => Some(&self.first),
            Some(i) => self.rest.get(i as usize),
        };
        debug_assert!(waker.is_some(), "partition {partition} out of range");
        if let Some(waker) = waker {
            waker.register(cx.waker());
        }
    }

    fn wake_all(&self) {
        self.first.wake();
        self.rest.iter().for_each(AtomicWaker::wake);
    }
}

/// Where the store's intervals start on the worker's timer, modulo the interval, as the last
/// reply showed it: the reply's phase and half its round trip before it arrived. The flush
/// loops write it, the handles read it; each write of one family holds the same interval.
#[derive(Debug, Default)]
struct StoreClock {
    /// The interval in ms; 0 before the first reply.
    interval_ms: AtomicU64,
    /// Where on the timer, modulo the interval, the store's intervals start (ms).
    offset_ms: AtomicU64,
    /// When the last reply came, on the timer (ms).
    heard_ms: AtomicU64,
}

impl StoreClock {
    fn note(&self, now: Duration, phase: Duration, round_trip: Duration, interval_ms: u64) {
        if interval_ms == 0 {
            return;
        }
        let interval = u128::from(interval_ms);
        let back = (round_trip.as_millis() / 2 + phase.as_millis()) % interval;
        let offset = (now.as_millis() % interval + interval - back) % interval;
        // Below the interval, which is a u64.
        self.offset_ms.store(offset as u64, Ordering::Relaxed);
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        self.heard_ms.store(now_ms, Ordering::Relaxed);
        self.interval_ms.store(interval_ms, Ordering::Release);
    }

    fn until_end(&self, now: Duration) -> Option<Duration> {
        let interval = u128::from(self.interval_ms.load(Ordering::Acquire));
        if interval == 0 {
            return None;
        }
        let heard = u128::from(self.heard_ms.load(Ordering::Relaxed));
        if now.as_millis().saturating_sub(heard) > 2 * interval {
            return None;
        }
        let offset = u128::from(self.offset_ms.load(Ordering::Relaxed));
        let phase = (now.as_millis() % interval + interval - offset) % interval;
        // In (0, interval]: a u64.
        Some(Duration::from_millis((interval - phase) as u64))
    }
}

/// The worker's timer, as a clock the handles read.
struct WorkerClock(Arc<dyn Clock>);

impl std::fmt::Debug for WorkerClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkerClock")
    }
}

// Handles only read the time through it, to tell a total's age: a clock that panicked halfway
// through a read leaves at worst one wrong age, never a count.
impl RefUnwindSafe for WorkerClock {}

/// Closes the counter or family when the last handle is dropped, as `close()` does. Every
/// handle holds one reference.
#[derive(Debug)]
pub(crate) struct Lifetime(pub(crate) Arc<Shared>);

impl Lifetime {
    /// Asks for a drain by `timeout` and waits for the background task to stop; the units it
    /// did not send.
    pub(crate) fn drain(&self, timeout: Duration) -> impl Future<Output = u64> + Send + 'static {
        self.0.drain(timeout);
        let shared = Arc::clone(&self.0);
        async move {
            shared.stopped().await;
            shared.unsent()
        }
    }
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A number of this thread's own, never 0: which thread holds a gate. A thread tearing down
/// its thread-locals (a handle dropped from one) gets `u64::MAX`, which holds no gate.
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TOKEN.try_with(|token| *token).unwrap_or(u64::MAX)
}

/// Names this thread as a gate's holder while it lives, which the holder of the gate's lock
/// does; a gate's holder is one thread at a time, so it clears it on the way out.
struct Holding<'a>(&'a AtomicU64);

impl<'a> Holding<'a> {
    fn enter(holder: &'a AtomicU64) -> Self {
        holder.store(thread_token(), Ordering::Relaxed);
        Self(holder)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// Locks `mutex` through its poison: what it guards is whole after any panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn the_store_clock_is_known_from_a_reply_for_two_intervals() {
        let clock = StoreClock::default();
        assert_eq!(clock.until_end(MS(5)), None);
        // Answered at 5 ms on the timer, 300 ms into a store interval of 1 s, after 40 ms.
        clock.note(MS(5), MS(300), MS(40), 1000);
        assert_eq!(clock.until_end(MS(5)), Some(MS(680)));
        assert_eq!(clock.until_end(MS(684)), Some(MS(1)));
        assert_eq!(clock.until_end(MS(685)), Some(MS(1000)));
        assert_eq!(clock.until_end(MS(1685)), Some(MS(1000)));
        assert_eq!(clock.until_end(MS(2005)), Some(MS(680)));
        // No reply for two intervals: the store is not answering, and its clock unknown.
        assert_eq!(clock.until_end(MS(2006)), None);
        // A later reply moves it.
        clock.note(MS(3000), MS(0), MS(0), 1000);
        assert_eq!(clock.until_end(MS(3250)), Some(MS(750)));
    }
}
