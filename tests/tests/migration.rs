//! A counter's slot held open for several intervals while a fleet of redis-rs and fred cluster
//! clients counts through it: importing on its new owner and migrating on its old, its keys
//! moved one at a time with `MIGRATE` meanwhile, then given to the new owner.
//!
//! While the slot is open, Redis runs no flush: every flush declares the key of the interval
//! after the one it aims at, which (but for a copy aimed late at an interval's edge) no write
//! has made yet, and a node answers a script whose keys it does not all hold with `TRYAGAIN`
//! (the old owner when it holds some of them, the new one, asked after an `ASK`, whenever it
//! lacks any; fred 10, which sends the command after an `ASK` to the old owner again, runs out
//! of redirections instead). Every unit counted must still reach Redis once the slot is given:
//! none lost, none left unsettled, none counted twice.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use comcount_tests::cluster::Cluster;
use comcount_tests::cluster_admin::{move_slot_held, slot_of, where_keys_are};
use comcount_tests::faulty_fleet::{FaultyFleet, run};
use comcount_tests::invariants::{Mark, Report, Writes};
use comcount_tests::recording::FlushEnd;

/// How many intervals the slot is held open.
const HELD: u32 = 5;

#[test]
fn slot_held_open_for_five_intervals() {
    run(async {
        let cluster = Cluster::start();
        let fleet = FaultyFleet::new("migration").on_cluster(&cluster).await;
        let interval = fleet.interval();
        let mark = fleet.mark();
        let any = cluster.ports()[0];
        let slot = slot_of(any, &fleet.interval_key(0)).await;
        let migration = move_slot_held(any, slot, interval / 4, interval * HELD).await;
        let open = migration.closing - migration.opened;
        eprintln!(
            "slot {slot} open for {open:?} ({HELD} intervals of {interval:?} asked), {} keys \
             moved from {} to {}",
            migration.moved, migration.source.port, migration.target.port
        );
        assert!(
            open >= interval * HELD,
            "the slot was open for {open:?} only"
        );
        // The fences of the six participants at least.
        assert!(
            migration.moved >= 6,
            "only {} keys moved: the slot was nearly empty",
            migration.moved
        );

        fleet.assert_recovers(migration.done, interval * 2).await;
        fleet.settle(interval * 4 + Duration::from_secs(5)).await;
        let report = fleet.finish(Writes::Kept).await;

        let held = where_keys_are(&migration.primaries, slot).await;
        assert!(
            held.values().all(|port| *port == migration.target.port),
            "keys left behind: {held:?}"
        );

        let figures = Figures::of(&report, &mark, migration.opened, migration.closing);
        figures.print();
        for store in ["redis-rs", "fred"] {
            let sent = figures.sent_while_open.get(store).copied().unwrap_or(0);
            assert!(
                sent > 0,
                "no {store} participant sent a copy while the slot was open: {figures:#?}"
            );
        }
        assert!(
            figures.unsettled.values().all(|units| *units == 0),
            "units left unsettled: {figures:#?}"
        );
        assert!(
            figures.dropped.values().all(|units| *units == 0),
            "units dropped: {figures:#?}"
        );
        assert_eq!(figures.lost, 0, "units lost: {figures:#?}");
        assert_eq!(figures.overcount, 0, "units counted twice: {figures:#?}");
    });
}

