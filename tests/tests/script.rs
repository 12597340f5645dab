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
    Fence, FlushReply, FlushRequest, KeySpace, Outcome, ParticipantId, Store, StoreError,
    StoreErrorKind,
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
                // The script's own words, not the server's ("increment or decrement would
                // overflow"), which say nothing of the key.
                assert!(
                    error.to_string().contains(&format!(
                        "comcount: the total of {key} would overflow past {}",
                        i64::MAX
                    )),
                    "{error}"
                );
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

/// An applied counter flush brings back its interval's total just after it exactly on either
/// side of 2^53, where Lua's numbers stop being exact: 2^53 + 1 is read back as digits, not
/// rounded to 2^53.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_landed_total_is_exact_either_side_of_2_to_the_53() {
    let (store, _) = eval_store().await;
    let store = &store;
    in_an_interval(store, |requests, n| async move {
        let mut connection = connect::multiplexed(&shared::standalone_url()).await;
        let exact = 1u64 << 53;
        let _: () = redis::cmd("SET")
            .arg(requests.interval_key(n))
            .arg(exact - 2)
            .arg("PX")
            .arg(60_000)
            .query_async(&mut connection)
            .await
            .unwrap();
        for landed in [exact - 1, exact, exact + 1] {
            let reply = flush(store, &requests.flush(ParticipantId::random(), 1, 1, n)).await;
            expect(&reply, Outcome::Applied, n)?;
            assert_eq!(reply.landed_totals, [Some(landed)], "{reply:?}");
        }
        Ok(())
    })
    .await;
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
/// writes: the interval before (a hash, a word, a negative number, a number past 2^63-1 or
/// with a leading zero), the interval flushed into
/// (a hash, a word) and the fence (a hash). Each refuses the flush with an `ERR comcount:`
/// reply that names the key and says what to do, and leaves every key as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_another_program_wrote_refuses_the_flush_with_an_err_comcount_reply() {
    let (store, inspector) = eval_store().await;
    let (store, inspector) = (&store, &inspector);
    let previous = |n: u64| n - 1;
    let current = |n: u64| n;
    type Where = fn(u64) -> u64;
    let cases: [(&str, &str, Option<Where>); 8] = [
        ("HSET", "a hash", Some(previous)),
        ("SET", "abc", Some(previous)),
        ("SET", "-5", Some(previous)),
        // Digits, but no total the script writes: past 2^63-1, or with a leading zero.
        ("SET", "9223372036854775808", Some(previous)),
        ("SET", "05", Some(previous)),
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
        // Past the largest by its first digit alone.
        (1, "4000000000000000"),
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

/// Too few or too many keys, fewer than seven arguments or an even count, or more than one
/// entry for a counter: an error reply that says what the script expects, and nothing written.
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
    let two_pairs = [args.clone(), vec![Vec::new(), b"1".to_vec()]].concat();
    type Case<'a> = (&'a str, &'a [String], &'a [Vec<u8>], &'a str);
    let cases: [Case<'_>; 9] = [
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
            "then pairs of a key and an amount, got 6 arguments",
        ),
        (
            "the old script's five",
            &keys,
            &args[..5],
            "got 5 arguments",
        ),
        ("no layout", &keys, &args[..4], "got 4 arguments"),
        ("none", &keys, &[], "got 0 arguments"),
        ("a pair and a half", &keys, &more_args, "got 8 arguments"),
        (
            "two pairs",
            &keys,
            &two_pairs,
            "layout c takes one entry, got 2",
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
        let reply = flush(store, &batch).await;
        expect(&reply, Outcome::Applied, n)?;
        assert_eq!(reply.fence, Fence::Empty);
        let first = Fence::Held {
            seq: 1,
            interval: n,
        };
        let before = inspector.snapshot(&base).await;
        let dumped = dump(inspector, &base).await;
        let reply = flush(store, &batch).await;
        expect(&reply, Outcome::Duplicate, n)?;
        assert_eq!(reply.counted_in, Some(n));
        assert_eq!(reply.fence, first);
        assert_eq!(reply.previous_totals, [None, None]);
        let fenced = family.flush(0, one, 2, &[("a", 1)], n);
        let reply = flush(store, &fenced).await;
        expect(&reply, Outcome::Fenced, n)?;
        assert_eq!(reply.counted_in, None);
        assert_eq!(reply.fence, first);
        assert_eq!(reply.previous_totals, [None]);
        assert_untouched(inspector, &base, &before, &dumped, "a refused batch").await;

        // Interval n+1: a later flush is applied; the first one again is stale, a copy of the
        // later one a duplicate, each with interval n's totals.
        let m = the_next_interval(store, n).await?;
        let later = family.flush(0, one, 3, &[("b", 1), ("c", 1)], m);
        let reply = flush(store, &later).await;
        expect(&reply, Outcome::Applied, m)?;
        assert_eq!(reply.fence, first);
        let later_held = Fence::Held {
            seq: 3,
            interval: m,
        };
        let before = inspector.snapshot(&base).await;
        let dumped = dump(inspector, &base).await;
        let reply = flush(store, &batch).await;
        expect(&reply, Outcome::Stale, m)?;
        assert_eq!(reply.counted_in, None);
        assert_eq!(reply.fence, later_held);
        assert_eq!(reply.previous_totals, [Some(2), Some(3)]);
        let reply = flush(store, &later).await;
        expect(&reply, Outcome::Duplicate, m)?;
        assert_eq!(reply.counted_in, Some(m));
        assert_eq!(reply.fence, later_held);
        assert_eq!(reply.previous_totals, [Some(3), None]);
        assert_untouched(inspector, &base, &before, &dumped, "a refused batch").await;
        Ok(())
    })
    .await;
}

