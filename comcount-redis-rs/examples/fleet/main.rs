//! A small fleet counting together, and what it is told.
//!
//! Several participants count events at rates that rise and fall, each through its own counter
//! and its own connection, against Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`), or on
//! the in-memory store when no Redis answers. Interval by interval it prints exact figures: what
//! the participants' flushes added to the interval, what the store holds for it, and the largest
//! total of it a participant was told. It checks that no participant was ever told more than the
//! store holds, exits non-zero if one was, and draws the three over time as an SVG chart.
//!
//! Every connection is a `ConnectionManager`, which reconnects by itself. A fault mid-run shows
//! the counts staying truthful and recovering: `--fault cut` cuts the participants' connections
//! for a while (`CLIENT KILL ID`, their own connections only); `--fault restart` starts a
//! `redis-server` of the demo's own on a free port and restarts it (`SHUTDOWN SAVE`, a pause,
//! then the same server again, its data kept). A Redis the demo did not start is never stopped.
//!
//! ```sh
//! cargo run --example fleet -- --participants 8 --interval-ms 500 --duration-s 10
//! cargo run --example fleet -- --fault restart --fault-at-s 6
//! ```

mod chart;
mod options;
mod own_redis;
mod record;

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use comcount_redis_rs::clock::TokioTimer;
use comcount_redis_rs::diagnostics::{Diagnostics, Event};
use comcount_redis_rs::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use comcount_redis_rs::testing::Recorded;
use comcount_redis_rs::{Counter, KeySpace, MemoryStore, RedisStore, Store, redis};
use tokio::time::Instant;

use chart::chart;
use options::{Fault, Options};
use own_redis::{FaultWindow, Faults, OwnRedis, inject};
use record::{Clerk, Held, Ledger, Reader, Report, Row, wall_ms};

/// Put before every key the demo writes.
const PREFIX: &str = "comcount-example:";

