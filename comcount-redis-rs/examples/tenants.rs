//! A small fleet counting requests per tenant, with a counter family.
//!
//! Each participant counts events for thousands of tenants, a few of them busy and most of them
//! quiet (a Zipf spread, as real traffic tends to be), through one `Family`, against Redis at
//! `REDIS_URL` (default `redis://127.0.0.1:6379`), or on the in-memory store when no Redis
//! answers. At the end it prints, for the busiest tenants, what the fleet really counted per
//! interval next to what participants were shown, and how many flushes a second the family sent
//! against what one counter per tenant would send.
//!
//! ```sh
//! cargo run --example tenants -- --participants 4 --tenants 5000 --interval-ms 1000
//! ```

use std::collections::HashMap;
use std::error::Error;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use comcount_redis_rs::clock::TokioTimer;
use comcount_redis_rs::keys::partition_of;
use comcount_redis_rs::testing::{FlushLog, Recorded};
use comcount_redis_rs::{
    Family, FlushReply, FlushRequest, MemoryStore, RedisStore, Store, StoreError, redis,
};

/// The fleet's settings, from the command line.
struct Options {
    participants: usize,
    tenants: usize,
    interval: Duration,
    duration: Duration,
    rate: f64,
    redis_url: String,
}

impl Options {
    const USAGE: &'static str = "usage: tenants [--participants N] [--tenants N] \
        [--interval-ms MS] [--duration-s S] [--rate EVENTS_PER_S]   (REDIS_URL picks the server)";

    fn parse() -> Result<Self, String> {
        let mut options = Options {
            participants: 4,
            tenants: 5_000,
            interval: Duration::from_millis(1000),
            duration: Duration::from_secs(15),
            rate: 20_000.0,
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
                "--tenants" => options.tenants = value.parse().map_err(|e| bad(&e))?,
                "--interval-ms" => {
                    options.interval = Duration::from_millis(value.parse().map_err(|e| bad(&e))?)
                }
                "--duration-s" => {
                    options.duration = Duration::from_secs(value.parse().map_err(|e| bad(&e))?)
                }
                "--rate" => options.rate = value.parse().map_err(|e| bad(&e))?,
                _ => return Err(format!("unknown option {flag}\n{}", Self::USAGE)),
            }
        }
        if options.participants == 0 || options.tenants == 0 {
            return Err(format!(
                "--participants and --tenants must be at least 1\n{}",
                Self::USAGE
            ));
        }
        Ok(options)
    }

    /// About 700 tenants per partition, as the README advises: many keys a round trip, and
    /// well under the 1000 keys a flush carries.
    fn partitions(&self) -> u32 {
        self.tenants.div_ceil(700) as u32
    }
}

/// How many of the busiest tenants the table shows.
const SHOWN: usize = 8;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let options = Options::parse()?;
    match connect(&options.redis_url).await {
        Ok(store) => {
            println!("counting on Redis at {}", options.redis_url);
            run(&options, store).await
        }
        Err(error) => {
            println!(
                "no Redis at {} ({error}): counting on the in-memory store instead",
                options.redis_url
            );
            run(&options, MemoryStore::new()).await
        }
    }
}

/// A store on a connection that reconnects by itself, or an error when Redis does not answer
/// within a second.
async fn connect(url: &str) -> Result<RedisStore<redis::aio::ConnectionManager>, Box<dyn Error>> {
    let store = tokio::time::timeout(Duration::from_secs(1), RedisStore::connect(url))
        .await
        .map_err(|_| "no answer within a second")??;
    redis::cmd("PING")
        .query_async::<String>(&mut store.connection().clone())
        .await?;
    Ok(store)
}

