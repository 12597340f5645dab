//! The two numbers a counter answers from: its unsent buffer and the group's last total.
//!
//! Both are single atomics, so `increment` is one atomic add and one load, with no lock, no
//! allocation and no system call.

use crate::error::AmountError;
use crate::sync::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
    spin,
};

/// The most a buffer, an amount or a total may be: what Redis holds in an integer.
pub(crate) const MAX: u64 = i64::MAX as u64;

// The buffer's word, from 0 up:
//
// - `0..=MAX`: what the buffer holds, and nothing else (the invariant of `Buffer`);
// - `OVER..OVER + SLOT`: an add took the word past `MAX`, and its amount is still in it, with
//   those of the adds refused after it on top;
// - `OVER + SLOT..RETIRED`: a hold, `OVER + s * SLOT` for what the buffer holds, `OVER - s`,
//   with `1 <= s <= FAST_MAX`, and the amounts of the adds still being refused on top;
// - `RETIRED..`: retired, for good, with the amounts of the adds still being refused on top.

/// The first value above [`MAX`].
const OVER: u64 = MAX + 1;

/// The largest amount added with a bare `fetch_add`; larger ones, and 0, take a
/// compare-and-swap, which never takes the word past [`MAX`].
const FAST_MAX: u64 = 1 << 16;

/// More threads than can be in the middle of an add on one buffer at once: Linux runs at most
/// 2^22 threads in all (`PID_MAX_LIMIT`, one id for each). The layout is checked against it
/// below; it would hold for 2^29.
const THREADS: u64 = 1 << 22;

/// The width of one hold: room for the amounts of every add in flight on top of it.
const SLOT: u64 = 1 << 45;

/// A retired buffer, which refuses every add; the word never comes back below it.
const RETIRED: u64 = 3 << 62;

// The layout cannot wrap or mix up two states, with up to `THREADS` adds in flight, each with
// at most `FAST_MAX` in the word:
const _: () = {
    // Past MAX, before the hold: at most MAX + THREADS * FAST_MAX, below the first hold. On a
    // hold, the amounts on top stay below the next hold.
    assert!(THREADS * FAST_MAX <= SLOT);
    // The highest hold, with amounts on top, stays below RETIRED.
    assert!((FAST_MAX + 1) * SLOT <= RETIRED - OVER);
    // A retired word with amounts on top, plus one more add, does not wrap.
    assert!(THREADS * FAST_MAX <= u64::MAX - RETIRED);
};

/// Why an add was refused; nothing was counted either way.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Refusal {
    /// The amount cannot be counted here: too large, or the buffer is full.
    Amount(AmountError),
    /// The buffer is retired: count into another one.
    Retired,
}

/// What a value of the word says about the buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Seen {
    /// The buffer holds this, and no refused amount is in the word.
    Holds(u64),
    /// The buffer holds this, kept in a hold that no add in flight is on top of any more: it
    /// may be put back as it is.
    Settled(u64),
    /// An add that is being refused still has its amount in the word.
    Refusing,
    /// Retired.
    Retired,
}

/// Reads a value of the word.
fn seen(word: u64) -> Seen {
    if word <= MAX {
        return Seen::Holds(word);
    }
    if word >= RETIRED {
        return Seen::Retired;
    }
    let above = word - OVER;
    if above >= SLOT && above.is_multiple_of(SLOT) {
        Seen::Settled(OVER - above / SLOT)
    } else {
        Seen::Refusing
    }
}

/// What the buffer holds, read from a value of its word: [`MAX`] while a refusal is in flight
/// (it then holds more than `MAX - FAST_MAX`), 0 once retired.
fn value(word: u64) -> u64 {
    match seen(word) {
        Seen::Holds(held) | Seen::Settled(held) => held,
        Seen::Refusing => MAX,
        Seen::Retired => 0,
    }
}

/// The hold that keeps `held`, the buffer, while adds are refused; `held` is more than
/// `MAX - FAST_MAX`, since an add of at most [`FAST_MAX`] did not fit on it.
fn hold(held: u64) -> u64 {
    OVER + (OVER - held) * SLOT
}

/// The error for an add that does not fit.
fn full(amount: u64) -> Refusal {
    Refusal::Amount(AmountError::BufferFull { amount })
}