/// What the fleet went through, by client (its store's name) where a client can be told.
#[derive(Debug)]
struct Figures {
    /// Copies sent while the slot was open.
    sent_while_open: BTreeMap<String, usize>,
    /// Of those, the copies counted before the slot was given.
    counted_while_open: BTreeMap<String, usize>,
    /// The errors the store returned, by client, kind and the server's code.
    errors: BTreeMap<(String, String), usize>,
    /// The longest a flush took from its first copy to the reply that counted it.
    longest_flush: BTreeMap<String, Duration>,
    /// The warnings the participants gave after the fleet started, by client and message.
    warnings: BTreeMap<(String, &'static str), usize>,
    /// Units reported unsettled after the fleet started (`flush failed`).
    unsettled: BTreeMap<String, u64>,
    /// Units reported dropped after the fleet started.
    dropped: BTreeMap<String, u64>,
    /// Units the participants sent that Redis was never read to hold.
    lost: u64,
    /// Units Redis was read to hold beyond what the participants sent.
    overcount: u64,
}

impl Figures {
    fn of(report: &Report, mark: &Mark, opened: Instant, closing: Instant) -> Self {
        let records = report.records();
        let stores: HashMap<usize, &str> = records
            .iter()
            .map(|r| (r.member, r.store.as_str()))
            .collect();
        let mut figures = Figures {
            sent_while_open: BTreeMap::new(),
            counted_while_open: BTreeMap::new(),
            errors: BTreeMap::new(),
            longest_flush: BTreeMap::new(),
            warnings: BTreeMap::new(),
            unsettled: BTreeMap::new(),
            dropped: BTreeMap::new(),
            lost: 0,
            overcount: 0,
        };
        let mut first_sent: HashMap<(usize, u64), Instant> = HashMap::new();
        for record in records {
            let first = first_sent
                .entry((record.member, record.request.seq))
                .or_insert(record.sent);
            *first = (*first).min(record.sent);
        }
        for record in records {
            let store = record.store.clone();
            if (opened..closing).contains(&record.sent) {
                *figures.sent_while_open.entry(store.clone()).or_default() += 1;
                if record.counted_at().is_some_and(|at| at < closing) {
                    *figures.counted_while_open.entry(store.clone()).or_default() += 1;
                }
            }
            if let FlushEnd::Failed { kind, message, .. } = &record.end {
                let key = (store.clone(), format!("{kind:?} {}", code(message)));
                *figures.errors.entry(key).or_default() += 1;
            }
            if let Some(at) = record.counted_at() {
                let took = at - first_sent[&(record.member, record.request.seq)];
                let longest = figures.longest_flush.entry(store).or_default();
                *longest = (*longest).max(took);
            }
        }
        for message in ["total went stale", "round trip slow"] {
            for (member, said) in report.since(mark, message).iter().enumerate() {
                let store = stores.get(&member).copied().unwrap_or("?").to_owned();
                *figures.warnings.entry((store, message)).or_default() += said.len();
            }
        }
        for (member, failures) in report.since(mark, "flush failed").iter().enumerate() {
            let store = stores.get(&member).copied().unwrap_or("?").to_owned();
            for failure in failures {
                let number = |name| {
                    failure
                        .attribute(name)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                *figures.unsettled.entry(store.clone()).or_default() += number("unsettled");
                *figures.dropped.entry(store.clone()).or_default() += number("dropped");
            }
        }
        let (sent, held) = (report.sent().total(), report.held().total());
        figures.lost = sent.saturating_sub(held);
        figures.overcount = held.saturating_sub(sent);
        figures
    }

    fn print(&self) {
        eprintln!(
            "copies sent while the slot was open: {:?}",
            self.sent_while_open
        );
        eprintln!(
            "of which counted before it was given: {:?}",
            self.counted_while_open
        );
        eprintln!("errors returned by the stores:");
        for ((store, error), times) in &self.errors {
            eprintln!("  {store}: {error} × {times}");
        }
        eprintln!(
            "longest from a flush's first copy to its counting: {:?}",
            self.longest_flush
        );
        eprintln!("warnings: {:?}", self.warnings);
        eprintln!(
            "units unsettled {:?}, dropped {:?}; units lost {}, counted twice {}",
            self.unsettled, self.dropped, self.lost, self.overcount
        );
    }
}

/// The server's error code in a store error's text, where it names one (redis-rs writes
/// `TRYAGAIN` as `TryAgain`), else the client's own words.
fn code(message: &str) -> String {
    const CODES: [&str; 5] = ["TRYAGAIN", "ASK", "MOVED", "CLUSTERDOWN", "NOSCRIPT"];
    let inner = message.split_once('(').map_or(message, |(_, rest)| rest);
    let inner = inner.split_once(')').map_or(inner, |(inner, _)| inner);
    inner
        .split(|c: char| !c.is_ascii_alphabetic())
        .map(str::to_ascii_uppercase)
        .find(|word| CODES.contains(&word.as_str()))
        .unwrap_or_else(|| inner.to_owned())
}
