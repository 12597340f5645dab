//! The one suite every store passes: the public conformance checks of
//! [`comcount_core::testing::conformance`], which look at the replies alone, and here, through
//! an [`Inspector`] that reads the store's keys from outside, what those cannot see: the keys'
//! names, values and expiry, and that a refused flush leaves every key as it was.
//!
//! Flushes are aimed at an interval by asking the store first (a flush that expects interval 0
//! comes back as a wrong interval with the store's interval and phase, once the store's clock
//! is past interval 1), and a scenario starts over with fresh keys whenever a step slips over
//! an interval boundary on a busy machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::testing::conformance::Conformance;
use comcount_core::{
    FlushReply, FlushRequest, KeySpace, Outcome, ParticipantId, Store, StoreErrorKind,
};

use crate::inspect::{Inspector, Snapshot};

pub mod family;
use crate::settings::{self, sleep};

/// How long a fence lives in these tests, as counters with short intervals set it.
const FENCE_TTL_MS: u64 = 600_000;

/// How many times the scenario may start over after slipping over an interval boundary.
const ATTEMPTS: u32 = 8;

/// A step landed in another interval than the one it was aimed at.
#[derive(Debug)]
pub struct Slipped(pub String);

/// Runs the whole suite against `store`, reading its keys through `inspector`: every public
/// check at the tests' interval, then the keys of a counter and of the [`family`] scenarios.
pub async fn check_store<S: Store, I: Inspector>(store: &S, inspector: &I) {
    checks().all(store).await;
    check_counter_keys(store, inspector).await;
    family::check_family_keys(store, inspector).await;
}

/// The public conformance checks, at the tests' interval and under a prefix of their own.
pub fn checks() -> Conformance {
    Conformance::new()
        .interval(settings::interval())
        .prefix(settings::unique_prefix("checks"))
}

/// Runs the counter's scenario against `store`: the keys it writes and leaves alone.
pub async fn check_counter_keys<S: Store, I: Inspector>(store: &S, inspector: &I) {
    let interval = settings::interval();
    for attempt in 1..=ATTEMPTS {
        match scenario(store, inspector, interval).await {
            Ok(()) => return,
            Err(Slipped(why)) => {
                eprintln!("attempt {attempt} slipped over an interval boundary ({why}); again");
            }
        }
    }
    panic!(
        "every attempt slipped over an interval boundary: the machine is too busy for \
         TEST_INTERVAL={}ms",
        interval.as_millis()
    );
}

/// Builds the requests of one scenario, under keys of its own.
pub struct Requests {
    /// The counter's keys.
    pub space: KeySpace,
    /// The interval in milliseconds.
    pub interval_ms: u64,
}

impl Requests {
    /// Requests of a counter under a fresh prefix.
    pub fn fresh(interval: Duration) -> Self {
        Self {
            space: KeySpace::counter(&settings::unique_prefix("conf"), "conformance"),
            interval_ms: u64::try_from(interval.as_millis()).unwrap(),
        }
    }

    /// What every key of the scenario starts with.
    pub fn base(&self) -> &str {
        self.space.base()
    }

    /// One flush.
    pub fn flush(
        &self,
        participant: ParticipantId,
        seq: u64,
        amount: u64,
        expect: u64,
    ) -> FlushRequest {
        FlushRequest::new(self.space.clone(), participant, self.interval_ms)
            .with_seq(seq)
            .with_amount(amount)
            .with_expect(expect)
            .with_fence_ttl_ms(FENCE_TTL_MS)
    }

    /// The key of interval `n`.
    pub fn interval_key(&self, n: u64) -> String {
        self.space.interval(n)
    }

    /// The fence key of `participant`.
    pub fn fence_key(&self, participant: ParticipantId) -> String {
        self.space.fence(participant)
    }
}

/// Sends a flush that must get a reply.
pub async fn flush<S: Store>(store: &S, request: &FlushRequest) -> FlushReply {
    let report = Reporter::new("conformance", Arc::new(Recorder::new()));
    store
        .flush(request, &report)
        .await
        .unwrap_or_else(|e| panic!("{} failed a flush it should answer: {e}", store.name()))
}

