//! What a run records: the store's clock, what it held, what its replies told, and the rows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use comcount_redis_rs::redis::aio::ConnectionManager;
use comcount_redis_rs::testing::FlushLog;
use comcount_redis_rs::{
    FlushReply, FlushRequest, KeySpace, MemoryStore, Outcome, StoreError, redis,
};

use crate::options::Fault;

pub(crate) fn wall_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// The store's clock, as this machine's clock and the offset measured at the start: the store
/// numbers the intervals.
#[derive(Clone, Copy)]
pub(crate) struct StoreClock {
    offset_ms: i64,
}

impl StoreClock {
    pub(crate) fn now_ms(self) -> u64 {
        wall_ms().saturating_add_signed(self.offset_ms)
    }
}

/// Reads what the store holds, for the demo's own figures.
#[derive(Clone)]
pub(crate) enum Reader {
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
    pub(crate) async fn clock(&mut self) -> redis::RedisResult<StoreClock> {
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
pub(crate) struct Held(Mutex<BTreeMap<u64, u64>>);

impl Held {
    /// Reads the totals of the intervals whose keys may still change or be read by a
    /// participant: the current one and the two before.
    pub(crate) async fn read(
        &self,
        reader: &mut Reader,
        space: &KeySpace,
        current: u64,
        wait: Duration,
    ) {
        for n in current.saturating_sub(2)..=current {
            let reading = tokio::time::timeout(wait, reader.held(&space.interval(n))).await;
            if let Ok(Ok(Some(total))) = reading {
                let mut held = lock(&self.0);
                let entry = held.entry(n).or_default();
                *entry = (*entry).max(total);
            }
        }
    }

    pub(crate) fn get(&self, interval: u64) -> Option<u64> {
        lock(&self.0).get(&interval).copied()
    }

    pub(crate) fn sum_from(&self, first: u64) -> u64 {
        lock(&self.0).range(first..).map(|(_, total)| total).sum()
    }
}

/// The participants' flush records, exactly as the store's replies gave them.
#[derive(Default)]
pub(crate) struct Ledger(Mutex<Records>);

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

    pub(crate) fn failures(&self, interval: u64) -> u64 {
        lock(&self.0).failed.get(&interval).copied().unwrap_or(0)
    }

    pub(crate) fn counted(&self, interval: u64) -> u64 {
        lock(&self.0).counted.get(&interval).copied().unwrap_or(0)
    }

    pub(crate) fn told(&self, interval: u64) -> (Option<u64>, usize) {
        match lock(&self.0).told.get(&interval) {
            Some((total, whom)) => (Some(*total), whom.len()),
            None => (None, 0),
        }
    }
}

/// Writes every reply a participant's store passes on into the ledger, and every error into
/// the interval of the store's clock it came back in.
pub(crate) struct Clerk {
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) clock: StoreClock,
    pub(crate) interval_ms: u64,
}

impl FlushLog for Clerk {
    /// The participant, sequence number and amount of the copy.
    type Sent = (u64, u64, u64);

    fn sent(&self, request: &FlushRequest) -> Self::Sent {
        (request.participant.as_u64(), request.seq, request.amount())
    }

    fn answered(&self, which: Self::Sent, answer: &Result<FlushReply, StoreError>) {
        match answer {
            Ok(reply) => self.ledger.record(which, reply),
            Err(_) => self.ledger.failed(self.clock.now_ms() / self.interval_ms),
        }
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One row of the table: an interval of the store's clock, once it has closed.
#[derive(Clone, Copy)]
pub(crate) struct Row {
    pub(crate) interval: u64,
    /// When it began, in seconds from the start of the run.
    pub(crate) at_s: f64,
    /// What the participants' flushes added to it, as the store's replies said.
    pub(crate) counted: u64,
    /// What the store holds for it.
    pub(crate) held: Option<u64>,
    /// The largest total of it a participant was told.
    pub(crate) told: Option<u64>,
    /// How many participants were told one.
    pub(crate) told_to: usize,
    /// Copies of flushes that came back with an error during it.
    pub(crate) failed: u64,
    /// Whether the fault was on during it.
    pub(crate) faulted: bool,
}

impl Row {
    pub(crate) fn overcounts(&self) -> bool {
        self.told.unwrap_or(0) > self.held.unwrap_or(0)
    }

    pub(crate) fn print(&self, participants: usize, fault: Option<Fault>) {
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
pub(crate) struct Report {
    pub(crate) rows: Vec<Row>,
    /// When the fault was on, in seconds from the start of the run.
    pub(crate) fault: Option<(Fault, f64, f64)>,
    pub(crate) truthful: bool,
}