const MAX: u64 = FlushRequest::MAX_AMOUNT;

/// The raw fields of the hash at `key`.
async fn hash_fields(key: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut connection = connect::multiplexed(&shared::standalone_url()).await;
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut connection)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_total_past_the_largest_stops_there_and_adds_exactly_below() {
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
                ("late", 2),
                ("wide", 999_999_999_999_999),
                ("zero", 0),
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
                // A short total and a 16-digit amount, past 2^53: added as digits.
                ("late", 9_999_999_999_999_999),
                // Two short ones whose sum has 16 digits: written as digits, not as Lua prints
                // a number.
                ("wide", 1),
                // A stored total of 0 is one.
                ("zero", 5),
            ],
            // A key sent twice in one flush adds both amounts.
            &[
                ("a", MAX),
                ("small", exact - 8),
                ("edge", exact),
                ("small", 1),
            ],
        ];
        for entries in sent {
            let request = family.flush(0, ParticipantId::random(), 1, entries, n);
            expect(&flush(store, &request).await, Outcome::Applied, n)?;
        }
        let m = the_next_interval(store, n).await?;
        let keys = [
            "a", "b", "big", "c9", "mid", "edge", "small", "odd", "late", "wide", "zero", "a",
        ];
        let reader: Vec<(&str, u64)> = keys.iter().map(|k| (*k, 0)).collect();
        let reply = flush(
            store,
            &family.flush(0, ParticipantId::random(), 1, &reader, m),
        )
        .await;
        expect(&reply, Outcome::Applied, m)?;
        let told: Vec<u64> = reply.previous_totals.iter().map(|t| t.unwrap()).collect();
        // "odd" adds up to 2^53 + 1, which Lua's numbers round to 2^53: it is added as digits.
        let totals = [
            MAX,
            MAX,
            MAX,
            MAX,
            10_000_000_000_000_000,
            2 * exact + 1,
            exact,
            exact + 2,
            10_000_000_000_000_001,
            1_000_000_000_000_000,
            5,
        ];
        assert_eq!(told, [&totals[..], &[MAX]].concat());
        let hash = inspect::family_totals(&hash_fields(&family.space(0).interval(n)).await);
        let held: Vec<u64> = keys[..totals.len()]
            .iter()
            .map(|k| hash.as_ref().unwrap()[*k])
            .collect();
        assert_eq!(held, totals);
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
async fn a_key_another_program_wrote_refuses_a_batch_and_writes_nothing() {
    let (store, inspector) = eval_store().await;
    let hset = |value: &'static str| {
        move |space: &KeySpace, m: u64| {
            let mut hset = redis::cmd("HSET");
            hset.arg(space.interval(m + 1)).arg("ok").arg(value);
            hset
        }
    };
    let set = |n: fn(u64) -> u64| {
        move |space: &KeySpace, m: u64| {
            let mut set = redis::cmd("SET");
            set.arg(space.interval(n(m))).arg("5").arg("PX").arg(60_000);
            set
        }
    };
    let this = |n| n + 1;
    let before = |n| n;
    // The flush's own interval: a field that is no total, or a key that is no hash.
    for garbage in ["abc", "", "-1", "01"] {
        refused_after(&store, &inspector, hset(garbage), "is not a hash of totals").await;
    }
    refused_after(&store, &inspector, set(this), "is not a hash of totals").await;
    // The interval before, whose totals the reply carries, is not a hash. (Its fields are not
    // read but for the reply, whose reader refuses one that is no integer.)
    refused_after(&store, &inspector, set(before), "is not a hash of totals").await;
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
    let with = |changes: &[(usize, &[u8])]| {
        let mut args = good.clone();
        for (index, value) in changes {
            args[*index] = value.to_vec();
        }
        args
    };
    let entries = |pairs: &[(&str, &str)]| {
        let mut args = good[..5].to_vec();
        for (key, amount) in pairs {
            args.push(key.as_bytes().to_vec());
            args.push(amount.as_bytes().to_vec());
        }
        args
    };
    let many: Vec<String> = (0..=FlushRequest::MAX_ENTRIES)
        .map(|i| format!("k{i}"))
        .collect();
    let many: Vec<(&str, &str)> = many.iter().map(|k| (k.as_str(), "1")).collect();
    let long = "k".repeat(FlushRequest::MAX_KEY_LEN + 1);
    let cases: Vec<(&str, Vec<Vec<u8>>, &str)> = vec![
        ("layout x", with(&[(4, b"x")]), "ARGV[5] (layout)"),
        ("layout empty", with(&[(4, b"")]), "ARGV[5] (layout)"),
        ("layout F", with(&[(4, b"F")]), "ARGV[5] (layout)"),
        (
            "a key without an amount",
            [good.clone(), vec![b"c".to_vec()]].concat(),
            "got 10 arguments",
        ),
        ("no entry", entries(&[]), "got 5 arguments"),
        (
            "one entry too many",
            entries(&many),
            "takes 1..=1000 entries",
        ),
        (
            "an empty key",
            entries(&[("a", "1"), ("", "1")]),
            "ARGV[8] (key)",
        ),
        (
            "a key over the longest",
            entries(&[(&long, "1")]),
            "ARGV[6] (key)",
        ),
        (
            "a negative amount",
            entries(&[("a", "-1")]),
            "ARGV[7] (amount)",
        ),
        ("a fraction", entries(&[("a", "1.5")]), "ARGV[7] (amount)"),
        // A key of digits, as an amount would be, with an amount that is none.
        (
            "a key of digits",
            entries(&[("7", "-1")]),
            "ARGV[7] (amount)",
        ),
        (
            "a leading zero",
            entries(&[("a", "01")]),
            "ARGV[7] (amount)",
        ),
        ("letters", entries(&[("a", "1e3")]), "ARGV[7] (amount)"),
        ("no digits", entries(&[("a", "")]), "ARGV[7] (amount)"),
        ("a space", entries(&[("a", " 1")]), "ARGV[7] (amount)"),
        (
            "an amount over i64::MAX",
            entries(&[("a", "1"), ("b", "9223372036854775808")]),
            "ARGV[9] (amount)",
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
    // amounts (here far from the server's interval, so that nothing is written).
    let longest: Vec<String> = (0..FlushRequest::MAX_ENTRIES)
        .map(|i| format!("{i:0>width$}", width = FlushRequest::MAX_KEY_LEN))
        .collect();
    let far = family.flush(0, participant, 3, &[("a", 1)], FlushRequest::MAX_EXPECT);
    let mut args = arguments(&far)[..5].to_vec();
    for key in &longest {
        args.push(key.as_bytes().to_vec());
        args.push(b"9223372036854775807".to_vec());
    }
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
            // The outcome, interval, phase, no interval counted in and no fence: no totals.
            assert_eq!(fields.len(), 5, "{fields:?}");
            let reply = decode(&request, &value).unwrap();
            expect(&reply, Outcome::WrongInterval, n)?;
            assert_eq!(reply.fence, Fence::Untold);
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

/// A first write the server refuses for reasons of its own (here a user denied `HSET` and
/// `INCRBY`, as `READONLY`, `OOM` or `NOREPLICAS` would too) comes back as the server said it:
/// returned by the script, neither raised from within it nor taken for a key of another type,
/// and nothing is written. For a counter, and for batches of one key and of 33, which go
/// through a hash table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_server_refuses_comes_back_as_the_server_said_it() {
    refused_by_a_user_denied(&["-hset", "-incrby"], "the server's own words").await;
}

/// A user denied a write the script makes after its first (the expiry, the fence, the
/// conversion of a large batch's hash) is refused before the first, in the script's own
/// `NOPERM`: Redis checks a script's commands one by one as they run, and a flush counted
/// without its fence could be counted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_the_first_the_acl_denies_leaves_every_key_as_it_was() {
    for denied in ["-pexpire", "-set", "-hdel"] {
        refused_by_a_user_denied(&[denied], "NOPERM comcount").await;
    }
}

