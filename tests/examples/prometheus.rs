//! A counter and a family reporting to Prometheus through `MetricsDiagnostics`.
//!
//! Installs the Prometheus recorder of `metrics-exporter-prometheus`, counts for a few seconds
//! with a counter and a family of three keys on a real clock (the family's cap is two keys, so
//! the calls for the last key to come are refused), drains both, and prints what a scrape
//! would return. The store is Redis at `REDIS_URL` when that is set and answers, the in-memory
//! store otherwise. Halfway through, the store stops answering for a few intervals
//! (`--stall-ms`), so that the scrape shows copies sent again and answered late.
//!
//! ```sh
//! cargo run -p comcount-tests --example prometheus -- --duration-s 6 --interval-ms 200
//! ```

use std::error::Error;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::{LogDiagnostics, MetricsDiagnostics, Reporter};
use comcount_core::{
    Counter, Family, FlushReply, FlushRequest, MemoryStore, Store, StoreError, Worker,
};
use comcount_redis_rs::{RedisStore, redis};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use redis::aio::ConnectionManager;

struct Options {
    duration: Duration,
    interval: Duration,
    stall: Duration,
}

impl Options {
    const USAGE: &'static str = "usage: prometheus [--duration-s S] [--interval-ms MS] [--stall-ms MS]   (REDIS_URL: use Redis)";

    fn parse() -> Result<Self, String> {
        let mut options = Options {
            duration: Duration::from_secs(6),
            interval: Duration::from_millis(200),
            stall: Duration::from_millis(800),
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", Self::USAGE))?;
            let number: u64 = value
                .parse()
                .map_err(|e| format!("{flag} {value}: {e}\n{}", Self::USAGE))?;
            match flag.as_str() {
                "--duration-s" => options.duration = Duration::from_secs(number),
                "--interval-ms" => options.interval = Duration::from_millis(number),
                "--stall-ms" => options.stall = Duration::from_millis(number),
                _ => return Err(format!("unknown option {flag}\n{}", Self::USAGE)),
            }
        }
        Ok(options)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let options = Options::parse()?;
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("comcount_flush_round_trip_seconds".into()),
            &[0.001, 0.005, 0.025, 0.1, 0.5, 2.5],
        )?
        .install_recorder()?;

    let stall_from = Instant::now() + options.duration / 2;
    let stall = (stall_from, stall_from + options.stall);
    match std::env::var("REDIS_URL") {
        Ok(url) => match connect(&url).await {
            Ok(store) => {
                eprintln!("counting on Redis at {url}");
                let store = Stalling::new(store, stall);
                count(&options, store).await;
            }
            Err(error) => {
                eprintln!("no Redis at {url} ({error}): counting on the in-memory store");
                count(&options, Stalling::new(MemoryStore::new(), stall)).await;
            }
        },
        Err(_) => {
            eprintln!("REDIS_URL not set: counting on the in-memory store");
            count(&options, Stalling::new(MemoryStore::new(), stall)).await;
        }
    }
    prometheus.run_upkeep();
    print!("{}", prometheus.render());
    Ok(())
}

/// A store on a connection that reconnects, once a Redis answers at `url` within a second.
async fn connect(url: &str) -> Result<RedisStore<ConnectionManager>, Box<dyn Error>> {
    let connecting = RedisStore::connect(url);
    let store = tokio::time::timeout(Duration::from_secs(1), connecting)
        .await
        .map_err(|_| "no answer within a second")??;
    redis::cmd("PING")
        .query_async::<String>(&mut store.connection().clone())
        .await?;
    Ok(store)
}

/// Counts for the run's duration with a counter and a family of three tenants sharing
/// `store`, both reporting to the log and to the metrics recorder, then drains both. The
/// family's cap is two keys: the calls for the last tenant to come are refused.
async fn count<S: Store>(options: &Options, store: S) {
    let store = Arc::new(store);
    let (requests, worker) = Counter::builder("requests", options.interval)
        .prefix("example:")
        .diagnostics((LogDiagnostics, MetricsDiagnostics))
        .build(Arc::clone(&store), TokioTimer::new())
        .expect("valid settings");
    let counter_worker = spawn(worker);
    let (tenants, worker) = Family::builder("tenants", options.interval)
        .prefix("example:")
        .max_keys(2)
        .diagnostics((LogDiagnostics, MetricsDiagnostics))
        .build(Arc::clone(&store), TokioTimer::new())
        .expect("valid settings");
    let family_worker = spawn(worker);

    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    let mut n: u64 = 0;
    while start.elapsed() < options.duration {
        tick.tick().await;
        n += 1;
        requests.increment(1);
        tenants.increment(["acme", "globex", "initech"][(n % 3) as usize], 1);
    }
    eprintln!(
        "counted {n}; the group's total of the last interval: {:?}, {:?} old",
        requests.group_total(),
        requests.total_age()
    );
    let timeout = options.interval * 5;
    let unsent = tokio::join!(requests.drain(timeout), tenants.drain(timeout));
    eprintln!("unsent after the drain: {unsent:?}");
    let _ = tokio::join!(counter_worker, family_worker);
}

fn spawn(worker: Worker) -> tokio::task::JoinHandle<()> {
    tokio::spawn(worker)
}

/// A store that holds every flush sent within the stall until the stall ends, then passes it
/// on: a store that stopped answering for a while.
struct Stalling<S> {
    inner: S,
    from: Instant,
    until: Instant,
}

impl<S> Stalling<S> {
    fn new(inner: S, (from, until): (Instant, Instant)) -> Self {
        Self { inner, from, until }
    }
}

impl<S: Store> Store for Stalling<S> {
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
        let now = Instant::now();
        let held = (self.from..self.until)
            .contains(&now)
            .then(|| tokio::time::sleep_until(self.until.into()));
        async move {
            if let Some(held) = held {
                held.await;
            }
            self.inner.flush(request, report).await
        }
    }
}