/// This participant's amount not yet sent, in one atomic word.
///
/// An add is one `fetch_add` (amounts from 1 to [`FAST_MAX`]); one that takes the word past
/// [`MAX`] is refused and undone by the thread that made it. The worker side ([`take`],
/// [`put_back`]) waits while a refusal is in flight, and the undoing keeps one invariant: **a
/// word of at most `MAX` holds no refused amount.** So the worker never takes a refused
/// amount, and never more than `MAX`.
///
/// Memory orderings: the word publishes no other memory, and every change to it is a
/// read-modify-write, which acts on the latest value in the word's modification order whatever
/// its ordering; a load that is out of date only makes the compare-and-swap after it fail. So
/// the word's operations are `Relaxed`, except those that tie [`retire`] to an add it refuses.
///
/// [`take`]: Buffer::take
/// [`put_back`]: Buffer::put_back
/// [`retire`]: Buffer::retire
#[derive(Debug, Default)]
pub(crate) struct Buffer(AtomicU64);

impl Buffer {
    /// Adds `amount` and returns the buffer after it. Refuses, counting nothing, an amount
    /// above [`MAX`], an add that would take the buffer past `MAX`, and every add once the
    /// buffer is retired.
    ///
    /// While an add that does not fit is being refused, another one may be refused even
    /// though it would fit: the buffer is then within [`FAST_MAX`] of `MAX`.
    #[inline]
    pub(crate) fn add(&self, amount: u64) -> Result<u64, Refusal> {
        // One comparison for both 0 and amounts above FAST_MAX.
        if amount.wrapping_sub(1) >= FAST_MAX {
            return self.add_exact(amount);
        }
        // Relaxed: see `Buffer`. The word is at most RETIRED plus the amounts of the other
        // adds in flight, so this cannot wrap (checked with the layout).
        let before = self.0.fetch_add(amount, Relaxed);
        let after = before + amount;
        if after <= MAX {
            Ok(after)
        } else {
            Err(self.refuse(before, amount))
        }
    }

    /// Undoes the add of `amount` that found the word at `before`.
    ///
    /// The first add to take the word past [`MAX`] found it at most `MAX`, so it knows what
    /// the buffer holds. The adds that land after it, while the word is past `MAX`, do not:
    /// they are refused too. Were each to subtract its amount, the first one's subtraction
    /// could bring the word back to `MAX` or less with a later one's amount still in it, for
    /// the worker to take. So the first one swaps its amount for a hold that keeps what the
    /// buffer holds ([`hand_over`](Buffer::hand_over)), and the others subtract theirs, which
    /// leaves the first one's amount or the hold in the word, past `MAX`. Whoever leaves the
    /// hold bare puts the buffer back ([`settle`](Buffer::settle)).
    #[cold]
    #[inline(never)]
    fn refuse(&self, before: u64, amount: u64) -> Refusal {
        match seen(before) {
            Seen::Holds(held) => {
                self.hand_over(held, amount);
                full(amount)
            }
            Seen::Refusing | Seen::Settled(_) => {
                // Relaxed: see `Buffer`.
                let now = self.0.fetch_sub(amount, Relaxed) - amount;
                self.settle(now);
                full(amount)
            }
            Seen::Retired => {
                // Acquire: reads from the release sequence of `retire`'s store, so whatever
                // the worker did before retiring happens before the caller re-routes.
                self.0.fetch_sub(amount, Acquire);
                Refusal::Retired
            }
        }
    }

    /// For the first add past [`MAX`], which found the buffer holding `held`: swaps its
    /// `amount` for the hold of `held`, under the amounts of the adds refused since.
    fn hand_over(&self, held: u64, amount: u64) {
        let hold = hold(held);
        // The word is `held + amount` plus the amounts on top: no other change is made while
        // it is past MAX and not a hold. The hold is above `held + amount`, so no wrapping.
        let raise = hold - (held + amount);
        // Relaxed: see `Buffer`.
        let now = self.0.fetch_add(raise, Relaxed) + raise;
        self.settle(now);
    }

    /// Puts the buffer back if `now`, what this thread left in the word, is a hold with no
    /// add on top. If the word has changed since, a later add is on top, and it will try
    /// when it leaves; the worker side also puts a bare hold back.
    fn settle(&self, now: u64) {
        if let Seen::Settled(held) = seen(now) {
            // Relaxed: see `Buffer`. A hold keeps the value it stands for, so whenever this
            // succeeds, it puts back the right value.
            let _ = self.0.compare_exchange(now, held, Relaxed, Relaxed);
        }
    }

