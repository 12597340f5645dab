//! The flush protocol's rules as checks, one function per rule, for a [`Store`] of your own.
//!
//! Every store the project ships passes these checks; a store of yours that passes them all
//! ([`all`]) can stand in for them. Each check sends flushes under fresh keys and looks only at
//! the replies: a rule broken makes it panic with a message naming the store, the rule and
//! what the store answered, as a failed assertion does.
//!
//! The checks run on the store's own clock. They find the store's interval from its replies
//! (a flush expecting an interval far ahead comes back as [`Outcome::WrongInterval`], with the
//! store's interval and phase), wait on the wall clock for an interval to begin, and start
//! over with fresh keys when a step slips over an interval boundary on a busy machine, up to
//! eight times. So the store's clock must run in step with real time: a
//! [`MemoryStore::new`](crate::MemoryStore::new), a Redis server, not a store on a
//! [`VirtualClock`](crate::clock::VirtualClock) that nothing moves. Each check takes a few
//! intervals when nothing slips; one that keeps slipping gives up (panics) once it has tried
//! for sixty intervals, after the flushes under way. A store that leaves a flush unanswered
//! for five seconds plus ten intervals fails the check.
//!
//! The functions are futures for any executor: the checks wait on threads of their own, not
//! on a runtime's timer. The free functions use the default settings (intervals of 500 ms,
//! keys under `comcount-conformance:`); [`Conformance`] changes them.
//!
//! ```
//! use comcount_core::MemoryStore;
//! use comcount_core::testing::conformance;
//!
//! let store = MemoryStore::new();
//! futures::executor::block_on(async {
//!     conformance::applies_a_flush(&store).await;
//!     conformance::fences_a_replayed_flush(&store).await;
//! });
//! ```
//!
//! The checks write keys as a counter does, under the prefix, and leave them to expire: the
//! intervals' keys after three intervals, the fences after ten minutes.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::sleep::{sleep, within};
use crate::diagnostics::{Recorder, Reporter};
use crate::protocol::keys::{KeySpace, partition_of};
use crate::{
    Entry, Fence, FlushReply, FlushRequest, Outcome, ParticipantId, Store, StoreError,
    StoreErrorKind,
};

/// How many times a check starts over after slipping over an interval boundary.
const ATTEMPTS: u32 = 8;

/// How long, in intervals, a check keeps starting over.
const TRY_FOR_INTERVALS: u32 = 60;

/// The keys and partitions of the large family [`Conformance::counts_a_large_family`] sends.
const LARGE_FAMILY: (usize, u32) = (10_000, 16);

/// The shortest interval the large family is checked at: its flushes take tens of
/// milliseconds to build, send and check on a busy machine.
const LARGE_FAMILY_INTERVAL: Duration = Duration::from_secs(1);

/// The conformance checks with settings of your choosing: the interval the flushes use, and
/// the prefix of the keys they write.
///
/// ```
/// use std::time::Duration;
/// use comcount_core::MemoryStore;
/// use comcount_core::testing::conformance::Conformance;
///
/// let suite = Conformance::new()
///     .interval(Duration::from_millis(100))
///     .prefix("my-tests:");
/// futures::executor::block_on(suite.returns_previous_totals(&MemoryStore::new()));
/// ```
#[derive(Clone, Debug)]
pub struct Conformance {
    interval: Duration,
    prefix: String,
}

impl Default for Conformance {
    fn default() -> Self {
        Self::new()
    }
}

/// A step landed in another interval than the one it was aimed at; the check starts over.
struct Slipped(String);

