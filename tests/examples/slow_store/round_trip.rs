//! One round trip: both rules' fleets through one proxy, measured over the steady state and
//! settled at the end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use comcount_core::Counter;
use comcount_tests::bench::Rules;
use comcount_tests::proxy::Proxy;

use crate::WARMUP_INTERVALS;
use crate::fleet::{Fleet, connect, read_totals, sample_known, start_counting, start_fleet};
use crate::options::Settings;
use crate::record::Reading;

/// One rule's figures at one round trip.
pub(crate) struct Row {
    pub(crate) rules: Rules,
    pub(crate) asked: u64,
    pub(crate) applied: u64,
    pub(crate) copies: u64,
    pub(crate) known: f64,
    pub(crate) counted: u64,
    pub(crate) landed: u64,
    pub(crate) applied_amount: u64,
    pub(crate) dropped: u64,
    pub(crate) unsettled: u64,
    pub(crate) buffered: u64,
    pub(crate) stale: u64,
    pub(crate) back_to_normal: u64,
    /// Counted replies with no total for the interval before, as a share of counted replies.
    pub(crate) without_total: f64,
    /// The share of intervals in the window that some flush reached.
    pub(crate) reached: f64,
    pub(crate) slow_raised: u64,
    pub(crate) first_slow_ms: Option<u64>,
}

pub(crate) async fn run_round_trip(
    settings: &Settings,
    server: SocketAddr,
    redis_url: &str,
    ratio: f64,
) -> Vec<Row> {
    let interval = settings.interval;
    let round_trip = interval.mul_f64(ratio);
    let proxy = Proxy::start(server).await.expect("a proxy");
    if settings.near_first == 0 {
        proxy.delay_replies(round_trip);
    }
    let tag = format!("{}-{:x}", round_trip.as_millis(), fastrand::u32(..));
    let stop = Arc::new(AtomicBool::new(false));
    let mut fleets = Vec::new();
    for rules in Rules::BOTH {
        fleets.push(start_fleet(rules, settings, &proxy.url(), &tag).await);
    }
    let reading_done = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn(read_totals(
        connect(redis_url).await,
        fleets
            .iter()
            .map(|f| (f.prefix.clone(), f.rules.label()))
            .collect(),
        interval,
        Arc::clone(&reading_done),
    ));
    // Both fleets count from the same moment, once every connection is up.
    let spread = interval.mul_f64(settings.stagger);
    let stagger = spread / settings.participants as u32;
    for fleet in &fleets {
        start_counting(fleet, stagger, &stop);
    }
    if settings.near_first > 0 {
        // A store close by, then farther away for good: measured from the change.
        tokio::time::sleep(interval * settings.near_first + spread).await;
        proxy.delay_replies(round_trip);
    }
    for fleet in &fleets {
        let _ = fleet.tally.started.set(Instant::now());
    }

    tokio::time::sleep(interval * WARMUP_INTERVALS + round_trip + spread).await;
    let before: Vec<Reading> = fleets.iter().map(|f| f.tally.read(interval)).collect();
    let window = interval * settings.intervals;
    let known = sample_known(&fleets, window).await;
    let after: Vec<Reading> = fleets.iter().map(|f| f.tally.read(interval)).collect();
    stop.store(true, Ordering::Relaxed);

    // Let the last counts go out and settle: the flushes after the stop carry them.
    let drain = round_trip * 4 + interval * 6;
    let deadline = Instant::now() + drain.max(Duration::from_secs(2));
    while Instant::now() < deadline && !fleets.iter().all(settled) {
        tokio::time::sleep(interval / 2).await;
    }
    tokio::time::sleep(interval * 2).await;
    reading_done.store(true, Ordering::Relaxed);
    let landed = reader.await.expect("the reader ends");
    for fleet in &fleets {
        for counter in &fleet.counters {
            counter.close();
        }
    }
    fleets
        .iter()
        .enumerate()
        .map(|(i, fleet)| row(fleet, settings, before[i], after[i], known[i], landed[i]))
        .collect()
}

/// Whether every unit a fleet counted is accounted for by its events.
pub(crate) fn settled(fleet: &Fleet) -> bool {
    let t = &fleet.tally;
    let accounted = t.applied_amount.load(Ordering::Relaxed)
        + t.dropped.load(Ordering::Relaxed)
        + t.unsettled.load(Ordering::Relaxed);
    accounted >= fleet.counted.load(Ordering::Relaxed)
}

pub(crate) fn row(
    fleet: &Fleet,
    settings: &Settings,
    before: Reading,
    after: Reading,
    known: f64,
    landed: u64,
) -> Row {
    let t = &fleet.tally;
    let first_slow = t.first_slow_ms.load(Ordering::Relaxed);
    if let Some(error) = t.first_error.get() {
        eprintln!("{}: first of its errors: {error}", fleet.space.base());
    }
    Row {
        rules: fleet.rules,
        asked: settings.participants as u64 * u64::from(settings.intervals),
        applied: after.applied - before.applied,
        copies: after.copies - before.copies,
        known,
        counted: fleet.counted.load(Ordering::Relaxed),
        landed,
        applied_amount: t.applied_amount.load(Ordering::Relaxed),
        dropped: t.dropped.load(Ordering::Relaxed),
        unsettled: t.unsettled.load(Ordering::Relaxed),
        buffered: fleet.counters.iter().map(Counter::buffered).sum(),
        stale: t.stale.load(Ordering::Relaxed),
        back_to_normal: t.back_to_normal.load(Ordering::Relaxed),
        without_total: (after.counted_without_total - before.counted_without_total) as f64
            / (after.counted_replies - before.counted_replies).max(1) as f64,
        reached: t.reached(before.interval + 1, after.interval),
        slow_raised: t.slow_raised.load(Ordering::Relaxed),
        first_slow_ms: (first_slow != u64::MAX).then_some(first_slow),
    }
}
