//! A small fleet counting together.
//!
//! Several participants count events at rates that rise and fall, each through its own counter,
//! against Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`), or on the in-memory store when
//! no Redis answers. Interval by interval it prints the true group count next to what the
//! participants saw, and at the end it draws both over time as an SVG chart.
//!
//! ```sh
//! cargo run --example fleet -- --participants 8 --interval-ms 500 --duration-s 10
//! ```

use std::collections::HashMap;
use std::error::Error;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use comcount_redis_rs::clock::TokioTimer;
use comcount_redis_rs::{Counter, MemoryStore, RedisStore, Store, redis};

/// The fleet's settings, from the command line.
struct Options {
    participants: usize,
    interval: Duration,
    duration: Duration,
    rate: f64,
    chart: PathBuf,
    redis_url: String,
}

impl Options {
    const USAGE: &'static str = "usage: fleet [--participants N] [--interval-ms MS] \
        [--duration-s S] [--rate EVENTS_PER_S] [--chart PATH]   (REDIS_URL picks the server)";

    fn parse() -> Result<Self, String> {
        let mut options = Options {
            participants: 6,
            interval: Duration::from_millis(1000),
            duration: Duration::from_secs(20),
            rate: 200.0,
            chart: PathBuf::from("target/fleet.svg"),
            redis_url: std::env::var("REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", Self::USAGE))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}\n{}", Self::USAGE);
            match flag.as_str() {
                "--participants" => options.participants = value.parse().map_err(|e| bad(&e))?,
                "--interval-ms" => {
                    options.interval = Duration::from_millis(value.parse().map_err(|e| bad(&e))?)
                }
                "--duration-s" => {
                    options.duration = Duration::from_secs(value.parse().map_err(|e| bad(&e))?)
                }
                "--rate" => options.rate = value.parse().map_err(|e| bad(&e))?,
                "--chart" => options.chart = value.into(),
                _ => return Err(format!("unknown option {flag}\n{}", Self::USAGE)),
            }
        }
        if options.participants == 0 {
            return Err(format!(
                "--participants must be at least 1\n{}",
                Self::USAGE
            ));
        }
        Ok(options)
    }
}

/// One row of the table: an interval, what the fleet really counted for it, and the lowest and
/// highest count a participant was shown once that interval had closed.
///
/// Flushes go out in the middle of each interval, so an interval's total in the store is what
/// was counted between the middle of the interval before and its own middle: that is the true
/// count to hold it against. A participant is shown the last closed interval's total, or its own
/// unsent count when larger.
#[derive(Clone, Copy)]
struct Row {
    interval: u64,
    truth: u64,
    seen_low: u64,
    seen_high: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let options = Options::parse()?;
    let rows = match connect(&options.redis_url).await {
        Ok(connection) => {
            println!("counting on Redis at {}", options.redis_url);
            run(&options, RedisStore::new(connection)).await?
        }
        Err(error) => {
            println!(
                "no Redis at {} ({error}): counting on the in-memory store instead",
                options.redis_url
            );
            run(&options, MemoryStore::new()).await?
        }
    };
    std::fs::create_dir_all(options.chart.parent().unwrap_or(std::path::Path::new(".")))?;
    std::fs::write(&options.chart, chart(&rows, options.interval))?;
    println!("chart: {}", options.chart.display());
    Ok(())
}

async fn connect(url: &str) -> Result<redis::aio::MultiplexedConnection, Box<dyn Error>> {
    let client = redis::Client::open(url)?;
    let connecting = client.get_multiplexed_async_connection();
    let mut connection = tokio::time::timeout(Duration::from_secs(1), connecting)
        .await
        .map_err(|_| "no answer within a second")??;
    redis::cmd("PING")
        .query_async::<String>(&mut connection)
        .await?;
    Ok(connection)
}

/// The wall clock's interval number, which matches the store's when the store runs on this
/// machine.
fn wall_interval(interval: Duration) -> u64 {
    (wall_ms() / interval.as_millis()) as u64
}

/// The interval whose total an event counted now ends up in: the one whose middle comes next.
fn flushed_into(interval: Duration) -> u64 {
    ((wall_ms() + interval.as_millis() / 2) / interval.as_millis()) as u64
}

fn wall_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

