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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::error::Error;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use comcount_redis_rs::clock::TokioTimer;
use comcount_redis_rs::diagnostics::Reporter;
use comcount_redis_rs::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use comcount_redis_rs::{
    Counter, FlushReply, FlushRequest, KeySpace, MemoryStore, Outcome, RedisStore, Store,
    StoreError, redis,
};
use tokio::time::Instant;

/// Put before every key the demo writes.
const PREFIX: &str = "comcount-example:";

/// The fleet's settings, from the command line.
struct Options {
    participants: usize,
    interval: Duration,
    duration: Duration,
    rate: f64,
    chart: PathBuf,
    redis_url: String,
    fault: Option<Fault>,
    fault_at: Option<Duration>,
    fault_for: Option<Duration>,
}

/// A fault to inject mid-run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Cut the participants' connections, again and again, for a while.
    Cut,
    /// Stop the demo's own Redis, and start it again after a while.
    Restart,
}

impl Options {
    const USAGE: &'static str = "usage: fleet [--participants N] [--interval-ms MS] \
        [--duration-s S] [--rate EVENTS_PER_S] [--chart PATH]
             [--fault cut|restart] [--fault-at-s S] [--fault-for-ms MS]

REDIS_URL picks the server (default redis://127.0.0.1:6379); without one, the fleet counts on
the in-memory store, where --fault does nothing.
  --fault cut       cut the participants' connections (CLIENT KILL ID) again and again
  --fault restart   start a redis-server of the demo's own on a free port, instead of REDIS_URL,
                    and restart it (SHUTDOWN SAVE, then the same server again, its data kept)
  --fault-at-s S    when the fault starts (default: a third into the run)
  --fault-for-ms MS how long connections are cut, or the server stays down (default: two
                    intervals)";

    fn parse() -> Result<Self, String> {
        let mut options = Options {
            participants: 6,
            interval: Duration::from_millis(1000),
            duration: Duration::from_secs(20),
            rate: 200.0,
            chart: PathBuf::from("target/fleet.svg"),
            redis_url: std::env::var("REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
            fault: None,
            fault_at: None,
            fault_for: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "--help" || flag == "-h" {
                println!("{}", Self::USAGE);
                std::process::exit(0);
            }
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", Self::USAGE))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}\n{}", Self::USAGE);
            let seconds = |value: &str| {
                value
                    .parse::<f64>()
                    .map_err(|e| e.to_string())
                    .and_then(|s| Duration::try_from_secs_f64(s).map_err(|e| e.to_string()))
            };
            match flag.as_str() {
                "--participants" => options.participants = value.parse().map_err(|e| bad(&e))?,
                "--interval-ms" => {
                    options.interval = Duration::from_millis(value.parse().map_err(|e| bad(&e))?)
                }
                "--duration-s" => options.duration = seconds(&value).map_err(|e| bad(&e))?,
                "--rate" => options.rate = value.parse().map_err(|e| bad(&e))?,
                "--chart" => options.chart = value.into(),
                "--fault" => {
                    options.fault = Some(match value.as_str() {
                        "cut" => Fault::Cut,
                        "restart" => Fault::Restart,
                        _ => return Err(bad(&"the fault is `cut` or `restart`")),
                    })
                }
                "--fault-at-s" => options.fault_at = Some(seconds(&value).map_err(|e| bad(&e))?),
                "--fault-for-ms" => {
                    options.fault_for =
                        Some(Duration::from_millis(value.parse().map_err(|e| bad(&e))?))
                }
                _ => return Err(format!("unknown option {flag}\n{}", Self::USAGE)),
            }
        }
        if options.participants == 0 {
            return Err(format!(
                "--participants must be at least 1\n{}",
                Self::USAGE
            ));
        }
        if options.interval < Duration::from_millis(10) {
            return Err(format!(
                "--interval-ms must be at least 10\n{}",
                Self::USAGE
            ));
        }
        if options.fault.is_some() && options.fault_at() >= options.duration {
            return Err(format!(
                "--fault-at-s must come before the end of the run (--duration-s)\n{}",
                Self::USAGE
            ));
        }
        Ok(options)
    }

    fn fault_at(&self) -> Duration {
        self.fault_at.unwrap_or(self.duration / 3)
    }

    fn fault_for(&self) -> Duration {
        self.fault_for.unwrap_or(self.interval * 2)
    }
}

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

fn wall_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// The store's clock, as this machine's clock and the offset measured at the start: the store
/// numbers the intervals.
#[derive(Clone, Copy)]
struct StoreClock {
    offset_ms: i64,
}

impl StoreClock {
    fn now_ms(self) -> u64 {
        wall_ms().saturating_add_signed(self.offset_ms)
    }
}

/// Reads what the store holds, for the demo's own figures.
#[derive(Clone)]
enum Reader {
    Redis(ConnectionManager),
    Memory(MemoryStore),
}

impl Reader {
    /// The total the store holds at `key`.
    async fn held(&mut self, key: &str) -> redis::RedisResult<Option<u64>> {
        match self {
            Reader::Redis(connection) => redis::cmd("GET").arg(key).query_async(connection).await,
            Reader::Memory(store) => Ok(store.total(key)),
        }
    }

