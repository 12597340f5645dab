//! What every fleet test checks once its fleet has stopped, from the flush records (every call
//! to `Store::flush`, see [`recording`](crate::recording)), Redis's own interval keys read while
//! the fleet counted (see [`reader`](crate::reader)), and what each participant counted and
//! reported.
//!
//! Every check is made key by key: a counter is a key space with one key, the empty string
//! (the key of its flushes' one entry); a family is one key space per partition, each holding
//! the keys of that partition (a hash per interval, a field per participant). Flushes, fences and
//! interval keys belong to a key space; amounts and totals to a key within it.
//!
//! Each invariant is a function of its own on [`Report`]; [`Report::assert_all`] runs every one
//! that holds for the fault at hand.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use comcount_core::diagnostics::{Record, Recorder};
use comcount_core::{Outcome, ParticipantId, StoreErrorKind};

use crate::reader::Read;
use crate::recording::{FlushEnd, FlushId, FlushRecord};

/// Whether the fault at hand may lose writes the server acknowledged.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Writes {
    /// Every acknowledged write stays: Redis holds at least what the replies say was applied.
    Kept,
    /// A restart or a killed primary may lose acknowledged writes.
    MayBeLost,
}

/// Amounts or totals, key by key: a family's keys, or a counter's one key, the empty string.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct PerKey(BTreeMap<String, u64>);

impl PerKey {
    /// A counter's: `amount` under the empty key.
    pub fn counter(amount: u64) -> Self {
        Self(BTreeMap::from([(String::new(), amount)]))
    }

    /// Adds `amount` to `key`'s.
    pub fn add(&mut self, key: &str, amount: u64) {
        match self.0.get_mut(key) {
            Some(held) => *held += amount,
            None => {
                self.0.insert(key.to_owned(), amount);
            }
        }
    }

    /// `key`'s amount: 0 where there is none.
    pub fn get(&self, key: &str) -> u64 {
        self.0.get(key).copied().unwrap_or(0)
    }

    /// `key`'s amount, `None` where the key is not there at all.
    pub fn find(&self, key: &str) -> Option<u64> {
        self.0.get(key).copied()
    }

    /// Every key's amount, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// The sum of every key's amount.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is no key at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, u64)> for PerKey {
    fn from_iter<I: IntoIterator<Item = (String, u64)>>(pairs: I) -> Self {
        let mut per_key = Self::default();
        for (key, amount) in pairs {
            per_key.add(&key, amount);
        }
        per_key
    }
}

/// One participant of a fleet, once stopped.
pub struct Participant {
    /// Its id.
    pub id: ParticipantId,
    /// Its store's name.
    pub store: String,
    /// Its events.
    pub recorder: Recorder,
    /// What was counted into it (the sum of its `increment` amounts), key by key.
    pub counted: PerKey,
    /// What it still held unsent once stopped ([`Counter::buffered`],
    /// [`Family::buffered`]), key by key.
    ///
    /// [`Counter::buffered`]: comcount_core::Counter::buffered
    /// [`Family::buffered`]: comcount_core::Family::buffered
    pub buffered: PerKey,
}

/// Where each participant's events stood at some moment.
pub struct Mark(Vec<usize>);

impl Mark {
    /// Where each recorder stands now.
    pub fn now<'a>(recorders: impl IntoIterator<Item = &'a Recorder>) -> Self {
        Self(recorders.into_iter().map(|r| r.records().len()).collect())
    }

    /// Whether each recorder reported `message` after this mark.
    pub fn each_said<'a>(
        &self,
        recorders: impl IntoIterator<Item = &'a Recorder>,
        message: &str,
    ) -> bool {
        recorders
            .into_iter()
            .zip(&self.0)
            .all(|(r, from)| r.records()[*from..].iter().any(|r| r.message == message))
    }
}

/// What a fleet did: its flushes, Redis's keys, its participants.
pub struct Report {
    interval: Duration,
    records: Vec<FlushRecord>,
    reads: Vec<Read>,
    participants: Vec<Participant>,
    /// Where the participants' events stood when they were closed, if known.
    closing: Option<Mark>,
}

/// An interval of a key space: the base of the space, and the interval number.
type At<'a> = (&'a str, u64);

/// Per interval of a key space, per participant: the flush the replies say was applied there.
type Applied<'a> = BTreeMap<At<'a>, BTreeMap<usize, &'a FlushRecord>>;

