//! What every fleet test checks once its fleet has stopped, from the flush records (every call
//! to `Store::flush`, see [`recording`](crate::recording)), Redis's own interval keys read while
//! the fleet counted (see [`reader`](crate::reader)), and what each participant counted and
//! reported.
//!
//! Each invariant is a function of its own on [`Report`]; [`Report::assert_all`] runs every one
//! that holds for the fault at hand.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use comcount_core::diagnostics::{Record, Recorder};
use comcount_core::{Outcome, ParticipantId, StoreErrorKind};

use crate::reader::Read;
use crate::recording::{FlushEnd, FlushRecord};

/// Whether the fault at hand may lose writes the server acknowledged.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Writes {
    /// Every acknowledged write stays: Redis holds at least what the replies say was applied.
    Kept,
    /// A restart or a killed primary may lose acknowledged writes.
    MayBeLost,
}

/// One participant of a fleet, once stopped.
pub struct Participant {
    /// Its id.
    pub id: ParticipantId,
    /// Its store's name.
    pub store: String,
    /// Its events.
    pub recorder: Recorder,
    /// What was counted into it (the sum of its `increment` amounts).
    pub counted: u64,
    /// What it still held unsent once stopped ([`Counter::buffered`]).
    ///
    /// [`Counter::buffered`]: comcount_core::Counter::buffered
    pub buffered: u64,
}

/// Where each participant's events stood at some moment.
pub struct Mark(Vec<usize>);

impl Mark {
    /// Where each recorder stands now.
    pub fn now<'a>(recorders: impl IntoIterator<Item = &'a Recorder>) -> Self {
        Self(recorders.into_iter().map(|r| r.records().len()).collect())
    }
}

/// What a fleet did: its flushes, Redis's keys, its participants.
pub struct Report {
    interval: Duration,
    records: Vec<FlushRecord>,
    reads: Vec<Read>,
    participants: Vec<Participant>,
}

/// Per interval, per participant: the amount of the flush the replies say was applied there.
type Applied = BTreeMap<u64, BTreeMap<usize, u64>>;

impl Report {
    /// A report of flushes recorded with each [`FlushRecord::member`] the index of its
    /// participant in `participants`.
    pub fn new(
        interval: Duration,
        records: Vec<FlushRecord>,
        reads: Vec<Read>,
        participants: Vec<Participant>,
    ) -> Self {
        for record in &records {
            assert!(
                record.member < participants.len(),
                "a flush recorded for participant {} of {}",
                record.member,
                participants.len()
            );
        }
        Self {
            interval,
            records,
            reads,
            participants,
        }
    }

    /// Every flush recorded.
    pub fn records(&self) -> &[FlushRecord] {
        &self.records
    }

    /// Every invariant that holds with `writes`, then a summary on stderr.
    pub fn assert_all(&self, writes: Writes) {
        self.assert_each_flush_keeps_its_amount();
        self.assert_replies_name_the_expected_interval();
        self.assert_each_flush_applied_at_most_once();
        self.assert_each_participant_adds_to_an_interval_at_most_once();
        self.assert_no_interval_overstated();
        self.assert_no_flush_counted_in_two_intervals();
        self.assert_nothing_held_beyond_what_was_sent();
        self.assert_every_unit_accounted_for();
        self.assert_no_key_split_across_nodes();
        if writes == Writes::Kept {
            self.assert_no_applied_flush_missing();
            self.assert_replies_agree_on_previous_totals();
        }
        self.print_summary();
    }

    fn interval_ms(&self) -> u64 {
        u64::try_from(self.interval.as_millis()).unwrap()
    }

    /// The largest value Redis was read to hold, per interval.
    fn highest(&self) -> BTreeMap<u64, u64> {
        let mut highest: BTreeMap<u64, u64> = BTreeMap::new();
        for read in &self.reads {
            if let Some(value) = read.value {
                let high = highest.entry(read.interval).or_default();
                *high = (*high).max(value);
            }
        }
        highest
    }