    /// The add of 0 and of amounts above [`FAST_MAX`]: a compare-and-swap, which never takes
    /// the word past [`MAX`].
    #[cold]
    #[inline(never)]
    fn add_exact(&self, amount: u64) -> Result<u64, Refusal> {
        if amount > MAX {
            return Err(Refusal::Amount(AmountError::TooLarge { amount }));
        }
        // Acquire, here and on a failed exchange: a load that sees the buffer retired
        // synchronizes with `retire`, as in `refuse`.
        let mut word = self.0.load(Acquire);
        if amount == 0 {
            return match seen(word) {
                Seen::Retired => Err(Refusal::Retired),
                _ => Ok(value(word)),
            };
        }
        loop {
            let held = match seen(word) {
                Seen::Holds(held) => held,
                Seen::Retired => return Err(Refusal::Retired),
                // The buffer holds more than MAX - FAST_MAX: an amount above FAST_MAX does
                // not fit.
                Seen::Settled(_) | Seen::Refusing => return Err(full(amount)),
            };
            // Both are at most MAX, so the sum cannot wrap.
            let after = held + amount;
            if after > MAX {
                return Err(full(amount));
            }
            // Relaxed on success: see `Buffer`.
            match self.0.compare_exchange_weak(word, after, Relaxed, Acquire) {
                Ok(_) => return Ok(after),
                Err(actual) => word = actual,
            }
        }
    }

    /// Takes the whole buffer, leaving zero: never more than [`MAX`], and never an amount that
    /// is being refused. Waits while a refused add still has its amount in the word, a few
    /// instructions unless its thread is preempted. A retired buffer gives 0 and stays
    /// retired.
    pub(crate) fn take(&self) -> u64 {
        // Relaxed, here and below: see `Buffer`.
        let mut word = self.0.load(Relaxed);
        loop {
            let held = match seen(word) {
                Seen::Holds(held) | Seen::Settled(held) => held,
                Seen::Retired => return 0,
                Seen::Refusing => {
                    spin();
                    word = self.0.load(Relaxed);
                    continue;
                }
            };
            match self.0.compare_exchange_weak(word, 0, Relaxed, Relaxed) {
                Ok(_) => return held,
                Err(actual) => word = actual,
            }
        }
    }

    /// Returns `amount` to the buffer, as much of it as fits under [`MAX`]; returns what did
    /// not fit. Waits as [`take`](Buffer::take) does. A retired buffer takes nothing back:
    /// all of `amount` is returned.
    pub(crate) fn put_back(&self, amount: u64) -> u64 {
        // Relaxed, here and below: see `Buffer`.
        let mut word = self.0.load(Relaxed);
        loop {
            let held = match seen(word) {
                Seen::Holds(held) | Seen::Settled(held) => held,
                Seen::Retired => return amount,
                Seen::Refusing => {
                    spin();
                    word = self.0.load(Relaxed);
                    continue;
                }
            };
            let fits = amount.min(MAX - held);
            match self
                .0
                .compare_exchange_weak(word, held + fits, Relaxed, Relaxed)
            {
                Ok(_) => return amount - fits,
                Err(actual) => word = actual,
            }
        }
    }

    /// The buffer now: [`MAX`] while a refusal is in flight, 0 once retired.
    #[inline]
    pub(crate) fn get(&self) -> u64 {
        // Relaxed: see `Buffer`.
        value(self.0.load(Relaxed))
    }

    /// Retires the buffer if it holds exactly 0: from then on, every add is refused with
    /// [`Refusal::Retired`], nothing is taken from it, and nothing is put back. Returns whether
    /// it did; a refusal in flight leaves the word above 0, so it never does then.
    pub(crate) fn retire(&self) -> bool {
        // Release: whatever the worker did before retiring happens before an add refused as
        // retired returns, since that add reads the word with Acquire (in `refuse` and
        // `add_exact`). Relaxed on failure: nothing is published then.
        self.0
            .compare_exchange(0, RETIRED, Release, Relaxed)
            .is_ok()
    }

    /// Whether the buffer is retired.
    #[cfg_attr(
        not(test),
        allow(dead_code, reason = "read by the tests and the loom models")
    )]
    pub(crate) fn is_retired(&self) -> bool {
        // Acquire: as an add refused as retired, the caller then sees what the worker did
        // before retiring.
        self.0.load(Acquire) >= RETIRED
    }
}

