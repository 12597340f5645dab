//! A whole counter on smol: redis-rs on smol's reactor, the worker spawned on smol, time from
//! the smol timer.

use std::time::{Duration, Instant};

use comcount_core::Counter;
use comcount_core::clock::SmolTimer;
use comcount_core::diagnostics::Recorder;
use comcount_redis_rs::RedisStore;
use comcount_tests::inspect::{Inspector, RedisInspector};
use comcount_tests::settings::{self, sleep};
use comcount_tests::{connect, shared};

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
