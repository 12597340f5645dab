//! The public reader, `comcount_inspect::Reader`, on counters and families that flushed to a
//! server: the totals per interval, the participants' fences and a family's top keys, checked
//! against what the participants counted and what the keys hold.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use comcount_core::clock::TokioTimer;
use comcount_core::keys::partition_of;
use comcount_core::{Counter, Family, KeySpace, ParticipantId, Store};
use comcount_inspect::{CounterReport, Reader};
use comcount_redis_rs::RedisStore;
use comcount_tests::connect;
use comcount_tests::settings;
use comcount_tests::shared;

/// How long a participant may take to send what it counted.
const DRAIN: Duration = Duration::from_secs(10);

/// Counts `amount` on the counter `prefix{name}` as participant `id`, and sends it: one flush.
async fn count(store: impl Store, prefix: &str, name: &str, id: u64, amount: u64) {
    let (counter, worker) = Counter::builder(name, settings::interval())
        .prefix(prefix)
        .participant(ParticipantId::from_u64(id))
        .build(store, TokioTimer::new())
        .unwrap();
    tokio::spawn(worker);
    counter.increment(amount);
    assert_eq!(counter.drain(DRAIN).await, 0, "participant {id} sent all");
}

/// Counts each `(key, amount)` in the family `prefix{name@p}` of `partitions` as participant
/// `id`, and sends them: one flush per partition.
async fn count_keys(
    store: impl Store,
    (prefix, name, partitions): (&str, &str, u32),
    id: u64,
    amounts: &[(&str, u64)],
) {
    let (family, worker) = Family::builder(name, settings::interval())
        .prefix(prefix)
        .partitions(partitions)
        .participant(ParticipantId::from_u64(id))
        .build(store, TokioTimer::new())
        .unwrap();
    tokio::spawn(worker);
    for (key, amount) in amounts {
        family.increment(key, *amount);
    }
    assert_eq!(family.drain(DRAIN).await, 0, "participant {id} sent all");
}

/// Checks a counter's report against what each participant (id, amount) flushed, once each:
/// the intervals are the newest, and each total is the sum of the amounts of the participants
/// whose fence is in that interval. An interval more than two back may have expired.
fn check_counter(report: &CounterReport, flushed: &[(u64, u64)], intervals: u64) {
    let now = report.now.interval;
    let numbers: Vec<u64> = report.intervals.iter().map(|i| i.interval).collect();
    let expected: Vec<u64> = (0..intervals).map(|back| now - back).collect();
    assert_eq!(numbers, expected, "{report:#?}");
    for interval in &report.intervals {
        assert_eq!(interval.open, interval.interval == now, "{report:#?}");
    }

    let ids: Vec<ParticipantId> = report.fences.iter().map(|f| f.participant).collect();
    let mut expected_ids: Vec<ParticipantId> = flushed
        .iter()
        .map(|(id, _)| ParticipantId::from_u64(*id))
        .collect();
    expected_ids.sort();
    assert_eq!(ids, expected_ids, "{report:#?}");
    let mut landed: BTreeMap<u64, u64> = BTreeMap::new();
    // In the order of the ids, as documented.
    for (fence, (_, amount)) in report.fences.iter().zip(sorted(flushed)) {
        assert_eq!(fence.partition, None);
        assert!(fence.seq > 0, "{fence:?}");
        let ttl = fence.ttl.expect("a fence expires");
        let life = Duration::from_secs(600).max(settings::interval() * 3);
        assert!(ttl > Duration::ZERO && ttl <= life, "{fence:?}");
        assert!(fence.interval <= now, "{fence:?}");
        *landed.entry(fence.interval).or_default() += amount;
    }
    for interval in &report.intervals {
        let expected = landed.get(&interval.interval).copied();
        if interval.interval + 2 >= now {
            assert_eq!(interval.total, expected, "{report:#?}");
        } else {
            assert!(
                interval.total.is_none() || interval.total == expected,
                "{report:#?}"
            );
        }
    }
}

