//! The flush script itself, driven with plain EVAL on a real Redis: every outcome, the window of
//! intervals a copy may land in, refusals that leave the server as it was, arguments out of
//! range, and an overflowing amount that writes nothing; for a counter's integer keys and for
//! a family partition's hashes.
//!
//! `COMCOUNT_SCRIPT_SOURCE`, when set, names a file whose Lua runs instead of the script's own
//! source: the script-mutant harness (`cargo run -p comcount-tests --example script_mutants`)
//! uses it to check that each of its edits of the script fails some test here.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use comcount_core::diagnostics::{Recorder, Reporter};
use comcount_core::script::{self, Field};
use comcount_core::{
    FlushReply, FlushRequest, KeySpace, Outcome, ParticipantId, Store, StoreError, StoreErrorKind,
};
use comcount_fred::FredStore;
use comcount_redis_rs::RedisStore;
use comcount_tests::conformance::family::FamilyRequests;
use comcount_tests::conformance::{
    Requests, Slipped, aim, assert_unchanged, check_store, expect, flush,
};
use comcount_tests::inspect::{Inspector, RedisInspector, Snapshot};
use comcount_tests::{connect, inspect, settings, shared};
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
            .arg(&request.keys()[..]);
        for argument in script::arguments(request) {
            eval.arg(&argument[..]);
        }
        async move {
            let value: Value = eval
                .query_async(&mut connection)
                .await
                .map_err(StoreError::refused)?;
            decode(request, &value)
        }
    }
}

/// The fields of the script's reply.
fn fields(value: &Value) -> Vec<Field<'_>> {
    let Value::Array(items) = value else {
        panic!("the script returned {value:?}");
    };
    items
        .iter()
        .map(|item| match item {
            Value::Int(n) => Field::Int(*n),
            Value::BulkString(bytes) => Field::Bytes(bytes),
            Value::Nil => Field::Nil,
            other => panic!("the script returned {other:?}"),
        })
        .collect()
}