macro_rules! checks {
    ($(
        $(#[$doc:meta])*
        $name:ident => $rule:literal, $steps:ident, $interval:ident;
    )*) => {
        impl Conformance {
            /// Runs every check against `store`, one after another.
            ///
            /// # Panics
            ///
            /// At the first check that fails.
            pub async fn all<S: Store>(&self, store: &S) {
                $( self.$name(store).await; )*
            }

            $(
                $(#[$doc])*
                #[doc = ""]
                #[doc = concat!("The rule, as a failure names it: ", $rule, ".")]
                #[doc = ""]
                #[doc = "# Panics"]
                #[doc = ""]
                #[doc = "When the store breaks the rule (or another it meets on the way, such \
                         as a reply's shape), leaves a flush unanswered, or its clock stands \
                         still; and when every attempt slips over an interval boundary."]
                pub async fn $name<S: Store>(&self, store: &S) {
                    let interval = self.$interval();
                    let deadline = Instant::now() + interval * TRY_FOR_INTERVALS;
                    let mut slipped = Vec::new();
                    for _ in 0..ATTEMPTS {
                        let run = Run::new(store, $rule, interval, &self.prefix, deadline);
                        match $steps(run).await {
                            Ok(()) => return,
                            Err(Slipped(why)) => slipped.push(why),
                        }
                        if Instant::now() >= deadline {
                            break;
                        }
                    }
                    panic!(
                        "{}: could not check that {}: each of {} attempts slipped over an \
                         interval boundary ({}). The store's clock must run in step with \
                         real time, and the machine must run a few flushes within a third of \
                         an interval of {interval:?}: use a longer interval \
                         (Conformance::interval)",
                        store.name(),
                        $rule,
                        slipped.len(),
                        slipped.join("; "),
                    );
                }
            )*
        }

        $(
            $(#[$doc])*
            #[doc = ""]
            #[doc = concat!("With the default settings; see [`Conformance::", stringify!($name), "`].")]
            pub async fn $name<S: Store>(store: &S) {
                Conformance::new().$name(store).await;
            }
        )*

        /// Runs every check against `store` with the default settings; see [`Conformance::all`].
        pub async fn all<S: Store>(store: &S) {
            Conformance::new().all(store).await;
        }
    };
}

checks! {
    /// A counter's first flush is applied in the interval the store's clock is in, counted
    /// there, with no total for the interval before; an interval later, its amount comes back
    /// as the previous interval's total.
    applies_a_flush =>
        "a flush is applied in the store's interval and its amount comes back as the \
         previous total an interval later",
        applies_a_flush_steps, check_interval;
    /// A copy of a flush already applied (same participant and sequence number, the
    /// expected interval changed or not) is a [`Outcome::Duplicate`] that says which interval
    /// the flush was counted in, in that interval and the next, and adds nothing.
    fences_a_replayed_flush =>
        "a replayed flush is a duplicate, counted where the first copy was, and adds nothing",
        fences_a_replayed_flush_steps, check_interval;
    /// A participant's second flush in one interval is [`Outcome::Fenced`] and adds nothing;
    /// in the next interval it is applied.
    refuses_a_second_flush_in_one_interval =>
        "a participant adds to each interval at most once",
        refuses_a_second_flush_steps, check_interval;
    /// A flush older than one the participant had applied is [`Outcome::Stale`] and adds
    /// nothing.
    ignores_a_stale_flush =>
        "a flush older than the participant's last applied one is stale and adds nothing",
        ignores_a_stale_flush_steps, check_interval;
    /// Every reply but a wrong interval's tells what the participant's fence held before the
    /// flush ([`FlushReply::fence`]): nothing for a participant's first flush, the flush's own
    /// number and interval for a duplicate, the later flush applied for a stale one, the
    /// earlier one for a fenced flush and for the participant's next flush applied.
    tells_what_the_fence_held =>
        "a reply tells what the participant's fence held before the flush",
        tells_what_the_fence_held_steps, check_interval;
    /// A flush that expects an interval two or more away from the store's is
    /// [`Outcome::WrongInterval`], carries the store's interval and writes nothing: not even
    /// the participant's fence.
    reports_wrong_interval =>
        "a flush more than one interval from the store's is a wrong interval and writes \
         nothing",
        reports_wrong_interval_steps, check_interval;
    /// A flush that expects the interval after the store's (landing early) or the one before
    /// (landing late) is applied in the store's interval.
    applies_a_flush_one_interval_either_side =>
        "a flush lands in the store's interval when it is within one of the expected one",
        either_side_steps, check_interval;
    /// A flush that reaches further (its [`FlushRequest::reach`]) lands in the store's interval
    /// from as many intervals before or after it, and is a wrong interval one further out.
    applies_a_flush_within_its_reach =>
        "a flush lands in the store's interval when it is within its reach of the expected one",
        within_reach_steps, check_interval;
    /// Every reply but a wrong interval's carries the previous interval's total: the sum of
    /// every participant's flushes counted there, for an applied flush, a duplicate, a fenced
    /// and a stale one alike.
    returns_previous_totals =>
        "a reply carries the total of the interval before the store's",
        returns_previous_totals_steps, check_interval;
    /// A counter's applied flush also carries the total of the interval it was counted in,
    /// right after it ([`FlushReply::landed_totals`]), exact up to `i64::MAX`; a duplicate, a
    /// fenced flush and a family's batch carry none.
    returns_landed_totals =>
        "an applied flush carries the total of its own interval, right after it",
        returns_landed_totals_steps, check_interval;
    /// Requests outside the ranges of [`FlushRequest::check`] (sequence numbers, interval,
    /// expected interval, fence life, a counter's one entry, amounts) are refused with
    /// [`StoreErrorKind::Refused`] and write nothing.
    refuses_bad_requests =>
        "a request outside the protocol's ranges is refused and writes nothing",
        refuses_bad_requests_steps, check_interval;
    /// A flush that would take a total past `i64::MAX` is refused with
    /// [`StoreErrorKind::Refused`] and writes nothing.
    refuses_an_overflowing_total =>
        "a flush that would take a total past i64::MAX is refused and writes nothing",
        refuses_an_overflow_steps, check_interval;
    /// A family's flush adds each entry's amount to its own key's total, an entry of 0 included,
    /// and the next interval's replies bring back each key's total in the order of the
    /// request's entries, none for a key not counted.
    applies_a_batch_of_keys =>
        "a batch adds each amount to its key and brings back each key's previous total in \
         the order of its entries",
        applies_a_batch_steps, check_interval;
    /// A replayed batch is a duplicate, a second batch in one interval is fenced, an older one
    /// stale; each reply carries one total per entry and none of them adds anything.
    fences_a_replayed_batch =>
        "a partition's batches follow the fence as a counter's flushes do",
        fences_a_replayed_batch_steps, check_interval;
    /// Each partition of a family, and a counter of the same name, keeps its own totals and
    /// its own fences: a key flushed to two partitions has a total in each, and a participant
    /// flushes each partition once per interval.
    keeps_partitions_apart =>
        "each partition keeps its own totals and fences",
        keeps_partitions_apart_steps, check_interval;
    /// Batches outside the protocol's ranges (no entry, an empty or too long key, too many
    /// entries, an amount above `i64::MAX`) are refused with [`StoreErrorKind::Refused`] and
    /// write nothing; the largest batch in range is accepted; a key that comes twice adds both
    /// amounts, and a key's total stops at `i64::MAX`.
    refuses_bad_batches =>
        "a batch outside the protocol's ranges is refused and writes nothing, a key twice adds \
         both amounts, and a key's total stops at i64::MAX",
        refuses_bad_batches_steps, check_interval;
    /// A family of 10,000 keys over 16 partitions, each partition's batch sent side by side:
    /// every key's total comes back. Run at an interval of at least a second.
    counts_a_large_family =>
        "every key of a large family is counted",
        counts_a_large_family_steps, large_family_interval;
}

impl Conformance {
    /// The default settings: intervals of 500 ms, keys under `comcount-conformance:`.
    pub fn new() -> Self {
        Self {
            interval: Duration::from_millis(500),
            prefix: "comcount-conformance:".to_owned(),
        }
    }

    /// The interval the checks' flushes use; the large family's is at least a second.
    ///
    /// Each check takes a few intervals. A short one makes the suite quicker, but a step must
    /// fit a few round trips to the store into a third of it: keep it well above the store's
    /// round trip.
    ///
    /// # Panics
    ///
    /// If `interval` is under 20 ms, or not a whole number of milliseconds.
    pub fn interval(mut self, interval: Duration) -> Self {
        assert!(
            interval >= Duration::from_millis(20)
                && interval.subsec_nanos().is_multiple_of(1_000_000),
            "the conformance checks need an interval of a whole number of milliseconds, at \
             least 20, not {interval:?}"
        );
        self.interval = interval;
        self
    }

    /// What every key the checks write starts with, before a part drawn at random for each
    /// attempt. It may not hold `{` or `}`.
    ///
    /// # Panics
    ///
    /// If `prefix` holds `{` or `}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        assert!(
            !prefix.contains(['{', '}']),
            "the prefix {prefix:?} holds a brace, which would break the keys' hash tag"
        );
        self.prefix = prefix;
        self
    }

    fn check_interval(&self) -> Duration {
        self.interval
    }

    fn large_family_interval(&self) -> Duration {
        self.interval.max(LARGE_FAMILY_INTERVAL)
    }
}

/// One attempt at one check: its store, rule and fresh keys.
struct Run<'a, S> {
    store: &'a S,
    rule: &'static str,
    interval: Duration,
    interval_ms: u64,
    prefix: String,
    report: Reporter,
    /// When the check stops starting over.
    deadline: Instant,
}

