//! The family half of the suite's key checks: families of 1, 100 and 10,000 keys spread over
//! partitions, each partition flushed as one batch into one hash per interval, its fields,
//! expiry and fences read from the store key by key. What the replies show (each key's
//! previous total, refusals of batches out of range) is for the public checks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::keys::partition_of;
use comcount_core::{
    Entry, FlushReply, FlushRequest, KeySpace, Outcome, ParticipantId, Store, StoreErrorKind,
};
use redis::aio::ConnectionLike;

use super::{
    ATTEMPTS, FENCE_TTL_MS, Requests, Slipped, aim, assert_key, assert_unchanged, expect, flush,
};
use crate::cluster::Cluster;
use crate::inspect::Inspector;
use crate::settings;

/// The families every store is checked with: how many keys, over how many partitions. Ten
/// thousand keys need at least ten partitions of [`FlushRequest::MAX_ENTRIES`].
pub const FAMILIES: [(usize, u32); 3] = [(1, 3), (100, 4), (10_000, 16)];

/// Builds the flushes of one family, under keys of its own.
pub struct FamilyRequests {
    /// The family's prefix.
    pub prefix: String,
    /// How many partitions its keys are spread over.
    pub partitions: u32,
    /// The interval in milliseconds.
    pub interval_ms: u64,
}

/// The family's name in its keys.
const NAME: &str = "family";

impl FamilyRequests {
    /// A family of `partitions` partitions under a fresh prefix.
    pub fn fresh(interval: Duration, partitions: u32) -> Self {
        Self {
            prefix: settings::unique_prefix("fam"),
            partitions,
            interval_ms: u64::try_from(interval.as_millis()).unwrap(),
        }
    }

    /// The keys of partition `partition`.
    pub fn space(&self, partition: u32) -> KeySpace {
        KeySpace::partition(&self.prefix, NAME, partition)
    }

    /// The partition `key` belongs to.
    pub fn partition_of(&self, key: &str) -> u32 {
        partition_of(key, self.partitions)
    }

    /// One flush of partition `partition`, whatever partition its keys belong to.
    pub fn flush(
        &self,
        partition: u32,
        participant: ParticipantId,
        seq: u64,
        entries: &[(&str, u64)],
        expect: u64,
    ) -> FlushRequest {
        FlushRequest::new(self.space(partition), participant, self.interval_ms)
            .with_seq(seq)
            .with_entries(entries.iter().map(|(k, a)| Entry::new(*k, *a)).collect())
            .with_expect(expect)
            .with_fence_ttl_ms(FENCE_TTL_MS)
    }

    /// One flush per partition that holds some of `entries`, in the order of the partitions,
    /// each with its keys in the order of `entries`.
    pub fn flushes(
        &self,
        participant: ParticipantId,
        seq: u64,
        entries: &[(String, u64)],
        expect: u64,
    ) -> Vec<FlushRequest> {
        let mut by_partition: BTreeMap<u32, Vec<Entry>> = BTreeMap::new();
        for (key, amount) in entries {
            by_partition
                .entry(self.partition_of(key))
                .or_default()
                .push(Entry::new(key.as_str(), *amount));
        }
        by_partition
            .into_iter()
            .map(|(partition, entries)| {
                FlushRequest::new(self.space(partition), participant, self.interval_ms)
                    .with_seq(seq)
                    .with_entries(entries)
                    .with_expect(expect)
                    .with_fence_ttl_ms(FENCE_TTL_MS)
            })
            .collect()
    }
}

/// The interval a family of `keys` keys is checked at: the tests' interval, or longer for a
/// family whose flushes take a good part of a short one to send and check (ten thousand keys
/// take tens of milliseconds on a busy two-core machine, in a debug build).
pub fn interval_for(keys: usize) -> Duration {
    let floor = Duration::from_millis(u64::try_from(keys / 10).unwrap());
    settings::interval().max(floor)
}

