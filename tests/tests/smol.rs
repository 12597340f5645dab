//! A whole counter on smol: redis-rs on smol's reactor, the worker spawned on smol, time from
//! the smol timer. And the same pieces under an executor that is neither smol's nor tokio's,
//! as under async-std's: redis-rs's smol runtime and the smol timer drive themselves.

use std::time::{Duration, Instant};

use comcount_core::Counter;
use comcount_core::clock::SmolTimer;
use comcount_core::diagnostics::Recorder;
use comcount_redis_rs::RedisStore;
use comcount_tests::inspect::{Inspector, RedisInspector};
use comcount_tests::settings::{self, sleep};
use comcount_tests::{connect, shared};
use futures::executor::ThreadPool;
use futures::task::SpawnExt;

#[test]
fn a_counter_flushes_to_redis_on_smol() {
    smol::block_on(async {
        let url = shared::standalone_url();
        let interval = settings::interval();
        let prefix = settings::unique_prefix("smol");
        let recorder = Recorder::new();
        let (counter, worker) = Counter::builder("smol", interval)
            .prefix(&prefix)
            .diagnostics(recorder.clone())
            .build(
                RedisStore::new(connect::multiplexed(&url).await),
                SmolTimer::new(),
            )
            .unwrap();
        let worker = smol::spawn(worker);

        counter.increment(4);
        let deadline = Instant::now() + interval * 20 + Duration::from_secs(5);
        while recorder.with_message("flush completed").is_empty() {
            assert!(
                Instant::now() < deadline,
                "no flush completed: {:?}",
                recorder.records()
            );
            sleep(interval / 4).await;
        }
        let completed = &recorder.with_message("flush completed")[0];
        assert_eq!(completed.attribute("amount"), Some("4"));
        let n = completed.attribute("interval").unwrap();
        let inspector = RedisInspector(connect::multiplexed(&url).await);
        let key = format!("{prefix}{{smol}}:{n}");
        assert_eq!(inspector.key(&key).await.unwrap().value, "4");

        counter.close();
        worker.await;
        assert_eq!(recorder.messages().last(), Some(&"counter stopped"));
    });
}

#[test]
fn a_counter_flushes_to_redis_under_another_executor() {
    let pool = ThreadPool::builder().pool_size(2).create().unwrap();
    let spawner = pool.clone();
    let test = async move {
        // No tokio here: redis-rs takes its smol runtime.
        assert!(tokio::runtime::Handle::try_current().is_err());
        let url = shared::standalone_url();
        let interval = settings::interval();
        let prefix = settings::unique_prefix("pool");
        let recorder = Recorder::new();
        let store = RedisStore::connect(&url).await.unwrap();
        let (counter, worker) = Counter::builder("pool", interval)
            .prefix(&prefix)
            .diagnostics(recorder.clone())
            .build(store, SmolTimer::new())
            .unwrap();
        let worker = spawner.spawn_with_handle(worker).unwrap();

        // Counting on, until the group's total comes back from Redis.
        let mut counted = 0;
        let deadline = Instant::now() + interval * 20 + Duration::from_secs(5);
        let total = loop {
            if let Some(total) = counter.group_total().filter(|&total| total > 0) {
                break total;
            }
            assert!(
                Instant::now() < deadline,
                "the group's total never came back: {:?}",
                recorder.records()
            );
            counter.increment(1);
            counted += 1;
            sleep(interval / 4).await;
        };
        assert!(total <= counted, "a total of {total} for {counted} counted");
        // One participant: an interval's key holds its one flush there.
        let completed = &recorder.with_message("flush completed")[0];
        let n = completed.attribute("interval").unwrap();
        let inspector = RedisInspector(connect::multiplexed(&url).await);
        let key = format!("{prefix}{{pool}}:{n}");
        assert_eq!(
            Some(inspector.key(&key).await.unwrap().value.as_str()),
            completed.attribute("amount")
        );
        assert!(recorder.with_message("flush failed").is_empty());
        assert!(recorder.with_message("store caveat").is_empty());

        counter.close();
        worker.await;
        assert_eq!(recorder.messages().last(), Some(&"counter stopped"));
    };
    futures::executor::block_on(pool.spawn_with_handle(test).unwrap());
}