impl<'a, S: Store> Run<'a, S> {
    fn new(
        store: &'a S,
        rule: &'static str,
        interval: Duration,
        prefix: &str,
        deadline: Instant,
    ) -> Self {
        let interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        Self {
            store,
            rule,
            interval,
            interval_ms,
            prefix: format!("{prefix}{:016x}:", fastrand::u64(..)),
            report: Reporter::new("conformance", Arc::new(Recorder::new())),
            deadline,
        }
    }

    /// Fails the check: the store broke its rule.
    fn fail(&self, detail: impl fmt::Display) -> ! {
        panic!(
            "the store {:?} breaks the flush protocol: {}; {detail}",
            self.store.name(),
            self.rule
        )
    }

    /// The keys of this attempt's counter.
    fn counter(&self) -> KeySpace {
        KeySpace::counter(&self.prefix, "counter")
    }

    /// The keys of partition `p` of this attempt's family.
    fn partition(&self, p: u32) -> KeySpace {
        KeySpace::partition(&self.prefix, "family", p)
    }

    /// A flush to `space` carrying `entries`.
    fn request(
        &self,
        space: KeySpace,
        participant: ParticipantId,
        seq: u64,
        entries: Vec<Entry>,
        expect: u64,
    ) -> FlushRequest {
        FlushRequest::new(space, participant, self.interval_ms)
            .with_seq(seq)
            .with_entries(entries)
            .with_expect(expect)
    }

    /// A flush of this attempt's counter.
    fn single(
        &self,
        participant: ParticipantId,
        seq: u64,
        amount: u64,
        expect: u64,
    ) -> FlushRequest {
        self.request(
            self.counter(),
            participant,
            seq,
            vec![Entry::new("", amount)],
            expect,
        )
    }

    /// A flush of partition `p` of this attempt's family.
    fn batch(
        &self,
        p: u32,
        participant: ParticipantId,
        seq: u64,
        entries: &[(&str, u64)],
        expect: u64,
    ) -> FlushRequest {
        let entries = entries.iter().map(|(k, a)| Entry::new(*k, *a)).collect();
        self.request(self.partition(p), participant, seq, entries, expect)
    }

    /// How long a flush may go unanswered.
    fn limit(&self) -> Duration {
        Duration::from_secs(5) + self.interval * 10
    }

    /// Sends a flush and waits for its answer, checking the reply's shape.
    async fn try_flush(&self, request: &FlushRequest) -> Result<FlushReply, StoreError> {
        let limit = self.limit();
        let result = within(limit, self.store.flush(request, &self.report))
            .await
            .unwrap_or_else(|| {
                self.fail(format_args!(
                    "a flush went unanswered for {limit:?}: {request:?}"
                ))
            });
        if let Ok(reply) = &result {
            self.check_shape(request, reply);
        }
        result
    }

    /// Sends a flush the store must answer.
    async fn flush(&self, request: &FlushRequest) -> FlushReply {
        match self.try_flush(request).await {
            Ok(reply) => reply,
            Err(error) => self.fail(format_args!(
                "it failed a flush it should answer ({:?}): {error}; the request: {request:?}",
                error.kind()
            )),
        }
    }

    /// Sends flushes side by side, as a family's partitions do.
    async fn flush_all(&self, requests: &[FlushRequest]) -> Vec<FlushReply> {
        futures::future::join_all(requests.iter().map(|r| self.flush(r))).await
    }

    /// What every reply must hold, whatever the outcome.
    fn check_shape(&self, request: &FlushRequest, reply: &FlushReply) {
        if reply.phase >= self.interval {
            self.fail(format_args!(
                "a reply's phase ({:?}) is not within an interval of {:?}: {reply:?}",
                reply.phase, self.interval
            ));
        }
        let counted = match reply.outcome {
            Outcome::Applied => reply.counted_in == Some(reply.interval),
            Outcome::Duplicate => reply.counted_in.is_some_and(|k| k <= reply.interval),
            Outcome::Stale | Outcome::Fenced | Outcome::WrongInterval => reply.counted_in.is_none(),
        };
        if !counted {
            self.fail(format_args!(
                "a reply's counted_in is {:?}, which a {:?} in interval {} cannot have (an \
                 applied flush is counted in the reply's interval, a duplicate in an earlier \
                 or the same one, any other outcome in none): {reply:?}",
                reply.counted_in, reply.outcome, reply.interval
            ));
        }
        // A store may not tell what the fence held; what it tells must fit the outcome.
        let seq = request.seq;
        let fits = match (reply.outcome, reply.fence) {
            (_, Fence::Untold) => true,
            (Outcome::Applied, Fence::Empty) => true,
            (_, Fence::Empty) | (Outcome::WrongInterval, _) => false,
            (Outcome::Duplicate, Fence::Held { seq: f, interval }) => {
                f == seq && Some(interval) == reply.counted_in
            }
            (Outcome::Stale, Fence::Held { seq: f, .. }) => f > seq,
            (Outcome::Applied | Outcome::Fenced, Fence::Held { seq: f, .. }) => f < seq,
        };
        if !fits {
            self.fail(format_args!(
                "a reply's fence is {:?}, which a {:?} of sequence number {seq} cannot have (the \
                 fence holds the flush's own number and interval for a duplicate, a later \
                 number for a stale flush, an earlier one for a fenced flush, an earlier one \
                 or nothing for an applied one, and a wrong interval reads no fence): {reply:?}",
                reply.fence, reply.outcome
            ));
        }
        if reply.outcome != Outcome::WrongInterval
            && reply.previous_totals.len() != request.entries.len()
        {
            self.fail(format_args!(
                "a reply with outcome {:?} carries {} previous totals for a request of {} \
                 entries; it must carry one per entry, in order: {reply:?}",
                reply.outcome,
                reply.previous_totals.len(),
                request.entries.len()
            ));
        }
    }