    /// The values Redis was read to hold for interval `n` after it closed, when no flush
    /// could write to it any more.
    fn read_closed(&self, n: u64) -> impl Iterator<Item = u64> + '_ {
        let closed_at = (n + 1) * self.interval_ms();
        self.reads
            .iter()
            .filter(move |r| r.interval == n && r.at_ms > closed_at)
            .filter_map(|r| r.value)
    }

    fn applied(&self) -> Applied {
        let mut applied = Applied::new();
        for record in &self.records {
            if let Some(reply) = record.reply()
                && reply.outcome == Outcome::Applied
            {
                applied
                    .entry(reply.interval)
                    .or_default()
                    .insert(record.member, record.request.amount());
            }
        }
        applied
    }

    /// A flush keeps its amount from its first send to its settling: every copy of it (same
    /// participant, same sequence number) carries the same amount.
    pub fn assert_each_flush_keeps_its_amount(&self) {
        let mut amounts: HashMap<(usize, u64), u64> = HashMap::new();
        for record in &self.records {
            let amount = *amounts
                .entry(record.flush_id())
                .or_insert(record.request.amount());
            assert_eq!(
                amount,
                record.request.amount(),
                "participant {} sent flush {} with two amounts",
                record.member,
                record.request.seq
            );
        }
    }

    /// A reply other than `WrongInterval` is about an interval of the flush's window: the one
    /// it expected, or one either side.
    pub fn assert_replies_name_the_expected_interval(&self) {
        for record in &self.records {
            if let Some(reply) = record.reply()
                && reply.outcome != Outcome::WrongInterval
            {
                assert!(
                    record.request.window().contains(&reply.interval),
                    "{record:?}"
                );
            }
        }
    }

    /// No flush is answered `Applied` twice: every copy after the first that ran is fenced.
    pub fn assert_each_flush_applied_at_most_once(&self) {
        let mut applied: HashMap<(usize, u64), &FlushRecord> = HashMap::new();
        for record in &self.records {
            if record.outcome() == Some(Outcome::Applied)
                && let Some(first) = applied.insert(record.flush_id(), record)
            {
                panic!(
                    "participant {}'s flush {} was applied twice: {first:?} and {record:?}",
                    record.member, record.request.seq
                );
            }
        }
    }

    /// No participant is answered `Applied` twice in one interval.
    pub fn assert_each_participant_adds_to_an_interval_at_most_once(&self) {
        let mut added: HashMap<(usize, u64), &FlushRecord> = HashMap::new();
        for record in &self.records {
            if let Some(reply) = record.reply()
                && reply.outcome == Outcome::Applied
                && let Some(first) = added.insert((record.member, reply.interval), record)
            {
                panic!(
                    "participant {} added to interval {} twice: {first:?} and {record:?}",
                    record.member, reply.interval
                );
            }
        }
    }

    /// By Redis's own keys, no interval ever held more than was really sent to it: each
    /// participant's one addition, which is the flush the replies say was applied there, or
    /// else at most the largest flush it sent there that may have written (one cut off, left
    /// unanswered or in flight; never one refused or turned away).
    pub fn assert_no_interval_overstated(&self) {
        let applied = self.applied();
        let mut may_have_written: BTreeMap<u64, BTreeMap<usize, u64>> = BTreeMap::new();
        for record in self.records.iter().filter(|r| r.may_have_written()) {
            // A copy may land in any interval of its window.
            for n in record.request.window() {
                let most = may_have_written
                    .entry(n)
                    .or_default()
                    .entry(record.member)
                    .or_default();
                *most = (*most).max(record.request.amount());
            }
        }
        let none = BTreeMap::new();
        for (n, value) in self.highest() {
            let applied_here = applied.get(&n).unwrap_or(&none);
            let sent_here = may_have_written.get(&n).unwrap_or(&none);
            let members: BTreeSet<usize> = applied_here
                .keys()
                .chain(sent_here.keys())
                .copied()
                .collect();
            let bound: u64 = members
                .iter()
                .map(|m| {
                    applied_here
                        .get(m)
                        .or(sent_here.get(m))
                        .copied()
                        .unwrap_or(0)
                })
                .sum();
            assert!(
                value <= bound,
                "interval {n} held {value} in Redis, more than its participants sent to it \
                 ({bound}): applied {applied_here:?}, largest that may have written \
                 {sent_here:?}"
            );
        }
    }

    /// Each flush counts in one interval at most: the intervals read hold, together, no more
    /// than the flushes that may have landed in them, each taken once. A flush the replies
    /// place in an interval counts there only; one no copy of which may have written counts
    /// nowhere.
    pub fn assert_no_flush_counted_in_two_intervals(&self) {
        let highest = self.highest();
        let mut landed: HashMap<(usize, u64), u64> = HashMap::new();
        for record in &self.records {
            if let Some(n) = record.reply().and_then(|reply| reply.counted_in) {
                landed.insert(record.flush_id(), n);
            }
        }
        // Per flush: its amount, and whether a copy that may have written aimed at an
        // interval that was read.
        let mut flushes: HashMap<(usize, u64), (u64, bool)> = HashMap::new();
        for record in &self.records {
            let (_, may_be_in_one_read) = flushes
                .entry(record.flush_id())
                .or_insert((record.request.amount(), false));
            *may_be_in_one_read |= record.may_have_written()
                && record.request.window().any(|n| highest.contains_key(&n));
        }
        let may_hold: u64 = flushes
            .iter()
            .map(
                |(flush, (amount, may_be_in_one_read))| match landed.get(flush) {
                    Some(n) if highest.contains_key(n) => *amount,
                    Some(_) => 0,
                    None if *may_be_in_one_read => *amount,
                    None => 0,
                },
            )
            .sum();
        let held: u64 = highest.values().sum();
        assert!(
            held <= may_hold,
            "the intervals read held {held} in Redis, more than the flushes that may have \
             landed in them carried ({may_hold}): a flush counted in two intervals"
        );
    }

    /// All the intervals read together hold no more than the fleet counted, less what it still
    /// held unsent at the end.
    pub fn assert_nothing_held_beyond_what_was_sent(&self) {
        let held: u64 = self.highest().values().sum();
        let counted: u64 = self.participants.iter().map(|p| p.counted).sum();
        let buffered: u64 = self.participants.iter().map(|p| p.buffered).sum();
        assert!(
            buffered <= counted,
            "the fleet holds {buffered} unsent, more than was counted into it ({counted})"
        );
        assert!(
            held <= counted - buffered,
            "the intervals read held {held} in Redis, more than the fleet counted and sent ({})",
            counted - buffered
        );
    }

    /// Every unit counted into a participant is accounted for, once: reported counted by the
    /// store (`flush completed`), reported dropped or unsettled (`flush failed`), or still in
    /// its buffer. And the flushes the participant reported counted are those
    /// whose replies said so, each once.
    pub fn assert_every_unit_accounted_for(&self) {
        let amounts = |p: &Participant, message: &str, attribute: &str| -> u64 {
            p.recorder
                .with_message(message)
                .iter()
                .map(|r| {
                    r.attribute(attribute)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or_else(|| panic!("{message} without a number {attribute}: {r:?}"))
                })
                .sum()
        };
        for (member, p) in self.participants.iter().enumerate() {
            let completed = amounts(p, "flush completed", "amount");
            let dropped = amounts(p, "flush failed", "dropped");

            let mut counted_by_replies: HashMap<u64, u64> = HashMap::new();
            for record in self.records.iter().filter(|r| r.member == member) {
                if record.counted_at().is_some() {
                    counted_by_replies.insert(record.request.seq, record.request.amount());
                }
            }
            let by_replies: u64 = counted_by_replies.values().sum();
            assert_eq!(
                completed, by_replies,
                "{} participant {}: the flushes it reported completed carried {completed}, \
                 the flushes the store said it counted {by_replies}",
                p.store, p.id
            );

            // An unsettled amount may or may not be in the store; either way it is in no
            // completed flush, so it accounts for its units once.
            let unsettled = amounts(p, "flush failed", "unsettled");
            let accounted = completed + dropped + unsettled + p.buffered;
            assert_eq!(
                accounted, p.counted,
                "{} participant {}: {completed} counted by the store + {dropped} dropped + \
                 {unsettled} unsettled + {} unsent is not the {} counted into it",
                p.store, p.id, p.buffered, p.counted
            );
        }
    }

    /// No fault leaves a key split across nodes, which Redis reports as `BUSYKEY`: in no
    /// store error, and in no event.
    pub fn assert_no_key_split_across_nodes(&self) {
        for record in &self.records {
            if let FlushEnd::Failed { message, .. } = &record.end {
                assert!(!message.contains("BUSYKEY"), "{record:?}");
            }
        }
        for p in &self.participants {
            for record in p.recorder.records() {
                for (_, value) in &record.attributes {
                    assert!(!value.contains("BUSYKEY"), "{record:?}");
                }
            }
        }
    }

    /// Redis holds, once an interval has closed, at least what the replies say was applied
    /// to it. Only where acknowledged writes are kept.
    pub fn assert_no_applied_flush_missing(&self) {
        for (n, by_member) in self.applied() {
            let Some(value) = self.read_closed(n).max() else {
                continue;
            };
            let total: u64 = by_member.values().sum();
            assert!(
                value >= total,
                "interval {n} held {value} in Redis once closed, less than the applied flushes \
                 carried ({total}): {by_member:?}"
            );
        }
    }

    /// Every reply from interval `n` (any outcome but `WrongInterval`, which may not read it)
    /// gives the same total for interval `n - 1`, closed by then, and it is what Redis held
    /// for `n - 1` once closed. Only where acknowledged writes are kept.
    pub fn assert_replies_agree_on_previous_totals(&self) {
        let mut previous: BTreeMap<u64, BTreeSet<Option<u64>>> = BTreeMap::new();
        for record in &self.records {
            if let Some(reply) = record.reply()
                && reply.outcome != Outcome::WrongInterval
            {
                previous
                    .entry(reply.interval)
                    .or_default()
                    .insert(reply.previous_total());
            }
        }
        for (n, totals) in &previous {
            // Interval 0 has none before it.
            let Some(before) = n.checked_sub(1) else {
                continue;
            };
            assert_eq!(
                totals.len(),
                1,
                "replies from interval {n} disagree on the total of interval {before}: \
                 {totals:?}"
            );
            let told = totals.first().copied().flatten();
            let held: BTreeSet<u64> = self.read_closed(before).collect();
            for value in &held {
                assert_eq!(
                    told,
                    Some(*value),
                    "replies from interval {n} gave {told:?} for interval {before}, which \
                     Redis held as {held:?} once closed"
                );
            }
        }
    }

    /// No store answered with something that is not a flush reply.
    pub fn assert_no_malformed_reply(&self) {
        for record in &self.records {
            if let FlushEnd::Failed { kind, .. } = &record.end {
                assert_ne!(*kind, StoreErrorKind::Malformed, "{record:?}");
            }
        }
    }

    /// Every group total a counter showed came from a reply: the total of an interval before
    /// some flush's interval.
    pub fn assert_group_totals_came_from_replies(&self, shown: &BTreeSet<u64>) {
        let given: BTreeSet<u64> = self
            .records
            .iter()
            .filter_map(|r| r.reply().and_then(|reply| reply.previous_total()))
            .collect();
        for total in shown {
            assert!(
                given.contains(total),
                "a counter showed a group total of {total}, which no reply gave: {given:?}"
            );
        }
    }

    /// The checks had something to check: some flush applied, and at least `intervals`
    /// intervals read from Redis.
    pub fn assert_enough_evidence(&self, intervals: usize) {
        let applied_total: u64 = self.applied().values().flat_map(|m| m.values()).sum();
        assert!(applied_total > 0, "no flush was applied");
        let highest = self.highest();
        assert!(
            highest.len() >= intervals,
            "only {} intervals read from Redis, fewer than {intervals}: {highest:?}",
            highest.len()
        );
    }

    fn print_summary(&self) {
        let applied = self.applied();
        let highest = self.highest();
        let count = |f: fn(&FlushRecord) -> bool| self.records.iter().filter(|r| f(r)).count();
        let ports: BTreeSet<Option<u16>> = self.reads.iter().map(|r| r.port).collect();
        let failures: Vec<usize> = self
            .participants
            .iter()
            .map(|p| p.recorder.with_message("flush failed").len())
            .collect();
        eprintln!(
            "{} flushes sent: {} replied, {} failed, {} cut off, {} in flight; {} intervals \
             counted, {} read from Redis (ports {ports:?}), holding {}; {} applied of {} \
             counted; flush failed by participant: {failures:?}",
            self.records.len(),
            count(|r| matches!(r.end, FlushEnd::Replied { .. })),
            count(|r| matches!(r.end, FlushEnd::Failed { .. })),
            count(|r| matches!(r.end, FlushEnd::Cut { .. })),
            count(|r| matches!(r.end, FlushEnd::InFlight)),
            applied.len(),
            highest.len(),
            highest.values().sum::<u64>(),
            applied.values().flat_map(|m| m.values()).sum::<u64>(),
            self.participants.iter().map(|p| p.counted).sum::<u64>(),
        );
    }

    /// The events of every participant after `mark` with `message`, by participant.
    pub fn since(&self, mark: &Mark, message: &str) -> Vec<Vec<Record>> {
        self.participants
            .iter()
            .zip(&mark.0)
            .map(|(p, from)| {
                p.recorder.records()[*from..]
                    .iter()
                    .filter(|r| r.message == message)
                    .cloned()
                    .collect()
            })
            .collect()
    }

    /// Asserts that every participant reported `message` after `mark`.
    pub fn assert_each_said(&self, mark: &Mark, message: &str) {
        for (p, said) in self.participants.iter().zip(self.since(mark, message)) {
            assert!(
                !said.is_empty(),
                "{} participant {} did not report {message:?}",
                p.store,
                p.id
            );
        }
    }

    /// Every `flush failed` any participant reported.
    pub fn flush_failures(&self) -> Vec<Record> {
        self.participants
            .iter()
            .flat_map(|p| p.recorder.with_message("flush failed"))
            .collect()
    }

    /// Asserts that no participant reported dropped a flush that may have been applied: only
    /// a refused flush (nothing written) is dropped; any other given up is unsettled.
    pub fn assert_no_unanswered_flush_dropped(&self) {
        for record in self.flush_failures() {
            let error = record.attribute("error").unwrap_or_default();
            let dropped = record.attribute("dropped").unwrap_or("0");
            assert!(
                dropped == "0" || error.starts_with("store refused the flush"),
                "a flush that may have been applied was reported dropped: {record:?}"
            );
        }
    }

    /// How many `script loaded` events the fleet reported after `mark`.
    pub fn scripts_loaded_since(&self, mark: &Mark) -> usize {
        self.since(mark, "script loaded").iter().map(Vec::len).sum()
    }

    /// Flushes sent (the copies the counter gave up on included) that came back as
    /// duplicates of a copy applied before.
    pub fn duplicates(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.outcome() == Some(Outcome::Duplicate))
            .count()
    }
}