/// The group's total over the last closed interval, when known.
#[derive(Debug)]
pub(crate) struct GroupTotal(AtomicU64);

/// Stands for "unknown"; no total can reach it, as totals are at most [`MAX`].
const UNKNOWN: u64 = u64::MAX;

impl Default for GroupTotal {
    fn default() -> Self {
        Self(AtomicU64::new(UNKNOWN))
    }
}

impl GroupTotal {
    pub(crate) fn set(&self, total: Option<u64>) {
        self.0.store(total.map_or(UNKNOWN, |t| t.min(MAX)), Relaxed);
    }

    #[inline]
    pub(crate) fn get(&self) -> Option<u64> {
        match self.0.load(Relaxed) {
            UNKNOWN => None,
            total => Some(total),
        }
    }

    /// Forgets the total, returning what it was.
    pub(crate) fn take(&self) -> Option<u64> {
        match self.0.swap(UNKNOWN, Relaxed) {
            UNKNOWN => None,
            total => Some(total),
        }
    }
}

/// The max rule: the larger of the group's total and the participant's own unsent buffer.
#[inline]
pub(crate) fn count(group: Option<u64>, buffered: u64) -> u64 {
    match group {
        Some(total) if total > buffered => total,
        _ => buffered,
    }
}

#[cfg(all(test, not(comcount_loom)))]
mod tests {
    use super::*;

    /// A buffer whose word is `word`.
    fn word(word: u64) -> Buffer {
        Buffer(AtomicU64::new(word))
    }

    /// The word itself.
    fn raw(b: &Buffer) -> u64 {
        b.0.load(Relaxed)
    }

    fn full_of(amount: u64) -> Result<u64, Refusal> {
        Err(full(amount))
    }

    #[test]
    fn add_refuses_what_would_pass_the_maximum_and_leaves_the_buffer_as_it_was() {
        let b = Buffer::default();
        assert_eq!(
            b.add(MAX + 1),
            Err(Refusal::Amount(AmountError::TooLarge { amount: MAX + 1 }))
        );
        assert_eq!(b.add(MAX - 1), Ok(MAX - 1));
        assert_eq!(b.add(2), full_of(2));
        assert_eq!(raw(&b), MAX - 1);
        assert_eq!(b.add(FAST_MAX + 1), full_of(FAST_MAX + 1));
        assert_eq!(raw(&b), MAX - 1);
        assert_eq!(b.add(1), Ok(MAX));
        assert_eq!(b.add(1), full_of(1));
        assert_eq!(b.add(0), Ok(MAX));
        assert_eq!(raw(&b), MAX);
    }

    #[test]
    fn the_largest_amount_fits_an_empty_buffer() {
        let b = Buffer::default();
        assert_eq!(b.add(MAX), Ok(MAX));
        assert_eq!(
            Buffer::default().add(MAX + 1),
            Err(Refusal::Amount(AmountError::TooLarge { amount: MAX + 1 }))
        );
        assert_eq!(
            Buffer::default().add(u64::MAX),
            Err(Refusal::Amount(AmountError::TooLarge { amount: u64::MAX }))
        );
    }

    #[test]
    fn both_paths_count_exactly() {
        let b = Buffer::default();
        assert_eq!(b.add(0), Ok(0));
        assert_eq!(b.add(FAST_MAX), Ok(FAST_MAX));
        assert_eq!(b.add(FAST_MAX + 1), Ok(2 * FAST_MAX + 1));
        assert_eq!(b.add(1), Ok(2 * FAST_MAX + 2));
        assert_eq!(b.take(), 2 * FAST_MAX + 2);
        let near = word(MAX - FAST_MAX);
        assert_eq!(near.add(FAST_MAX), Ok(MAX));
        let near = word(MAX - FAST_MAX);
        assert_eq!(near.add(FAST_MAX + 1), full_of(FAST_MAX + 1));
        assert_eq!(raw(&near), MAX - FAST_MAX);
    }

    #[test]
    fn put_back_keeps_what_fits_and_returns_the_rest() {
        let b = Buffer::default();
        b.add(MAX - 5).unwrap();
        assert_eq!(b.put_back(3), 0);
        assert_eq!(b.put_back(7), 5);
        assert_eq!(b.get(), MAX);
        assert_eq!(b.take(), MAX);
        assert_eq!(b.get(), 0);
    }

