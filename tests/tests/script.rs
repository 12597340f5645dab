//! The flush script itself, driven with plain EVAL on a real Redis: every outcome, the window of
//! intervals a copy may land in, refusals that leave the server as it was, arguments out of
//! range, and an overflowing amount that writes nothing.
//!
//! `COMCOUNT_SCRIPT_SOURCE`, when set, names a file whose Lua runs instead of the script's own
//! source: the script-mutant harness (`cargo run -p comcount-tests --example script_mutants`)
//! uses it to check that each of its edits of the script fails some test here.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::script::{self, Field};
use comcount_core::{
    FlushReply, FlushRequest, Outcome, ParticipantId, Store, StoreError, StoreErrorKind,
};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::conformance::{Requests, aim, assert_unchanged, check_store, expect, flush};
use comcount_tests::inspect::{Inspector, RedisInspector};
use comcount_tests::{connect, settings, shared};
use redis::Value;
use redis::aio::MultiplexedConnection;

/// The Lua to run: the script's source, or the file `COMCOUNT_SCRIPT_SOURCE` names.
fn source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| match std::env::var_os("COMCOUNT_SCRIPT_SOURCE") {
        Some(path) => std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("COMCOUNT_SCRIPT_SOURCE={path:?}: {e}")),
        None => script::SOURCE.to_owned(),
    })
}

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
        eval.arg(source())
            .arg(request.keys().len())
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

/// Runs the script with raw keys and arguments, as a client that builds them wrong would.
async fn eval_raw(keys: &[String], args: &[String]) -> redis::RedisResult<Value> {
    let mut connection = connect::multiplexed(&shared::standalone_url()).await;
    redis::cmd("EVAL")
        .arg(source())
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query_async(&mut connection)
        .await
}

