//! A server whose `maxmemory-policy` may evict a participant's fence is warned of, once per
//! store, as the first flush goes; one with `noeviction` is not. Through both stores, on
//! servers the test starts with each policy.

use std::sync::Arc;

use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::{FlushRequest, KeySpace, ParticipantId, Store};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::connect;
use comcount_tests::server::RedisServer;
use comcount_tests::settings;

/// The `store caveat` events two flushes through `store` report.
async fn caveats<S: Store>(store: &S) -> Vec<String> {
    let recorder = Recorder::new();
    let report = Reporter::new("eviction", Arc::new(recorder.clone()));
    let interval_ms = u64::try_from(settings::interval().as_millis()).unwrap();
    for _ in 0..2 {
        let space = KeySpace::counter(&settings::unique_prefix("eviction"), "c");
        let request = FlushRequest::new(space, ParticipantId::random(), interval_ms).with_amount(1);
        // Whatever the outcome (a first flush aimed at interval 0 lands in the wrong one): the
        // policy is read before it.
        store.flush(&request, &report).await.unwrap();
    }
    recorder
        .with_message("store caveat")
        .iter()
        .map(|r| r.attribute("caveat").unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_can_evict_a_fence_is_a_store_caveat_and_noeviction_is_not() {
    for policy in ["allkeys-lru", "volatile-lru", "volatile-ttl", "noeviction"] {
        let server = RedisServer::start_with(&["--maxmemory-policy", policy]);
        let redis_rs = RedisStore::new(connect::manager(&server.url()).await);
        let fred = FredStore::new(connect::fred_client(&server.url()).await);
        for (store, caveats) in [
            ("redis-rs", caveats(&redis_rs).await),
            ("fred", caveats(&fred).await),
        ] {
            if policy == "noeviction" {
                assert!(caveats.is_empty(), "{store} under {policy}: {caveats:?}");
            } else {
                assert_eq!(caveats.len(), 1, "{store} under {policy}: {caveats:?}");
                assert!(
                    caveats[0].contains(policy) && caveats[0].contains("noeviction"),
                    "{store} under {policy}: {}",
                    caveats[0]
                );
            }
        }
    }
}
