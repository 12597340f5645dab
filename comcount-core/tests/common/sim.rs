//! A simulated store for model tests: the protocol's reference implementation on a skewable
//! clock, with faults injected flush by flush and a record of everything it did.
//!
//! A flush is one request whatever it carries: a counter's one entry, or the entries of a
//! family's partition. Each fault strikes the whole request, and the [`MemoryStore`] under it
//! runs a batch as the protocol lays down, every entry or none, behind one fence per
//! participant and key space (a counter, or one partition of a family).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use comcount_core::clock::{Clock, Timer, VirtualClock};
use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::{
    FlushReply, FlushRequest, KeySpace, Layout, MemoryStore, Outcome, Store, StoreError,
};
use futures::FutureExt;
use futures::executor::LocalPool;
use proptest::prelude::*;

/// The store's time: the participants' virtual time, plus a base, plus a skew that tests move
/// back and forth.
#[derive(Clone)]
pub struct StoreClock {
    clock: VirtualClock,
    skew_ms: Arc<Mutex<i64>>,
}

const BASE: Duration = Duration::from_secs(1_000_000);

impl Clock for StoreClock {
    fn now(&self) -> Duration {
        let skew = *self.skew_ms.lock().unwrap();
        let now = BASE + self.clock.now();
        if skew >= 0 {
            now + Duration::from_millis(skew as u64)
        } else {
            now.saturating_sub(Duration::from_millis(skew.unsigned_abs()))
        }
    }
}

/// What happens to one flush on its way.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Nothing: applied and answered at once.
    None,
    /// Applied, but the reply is lost.
    ReplyLostAfter,
    /// Lost before it reached the store.
    LostBefore,
    /// Reaches the store after a delay, then is answered.
    Delay(Duration),
    /// Reaches nothing; the client gives up after this long.
    Hang(Duration),
    /// Applied and answered (or not), and the client sends a copy again after this long.
    Replayed { after: Duration, reply_lost: bool },
    /// Lost at first; the client sends it again after this long, and that reply is lost too.
    LostThenReplayed { after: Duration },
    /// Turned away unrun (a store loading or moving a slot), answered as unavailable.
    TurnedAway,
    /// Turned away unrun and answered as unavailable, but the client retries it on its own
    /// after this long, and that reply is lost: a copy answered "not applied" may land yet.
    TurnedAwayThenReplayed { after: Duration },
    /// Refused unrun (a permission missing, say), answered with an error that is final.
    Refused,
    /// Applied, but the connection drops before the reply; the client sends it again on its
    /// own (as redis-rs's cluster client does), that attempt is refused (`OOM`, say), and the
    /// client answers with the refusal, marked as after its own resends.
    AppliedThenRefused,
}

/// The faults a model draws from, for an interval of `interval_ms`: mostly none, and each kind
/// of loss, delay, hang, replay and refusal to run.
pub fn fault(interval_ms: u64) -> impl Strategy<Value = Fault> {
    let i = interval_ms;
    let ms = Duration::from_millis;
    prop_oneof![
        8 => Just(Fault::None),
        1 => Just(Fault::ReplyLostAfter),
        1 => Just(Fault::LostBefore),
        1 => (0..2 * i).prop_map(move |d| Fault::Delay(ms(d))),
        1 => (2 * i..=3 * i).prop_map(move |d| Fault::Hang(ms(d))),
        1 => (0..3 * i, any::<bool>())
            .prop_map(move |(d, reply_lost)| Fault::Replayed { after: ms(d), reply_lost }),
        1 => (0..3 * i).prop_map(move |d| Fault::LostThenReplayed { after: ms(d) }),
        1 => Just(Fault::TurnedAway),
        2 => (0..3 * i).prop_map(move |d| Fault::TurnedAwayThenReplayed { after: ms(d) }),
        1 => Just(Fault::Refused),
        1 => Just(Fault::AppliedThenRefused),
    ]
}

/// One run of the flush on the store.
#[derive(Clone, Debug)]
pub struct Application {
    pub request: FlushRequest,
    pub reply: Result<FlushReply, String>,
    /// The total of the key the flush wrote, right after; `None` unless it was applied. For a
    /// family's flush, the first entry's: see `totals_after`.
    pub total_after: Option<u64>,
    /// The total of each entry's key in the interval the flush wrote, right after, in the
    /// order of the entries; empty unless it was applied.
    pub totals_after: Vec<Option<u64>>,
    /// Whether the participant got this reply.
    pub delivered: bool,
    /// Whether it was a client's replay rather than the participant's own send.
    pub replay: bool,
}