    /// The store's clock against this machine's.
    async fn clock(&mut self) -> redis::RedisResult<StoreClock> {
        match self {
            Reader::Redis(connection) => {
                let before = wall_ms();
                let (seconds, micros): (u64, u64) =
                    redis::cmd("TIME").query_async(connection).await?;
                let local = before.midpoint(wall_ms());
                let server = seconds * 1000 + micros / 1000;
                Ok(StoreClock {
                    offset_ms: server as i64 - local as i64,
                })
            }
            Reader::Memory(_) => Ok(StoreClock { offset_ms: 0 }),
        }
    }
}

/// What the store held for each interval: the most each reading found. Readings go on as long
/// as an interval's key lives, so a total is seen in full even across a short outage.
#[derive(Default)]
struct Held(Mutex<BTreeMap<u64, u64>>);

impl Held {
    /// Reads the totals of the intervals whose keys may still change or be read by a
    /// participant: the current one and the two before.
    async fn read(&self, reader: &mut Reader, space: &KeySpace, current: u64, wait: Duration) {
        for n in current.saturating_sub(2)..=current {
            let reading = tokio::time::timeout(wait, reader.held(&space.interval(n))).await;
            if let Ok(Ok(Some(total))) = reading {
                let mut held = lock(&self.0);
                let entry = held.entry(n).or_default();
                *entry = (*entry).max(total);
            }
        }
    }

    fn get(&self, interval: u64) -> Option<u64> {
        lock(&self.0).get(&interval).copied()
    }

    fn sum_from(&self, first: u64) -> u64 {
        lock(&self.0).range(first..).map(|(_, total)| total).sum()
    }
}

/// The participants' flush records, exactly as the store's replies gave them.
#[derive(Default)]
struct Ledger(Mutex<Records>);

#[derive(Default)]
struct Records {
    /// Flushes whose amount was counted, by participant and sequence number, each once.
    settled: HashSet<(u64, u64)>,
    /// Per interval, the amounts the store said it added to it.
    counted: HashMap<u64, u64>,
    /// Per interval, the largest total of it a reply gave a participant, and to whom.
    told: HashMap<u64, (u64, HashSet<u64>)>,
    /// Per interval, the copies of flushes that came back with an error instead of a reply.
    failed: HashMap<u64, u64>,
}

impl Ledger {
    fn record(&self, request: (u64, u64, u64), reply: &FlushReply) {
        let (participant, seq, amount) = request;
        let mut records = lock(&self.0);
        if let (true, Some(interval)) = (reply.outcome.is_counted(), reply.counted_in)
            && records.settled.insert((participant, seq))
        {
            *records.counted.entry(interval).or_default() += amount;
        }
        // Every reply with totals refreshes the counter's group total: the total of the
        // interval before the one the store ran it in. A wrong interval carries none.
        if reply.outcome != Outcome::WrongInterval
            && let (Some(total), Some(interval)) =
                (reply.previous_total(), reply.interval.checked_sub(1))
        {
            let told = records.told.entry(interval).or_default();
            told.0 = told.0.max(total);
            told.1.insert(participant);
        }
    }