    /// Checks what a reply says the fence held.
    fn fence(&self, reply: &FlushReply, fence: Fence, what: &str) {
        if reply.fence != fence {
            self.fail(format_args!(
                "{what}: the reply must tell that the fence held {fence:?}, it tells {:?} \
                 ({reply:?})",
                reply.fence
            ));
        }
    }

    /// Checks that a reply came in interval `n` (else the step slipped) with `outcome`.
    fn expect(
        &self,
        reply: &FlushReply,
        outcome: Outcome,
        n: u64,
        what: &str,
    ) -> Result<(), Slipped> {
        if reply.interval != n {
            return Err(Slipped(format!(
                "{what} was aimed at interval {n}, the store was in {}",
                reply.interval
            )));
        }
        if reply.outcome != outcome {
            self.fail(format_args!(
                "{what} must be {outcome:?} in interval {n}; the store answered {reply:?}"
            ));
        }
        Ok(())
    }

    /// Checks the previous totals a reply carries.
    fn totals(&self, reply: &FlushReply, totals: &[Option<u64>], what: &str) {
        if reply.previous_totals != totals {
            self.fail(format_args!(
                "{what}: the reply must carry the previous totals {totals:?}, it carries {:?} \
                 ({reply:?})",
                reply.previous_totals
            ));
        }
    }

    /// Finds the store's interval, at least `min`, at a phase early enough to run a few steps
    /// in it, waiting on the wall clock for the next interval when the phase is too late.
    /// Writes nothing.
    async fn aim(&self, min: u64) -> Result<u64, Slipped> {
        let mut stuck = 0;
        let mut last: Option<(u128, Duration)> = None;
        for _ in 0..20 {
            if Instant::now() >= self.deadline {
                return Err(Slipped(format!(
                    "out of time waiting for interval {min} or later"
                )));
            }
            // A flush expecting the last interval there is comes back as a wrong interval on
            // any clock: it only asks for the time.
            let probe = self.single(ParticipantId::random(), 1, 1, FlushRequest::MAX_EXPECT);
            let reply = self.flush(&probe).await;
            if reply.outcome != Outcome::WrongInterval {
                self.fail(format_args!(
                    "a flush expecting interval {} must be a wrong interval, the store \
                     answered {reply:?}",
                    FlushRequest::MAX_EXPECT
                ));
            }
            if reply.interval >= min && reply.phase < self.interval / 3 {
                return Ok(reply.interval);
            }
            let now =
                u128::from(reply.interval) * u128::from(self.interval_ms) + reply.phase.as_millis();
            if let Some((then, waited)) = last {
                // The store's time moved less than half the wait: its clock is not running.
                if now < then + waited.as_millis() / 2 {
                    stuck += 1;
                    if stuck == 3 {
                        self.fail(format_args!(
                            "the store's clock did not move while the check waited (its \
                             interval stayed {}, phase {:?}); the checks need a store whose \
                             clock runs in step with real time",
                            reply.interval, reply.phase
                        ));
                    }
                }
            }
            let ahead = u32::try_from(min.saturating_sub(reply.interval).clamp(1, 3)).unwrap_or(3);
            let wait = (self.interval * ahead).saturating_sub(reply.phase) + self.interval / 20;
            last = Some((now, wait));
            sleep(wait).await;
        }
        Err(Slipped(format!(
            "could not find the start of interval {min} or later"
        )))
    }

    /// Waits for the interval after `n` to begin, and returns it.
    async fn next(&self, n: u64) -> Result<u64, Slipped> {
        let m = self.aim(n + 1).await?;
        if m != n + 1 {
            return Err(Slipped(format!("waited for interval {}, got {m}", n + 1)));
        }
        Ok(m)
    }

    /// The counter's total of the interval before `m`, read by a flush of 0 that a fresh
    /// participant sends in `m`.
    async fn counter_total(&self, m: u64) -> Result<Option<u64>, Slipped> {
        let reply = self
            .flush(&self.single(ParticipantId::random(), 1, 0, m))
            .await;
        self.expect(&reply, Outcome::Applied, m, "a fresh participant's flush")?;
        Ok(reply.previous_total())
    }

    /// The totals of `keys` in partition `p` for the interval before `m`, read by a batch of
    /// 0s that a fresh participant sends in `m`.
    async fn batch_totals(
        &self,
        p: u32,
        keys: &[&str],
        m: u64,
    ) -> Result<Vec<Option<u64>>, Slipped> {
        let entries: Vec<(&str, u64)> = keys.iter().map(|k| (*k, 0)).collect();
        let reply = self
            .flush(&self.batch(p, ParticipantId::random(), 1, &entries, m))
            .await;
        self.expect(&reply, Outcome::Applied, m, "a fresh participant's batch")?;
        Ok(reply.previous_totals)
    }

    /// Checks a request the store must refuse with [`StoreErrorKind::Refused`]; a request that
    /// is applied in another interval than `n` slipped.
    async fn refused(&self, request: &FlushRequest, n: u64, what: &str) -> Result<(), Slipped> {
        match self.try_flush(request).await {
            Err(error) if error.kind() == StoreErrorKind::Refused => Ok(()),
            Err(error) => self.fail(format_args!(
                "{what} must be refused (StoreErrorKind::Refused), the store failed it as \
                 {:?}: {error}",
                error.kind()
            )),
            Ok(reply) if reply.interval != n && reply.outcome == Outcome::Applied => Err(Slipped(
                format!("{what} landed in interval {}, not {n}", reply.interval),
            )),
            Ok(reply) => self.fail(format_args!(
                "{what} must be refused, the store answered {reply:?}"
            )),
        }
    }
}