/// A flush the participant saw fail.
#[derive(Clone, Debug)]
pub struct Failure {
    pub participant: u64,
    pub seq: u64,
    pub amount: u64,
}

#[derive(Default)]
struct Inner {
    faults: VecDeque<Fault>,
    replays: Vec<(Duration, FlushRequest)>,
    applications: Vec<Application>,
    failures: Vec<Failure>,
    /// Per participant: when it last got a reply with a total, that total, and the round trip
    /// of the copy that brought it.
    last_reply: Vec<(u64, Duration, Option<u64>, Duration)>,
    /// Per participant, each counter's total an applied flush brought of the interval it was
    /// counted in: when that interval had ended for sure, when the total goes stale, the total.
    landed: Vec<(u64, Duration, Duration, u64)>,
    /// Every total a participant received for a key: who, the key, the total.
    brought: std::collections::HashSet<(u64, Arc<str>, u64)>,
    /// Every copy a participant sent itself: who, when, and its sequence number.
    sends: Vec<(u64, Duration, u64)>,
    in_flight: usize,
    /// Per participant, the sequence number of its last own send.
    last_sent: std::collections::HashMap<u64, u64>,
    /// Per participant and key space (a family sends one flush per partition), the sequence
    /// number of its last own send there.
    last_sent_in: std::collections::HashMap<(u64, KeySpace), u64>,
}

#[derive(Clone)]
pub struct SimStore {
    pub clock: VirtualClock,
    store_clock: StoreClock,
    memory: MemoryStore<StoreClock>,
    inner: Arc<Mutex<Inner>>,
    reporter: Reporter,
}