/// The checker against stores that break the protocol on purpose: each invariant must fail.
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use comcount_core::clock::VirtualClock;
    use comcount_core::diagnostics::{Diagnostics, Event, Reporter};
    use comcount_core::{FlushReply, FlushRequest, MemoryStore, Store, StoreError};
    use futures::FutureExt;

    use super::*;
    use crate::conformance::Requests;
    use crate::recording::{FlushRecords, RecordingStore};

    const INTERVAL: Duration = Duration::from_secs(60);

    /// How a broken store breaks the protocol.
    #[derive(Clone, Copy)]
    enum Breakage {
        /// None: the memory store as it is.
        None,
        /// Every flush is also written a second time, as another participant's.
        WritesTwice,
        /// The fence is never consulted: each flush is written as a new participant's.
        NoFence,
    }

    struct Broken {
        inner: MemoryStore<VirtualClock>,
        breakage: Breakage,
    }

    impl Store for Broken {
        fn name(&self) -> &str {
            "broken"
        }

        fn flush(
            &self,
            request: &FlushRequest,
            report: &Reporter,
        ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
            let mut request = request.clone();
            match self.breakage {
                Breakage::None => {}
                Breakage::WritesTwice => {
                    let mut copy = request.clone();
                    copy.participant = ParticipantId::random();
                    let _ = self.inner.flush(&copy, report).now_or_never();
                }
                Breakage::NoFence => request.participant = ParticipantId::random(),
            }
            let reply = self.inner.flush(&request, report).now_or_never();
            async move { reply.expect("the memory store answers at once") }
        }
    }

    /// One participant sends `flushes` (sequence number, amount) in interval 0, each replied
    /// to at once; Redis is read once the interval has closed.
    fn report(breakage: Breakage, flushes: &[(u64, u64)], counted: u64) -> Report {
        let memory = MemoryStore::with_clock(VirtualClock::new());
        let records = FlushRecords::new();
        let store = RecordingStore::new(
            Broken {
                inner: memory.clone(),
                breakage,
            },
            0,
            records.clone(),
        );
        let requests = Requests::fresh(INTERVAL);
        let id = ParticipantId::random();
        let recorder = Recorder::new();
        let report = Reporter::new("invariants", Arc::new(recorder.clone()));
        for &(seq, amount) in flushes {
            let reply = store
                .flush(&requests.flush(id, seq, amount, 0), &report)
                .now_or_never()
                .unwrap()
                .unwrap();
            if reply.outcome.is_counted() {
                recorder.record(
                    "invariants",
                    &Event::FlushCompleted {
                        interval: 0,
                        amount,
                        keys: 1,
                        count: amount,
                    },
                );
            }
        }
        let read = Read {
            interval: 0,
            value: memory.total(&requests.interval_key(0)),
            at_ms: 2 * u64::try_from(INTERVAL.as_millis()).unwrap(),
            port: None,
        };
        Report::new(
            INTERVAL,
            records.records(),
            vec![read],
            vec![Participant {
                id,
                store: "broken".to_owned(),
                recorder,
                counted,
                buffered: 0,
            }],
        )
    }

    #[test]
    fn a_store_that_keeps_the_protocol_passes() {
        // The second flush is fenced: the participant added to interval 0 already. It was
        // still unsettled when the participant closed, and said so.
        let report = report(Breakage::None, &[(1, 3), (2, 4)], 3 + 4);
        let closed = StoreError::unanswered("closed in flight");
        report.participants[0].recorder.record(
            "c",
            &Event::FlushFailed {
                error: &closed,
                key: None,
                dropped: 0,
                unsettled: 4,
            },
        );
        assert_eq!(report.records().len(), 2);
        report.assert_all(Writes::Kept);
        report.assert_enough_evidence(1);
    }

    #[test]
    #[should_panic(expected = "more than its participants sent to it")]
    fn an_interval_written_twice_is_overstated() {
        report(Breakage::WritesTwice, &[(1, 3)], 3).assert_no_interval_overstated();
    }

    #[test]
    #[should_panic(expected = "was applied twice")]
    fn a_flush_past_a_missing_fence_is_applied_twice() {
        report(Breakage::NoFence, &[(1, 3), (1, 3)], 3).assert_each_flush_applied_at_most_once();
    }

    #[test]
    #[should_panic(expected = "added to interval 0 twice")]
    fn two_flushes_past_a_missing_fence_add_twice_to_an_interval() {
        report(Breakage::NoFence, &[(1, 3), (2, 4)], 7)
            .assert_each_participant_adds_to_an_interval_at_most_once();
    }

    #[test]
    #[should_panic(expected = "unsent is not the 10 counted into it")]
    fn units_that_went_nowhere_are_not_accounted_for() {
        report(Breakage::None, &[(1, 3)], 10).assert_every_unit_accounted_for();
    }
}
