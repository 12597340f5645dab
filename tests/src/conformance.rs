//! The one suite every store passes: the flush protocol's outcomes, key names, expiry and
//! fence, driven against the store's own clock.
//!
//! Each store is checked through an [`Inspector`] that reads its keys from outside. Flushes are
//! aimed at an interval by asking the store first (a flush that expects interval 0 comes back
//! as a wrong interval with the store's interval and phase, once the store's clock is past
//! interval 1), and the scenario starts over with fresh keys whenever a step slips over an
//! interval boundary on a busy machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::{
    Entry, FlushReply, FlushRequest, KeySpace, Outcome, ParticipantId, Store, StoreErrorKind,
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

/// Runs the whole suite against `store`, reading its keys through `inspector`: a counter,
/// then the [`family`] scenarios.
pub async fn check_store<S: Store, I: Inspector>(store: &S, inspector: &I) {
    check_counter(store, inspector).await;
    family::check_families(store, inspector).await;
}

/// Runs the counter's scenario against `store`.
pub async fn check_counter<S: Store, I: Inspector>(store: &S, inspector: &I) {
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

/// Asserts that a reply counts the flush in interval `n`, or in none.
fn assert_counted_in(reply: &FlushReply, n: Option<u64>, what: &str) {
    assert_eq!(reply.counted_in, n, "{what}: {reply:?}");
}

/// Sends requests no store accepts, each with one field out of the protocol's range, and
/// checks that each is refused with nothing written.
async fn refuses_bad_fields<S: Store, I: Inspector>(
    store: &S,
    inspector: &I,
    requests: &Requests,
    participant: ParticipantId,
    n: u64,
) {
    let base = requests.base();
    let before = inspector.snapshot(base).await;
    let good = requests.flush(participant, 5, 1, n);
    let bad = [
        ("seq 0", good.clone().with_seq(0)),
        ("seq 2^53", good.clone().with_seq(1 << 53)),
        (
            "amount above i64::MAX",
            good.clone().with_amount(i64::MAX as u64 + 1),
        ),
        ("interval 0", {
            let mut request = good.clone();
            request.interval_ms = 0;
            request
        }),
        ("interval above 2^53/3", {
            let mut request = good.clone();
            request.interval_ms = FlushRequest::MAX_INTERVAL_MS + 1;
            request
        }),
        ("expect 2^53", good.clone().with_expect(1 << 53)),
        ("fence life 0", good.clone().with_fence_ttl_ms(0)),
        ("fence life 2^53", good.clone().with_fence_ttl_ms(1 << 53)),
        ("no entry", good.clone().with_entries(Vec::new())),
        (
            "a counter's entry with a key",
            good.clone().with_entries(vec![Entry::new("k", 1)]),
        ),
        (
            "a counter with two entries",
            good.clone()
                .with_entries(vec![Entry::new("", 1), Entry::new("", 1)]),
        ),
    ];
    let report = Reporter::new("conformance", Arc::new(Recorder::new()));
    for (what, request) in bad {
        match store.flush(&request, &report).await {
            Err(error) => assert_eq!(error.kind(), StoreErrorKind::Refused, "{what}: {error}"),
            Ok(reply) => panic!("{} accepted a flush with {what}: {reply:?}", store.name()),
        }
        assert_unchanged(&before, &inspector.snapshot(base).await, what);
    }
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
    assert_eq!(reply.previous_total(), None, "no interval before the first");
    assert_counted_in(&reply, Some(n), "an applied flush");
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

    // Refused in interval n: duplicate, fenced, two intervals off either way, bad fields;
    // none writes.
    let before = inspector.snapshot(base).await;
    let reply = flush(store, &requests.flush(one, 1, 5, n)).await;
    expect(&reply, Outcome::Duplicate, n)?;
    assert_counted_in(&reply, Some(n), "a duplicate");
    assert_unchanged(&before, &inspector.snapshot(base).await, "a duplicate");
    let reply = flush(store, &requests.flush(one, 2, 7, n)).await;
    expect(&reply, Outcome::Fenced, n)?;
    assert_counted_in(&reply, None, "a fenced flush");
    assert_unchanged(&before, &inspector.snapshot(base).await, "a fenced flush");
    for off in [n + 2, n - 2, n + 5] {
        let reply = flush(store, &requests.flush(two, 1, 7, off)).await;
        expect(&reply, Outcome::WrongInterval, n)?;
        assert_counted_in(&reply, None, "a wrong interval");
        assert_unchanged(&before, &inspector.snapshot(base).await, "a wrong interval");
    }
    refuses_bad_fields(store, inspector, &requests, two, n).await;

    // Still in interval n: a copy aimed at n+1 (landing early) and one aimed at n-1 (landing
    // late) are both applied in n, where the server's clock is.
    let written = Instant::now();
    let reply = flush(store, &requests.flush(early, 1, 10, n + 1)).await;
    expect(&reply, Outcome::Applied, n)?;
    assert_counted_in(&reply, Some(n), "a flush landing early");
    let reply = flush(store, &requests.flush(late, 1, 100, n - 1)).await;
    expect(&reply, Outcome::Applied, n)?;
    assert_counted_in(&reply, Some(n), "a flush landing late");
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

    // Interval n+1: the next flush, aimed at n and landing late, is applied in n+1 and brings
    // back interval n's total.
    let m = aim(store, &requests, n + 1).await?;
    if m != n + 1 {
        return Err(Slipped(format!("aimed at {}, got {m}", n + 1)));
    }
    let written = Instant::now();
    let reply = flush(store, &requests.flush(one, 2, 7, n)).await;
    expect(&reply, Outcome::Applied, m)?;
    assert_counted_in(&reply, Some(m), "a flush landing late");
    assert_eq!(reply.previous_total(), Some(115), "interval {n}'s total");
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

    // Refused in interval m: stale, duplicates (each saying where it counted), fenced, and an
    // overflowing amount.
    let before = inspector.snapshot(base).await;
    let reply = flush(store, &requests.flush(one, 1, 5, m)).await;
    expect(&reply, Outcome::Stale, m)?;
    assert_counted_in(&reply, None, "a stale flush");
    assert_unchanged(&before, &inspector.snapshot(base).await, "a stale flush");
    let reply = flush(store, &requests.flush(one, 2, 7, m)).await;
    expect(&reply, Outcome::Duplicate, m)?;
    assert_eq!(reply.previous_total(), Some(115));
    assert_counted_in(&reply, Some(m), "a duplicate");
    assert_unchanged(&before, &inspector.snapshot(base).await, "a duplicate");
    let reply = flush(store, &requests.flush(early, 1, 10, n + 1)).await;
    expect(&reply, Outcome::Duplicate, m)?;
    assert_counted_in(
        &reply,
        Some(n),
        "a duplicate of a flush applied an interval before",
    );
    assert_unchanged(&before, &inspector.snapshot(base).await, "a duplicate");
    let reply = flush(store, &requests.flush(one, 3, 1, m)).await;
    expect(&reply, Outcome::Fenced, m)?;
    assert_eq!(reply.previous_total(), Some(115));
    assert_unchanged(&before, &inspector.snapshot(base).await, "a fenced flush");
    let report = Reporter::new("conformance", Arc::new(Recorder::new()));
    let overflow = store
        .flush(&requests.flush(two, 1, i64::MAX as u64, m), &report)
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
    assert_counted_in(&reply, Some(m), "a flush landing early");
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