fn decode(request: &FlushRequest, value: &Value) -> Result<FlushReply, StoreError> {
    script::decode(request, &fields(value))
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
    let base = requests.base();
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
        let before = inspector.snapshot(requests.base()).await;
        let result = store
            .flush(&requests.flush(participant, 1, 2, n), &reporter())
            .await;
        match result {
            Err(error) => {
                assert!(error.to_string().contains("is not a fence"), "{error}");
                let after = inspector.snapshot(requests.base()).await;
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

/// Keys under the counter's prefix that another program wrote, each where the script reads or
/// writes: the interval before (a hash, a word, a negative number), the interval flushed into
/// (a hash, a word) and the fence (a hash). Each refuses the flush with an `ERR comcount:`
/// reply that names the key and says what to do, and leaves every key as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_another_program_wrote_refuses_the_flush_with_an_err_comcount_reply() {
    let (store, inspector) = eval_store().await;
    let (store, inspector) = (&store, &inspector);
    let previous = |n: u64| n - 1;
    let current = |n: u64| n;
    type Where = fn(u64) -> u64;
    let cases: [(&str, &str, Option<Where>); 6] = [
        ("HSET", "a hash", Some(previous)),
        ("SET", "abc", Some(previous)),
        ("SET", "-5", Some(previous)),
        ("HSET", "a hash", Some(current)),
        ("SET", "abc", Some(current)),
        ("HSET", "a hash", None),
    ];
    for (command, value, interval) in cases {
        in_an_interval(store, |requests, n| async move {
            let participant = ParticipantId::random();
            let key = match interval {
                Some(at) => requests.interval_key(at(n)),
                None => requests.fence_key(participant),
            };
            let mut write = redis::cmd(command);
            write.arg(&key);
            if command == "HSET" {
                write.arg("field");
            }
            let mut connection = connect::multiplexed(&shared::standalone_url()).await;
            let _: () = write.arg(value).query_async(&mut connection).await.unwrap();
            let before = inspector.snapshot(requests.base()).await;
            let what = format!("{command} {key} {value:?}");
            match store
                .flush(&requests.flush(participant, 1, 2, n), &reporter())
                .await
            {
                Err(error) => {
                    let text = error.to_string();
                    assert!(
                        text.contains(&format!("comcount: {key} is not ")),
                        "{what}: {text}"
                    );
                    assert!(
                        text.contains("Delete the key or change the prefix"),
                        "{what}: {text}"
                    );
                }
                // Only the clock moving on between aiming and flushing may answer it.
                Ok(reply) => {
                    assert_eq!(reply.outcome, Outcome::WrongInterval, "{what}: {reply:?}");
                    return Err(Slipped(format!("{what}: {reply:?}")));
                }
            }
            assert_unchanged(&before, &inspector.snapshot(requests.base()).await, &what);
            Ok(())
        })
        .await;
    }
}

/// The script's arguments for `request`, as bytes to spoil.
fn arguments(request: &FlushRequest) -> Vec<Vec<u8>> {
    script::arguments(request)
        .into_iter()
        .map(std::borrow::Cow::into_owned)
        .collect()
}

/// Runs the script with raw keys and arguments, as a client that builds them wrong would.
async fn eval_raw(keys: &[String], args: &[Vec<u8>]) -> redis::RedisResult<Value> {
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
    Fut: Future<Output = Result<(), Slipped>>,
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
            inspector.keys(requests.base()).await,
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
            inspector.keys(requests.base()).await,
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
            assert!(reply.previous_totals.is_empty(), "{reply:?}");
            assert!(inspector.snapshot(requests.base()).await.is_empty());
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
        let before = inspector.snapshot(requests.base()).await;
        let reply = flush(&store, &request).await;
        if expect(&reply, Outcome::Duplicate, m).is_err() {
            continue;
        }
        assert_eq!(reply.counted_in, Some(n), "{reply:?}");
        assert_unchanged(
            &before,
            &inspector.snapshot(requests.base()).await,
            "a duplicate",
        );
        return;
    }
    panic!("every attempt slipped over an interval boundary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_argument_is_an_err_reply_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    // In interval 0 for good (the largest interval puts the server's clock there), so that the
    // state below neither expires nor moves on while the cases run, at any test interval.
    let mut requests = Requests::fresh(settings::interval());
    requests.interval_ms = FlushRequest::MAX_INTERVAL_MS;
    let participant = ParticipantId::random();
    // Some state to leave alone: an applied flush, its interval key and fence.
    let n = 0;
    let applied = flush(&store, &requests.flush(participant, 1, 5, n)).await;
    assert!(applied.outcome.is_counted(), "{applied:?}");
    let request = requests.flush(participant, 2, 5, n);
    let keys = request.keys();
    let good = arguments(&request);
    // Places in `arguments`: 0 seq, 1 interval, 2 expect, 3 fence life, 4 layout, 5 key,
    // 6 amount.
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
        (1, "0"),
        (1, "-300"),
        (1, "300.5"),
        (1, "inf"),
        (1, "3002399751580331"),
        (2, "-1"),
        (2, "nan"),
        (2, "1.0"),
        (2, "9007199254740992"),
        (3, "0"),
        (3, "-1"),
        (3, "600000.5"),
        (3, "9007199254740992"),
        (4, "x"),
        (4, ""),
        (4, "C"),
        (4, "cf"),
        (5, "a"),
        (6, "-5"),
        (6, "5.0"),
        (6, "five"),
        (6, ""),
        (6, "05"),
        (6, "9223372036854775808"),
        (6, "18446744073709551616"),
    ];
    for &(index, value) in bad {
        let mut args = good.clone();
        args[index] = value.as_bytes().to_vec();
        let what = format!("ARGV[{}] = {value:?}", index + 1);
        let before = inspector.snapshot(requests.base()).await;
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
        assert_unchanged(&before, &inspector.snapshot(requests.base()).await, &what);
    }
    // The old script's three keys are refused the same way.
    let error = eval_raw(&keys[2..], &good).await.unwrap_err();
    assert_eq!(error.code(), Some("ERR"), "{error}");
    // And the largest arguments in range are accepted.
    let largest = [
        "9007199254740991",
        "3002399751580330",
        "9007199254740991",
        "9007199254740991",
        "c",
        "",
        "9223372036854775807",
    ]
    .map(|arg| arg.as_bytes().to_vec());
    let value = eval_raw(&keys, &largest).await.unwrap();
    let far = request.clone().with_expect(FlushRequest::MAX_EXPECT);
    assert_eq!(
        decode(&far, &value).unwrap().outcome,
        Outcome::WrongInterval
    );
    delete_keys(&inspector, requests.base()).await;
}

/// Too few or too many keys, fewer than six arguments, or a count of arguments the layout does
/// not take: an error reply that says what the script expects, and nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_count_of_keys_or_arguments_is_refused_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    let requests = Requests::fresh(settings::interval());
    let n = aim(&store, &requests, 0).await.unwrap();
    let request = requests.flush(ParticipantId::random(), 1, 5, n);
    let keys = request.keys().to_vec();
    let args = arguments(&request);
    let more_keys = [keys.clone(), vec![keys[4].clone()]].concat();
    // The keys of a reach past the furthest.
    let too_far = request
        .clone()
        .with_reach(FlushRequest::MAX_REACH + 1)
        .keys();
    let more_args = [args.clone(), vec![b"1".to_vec()]].concat();
    type Case<'a> = (&'a str, &'a [String], &'a [Vec<u8>], &'a str);
    let cases: [Case<'_>; 8] = [
        (
            "three keys",
            &keys[2..],
            &args,
            "expected 5, 7 or 9 keys, got 3",
        ),
        (
            "six keys",
            &more_keys,
            &args,
            "expected 5, 7 or 9 keys, got 6",
        ),
        (
            "eleven keys",
            &too_far,
            &args,
            "expected 5, 7 or 9 keys, got 11",
        ),
        (
            "half a pair",
            &keys,
            &args[..6],
            "layout c takes 7 arguments, got 6",
        ),
        (
            "the old script's five",
            &keys,
            &args[..5],
            "expected at least 6 arguments, got 5",
        ),
        (
            "no layout",
            &keys,
            &args[..4],
            "expected at least 6 arguments, got 4",
        ),
        ("none", &keys, &[], "expected at least 6 arguments, got 0"),
        (
            "a pair and a half",
            &keys,
            &more_args,
            "layout c takes 7 arguments, got 8",
        ),
    ];
    for (what, keys, args, says) in cases {
        let before = inspector.snapshot(requests.base()).await;
        let error = eval_raw(keys, args)
            .await
            .expect_err(&format!("{what} were accepted"));
        assert_eq!(error.code(), Some("ERR"), "{what}: {error}");
        assert!(error.to_string().contains(says), "{what}: {error}");
        assert_unchanged(&before, &inspector.snapshot(requests.base()).await, what);
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
    let before = inspector.snapshot(requests.base()).await;
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
            assert_unchanged(&before, &inspector.snapshot(requests.base()).await, name);
        }
    }
}

fn reporter() -> Reporter {
    Reporter::new("script", Arc::new(Recorder::new()))
}

// ---------------------------------------------------------------------------------------------
// Families: layout f, one hash per interval and partition, with a field per participant.

/// Every key under `base`, by name, as DUMP serializes it: a byte-exact record of what the
/// server holds.
async fn dump(
    inspector: &RedisInspector<MultiplexedConnection>,
    base: &str,
) -> BTreeMap<String, Vec<u8>> {
    let mut connection = inspector.0.clone();
    let keys = inspector.keys(base).await;
    let mut dumped = BTreeMap::new();
    for key in keys {
        let bytes: Option<Vec<u8>> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .unwrap();
        if let Some(bytes) = bytes {
            dumped.insert(key, bytes);
        }
    }
    dumped
}