fn sorted(flushed: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut flushed = flushed.to_vec();
    flushed.sort();
    flushed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counters_totals_per_interval_and_fences_are_what_its_participants_flushed() {
    let url = shared::standalone_url();
    let prefix = settings::unique_prefix("inspect");
    let store = RedisStore::connect(&url).await.unwrap();
    let mut reader = Reader::new(
        connect::multiplexed(&url).await,
        &prefix,
        settings::interval(),
    )
    .unwrap()
    .intervals(4)
    .unwrap();

    // Nothing yet: every interval empty, no fence.
    let empty = reader.counter("requests").await.unwrap();
    assert!(
        empty.intervals.iter().all(|i| i.total.is_none()),
        "{empty:#?}"
    );
    assert!(empty.fences.is_empty(), "{empty:#?}");

    count(store.clone(), &prefix, "requests", 0xa1, 5).await;
    let first = reader.counter("requests").await.unwrap();
    check_counter(&first, &[(0xa1, 5)], 4);
    assert_eq!(first.name, "requests");
    assert_eq!(first.prefix, prefix);

    // Two more, in a later interval by the server's clock.
    let flushed_in = first.fences[0].interval;
    while reader.server_time().await.unwrap().interval == flushed_in {
        tokio::time::sleep(settings::interval() / 10).await;
    }
    tokio::join!(
        count(store.clone(), &prefix, "requests", 0xb2, 7),
        count(store.clone(), &prefix, "requests", 0x03, 11),
    );
    let second = reader.counter("requests").await.unwrap();
    check_counter(&second, &[(0xa1, 5), (0xb2, 7), (0x03, 11)], 4);
    let intervals: BTreeSet<u64> = second.fences.iter().map(|f| f.interval).collect();
    assert!(intervals.len() >= 2, "{second:#?}");

    // The totals are the keys' own, read directly (those that cannot expire meanwhile).
    let mut direct = connect::multiplexed(&url).await;
    let space = KeySpace::counter(&prefix, "requests");
    let readable = second.intervals.iter().take(2);
    for interval in readable {
        let held: Option<u64> = redis::cmd("GET")
            .arg(space.interval(interval.interval))
            .query_async(&mut direct)
            .await
            .unwrap();
        assert_eq!(held, interval.total, "{second:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_familys_keys_top_keys_and_fences_are_what_its_participants_flushed() {
    let url = shared::standalone_url();
    let prefix = settings::unique_prefix("inspect");
    let family = (prefix.as_str(), "tenants", 4);
    let store = RedisStore::connect(&url).await.unwrap();
    let first: &[(&str, u64)] = &[("a", 1), ("b", 5), ("c", 3), ("d", 10)];
    let second: &[(&str, u64)] = &[("b", 2), ("d", 1), ("e", 4), ("f", 3)];
    // Side by side, so that every flush lands within the intervals read.
    tokio::join!(
        count_keys(store.clone(), family, 1, first),
        count_keys(store.clone(), family, 2, second),
    );
    // Totals d 11, b 7, e 4, c 3, f 3, a 1: c before f, of equal totals, by name.
    let ranked = [("d", 11), ("b", 7), ("e", 4), ("c", 3), ("f", 3), ("a", 1)];

    let mut reader = Reader::new(
        connect::multiplexed(&url).await,
        &prefix,
        settings::interval(),
    )
    .unwrap()
    .intervals(4)
    .unwrap();
    let report = reader.family_top("tenants", 4, 4).await.unwrap();
    assert_eq!(report.keys, 6, "{report:#?}");
    let top: Vec<(&str, u128)> = report.top.iter().map(|k| (k.key.as_str(), k.sum)).collect();
    assert_eq!(top, ranked[..4], "{report:#?}");
    for key in &report.top {
        assert_eq!(key.partition, partition_of(&key.key, 4));
        let summed: u64 = key.intervals.iter().filter_map(|i| i.total).sum();
        assert_eq!(u128::from(summed), key.sum);
    }
    let counted: u128 = report.intervals.iter().map(|i| i.total).sum();
    assert_eq!(counted, 29, "{report:#?}");
    assert_eq!(report.intervals.len(), 4);
    assert!(report.intervals[0].open && !report.intervals[1].open);

    // Each participant has a fence in each partition it sent a key of, and no other.
    let fenced: BTreeSet<(u64, u32)> = report
        .fences
        .iter()
        .map(|f| {
            (
                f.participant.as_u64(),
                f.partition.expect("a family's fence"),
            )
        })
        .collect();
    let sent: BTreeSet<(u64, u32)> = [(1, first), (2, second)]
        .into_iter()
        .flat_map(|(id, keys)| keys.iter().map(move |(key, _)| (id, partition_of(key, 4))))
        .collect();
    assert_eq!(fenced, sent, "{report:#?}");

    // Every key, when asked for more than there are.
    let all = reader.family_top("tenants", 4, 100).await.unwrap();
    let keys: Vec<&str> = all.top.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(keys, ranked.map(|(key, _)| key), "{all:#?}");

    // One key: its totals and its partition's fences.
    let b = reader.family_key("tenants", 4, "b").await.unwrap();
    assert_eq!(b.partition, partition_of("b", 4));
    let total: u64 = b.intervals.iter().filter_map(|i| i.total).sum();
    assert_eq!(total, 7, "{b:#?}");
    let fenced_b: BTreeSet<u64> = b.fences.iter().map(|f| f.participant.as_u64()).collect();
    assert_eq!(fenced_b, BTreeSet::from([1, 2]), "{b:#?}");
    assert!(b.fences.iter().all(|f| f.partition == Some(b.partition)));
    // A key nobody counted has no total.
    let none = reader.family_key("tenants", 4, "nobody").await.unwrap();
    assert!(
        none.intervals.iter().all(|i| i.total.is_none()),
        "{none:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_fences_are_found_on_each_slots_node() {
    let cluster = shared::cluster();
    let prefix = settings::unique_prefix("inspect");
    let store = RedisStore::connect_cluster(cluster.urls()).await.unwrap();
    count(store.clone(), &prefix, "requests", 0xc1, 9).await;
    let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let amounts: Vec<(&str, u64)> = keys.iter().map(|k| (k.as_str(), 1)).collect();
    count_keys(store.clone(), (&prefix, "tenants", 8), 0xc2, &amounts).await;

    let connection = comcount_inspect::connect_cluster(
        &cluster
            .urls()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    let mut reader = Reader::new(connection, &prefix, settings::interval()).unwrap();
    let counter = reader.counter("requests").await.unwrap();
    check_counter(&counter, &[(0xc1, 9)], 3);

    let family = reader.family_top("tenants", 8, 3).await.unwrap();
    assert_eq!(family.keys, 16, "{family:#?}");
    let partitions: BTreeSet<u32> = keys.iter().map(|k| partition_of(k, 8)).collect();
    let fenced: BTreeSet<u32> = family.fences.iter().filter_map(|f| f.partition).collect();
    assert_eq!(fenced, partitions, "{family:#?}");
    // The partitions are spread over more than one node, so more than one was asked.
    let nodes: BTreeSet<u16> = partitions
        .iter()
        .map(|p| cluster.primary_of(KeySpace::partition(&prefix, "tenants", *p).base()))
        .collect();
    assert!(nodes.len() > 1, "{nodes:?}");
}