/// Runs the family scenarios against `store`: each of [`FAMILIES`].
pub async fn check_family_keys<S: Store, I: Inspector>(store: &S, inspector: &I) {
    for (keys, partitions) in FAMILIES {
        let interval = interval_for(keys);
        let mut attempt = 1;
        loop {
            match scenario(store, inspector, interval, keys, partitions).await {
                Ok(()) => break,
                Err(Slipped(why)) if attempt < ATTEMPTS => eprintln!(
                    "family of {keys}, attempt {attempt} slipped over an interval boundary \
                     ({why}); again"
                ),
                Err(Slipped(why)) => panic!(
                    "every attempt with a family of {keys} keys slipped over an interval \
                     boundary ({why}): the machine is too busy for TEST_INTERVAL={}ms",
                    interval.as_millis()
                ),
            }
            attempt += 1;
        }
    }
}

/// Sends flushes side by side, as the partitions of a family do; each must get a reply.
pub async fn flush_all<S: Store>(store: &S, requests: &[FlushRequest]) -> Vec<FlushReply> {
    futures::future::join_all(requests.iter().map(|request| flush(store, request))).await
}

/// The totals of `totals` that belong to `partition`, as a hash holds them.
fn fields(
    family: &FamilyRequests,
    partition: &KeySpace,
    totals: &BTreeMap<String, u64>,
) -> BTreeMap<String, String> {
    totals
        .iter()
        .filter(|(key, _)| family.space(family.partition_of(key)) == *partition)
        .map(|(key, total)| (key.clone(), total.to_string()))
        .collect()
}

/// Asserts a hash's fields, and that it lives `lives` from its write at `written` (see
/// [`assert_key`]).
async fn assert_hash<I: Inspector>(
    inspector: &I,
    key: &str,
    fields: &BTreeMap<String, String>,
    lives: Duration,
    written: Instant,
) {
    let state = inspector
        .key(key)
        .await
        .unwrap_or_else(|| panic!("{key} does not exist"));
    let min = lives.saturating_sub(written.elapsed() + Duration::from_millis(1));
    assert_eq!(state.value, "", "{key} is not a hash");
    if state.fields != *fields {
        let wrong: Vec<_> = fields
            .iter()
            .filter(|(k, v)| state.fields.get(*k) != Some(v))
            .take(5)
            .collect();
        panic!(
            "{key} holds {} fields, expected {}; first differences (expected): {wrong:?}",
            state.fields.len(),
            fields.len()
        );
    }
    let ttl = state
        .ttl
        .unwrap_or_else(|| panic!("{key} never expires; it must"));
    assert!(
        ttl > min && ttl <= lives,
        "{key} lives {ttl:?}, expected in ({min:?}, {lives:?}]"
    );
}

/// Checks that the flushes of a family carry each of its keys once, in batches no larger than
/// a flush may be, each batch declaring the five keys of its own partition.
fn assert_batches(family: &FamilyRequests, requests: &[FlushRequest], entries: &[(String, u64)]) {
    let mut seen = BTreeSet::new();
    for request in requests {
        assert!(request.check().is_ok(), "{request:?}");
        assert!(request.entries.len() <= FlushRequest::MAX_ENTRIES);
        let space = &request.space;
        let e = request.expect;
        assert_eq!(
            request.keys(),
            [
                space.interval(e - 2),
                space.interval(e - 1),
                space.interval(e),
                space.interval(e + 1),
                space.fence(request.participant),
            ],
            "a flush declares the five keys of its partition"
        );
        for entry in &request.entries {
            assert_eq!(family.space(family.partition_of(&entry.key)), *space);
            assert!(seen.insert(entry.key.to_string()), "{} twice", entry.key);
        }
    }
    assert_eq!(seen.len(), entries.len());
    if entries.len() >= 10_000 {
        assert!(requests.len() >= 10, "{} partitions", requests.len());
    }
}

fn report() -> Reporter {
    Reporter::new("conformance", Arc::new(Recorder::new()))
}

/// Sends a flush the store must refuse; checks that it is refused as `Refused`, or returns
/// `Slipped` when it landed outside the interval `n` it was meant for.
async fn assert_refused<S: Store>(
    store: &S,
    request: &FlushRequest,
    n: u64,
    what: &str,
) -> Result<(), Slipped> {
    match store.flush(request, &report()).await {
        Err(error) => {
            assert_eq!(error.kind(), StoreErrorKind::Refused, "{what}: {error}");
            Ok(())
        }
        Ok(reply) => {
            expect(&reply, Outcome::Applied, n)?;
            panic!("{} accepted {what}: {reply:?}", store.name());
        }
    }
}

