//! What a read found, as plain data.

use std::time::Duration;

use comcount_core::ParticipantId;

/// The server's clock when a read began, and the interval it is in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ServerTime {
    /// Milliseconds since the Unix epoch, by the server's `TIME`.
    pub ms: u64,
    /// The interval number `N = ⌊ms / interval in ms⌋`: the one flushes now add to.
    pub interval: u64,
}

/// One interval's total.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IntervalTotal {
    /// The interval number.
    pub interval: u64,
    /// Whether the interval is the current one, still being added to; the others are closed
    /// and their totals final.
    pub open: bool,
    /// The total Redis holds for it; `None` where it holds none: nothing was counted there,
    /// or (for an interval more than two back) its key has expired.
    pub total: Option<u64>,
}

/// A counter's totals of the last intervals, without its fences.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Totals {
    /// The server's clock when the read began.
    pub now: ServerTime,
    /// The totals, newest interval first: the open one, then the closed ones.
    pub intervals: Vec<IntervalTotal>,
}

/// A participant's fence: the last flush Redis applied from it, in one key space.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ParticipantFence {
    /// The participant, as its fence key names it. A counter that flushes through lanes has a
    /// fence per lane, each under an id of its own ([`ParticipantId::lane`]).
    pub participant: ParticipantId,
    /// The family's partition the fence belongs to; `None` for a counter.
    pub partition: Option<u32>,
    /// The sequence number of the participant's last applied flush.
    pub seq: u64,
    /// The interval that flush was counted in.
    pub interval: u64,
    /// How long the fence has to live; `None` for a key without an expiry, which no store
    /// writes.
    pub ttl: Option<Duration>,
}

/// What Redis holds for a counter.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct CounterReport {
    /// The counter's name.
    pub name: String,
    /// The key prefix it was read under.
    pub prefix: String,
    /// The interval, in milliseconds.
    pub interval_ms: u64,
    /// The server's clock when the read began.
    pub now: ServerTime,
    /// The totals of the intervals read, newest first: the open one, then the closed ones.
    pub intervals: Vec<IntervalTotal>,
    /// The fence of every participant that flushed within the fence's life (ten minutes, or
    /// three intervals if longer), in the order of their ids.
    pub fences: Vec<ParticipantFence>,
}

/// What Redis holds for one key of a family.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct FamilyKeyReport {
    /// The family's name.
    pub name: String,
    /// The key prefix it was read under.
    pub prefix: String,
    /// The interval, in milliseconds.
    pub interval_ms: u64,
    /// The family's number of partitions.
    pub partitions: u32,
    /// The family key.
    pub key: String,
    /// The partition the key belongs to.
    pub partition: u32,
    /// The server's clock when the read began.
    pub now: ServerTime,
    /// The key's totals, newest interval first.
    pub intervals: Vec<IntervalTotal>,
    /// The fences of the key's partition, in the order of the participants' ids.
    pub fences: Vec<ParticipantFence>,
}

/// What Redis holds for a whole family: every partition's totals, summed, and its top keys.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct FamilyReport {
    /// The family's name.
    pub name: String,
    /// The key prefix it was read under.
    pub prefix: String,
    /// The interval, in milliseconds.
    pub interval_ms: u64,
    /// The family's number of partitions.
    pub partitions: u32,
    /// The server's clock when the read began.
    pub now: ServerTime,
    /// Each interval read, newest first: how many keys have a total in it, and their sum.
    pub intervals: Vec<FamilyInterval>,
    /// How many keys have a total in at least one of the intervals read.
    pub keys: usize,
    /// The keys with the largest totals over the intervals read, the open one included:
    /// largest first, keys of equal totals in the order of their names.
    pub top: Vec<KeyTotals>,
    /// The fences of every partition, in the order of the participants' ids, then of the
    /// partitions.
    pub fences: Vec<ParticipantFence>,
}

/// One interval of a family.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FamilyInterval {
    /// The interval number.
    pub interval: u64,
    /// Whether it is the current interval, still being added to.
    pub open: bool,
    /// How many keys have a total in it.
    pub keys: usize,
    /// The sum of their totals.
    pub total: u128,
}

/// One key of a family, among its top keys.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KeyTotals {
    /// The family key.
    pub key: String,
    /// The partition it belongs to.
    pub partition: u32,
    /// Its total over the intervals read, by which it was ranked.
    pub sum: u128,
    /// Its total in each interval, newest first, as in [`FamilyReport::intervals`].
    pub intervals: Vec<IntervalTotal>,
}