/// Finds the store's interval, at least `min`, at a phase early enough to run a few steps in
/// it, waiting for the next interval when the phase is too late. Writes nothing.
pub async fn aim<S: Store>(store: &S, requests: &Requests, min: u64) -> Result<u64, Slipped> {
    let interval = Duration::from_millis(requests.interval_ms);
    for _ in 0..20 {
        // A flush expecting interval 0 is a wrong interval on any clock past interval 1: it
        // only asks for the time.
        let probe = requests.flush(ParticipantId::random(), 1, 1, 0);
        let reply = flush(store, &probe).await;
        assert_eq!(reply.outcome, Outcome::WrongInterval, "probe {reply:?}");
        if reply.interval >= min && reply.phase < interval / 3 {
            return Ok(reply.interval);
        }
        let intervals_ahead = u32::try_from(min.saturating_sub(reply.interval).max(1)).unwrap();
        let wait = (interval * intervals_ahead).saturating_sub(reply.phase) + interval / 20;
        sleep(wait).await;
    }
    Err(Slipped(format!(
        "could not find the start of interval {min} or later"
    )))
}

/// Checks a reply's outcome and interval; a wrong interval where none was expected means the
/// step slipped.
pub fn expect(reply: &FlushReply, outcome: Outcome, interval: u64) -> Result<(), Slipped> {
    if reply.outcome == Outcome::WrongInterval && outcome != Outcome::WrongInterval {
        return Err(Slipped(format!(
            "expected {outcome:?} in interval {interval}, the store was in {}",
            reply.interval
        )));
    }
    if reply.interval != interval {
        return Err(Slipped(format!(
            "expected interval {interval}, the store was in {}",
            reply.interval
        )));
    }
    assert_eq!(reply.outcome, outcome, "reply {reply:?}");
    Ok(())
}

/// Asserts that a refused flush changed nothing: the same keys and values, and no time to
/// live that went up (a rewrite would have reset it).
pub fn assert_unchanged(before: &Snapshot, after: &Snapshot, what: &str) {
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "{what} changed the key set"
    );
    for (key, was) in before {
        let now = &after[key];
        assert_eq!(was.value, now.value, "{what} changed {key}");
        assert!(
            was.fields == now.fields,
            "{what} changed the fields of {key}"
        );
        match (was.ttl, now.ttl) {
            (Some(was), Some(now)) => assert!(now <= was, "{what} refreshed the expiry of {key}"),
            (None, None) => {}
            (was, now) => panic!("{what} changed the expiry of {key}: {was:?} -> {now:?}"),
        }
    }
}

/// Asserts a key's value, and that it lives `lives` from its write at `written`: its time to
/// live is at most `lives`, and less only by the time since the write (a millisecond more for
/// rounding), however long the machine stalled in between.
pub async fn assert_key<I: Inspector>(
    inspector: &I,
    key: &str,
    value: &str,
    lives: Duration,
    written: Instant,
) {
    let state = inspector
        .key(key)
        .await
        .unwrap_or_else(|| panic!("{key} does not exist"));
    let min = lives.saturating_sub(written.elapsed() + Duration::from_millis(1));
    assert_eq!(state.value, value, "value of {key}");
    let ttl = state
        .ttl
        .unwrap_or_else(|| panic!("{key} never expires; it must"));
    assert!(
        ttl > min && ttl <= lives,
        "{key} lives {ttl:?}, expected in ({min:?}, {lives:?}]"
    );
}