async fn run<S: Store + Clone>(options: &Options, store: S) -> Result<(), Box<dyn Error>> {
    // A name of its own per run, so that runs never mix.
    let name = format!("tenants-{:x}", wall_ms());
    let store = Recorded::new(store, Arc::new(Flushes::default()));
    let tenants: Arc<[String]> = (0..options.tenants)
        .map(|rank| format!("tenant-{rank}"))
        .collect();
    let spread = Arc::new(Zipf::new(options.tenants));
    let stop = Arc::new(AtomicBool::new(false));
    let truth = Arc::new(Truth::default());
    let mut families = Vec::new();
    let mut tasks = Vec::new();
    for participant in 0..options.participants {
        let (family, worker) = Family::builder(name.as_str(), options.interval)
            .prefix("comcount-example:")
            .partitions(options.partitions())
            .max_keys(options.tenants)
            .build(store.clone(), TokioTimer::new())?;
        tokio::spawn(worker);
        families.push(family.clone());
        tasks.push(tokio::spawn(count_events(
            Participant {
                seed: participant as u64,
                family,
                tenants: Arc::clone(&tenants),
                spread: Arc::clone(&spread),
                rate: options.rate,
                interval: options.interval,
            },
            Arc::clone(&truth),
            Arc::clone(&stop),
        )));
    }
    println!(
        "{} participants, {} tenants in {} partitions, {:?} intervals, {:?}, about {} events/s \
         each",
        options.participants,
        options.tenants,
        options.partitions(),
        options.interval,
        options.duration,
        options.rate
    );

    let mut seen = Seen::default();
    let started = tokio::time::Instant::now();
    let first = wall_interval(options.interval);
    let mut current = first;
    let mut flushes_at_start = None;
    while started.elapsed() < options.duration {
        tokio::time::sleep(options.interval / 20).await;
        let now = wall_interval(options.interval);
        if now == current {
            continue;
        }
        current = now;
        if now <= first + 2 {
            // The first intervals hold what was counted before the first aimed flush too.
            continue;
        }
        flushes_at_start.get_or_insert((store.log().count(), tokio::time::Instant::now()));
        // Interval `now - 1` brought every key the total of `now - 2`.
        seen.sample(&families, &tenants, &truth, now - 2);
    }
    let (flushes, since) = flushes_at_start.unwrap_or((0, started));
    let flushes_per_s = (store.log().count() - flushes) as f64 / since.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    seen.print(&tenants, &spread);
    let active = seen.active as f64 / seen.samples.max(1) as f64;
    println!(
        "flushes: {flushes_per_s:.0}/s for the family; one counter per tenant would send \
         {:.0}/s ({} participants × {active:.0} tenants active per interval)",
        options.participants as f64 * active / options.interval.as_secs_f64(),
        options.participants
    );
    println!(
        "tenants whose total participant 0 knew: {:.1}% of those it held",
        100.0 * seen.known as f64 / seen.active.max(1) as f64
    );
    for family in &families {
        family.close();
    }
    Ok(())
}

/// One participant's traffic.
struct Participant {
    seed: u64,
    family: Family,
    tenants: Arc<[String]>,
    spread: Arc<Zipf>,
    rate: f64,
    interval: Duration,
}

/// Counts events at `rate`, each for a tenant drawn from the Zipf spread, until told to stop.
async fn count_events(participant: Participant, truth: Arc<Truth>, stop: Arc<AtomicBool>) {
    let tick = Duration::from_millis(5);
    let mut rng = fastrand::Rng::with_seed(participant.seed);
    let mut owed = 0.0;
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(tick).await;
        owed += participant.rate * tick.as_secs_f64();
        let events = owed.floor() as u64;
        owed -= events as f64;
        for _ in 0..events {
            let rank = participant.spread.sample(&mut rng);
            let tenant = &participant.tenants[rank];
            participant.family.increment(tenant, 1);
            if rank < SHOWN {
                let partitions = participant.family.partitions();
                let partition = partition_of(tenant, partitions);
                truth.add(
                    rank,
                    flushed_into(participant.interval, partition, partitions),
                );
            }
        }
    }
}

