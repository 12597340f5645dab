//! The flush script itself, driven with plain EVAL on a real Redis: every outcome, refusals
//! that leave the server as it was, and an overflowing amount that writes nothing.

use std::future::Future;
use std::sync::Arc;

use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::script::{self, Field};
use comcount_core::{FlushReply, FlushRequest, Outcome, ParticipantId, Store, StoreError};
use comcount_tests::conformance::{Requests, aim, assert_unchanged, check_store, expect};
use comcount_tests::inspect::{Inspector, RedisInspector};
use comcount_tests::{connect, settings, shared};
use redis::Value;
use redis::aio::MultiplexedConnection;

/// Runs the script with EVAL and its full source: no store code in between.
struct Eval(MultiplexedConnection);

impl Store for Eval {
    fn name(&self) -> &str {
        "eval"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        _report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let mut connection = self.0.clone();
        let mut eval = redis::cmd("EVAL");
        eval.arg(script::SOURCE)
            .arg(3)
            .arg(&request.keys()[..])
            .arg(&script::arguments(request)[..]);
        async move {
            let value: Value = eval
                .query_async(&mut connection)
                .await
                .map_err(StoreError::refused)?;
            decode(&value)
        }
    }
}

fn decode(value: &Value) -> Result<FlushReply, StoreError> {
    let Value::Array(items) = value else {
        return Err(StoreError::malformed(format!("{value:?}")));
    };
    let fields: Vec<Field<'_>> = items
        .iter()
        .map(|item| match item {
            Value::Int(n) => Field::Int(*n),
            Value::BulkString(bytes) => Field::Bytes(bytes),
            Value::Nil => Field::Nil,
            other => panic!("the script returned {other:?}"),
        })
        .collect();
    script::decode(&fields)
}

async fn eval_store() -> (Eval, RedisInspector<MultiplexedConnection>) {
    let url = shared::standalone_url();
    (
        Eval(connect::multiplexed(&url).await),
        RedisInspector(connect::multiplexed(&url).await),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_outcome_on_a_real_redis() {
    let (store, inspector) = eval_store().await;
    check_store(&store, &inspector).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflowing_total_is_an_error_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    let mut connection = connect::multiplexed(&shared::standalone_url()).await;
    let requests = Requests::fresh(settings::interval());
    let base = &*requests.key_base;
    for _ in 0..5 {
        let n = aim(&store, &requests, 0).await.unwrap();
        let key = requests.interval_key(n);
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(i64::MAX - 1)
            .arg("PX")
            .arg(60_000)
            .query_async(&mut connection)
            .await
            .unwrap();
        let before = inspector.snapshot(base).await;
        let participant = ParticipantId::random();
        let result = store
            .flush(&requests.flush(participant, 1, 2, n), &reporter())
            .await;
        match result {
            Err(error) => {
                assert!(error.to_string().contains("overflow"), "{error}");
                let after = inspector.snapshot(base).await;
                assert_unchanged(&before, &after, "an overflowing flush");
                assert!(
                    inspector
                        .key(&requests.fence_key(participant))
                        .await
                        .is_none()
                );
                return;
            }
            // The interval ended between aiming and flushing: a wrong interval, try again.
            Ok(reply) => assert_eq!(reply.outcome, Outcome::WrongInterval, "{reply:?}"),
        }
    }
    panic!("never managed to flush into the interval it aimed at");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_that_is_not_a_fence_is_an_error_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    let mut connection = connect::multiplexed(&shared::standalone_url()).await;
    let requests = Requests::fresh(settings::interval());
    let participant = ParticipantId::random();
    let _: () = redis::cmd("SET")
        .arg(requests.fence_key(participant))
        .arg("garbage")
        .query_async(&mut connection)
        .await
        .unwrap();
    for _ in 0..5 {
        let n = aim(&store, &requests, 0).await.unwrap();
        let before = inspector.snapshot(&requests.key_base).await;
        let result = store
            .flush(&requests.flush(participant, 1, 2, n), &reporter())
            .await;
        match result {
            Err(error) => {
                assert!(error.to_string().contains("is not a fence"), "{error}");
                let after = inspector.snapshot(&requests.key_base).await;
                assert_unchanged(&before, &after, "a flush against a broken fence");
                return;
            }
            Ok(reply) => {
                if expect(&reply, Outcome::Applied, n).is_ok() {
                    panic!("a broken fence was overwritten: {reply:?}");
                }
            }
        }
    }
    panic!("never managed to flush into the interval it aimed at");
}

fn reporter() -> Reporter {
    Reporter::new("script", Arc::new(Recorder::new()))
}