/// Asserts that nothing under `base` changed since `before` and `dumped`: the same keys,
/// serialized alike, fields alike, no expiry pushed back.
async fn assert_untouched(
    inspector: &RedisInspector<MultiplexedConnection>,
    base: &str,
    before: &Snapshot,
    dumped: &BTreeMap<String, Vec<u8>>,
    what: &str,
) {
    assert_unchanged(before, &inspector.snapshot(base).await, what);
    assert!(
        dump(inspector, base).await == *dumped,
        "{what} changed a key's bytes"
    );
}

/// A hash's fields, as `(field, total)` pairs.
fn hash(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Waits for interval `n + 1` of the server's clock; `Slipped` if it is already past it.
async fn the_next_interval(store: &Eval, n: u64) -> Result<u64, Slipped> {
    let m = aim(store, &Requests::fresh(settings::interval()), n + 1).await?;
    if m != n + 1 {
        return Err(Slipped(format!("aimed at {}, got {m}", n + 1)));
    }
    Ok(m)
}

/// Runs `steps` on a fresh one-partition family in a fresh interval `n`, starting over when a
/// step slips over an interval boundary.
async fn in_a_family_interval<F, Fut>(store: &Eval, steps: F)
where
    F: Fn(FamilyRequests, u64) -> Fut,
    Fut: Future<Output = Result<(), Slipped>>,
{
    for _ in 0..5 {
        let interval = settings::interval();
        let Ok(n) = aim(store, &Requests::fresh(interval), 0).await else {
            continue;
        };
        if steps(FamilyRequests::fresh(interval, 1), n).await.is_ok() {
            return;
        }
    }
    panic!("every attempt slipped over an interval boundary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_adds_each_amount_to_its_field_and_brings_back_each_total() {
    let (store, inspector) = eval_store().await;
    let (store, inspector) = (&store, &inspector);
    in_a_family_interval(store, |family, n| async move {
        let space = family.space(0);
        let (one, two) = (ParticipantId::random(), ParticipantId::random());
        let lives = Duration::from_millis(3 * family.interval_ms);
        let written = Instant::now();
        let first = family.flush(0, one, 1, &[("a", 2), ("b", 3), ("c", 0)], n);
        let reply = flush(store, &first).await;
        expect(&reply, Outcome::Applied, n)?;
        assert_eq!(reply.counted_in, Some(n));
        assert_eq!(reply.previous_totals, [None, None, None]);
        // An amount of 0 on a key the hash holds leaves it; on a new key it makes a total of 0.
        let second = family.flush(0, two, 1, &[("b", 4), ("d", 0), ("a", 0)], n + 1);
        expect(&flush(store, &second).await, Outcome::Applied, n)?;
        let mut keys = vec![space.interval(n), space.fence(one), space.fence(two)];
        keys.sort();
        assert_eq!(inspector.keys(space.base()).await, keys);
        let state = inspector.key(&space.interval(n)).await.unwrap();
        assert_eq!(
            state.fields,
            hash(&[("a", "2"), ("b", "7"), ("c", "0"), ("d", "0")])
        );
        let ttl = state.ttl.expect("the hash expires");
        assert!(ttl <= lives && ttl + written.elapsed() + Duration::from_millis(1) > lives);
        let fence = inspector.key(&space.fence(two)).await.unwrap();
        assert_eq!(fence.value, format!("1:{n}"));

        // Interval n+1: each entry brings back its key's total of n, in the entries' order.
        let m = the_next_interval(store, n).await?;
        let third = family.flush(0, one, 2, &[("d", 1), ("z", 1), ("b", 0), ("a", 5)], n);
        let reply = flush(store, &third).await;
        expect(&reply, Outcome::Applied, m)?;
        assert_eq!(reply.previous_totals, [Some(0), None, Some(7), Some(2)]);
        let state = inspector.key(&space.interval(m)).await.unwrap();
        assert_eq!(
            state.fields,
            hash(&[("a", "5"), ("b", "0"), ("d", "1"), ("z", "1")])
        );
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_stale_and_fenced_on_a_partition_fence() {
    let (store, inspector) = eval_store().await;
    let (store, inspector) = (&store, &inspector);
    in_a_family_interval(store, |family, n| async move {
        let base = family.space(0).base().to_owned();
        let one = ParticipantId::random();
        let batch = family.flush(0, one, 1, &[("a", 2), ("b", 3)], n);
        expect(&flush(store, &batch).await, Outcome::Applied, n)?;
        let before = inspector.snapshot(&base).await;
        let dumped = dump(inspector, &base).await;
        let reply = flush(store, &batch).await;
        expect(&reply, Outcome::Duplicate, n)?;
        assert_eq!(reply.counted_in, Some(n));
        assert_eq!(reply.previous_totals, [None, None]);
        let fenced = family.flush(0, one, 2, &[("a", 1)], n);
        let reply = flush(store, &fenced).await;
        expect(&reply, Outcome::Fenced, n)?;
        assert_eq!(reply.counted_in, None);
        assert_eq!(reply.previous_totals, [None]);
        assert_untouched(inspector, &base, &before, &dumped, "a refused batch").await;

        // Interval n+1: a later flush is applied; the first one again is stale, a copy of the
        // later one a duplicate, each with interval n's totals.
        let m = the_next_interval(store, n).await?;
        let later = family.flush(0, one, 3, &[("b", 1), ("c", 1)], m);
        expect(&flush(store, &later).await, Outcome::Applied, m)?;
        let before = inspector.snapshot(&base).await;
        let dumped = dump(inspector, &base).await;
        let reply = flush(store, &batch).await;
        expect(&reply, Outcome::Stale, m)?;
        assert_eq!(reply.counted_in, None);
        assert_eq!(reply.previous_totals, [Some(2), Some(3)]);
        let reply = flush(store, &later).await;
        expect(&reply, Outcome::Duplicate, m)?;
        assert_eq!(reply.counted_in, Some(m));
        assert_eq!(reply.previous_totals, [Some(3), None]);
        assert_untouched(inspector, &base, &before, &dumped, "a refused batch").await;
        Ok(())
    })
    .await;
}

const MAX: u64 = FlushRequest::MAX_AMOUNT;

/// MessagePack, written by hand for arguments no client would send.
mod pack {
    /// An array of `items`, each already packed.
    pub fn array(items: &[Vec<u8>]) -> Vec<u8> {
        let mut out = vec![0xdd];
        out.extend_from_slice(&(items.len() as u32).to_be_bytes());
        for item in items {
            out.extend_from_slice(item);
        }
        out
    }

    pub fn string(s: &[u8]) -> Vec<u8> {
        let mut out = vec![0xdb];
        out.extend_from_slice(&(s.len() as u32).to_be_bytes());
        out.extend_from_slice(s);
        out
    }

    pub fn unsigned(n: u64) -> Vec<u8> {
        let mut out = vec![0xcf];
        out.extend_from_slice(&n.to_be_bytes());
        out
    }

    /// Key and amount pairs, each amount packed already.
    pub fn pairs(pairs: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let items: Vec<Vec<u8>> = pairs
            .iter()
            .flat_map(|(key, amount)| [string(key.as_bytes()), amount.clone()])
            .collect();
        array(&items)
    }
}

/// The raw fields of the hash at `key`.
async fn hash_fields(key: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut connection = connect::multiplexed(&shared::standalone_url()).await;
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut connection)
        .await
        .unwrap()
}

/// Sums into a family interval the server's clock has passed: the first applied flush after
/// it writes the totals into the field `""` and marks them whole in `"+"`, and every flush
/// brings them back; each participant's entries stay as sent, under its fence key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_interval_is_summed_once_from_each_participants_entries() {
    let (store, inspector) = eval_store().await;
    let (store, inspector) = (&store, &inspector);
    in_a_family_interval(store, |family, n| async move {
        let space = family.space(0);
        let (one, two, three) = (
            ParticipantId::random(),
            ParticipantId::random(),
            ParticipantId::random(),
        );
        let sent = [
            family.flush(0, one, 1, &[("a", 2), ("b", 3)], n),
            family.flush(0, two, 1, &[("b", 4), ("c", 0)], n),
        ];
        for request in &sent {
            expect(&flush(store, request).await, Outcome::Applied, n)?;
        }
        // One field a participant, holding its entries as they were sent.
        let mut fields = hash_fields(&space.interval(n)).await;
        fields.sort();
        let mut expected: Vec<(Vec<u8>, Vec<u8>)> = sent
            .iter()
            .map(|r| (r.fence_key().into_bytes(), arguments(r)[5].clone()))
            .collect();
        expected.sort();
        assert_eq!(fields, expected);

        let m = the_next_interval(store, n).await?;
        // The first flush applied in interval m sums interval n; a fenced one after it brings
        // back the same totals and writes nothing.
        let first = family.flush(0, three, 1, &[("z", 1)], m);
        expect(&flush(store, &first).await, Outcome::Applied, m)?;
        let before = dump(inspector, space.base()).await;
        let fenced = family.flush(0, three, 2, &[("a", 0), ("b", 0), ("c", 0)], m);
        let reply = flush(store, &fenced).await;
        expect(&reply, Outcome::Fenced, m)?;
        assert_eq!(reply.previous_totals, [Some(2), Some(7), Some(0)]);
        assert!(dump(inspector, space.base()).await == before);
        // The sums, whole.
        let hash = hash_fields(&space.interval(n)).await;
        let (summed, whole) = inspect::summed_totals(&hash).expect("interval n is summed");
        assert!(whole, "three fields sum within the budget");
        assert_eq!(summed, inspect::family_totals(&hash).unwrap());
        assert_eq!(
            summed.into_iter().collect::<Vec<_>>(),
            [
                ("a".to_owned(), 2),
                ("b".to_owned(), 7),
                ("c".to_owned(), 0)
            ]
        );
        // A later flush of interval m sums nothing again.
        let later = family.flush(0, two, 2, &[("b", 0), ("d", 0)], m);
        let reply = flush(store, &later).await;
        expect(&reply, Outcome::Applied, m)?;
        assert_eq!(reply.previous_totals, [Some(7), None]);
        assert_eq!(hash_fields(&space.interval(n)).await, hash);
        Ok(())
    })
    .await;
}

/// Only an applied flush writes the sums of the interval before: a wrong interval, a duplicate
/// and a stale flush that reach an ended interval first bring back its totals (but for the
/// wrong interval) and write nothing; the applied flush after them writes the sums.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_applied_flush_writes_the_sums_of_the_interval_before() {
    let (store, inspector) = eval_store().await;
    let (store, inspector) = (&store, &inspector);
    in_a_family_interval(store, |family, n| async move {
        let space = family.space(0);
        let (one, two) = (ParticipantId::random(), ParticipantId::random());
        let sent = family.flush(0, one, 5, &[("a", 2), ("b", 3)], n);
        expect(&flush(store, &sent).await, Outcome::Applied, n)?;
        let other = family.flush(0, two, 1, &[("b", 4)], n);
        expect(&flush(store, &other).await, Outcome::Applied, n)?;
        let m = the_next_interval(store, n).await?;
        let before = inspector.snapshot(space.base()).await;
        let dumped = dump(inspector, space.base()).await;
        let wrong = flush(store, &sent.clone().with_expect(m + 2)).await;
        expect(&wrong, Outcome::WrongInterval, m)?;
        let duplicate = flush(store, &sent.clone().with_expect(m)).await;
        expect(&duplicate, Outcome::Duplicate, m)?;
        assert_eq!(duplicate.counted_in, Some(n));
        let stale = flush(store, &sent.clone().with_seq(3).with_expect(m)).await;
        expect(&stale, Outcome::Stale, m)?;
        for reply in [&duplicate, &stale] {
            assert_eq!(reply.previous_totals, [Some(2), Some(7)], "{reply:?}");
        }
        assert_untouched(
            inspector,
            space.base(),
            &before,
            &dumped,
            "a flush not applied",
        )
        .await;
        let applied = flush(store, &family.flush(0, two, 2, &[("b", 0)], m)).await;
        expect(&applied, Outcome::Applied, m)?;
        assert_eq!(applied.previous_totals, [Some(7)]);
        let hash = hash_fields(&space.interval(n)).await;
        let (summed, whole) = inspect::summed_totals(&hash).expect("interval n is summed");
        assert!(whole, "two fields sum within the budget");
        assert_eq!(summed, inspect::family_totals(&hash).unwrap());
        Ok(())
    })
    .await;
}

/// One participant's entries are the totals of its interval as they stand: the field `""` is a
/// copy of its field, byte for byte (a key it sent twice is there twice, not summed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_participants_entries_are_its_intervals_totals() {
    let (store, _) = eval_store().await;
    let store = &store;
    in_a_family_interval(store, |family, n| async move {
        let space = family.space(0);
        let one = ParticipantId::random();
        let first = family.flush(0, one, 1, &[("a", 2), ("b", 3), ("a", 1)], n);
        expect(&flush(store, &first).await, Outcome::Applied, n)?;
        let m = the_next_interval(store, n).await?;
        let second = family.flush(0, one, 2, &[("b", 1), ("a", 1)], m);
        let reply = flush(store, &second).await;
        expect(&reply, Outcome::Applied, m)?;
        assert_eq!(reply.previous_totals, [Some(3), Some(3)]);
        let hash = hash_fields(&space.interval(n)).await;
        let field = |name: &[u8]| hash.iter().find(|(f, _)| f == name).map(|(_, v)| v.clone());
        assert_eq!(field(b""), Some(arguments(&first)[5].clone()));
        assert_eq!(field(b"+"), Some(Vec::new()));
        Ok(())
    })
    .await;
}

/// Fields of more entries than one run sums (6,000) are summed over several flushes: each
/// one brings back what is summed so far, never more than was sent, until the totals are
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_interval_is_summed_over_several_runs_and_never_overstated() {
    // The first run sums 6 fields of 1000 (its budget, to the entry); the second resumes from
    // the 1000 totals, which count against its budget, and sums 5; the third the last one.
    let seen = summed_over_three_runs(12, FlushRequest::MAX_ENTRIES).await;
    assert_eq!(seen, [(6, false), (11, false), (12, true)]);
}

/// A run sums fields until it has summed 6,000 entries or more: of 13 fields of 909 entries,
/// the first run sums 7 (after 6 it is 546 entries short); the second resumes from the 909
/// totals and sums the 6 left (after 5 it is 546 short again), added to what the first summed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_sums_fields_until_its_budget_is_spent_and_the_next_adds_the_rest() {
    let seen = summed_over_three_runs(13, 909).await;
    assert_eq!(seen, [(7, false), (13, true), (13, true)]);
}

