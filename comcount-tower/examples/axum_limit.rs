//! An axum service with a limit per API key, shared by every instance that runs it.
//!
//! Each request's `x-api-key` header is its key; a key may make `--limit` requests an
//! interval across all the instances, counted in Redis at `REDIS_URL` (default
//! `redis://127.0.0.1:6379`), or on the in-memory store when no Redis answers (then each
//! instance counts alone). Requests without the header are not limited.
//!
//! ```sh
//! cargo run -p comcount-tower --example axum_limit -- --port 3000 --limit 5
//! curl -i -H 'x-api-key: acme' http://127.0.0.1:3000/
//! ```
//!
//! `--demo` serves on a free port with an interval of 10 s, sends itself `--limit` + 3
//! requests of one key, prints each status and exits: non-zero unless the first `--limit`
//! pass and the rest are refused.

use std::borrow::Cow;
use std::error::Error;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::Request;
use axum::http::HeaderMap;
use axum::routing::get;
use comcount_redis_rs::clock::TokioTimer;
use comcount_redis_rs::{Family, MemoryStore, RedisStore, Store, Worker, redis};
use comcount_tower::RateLimitLayer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The settings, from the command line.
struct Options {
    port: u16,
    limit: u64,
    interval: Duration,
    name: String,
    demo: bool,
    redis_url: String,
}

impl Options {
    const USAGE: &'static str = "usage: axum_limit [--port PORT] [--limit N] \
        [--interval-ms MS] [--name FAMILY] [--demo]   (REDIS_URL picks the server)";

    fn parse() -> Result<Self, String> {
        let mut options = Options {
            port: 3000,
            limit: 10,
            interval: Duration::from_secs(1),
            name: "axum-limit".into(),
            demo: false,
            redis_url: std::env::var("REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "--demo" {
                options.demo = true;
                continue;
            }
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", Self::USAGE))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}\n{}", Self::USAGE);
            match flag.as_str() {
                "--port" => options.port = value.parse().map_err(|e| bad(&e))?,
                "--limit" => options.limit = value.parse().map_err(|e| bad(&e))?,
                "--interval-ms" => {
                    options.interval = Duration::from_millis(value.parse().map_err(|e| bad(&e))?)
                }
                "--name" => options.name = value,
                _ => return Err(format!("unknown option {flag}\n{}", Self::USAGE)),
            }
        }
        if options.demo {
            // A family of its own, so that a demo never shares counts with another run.
            options.name = format!("axum-limit-demo-{:x}", wall_ms());
            options.port = 0;
            // An interval long enough that no flush falls among the demo's requests: a flush
            // starts the instance's own count afresh.
            options.interval = Duration::from_secs(10);
        }
        Ok(options)
    }
}

/// The key of a request: its `x-api-key` header, when it is text.
fn api_key(request: &Request) -> Option<Cow<'_, str>> {
    let key = request.headers().get("x-api-key")?.to_str().ok()?;
    Some(Cow::Borrowed(key))
}

async fn hello(headers: HeaderMap) -> String {
    match headers.get("x-api-key").and_then(|key| key.to_str().ok()) {
        Some(key) => format!("hello, {key}\n"),
        None => "hello\n".into(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let options = Options::parse()?;
    let (family, worker) = match connect(&options.redis_url).await {
        Ok(store) => {
            println!("counting on Redis at {}", options.redis_url);
            family(&options, store)?
        }
        Err(error) => {
            println!(
                "no Redis at {} ({error}): counting on the in-memory store instead",
                options.redis_url
            );
            family(&options, MemoryStore::new())?
        }
    };
    tokio::spawn(worker);

    let limit = RateLimitLayer::new(family, options.limit, api_key);
    let app = Router::new().route("/", get(hello)).layer(limit);
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], options.port))).await?;
    let address = listener.local_addr()?;
    println!(
        "serving on http://{address}/: {} requests per {} ms per x-api-key",
        options.limit,
        options.interval.as_millis()
    );
    if !options.demo {
        axum::serve(listener, app).await?;
        return Ok(());
    }
    tokio::spawn(async move { axum::serve(listener, app).await });
    demo(address, options.limit).await
}

fn family<S: Store>(options: &Options, store: S) -> Result<(Family, Worker), Box<dyn Error>> {
    Ok(Family::builder(&options.name, options.interval)
        .max_keys(100_000)
        .build(store, TokioTimer::new())?)
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

/// Sends `limit` + 3 requests of one key, one after the other: the first `limit` pass, the
/// rest are refused with 429.
async fn demo(address: SocketAddr, limit: u64) -> Result<(), Box<dyn Error>> {
    // The family's first request starts its flushes: the store's first answer, which tells
    // the family its clock and that it answers, comes a round trip later.
    get_status(address, "warm-up").await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut statuses = Vec::new();
    for _ in 0..limit + 3 {
        let (status, retry_after) = get_status(address, "demo").await?;
        println!(
            "x-api-key: demo -> {status}{}",
            retry_after.map_or(String::new(), |s| format!(", Retry-After: {s}"))
        );
        statuses.push(status);
    }
    let expected: Vec<u16> = (0..limit + 3)
        .map(|n| if n < limit { 200 } else { 429 })
        .collect();
    if statuses != expected {
        return Err(format!("expected {expected:?}, got {statuses:?}").into());
    }
    println!("{limit} passed, 3 refused");
    Ok(())
}

/// One `GET /` with `x-api-key: key` over HTTP/1.1: its status and `Retry-After`, if any.
async fn get_status(
    address: SocketAddr,
    key: &str,
) -> Result<(u16, Option<String>), Box<dyn Error>> {
    let mut stream = TcpStream::connect(address).await?;
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {address}\r\nx-api-key: {key}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let mut lines = response.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {response:?}"))?;
    let retry_after = lines.take_while(|line| !line.is_empty()).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("retry-after")
            .then(|| value.trim().to_owned())
    });
    Ok((status, retry_after))
}

fn wall_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}