    fn failed(&self, interval: u64) {
        *lock(&self.0).failed.entry(interval).or_default() += 1;
    }

    fn failures(&self, interval: u64) -> u64 {
        lock(&self.0).failed.get(&interval).copied().unwrap_or(0)
    }

    fn counted(&self, interval: u64) -> u64 {
        lock(&self.0).counted.get(&interval).copied().unwrap_or(0)
    }

    fn told(&self, interval: u64) -> (Option<u64>, usize) {
        match lock(&self.0).told.get(&interval) {
            Some((total, whom)) => (Some(*total), whom.len()),
            None => (None, 0),
        }
    }
}

/// A store that keeps the ledger of every reply it passes on to its counter.
#[derive(Clone)]
struct Recorded<S> {
    inner: S,
    ledger: Arc<Ledger>,
    clock: StoreClock,
    interval_ms: u64,
}

impl<S: Store> Store for Recorded<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn caveat(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.inner.caveat()
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let ledger = Arc::clone(&self.ledger);
        let (clock, interval_ms) = (self.clock, self.interval_ms);
        let which = (request.participant.as_u64(), request.seq, request.amount());
        let flushing = self.inner.flush(request, report);
        async move {
            let answer = flushing.await;
            match &answer {
                Ok(reply) => ledger.record(which, reply),
                Err(_) => ledger.failed(clock.now_ms() / interval_ms),
            }
            answer
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One row of the table: an interval of the store's clock, once it has closed.
#[derive(Clone, Copy)]
struct Row {
    interval: u64,
    /// When it began, in seconds from the start of the run.
    at_s: f64,
    /// What the participants' flushes added to it, as the store's replies said.
    counted: u64,
    /// What the store holds for it.
    held: Option<u64>,
    /// The largest total of it a participant was told.
    told: Option<u64>,
    /// How many participants were told one.
    told_to: usize,
    /// Copies of flushes that came back with an error during it.
    failed: u64,
    /// Whether the fault was on during it.
    faulted: bool,
}

impl Row {
    fn overcounts(&self) -> bool {
        self.told.unwrap_or(0) > self.held.unwrap_or(0)
    }

    fn print(&self, participants: usize, fault: Option<Fault>) {
        let or_dash = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
        let note = match (self.faulted, fault) {
            (true, Some(Fault::Cut)) => "  connections cut",
            (true, Some(Fault::Restart)) => "  Redis restarting",
            _ => "",
        };
        let check = if self.overcounts() { "  OVERCOUNT" } else { "" };
        println!(
            "{:>9} {:>6.1} {:>9} {:>9} {:>9} {:>9} {:>7}{note}{check}",
            self.interval % 100_000,
            self.at_s,
            self.counted,
            or_dash(self.held),
            or_dash(self.told),
            format!("{}/{participants}", self.told_to),
            self.failed,
        );
    }
}

/// What a run found.
struct Report {
    rows: Vec<Row>,
    /// When the fault was on, in seconds from the start of the run.
    fault: Option<(Fault, f64, f64)>,
    truthful: bool,
}

/// What the demo can break, when it counts on Redis.
struct Faults {
    /// A connection of the demo's own, not the participants'.
    observer: ConnectionManager,
    /// A handle on each participant's connection.
    participants: Vec<ConnectionManager>,
    /// The server the demo started, if it did.
    server: Option<OwnRedis>,
}

/// When the fault is on, in ms of the store's clock; the end is unknown until it is over.
#[derive(Default)]
struct FaultWindow(Mutex<Option<(u64, Option<u64>)>>);

impl FaultWindow {
    fn covers(&self, from_ms: u64, to_ms: u64) -> bool {
        match *lock(&self.0) {
            Some((start, end)) => start < to_ms && end.is_none_or(|end| from_ms < end),
            None => false,
        }
    }
}

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
    let mut counters = Vec::new();
    let mut tasks = Vec::new();
    for (participant, store) in stores.into_iter().enumerate() {
        let store = Recorded {
            inner: store,
            ledger: Arc::clone(&ledger),
            clock,
            interval_ms,
        };
        let (counter, worker) = Counter::builder(name.as_str(), options.interval)
            .prefix(PREFIX)
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
    for counter in &counters {
        counter.close();
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
         the store's interval totals (the rest not yet sent when the run stopped)"
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

/// Injects the fault of the options, if any and if there is Redis to inject it into; returns
/// what it did and when, in ms of the store's clock.
#[allow(clippy::too_many_arguments)]
async fn inject(
    options: &Options,
    faults: Option<&mut Faults>,
    started: Instant,
    clock: StoreClock,
    window: &FaultWindow,
    held: &Held,
    mut reader: Reader,
    space: &KeySpace,
) -> Option<(Fault, u64, u64)> {
    let (fault, faults) = options.fault.zip(faults)?;
    tokio::time::sleep_until(started + options.fault_at()).await;
    let from = clock.now_ms();
    *lock(&window.0) = Some((from, None));
    let down_for = options.fault_for();
    match fault {
        Fault::Cut => {
            println!(
                "-- fault: cutting the participants' connections for {down_for:?} \
                 (CLIENT KILL ID, again and again)"
            );
            let cuts = cut(faults, started + options.fault_at() + down_for).await;
            println!("-- fault over: {cuts} connections cut; each reconnects by itself");
        }
        Fault::Restart => {
            // Read what the store holds just before it goes, so that every total a
            // participant may have been told is known.
            let interval_ms = options.interval.as_millis() as u64;
            held.read(
                &mut reader,
                space,
                clock.now_ms() / interval_ms,
                options.interval / 4,
            )
            .await;
            let Some(server) = faults.server.as_mut() else {
                println!("-- fault: not restarting a Redis the demo did not start");
                return None;
            };
            println!("-- fault: stopping Redis (SHUTDOWN SAVE) for {down_for:?}");
            match server.restart(down_for).await {
                Ok(()) => println!("-- fault over: Redis is back, with its data"),
                Err(error) => println!("-- fault: Redis did not come back: {error}"),
            }
        }
    }
    let to = clock.now_ms();
    *lock(&window.0) = Some((from, Some(to)));
    Some((fault, from, to))
}

/// Cuts every participant's connection, again and again until `until`, from a connection of
/// the demo's own: `CLIENT ID` through the participant's connection names it, and `CLIENT KILL
/// ID` closes it on the server. Each reconnects on its next command. Returns how many were cut.
async fn cut(faults: &mut Faults, until: Instant) -> usize {
    let mut cuts = 0;
    while Instant::now() < until {
        for connection in &mut faults.participants {
            let mut asking = redis::cmd("CLIENT");
            asking.arg("ID");
            let asked = asking.query_async::<u64>(connection);
            let Ok(Ok(id)) = tokio::time::timeout(Duration::from_millis(100), asked).await else {
                // Already cut, and reconnecting.
                continue;
            };
            let mut kill = redis::cmd("CLIENT");
            kill.arg("KILL").arg("ID").arg(id);
            let kill = kill.query_async::<u64>(&mut faults.observer);
            if let Ok(Ok(killed)) = tokio::time::timeout(Duration::from_millis(100), kill).await {
                cuts += killed as usize;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cuts
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

/// A `redis-server` the demo started, on a free loopback port, with a data directory of its
/// own; stopped when dropped, or by a watchdog when the demo ends some other way.
struct OwnRedis {
    port: u16,
    dir: PathBuf,
    server: Option<Child>,
    watchdog: Option<Child>,
}

impl OwnRedis {
    async fn start() -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("comcount-fleet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let mut last_error = String::new();
        // Another process may take the port between picking it and the server binding it.
        for _ in 0..5 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|listener| listener.local_addr())
                .map_err(|e| format!("no free port on 127.0.0.1: {e}"))?
                .port();
            let mut server = Self {
                port,
                dir: dir.clone(),
                server: None,
                watchdog: None,
            };
            match server.spawn().await {
                Ok(()) => return Ok(server),
                Err(error) => last_error = error,
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(last_error)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    async fn spawn(&mut self) -> Result<(), String> {
        let mut server = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run redis-server ({e}); --fault restart starts one of its own: \
                     install it (apt-get install redis-server)"
                )
            })?;
        self.watchdog = watchdog(server.id()).ok();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = server.try_wait() {
                self.stop();
                return Err(format!(
                    "redis-server on port {} exited with {status}; its log is in {}",
                    self.port,
                    self.dir.join("redis.log").display()
                ));
            }
            if probe(&self.url()).await.is_ok() {
                self.server = Some(server);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = server.kill();
                let _ = server.wait();
                self.stop();
                return Err(format!("redis-server on port {} never answered", self.port));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server as an operator would, saving its data (`SHUTDOWN SAVE`), waits
    /// `down_for`, and starts it again on the same port and data.
    async fn restart(&mut self, down_for: Duration) -> Result<(), String> {
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        // The server closes the connection instead of answering.
        let _ = redis::cmd("SHUTDOWN")
            .arg("SAVE")
            .query_async::<()>(&mut connection)
            .await;
        let deadline = Instant::now() + Duration::from_secs(5);
        if let Some(server) = self.server.as_mut() {
            while !matches!(server.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.stop();
        tokio::time::sleep(down_for).await;
        let mut last_error = String::new();
        // The port may linger for a moment.
        for _ in 0..20 {
            match self.spawn().await {
                Ok(()) => return Ok(()),
                Err(error) => last_error = error,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last_error)
    }

    fn stop(&mut self) {
        for mut child in [self.server.take(), self.watchdog.take()]
            .into_iter()
            .flatten()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A shell that kills the server once the demo is gone, however it ended.
fn watchdog(server: u32) -> std::io::Result<Child> {
    let script = format!(
        "while kill -0 {parent} 2>/dev/null && kill -0 {server} 2>/dev/null; do sleep 0.5; done; \
         kill -9 {server} 2>/dev/null",
        parent = std::process::id(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// A step for axis ticks: 1, 2 or 5 times a power of ten, giving about `ticks` ticks over
/// `range`.
fn tick_step(range: f64, ticks: f64) -> f64 {
    let rough = (range / ticks).max(f64::MIN_POSITIVE);
    let power = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|step| *step >= rough)
        .unwrap_or(10.0 * power)
}

/// An SVG chart of the rows over time: what the store held, what the flushes added, and what
/// participants were told, with the fault's time shaded.
fn chart(report: &Report, interval: Duration) -> String {
    let (width, height) = (860.0, 440.0);
    let (left, right, top, bottom) = (80.0, 30.0, 65.0, 60.0);
    let rows = &report.rows;
    let half = interval.as_secs_f64() / 2.0;
    let t_max = rows
        .last()
        .map_or(1.0, |r| r.at_s + 2.0 * half)
        .max(report.fault.map_or(0.0, |(_, _, to)| to))
        .max(1.0);
    let c_max = rows
        .iter()
        .map(|r| r.counted.max(r.held.unwrap_or(0)).max(r.told.unwrap_or(0)))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let c_step = tick_step(c_max, 5.0);
    let c_top = (c_max / c_step).ceil() * c_step;
    let t_step = tick_step(t_max, 10.0);
    let x = |t: f64| left + (width - left - right) * t / t_max;
    let y = |v: f64| height - bottom - (height - top - bottom) * v / c_top;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{left}" y="25" font-size="15">Count per {interval:?} interval: what the store held, and what participants were told</text>"#
    );
    if let Some((fault, from, to)) = report.fault {
        let label = match fault {
            Fault::Cut => "connections cut",
            Fault::Restart => "Redis restarting",
        };
        let (x0, x1) = (x(from.max(0.0)), x(to.min(t_max)));
        let _ = writeln!(
            svg,
            r##"<rect x="{x0:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="#e8e8e8"/><text x="{:.1}" y="{:.1}" fill="#555">{label}</text>"##,
            (x1 - x0).max(1.0),
            height - top - bottom,
            x0 + 4.0,
            top + 14.0
        );
    }
    // Axes, ticks and their labels.
    let (x_axis, y_axis) = (height - bottom, left);
    let _ = writeln!(
        svg,
        r#"<line x1="{y_axis}" y1="{x_axis}" x2="{:.1}" y2="{x_axis}" stroke="black"/><line x1="{y_axis}" y1="{top}" x2="{y_axis}" y2="{x_axis}" stroke="black"/>"#,
        width - right
    );
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let _ = writeln!(
            svg,
            r#"<line x1="{0:.1}" y1="{x_axis}" x2="{0:.1}" y2="{1}" stroke="black"/><text x="{0:.1}" y="{2}" text-anchor="middle">{t}</text>"#,
            x(t),
            x_axis + 5.0,
            x_axis + 18.0
        );
        t += t_step;
    }
    let mut c = 0.0;
    while c <= c_top + 1e-9 {
        let _ = writeln!(
            svg,
            r##"<line x1="{0}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}" stroke="#eee"/><line x1="{3}" y1="{1:.1}" x2="{0}" y2="{1:.1}" stroke="black"/><text x="{4}" y="{5:.1}" text-anchor="end">{c}</text>"##,
            y_axis,
            y(c),
            width - right,
            y_axis - 5.0,
            y_axis - 8.0,
            y(c) + 4.0
        );
        c += c_step;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time (s)</text>"#,
        left + (width - left - right) / 2.0,
        height - 18.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(22 {:.1}) rotate(-90)" text-anchor="middle">count per interval</text>"#,
        top + (height - top - bottom) / 2.0
    );
    // Each interval is drawn at its middle.
    let point = |r: &Row, v: u64| format!("{:.1},{:.1}", x(r.at_s + half), y(v as f64));
    // An interval with no key held nothing.
    let held: Vec<String> = rows.iter().map(|r| point(r, r.held.unwrap_or(0))).collect();
    let counted: Vec<String> = rows.iter().map(|r| point(r, r.counted)).collect();
    let _ = writeln!(
        svg,
        r#"<polyline fill="none" stroke="black" stroke-width="2" points="{}"/>"#,
        held.join(" ")
    );
    let _ = writeln!(
        svg,
        r##"<polyline fill="none" stroke="#ff7f0e" stroke-width="2" stroke-dasharray="6 3" points="{}"/>"##,
        counted.join(" ")
    );
    for r in rows {
        if let Some(told) = r.told {
            let _ = writeln!(
                svg,
                r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="#1f77b4"/>"##,
                x(r.at_s + half),
                y(told as f64)
            );
        }
    }
    for (i, (label, swatch)) in [
        (
            "held by the store",
            r#"<rect x="0" y="-2" width="14" height="3" fill="black"/>"#,
        ),
        (
            "added by the flushes",
            r##"<rect x="0" y="-2" width="6" height="3" fill="#ff7f0e"/><rect x="8" y="-2" width="6" height="3" fill="#ff7f0e"/>"##,
        ),
        (
            "told to participants (largest)",
            r##"<circle cx="7" cy="0" r="3.5" fill="#1f77b4"/>"##,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let _ = writeln!(
            svg,
            r#"<g transform="translate({:.1} 45)">{swatch}<text x="20" y="4">{label}</text></g>"#,
            left + 200.0 * i as f64
        );
    }
    svg.push_str("</svg>\n");
    svg
}