#[tokio::main]
async fn main() -> ExitCode {
    match fleet().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("fleet: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the fleet; `Ok(false)` when a participant was told more than the store held.
async fn fleet() -> Result<bool, Box<dyn Error>> {
    let options = Options::parse()?;
    let mut own = None;
    let url = if options.fault == Some(Fault::Restart) {
        // Restart only a server the demo started: never one someone else runs.
        let server = OwnRedis::start().await?;
        println!(
            "started a redis-server of its own at {} for --fault restart",
            server.url()
        );
        let url = server.url();
        own = Some(server);
        url
    } else {
        options.redis_url.clone()
    };
    let report = match probe(&url).await {
        Ok(()) => {
            println!("counting on Redis at {url}, a reconnecting connection per participant");
            let client = redis::Client::open(url.as_str())?;
            let observer = manager(&client).await?;
            let mut connections = Vec::new();
            for _ in 0..options.participants {
                connections.push(manager(&client).await?);
            }
            let stores = connections.iter().cloned().map(RedisStore::new).collect();
            let faults = Faults {
                observer: observer.clone(),
                participants: connections,
                server: own,
            };
            run(&options, stores, Reader::Redis(observer), Some(faults)).await?
        }
        Err(error) => {
            println!("no Redis at {url} ({error}): counting on the in-memory store instead");
            if options.fault.is_some() {
                println!(
                    "--fault does nothing on the in-memory store: there is no connection to \
                     cut and no server to restart"
                );
            }
            let store = MemoryStore::new();
            let stores = vec![store.clone(); options.participants];
            run(&options, stores, Reader::Memory(store), None).await?
        }
    };
    std::fs::create_dir_all(options.chart.parent().unwrap_or(std::path::Path::new(".")))?;
    std::fs::write(&options.chart, chart(&report, options.interval))?;
    println!("chart: {}", options.chart.display());
    Ok(report.truthful)
}

/// Counts for the run's duration, a row printed as each interval closes; then checks every
/// row again, every reply in.
async fn run<S: Store + Clone>(
    options: &Options,
    stores: Vec<S>,
    mut reader: Reader,
    mut faults: Option<Faults>,
) -> Result<Report, Box<dyn Error>> {
    // A name of its own per run, so that runs never mix.
    let name = format!("fleet-{:x}", wall_ms());
    let space = KeySpace::counter(PREFIX, &name);
    let clock = reader.clock().await?;
    let interval_ms = u64::try_from(options.interval.as_millis())?;
    let stop = Arc::new(AtomicBool::new(false));
    let events = Arc::new(AtomicU64::new(0));
    let ledger = Arc::new(Ledger::default());
    let clerk = Arc::new(Clerk {
        ledger: Arc::clone(&ledger),
        clock,
        interval_ms,
    });
    let given_up = GivenUp::default();
    let mut counters = Vec::new();
    let mut tasks = Vec::new();
    for (participant, store) in stores.into_iter().enumerate() {
        let store = Recorded::new(store, Arc::clone(&clerk));
        let (counter, worker) = Counter::builder(name.as_str(), options.interval)
            .prefix(PREFIX)
            .diagnostics(given_up.clone())
            .build(store, TokioTimer::new())?;
        tokio::spawn(worker);
        counters.push(counter.clone());
        tasks.push(tokio::spawn(count_events(
            participant,
            counter,
            options.rate,
            options.interval,
            Arc::clone(&events),
            Arc::clone(&stop),
        )));
    }

    println!(
        "{} participants, {:?} intervals, {:?}, about {} events/s each",
        options.participants, options.interval, options.duration, options.rate
    );
    println!(
        "Each row is an interval of the store's clock, once closed: 'at s', when it began, in\n\
         seconds into the run; 'counted', what the participants' flushes added to it, as the\n\
         store's replies said; 'held', what the store holds for it; 'told', the largest total\n\
         of it a participant was told (by group_total(), and by increment() unless its own\n\
         unsent count was larger), and to how many; 'failed', copies of flushes that got an\n\
         error instead of a reply, which the counters send again. No participant may be told\n\
         more than the store holds: told <= held, row by row."
    );
    println!(
        "{:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "interval", "at s", "counted", "held", "told", "told to", "failed"
    );

    let held = Held::default();
    let window = FaultWindow::default();
    let started = Instant::now();
    let start_ms = clock.now_ms();
    // The interval the run starts in is only partly the run's: rows start with the next.
    let first = start_ms / interval_ms + 1;
    let seconds = |ms: u64| (ms as f64 - start_ms as f64) / 1000.0;
    let read_wait = options.interval / 4;
    let monitor = async {
        let mut reader = reader.clone();
        let mut rows = Vec::new();
        let mut next = first;
        while started.elapsed() < options.duration {
            tokio::time::sleep(options.interval / 20).await;
            let now = clock.now_ms();
            held.read(&mut reader, &space, now / interval_ms, read_wait)
                .await;
            // An interval's total is told in the interval after it; a quarter into the one
            // after that, its row is complete.
            while (next + 2) * interval_ms + interval_ms / 4 <= now {
                let (told, told_to) = ledger.told(next);
                let row = Row {
                    interval: next,
                    at_s: seconds(next * interval_ms),
                    counted: ledger.counted(next),
                    held: held.get(next),
                    told,
                    told_to,
                    failed: ledger.failures(next),
                    faulted: window.covers(next * interval_ms, (next + 1) * interval_ms),
                };
                row.print(options.participants, options.fault);
                rows.push(row);
                next += 1;
            }
        }
        rows
    };
    // The server the demo started lives as long as `faults`: to the end of the run.
    let injecting = inject(
        options,
        faults.as_mut(),
        started,
        clock,
        &window,
        &held,
        reader.clone(),
        &space,
    );
    let (mut rows, fault) = tokio::join!(monitor, injecting);

    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    // Each participant sends what it still holds before it stops, as a service does on its
    // way out: Redis takes one flush of a participant an interval, so this may take two.
    let drains: Vec<_> = counters
        .iter()
        .map(|counter| counter.drain(Duration::from_millis(interval_ms * 4)))
        .collect();
    let mut unsent = 0;
    for drain in drains {
        unsent += drain.await;
    }
    let last = clock.now_ms() / interval_ms;
    held.read(&mut reader, &space, last, read_wait).await;

    // The ledger and the readings as they stand now, every reply in.
    let mut truthful = true;
    for row in &mut rows {
        (row.told, row.told_to) = ledger.told(row.interval);
        row.counted = ledger.counted(row.interval);
        row.failed = ledger.failures(row.interval);
        row.held = held.get(row.interval);
        if row.overcounts() {
            truthful = false;
            println!("overcount: a participant was told more than the store holds:");
            row.print(options.participants, options.fault);
        }
    }
    let events = events.load(Ordering::Relaxed);
    let held_total = held.sum_from(first - 1);
    println!(
        "over the run: {events} events counted by the participants, {held_total} of them in \
         the store's interval totals; {unsent} left unsent when the participants drained"
    );
    println!(
        "given up: {} units reported dropped, {} unsettled",
        given_up.0[0].load(Ordering::Relaxed),
        given_up.0[1].load(Ordering::Relaxed)
    );
    if held_total > events {
        truthful = false;
        println!("overcount: the store holds more than the participants counted");
    }
    if truthful {
        println!(
            "no overcount: told <= held in every interval, and the store holds no more than the \
             participants counted"
        );
    }
    let fault = fault.map(|(kind, from, to)| (kind, seconds(from), seconds(to)));
    Ok(Report {
        rows,
        fault,
        truthful,
    })
}

/// One participant: counts events at a rate that swings between a half and one and a half times
/// `rate`, each participant on its own phase, until told to stop.
async fn count_events(
    participant: usize,
    counter: Counter,
    rate: f64,
    interval: Duration,
    events_counted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let tick = Duration::from_millis(5);
    let period = 8.0 * interval.as_secs_f64();
    let phase = participant as f64 * 1.3;
    let started = Instant::now();
    let mut owed = 0.0;
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(tick).await;
        let t = started.elapsed().as_secs_f64();
        let swing = 1.0 + 0.5 * (std::f64::consts::TAU * t / period + phase).sin();
        owed += rate * swing * tick.as_secs_f64();
        let events = owed.floor() as u64;
        owed -= events as f64;
        // Tallied before counting, so that the tally is never behind what the store holds.
        events_counted.fetch_add(events, Ordering::Relaxed);
        for _ in 0..events {
            counter.increment(1);
        }
    }
}

/// A first connection, with a short timeout, to learn whether a Redis answers at all.
async fn probe(url: &str) -> Result<(), Box<dyn Error>> {
    let client = redis::Client::open(url)?;
    let connecting = client.get_multiplexed_async_connection();
    let mut connection = tokio::time::timeout(Duration::from_secs(1), connecting)
        .await
        .map_err(|_| "no answer within a second")??;
    redis::cmd("PING")
        .query_async::<String>(&mut connection)
        .await?;
    Ok(())
}

/// A connection that reconnects by itself after a cut or a restart: redis-rs's
/// `ConnectionManager`, its backoff between attempts capped at a quarter second so that it comes
/// back soon after the server does.
async fn manager(client: &redis::Client) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new().set_max_delay(Duration::from_millis(250));
    client.get_connection_manager_with_config(config).await
}

/// The units the participants reported given up: dropped, and unsettled.
#[derive(Clone, Default)]
struct GivenUp(Arc<[AtomicU64; 2]>);

impl Diagnostics for GivenUp {
    fn record(&self, _counter: &str, event: &Event<'_>) {
        if let Event::FlushFailed {
            dropped, unsettled, ..
        } = event
        {
            self.0[0].fetch_add(*dropped, Ordering::Relaxed);
            self.0[1].fetch_add(*unsettled, Ordering::Relaxed);
        }
    }
}