async fn scenario<S: Store, I: Inspector>(
    store: &S,
    inspector: &I,
    interval: Duration,
    size: usize,
    partitions: u32,
) -> Result<(), Slipped> {
    let family = FamilyRequests::fresh(interval, partitions);
    let probe = Requests::fresh(interval);
    let fence_ttl = Duration::from_millis(FENCE_TTL_MS);
    let three = interval * 3;
    let (one, two, other) = (
        ParticipantId::random(),
        ParticipantId::random(),
        ParticipantId::random(),
    );
    let keys: Vec<String> = (0..size).map(|i| format!("key-{i}")).collect();
    let amounts = |f: fn(u64) -> u64| -> Vec<(String, u64)> {
        (0..).zip(&keys).map(|(i, k)| (k.clone(), f(i))).collect()
    };
    // Zero amounts among them: a key flushed with 0 still gets a total.
    let (a, b) = (amounts(|i| i % 5 + 1), amounts(|i| i % 3));

    // Interval n: every partition of two participants' flushes is applied, one aimed at n and
    // one landing early; then a duplicate and a fenced flush, neither of which writes.
    let n = aim(store, &probe, 0).await?;
    let first = family.flushes(one, 1, &a, n);
    let second = family.flushes(two, 1, &b, n + 1);
    assert_batches(&family, &first, &a);
    assert_batches(&family, &second, &b);
    let written = Instant::now();
    for reply in flush_all(store, &first).await {
        expect(&reply, Outcome::Applied, n)?;
    }
    for reply in flush_all(store, &second).await {
        expect(&reply, Outcome::Applied, n)?;
    }
    let partition = &first[0];
    let base = partition.space.base();
    let before = inspector.snapshot(base).await;
    let reply = flush(store, partition).await;
    expect(&reply, Outcome::Duplicate, n)?;
    let reply = flush(store, &partition.clone().with_seq(2)).await;
    expect(&reply, Outcome::Fenced, n)?;
    assert_unchanged(&before, &inspector.snapshot(base).await, "a refused batch");

    // What interval n holds: each key's two amounts added, in one hash per partition that
    // lives three intervals, and a fence per participant and partition. Nothing else: each
    // flush wrote only keys it declared.
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for (key, amount) in a.iter().chain(&b) {
        *totals.entry(key.clone()).or_default() += amount;
    }
    for (request, other_request) in first.iter().zip(&second) {
        let space = &request.space;
        assert_eq!(other_request.space, *space);
        let mut expected = vec![space.interval(n), space.fence(one), space.fence(two)];
        expected.sort();
        assert_eq!(inspector.keys(space.base()).await, expected);
        for key in &expected {
            assert!(
                request.keys().contains(key) || other_request.keys().contains(key),
                "{key} was written without being declared"
            );
        }
        let fields = fields(&family, space, &totals);
        assert_hash(inspector, &space.interval(n), &fields, three, written).await;
        for participant in [one, two] {
            let fence = format!("1:{n}");
            assert_key(
                inspector,
                &space.fence(participant),
                &fence,
                fence_ttl,
                written,
            )
            .await;
        }
    }

    // Interval n+1: the next flushes, aimed at n and landing late with one key more, write
    // interval n+1's hashes.
    let m = aim(store, &probe, n + 1).await?;
    if m != n + 1 {
        return Err(Slipped(format!("aimed at {}, got {m}", n + 1)));
    }
    let mut c = amounts(|i| i % 4 + 1);
    c.insert(0, ("new-key".to_owned(), 1));
    let third = family.flushes(one, 2, &c, n);
    assert_batches(&family, &third, &c);
    let written = Instant::now();
    for reply in flush_all(store, &third).await {
        expect(&reply, Outcome::Applied, m)?;
    }

    // Refused in m, on the first partition: stale, and bad batches (a key over the longest,
    // no entry); none writes, nor refreshes an expiry.
    let partition = third
        .iter()
        .find(|r| r.space == first[0].space)
        .expect("the first partition is flushed again");
    let base = partition.space.base();
    let before = inspector.snapshot(base).await;
    let reply = flush(store, &first[0]).await;
    expect(&reply, Outcome::Stale, m)?;
    let number = partition_number(&family, &partition.space);
    let key = &partition.entries[0].key;
    let long = "k".repeat(FlushRequest::MAX_KEY_LEN + 1);
    let too_long = family.flush(number, other, 1, &[(&**key, 1), (&long, 1)], m);
    assert_refused(store, &too_long, m, "a batch with a key over the longest").await?;
    let empty = family.flush(number, other, 1, &[], m);
    assert_refused(store, &empty, m, "a batch with no entry").await?;
    assert_unchanged(&before, &inspector.snapshot(base).await, "a refused batch");

    // Interval m holds only the last flushes' amounts, and lives three intervals from them.
    let totals: BTreeMap<String, u64> = c.into_iter().collect();
    for request in &third {
        let space = &request.space;
        let fields = fields(&family, space, &totals);
        assert_hash(inspector, &space.interval(m), &fields, three, written).await;
        assert_key(
            inspector,
            &space.fence(one),
            &format!("2:{m}"),
            fence_ttl,
            written,
        )
        .await;
    }
    Ok(())
}