fn someone() -> ParticipantId {
    ParticipantId::random()
}

async fn applies_a_flush_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let one = someone();
    let n = run.aim(0).await?;
    let reply = run.flush(&run.single(one, 1, 5, n)).await;
    run.expect(&reply, Outcome::Applied, n, "a participant's first flush")?;
    run.totals(&reply, &[None], "the first flush to fresh keys");
    let m = run.next(n).await?;
    let total = run.counter_total(m).await?;
    if total != Some(5) {
        run.fail(format_args!(
            "a flush of 5 was applied in interval {n}, and interval {m}'s replies say \
             interval {n} holds {total:?}"
        ));
    }
    Ok(())
}

async fn fences_a_replayed_flush_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let one = someone();
    let n = run.aim(0).await?;
    let flush = run.single(one, 1, 5, n);
    run.expect(
        &run.flush(&flush).await,
        Outcome::Applied,
        n,
        "a first flush",
    )?;
    for copy in [flush.clone(), flush.clone().with_expect(n + 1)] {
        let reply = run.flush(&copy).await;
        run.expect(
            &reply,
            Outcome::Duplicate,
            n,
            "a replayed copy of an applied flush",
        )?;
        if reply.counted_in != Some(n) {
            run.fail(format_args!(
                "a duplicate must say it was counted in interval {n}, where it was applied: \
                 {reply:?}"
            ));
        }
    }
    let m = run.next(n).await?;
    let reply = run.flush(&flush.clone().with_expect(m)).await;
    run.expect(
        &reply,
        Outcome::Duplicate,
        m,
        "a copy replayed an interval later",
    )?;
    if reply.counted_in != Some(n) {
        run.fail(format_args!(
            "a copy replayed an interval later must say it was counted in interval {n}: \
             {reply:?}"
        ));
    }
    run.totals(
        &reply,
        &[Some(5)],
        "the flush of 5, replayed twice, counts once",
    );
    Ok(())
}

async fn refuses_a_second_flush_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let one = someone();
    let n = run.aim(0).await?;
    run.expect(
        &run.flush(&run.single(one, 1, 5, n)).await,
        Outcome::Applied,
        n,
        "a first flush",
    )?;
    let second = run.single(one, 2, 7, n);
    let reply = run.flush(&second).await;
    run.expect(&reply, Outcome::Fenced, n, "a second flush in one interval")?;
    let reply = run.flush(&second.clone().with_expect(n + 1)).await;
    run.expect(
        &reply,
        Outcome::Fenced,
        n,
        "a second flush landing early in the same interval",
    )?;
    let m = run.next(n).await?;
    let reply = run.flush(&second.with_expect(m)).await;
    run.expect(
        &reply,
        Outcome::Applied,
        m,
        "the fenced flush, sent again an interval later",
    )?;
    run.totals(
        &reply,
        &[Some(5)],
        "the interval before holds the first flush only",
    );
    Ok(())
}

async fn ignores_a_stale_flush_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let one = someone();
    let n = run.aim(0).await?;
    run.expect(
        &run.flush(&run.single(one, 2, 5, n)).await,
        Outcome::Applied,
        n,
        "a flush",
    )?;
    let reply = run.flush(&run.single(one, 1, 7, n)).await;
    run.expect(
        &reply,
        Outcome::Stale,
        n,
        "an older flush, after a newer one was applied",
    )?;
    let m = run.next(n).await?;
    let reply = run.flush(&run.single(one, 1, 7, m)).await;
    run.expect(
        &reply,
        Outcome::Stale,
        m,
        "the older flush, an interval later",
    )?;
    run.totals(&reply, &[Some(5)], "the stale flush adds nothing");
    Ok(())
}

async fn tells_what_the_fence_held_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let one = someone();
    let n = run.aim(0).await?;
    let first = run.single(one, 5, 1, n);
    let reply = run.flush(&first).await;
    run.expect(&reply, Outcome::Applied, n, "a participant's first flush")?;
    run.fence(
        &reply,
        Fence::Empty,
        "a participant's first flush, on no fence",
    );
    let reply = run.flush(&first).await;
    run.expect(&reply, Outcome::Duplicate, n, "a replayed flush")?;
    let first_held = Fence::Held {
        seq: 5,
        interval: n,
    };
    run.fence(
        &reply,
        first_held,
        "a duplicate, whose own number the fence holds",
    );
    let reply = run.flush(&run.single(one, 7, 1, n)).await;
    run.expect(&reply, Outcome::Fenced, n, "a second flush in one interval")?;
    run.fence(&reply, first_held, "a fenced flush, after the first one");
    let reply = run.flush(&run.single(one, 3, 1, n)).await;
    run.expect(&reply, Outcome::Stale, n, "an older flush")?;
    run.fence(&reply, first_held, "a stale flush, after a later one");
    let m = run.next(n).await?;
    let next = run.single(one, 7, 1, m);
    let reply = run.flush(&next).await;
    run.expect(&reply, Outcome::Applied, m, "the participant's next flush")?;
    run.fence(
        &reply,
        first_held,
        "the participant's next flush applied, after the first one",
    );
    let reply = run.flush(&next).await;
    run.expect(&reply, Outcome::Duplicate, m, "the next flush, replayed")?;
    let next_held = Fence::Held {
        seq: 7,
        interval: m,
    };
    run.fence(&reply, next_held, "a duplicate of the next flush");
    let reply = run.flush(&first.clone().with_expect(m)).await;
    run.expect(
        &reply,
        Outcome::Stale,
        m,
        "the first flush, after the next one was applied",
    )?;
    run.fence(
        &reply,
        next_held,
        "the first flush, stale once the next one was applied",
    );
    let reply = run.flush(&run.single(one, 9, 1, m + 5)).await;
    run.expect(
        &reply,
        Outcome::WrongInterval,
        m,
        "a flush expecting five intervals on",
    )?;
    run.fence(
        &reply,
        Fence::Untold,
        "a wrong interval, which reads no fence",
    );
    Ok(())
}