/// Flushes of a counter, and of family batches of one key and of 33, by a user denied
/// `denied`: each refused, saying `says` when it is the script's own refusal, and nothing
/// written. A batch of one writes no `HDEL`, so a user denied only that flushes it.
async fn refused_by_a_user_denied(denied: &[&str], says: &str) {
    let url = shared::standalone_url();
    let inspector = &RedisInspector(connect::multiplexed(&url).await);
    let user = settings::unique_prefix("denied");
    let mut admin = connect::multiplexed(&url).await;
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", &user, "on", ">secret", "~*", "+@all"][..])
        .arg(denied)
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut connection = connect::multiplexed(&url).await;
    let () = redis::cmd("AUTH")
        .arg(&[&user, "secret"][..])
        .query_async(&mut connection)
        .await
        .unwrap();
    let store = &Eval(connection);
    let own = says.starts_with("NOPERM comcount");
    let only_hdel = denied == ["-hdel"];
    if !only_hdel {
        in_an_interval(store, |requests, n| async move {
            let before = inspector.snapshot(requests.base()).await;
            let request = requests.flush(ParticipantId::random(), 1, 5, n);
            let result = store.flush(&request, &reporter()).await;
            refused_as_said(
                inspector,
                "a counter",
                requests.base(),
                &before,
                result,
                own,
            )
            .await
        })
        .await;
    }
    let keys: Vec<String> = (0..33).map(|i| format!("k{i}")).collect();
    let counts: &[usize] = if only_hdel { &[33] } else { &[1, 33] };
    for &count in counts {
        let entries: Vec<(&str, u64)> = keys[..count].iter().map(|k| (k.as_str(), 1)).collect();
        let entries = &entries;
        in_a_family_interval(store, |family, n| async move {
            let base = family.space(0).base().to_owned();
            let before = inspector.snapshot(&base).await;
            let request = family.flush(0, ParticipantId::random(), 1, entries, n);
            let result = store.flush(&request, &reporter()).await;
            let what = format!("a batch of {count}, denied {denied:?}");
            refused_as_said(inspector, &what, &base, &before, result, own).await
        })
        .await;
    }
    let () = redis::cmd("ACL")
        .arg(&["DELUSER", &user][..])
        .query_async(&mut admin)
        .await
        .unwrap();
}