/// A run spends its budget to the entry: of 8 fields of 857 entries, 7 are 5,999 entries, one
/// short of the budget, so the first run sums all 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_short_of_its_budget_by_one_entry_sums_another_field() {
    let seen = summed_over_three_runs(8, 857).await;
    assert_eq!(seen, [(8, true), (8, true), (8, true)]);
}

/// A run resuming from totals that already spend its budget still sums a field, so that the
/// sums always get on: seven participants with 1000 keys each of their own, the first run sums
/// six, and the second, resuming from 6,000 totals, the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_resuming_from_a_spent_budget_still_sums_a_field() {
    let (store, _) = eval_store().await;
    let store = &store;
    let interval = settings::interval().max(Duration::from_secs(2));
    for _ in 0..5 {
        let family = FamilyRequests::fresh(interval, 1);
        let Ok(n) = aim(store, &Requests::fresh(interval), 0).await else {
            continue;
        };
        let mut slipped = false;
        for p in 0..7 {
            let names: Vec<String> = (0..FlushRequest::MAX_ENTRIES)
                .map(|i| format!("p{p}-k{i}"))
                .collect();
            let entries: Vec<(&str, u64)> = names.iter().map(|k| (k.as_str(), 1)).collect();
            let request = family.flush(0, ParticipantId::random(), 1, &entries, n);
            slipped |= expect(&flush(store, &request).await, Outcome::Applied, n).is_err();
        }
        let Ok(m) = aim(store, &Requests::fresh(interval), n + 1).await else {
            continue;
        };
        if slipped || m != n + 1 {
            continue;
        }
        let space = family.space(0);
        let mut seen = Vec::new();
        for _ in 0..2 {
            let request = family.flush(0, ParticipantId::random(), 1, &[("p0-k0", 0)], m);
            if expect(&flush(store, &request).await, Outcome::Applied, m).is_err() {
                break;
            }
            let hash = hash_fields(&space.interval(n)).await;
            let (summed, whole) = inspect::summed_totals(&hash).expect("summed");
            seen.push((summed.len(), whole));
        }
        if seen.len() < 2 {
            continue;
        }
        assert_eq!(seen, [(6000, false), (7000, true)]);
        return;
    }
    panic!("every attempt slipped over an interval boundary");
}