/// Runs `steps` in a fresh interval `n` of the server's clock, starting over when a step
/// slips over an interval boundary.
async fn in_an_interval<F, Fut>(store: &Eval, steps: F)
where
    F: Fn(Requests, u64) -> Fut,
    Fut: Future<Output = Result<(), comcount_tests::conformance::Slipped>>,
{
    for _ in 0..5 {
        let requests = Requests::fresh(settings::interval());
        let Ok(n) = aim(store, &requests, 0).await else {
            continue;
        };
        if steps(requests, n).await.is_ok() {
            return;
        }
    }
    panic!("every attempt slipped over an interval boundary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_landing_one_interval_late_is_applied() {
    let (store, inspector) = eval_store().await;
    let (store, inspector) = (&store, &inspector);
    in_an_interval(store, |requests, n| async move {
        let participant = ParticipantId::random();
        let reply = flush(store, &requests.flush(participant, 1, 3, n - 1)).await;
        expect(&reply, Outcome::Applied, n)?;
        assert_eq!(reply.counted_in, Some(n));
        assert_eq!(
            inspector.keys(&requests.key_base).await,
            [requests.interval_key(n), requests.fence_key(participant)]
        );
        let total = inspector.key(&requests.interval_key(n)).await.unwrap();
        assert_eq!(total.value, "3");
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_landing_one_interval_early_is_applied() {
    let (store, inspector) = eval_store().await;
    let (store, inspector) = (&store, &inspector);
    in_an_interval(store, |requests, n| async move {
        let participant = ParticipantId::random();
        let reply = flush(store, &requests.flush(participant, 1, 3, n + 1)).await;
        expect(&reply, Outcome::Applied, n)?;
        assert_eq!(reply.counted_in, Some(n));
        assert_eq!(
            inspector.keys(&requests.key_base).await,
            [requests.interval_key(n), requests.fence_key(participant)]
        );
        let fence = inspector
            .key(&requests.fence_key(participant))
            .await
            .unwrap();
        assert_eq!(fence.value, format!("1:{n}"));
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_intervals_off_is_a_wrong_interval_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    let (store, inspector) = (&store, &inspector);
    in_an_interval(store, |requests, n| async move {
        let participant = ParticipantId::random();
        for off in [n - 2, n + 2] {
            let reply = flush(store, &requests.flush(participant, 1, 3, off)).await;
            expect(&reply, Outcome::WrongInterval, n)?;
            assert_eq!(reply.counted_in, None);
            assert_eq!(reply.previous_total, None);
            assert!(inspector.snapshot(&requests.key_base).await.is_empty());
        }
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_reports_the_interval_the_flush_was_applied_in() {
    let (store, inspector) = eval_store().await;
    for _ in 0..5 {
        let requests = Requests::fresh(settings::interval());
        let participant = ParticipantId::random();
        let Ok(n) = aim(&store, &requests, 0).await else {
            continue;
        };
        // Aimed at n+1, landing early in n.
        let request = requests.flush(participant, 1, 3, n + 1);
        let reply = flush(&store, &request).await;
        if expect(&reply, Outcome::Applied, n).is_err() {
            continue;
        }
        // The same flush again in n+1, its own interval: a duplicate, counted in n.
        let Ok(m) = aim(&store, &requests, n + 1).await else {
            continue;
        };
        if m != n + 1 {
            continue;
        }
        let before = inspector.snapshot(&requests.key_base).await;
        let reply = flush(&store, &request).await;
        if expect(&reply, Outcome::Duplicate, m).is_err() {
            continue;
        }
        assert_eq!(reply.counted_in, Some(n), "{reply:?}");
        assert_unchanged(
            &before,
            &inspector.snapshot(&requests.key_base).await,
            "a duplicate",
        );
        return;
    }
    panic!("every attempt slipped over an interval boundary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_argument_is_an_err_reply_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    let requests = Requests::fresh(settings::interval());
    let participant = ParticipantId::random();
    // Some state to leave alone: an applied flush, its interval key and fence.
    let n = aim(&store, &requests, 0).await.unwrap();
    let applied = flush(&store, &requests.flush(participant, 1, 5, n)).await;
    assert!(applied.outcome.is_counted(), "{applied:?}");
    let request = requests.flush(participant, 2, 5, n);
    let keys = request.keys();
    let good = script::arguments(&request);
    let bad: &[(usize, &str)] = &[
        (0, "-1"),
        (0, "0"),
        (0, "1.5"),
        (0, "abc"),
        (0, ""),
        (0, "01"),
        (0, " 2"),
        (0, "1e3"),
        (0, "0x10"),
        (0, "9007199254740992"),
        (0, "99999999999999999999999999999999"),
        (1, "-5"),
        (1, "5.0"),
        (1, "five"),
        (1, "9223372036854775808"),
        (1, "18446744073709551616"),
        (2, "0"),
        (2, "-300"),
        (2, "300.5"),
        (2, "inf"),
        (2, "3002399751580331"),
        (3, "-1"),
        (3, "nan"),
        (3, "1.0"),
        (3, "9007199254740992"),
        (4, "0"),
        (4, "-1"),
        (4, "600000.5"),
        (4, "9007199254740992"),
    ];
    for &(index, value) in bad {
        let mut args = good.clone();
        args[index] = value.to_owned();
        let what = format!("ARGV[{}] = {value:?}", index + 1);
        let before = inspector.snapshot(&requests.key_base).await;
        let error = eval_raw(&keys, &args)
            .await
            .expect_err(&format!("{what} was accepted"));
        assert_eq!(error.code(), Some("ERR"), "{what}: {error}");
        assert!(
            error.detail().is_some_and(|d| d.starts_with("comcount: ")),
            "{what}: {error}"
        );
        assert!(
            error.to_string().contains(&format!("ARGV[{}]", index + 1)),
            "{what}: {error}"
        );
        assert_unchanged(
            &before,
            &inspector.snapshot(&requests.key_base).await,
            &what,
        );
    }
    // The old script's three keys are refused the same way.
    let error = eval_raw(&keys[2..], &good).await.unwrap_err();
    assert_eq!(error.code(), Some("ERR"), "{error}");
    // And the largest arguments in range are accepted.
    let largest = [
        "9007199254740991",
        "0",
        "3002399751580330",
        "9007199254740991",
        "9007199254740991",
    ]
    .map(String::from);
    let value = eval_raw(&keys, &largest).await.unwrap();
    assert_eq!(decode(&value).unwrap().outcome, Outcome::WrongInterval);
}

/// Too few or too many keys or arguments: an error reply that says what the script expects,
/// and nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_count_of_keys_or_arguments_is_refused_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    let requests = Requests::fresh(settings::interval());
    let n = aim(&store, &requests, 0).await.unwrap();
    let request = requests.flush(ParticipantId::random(), 1, 5, n);
    let keys = request.keys().to_vec();
    let args = script::arguments(&request).to_vec();
    let more_keys = [keys.clone(), vec![keys[4].clone()]].concat();
    let more_args = [args.clone(), vec!["1".to_owned()]].concat();
    let cases: [(&str, &[String], &[String]); 4] = [
        ("three keys", &keys[2..], &args),
        ("six keys", &more_keys, &args),
        ("four arguments", &keys, &args[..4]),
        ("six arguments", &keys, &more_args),
    ];
    for (what, keys, args) in cases {
        let before = inspector.snapshot(&requests.key_base).await;
        let error = eval_raw(keys, args)
            .await
            .expect_err(&format!("{what} were accepted"));
        assert_eq!(error.code(), Some("ERR"), "{what}: {error}");
        assert!(
            error
                .to_string()
                .contains("expected 5 keys and 5 arguments"),
            "{what}: {error}"
        );
        assert_unchanged(&before, &inspector.snapshot(&requests.key_base).await, what);
    }
}

/// The server's time in milliseconds.
async fn server_ms(connection: &mut MultiplexedConnection) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(connection).await.unwrap();
    seconds * 1000 + micros / 1000
}

/// The reply places the server's clock: its interval times the interval length, plus its
/// phase, is the time the script ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reply_gives_the_servers_interval_and_phase() {
    let (store, _) = eval_store().await;
    let mut connection = connect::multiplexed(&shared::standalone_url()).await;
    let requests = Requests::fresh(settings::interval());
    for expect in [0, 1 << 52] {
        let before = server_ms(&mut connection).await;
        let reply = flush(
            &store,
            &requests.flush(ParticipantId::random(), 1, 1, expect),
        )
        .await;
        let after = server_ms(&mut connection).await;
        assert_eq!(reply.outcome, Outcome::WrongInterval, "{reply:?}");
        assert!(reply.phase.as_millis() < u128::from(requests.interval_ms));
        let ran = reply.interval * requests.interval_ms + reply.phase.as_millis() as u64;
        assert!(
            (before..=after).contains(&ran),
            "the reply puts the server at {ran} ms, outside {before}..={after}: {reply:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_stores_report_a_script_refusal_as_refused() {
    let url = shared::standalone_url();
    let redis_rs = RedisStore::new(connect::multiplexed(&url).await);
    let fred = FredStore::new(connect::fred_client(&url).await);
    let inspector = RedisInspector(connect::multiplexed(&url).await);
    let requests = Requests::fresh(settings::interval());
    let participant = ParticipantId::random();
    let mut connection = connect::multiplexed(&url).await;
    let _: () = redis::cmd("SET")
        .arg(requests.fence_key(participant))
        .arg("garbage")
        .query_async(&mut connection)
        .await
        .unwrap();
    let n = aim(&redis_rs, &requests, 0).await.unwrap();
    let before = inspector.snapshot(&requests.key_base).await;
    let out_of_range = requests.flush(ParticipantId::random(), 1 << 53, 1, n);
    // The broken fence is only read in the window: aim at the interval found, and accept a
    // wrong interval should the clock move on in between.
    let broken_fence = requests.flush(participant, 1, 1, n);
    for request in [out_of_range, broken_fence] {
        for (name, result) in [
            ("redis-rs", redis_rs.flush(&request, &reporter()).await),
            ("fred", fred.flush(&request, &reporter()).await),
        ] {
            match result {
                Err(error) => {
                    assert_eq!(error.kind(), StoreErrorKind::Refused, "{name}: {error}");
                    assert!(error.to_string().contains("comcount: "), "{name}: {error}");
                }
                Ok(reply) => assert_eq!(reply.outcome, Outcome::WrongInterval, "{name}"),
            }
            assert_unchanged(&before, &inspector.snapshot(&requests.key_base).await, name);
        }
    }
}

fn reporter() -> Reporter {
    Reporter::new("script", Arc::new(Recorder::new()))
}
