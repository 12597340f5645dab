//! 3. Events: counters against one INCRBY per event.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use comcount_core::Counter;
use comcount_core::clock::TokioTimer;
use comcount_redis_rs::RedisStore;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

use crate::WARMUP;
use crate::server::{Snapshot, clear, participant_connection};

/// The interval of the counters in the events comparison.
pub(crate) const EVENTS_INTERVAL: Duration = Duration::from_millis(100);

/// Participants (processes, one connection each) in the events comparison.
pub(crate) const EVENT_PARTICIPANTS: usize = 8;

/// Tasks per participant that each handle events one after the other, like request handlers.
pub(crate) const TASKS_PER_PARTICIPANT: usize = 8;

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Design {
    /// `Counter::increment` per event; the counters flush.
    Counters,
    /// One `INCRBY` per event, awaited by the task that handles the event.
    Naive,
}

pub(crate) struct EventRow {
    pub(crate) design: Design,
    pub(crate) offered: f64,
    pub(crate) seconds: f64,
    pub(crate) events: u64,
    /// Top-level commands the design sent: `evalsha` or `incrby`.
    pub(crate) commands: u64,
    pub(crate) redis_cpu: f64,
    pub(crate) client_cpu: f64,
}

/// Drives `rate` events a second, spread over the participants' tasks, through `design`.
pub(crate) async fn event_run(
    url: &str,
    stats: &mut MultiplexedConnection,
    design: Design,
    rate: f64,
    window: Duration,
) -> EventRow {
    clear(stats).await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks = EVENT_PARTICIPANTS * TASKS_PER_PARTICIPANT;
    let per_task = rate / tasks as f64;
    let mut drivers = Vec::new();
    let mut counters = Vec::new();
    let start = tokio::time::Instant::now();
    for _ in 0..EVENT_PARTICIPANTS {
        let connection = participant_connection(url).await;
        let counter = match design {
            Design::Counters => {
                let (counter, worker) = Counter::builder("events", EVENTS_INTERVAL)
                    .prefix("events:")
                    .build(RedisStore::new(connection.clone()), TokioTimer::new())
                    .expect("the settings are valid");
                tokio::spawn(worker);
                counters.push(counter.clone());
                Some(counter)
            }
            Design::Naive => None,
        };
        for _ in 0..TASKS_PER_PARTICIPANT {
            let mut connection = connection.clone();
            let counter = counter.clone();
            let stop = Arc::clone(&stop);
            let done = Arc::clone(&done);
            drivers.push(tokio::spawn(async move {
                let mut handled = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Events arrive on a fixed schedule; a task that falls behind works
                    // through its backlog without pause.
                    let due = (start.elapsed().as_secs_f64() * per_task) as u64;
                    while handled < due && !stop.load(Ordering::Relaxed) {
                        match &counter {
                            Some(counter) => {
                                counter.increment(1);
                            }
                            None => {
                                let _: u64 = connection
                                    .incr("naive:{events}", 1u64)
                                    .await
                                    .expect("INCRBY answers");
                            }
                        }
                        handled += 1;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }));
        }
    }
    tokio::time::sleep(WARMUP).await;
    let events_before = done.load(Ordering::Relaxed);
    let before = Snapshot::take(stats).await;
    tokio::time::sleep(window).await;
    let after = Snapshot::take(stats).await;
    let events_after = done.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for driver in drivers {
        driver.await.expect("a driver ends");
    }
    for counter in &counters {
        counter.close();
    }
    let command = match design {
        Design::Counters => "evalsha",
        Design::Naive => "incrby",
    };
    EventRow {
        design,
        offered: rate,
        seconds: (after.at - before.at).as_secs_f64(),
        events: events_after - events_before,
        commands: after.command_since(&before, command).0,
        redis_cpu: after.redis_cpu - before.redis_cpu,
        client_cpu: after.client_cpu - before.client_cpu,
    }
}