async fn run<S: Store + Clone>(options: &Options, store: S) -> Result<Vec<Row>, Box<dyn Error>> {
    // A name of its own per run, so that runs never mix.
    let name = format!("fleet-{:x}", wall_interval(Duration::from_millis(1)));
    let stop = Arc::new(AtomicBool::new(false));
    let truth = Arc::new(Truth::default());
    let mut counters = Vec::new();
    let mut tasks = Vec::new();
    for participant in 0..options.participants {
        let (counter, worker) = Counter::builder(name.as_str(), options.interval)
            .prefix("comcount-example:")
            .build(store.clone(), TokioTimer::new())?;
        tokio::spawn(worker);
        counters.push(counter.clone());
        tasks.push(tokio::spawn(count_events(
            participant,
            counter,
            options.rate,
            options.interval,
            Arc::clone(&truth),
            Arc::clone(&stop),
        )));
    }

    println!(
        "{} participants, {:?} intervals, {:?}, about {} events/s each",
        options.participants, options.interval, options.duration, options.rate
    );
    println!(
        "'true count' is what the fleet counted between the middles of an interval and the one"
    );
    println!("before, when flushes go out; 'seen' is what participants were shown once it closed.");
    println!(
        "{:>9} {:>12} {:>10} {:>10}",
        "interval", "true count", "seen low", "seen high"
    );
    let mut rows = Vec::new();
    let started = tokio::time::Instant::now();
    let first = wall_interval(options.interval);
    let mut current = first;
    while started.elapsed() < options.duration {
        tokio::time::sleep(options.interval / 20).await;
        let now = wall_interval(options.interval);
        if now == current {
            continue;
        }
        if current <= first + 2 {
            // The first intervals hold what was counted before the first aimed flush too.
            current = now;
            continue;
        }
        // An interval on, participants have been shown the total of the one before.
        let seen: Vec<u64> = counters.iter().map(Counter::count).collect();
        let row = Row {
            interval: current - 1,
            truth: truth.get(current - 1),
            seen_low: seen.iter().copied().min().unwrap_or(0),
            seen_high: seen.iter().copied().max().unwrap_or(0),
        };
        println!(
            "{:>9} {:>12} {:>10} {:>10}",
            row.interval % 100_000,
            row.truth,
            row.seen_low,
            row.seen_high,
        );
        rows.push(row);
        current = now;
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    for counter in &counters {
        counter.close();
    }
    Ok(rows)
}

/// One participant: counts events at a rate that swings between a half and one and a half times
/// `rate`, each participant on its own phase, until told to stop.
async fn count_events(
    participant: usize,
    counter: Counter,
    rate: f64,
    interval: Duration,
    truth: Arc<Truth>,
    stop: Arc<AtomicBool>,
) {
    let tick = Duration::from_millis(5);
    let period = 8.0 * interval.as_secs_f64();
    let phase = participant as f64 * 1.3;
    let started = tokio::time::Instant::now();
    let mut owed = 0.0;
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(tick).await;
        let t = started.elapsed().as_secs_f64();
        let swing = 1.0 + 0.5 * (std::f64::consts::TAU * t / period + phase).sin();
        owed += rate * swing * tick.as_secs_f64();
        let events = owed.floor() as u64;
        owed -= events as f64;
        for _ in 0..events {
            counter.increment(1);
        }
        truth.add(flushed_into(interval), events);
    }
}

/// What the whole fleet really counted, per wall-clock interval.
#[derive(Default)]
struct Truth(Mutex<HashMap<u64, u64>>);

impl Truth {
    fn add(&self, interval: u64, amount: u64) {
        *self.lock().entry(interval).or_default() += amount;
    }

    fn get(&self, interval: u64) -> u64 {
        self.lock().get(&interval).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u64>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// An SVG chart of the rows: the true count and the participants' lowest and highest view,
/// interval by interval.
fn chart(rows: &[Row], interval: Duration) -> String {
    let (width, height, margin) = (800.0, 400.0, 50.0);
    let top = rows
        .iter()
        .map(|r| r.truth.max(r.seen_high))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let x = |i: usize| margin + (width - 2.0 * margin) * i as f64 / (rows.len().max(2) - 1) as f64;
    let y = |v: u64| height - margin - (height - 2.0 * margin) * v as f64 / top;
    let line = |value: fn(&Row) -> u64| {
        rows.iter()
            .enumerate()
            .map(|(i, r)| format!("{:.1},{:.1}", x(i), y(value(r))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{margin}" y="25" font-size="15">Group count per {interval:?} interval: the truth and what participants saw</text>"#
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{margin}" y1="{0}" x2="{1}" y2="{0}" stroke="black"/><line x1="{margin}" y1="{margin}" x2="{margin}" y2="{0}" stroke="black"/>"#,
        height - margin,
        width - margin
    );
    let _ = writeln!(
        svg,
        r#"<text x="5" y="{:.0}">{top:.0}</text><text x="5" y="{:.0}">0</text><text x="{:.0}" y="{:.0}">intervals</text>"#,
        margin + 4.0,
        height - margin,
        width / 2.0,
        height - 15.0
    );
    for (label, colour, points, dash) in [
        ("true", "black", line(|r| r.truth), ""),
        ("seen, highest", "#1f77b4", line(|r| r.seen_high), ""),
        (
            "seen, lowest",
            "#ff7f0e",
            line(|r| r.seen_low),
            r#" stroke-dasharray="6 3""#,
        ),
    ] {
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{points}"/>"#
        );
        let _ = label;
    }
    for (i, (label, colour)) in [
        ("true count", "black"),
        ("highest participant", "#1f77b4"),
        ("lowest participant", "#ff7f0e"),
    ]
    .into_iter()
    .enumerate()
    {
        let ly = height - margin - 60.0 + 15.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{0}" y="{1}" width="12" height="3" fill="{colour}"/><text x="{2}" y="{3}">{label}</text>"#,
            width - 200.0,
            ly,
            width - 183.0,
            ly + 5.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}