    #[test]
    fn a_hold_reads_back_as_what_it_keeps_and_nothing_else_does() {
        for held in [OVER - FAST_MAX, OVER - FAST_MAX + 1, MAX - 1, MAX] {
            let hold = hold(held);
            assert!(hold > MAX && hold < RETIRED);
            assert_eq!(seen(hold), Seen::Settled(held));
            assert_eq!(seen(hold + 1), Seen::Refusing);
            assert_eq!(seen(hold + (THREADS - 1) * FAST_MAX), Seen::Refusing);
        }
        assert_eq!(seen(MAX), Seen::Holds(MAX));
        assert_eq!(seen(OVER), Seen::Refusing);
        assert_eq!(seen(MAX + THREADS * FAST_MAX), Seen::Refusing);
        assert_eq!(seen(RETIRED), Seen::Retired);
        assert_eq!(seen(RETIRED + THREADS * FAST_MAX), Seen::Retired);
    }

    /// The schedule a bare undo gets wrong: the first refused add undoes while a later one is
    /// still in the word, which would bring it back under MAX with the later amount in it.
    #[test]
    fn a_later_refusal_stays_out_of_reach_when_the_first_one_undoes() {
        let b = word(MAX - 1);
        // The first add past MAX, and a later one that would have fitted on its own.
        let first = b.0.fetch_add(5, Relaxed);
        let later = b.0.fetch_add(1, Relaxed);
        assert_eq!(b.refuse(first, 5), full(5));
        assert_eq!(
            seen(raw(&b)),
            Seen::Refusing,
            "the later amount is in the word"
        );
        assert_eq!(b.get(), MAX);
        assert_eq!(b.refuse(later, 1), full(1));
        assert_eq!(raw(&b), MAX - 1);

        // The same, undone in the other order.
        let first = b.0.fetch_add(5, Relaxed);
        let later = b.0.fetch_add(1, Relaxed);
        assert_eq!(b.refuse(later, 1), full(1));
        assert_eq!(seen(raw(&b)), Seen::Refusing);
        assert_eq!(b.refuse(first, 5), full(5));
        assert_eq!(raw(&b), MAX - 1);
    }

    /// A refused add that subtracted its amount but has not yet put the buffer back leaves a
    /// bare hold, which the worker side puts back itself.
    #[test]
    fn the_worker_puts_back_a_bare_hold() {
        let b = word(hold(MAX - 1));
        assert_eq!(b.get(), MAX - 1);
        assert_eq!(b.put_back(3), 2);
        assert_eq!(raw(&b), MAX);
        let b = word(hold(MAX - 1));
        assert_eq!(b.take(), MAX - 1);
        assert_eq!(raw(&b), 0);
        let b = word(hold(MAX - 1));
        assert_eq!(b.add(0), Ok(MAX - 1));
        assert_eq!(b.add(1), full_of(1));
        assert_eq!(raw(&b), MAX - 1, "the refused add put the buffer back");
        assert!(!word(hold(MAX - 1)).retire());
    }

    #[test]
    fn only_an_empty_buffer_retires() {
        let b = Buffer::default();
        b.add(1).unwrap();
        assert!(!b.retire());
        assert!(!b.is_retired());
        assert_eq!(b.take(), 1);
        assert!(b.retire());
        assert!(b.is_retired());
        assert!(!b.retire(), "retired once, for good");
        assert!(!word(MAX + 3).retire(), "not with a refusal in flight");
    }

    #[test]
    fn a_retired_buffer_refuses_every_add_and_gives_nothing() {
        let b = Buffer::default();
        assert!(b.retire());
        for amount in [1, FAST_MAX, 0, FAST_MAX + 1, MAX] {
            assert_eq!(b.add(amount), Err(Refusal::Retired), "{amount}");
        }
        assert_eq!(
            b.add(MAX + 1),
            Err(Refusal::Amount(AmountError::TooLarge { amount: MAX + 1 }))
        );
        assert_eq!(raw(&b), RETIRED, "every refused add was undone");
        assert_eq!(b.get(), 0);
        assert_eq!(b.take(), 0);
        assert_eq!(b.put_back(7), 7);
        assert!(b.is_retired());
        assert_eq!(raw(&b), RETIRED);
    }

