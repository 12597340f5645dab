//! The two numbers a counter answers from: its unsent buffer and the group's last total.
//!
//! Both are single atomics, so `increment` is one compare-and-swap and one load, with no
//! lock, no allocation and no system call.

use crate::error::AmountError;
use crate::sync::{AtomicU64, Ordering::Relaxed};

/// The most a buffer, an amount or a total may be: what Redis holds in an integer.
pub(crate) const MAX: u64 = i64::MAX as u64;

/// What a retired buffer holds: above anything an add can reach.
const RETIRED: u64 = u64::MAX;

/// Why an add was refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Refusal {
    /// The amount cannot be counted.
    Amount(AmountError),
    /// The buffer was retired: the add belongs in another one.
    Retired,
}

/// This participant's amount not yet sent.
#[derive(Debug, Default)]
pub(crate) struct Buffer(AtomicU64);

impl Buffer {
    /// Adds `amount` and returns the buffer after it; refuses an add that would take the
    /// buffer past [`MAX`], leaving it as it was, and any add to a retired buffer.
    #[inline]
    pub(crate) fn add(&self, amount: u64) -> Result<u64, Refusal> {
        if amount > MAX {
            return Err(Refusal::Amount(AmountError::TooLarge { amount }));
        }
        let mut now = self.0.load(Relaxed);
        loop {
            if now > MAX {
                return Err(Refusal::Retired);
            }
            // Both are at most MAX, so the sum cannot wrap.
            let after = now + amount;
            if after > MAX {
                return Err(Refusal::Amount(AmountError::BufferFull { amount }));
            }
            match self.0.compare_exchange_weak(now, after, Relaxed, Relaxed) {
                Ok(_) => return Ok(after),
                Err(actual) => now = actual,
            }
        }
    }

    /// Retires an empty buffer for good: every later add is refused with
    /// [`Refusal::Retired`]. Returns whether it was empty, and so is retired now.
    pub(crate) fn retire(&self) -> bool {
        self.0
            .compare_exchange(0, RETIRED, Relaxed, Relaxed)
            .is_ok()
    }

    /// Takes the whole buffer, leaving zero.
    pub(crate) fn take(&self) -> u64 {
        self.0.swap(0, Relaxed)
    }

    /// Returns `amount` to the buffer, as much of it as fits under [`MAX`]; returns what did
    /// not fit.
    pub(crate) fn put_back(&self, amount: u64) -> u64 {
        let mut overflow = 0;
        let _ = self.0.fetch_update(Relaxed, Relaxed, |now| {
            let room = MAX.saturating_sub(now);
            overflow = amount.saturating_sub(room);
            Some(now + (amount - overflow))
        });
        overflow
    }

    /// The buffer now.
    #[inline]
    pub(crate) fn get(&self) -> u64 {
        match self.0.load(Relaxed) {
            RETIRED => 0,
            n => n,
        }
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

    #[test]
    fn add_refuses_what_would_pass_the_maximum_and_leaves_the_buffer_as_it_was() {
        let b = Buffer::default();
        assert_eq!(
            b.add(MAX + 1),
            Err(Refusal::Amount(AmountError::TooLarge { amount: MAX + 1 }))
        );
        assert_eq!(b.add(MAX - 1), Ok(MAX - 1));
        assert_eq!(
            b.add(2),
            Err(Refusal::Amount(AmountError::BufferFull { amount: 2 }))
        );
        assert_eq!(b.get(), MAX - 1);
        assert_eq!(b.add(1), Ok(MAX));
    }

    #[test]
    fn the_largest_amount_fits_an_empty_buffer() {
        let b = Buffer::default();
        assert_eq!(b.add(MAX), Ok(MAX));
        assert_eq!(
            Buffer::default().add(MAX + 1),
            Err(Refusal::Amount(AmountError::TooLarge { amount: MAX + 1 }))
        );
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
    use loom::thread;

    /// Two threads increment while the tick takes the buffer and puts an amount back: every
    /// unit ends up either taken or still in the buffer, once.
    #[test]
    fn increments_race_the_tick_without_losing_or_doubling_a_unit() {
        loom::model(|| {
            let buffer = Arc::new(Buffer::default());
            let adders: Vec<_> = [1u64, 10]
                .into_iter()
                .map(|n| {
                    let buffer = Arc::clone(&buffer);
                    thread::spawn(move || buffer.add(n).map(|_| n).unwrap_or(0))
                })
                .collect();
            let taken = buffer.take();
            let not_fitting = buffer.put_back(100);
            let second = buffer.take();
            let added: u64 = adders.into_iter().map(|t| t.join().unwrap()).sum();
            assert_eq!(added, 11);
            assert_eq!(not_fitting, 0);
            assert_eq!(taken + second + buffer.get(), added + 100);
        });
    }

    /// An add that would overflow is undone even while another thread adds and the tick takes.
    #[test]
    fn a_refused_add_leaves_no_trace_under_races() {
        loom::model(|| {
            let buffer = Arc::new(Buffer::default());
            buffer.add(MAX - 1).unwrap();
            let big = {
                let buffer = Arc::clone(&buffer);
                thread::spawn(move || buffer.add(5).is_ok())
            };
            let small = {
                let buffer = Arc::clone(&buffer);
                thread::spawn(move || buffer.add(1).is_ok())
            };
            let taken = buffer.take();
            let big_ok = big.join().unwrap();
            let small_ok = small.join().unwrap();
            let added = MAX - 1 + if big_ok { 5 } else { 0 } + if small_ok { 1 } else { 0 };
            assert_eq!(taken + buffer.get(), added);
            assert!(buffer.get() <= MAX);
        });
    }
}