impl SimStore {
    pub fn new(clock: VirtualClock) -> Self {
        let store_clock = StoreClock {
            clock: clock.clone(),
            skew_ms: Arc::default(),
        };
        Self {
            memory: MemoryStore::with_clock(store_clock.clone()),
            store_clock,
            clock,
            inner: Arc::default(),
            reporter: Reporter::new("sim", Arc::new(Recorder::new())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    pub fn set_faults(&self, faults: impl IntoIterator<Item = Fault>) {
        self.lock().faults = faults.into_iter().collect();
    }

    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    pub fn skew(&self, by_ms: i64) {
        *self.store_clock.skew_ms.lock().unwrap() += by_ms;
    }

    pub fn applications(&self) -> Vec<Application> {
        self.lock().applications.clone()
    }

    /// The runs of a flush that were applied.
    pub fn applied(&self) -> Vec<Application> {
        let mut applied = self.applications();
        applied.retain(|app| {
            app.reply
                .as_ref()
                .is_ok_and(|reply| reply.outcome == Outcome::Applied)
        });
        applied
    }

    pub fn failures(&self) -> Vec<Failure> {
        self.lock().failures.clone()
    }

    /// The sequence number of the participant's last own send.
    pub fn last_sent(&self, participant: u64) -> Option<u64> {
        self.lock().last_sent.get(&participant).copied()
    }

    /// The sequence number of the participant's last own send to `space`: for a family, the
    /// flush of one partition in the air.
    pub fn last_sent_in(&self, participant: u64, space: &KeySpace) -> Option<u64> {
        self.lock()
            .last_sent_in
            .get(&(participant, space.clone()))
            .copied()
    }

    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// What the participant last learned: when, the total (`None` for no key), and the round
    /// trip of the copy that brought it.
    pub fn last_reply(&self, participant: u64) -> Option<(Duration, Option<u64>, Duration)> {
        self.lock()
            .last_reply
            .iter()
            .rev()
            .find(|(p, ..)| *p == participant)
            .map(|(_, at, total, round_trip)| (*at, *total, *round_trip))
    }

    /// Whether an applied flush of the participant brought `total` as its interval's total
    /// just after it, in an interval that has ended by now, and that total is not stale yet.
    pub fn landed_and_fresh(&self, participant: u64, total: u64) -> bool {
        let now = self.clock.now();
        self.lock().landed.iter().any(|&(p, ends_at, stale_at, t)| {
            p == participant && t == total && ends_at <= now && now < stale_at
        })
    }

    /// Whether a reply the participant received brought `total` as the previous interval's
    /// total of `key` (the empty key for a counter).
    pub fn brought(&self, participant: u64, key: &str, total: u64) -> bool {
        self.lock()
            .brought
            .contains(&(participant, Arc::from(key), total))
    }

    /// When each copy the participant sent itself went out, with its sequence number.
    pub fn sends(&self, participant: u64) -> Vec<(Duration, u64)> {
        self.lock()
            .sends
            .iter()
            .filter(|(p, ..)| *p == participant)
            .map(|(_, at, seq)| (*at, *seq))
            .collect()
    }

    /// When the next replay is due.
    pub fn next_replay(&self) -> Option<Duration> {
        self.lock().replays.iter().map(|(at, _)| *at).min()
    }

    /// Runs the workers on `pool` up to `target`, stopping at every timer and replay on the
    /// way.
    pub fn run_until(&self, pool: &mut LocalPool, target: Duration) {
        loop {
            pool.run_until_stalled();
            let next = [self.clock.next_wake(), self.next_replay()]
                .into_iter()
                .flatten()
                .min()
                .filter(|at| *at <= target);
            self.clock.advance_to(next.unwrap_or(target));
            self.run_due_replays();
            if next.is_none() {
                pool.run_until_stalled();
                return;
            }
        }
    }

    /// Runs the replays that are due.
    pub fn run_due_replays(&self) {
        let now = self.clock.now();
        let due: Vec<_> = {
            let mut inner = self.lock();
            let (due, later) = std::mem::take(&mut inner.replays)
                .into_iter()
                .partition::<Vec<_>, _>(|(at, _)| *at <= now);
            inner.replays = later;
            due
        };
        for (at, request) in due {
            let _ = self.apply(&request, at, false, true);
        }
    }

    fn apply(
        &self,
        request: &FlushRequest,
        sent: Duration,
        delivered: bool,
        replay: bool,
    ) -> Result<FlushReply, StoreError> {
        let reply = self
            .memory
            .flush(request, &self.reporter)
            .now_or_never()
            .expect("the memory store answers at once");
        // The key the flush wrote, if it was applied: the one of the interval it counted in.
        let written = match &reply {
            Ok(r) if r.outcome == Outcome::Applied => r.counted_in,
            _ => None,
        };
        let totals_after: Vec<_> = match written {
            None => Vec::new(),
            Some(n) => {
                let key = request.interval_key(n);
                match request.space.layout() {
                    Layout::Counter => vec![self.memory.total(&key)],
                    _ => request
                        .entries
                        .iter()
                        .map(|entry| self.memory.field(&key, &entry.key))
                        .collect(),
                }
            }
        };
        let total_after = totals_after.first().copied().flatten();
        let mut inner = self.lock();
        inner.applications.push(Application {
            request: request.clone(),
            reply: reply.as_ref().map(|r| r.clone()).map_err(|e| e.to_string()),
            total_after,
            totals_after,
            delivered,
            replay,
        });
        if delivered
            && let Ok(r) = &reply
            && r.outcome != Outcome::WrongInterval
        {
            let participant = request.participant.as_u64();
            for (entry, total) in request.entries.iter().zip(&r.previous_totals) {
                if let Some(total) = total {
                    inner
                        .brought
                        .insert((participant, Arc::clone(&entry.key), *total));
                }
            }
            let now = self.clock.now();
            inner
                .last_reply
                .push((participant, now, r.previous_total(), now - sent));
            if let Some(Some(total)) = r.landed_totals.first() {
                let interval = request.interval();
                let ends_at = now + interval.saturating_sub(r.phase);
                let stale_at = now + interval * 2 + (now - sent).min(interval * 3);
                inner.landed.push((participant, ends_at, stale_at, *total));
            }
        }
        reply
    }

    /// Notes that `request` failed as the participant sees it, with `error`.
    fn failed(&self, request: &FlushRequest, error: StoreError) -> StoreError {
        self.lock().failures.push(Failure {
            participant: request.participant.as_u64(),
            seq: request.seq,
            amount: request.amount(),
        });
        error
    }

    fn fail(&self, request: &FlushRequest) -> StoreError {
        self.failed(request, StoreError::unanswered("simulated loss"))
    }

    fn turn_away(&self, request: &FlushRequest) -> StoreError {
        self.failed(request, StoreError::unavailable("simulated busy store"))
    }

    fn refuse(&self, request: &FlushRequest) -> StoreError {
        self.failed(request, StoreError::refused("simulated refusal"))
    }

    fn replay_later(&self, request: &FlushRequest, after: Duration) {
        let at = self.clock.now() + after;
        self.lock().replays.push((at, request.clone()));
    }

    async fn run(&self, request: FlushRequest, sent: Duration) -> Result<FlushReply, StoreError> {
        let fault = self.lock().faults.pop_front().unwrap_or(Fault::None);
        match fault {
            Fault::None => self.apply(&request, sent, true, false),
            Fault::ReplyLostAfter => {
                self.apply(&request, sent, false, false).ok();
                Err(self.fail(&request))
            }
            Fault::LostBefore => Err(self.fail(&request)),
            Fault::Delay(by) => {
                self.clock.sleep(by).await;
                self.apply(&request, sent, true, false)
            }
            Fault::Hang(by) => {
                self.clock.sleep(by).await;
                Err(self.fail(&request))
            }
            Fault::Replayed { after, reply_lost } => {
                self.replay_later(&request, after);
                if reply_lost {
                    self.apply(&request, sent, false, false).ok();
                    Err(self.fail(&request))
                } else {
                    self.apply(&request, sent, true, false)
                }
            }
            Fault::LostThenReplayed { after } => {
                self.replay_later(&request, after);
                Err(self.fail(&request))
            }
            Fault::TurnedAway => Err(self.turn_away(&request)),
            Fault::TurnedAwayThenReplayed { after } => {
                self.replay_later(&request, after);
                Err(self.turn_away(&request))
            }
            Fault::Refused => Err(self.refuse(&request)),
            Fault::AppliedThenRefused => {
                self.apply(&request, sent, false, false).ok();
                Err(self.refuse(&request).after_unseen_resends())
            }
        }
    }
}

impl Store for SimStore {
    fn name(&self) -> &str {
        "sim"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let this = self.clone();
        let request = request.clone();
        let sent = self.clock.now();
        {
            let mut inner = self.lock();
            let participant = request.participant.as_u64();
            inner.last_sent.insert(participant, request.seq);
            inner
                .last_sent_in
                .insert((participant, request.space.clone()), request.seq);
            inner.sends.push((participant, sent, request.seq));
        }
        let future: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
            let _in_flight = InFlight::new(&this);
            this.run(request, sent).await
        });
        future
    }
}

/// Counts a flush as in flight for as long as its future lives, cancelled ones included.
struct InFlight<'a>(&'a SimStore);