/// Sends `fields` participants' flushes of `entries` keys (each amount 1) into one interval,
/// then three flushes in the next one; returns what each of those was told of the first key's
/// total, and whether the interval was then summed whole.
async fn summed_over_three_runs(fields: usize, entries: usize) -> Vec<(u64, bool)> {
    let (store, _) = eval_store().await;
    let store = &store;
    // Long enough that thirteen batches of up to 1000, and three flushes after them, land in
    // two intervals.
    let interval = settings::interval().max(Duration::from_secs(2));
    let names: Vec<String> = (0..entries).map(|i| format!("k{i}")).collect();
    let sent = u64::try_from(fields).unwrap();
    for _ in 0..5 {
        let family = FamilyRequests::fresh(interval, 1);
        let Ok(n) = aim(store, &Requests::fresh(interval), 0).await else {
            continue;
        };
        let participants: Vec<ParticipantId> =
            (0..fields).map(|_| ParticipantId::random()).collect();
        let entries: Vec<(&str, u64)> = names.iter().map(|k| (k.as_str(), 1)).collect();
        let mut slipped = false;
        for participant in &participants {
            let reply = flush(store, &family.flush(0, *participant, 1, &entries, n)).await;
            slipped |= expect(&reply, Outcome::Applied, n).is_err();
        }
        let Ok(m) = aim(store, &Requests::fresh(interval), n + 1).await else {
            continue;
        };
        if slipped || m != n + 1 {
            continue;
        }
        let space = family.space(0);
        let mut seen = Vec::new();
        for reader in 0..3 {
            let request = family.flush(0, ParticipantId::random(), 1, &entries[..1], m);
            let reply = flush(store, &request).await;
            if expect(&reply, Outcome::Applied, m).is_err() {
                break;
            }
            let hash = hash_fields(&space.interval(n)).await;
            let (summed, whole) = inspect::summed_totals(&hash).expect("summed");
            let total = reply.previous_totals[0].expect("a total");
            assert!(
                total <= sent,
                "reader {reader} was told {total}: more than was sent"
            );
            assert_eq!(summed.get("k0"), Some(&total));
            seen.push((total, whole));
        }
        if seen.len() == 3 {
            return seen;
        }
    }
    panic!("every attempt slipped over an interval boundary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_total_past_the_largest_stops_there_and_is_summed_exactly_below() {
    let (store, _) = eval_store().await;
    let store = &store;
    in_a_family_interval(store, |family, n| async move {
        let exact = (1u64 << 53) - 1;
        let sent: [&[(&str, u64)]; 3] = [
            &[
                ("a", MAX - 1),
                ("b", 5),
                ("big", 9_223_372_036_854_775_000),
                ("c9", 9_223_372_036_854_775_799),
                ("mid", 9_999_999_999_999_999),
                ("edge", exact),
                ("small", 3),
                ("odd", exact),
            ],
            &[
                ("a", 2),
                ("b", MAX - 5),
                ("big", 807),
                ("c9", 9),
                ("mid", 1),
                ("edge", 1),
                ("small", 4),
                ("odd", 2),
            ],
            &[("a", MAX), ("small", exact - 7), ("edge", exact)],
        ];
        for entries in sent {
            let request = family.flush(0, ParticipantId::random(), 1, entries, n);
            expect(&flush(store, &request).await, Outcome::Applied, n)?;
        }
        let m = the_next_interval(store, n).await?;
        let keys = ["a", "b", "big", "c9", "mid", "edge", "small", "odd"];
        let reader: Vec<(&str, u64)> = keys.iter().map(|k| (*k, 0)).collect();
        let reply = flush(
            store,
            &family.flush(0, ParticipantId::random(), 1, &reader, m),
        )
        .await;
        expect(&reply, Outcome::Applied, m)?;
        let told: Vec<u64> = reply.previous_totals.iter().map(|t| t.unwrap()).collect();
        // "odd" sums to 2^53 + 1, which Lua's numbers round to 2^53: it is summed as digits.
        assert_eq!(
            told,
            [
                MAX,
                MAX,
                MAX,
                MAX,
                10_000_000_000_000_000,
                2 * exact + 1,
                exact,
                exact + 2
            ]
        );
        let hash = hash_fields(&family.space(0).interval(n)).await;
        let (summed, _) = inspect::summed_totals(&hash).unwrap();
        assert_eq!(summed, inspect::family_totals(&hash).unwrap());
        Ok(())
    })
    .await;
}

/// Applies a flush in a fresh interval `n`, writes what `garbage` makes of the family's keys
/// and `n` as another program would, then checks that a flush in interval `n + 1` is refused,
/// saying `says`, and leaves every key as it was.
async fn refused_after<G>(
    store: &Eval,
    inspector: &RedisInspector<MultiplexedConnection>,
    garbage: G,
    says: &str,
) where
    G: Fn(&KeySpace, u64) -> redis::Cmd,
{
    let garbage = &garbage;
    in_a_family_interval(store, |family, n| async move {
        let space = family.space(0);
        let one = ParticipantId::random();
        let first = family.flush(0, one, 1, &[("ok", 1)], n);
        expect(&flush(store, &first).await, Outcome::Applied, n)?;
        let mut connection = connect::multiplexed(&shared::standalone_url()).await;
        let _: () = garbage(&space, n)
            .query_async(&mut connection)
            .await
            .unwrap();
        let m = the_next_interval(store, n).await?;
        let before = inspector.snapshot(space.base()).await;
        let dumped = dump(inspector, space.base()).await;
        let request = family.flush(0, one, 2, &[("ok", 1)], m);
        match store.flush(&request, &reporter()).await {
            Err(error) => assert!(error.to_string().contains(says), "{error}"),
            Ok(reply) => {
                expect(&reply, Outcome::Applied, m)?;
                panic!("a flush expected to say {says:?} was applied: {reply:?}");
            }
        }
        assert_untouched(inspector, space.base(), &before, &dumped, says).await;
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_that_holds_no_entries_refuses_the_flush_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    // A participant's field that holds no entries.
    let odd = pack::array(&[pack::string(b"a")]);
    let garbage: [&[u8]; 4] = [b"abc", b"", b"5", &odd];
    for garbage in garbage {
        let field = |space: &KeySpace, n: u64| {
            let mut hset = redis::cmd("HSET");
            hset.arg(space.interval(n))
                .arg(space.fence(ParticipantId::random()))
                .arg(garbage);
            hset
        };
        refused_after(&store, &inspector, field, "holds no entries").await;
    }
    // A run cut short leaves its sums in "" and the fields it summed in "+", and the next run
    // starts from them: either one garbled refuses the flush.
    let names = pack::array(&[pack::string(b"someone")]);
    let totals = pack::pairs(&[("ok", pack::unsigned(1))]);
    let resumed: [(&[u8], &[u8], &str); 2] = [
        (b"abc", &names, "holds no entries"),
        (&totals, b"abc", "is not a list of fields"),
    ];
    for (summed, progress, says) in resumed {
        let sums = |space: &KeySpace, n: u64| {
            let mut hset = redis::cmd("HSET");
            hset.arg(space.interval(n))
                .arg("")
                .arg(summed)
                .arg("+")
                .arg(progress);
            hset
        };
        refused_after(&store, &inspector, sums, says).await;
    }
    // An interval key that is not a hash, while the interval before has a field to sum: the
    // flush is refused, and the sums are not written either.
    let string = |space: &KeySpace, n: u64| {
        let mut set = redis::cmd("SET");
        set.arg(space.interval(n + 1))
            .arg("5")
            .arg("PX")
            .arg(60_000);
        set
    };
    refused_after(&store, &inspector, string, "is not a hash").await;
    // The interval before, whose totals the flush reads, is not a hash.
    let before = |space: &KeySpace, n: u64| {
        let mut set = redis::cmd("SET");
        set.arg(space.interval(n)).arg("5").arg("PX").arg(60_000);
        set
    };
    refused_after(&store, &inspector, before, "is not a hash").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_family_argument_is_an_err_reply_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    // In interval 0 for good, as for the counter's arguments above.
    let mut family = FamilyRequests::fresh(settings::interval(), 1);
    family.interval_ms = FlushRequest::MAX_INTERVAL_MS;
    let base = family.space(0).base().to_owned();
    let participant = ParticipantId::random();
    // Some state to leave alone: an applied batch, its hash and fence.
    let n = 0;
    let applied = flush(&store, &family.flush(0, participant, 1, &[("a", 5)], n)).await;
    assert!(applied.outcome.is_counted(), "{applied:?}");
    let request = family.flush(0, participant, 2, &[("a", 5), ("b", 1)], n);
    let keys = request.keys();
    let good = arguments(&request);
    let with = |changes: &[(usize, Vec<u8>)]| {
        let mut args = good.clone();
        for (index, value) in changes {
            args[*index] = value.clone();
        }
        args
    };
    let entries = |pairs: &[(&str, Vec<u8>)]| with(&[(5, pack::pairs(pairs))]);
    let one = pack::unsigned(1);
    let many: Vec<(String, Vec<u8>)> = (0..=FlushRequest::MAX_ENTRIES)
        .map(|i| (format!("k{i}"), one.clone()))
        .collect();
    let many: Vec<(&str, Vec<u8>)> = many.iter().map(|(k, a)| (k.as_str(), a.clone())).collect();
    let long = "k".repeat(FlushRequest::MAX_KEY_LEN + 1);
    let float = [0xcb].into_iter().chain(1.5f64.to_be_bytes()).collect();
    let digits = |d: &str| pack::string(d.as_bytes());
    let nil = vec![0xc0];
    let cases: Vec<(&str, Vec<Vec<u8>>, &str)> = vec![
        ("layout x", with(&[(4, b"x".to_vec())]), "ARGV[5] (layout)"),
        ("layout empty", with(&[(4, Vec::new())]), "ARGV[5] (layout)"),
        ("layout F", with(&[(4, b"F".to_vec())]), "ARGV[5] (layout)"),
        (
            "a seventh argument",
            [good.clone(), vec![b"1".to_vec()]].concat(),
            "got 7 arguments",
        ),
        (
            "a counter's arguments",
            with(&[(4, b"c".to_vec()), (5, Vec::new())]),
            "got 6 arguments",
        ),
        (
            "entries not packed",
            with(&[(5, b"abc".to_vec())]),
            "ARGV[6] (entries)",
        ),
        (
            "entries empty",
            with(&[(5, Vec::new())]),
            "ARGV[6] (entries)",
        ),
        ("no entry", entries(&[]), "ARGV[6] (entries)"),
        (
            "a map, not an array",
            with(&[(5, vec![0x81, 0xa1, b'a', 0x01])]),
            "ARGV[6] (entries)",
        ),
        (
            // Lua reads it as the array "a", 5.
            "a map keyed 1 and 2",
            with(&[(5, vec![0x82, 0x01, 0xa1, b'a', 0x02, 0x05])]),
            "ARGV[6] (entries)",
        ),
        (
            "a key without an amount",
            with(&[(5, pack::array(&[pack::string(b"a")]))]),
            "ARGV[6] (entries)",
        ),
        (
            "a pair and a key",
            with(&[(
                5,
                pack::array(&[pack::string(b"a"), one.clone(), pack::string(b"b")]),
            )]),
            "ARGV[6] (entries)",
        ),
        (
            "a number, not an array",
            with(&[(5, vec![0x05])]),
            "ARGV[6] (entries)",
        ),
        (
            "two arrays",
            with(&[(5, [good[5].clone(), good[5].clone()].concat())]),
            "ARGV[6] (entries)",
        ),
        ("one entry too many", entries(&many), "ARGV[6] (entries)"),
        // A nil leaves a hole in Lua's table, where its length may stop: the items after it
        // would be neither checked nor summed, yet kept in the field as sent.
        (
            "a pair and a nil",
            with(&[(
                5,
                pack::array(&[pack::string(b"a"), one.clone(), nil.clone()]),
            )]),
            "ARGV[6] (entries)",
        ),
        (
            "a pair and two nils",
            with(&[(
                5,
                pack::array(&[pack::string(b"a"), one.clone(), nil.clone(), nil.clone()]),
            )]),
            "ARGV[6] (entries)",
        ),
        (
            "two nils between two pairs",
            with(&[(
                5,
                pack::array(&[
                    pack::string(b"a"),
                    one.clone(),
                    nil.clone(),
                    nil.clone(),
                    pack::string(b"b"),
                    one.clone(),
                ]),
            )]),
            "ARGV[6] (entries)",
        ),
        (
            "a nil for an amount",
            with(&[(
                5,
                pack::array(&[
                    pack::string(b"a"),
                    nil.clone(),
                    pack::string(b"b"),
                    one.clone(),
                ]),
            )]),
            "ARGV[6] (entries)",
        ),
        (
            "an empty key",
            entries(&[("a", one.clone()), ("", one.clone())]),
            "entry 2 has a key",
        ),
        (
            "a key over the longest",
            entries(&[(&long, one.clone())]),
            "entry 1 has a key",
        ),
        (
            "a number for a key",
            with(&[(5, pack::array(&[pack::unsigned(7), one.clone()]))]),
            "entry 1 has a key",
        ),
        (
            "a negative amount",
            entries(&[("a", vec![0xff])]),
            "entry 1 (key \"a\") has an amount",
        ),
        (
            "a fraction",
            entries(&[("a", float)]),
            "entry 1 (key \"a\") has an amount",
        ),
        (
            "true for an amount",
            entries(&[("a", vec![0xc3])]),
            "entry 1 (key \"a\") has an amount",
        ),
        (
            "2^53 as a number",
            entries(&[("a", pack::unsigned(1 << 53))]),
            "has an amount",
        ),
        (
            "a leading zero",
            entries(&[("a", digits("01"))]),
            "has an amount",
        ),
        ("letters", entries(&[("a", digits("1e3"))]), "has an amount"),
        ("no digits", entries(&[("a", digits(""))]), "has an amount"),
        (
            "an amount over i64::MAX",
            entries(&[("a", one.clone()), ("b", digits("9223372036854775808"))]),
            "entry 2 (key \"b\") has an amount",
        ),
    ];
    for (what, args, says) in cases {
        let before = inspector.snapshot(&base).await;
        let dumped = dump(&inspector, &base).await;
        let error = eval_raw(&keys, &args)
            .await
            .expect_err(&format!("{what} was accepted"));
        assert_eq!(error.code(), Some("ERR"), "{what}: {error}");
        assert!(
            error.detail().is_some_and(|d| d.starts_with("comcount: ")),
            "{what}: {error}"
        );
        assert!(error.to_string().contains(says), "{what}: {error}");
        assert_untouched(&inspector, &base, &before, &dumped, what).await;
    }
    // The largest batch in range is accepted: the most entries, the longest keys, the largest
    // amounts, as numbers and as digits (here far from the server's interval, so that nothing
    // is written).
    let longest: Vec<String> = (0..FlushRequest::MAX_ENTRIES)
        .map(|i| format!("{i:0>width$}", width = FlushRequest::MAX_KEY_LEN))
        .collect();
    let largest: Vec<(&str, Vec<u8>)> = longest
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let amount = if i % 2 == 0 {
                digits("9223372036854775807")
            } else {
                pack::unsigned((1 << 53) - 1)
            };
            (k.as_str(), amount)
        })
        .collect();
    let far = family.flush(0, participant, 3, &[("a", 1)], FlushRequest::MAX_EXPECT);
    let mut args = arguments(&far);
    args[5] = pack::pairs(&largest);
    let value = eval_raw(&far.keys(), &args).await.unwrap();
    assert_eq!(
        decode(&far, &value).unwrap().outcome,
        Outcome::WrongInterval
    );
    delete_keys(&inspector, &base).await;
}

/// Deletes the keys under `base`: those written in interval 0 would live for centuries.
async fn delete_keys(inspector: &RedisInspector<MultiplexedConnection>, base: &str) {
    let keys = inspector.keys(base).await;
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut inspector.0.clone())
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_interval_brings_back_no_totals_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    let (store, inspector) = (&store, &inspector);
    in_a_family_interval(store, |family, n| async move {
        let base = family.space(0).base().to_owned();
        for off in [n - 2, n + 2] {
            let request = family.flush(0, ParticipantId::random(), 1, &[("a", 1), ("b", 2)], off);
            let value = eval_raw(&request.keys(), &arguments(&request))
                .await
                .unwrap();
            let fields = fields(&value);
            assert_eq!(fields.len(), 4, "{fields:?}");
            let reply = decode(&request, &value).unwrap();
            expect(&reply, Outcome::WrongInterval, n)?;
            assert!(inspector.snapshot(&base).await.is_empty());
        }
        Ok(())
    })
    .await;
}