async fn reports_wrong_interval_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let one = someone();
    let n = run.aim(2).await?;
    for off in [n + 2, n - 2, n + 5, 0] {
        let reply = run.flush(&run.single(one, 1, 7, off)).await;
        run.expect(
            &reply,
            Outcome::WrongInterval,
            n,
            &format!("a flush expecting interval {off}"),
        )?;
    }
    // No fence was written: the same participant's flush, with the same sequence number, is
    // applied.
    let reply = run.flush(&run.single(one, 1, 5, n)).await;
    run.expect(
        &reply,
        Outcome::Applied,
        n,
        "the participant's flush after wrong intervals",
    )?;
    let m = run.next(n).await?;
    let total = run.counter_total(m).await?;
    if total != Some(5) {
        run.fail(format_args!(
            "flushes answered as wrong intervals were added: interval {n} holds {total:?}, \
             where one flush of 5 was applied"
        ));
    }
    Ok(())
}

async fn either_side_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let n = run.aim(1).await?;
    applied_either_side(&run, n, 1).await
}

async fn within_reach_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let short = someone();
    let far = FlushRequest::MAX_REACH;
    let n = run.aim(far + 1).await?;
    for (reach, off) in [(far, n + far + 1), (far, n - far - 1), (far - 1, n + far)] {
        let reply = run
            .flush(&run.single(short, 1, 1000, off).with_reach(reach))
            .await;
        run.expect(
            &reply,
            Outcome::WrongInterval,
            n,
            &format!("a flush reaching {reach} and expecting interval {off}"),
        )?;
    }
    applied_either_side(&run, n, far).await
}

/// Flushes of 10 expecting `reach` intervals after `n` (landing early) and of 100 expecting
/// `reach` before it (landing late), each reaching `reach`: both are applied in `n`, which then
/// holds 110 and nothing of any other flush.
async fn applied_either_side<S: Store>(
    run: &Run<'_, S>,
    n: u64,
    reach: u64,
) -> Result<(), Slipped> {
    let (early, late) = (someone(), someone());
    for (participant, amount, expect, what) in [
        (early, 10, n + reach, "later"),
        (late, 100, n - reach, "before"),
    ] {
        let reply = run
            .flush(&run.single(participant, 1, amount, expect).with_reach(reach))
            .await;
        run.expect(
            &reply,
            Outcome::Applied,
            n,
            &format!("a flush reaching {reach} and expecting {reach} intervals {what}"),
        )?;
    }
    let m = run.next(n).await?;
    let total = run.counter_total(m).await?;
    if total != Some(110) {
        run.fail(format_args!(
            "flushes of 10 and 100 were applied in interval {n}, which holds {total:?}"
        ));
    }
    Ok(())
}

async fn returns_previous_totals_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let (one, two, three) = (someone(), someone(), someone());
    let n = run.aim(0).await?;
    for (participant, amount) in [(one, 3), (two, 4), (three, 8)] {
        let reply = run.flush(&run.single(participant, 2, amount, n)).await;
        run.expect(&reply, Outcome::Applied, n, "a participant's flush")?;
    }
    let m = run.next(n).await?;
    let total = [Some(15)];
    let reply = run.flush(&run.single(one, 3, 1, m)).await;
    run.expect(&reply, Outcome::Applied, m, "the next flush")?;
    run.totals(&reply, &total, "an applied flush");
    let reply = run.flush(&run.single(one, 3, 1, m)).await;
    run.expect(&reply, Outcome::Duplicate, m, "a replayed flush")?;
    run.totals(&reply, &total, "a duplicate");
    let reply = run.flush(&run.single(one, 4, 1, m)).await;
    run.expect(&reply, Outcome::Fenced, m, "a second flush in one interval")?;
    run.totals(&reply, &total, "a fenced flush");
    let reply = run.flush(&run.single(one, 1, 1, m)).await;
    run.expect(&reply, Outcome::Stale, m, "an older flush")?;
    run.totals(&reply, &total, "a stale flush");
    let reply = run.flush(&run.single(two, 2, 4, m)).await;
    run.expect(
        &reply,
        Outcome::Duplicate,
        m,
        "a copy of a flush applied an interval before",
    )?;
    run.totals(
        &reply,
        &total,
        "a duplicate of a flush applied an interval before",
    );
    Ok(())
}

async fn refuses_bad_requests_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let one = someone();
    let n = run.aim(0).await?;
    let good = run.single(one, 5, 1, n);
    let with = |change: fn(&mut FlushRequest)| {
        let mut request = good.clone();
        change(&mut request);
        request
    };
    let bad = [
        ("a flush with sequence number 0", with(|r| r.seq = 0)),
        (
            "a flush with sequence number 2^53",
            with(|r| r.seq = 1 << 53),
        ),
        (
            "a flush with an interval of 0 ms",
            with(|r| r.interval_ms = 0),
        ),
        (
            "a flush with an interval above 2^53/3 ms",
            with(|r| r.interval_ms = FlushRequest::MAX_INTERVAL_MS + 1),
        ),
        (
            "a flush expecting interval 2^53",
            with(|r| r.expect = 1 << 53),
        ),
        ("a flush reaching 0 intervals", with(|r| r.reach = 0)),
        (
            "a flush reaching further than MAX_REACH",
            with(|r| r.reach = FlushRequest::MAX_REACH + 1),
        ),
        (
            "a flush with a fence life of 0",
            with(|r| r.fence_ttl_ms = 0),
        ),
        (
            "a flush with a fence life of 2^53 ms",
            with(|r| r.fence_ttl_ms = 1 << 53),
        ),
        (
            "a counter's flush with no entry",
            with(|r| r.entries.clear()),
        ),
        (
            "a counter's flush whose entry has a key",
            with(|r| r.entries = vec![Entry::new("k", 1)]),
        ),
        (
            "a counter's flush with two entries",
            with(|r| r.entries = vec![Entry::new("", 1), Entry::new("", 1)]),
        ),
        (
            "a flush of more than i64::MAX",
            with(|r| r.entries = vec![Entry::new("", FlushRequest::MAX_AMOUNT + 1)]),
        ),
    ];
    for (what, request) in &bad {
        run.refused(request, n, what).await?;
    }
    // Nothing was written: not the fence (the participant's flush with a smaller sequence
    // number is applied, not stale), not the total.
    let reply = run.flush(&run.single(one, 1, 5, n)).await;
    run.expect(
        &reply,
        Outcome::Applied,
        n,
        "the participant's flush after refused ones",
    )?;
    let m = run.next(n).await?;
    let total = run.counter_total(m).await?;
    if total != Some(5) {
        run.fail(format_args!(
            "refused requests were added: interval {n} holds {total:?}, where one flush of 5 \
             was applied"
        ));
    }
    Ok(())
}