/// Asserts that `result` is the error on a command the ACL denies: the script's own NOPERM when
/// `own`, the server's as the script returned it otherwise; and that nothing under `base`
/// changed since `before`; `Slipped` when the flush came back as a wrong interval.
async fn refused_as_said(
    inspector: &RedisInspector<MultiplexedConnection>,
    what: &str,
    base: &str,
    before: &Snapshot,
    result: Result<FlushReply, StoreError>,
    own: bool,
) -> Result<(), Slipped> {
    let text = match result {
        Err(error) => error.to_string(),
        Ok(reply) => {
            assert_eq!(reply.outcome, Outcome::WrongInterval, "{what}: {reply:?}");
            return Err(Slipped(format!("{what}: {reply:?}")));
        }
    };
    if own {
        // The script's check, before its first write.
        assert!(
            text.contains("comcount: this user has no permissions"),
            "{what}: {text}"
        );
    } else {
        // Redis 7.2 and later, and Valkey, name the command (`ACL failure in script`); 7.0
        // and 7.1 do not.
        assert!(
            text.contains("NOPERM")
                || text.contains("ACL failure in script")
                || text.contains("can't run this command"),
            "{what}: {text}"
        );
        assert!(!text.contains("comcount:"), "{what}: {text}");
    }
    // Raised by a call within the script, it would name the script's line.
    assert!(!text.contains("@user_script"), "{what}: {text}");
    assert_unchanged(before, &inspector.snapshot(base).await, what);
    Ok(())
}

/// A batch of more than 32 keys is written to a hash table (a listpack, Redis's small hash,
/// looks for a field by scanning it), a batch of 32 to a listpack; neither keeps the field the
/// script writes to convert the hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_more_than_32_keys_is_written_to_a_hash_table() {
    let (store, _) = eval_store().await;
    let store = &store;
    in_a_family_interval(store, |family, n| async move {
        let mut connection = connect::multiplexed(&shared::standalone_url()).await;
        // Fresh hashes of 32 and 33 keys, each a family's own.
        let other = FamilyRequests::fresh(settings::interval(), 1);
        for (family, count) in [(family, 32), (other, 33)] {
            let keys: Vec<String> = (0..count).map(|i| format!("k{i}")).collect();
            let entries: Vec<(&str, u64)> = keys.iter().map(|k| (k.as_str(), 7)).collect();
            let request = family.flush(0, ParticipantId::random(), 1, &entries, n);
            expect(&flush(store, &request).await, Outcome::Applied, n)?;
            let key = family.space(0).interval(n);
            let encoding: String = redis::cmd("OBJECT")
                .arg(&["ENCODING", &key][..])
                .query_async(&mut connection)
                .await
                .unwrap();
            // Before Redis 7, a listpack was a ziplist.
            let small = ["listpack", "ziplist"].contains(&encoding.as_str());
            assert_eq!(small, count <= 32, "{count} keys: {encoding}");
            let sent: BTreeMap<String, u64> = keys.iter().map(|k| (k.clone(), 7)).collect();
            let held = inspect::family_totals(&hash_fields(&key).await);
            assert_eq!(held, Ok(sent), "{count} keys");
        }
        Ok(())
    })
    .await;
}