/// In interval 0 (the largest interval puts the server's clock there) there is no interval
/// before: no totals, whatever the keys of the window hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_interval_brings_back_no_totals() {
    let (store, inspector) = eval_store().await;
    let mut connection = connect::multiplexed(&shared::standalone_url()).await;
    let mut family = FamilyRequests::fresh(settings::interval(), 1);
    family.interval_ms = FlushRequest::MAX_INTERVAL_MS;
    let mut counter = Requests::fresh(settings::interval());
    counter.interval_ms = FlushRequest::MAX_INTERVAL_MS;
    let batch = |participant| family.flush(0, participant, 1, &[("a", 1), ("b", 2)], 0);
    for request in [
        batch(ParticipantId::random()),
        batch(ParticipantId::random()),
    ] {
        let reply = flush(&store, &request).await;
        assert_eq!(reply.outcome, Outcome::Applied, "{reply:?}");
        assert_eq!(reply.interval, 0);
        assert_eq!(reply.previous_totals, [None, None]);
    }
    for participant in [ParticipantId::random(), ParticipantId::random()] {
        let reply = flush(&store, &counter.flush(participant, 1, 3, 0)).await;
        assert_eq!(reply.outcome, Outcome::Applied, "{reply:?}");
        assert_eq!(reply.previous_totals, [None]);
    }
    let totals = inspect::family_totals(&hash_fields(&family.space(0).interval(0)).await);
    assert_eq!(
        totals.unwrap().into_iter().collect::<Vec<_>>(),
        [("a".to_owned(), 2), ("b".to_owned(), 4)]
    );
    let total: String = redis::cmd("GET")
        .arg(counter.interval_key(0))
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(total, "6");
    for base in [family.space(0).base(), counter.base()] {
        delete_keys(&inspector, base).await;
    }
}