async fn returns_landed_totals_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let (one, two, three) = (someone(), someone(), someone());
    let n = run.aim(0).await?;
    let mut landed = Vec::new();
    for (who, amount) in [(one, 5), (two, 7), (three, FlushRequest::MAX_AMOUNT - 12)] {
        let reply = run.flush(&run.single(who, 1, amount, n)).await;
        run.expect(&reply, Outcome::Applied, n, "a flush to the interval")?;
        landed.push(reply.landed_totals);
    }
    let expected = [5, 12, FlushRequest::MAX_AMOUNT].map(|t| vec![Some(t)]);
    if landed != expected {
        run.fail(format_args!(
            "flushes of 5, 7 and i64::MAX - 12 in interval {n} brought back {landed:?} as \
             their interval's totals, not {expected:?}"
        ));
    }
    let replayed = run.flush(&run.single(one, 1, 5, n)).await;
    let fenced = run.flush(&run.single(two, 2, 1, n)).await;
    for (reply, what) in [(replayed, "a duplicate"), (fenced, "a fenced flush")] {
        if !reply.landed_totals.is_empty() {
            run.fail(format_args!(
                "{what} brought back {:?} as its interval's totals, where nothing was added",
                reply.landed_totals
            ));
        }
    }
    let batch = run.flush(&run.batch(0, one, 1, &[("a", 1)], n)).await;
    run.expect(&batch, Outcome::Applied, n, "a family's batch")?;
    if !batch.landed_totals.is_empty() {
        run.fail(format_args!(
            "a family's batch brought back {:?} as its interval's totals",
            batch.landed_totals
        ));
    }
    Ok(())
}

async fn refuses_an_overflow_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let (one, two) = (someone(), someone());
    let n = run.aim(0).await?;
    run.expect(
        &run.flush(&run.single(one, 1, 7, n)).await,
        Outcome::Applied,
        n,
        "a flush of 7",
    )?;
    let overflow = run.single(two, 1, FlushRequest::MAX_AMOUNT, n);
    run.refused(&overflow, n, "a flush taking the total of 7 past i64::MAX")
        .await?;
    let reply = run.flush(&run.single(two, 2, 4, n)).await;
    run.expect(
        &reply,
        Outcome::Applied,
        n,
        "the participant's flush after the refused overflow",
    )?;
    let m = run.next(n).await?;
    let total = run.counter_total(m).await?;
    if total != Some(11) {
        run.fail(format_args!(
            "flushes of 7 and 4 were applied in interval {n} and an overflowing one refused, \
             and interval {n} holds {total:?}"
        ));
    }
    Ok(())
}

async fn applies_a_batch_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let (one, two) = (someone(), someone());
    let n = run.aim(0).await?;
    let reply = run
        .flush(&run.batch(0, one, 1, &[("a", 1), ("b", 0), ("c", 5)], n))
        .await;
    run.expect(&reply, Outcome::Applied, n, "a batch")?;
    run.totals(&reply, &[None, None, None], "the first batch to fresh keys");
    let reply = run
        .flush(&run.batch(0, two, 1, &[("c", 2), ("d", 3)], n + 1))
        .await;
    run.expect(&reply, Outcome::Applied, n, "a second participant's batch")?;
    let m = run.next(n).await?;
    let keys = ["d", "new", "b", "a", "c"];
    let totals = run.batch_totals(0, &keys, m).await?;
    let expected = [Some(3), None, Some(0), Some(1), Some(7)];
    if totals != expected {
        run.fail(format_args!(
            "interval {n} got a: 1, b: 0, c: 5 + 2, d: 3; the totals of {keys:?} came back \
             as {totals:?}, not {expected:?} (a key flushed with 0 has a total of 0, one \
             never flushed none)"
        ));
    }
    Ok(())
}

async fn fences_a_replayed_batch_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let one = someone();
    let entries = [("a", 1), ("b", 2)];
    let n = run.aim(0).await?;
    let first = run.batch(0, one, 2, &entries, n);
    run.expect(&run.flush(&first).await, Outcome::Applied, n, "a batch")?;
    let reply = run.flush(&first).await;
    run.expect(&reply, Outcome::Duplicate, n, "a replayed batch")?;
    let reply = run.flush(&first.clone().with_seq(3)).await;
    run.expect(&reply, Outcome::Fenced, n, "a second batch in one interval")?;
    let m = run.next(n).await?;
    let reply = run.flush(&first.clone().with_expect(m)).await;
    run.expect(
        &reply,
        Outcome::Duplicate,
        m,
        "a batch replayed an interval later",
    )?;
    if reply.counted_in != Some(n) {
        run.fail(format_args!(
            "a replayed batch must say it was counted in interval {n}: {reply:?}"
        ));
    }
    run.totals(
        &reply,
        &[Some(1), Some(2)],
        "the batch, replayed and fenced, counts once",
    );
    let reply = run.flush(&first.clone().with_seq(4).with_expect(m)).await;
    run.expect(&reply, Outcome::Applied, m, "the next batch")?;
    let reply = run.flush(&first.with_seq(3).with_expect(m)).await;
    run.expect(&reply, Outcome::Stale, m, "an older batch")?;
    run.totals(&reply, &[Some(1), Some(2)], "a stale batch");
    Ok(())
}