/// What the busiest tenants were shown, summed over the intervals sampled: an interval's, once
/// the flushes of the interval after it have brought its totals.
#[derive(Default)]
struct Seen {
    samples: u64,
    truth: [u64; SHOWN],
    low: [u64; SHOWN],
    high: [u64; SHOWN],
    /// Tenants participant 0 held, summed over samples, and those whose total it knew.
    active: u64,
    known: u64,
}

impl Seen {
    fn sample(&mut self, families: &[Family], tenants: &[String], truth: &Truth, interval: u64) {
        self.samples += 1;
        for (rank, tenant) in tenants.iter().take(SHOWN).enumerate() {
            let seen = families.iter().map(|f| f.count(tenant));
            self.truth[rank] += truth.get(rank, interval);
            self.low[rank] += seen.clone().min().unwrap_or(0);
            self.high[rank] += seen.max().unwrap_or(0);
        }
        let family = &families[0];
        self.active += family.len() as u64;
        self.known += tenants
            .iter()
            .filter(|t| family.group_total(t).is_some())
            .count() as u64;
    }

    fn print(&self, tenants: &[String], spread: &Zipf) {
        let n = self.samples.max(1);
        println!(
            "per interval, averaged over {n} intervals: 'true' is what the fleet counted for the \
             tenant between two flushes of its partition (by this machine's clock, so a little \
             either way at the edges); 'seen' what participants were shown once the interval \
             closed"
        );
        println!(
            "{:>10} {:>7} {:>10} {:>10} {:>10}",
            "tenant", "share", "true", "seen low", "seen high"
        );
        for (rank, tenant) in tenants.iter().take(SHOWN).enumerate() {
            println!(
                "{:>10} {:>6.2}% {:>10} {:>10} {:>10}",
                tenant,
                100.0 * spread.share(rank),
                self.truth[rank] / n,
                self.low[rank] / n,
                self.high[rank] / n
            );
        }
    }
}

/// Draws tenant ranks with probability proportional to 1 / (rank + 1).
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize) -> Self {
        let mut sum = 0.0;
        let cumulative = (0..n)
            .map(|rank| {
                sum += 1.0 / (rank + 1) as f64;
                sum
            })
            .collect();
        Self { cumulative }
    }

    fn sample(&self, rng: &mut fastrand::Rng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let u = rng.f64() * total;
        self.cumulative
            .partition_point(|&c| c < u)
            .min(self.cumulative.len() - 1)
    }

    fn share(&self, rank: usize) -> f64 {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        1.0 / (rank + 1) as f64 / total
    }
}

/// What the fleet really counted for the busiest tenants, per wall-clock interval.
#[derive(Default)]
struct Truth(Mutex<HashMap<(usize, u64), u64>>);

impl Truth {
    fn add(&self, rank: usize, interval: u64) {
        *self.lock().entry((rank, interval)).or_default() += 1;
    }

    fn get(&self, rank: usize, interval: u64) -> u64 {
        self.lock().get(&(rank, interval)).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(usize, u64), u64>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Counts the flushes a store passes on.
#[derive(Default)]
struct Flushes(AtomicU64);

impl Flushes {
    fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl FlushLog for Flushes {
    type Sent = ();

    fn sent(&self, _: &FlushRequest) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn answered(&self, (): (), _: &Result<FlushReply, StoreError>) {}
}

/// The wall clock's interval number, which matches the store's when the store runs on this
/// machine.
fn wall_interval(interval: Duration) -> u64 {
    (wall_ms() / interval.as_millis()) as u64
}

/// The interval whose total an event counted now for a key of `partition` (of `partitions`)
/// ends up in: the one whose aimed phase for that partition comes next. A family's partitions
/// aim at phases spread over the middle half of the interval, `I/4 + I/2 (p + 1/2) / P`.
fn flushed_into(interval: Duration, partition: u32, partitions: u32) -> u64 {
    let i = interval.as_millis();
    let (p, n) = (u128::from(partition), u128::from(partitions));
    let phase = i / 4 + i * (2 * p + 1) / (4 * n);
    ((wall_ms() + i - phase) / i) as u64
}

fn wall_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}