    /// Threads add near MAX, most adds refused, while the worker takes and puts back: every
    /// unit added is taken or still there, the worker never takes more than MAX, and the word
    /// ends at most MAX.
    #[test]
    fn refusals_near_the_maximum_race_the_worker_without_a_trace() {
        use std::sync::{Arc, Barrier};
        use std::thread;

        const ADDS: u64 = 100_000;
        let b = Arc::new(word(MAX - 1_000));
        let start = Arc::new(Barrier::new(4));
        let adders: Vec<_> = (1..=3u64)
            .map(|t| {
                let (b, start) = (Arc::clone(&b), Arc::clone(&start));
                thread::spawn(move || {
                    start.wait();
                    let (mut counted, mut refused) = (0u128, 0u64);
                    for i in 0..ADDS {
                        let amount = 1 + (i * t) % 700;
                        match b.add(amount) {
                            Ok(after) => {
                                assert!(after <= MAX);
                                counted += u128::from(amount);
                            }
                            Err(refusal) => {
                                assert_eq!(refusal, full(amount));
                                refused += 1;
                            }
                        }
                    }
                    (counted, refused)
                })
            })
            .collect();
        let (mut taken, mut returned) = (0u128, 0u128);
        let mut round = 0u64;
        start.wait();
        while round < 1_000 || !adders.iter().all(|t| t.is_finished()) {
            round += 1;
            let got = b.take();
            assert!(got <= MAX);
            taken += u128::from(got);
            // Put most of it back, so that the buffer stays near MAX; what no longer fits,
            // after the adds since, is not back.
            let back = got - got.min(round % 900);
            returned += u128::from(back - b.put_back(back));
            // Leave the adders time near MAX.
            thread::yield_now();
        }
        let (mut added, mut refused) = (0u128, 0u64);
        for adder in adders {
            let (counted, refusals) = adder.join().unwrap();
            added += counted;
            refused += refusals;
        }
        assert!(
            added > 0 && refused > 0,
            "{added} counted, {refused} refused"
        );
        let left = raw(&b);
        assert!(left <= MAX);
        assert_eq!(
            taken + u128::from(left),
            u128::from(MAX - 1_000) + added + returned
        );
    }

    #[test]
    fn group_total_is_unknown_until_set() {
        let g = GroupTotal::default();
        assert_eq!(g.get(), None);
        g.set(Some(0));
        assert_eq!(g.get(), Some(0));
        g.set(None);
        assert_eq!(g.get(), None);
    }

    #[test]
    fn count_takes_the_larger_bound() {
        assert_eq!(count(None, 3), 3);
        assert_eq!(count(Some(10), 3), 10);
        assert_eq!(count(Some(2), 3), 3);
    }
}