async fn keeps_partitions_apart_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let one = someone();
    let n = run.aim(0).await?;
    let amounts = [1, 10, 100];
    for (p, amount) in (0..).zip(amounts) {
        let reply = run.flush(&run.batch(p, one, 1, &[("k", amount)], n)).await;
        run.expect(
            &reply,
            Outcome::Applied,
            n,
            &format!("partition {p}'s batch"),
        )?;
    }
    let reply = run.flush(&run.single(one, 1, 1000, n)).await;
    run.expect(
        &reply,
        Outcome::Applied,
        n,
        "a counter's flush, beside a family of the same name",
    )?;
    let reply = run.flush(&run.batch(1, one, 2, &[("k", 5)], n)).await;
    run.expect(
        &reply,
        Outcome::Fenced,
        n,
        "a second batch to one partition",
    )?;
    let m = run.next(n).await?;
    for (p, amount) in (0..).zip(amounts) {
        let totals = run.batch_totals(p, &["k"], m).await?;
        if totals != [Some(amount)] {
            run.fail(format_args!(
                "partition {p} got {amount} for the key \"k\" in interval {n}, and holds \
                 {totals:?}: each partition keeps its own totals"
            ));
        }
    }
    let total = run.counter_total(m).await?;
    if total != Some(1000) {
        run.fail(format_args!(
            "the counter got 1000 in interval {n} and holds {total:?}"
        ));
    }
    Ok(())
}

async fn refuses_bad_batches_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let (one, two) = (someone(), someone());
    let n = run.aim(0).await?;
    let long = "k".repeat(FlushRequest::MAX_KEY_LEN + 1);
    let many: Vec<String> = (0..=FlushRequest::MAX_ENTRIES)
        .map(|i| format!("many-{i}"))
        .collect();
    let many: Vec<(&str, u64)> = many.iter().map(|k| (k.as_str(), 1)).collect();
    let bad = [
        ("a batch with no entry", run.batch(0, two, 5, &[], n)),
        (
            "a batch with an empty key",
            run.batch(0, two, 5, &[("a", 1), ("", 1)], n),
        ),
        (
            "a batch with a key longer than 256 bytes",
            run.batch(0, two, 5, &[(&long, 1)], n),
        ),
        ("a batch of 1001 entries", run.batch(0, two, 5, &many, n)),
        (
            "a batch with an amount above i64::MAX",
            run.batch(
                0,
                two,
                5,
                &[("a", 1), ("b", FlushRequest::MAX_AMOUNT + 1)],
                n,
            ),
        ),
    ];
    for (what, request) in &bad {
        run.refused(request, n, what).await?;
    }
    // The largest batch in range is accepted (aimed far away, it is a wrong interval and
    // writes nothing).
    let longest: Vec<String> = (0..FlushRequest::MAX_ENTRIES)
        .map(|i| format!("{i:0>width$}", width = FlushRequest::MAX_KEY_LEN))
        .collect();
    let largest: Vec<(&str, u64)> = longest
        .iter()
        .map(|k| (k.as_str(), FlushRequest::MAX_AMOUNT))
        .collect();
    let reply = run.flush(&run.batch(0, two, 5, &largest, n + 5)).await;
    run.expect(
        &reply,
        Outcome::WrongInterval,
        n,
        "the largest batch in range, aimed 5 intervals ahead",
    )?;
    // A key twice adds both amounts, and a total past i64::MAX stops there.
    let reply = run
        .flush(&run.batch(0, one, 1, &[("x", 5), ("y", 5)], n))
        .await;
    run.expect(&reply, Outcome::Applied, n, "a batch")?;
    let past = run.batch(
        0,
        two,
        2,
        &[("x", 1), ("y", FlushRequest::MAX_AMOUNT), ("x", 1)],
        n,
    );
    let reply = run.flush(&past).await;
    run.expect(
        &reply,
        Outcome::Applied,
        n,
        "a batch with a key twice, taking another past i64::MAX, after refused ones",
    )?;
    let m = run.next(n).await?;
    let totals = run.batch_totals(0, &["x", "y"], m).await?;
    if totals != [Some(7), Some(FlushRequest::MAX_AMOUNT)] {
        run.fail(format_args!(
            "interval {n} got x: 5 + 1 + 1 and y: 5 + i64::MAX in applied batches, and holds \
             x, y = {totals:?}: a key twice adds both amounts, a total stops at i64::MAX, and \
             a refused batch writes nothing"
        ));
    }
    Ok(())
}

async fn counts_a_large_family_steps<S: Store>(run: Run<'_, S>) -> Result<(), Slipped> {
    let (keys, partitions) = LARGE_FAMILY;
    let one = someone();
    let names: Vec<String> = (0..keys).map(|i| format!("key-{i}")).collect();
    let mut by_partition: BTreeMap<u32, Vec<Entry>> = BTreeMap::new();
    for (i, name) in (0u64..).zip(&names) {
        by_partition
            .entry(partition_of(name, partitions))
            .or_default()
            .push(Entry::new(name.as_str(), i % 7));
    }
    let n = run.aim(0).await?;
    let first: Vec<FlushRequest> = by_partition
        .iter()
        .map(|(p, entries)| run.request(run.partition(*p), one, 1, entries.clone(), n))
        .collect();
    for reply in run.flush_all(&first).await {
        run.expect(&reply, Outcome::Applied, n, "a partition's batch")?;
    }
    let m = run.next(n).await?;
    let reader = someone();
    let second: Vec<FlushRequest> = first
        .iter()
        .map(|r| {
            let zeros = r
                .entries
                .iter()
                .map(|e| Entry::new(Arc::clone(&e.key), 0))
                .collect();
            run.request(r.space.clone(), reader, 1, zeros, m)
        })
        .collect();
    for (request, reply) in first.iter().zip(run.flush_all(&second).await) {
        run.expect(&reply, Outcome::Applied, m, "a partition's batch")?;
        let expected: Vec<Option<u64>> = request.entries.iter().map(|e| Some(e.amount)).collect();
        if reply.previous_totals != expected {
            let wrong: Vec<_> = request
                .entries
                .iter()
                .zip(&reply.previous_totals)
                .filter(|(e, t)| **t != Some(e.amount))
                .take(5)
                .map(|(e, t)| format!("{:?}: {t:?}, not {}", e.key, e.amount))
                .collect();
            run.fail(format_args!(
                "a family of {keys} keys over {partitions} partitions: {:?} brings back the \
                 wrong totals for interval {n}; first differences: {}",
                request.space,
                wrong.join(", ")
            ));
        }
    }
    Ok(())
}