/// Per interval of a key space, key by key: the most Redis was read to hold.
type Highest<'a> = BTreeMap<At<'a>, BTreeMap<&'a str, u64>>;

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
            closing: None,
        }
    }

    /// The same report, knowing that the participants were closed at `mark`: a flush in
    /// flight then is given up and reported unsettled, rightly, which
    /// [`flush_failures`](Self::flush_failures) then leaves out.
    pub fn closing_at(mut self, mark: Mark) -> Self {
        self.closing = Some(mark);
        self
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
            self.assert_landed_totals_understate();
        }
        self.print_summary();
    }

    fn interval_ms(&self) -> u64 {
        u64::try_from(self.interval.as_millis()).unwrap()
    }

    /// The most Redis was read to hold, per interval of each key space, key by key.
    fn highest(&self) -> Highest<'_> {
        let mut highest = Highest::new();
        for read in &self.reads {
            let Some(totals) = &read.totals else {
                continue;
            };
            let here = highest.entry((&read.space, read.interval)).or_default();
            for (key, total) in totals.iter() {
                let high = here.entry(key).or_default();
                *high = (*high).max(total);
            }
        }
        highest
    }

    /// What Redis was read to hold for interval `at` after it closed, when no flush could
    /// write to it any more: each read's totals.
    fn read_closed<'s>(&'s self, at: At<'s>) -> impl Iterator<Item = &'s PerKey> + 's {
        let closed_at = (at.1 + 1) * self.interval_ms();
        self.reads
            .iter()
            .filter(move |r| r.space == at.0 && r.interval == at.1 && r.at_ms > closed_at)
            .filter_map(|r| r.totals.as_ref())
    }

    fn applied(&self) -> Applied<'_> {
        let mut applied = Applied::new();
        for record in &self.records {
            if let Some(reply) = record.reply()
                && reply.outcome == Outcome::Applied
            {
                applied
                    .entry((record.space(), reply.interval))
                    .or_default()
                    .insert(record.member, record);
            }
        }
        applied
    }

    /// A flush keeps its entries from its first send to its settling: every copy of it (same
    /// participant, key space and sequence number) carries the same keys and amounts.
    pub fn assert_each_flush_keeps_its_amount(&self) {
        let mut first: HashMap<FlushId<'_>, &FlushRecord> = HashMap::new();
        for record in &self.records {
            let was = *first.entry(record.flush_id()).or_insert(record);
            assert!(
                was.request.entries == record.request.entries,
                "participant {} sent flush {} of {} with two sets of entries: {:?} and {:?}",
                record.member,
                record.request.seq,
                record.space(),
                was.request.entries,
                record.request.entries
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
        let mut applied: HashMap<FlushId<'_>, &FlushRecord> = HashMap::new();
        for record in &self.records {
            if record.outcome() == Some(Outcome::Applied)
                && let Some(first) = applied.insert(record.flush_id(), record)
            {
                panic!(
                    "participant {}'s flush {} of {} was applied twice: {first:?} and {record:?}",
                    record.member,
                    record.request.seq,
                    record.space()
                );
            }
        }
    }

    /// No participant is answered `Applied` twice in one interval of one key space (a
    /// counter, or a partition of a family).
    pub fn assert_each_participant_adds_to_an_interval_at_most_once(&self) {
        let mut added: HashMap<(usize, At<'_>), &FlushRecord> = HashMap::new();
        for record in &self.records {
            if let Some(reply) = record.reply()
                && reply.outcome == Outcome::Applied
                && let Some(first) =
                    added.insert((record.member, (record.space(), reply.interval)), record)
            {
                panic!(
                    "participant {} added twice to interval {} of {}: {first:?} and {record:?}",
                    record.member,
                    reply.interval,
                    record.space()
                );
            }
        }
    }

    /// By Redis's own keys, no key's total of any interval ever held more than was really
    /// sent to it: each participant's one addition to the interval, which is the flush the
    /// replies say was applied there, or else at most the largest amount for the key of a
    /// flush it sent there that may have written (one cut off, left unanswered or in flight;
    /// never one refused or turned away).
    pub fn assert_no_interval_overstated(&self) {
        let applied = self.applied();
        // Per interval, per participant, key by key: the largest amount a copy that may have
        // written carried.
        let mut may_have_written: HashMap<At<'_>, BTreeMap<usize, HashMap<&str, u64>>> =
            HashMap::new();
        for record in self.records.iter().filter(|r| r.may_have_written()) {
            // A copy may land in any interval of its window.
            for n in record.request.window() {
                let most = may_have_written
                    .entry((record.space(), n))
                    .or_default()
                    .entry(record.member)
                    .or_default();
                for (key, amount) in record.amounts() {
                    let most = most.entry(key).or_default();
                    *most = (*most).max(amount);
                }
            }
        }
        let (no_flush, no_copy) = (BTreeMap::new(), BTreeMap::new());
        for (at, held) in self.highest() {
            let applied_here = applied.get(&at).unwrap_or(&no_flush);
            let applied_amounts: BTreeMap<usize, HashMap<&str, u64>> = applied_here
                .iter()
                .map(|(member, record)| (*member, record.amounts().collect()))
                .collect();
            let sent_here = may_have_written.get(&at).unwrap_or(&no_copy);
            let members: BTreeSet<usize> = applied_here
                .keys()
                .chain(sent_here.keys())
                .copied()
                .collect();
            for (key, value) in held {
                let each: BTreeMap<usize, u64> = members
                    .iter()
                    .map(|m| {
                        let amounts = applied_amounts.get(m).or(sent_here.get(m));
                        let amount = amounts.and_then(|a| a.get(key)).copied().unwrap_or(0);
                        (*m, amount)
                    })
                    .collect();
                let bound: u64 = each.values().sum();
                assert!(
                    value <= bound,
                    "interval {} of {} held {value} for key {key:?} in Redis, more than its \
                     participants sent to it ({bound}): by participant {each:?}, from the \
                     flushes applied there of participants {:?}, the others' largest that may \
                     have written",
                    at.1,
                    at.0,
                    applied_here.keys().collect::<Vec<_>>()
                );
            }
        }
    }

    /// Each flush counts in one interval at most: for each key, the intervals read hold,
    /// together, no more than the flushes that may have landed in them carried for it, each
    /// flush taken once. A flush the replies place in an interval counts there only; one no
    /// copy of which may have written counts nowhere.
    pub fn assert_no_flush_counted_in_two_intervals(&self) {
        let highest = self.highest();
        let mut landed: HashMap<FlushId<'_>, u64> = HashMap::new();
        for record in &self.records {
            if let Some(n) = record.reply().and_then(|reply| reply.counted_in) {
                landed.insert(record.flush_id(), n);
            }
        }
        // Per flush: its first copy (all carry the same entries), and whether a copy that may
        // have written aimed at an interval that was read.
        let mut flushes: HashMap<FlushId<'_>, (&FlushRecord, bool)> = HashMap::new();
        for record in &self.records {
            let (_, may_be_in_one_read) =
                flushes.entry(record.flush_id()).or_insert((record, false));
            *may_be_in_one_read |= record.may_have_written()
                && record
                    .request
                    .window()
                    .any(|n| highest.contains_key(&(record.space(), n)));
        }
        // Per key of each key space.
        let mut may_hold: HashMap<(&str, &str), u64> = HashMap::new();
        for (flush, (record, may_be_in_one_read)) in &flushes {
            let counts = match landed.get(flush) {
                Some(n) => highest.contains_key(&(record.space(), *n)),
                None => *may_be_in_one_read,
            };
            if counts {
                for (key, amount) in record.amounts() {
                    *may_hold.entry((record.space(), key)).or_default() += amount;
                }
            }
        }
        let mut held: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for ((space, _), totals) in &highest {
            for (key, total) in totals {
                *held.entry((space, key)).or_default() += total;
            }
        }
        for ((space, key), held) in held {
            let may_hold = may_hold.get(&(space, key)).copied().unwrap_or(0);
            assert!(
                held <= may_hold,
                "the intervals of {space} read held {held} for key {key:?} in Redis, more \
                 than the flushes that may have landed in them carried for it ({may_hold}): a \
                 flush counted in two intervals"
            );
        }
    }

    /// For each key, all the intervals read together hold no more than the fleet counted
    /// into it, less what it still held unsent at the end.
    pub fn assert_nothing_held_beyond_what_was_sent(&self) {
        let mut held = PerKey::default();
        for totals in self.highest().values() {
            for (key, total) in totals {
                held.add(key, *total);
            }
        }
        let (mut counted, mut buffered) = (PerKey::default(), PerKey::default());
        for p in &self.participants {
            for (key, amount) in p.counted.iter() {
                counted.add(key, amount);
            }
            for (key, amount) in p.buffered.iter() {
                buffered.add(key, amount);
            }
        }
        for (key, buffered) in buffered.iter() {
            let counted = counted.get(key);
            assert!(
                buffered <= counted,
                "the fleet holds {buffered} unsent for key {key:?}, more than was counted into \
                 it ({counted})"
            );
        }
        for (key, held) in held.iter() {
            let sent = counted.get(key) - buffered.get(key);
            assert!(
                held <= sent,
                "the intervals read held {held} for key {key:?} in Redis, more than the fleet \
                 counted and sent ({sent})"
            );
        }
    }

    /// Every unit counted into a participant is accounted for, once, key by key: counted by
    /// the store (the flushes whose replies said so), reported dropped or unsettled (`flush
    /// failed`, which names a family's key), or still in its buffer. And the flushes the
    /// participant reported counted (`flush completed`) carried what the replies say the store
    /// counted, each flush once.
    pub fn assert_every_unit_accounted_for(&self) {
        for (member, p) in self.participants.iter().enumerate() {
            let mut completed = 0;
            for record in p.recorder.with_message("flush completed") {
                completed += number(&record, "amount");
            }
            let (mut dropped, mut unsettled) = (PerKey::default(), PerKey::default());
            for record in p.recorder.with_message("flush failed") {
                // A counter's events name no key, as one of a family's flushes that carried
                // no amount.
                let key = record.attribute("key").unwrap_or_default();
                dropped.add(key, number(&record, "dropped"));
                unsettled.add(key, number(&record, "unsettled"));
            }

            let mut counted_flushes: HashMap<FlushId<'_>, &FlushRecord> = HashMap::new();
            for record in self.records.iter().filter(|r| r.member == member) {
                if record.counted_at().is_some() {
                    counted_flushes.insert(record.flush_id(), record);
                }
            }
            let mut by_replies = PerKey::default();
            for record in counted_flushes.values() {
                for (key, amount) in record.amounts() {
                    by_replies.add(key, amount);
                }
            }
            assert_eq!(
                completed,
                by_replies.total(),
                "{} participant {}: the flushes it reported completed carried {completed}, \
                 the flushes the store said it counted {}",
                p.store,
                p.id,
                by_replies.total()
            );

            // An unsettled amount may or may not be in the store; either way it is in no
            // completed flush, so it accounts for its units once.
            let keys: BTreeSet<&str> = [&p.counted, &p.buffered, &by_replies, &dropped, &unsettled]
                .into_iter()
                .flat_map(|amounts| amounts.iter().map(|(key, _)| key))
                .collect();
            for key in keys {
                let (by_store, dropped, unsettled, buffered, counted) = (
                    by_replies.get(key),
                    dropped.get(key),
                    unsettled.get(key),
                    p.buffered.get(key),
                    p.counted.get(key),
                );
                assert_eq!(
                    by_store + dropped + unsettled + buffered,
                    counted,
                    "{} participant {}, key {key:?}: {by_store} counted by the store + \
                     {dropped} dropped + {unsettled} unsettled + {buffered} unsent is not the \
                     {counted} counted into it",
                    p.store,
                    p.id,
                );
            }
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
    /// to it, key by key. Only where acknowledged writes are kept.
    pub fn assert_no_applied_flush_missing(&self) {
        for (at, by_member) in self.applied() {
            let reads: Vec<&PerKey> = self.read_closed(at).collect();
            if reads.is_empty() {
                continue;
            }
            let mut applied = PerKey::default();
            for record in by_member.values() {
                for (key, amount) in record.amounts() {
                    applied.add(key, amount);
                }
            }
            for (key, total) in applied.iter() {
                let value = reads.iter().map(|r| r.get(key)).max().unwrap_or(0);
                assert!(
                    value >= total,
                    "interval {} of {} held {value} for key {key:?} in Redis once closed, less \
                     than the applied flushes of participants {:?} carried for it ({total})",
                    at.1,
                    at.0,
                    by_member.keys().collect::<Vec<_>>()
                );
            }
        }
    }

    /// Every total an applied flush's reply gave of its own interval is at least the flush's
    /// amount and at most what Redis held for the key in that interval once closed: a lower
    /// bound, never more. Only where acknowledged writes are kept.
    pub fn assert_landed_totals_understate(&self) {
        for record in &self.records {
            let Some(reply) = record.reply() else {
                continue;
            };
            for ((key, amount), landed) in record.amounts().zip(&reply.landed_totals) {
                let Some(landed) = *landed else { continue };
                assert!(
                    landed >= amount,
                    "{landed} landed below the flush's {amount}"
                );
                for read in self.read_closed((record.space(), reply.interval)) {
                    let held = read.find(key).unwrap_or(0);
                    assert!(
                        landed <= held,
                        "a reply gave {landed} for key {key:?} right after its flush in \
                         interval {} of {}, which Redis held as {held} once closed",
                        reply.interval,
                        record.space()
                    );
                }
            }
        }
    }

    /// Every reply from interval `n` of a key space (any outcome but `WrongInterval`, which
    /// may not read it) gives, for each key it carried, the same total for interval `n - 1`,
    /// closed by then, and it is what Redis held for that key in `n - 1` once closed (none
    /// where the hash had no field for it). Only where acknowledged writes are kept.
    pub fn assert_replies_agree_on_previous_totals(&self) {
        let mut previous: BTreeMap<At<'_>, BTreeMap<&str, BTreeSet<Option<u64>>>> = BTreeMap::new();
        for record in &self.records {
            if let Some(reply) = record.reply()
                && reply.outcome != Outcome::WrongInterval
            {
                assert_eq!(
                    reply.previous_totals.len(),
                    record.request.entries.len(),
                    "a reply without a total for each entry: {record:?}"
                );
                let here = previous
                    .entry((record.space(), reply.interval))
                    .or_default();
                for ((key, _), total) in record.amounts().zip(&reply.previous_totals) {
                    here.entry(key).or_default().insert(*total);
                }
            }
        }
        for ((space, n), by_key) in &previous {
            // Interval 0 has none before it.
            let Some(before) = n.checked_sub(1) else {
                continue;
            };
            let held: Vec<&PerKey> = self.read_closed((space, before)).collect();
            for (key, totals) in by_key {
                assert_eq!(
                    totals.len(),
                    1,
                    "replies from interval {n} of {space} disagree on the total of interval \
                     {before} for key {key:?}: {totals:?}"
                );
                let told = totals.first().copied().flatten();
                for read in &held {
                    assert_eq!(
                        told,
                        read.find(key),
                        "replies from interval {n} of {space} gave {told:?} for key {key:?} in \
                         interval {before}, which Redis held as {:?} once closed",
                        read.find(key)
                    );
                }
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
    /// some flush's interval, or of an applied flush's own interval right after it.
    pub fn assert_group_totals_came_from_replies(&self, shown: &BTreeSet<u64>) {
        let shown: BTreeSet<(String, u64)> = shown.iter().map(|t| (String::new(), *t)).collect();
        self.assert_key_totals_came_from_replies(&shown);
    }

    /// Every group total shown for a key (a family's, or a counter's under the empty key)
    /// came from a reply: the total for that key of an interval before some flush's interval,
    /// or, for a counter, of an applied flush's own interval right after it.
    pub fn assert_key_totals_came_from_replies(&self, shown: &BTreeSet<(String, u64)>) {
        let mut given: HashMap<&str, BTreeSet<u64>> = HashMap::new();
        for record in &self.records {
            if let Some(reply) = record.reply() {
                for totals in [&reply.previous_totals, &reply.landed_totals] {
                    for ((key, _), total) in record.amounts().zip(totals) {
                        if let Some(total) = total {
                            given.entry(key).or_default().insert(*total);
                        }
                    }
                }
            }
        }
        let none = BTreeSet::new();
        for (key, total) in shown {
            let given = given.get(key.as_str()).unwrap_or(&none);
            assert!(
                given.contains(total),
                "a group total of {total} was shown for key {key:?}, which no reply gave: \
                 {given:?}"
            );
        }
    }

    /// The checks had something to check: some flush applied, and at least `intervals`
    /// intervals read from Redis of every key space flushed to.
    pub fn assert_enough_evidence(&self, intervals: usize) {
        let applied_total: u64 = self
            .applied()
            .values()
            .flat_map(|m| m.values())
            .map(|r| r.request.amount())
            .sum();
        assert!(applied_total > 0, "no flush was applied");
        let highest = self.highest();
        let spaces: BTreeSet<&str> = self.records.iter().map(FlushRecord::space).collect();
        for space in spaces {
            let read: Vec<u64> = highest
                .keys()
                .filter(|(s, _)| *s == space)
                .map(|(_, n)| *n)
                .collect();
            assert!(
                read.len() >= intervals,
                "only {} intervals of {space} read from Redis, fewer than {intervals}: {read:?}",
                read.len()
            );
        }
    }

    /// What Redis was read to hold, key by key: the most read of each interval, summed over
    /// the intervals.
    pub fn held(&self) -> PerKey {
        let mut held = PerKey::default();
        for totals in self.highest().values() {
            for (key, total) in totals {
                held.add(key, *total);
            }
        }
        held
    }

    /// What the participants counted and no longer held unsent at the end, key by key.
    pub fn sent(&self) -> PerKey {
        let mut sent = PerKey::default();
        for p in &self.participants {
            for (key, amount) in p.counted.iter() {
                sent.add(key, amount - p.buffered.get(key));
            }
        }
        sent
    }

    /// The keys Redis was read to hold a total for, in any interval of any key space.
    pub fn keys_read(&self) -> BTreeSet<&str> {
        self.highest()
            .into_values()
            .flat_map(BTreeMap::into_keys)
            .collect()
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
             counted, {} read from Redis (ports {ports:?}), holding {} over {} keys; {} applied \
             of {} counted; flush failed by participant: {failures:?}",
            self.records.len(),
            count(|r| matches!(r.end, FlushEnd::Replied { .. })),
            count(|r| matches!(r.end, FlushEnd::Failed { .. })),
            count(|r| matches!(r.end, FlushEnd::Cut { .. })),
            count(|r| matches!(r.end, FlushEnd::InFlight)),
            applied.len(),
            highest.len(),
            highest.values().flat_map(|t| t.values()).sum::<u64>(),
            self.keys_read().len(),
            applied
                .values()
                .flat_map(|m| m.values())
                .map(|r| r.request.amount())
                .sum::<u64>(),
            self.participants
                .iter()
                .map(|p| p.counted.total())
                .sum::<u64>(),
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

    /// Every `flush failed` any participant reported before it was closed (see
    /// [`closing_at`](Self::closing_at); all of them, where the report does not know when).
    pub fn flush_failures(&self) -> Vec<Record> {
        match &self.closing {
            Some(closing) => self
                .participants
                .iter()
                .zip(&closing.0)
                .flat_map(|(p, until)| {
                    p.recorder.records()[..*until]
                        .iter()
                        .filter(|r| r.message == "flush failed")
                        .cloned()
                        .collect::<Vec<_>>()
                })
                .collect(),
            None => self.all_flush_failures(),
        }
    }

    /// Every `flush failed` any participant reported, its close included.
    fn all_flush_failures(&self) -> Vec<Record> {
        self.participants
            .iter()
            .flat_map(|p| p.recorder.with_message("flush failed"))
            .collect()
    }

    /// Asserts that no participant reported dropped a flush that may have been applied: only
    /// a refused flush (nothing written) is dropped; any other given up is unsettled, even
    /// when given up at its participant's close.
    pub fn assert_no_unanswered_flush_dropped(&self) {
        for record in self.all_flush_failures() {
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

/// The number an event carries as `attribute`; panics when it carries none.
fn number(record: &Record, attribute: &str) -> u64 {
    record
        .attribute(attribute)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "{} without a number {attribute}: {record:?}",
                record.message
            )
        })
}

/// The checker against stores that break the protocol on purpose: each invariant must fail.
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use comcount_core::clock::VirtualClock;
    use comcount_core::diagnostics::{Diagnostics, Event, Reporter};
    use comcount_core::{FlushReply, FlushRequest, Layout, MemoryStore, Store, StoreError};
    use futures::FutureExt;

    use super::*;
    use crate::conformance::Requests;
    use crate::conformance::family::FamilyRequests;
    use crate::recording::FlushRecords;

    const INTERVAL: Duration = Duration::from_secs(60);

    /// How a broken store breaks the protocol.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Breakage {
        /// None: the memory store as it is.
        None,
        /// Every flush is also written a second time, as another participant's.
        WritesTwice,
        /// The fence is never consulted: each flush is written as a new participant's.
        NoFence,
        /// The first two entries' amounts are swapped: the flush adds what was sent, in all,
        /// but not to the keys it was sent for.
        SwapsAmounts,
        /// A counter's reply says its interval held one more than it did, right after it.
        OverstatesLanded,
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
                Breakage::SwapsAmounts => {
                    let (first, second) = (request.entries[0].amount, request.entries[1].amount);
                    request.entries[0].amount = second;
                    request.entries[1].amount = first;
                }
                Breakage::OverstatesLanded => {}
            }
            let mut reply = self.inner.flush(&request, report).now_or_never();
            if self.breakage == Breakage::OverstatesLanded
                && let Some(Ok(reply)) = &mut reply
            {
                for total in reply.landed_totals.iter_mut().flatten() {
                    *total += 1;
                }
            }
            async move { reply.expect("the memory store answers at once") }
        }
    }

    /// A counter's flushes, (sequence number, amount), by one participant, expecting
    /// interval 0.
    fn counter(flushes: &[(u64, u64)]) -> Vec<FlushRequest> {
        let requests = Requests::fresh(INTERVAL);
        let id = ParticipantId::random();
        flushes
            .iter()
            .map(|&(seq, amount)| requests.flush(id, seq, amount, 0))
            .collect()
    }

    /// A family partition's flushes, (sequence number, entries), by one participant,
    /// expecting interval 0.
    fn family(flushes: &[(u64, &[(&str, u64)])]) -> Vec<FlushRequest> {
        let requests = FamilyRequests::fresh(INTERVAL, 1);
        let id = ParticipantId::random();
        flushes
            .iter()
            .map(|&(seq, entries)| requests.flush(0, id, seq, entries, 0))
            .collect()
    }

    fn per_key(amounts: &[(&str, u64)]) -> PerKey {
        amounts.iter().map(|(k, a)| ((*k).to_owned(), *a)).collect()
    }

    /// One participant sends `flushes` in interval 0, each replied to at once; Redis is read
    /// once the interval has closed.
    fn report(breakage: Breakage, flushes: Vec<FlushRequest>, counted: PerKey) -> Report {
        let memory = MemoryStore::with_clock(VirtualClock::new());
        let records = FlushRecords::new();
        let store = records.wrap(
            Broken {
                inner: memory.clone(),
                breakage,
            },
            0,
        );
        let recorder = Recorder::new();
        let report = Reporter::new("invariants", Arc::new(recorder.clone()));
        for request in &flushes {
            let reply = store
                .flush(request, &report)
                .now_or_never()
                .unwrap()
                .unwrap();
            if reply.outcome.is_counted() {
                recorder.record(
                    "invariants",
                    &Event::FlushCompleted {
                        interval: 0,
                        amount: request.amount(),
                        keys: request.entries.len(),
                        count: request.amount(),
                        total: None,
                        total_age: None,
                    },
                );
            }
        }
        let space = flushes[0].space.clone();
        let key = space.interval(0);
        let totals = match space.layout() {
            Layout::Family => Some(memory.fields(&key).into_iter().collect::<PerKey>())
                .filter(|totals| !totals.is_empty()),
            _ => memory.total(&key).map(PerKey::counter),
        };
        let read = Read {
            space: space.base().to_owned(),
            interval: 0,
            totals,
            at_ms: 2 * u64::try_from(INTERVAL.as_millis()).unwrap(),
            port: None,
        };
        Report::new(
            INTERVAL,
            records.records(),
            vec![read],
            vec![Participant {
                id: flushes[0].participant,
                store: "broken".to_owned(),
                recorder,
                counted,
                buffered: PerKey::default(),
            }],
        )
    }

    /// Notes that the flush of `amounts` was still unsettled when its participant closed.
    fn unsettled(report: &Report, amounts: &[(Option<&str>, u64)]) {
        let closed = StoreError::unanswered("closed in flight");
        for (key, amount) in amounts {
            report.participants[0].recorder.record(
                "c",
                &Event::FlushFailed {
                    error: &closed,
                    seq: 0,
                    key: *key,
                    dropped: 0,
                    unsettled: *amount,
                },
            );
        }
    }

    #[test]
    fn a_store_that_keeps_the_protocol_passes() {
        // The second flush is fenced: the participant added to interval 0 already. It was
        // still unsettled when the participant closed, and said so.
        let report = report(
            Breakage::None,
            counter(&[(1, 3), (2, 4)]),
            PerKey::counter(3 + 4),
        );
        unsettled(&report, &[(None, 4)]);
        assert_eq!(report.records().len(), 2);
        report.assert_all(Writes::Kept);
        report.assert_enough_evidence(1);
    }

    #[test]
    #[should_panic(expected = "right after its flush in interval 0")]
    fn a_total_of_its_own_interval_above_what_redis_held_is_caught() {
        report(
            Breakage::OverstatesLanded,
            counter(&[(1, 3)]),
            PerKey::counter(3),
        )
        .assert_landed_totals_understate();
    }

    #[test]
    fn a_family_store_that_keeps_the_protocol_passes() {
        let report = report(
            Breakage::None,
            family(&[(1, &[("a", 3), ("b", 4)]), (2, &[("a", 1), ("c", 0)])]),
            per_key(&[("a", 4), ("b", 4)]),
        );
        unsettled(&report, &[(Some("a"), 1)]);
        report.assert_all(Writes::Kept);
        report.assert_enough_evidence(1);
        assert_eq!(report.keys_read(), BTreeSet::from(["a", "b"]));
    }

    #[test]
    #[should_panic(expected = "more than its participants sent to it")]
    fn an_interval_written_twice_is_overstated() {
        report(
            Breakage::WritesTwice,
            counter(&[(1, 3)]),
            PerKey::counter(3),
        )
        .assert_no_interval_overstated();
    }

    #[test]
    #[should_panic(expected = "more than its participants sent to it")]
    fn a_partition_written_twice_is_overstated() {
        let counted = per_key(&[("a", 3), ("b", 4)]);
        report(
            Breakage::WritesTwice,
            family(&[(1, &[("a", 3), ("b", 4)])]),
            counted,
        )
        .assert_no_interval_overstated();
    }

    /// What each key holds is checked, not the sum of a flush: amounts that reach the wrong
    /// keys are caught though the partition holds, in all, what was sent to it.
    #[test]
    #[should_panic(expected = "held 4 for key \"a\" in Redis, more than its participants sent")]
    fn amounts_added_to_the_wrong_keys_are_overstated() {
        let counted = per_key(&[("a", 3), ("b", 4)]);
        report(
            Breakage::SwapsAmounts,
            family(&[(1, &[("a", 3), ("b", 4)])]),
            counted,
        )
        .assert_no_interval_overstated();
    }

    #[test]
    #[should_panic(expected = "held 4 for key \"a\" in Redis, more than the fleet counted")]
    fn amounts_added_to_the_wrong_keys_are_more_than_was_sent() {
        let counted = per_key(&[("a", 3), ("b", 4)]);
        report(
            Breakage::SwapsAmounts,
            family(&[(1, &[("a", 3), ("b", 4)])]),
            counted,
        )
        .assert_nothing_held_beyond_what_was_sent();
    }

    #[test]
    #[should_panic(expected = "was applied twice")]
    fn a_flush_past_a_missing_fence_is_applied_twice() {
        report(
            Breakage::NoFence,
            counter(&[(1, 3), (1, 3)]),
            PerKey::counter(3),
        )
        .assert_each_flush_applied_at_most_once();
    }

    #[test]
    #[should_panic(expected = "was applied twice")]
    fn a_family_flush_past_a_missing_fence_is_applied_twice() {
        let flushes = family(&[(1, &[("a", 3)]), (1, &[("a", 3)])]);
        report(Breakage::NoFence, flushes, per_key(&[("a", 3)]))
            .assert_each_flush_applied_at_most_once();
    }

    #[test]
    #[should_panic(expected = "added twice to interval 0")]
    fn two_flushes_past_a_missing_fence_add_twice_to_an_interval() {
        report(
            Breakage::NoFence,
            counter(&[(1, 3), (2, 4)]),
            PerKey::counter(7),
        )
        .assert_each_participant_adds_to_an_interval_at_most_once();
    }

    #[test]
    #[should_panic(expected = "added twice to interval 0")]
    fn two_family_flushes_past_a_missing_fence_add_twice_to_a_partition() {
        let flushes = family(&[(1, &[("a", 3)]), (2, &[("b", 4)])]);
        report(Breakage::NoFence, flushes, per_key(&[("a", 3), ("b", 4)]))
            .assert_each_participant_adds_to_an_interval_at_most_once();
    }

    #[test]
    #[should_panic(expected = "unsent is not the 10 counted into it")]
    fn units_that_went_nowhere_are_not_accounted_for() {
        report(Breakage::None, counter(&[(1, 3)]), PerKey::counter(10))
            .assert_every_unit_accounted_for();
    }

    /// Units are accounted for key by key: a flush that carries, in all, what was counted,
    /// but not for the keys it was counted for, is caught.
    #[test]
    #[should_panic(expected = "unsent is not the 4 counted into it")]
    fn units_sent_for_another_key_are_not_accounted_for() {
        let counted = per_key(&[("a", 4), ("b", 3)]);
        report(
            Breakage::None,
            family(&[(1, &[("a", 3), ("b", 4)])]),
            counted,
        )
        .assert_every_unit_accounted_for();
    }
}