#[cfg(all(test, comcount_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;
    use loom::thread::{self, JoinHandle};

    /// Checks `f` under every schedule with up to `preemptions` preemptions (`None`: every
    /// schedule), unless `LOOM_MAX_PREEMPTIONS` says otherwise. The waits of the worker side
    /// make the number of schedules grow fast with the bound: each model's bound is the
    /// highest that ends in seconds.
    fn model(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = builder.preemption_bound.or(preemptions);
        builder.check(f);
    }

    /// A shared buffer whose word is `word`.
    fn word(word: u64) -> Arc<Buffer> {
        Arc::new(Buffer(AtomicU64::new(word)))
    }

    /// A thread that adds `amount`; joined, it gives what it counted.
    fn adder(buffer: &Arc<Buffer>, amount: u64) -> JoinHandle<u64> {
        let buffer = Arc::clone(buffer);
        thread::spawn(move || match buffer.add(amount) {
            Ok(after) => {
                assert!(after <= MAX);
                amount
            }
            Err(refusal) => {
                assert_eq!(refusal, full(amount));
                0
            }
        })
    }

    fn counted(adders: Vec<JoinHandle<u64>>) -> u64 {
        adders.into_iter().map(|t| t.join().unwrap()).sum()
    }

    /// The word once every thread is done: the buffer itself, nothing being refused.
    fn settled(buffer: &Buffer) -> u64 {
        let word = buffer.0.load(Relaxed);
        assert!(word <= MAX, "the word ends at {word:#x}, above MAX");
        word
    }

    /// Two threads increment, one with a bare `fetch_add` and one with a compare-and-swap,
    /// while the worker takes the buffer and puts an amount back: every unit ends up either
    /// taken or still in the buffer, once.
    #[test]
    fn increments_race_the_tick_without_losing_or_doubling_a_unit() {
        model(Some(4), || {
            let buffer = word(0);
            let adders = vec![adder(&buffer, 1), adder(&buffer, FAST_MAX + 1)];
            let taken = buffer.take();
            let not_fitting = buffer.put_back(100);
            let second = buffer.take();
            let added = counted(adders);
            assert_eq!(added, FAST_MAX + 2);
            assert_eq!(not_fitting, 0);
            assert_eq!(taken + second + settled(&buffer), added + 100);
        });
    }

    /// Near MAX, before the worker takes, an add of 5 never fits and one of 1 fits only if it
    /// comes first; landing while the 5 is in the word, the 1 is refused too. Whatever the
    /// order, the worker never takes a refused unit, nor more than MAX, and the word ends at
    /// the buffer.
    #[test]
    fn refusals_near_the_maximum_never_reach_the_worker() {
        model(Some(4), || {
            let buffer = word(MAX - 1);
            let adders = vec![adder(&buffer, 5), adder(&buffer, 1)];
            let taken = buffer.take();
            assert!(taken <= MAX);
            let added = counted(adders);
            assert_eq!(taken + settled(&buffer), MAX - 1 + added);
        });
    }

    /// Before the worker takes, three refused adds may be in flight at once, so that one
    /// lands on the hold the first one left and another leaves it bare: still no refused unit
    /// reaches the worker.
    #[test]
    fn refusals_landing_on_a_hold_never_reach_the_worker() {
        model(Some(3), || {
            let buffer = word(MAX - 1);
            let adders = vec![adder(&buffer, 2), adder(&buffer, 1), adder(&buffer, 1)];
            let taken = buffer.take();
            assert!(taken <= MAX);
            let added = counted(adders);
            assert_eq!(taken + settled(&buffer), MAX - 1 + added);
        });
    }

    /// The worker puts back an amount while an add is refused and another may fit: nothing
    /// is lost or doubled, what does not fit is returned, and the word ends at most MAX.
    #[test]
    fn put_back_waits_out_a_refusal_in_flight() {
        model(Some(4), || {
            let buffer = word(MAX - 4);
            let adders = vec![adder(&buffer, 5), adder(&buffer, 2)];
            let not_fitting = buffer.put_back(3);
            let added = counted(adders);
            assert!(added == 0 || added == 2, "the add of 5 never fits");
            assert_eq!(settled(&buffer) + not_fitting, MAX - 4 + 3 + added);
        });
    }

    /// The worker takes the buffer and retires it while an add lands: the unit is either
    /// counted before the retire, and then taken or kept (the retire failing), or refused as
    /// retired; never lost. An add refused as retired sees what the worker did before.
    #[test]
    fn retire_races_an_add_without_losing_the_unit() {
        model(None, || {
            let buffer = word(0);
            let moved = Arc::new(AtomicBool::new(false));
            let add = {
                let (buffer, moved) = (Arc::clone(&buffer), Arc::clone(&moved));
                thread::spawn(move || {
                    let refusal = buffer.add(1).err();
                    if refusal == Some(Refusal::Retired) {
                        assert!(moved.load(Relaxed), "retired before the key moved");
                    }
                    refusal
                })
            };
            let taken = buffer.take();
            moved.store(true, Relaxed);
            let retired = buffer.retire();
            match add.join().unwrap() {
                None if retired => assert_eq!(taken, 1, "retired with the unit in it"),
                None => assert_eq!(taken + settled(&buffer), 1),
                Some(refusal) => {
                    assert_eq!(refusal, Refusal::Retired);
                    assert!(retired);
                    assert_eq!(taken, 0);
                }
            }
            assert_eq!(buffer.is_retired(), retired);
            if retired {
                assert_eq!(
                    buffer.0.load(Relaxed),
                    RETIRED,
                    "the refused add was undone"
                );
                assert_eq!(buffer.get(), 0);
            }
        });
    }

    /// The compare-and-swap add of a large amount lands while a `fetch_add` near MAX is being
    /// refused: before the worker takes, neither fits, and after, both do. Nothing refused is
    /// counted, and the large add never writes over the refused amount.
    #[test]
    fn a_large_add_lands_on_a_refusal_in_flight() {
        model(Some(4), || {
            let buffer = word(MAX - 1);
            let adders = vec![adder(&buffer, 5), adder(&buffer, FAST_MAX + 1)];
            let taken = buffer.take();
            assert_eq!(taken, MAX - 1, "neither add fits before the worker takes");
            let added = counted(adders);
            assert_eq!(taken + settled(&buffer), MAX - 1 + added);
        });
    }
}
