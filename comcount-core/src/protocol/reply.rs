//! The store's answer to a flush: what it did with it, what the fence held, and the totals it
//! tells.

#[cfg(doc)]
use crate::FlushRequest;
use std::time::Duration;

/// What the store did with a flush.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Outcome {
    /// Added to the interval the store's clock is in, which is within
    /// [`FlushRequest::window`]; the participant's fence now holds this flush.
    Applied,
    /// This very flush (same sequence number) was applied before; nothing was written again.
    /// The reply's [`counted_in`](FlushReply::counted_in) says in which interval.
    Duplicate,
    /// A later flush of this participant was applied already; this older copy was ignored.
    Stale,
    /// The participant already added to this interval; nothing was written and the amount was
    /// certainly not counted.
    Fenced,
    /// The store's clock is in an interval outside [`FlushRequest::window`] (more than the
    /// flush's reach from the expected one); nothing was written. The reply's interval and
    /// phase say where it is.
    WrongInterval,
}

impl Outcome {
    /// Whether the flush's amount is counted in the store (now or from an earlier copy).
    pub fn is_counted(self) -> bool {
        matches!(self, Outcome::Applied | Outcome::Duplicate)
    }
}

/// The store's answer to a flush.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct FlushReply {
    /// What happened to the flush.
    pub outcome: Outcome,
    /// The interval number the store's clock was in when it ran the flush.
    pub interval: u64,
    /// How far into that interval the store's clock was.
    pub phase: Duration,
    /// The interval the flush's amounts are counted in: `interval` for [`Outcome::Applied`],
    /// the interval the earlier copy was applied in for [`Outcome::Duplicate`], and `None` for
    /// every other outcome.
    pub counted_in: Option<u64>,
    /// What the participant's fence held when the store ran this flush, before the flush
    /// wrote anything. [`Fence::Untold`] from a store that does not tell, and for
    /// [`Outcome::WrongInterval`], which does not read the fence.
    pub fence: Fence,
    /// The totals of the interval before `interval`, one per entry of the request and in its
    /// order: `None` where that interval holds no total for the key.
    ///
    /// With [`Outcome::WrongInterval`] the store may not have read them and this is empty; a
    /// counter does not take it as the group's numbers then.
    pub previous_totals: Vec<Option<u64>>,
    /// For an applied flush of a single counter, the total of the interval it was counted in
    /// just after it was added: at least what that interval holds once it has ended, so the
    /// group's total from then on when no later reply brings the whole of it. Empty for every
    /// other outcome, for a family's flush, and from a store that does not tell it.
    pub landed_totals: Vec<Option<u64>>,
}

/// What a participant's fence held when the store ran a flush: the store's record of the
/// participant's last applied flush, which turns away every copy of it and of any earlier one.
///
/// An applied flush settles an earlier flush of the same participant none of whose copies
/// answered, when no flush between the two was applied and the fence has lived since: the
/// earlier one was counted if the fence held its number, and not if it held an earlier one or
/// nothing; either way no copy of it can be counted from then on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Fence {
    /// The store did not say.
    #[default]
    Untold,
    /// No flush of the participant was applied within the fence's life.
    Empty,
    /// The participant's last applied flush: its sequence number and the interval it was
    /// counted in.
    Held {
        /// Its sequence number.
        seq: u64,
        /// The interval it was counted in.
        interval: u64,
    },
}

impl Fence {
    /// The sequence number held, if any.
    pub fn seq(self) -> Option<u64> {
        match self {
            Fence::Held { seq, .. } => Some(seq),
            Fence::Untold | Fence::Empty => None,
        }
    }
}

impl FlushReply {
    /// A reply with no totals; add them with [`with_totals`](Self::with_totals).
    pub fn new(outcome: Outcome, interval: u64, phase: Duration, counted_in: Option<u64>) -> Self {
        Self {
            outcome,
            interval,
            phase,
            counted_in,
            fence: Fence::Untold,
            previous_totals: Vec::new(),
            landed_totals: Vec::new(),
        }
    }

    /// With the previous interval's totals, one per entry of the request.
    pub fn with_totals(mut self, totals: Vec<Option<u64>>) -> Self {
        self.previous_totals = totals;
        self
    }

    /// With the totals of the interval counted in, just after this flush
    /// ([`landed_totals`](Self::landed_totals)).
    pub fn with_landed_totals(mut self, totals: Vec<Option<u64>>) -> Self {
        self.landed_totals = totals;
        self
    }

    /// With what the participant's fence held as the flush ran ([`fence`](Self::fence)).
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    /// The previous interval's total of the first entry: a single counter's total.
    pub fn previous_total(&self) -> Option<u64> {
        self.previous_totals.first().copied().flatten()
    }
}
