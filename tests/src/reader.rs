//! Reading a counter's interval keys, or every partition's hashes of a family, straight from
//! Redis while a fleet counts, before they expire: the evidence of what Redis really held, key
//! by key, for the [`invariants`](crate::invariants).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use comcount_core::{KeySpace, Layout};
use redis::aio::MultiplexedConnection;

use crate::invariants::PerKey;

/// Milliseconds since the epoch by this machine's clock, which the test servers share.
pub fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// One interval key read from Redis: a counter's total, or a family partition's hash.
#[derive(Clone, Debug)]
pub struct Read {
    /// The base of the key space read ([`KeySpace::base`]): the counter's, or the partition's.
    pub space: String,
    /// The interval number of the key read.
    pub interval: u64,
    /// The totals it held, key by key: a family partition's fields, or a counter's one total
    /// under the empty key; `None` where the key did not exist.
    pub totals: Option<PerKey>,
    /// When the read was sent, by the machine's clock in ms ([`now_ms`]).
    pub at_ms: u64,
    /// The server's port, where it was read from one server; `None` through a client.
    pub port: Option<u16>,
}

/// The reads of one fleet; clones share them.
#[derive(Clone, Default)]
pub struct Reads(Arc<Mutex<Vec<Read>>>);

impl Reads {
    /// Notes one read.
    pub fn push(&self, read: Read) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(read);
    }

    /// Every read so far.
    pub fn all(&self) -> Vec<Read> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Where the reader reads the interval keys.
pub enum ReadFrom {
    /// A standalone server's port (not a proxy's: the reader must not suffer the fault).
    Server(u16),
    /// Every node of a cluster. Each key is asked of every node, the importing node of a
    /// migrating slot with `ASKING`; nodes that do not hold the key answer with an error.
    Cluster(Vec<u16>),
}

/// Reads the interval keys of each of `spaces` for the intervals around now, every third of an
/// interval, until `stop`, then once more: the last closed intervals are final by then.
pub async fn read_loop(
    from: ReadFrom,
    spaces: Vec<KeySpace>,
    interval: Duration,
    reads: Reads,
    stop: Arc<AtomicBool>,
) {
    let (ports, cluster) = match from {
        ReadFrom::Server(port) => (vec![port], false),
        ReadFrom::Cluster(ports) => (ports, true),
    };
    let mut connections: HashMap<u16, MultiplexedConnection> = HashMap::new();
    loop {
        let last = stop.load(Ordering::SeqCst);
        for &port in &ports {
            read_round(port, cluster, &spaces, interval, &mut connections, &reads).await;
        }
        if last {
            return;
        }
        tokio::time::sleep(interval / 3).await;
    }
}

async fn read_round(
    port: u16,
    cluster: bool,
    spaces: &[KeySpace],
    interval: Duration,
    connections: &mut HashMap<u16, MultiplexedConnection>,
    reads: &Reads,
) {
    let limit = interval.max(Duration::from_millis(200));
    let mut connection = match connections.get(&port) {
        Some(connection) => connection.clone(),
        None => {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(limit))
                .set_response_timeout(Some(limit));
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
            match client
                .get_multiplexed_async_connection_with_config(&config)
                .await
            {
                Ok(connection) => {
                    connections.insert(port, connection.clone());
                    connection
                }
                Err(_) => return,
            }
        }
    };
    let at_ms = now_ms();
    let interval_ms = u64::try_from(interval.as_millis()).unwrap();
    let now = at_ms / interval_ms;
    let numbers: Vec<u64> = (now.saturating_sub(3)..=now + 1).collect();
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for space in spaces {
        for n in &numbers {
            if cluster {
                pipe.cmd("ASKING").ignore();
            }
            let read = match space.layout() {
                Layout::Family => "HGETALL",
                _ => "GET",
            };
            pipe.cmd(read).arg(space.interval(*n));
        }
    }
    let values: Vec<redis::RedisResult<redis::Value>> =
        match pipe.query_async(&mut connection).await {
            Ok(values) => values,
            Err(_) => {
                // A dead or hung connection: a new one next round.
                connections.remove(&port);
                return;
            }
        };
    let keys = spaces
        .iter()
        .flat_map(|space| numbers.iter().map(move |n| (space, *n)));
    for ((space, n), value) in keys.zip(values) {
        // A node that does not hold the key answers with an error (MOVED, ASK).
        if let Ok(value) = value {
            reads.push(Read {
                space: space.base().to_owned(),
                interval: n,
                totals: totals(space, n, value),
                at_ms,
                port: Some(port),
            });
        }
    }
}

/// What the interval key `n` of `space` held, as read: an integer, or a family hash of totals.
fn totals(space: &KeySpace, n: u64, value: redis::Value) -> Option<PerKey> {
    let key = space.interval(n);
    match space.layout() {
        Layout::Family => {
            let hash: Vec<(Vec<u8>, Vec<u8>)> = redis::from_redis_value(value)
                .unwrap_or_else(|e| panic!("{key} does not hold a hash: {e}"));
            let totals = crate::inspect::family_totals(&hash)
                .unwrap_or_else(|e| panic!("{key} does not hold totals: {e}"));
            (!totals.is_empty()).then(|| totals.into_iter().collect())
        }
        _ => {
            let total: Option<u64> = redis::from_redis_value(value)
                .unwrap_or_else(|e| panic!("{key} does not hold a total: {e}"));
            total.map(PerKey::counter)
        }
    }
}
