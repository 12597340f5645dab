//! A counter that is never incremented sends nothing, and nothing reaches Redis after
//! `close()`: counted with `INFO commandstats` on a server of the test's own.

use std::time::{Duration, Instant};

use comcount_core::clock::TokioTimer;
use comcount_core::diagnostics::Recorder;
use comcount_core::{Counter, Store};
use comcount_fred::FredStore;
use comcount_fred::fred::interfaces::ClientLike;
use comcount_fred::fred::types::{ClusterHash, CustomCommand};
use comcount_redis_rs::RedisStore;
use comcount_tests::connect;
use comcount_tests::recording::FlushRecords;
use comcount_tests::server::{RedisServer, command_calls};
use comcount_tests::settings::{self, sleep};
use tokio::task::JoinHandle;

/// How many times the server ran a script (EVAL and EVALSHA).
fn script_calls(port: u16) -> u64 {
    command_calls(port, &["eval", "evalsha"])
}

struct Running {
    counter: Counter,
    worker: JoinHandle<()>,
    recorder: Recorder,
    /// Every call the counter made to its store.
    records: FlushRecords,
}

fn start<S: Store>(store: S) -> Running {
    let recorder = Recorder::new();
    let records = FlushRecords::new();
    let (counter, worker) = Counter::builder("silence", settings::interval())
        .prefix(settings::unique_prefix("silence"))
        .diagnostics(recorder.clone())
        .build(records.wrap(store, 0), TokioTimer::new())
        .unwrap();
    Running {
        counter,
        worker: tokio::spawn(worker),
        recorder,
        records,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_closed_counters_send_nothing() {
    let server = RedisServer::standalone();
    let interval = settings::interval();
    let redis_rs = connect::manager(&server.url()).await;
    let fred = connect::fred_client(&server.url()).await;
    let mut counters = vec![
        start(RedisStore::new(redis_rs.clone())),
        start(FredStore::new(fred.clone())),
    ];

    // Never incremented: three intervals of silence.
    sleep(interval * 3).await;
    assert_eq!(
        script_calls(server.port()),
        0,
        "an idle counter ran the script"
    );
    for running in &counters {
        assert_eq!(running.recorder.messages(), ["counter started"]);
        assert_eq!(running.records.tally().sent, 0, "an idle counter flushed");
    }

    // Incremented: both flush, until closed.
    for running in &counters {
        running.counter.increment(3);
    }
    let deadline = Instant::now() + interval * 20 + Duration::from_secs(5);
    while counters
        .iter()
        .any(|r| r.recorder.with_message("flush completed").len() < 2)
    {
        assert!(Instant::now() < deadline, "the counters never flushed");
        sleep(interval / 4).await;
    }
    assert!(script_calls(server.port()) >= 4);
    for running in &mut counters {
        running.counter.close();
        tokio::time::timeout(Duration::from_secs(10), &mut running.worker)
            .await
            .expect("a worker did not stop after close()")
            .unwrap();
    }
    // A command still on its way would be ahead of these on the same connections.
    let _: String = redis::cmd("PING")
        .query_async(&mut redis_rs.clone())
        .await
        .unwrap();
    let _: String = fred
        .custom(
            CustomCommand::new_static("PING", ClusterHash::Random, false),
            Vec::<String>::new(),
        )
        .await
        .unwrap();
    let after_close = script_calls(server.port());
    let flushes_at_close: Vec<u64> = counters.iter().map(|r| r.records.tally().sent).collect();

    // Closed: counting goes on locally, into the buffer, and nothing takes it from there.
    let mut held = Vec::new();
    for running in &counters {
        assert!(running.counter.is_closed());
        let before = running.counter.buffered();
        let count = running.counter.increment(5);
        assert_eq!(
            running.counter.buffered(),
            before + 5,
            "a closed counter did not keep its increment"
        );
        assert!(count >= before + 5, "the count {count} left out the buffer");
        held.push(before + 5);
    }
    sleep(interval * 3).await;
    assert_eq!(
        script_calls(server.port()),
        after_close,
        "a closed counter ran the script"
    );
    for ((running, held), flushes) in counters.iter().zip(held).zip(flushes_at_close) {
        assert_eq!(running.recorder.messages().last(), Some(&"counter stopped"));
        assert_eq!(
            running.counter.buffered(),
            held,
            "a closed counter's buffer was taken for a flush"
        );
        assert_eq!(
            running.records.tally().sent,
            flushes,
            "a closed counter called its store"
        );
    }
}