/// The number of the partition whose keys are `space`.
fn partition_number(family: &FamilyRequests, space: &KeySpace) -> u32 {
    (0..family.partitions)
        .find(|p| family.space(*p) == *space)
        .expect("a partition of the family")
}

/// Checks on a cluster that a family's partitions spread over its slots: the five keys of each
/// partition's flush share one slot, its entries land on the primary that owns that slot, and
/// the partitions of one family reach more than one primary.
pub async fn check_partitions_spread<S: Store, C: ConnectionLike + Clone + Send + Sync>(
    store: &S,
    connection: &C,
    cluster: &Cluster,
) {
    let interval = settings::interval();
    let family = FamilyRequests::fresh(interval, 16);
    let keys: Vec<(String, u64)> = (0..200).map(|i| (format!("key-{i}"), 1)).collect();
    let probe = Requests::fresh(interval);
    let n = aim(store, &probe, 0)
        .await
        .unwrap_or_else(|Slipped(why)| panic!("{why}"));
    let requests = family.flushes(ParticipantId::random(), 1, &keys, n);
    assert_eq!(requests.len(), 16, "200 keys reach every partition");
    let mut slots = BTreeSet::new();
    let mut primaries = BTreeSet::new();
    for request in &requests {
        // Aimed again where a copy slipped into another interval than it was aimed at.
        let mut request = request.clone();
        let mut reply = flush(store, &request).await;
        for _ in 0..5 {
            if reply.outcome != Outcome::WrongInterval {
                break;
            }
            request = request.with_expect(reply.interval);
            reply = flush(store, &request).await;
        }
        assert_eq!(reply.outcome, Outcome::Applied, "{reply:?}");
        let mut connection = connection.clone();
        let mut partition_slots = BTreeSet::new();
        for key in request.keys() {
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&key)
                .query_async(&mut connection)
                .await
                .unwrap();
            partition_slots.insert(slot);
        }
        assert_eq!(
            partition_slots.len(),
            1,
            "the keys of {:?} are on several slots",
            request.space
        );
        slots.extend(partition_slots);
        let written = request.space.interval(reply.interval);
        let primary = cluster.primary_of(&written);
        let mut direct = redis::Client::open(format!("redis://127.0.0.1:{primary}/"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let fields: u64 = redis::cmd("HLEN")
            .arg(&written)
            .query_async(&mut direct)
            .await
            .unwrap();
        assert!(fields > 0, "{written} is not on the primary of its slot");
        primaries.insert(primary);
    }
    assert!(slots.len() > 1, "every partition on slot {slots:?}");
    assert!(
        primaries.len() > 1,
        "every partition on the primary {primaries:?}"
    );
}
