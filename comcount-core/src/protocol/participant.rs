//! Who a flush comes from, as the store's fences know it.

use std::fmt;

/// A participant's identity in the store, drawn at random when a counter is built.
///
/// The store keeps one fence per participant under this id, so that a participant adds to each
/// interval at most once and a replayed flush is never applied twice.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParticipantId(u64);

impl ParticipantId {
    /// Draws a fresh random id (64 bits).
    pub fn random() -> Self {
        Self(fastrand::u64(..))
    }

    /// An id of your choosing, for tests that need stable key names.
    pub const fn from_u64(id: u64) -> Self {
        Self(id)
    }

    /// The id as a number.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The id that lane `lane` of this participant flushes under: itself for lane 0. A counter
    /// whose store is farther away than an interval flushes through up to four lanes (see the
    /// "Lanes" in docs/design.md), each with a fence of its own, whose key this names.
    /// The others' ids are a fixed mix of this one and the lane's number, the same in every
    /// run, as likely to meet another participant's id as a random draw is.
    ///
    /// ```
    /// use comcount_core::ParticipantId;
    ///
    /// let id = ParticipantId::from_u64(7);
    /// assert_eq!(id.lane(0), id);
    /// assert_ne!(id.lane(1), id);
    /// assert_eq!(id.lane(1), ParticipantId::from_u64(7).lane(1));
    /// ```
    pub const fn lane(self, lane: u32) -> Self {
        if lane == 0 {
            return self;
        }
        // SplitMix64's finaliser of the id plus the lane's multiple of the golden ratio.
        let mut z = self
            .0
            .wrapping_add((lane as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Self(z ^ (z >> 31))
    }
}

impl fmt::Display for ParticipantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for ParticipantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ParticipantId({self})")
    }
}