impl<'a> InFlight<'a> {
    fn new(store: &'a SimStore) -> Self {
        store.lock().in_flight += 1;
        Self(store)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.lock().in_flight -= 1;
    }
}

/// A model's world on virtual time: the clock, the simulated store on it, and the executor
/// that runs the participants' workers.
pub struct Sim {
    pub clock: VirtualClock,
    pub store: SimStore,
    pub pool: LocalPool,
    interval: Duration,
}

impl Sim {
    /// A world whose participants flush every `interval`, on a store with these faults.
    pub fn new(interval: Duration, faults: impl IntoIterator<Item = Fault>) -> Self {
        let clock = VirtualClock::new();
        let store = SimStore::new(clock.clone());
        store.set_faults(faults);
        Self {
            clock,
            store,
            pool: LocalPool::new(),
            interval,
        }
    }

    /// Runs everything up to `target`, stopping at every timer and replay on the way.
    pub fn run_until(&mut self, target: Duration) {
        self.store.run_until(&mut self.pool, target);
    }

    /// Runs everything for `by`.
    pub fn run_for(&mut self, by: Duration) {
        let target = self.clock.now() + by;
        self.run_until(target);
    }

    /// Runs until `participant` sends a copy (for three intervals at most), then for `after`
    /// more.
    pub fn run_past_next_send(&mut self, participant: u64, after: Duration) {
        let sent_before = self.store.sends(participant).len();
        let give_up = self.clock.now() + self.interval * 3;
        while self.store.sends(participant).len() == sent_before && self.clock.now() < give_up {
            self.run_for(Duration::from_millis(1));
        }
        self.run_for(after);
    }

    /// Stops the faults and runs ten intervals, in which everything in the air lands or
    /// gives up and the buffers are flushed; fails if a flush is still in the store's hands.
    pub fn settle(&mut self) -> Result<(), TestCaseError> {
        self.store.clear_faults();
        self.run_for(self.interval * 10);
        prop_assert_eq!(self.store.in_flight(), 0);
        Ok(())
    }
}

/// How many schedules a model test generates: `PROPTEST_CASES`, or 10,000.
pub fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}