async fn scenario<S: Store, I: Inspector>(
    store: &S,
    inspector: &I,
    interval: Duration,
) -> Result<(), Slipped> {
    let requests = Requests::fresh(interval);
    let base = requests.base();
    let fence_ttl = Duration::from_millis(FENCE_TTL_MS);
    let three = interval * 3;
    let one = ParticipantId::random();
    let two = ParticipantId::random();
    let early = ParticipantId::random();
    let late = ParticipantId::random();

    // Interval n: the first flush is applied; the interval and fence keys appear.
    let n = aim(store, &requests, 0).await?;
    assert!(inspector.snapshot(base).await.is_empty());
    let written = Instant::now();
    let reply = flush(store, &requests.flush(one, 1, 5, n)).await;
    expect(&reply, Outcome::Applied, n)?;
    assert_eq!(
        inspector.keys(base).await,
        [requests.interval_key(n), requests.fence_key(one)]
    );
    assert_key(inspector, &requests.interval_key(n), "5", three, written).await;
    assert_key(
        inspector,
        &requests.fence_key(one),
        &format!("1:{n}"),
        fence_ttl,
        written,
    )
    .await;

    // Refused in interval n: duplicate, fenced, two intervals off; none writes, nor refreshes
    // an expiry.
    let before = inspector.snapshot(base).await;
    let reply = flush(store, &requests.flush(one, 1, 5, n)).await;
    expect(&reply, Outcome::Duplicate, n)?;
    assert_unchanged(&before, &inspector.snapshot(base).await, "a duplicate");
    let reply = flush(store, &requests.flush(one, 2, 7, n)).await;
    expect(&reply, Outcome::Fenced, n)?;
    assert_unchanged(&before, &inspector.snapshot(base).await, "a fenced flush");
    let reply = flush(store, &requests.flush(two, 1, 7, n + 2)).await;
    expect(&reply, Outcome::WrongInterval, n)?;
    assert_unchanged(&before, &inspector.snapshot(base).await, "a wrong interval");
    let bad = requests.flush(two, 0, 7, n);
    let refused = store.flush(&bad, &reporter()).await;
    assert!(refused.is_err(), "sequence number 0 accepted: {refused:?}");
    assert_unchanged(&before, &inspector.snapshot(base).await, "a bad request");

    // Still in interval n: a copy aimed at n+1 (landing early) and one aimed at n-1 (landing
    // late) both write interval n's key, and nothing else but their fences.
    let written = Instant::now();
    let reply = flush(store, &requests.flush(early, 1, 10, n + 1)).await;
    expect(&reply, Outcome::Applied, n)?;
    let reply = flush(store, &requests.flush(late, 1, 100, n - 1)).await;
    expect(&reply, Outcome::Applied, n)?;
    assert_key(inspector, &requests.interval_key(n), "115", three, written).await;
    for participant in [early, late] {
        assert_key(
            inspector,
            &requests.fence_key(participant),
            &format!("1:{n}"),
            fence_ttl,
            written,
        )
        .await;
    }
    let mut keys = vec![
        requests.interval_key(n),
        requests.fence_key(one),
        requests.fence_key(early),
        requests.fence_key(late),
    ];
    keys.sort();
    assert_eq!(
        inspector.keys(base).await,
        keys,
        "only interval {n} was written"
    );

    // Interval n+1: the next flush, aimed at n and landing late, writes n+1's key and moves
    // the fence.
    let m = aim(store, &requests, n + 1).await?;
    if m != n + 1 {
        return Err(Slipped(format!("aimed at {}, got {m}", n + 1)));
    }
    let written = Instant::now();
    let reply = flush(store, &requests.flush(one, 2, 7, n)).await;
    expect(&reply, Outcome::Applied, m)?;
    keys.push(requests.interval_key(m));
    keys.sort();
    assert_eq!(inspector.keys(base).await, keys);
    assert_key(inspector, &requests.interval_key(m), "7", three, written).await;
    assert_key(
        inspector,
        &requests.fence_key(one),
        &format!("2:{m}"),
        fence_ttl,
        written,
    )
    .await;

    // Refused in interval m: stale, duplicates, fenced, and an overflowing amount; none
    // writes.
    let before = inspector.snapshot(base).await;
    let reply = flush(store, &requests.flush(one, 1, 5, m)).await;
    expect(&reply, Outcome::Stale, m)?;
    assert_unchanged(&before, &inspector.snapshot(base).await, "a stale flush");
    let reply = flush(store, &requests.flush(one, 2, 7, m)).await;
    expect(&reply, Outcome::Duplicate, m)?;
    assert_unchanged(&before, &inspector.snapshot(base).await, "a duplicate");
    let reply = flush(store, &requests.flush(early, 1, 10, n + 1)).await;
    expect(&reply, Outcome::Duplicate, m)?;
    assert_unchanged(&before, &inspector.snapshot(base).await, "a duplicate");
    let reply = flush(store, &requests.flush(one, 3, 1, m)).await;
    expect(&reply, Outcome::Fenced, m)?;
    assert_unchanged(&before, &inspector.snapshot(base).await, "a fenced flush");
    let overflow = store
        .flush(&requests.flush(two, 1, i64::MAX as u64, m), &reporter())
        .await;
    match overflow {
        Err(error) => assert_eq!(error.kind(), StoreErrorKind::Refused, "{error}"),
        Ok(reply) => {
            expect(&reply, Outcome::Applied, m)?;
            panic!("an amount that overflows the total was accepted: {reply:?}");
        }
    }
    assert_unchanged(&before, &inspector.snapshot(base).await, "an overflow");

    // A second participant adds to the same interval, with a flush aimed one interval ahead.
    let written = Instant::now();
    let reply = flush(store, &requests.flush(two, 1, 4, m + 1)).await;
    expect(&reply, Outcome::Applied, m)?;
    assert_key(inspector, &requests.interval_key(m), "11", three, written).await;
    assert_key(
        inspector,
        &requests.fence_key(two),
        &format!("1:{m}"),
        fence_ttl,
        written,
    )
    .await;
    Ok(())
}

fn reporter() -> Reporter {
    Reporter::new("conformance", Arc::new(Recorder::new()))
}
