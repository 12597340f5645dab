//! The layer on virtual time, over the in-memory store: several instances of a service share a
//! store, as a fleet shares Redis, and the tests move time by hand.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use comcount_core::clock::VirtualClock;
use comcount_core::diagnostics::Recorder;
use comcount_core::testing::{ScriptedStore, Step};
use comcount_core::{Family, MemoryStore, Store, StoreErrorKind};
use comcount_tower::{Counting, RateLimitLayer, Rejection, TooManyRequests};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use http::{HeaderValue, Request, Response, StatusCode, header};
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt, service_fn};

const INTERVAL: Duration = Duration::from_secs(1);

type Service = BoxCloneService<Request<()>, Response<String>, Infallible>;

/// The key of a request: its `x-api-key` header, borrowed.
fn api_key(request: &Request<()>) -> Option<Cow<'_, str>> {
    let key = request.headers().get("x-api-key")?.to_str().ok()?;
    Some(Cow::Borrowed(key))
}

fn request(key: &str) -> Request<()> {
    let mut request = Request::new(());
    if let Ok(value) = HeaderValue::from_str(key) {
        request.headers_mut().insert("x-api-key", value);
    }
    request
}

/// Instances of one service, each with a family of its own on one shared store, their
/// workers on one local executor, on virtual time.
struct Fleet {
    clock: VirtualClock,
    pool: LocalPool,
    families: Vec<Family>,
    services: Vec<Service>,
    /// Requests that reached the wrapped service.
    served: Arc<AtomicU64>,
    events: Recorder,
}

struct Setup {
    instances: usize,
    limit: u64,
    partitions: u32,
    max_keys: usize,
    counting: Counting,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            instances: 3,
            limit: 30,
            partitions: 1,
            max_keys: 1000,
            counting: Counting::default(),
        }
    }
}

impl Fleet {
    fn new(setup: Setup) -> Self {
        let clock = VirtualClock::new();
        Self::on(MemoryStore::with_clock(clock.clone()), clock, setup)
    }

    fn on<S: Store + Clone>(store: S, clock: VirtualClock, setup: Setup) -> Self {
        let pool = LocalPool::new();
        let served = Arc::new(AtomicU64::new(0));
        let events = Recorder::new();
        let mut families = Vec::new();
        let mut services = Vec::new();
        for _ in 0..setup.instances {
            let (family, worker) = Family::builder("api", INTERVAL)
                .partitions(setup.partitions)
                .max_keys(setup.max_keys)
                .diagnostics(events.clone())
                .build(store.clone(), clock.clone())
                .unwrap();
            pool.spawner().spawn_local(worker).unwrap();
            let served = Arc::clone(&served);
            let inner = service_fn(move |_request: Request<()>| {
                served.fetch_add(1, Ordering::Relaxed);
                std::future::ready(Ok::<_, Infallible>(Response::new(String::from("ok"))))
            });
            let layer =
                RateLimitLayer::new(family.clone(), setup.limit, api_key).counting(setup.counting);
            services.push(BoxCloneService::new(layer.layer(inner)));
            families.push(family);
        }
        Self {
            clock,
            pool,
            families,
            services,
            served,
            events,
        }
    }

    /// Sends a request with `key` to instance `i`, and lets the workers run.
    fn call(&mut self, i: usize, key: &str) -> Response<String> {
        self.send(i, request(key))
    }

    fn send(&mut self, i: usize, request: Request<()>) -> Response<String> {
        let service = self.services[i].clone();
        let response = self.pool.run_until(service.oneshot(request));
        self.pool.run_until_stalled();
        match response {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// Starts every instance's flushes and keeps them going for two intervals, with requests
    /// of a key of each instance's own: from then on each flush carries one interval's
    /// counting. (An instance's first flush goes out at once, to learn the store's clock, and
    /// a flush loop that has had nothing to send for an interval may let the next interval go
    /// by: the flush after either carries more than an interval's counting.)
    fn warm_up(&mut self) {
        // A key in each partition, so that every partition's loop flushes.
        let partitions = self.families[0].partitions();
        let mut keys = Vec::new();
        for p in 0..partitions {
            let key = (0..)
                .map(|n| format!("warm-up-{n}"))
                .find(|key| comcount_core::keys::partition_of(key, partitions) == p)
                .unwrap();
            keys.push(key);
        }
        for _ in 0..20 {
            for i in 0..self.services.len() {
                for key in &keys {
                    self.call(i, key);
                }
            }
            self.advance(INTERVAL / 10);
        }
        self.served.store(0, Ordering::Relaxed);
    }

    fn advance(&mut self, by: Duration) {
        self.clock.advance(by);
        self.pool.run_until_stalled();
    }

    fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

/// Requests at an even pace of `per_interval` each interval for `intervals` intervals, sent
/// to the instances in turn: any stretch of one interval holds at most `per_interval` of
/// them. Returns how many were refused.
fn even_load(fleet: &mut Fleet, keys: &[&str], per_interval: u32, intervals: u32) -> usize {
    let step = INTERVAL / per_interval;
    let instances = fleet.services.len();
    let mut refused = 0;
    for n in 0..(intervals * per_interval) as usize {
        for (k, key) in keys.iter().enumerate() {
            // Each key to the instances in turn, each key starting at another.
            let response = fleet.call((n + k) % instances, key);
            if response.status() == StatusCode::TOO_MANY_REQUESTS {
                refused += 1;
            }
        }
        fleet.advance(step);
    }
    refused
}

#[test]
fn no_request_is_refused_while_the_fleet_keeps_within_the_limit() {
    for (counting, partitions) in [
        (Counting::Every, 1),
        (Counting::Admitted, 1),
        (Counting::Every, 4),
        (Counting::Admitted, 4),
    ] {
        let mut fleet = Fleet::new(Setup {
            counting,
            partitions,
            ..Setup::default()
        });
        // Start between two store intervals' edges, as a real fleet does.
        fleet.advance(Duration::from_millis(137));
        fleet.warm_up();
        let keys = ["acme", "globex", "initech"];
        assert_eq!(
            even_load(&mut fleet, &keys, 30, 12),
            0,
            "{counting:?}, {partitions} partitions"
        );
        assert_eq!(fleet.served(), 3 * 30 * 12);
    }
}

/// Requests of `key` at an even pace of `per_interval` each interval, to the instances in
/// turn, for `intervals` intervals: how many were admitted in each interval of the store's
/// clock (the clock starts at 0 with the store's).
fn admitted_per_interval(
    fleet: &mut Fleet,
    key: &str,
    per_interval: u32,
    intervals: u32,
) -> Vec<u64> {
    use comcount_core::clock::Clock;
    let step = INTERVAL / per_interval;
    let mut admitted = std::collections::BTreeMap::<u128, u64>::new();
    for n in 0..(intervals * per_interval) as usize {
        let at = fleet.clock.now().as_millis() / INTERVAL.as_millis();
        let response = fleet.call(n % fleet.services.len(), key);
        *admitted.entry(at).or_default() += u64::from(response.status() == StatusCode::OK);
        fleet.advance(step);
    }
    admitted.into_values().collect()
}

#[test]
fn a_key_past_its_limit_is_held_to_it_once_its_total_is_known() {
    let mut fleet = Fleet::new(Setup {
        counting: Counting::Every,
        ..Setup::default()
    });
    fleet.warm_up();
    // Three times the limit of 30, evenly over the three instances.
    let admitted = admitted_per_interval(&mut fleet, "acme", 90, 12);
    // Each instance alone lets through no more than the limit between two of its flushes:
    // the first interval, before the key's total is known, admits the three instances'
    // limits together (and a request the pace's rounding adds). Once the total is known
    // every request counts, refused or not, and the key stays over its limit.
    assert!(admitted[0] <= 3 * 30 + 1, "{admitted:?}");
    assert!(admitted[1] <= 3 * 30 / 2, "{admitted:?}");
    assert!(admitted[2..].iter().all(|&n| n == 0), "{admitted:?}");
    // Another key is not held back by it.
    assert_eq!(fleet.call(0, "globex").status(), StatusCode::OK);
}

#[test]
fn counting_only_admitted_requests_lets_a_key_past_its_limit_through_in_waves() {
    let mut fleet = Fleet::new(Setup {
        counting: Counting::Admitted,
        ..Setup::default()
    });
    fleet.warm_up();
    let admitted = admitted_per_interval(&mut fleet, "acme", 90, 12);
    // An interval whose requests were all refused leaves a total of 0: the next one admits
    // up to each instance's limit again. Measured here: 90, 45, 0, 45, and again.
    assert!(admitted.iter().all(|&n| n <= 3 * 30 + 1), "{admitted:?}");
    let mean = admitted.iter().sum::<u64>() as f64 / admitted.len() as f64;
    assert!(mean <= 1.6 * 30.0, "{mean}: {admitted:?}");
    assert!(admitted.contains(&0), "{admitted:?}");
}

#[test]
fn one_instance_alone_refuses_past_the_limit_within_the_interval() {
    let mut fleet = Fleet::new(Setup {
        instances: 1,
        limit: 5,
        ..Setup::default()
    });
    fleet.warm_up();
    let statuses: Vec<_> = (0..7).map(|_| fleet.call(0, "acme").status()).collect();
    assert_eq!(statuses[..5], [StatusCode::OK; 5]);
    assert_eq!(statuses[5..], [StatusCode::TOO_MANY_REQUESTS; 2]);
    assert_eq!(fleet.served(), 5);
}

#[test]
fn every_request_counts_by_default() {
    let mut fleet = Fleet::new(Setup {
        instances: 1,
        limit: 2,
        ..Setup::default()
    });
    fleet.call(0, "warm-up");
    for _ in 0..5 {
        fleet.call(0, "acme");
    }
    // Refused requests were counted too.
    assert_eq!(fleet.families[0].buffered("acme"), 5);
    assert_eq!(fleet.served(), 3);
}

#[test]
fn only_admitted_requests_count_with_counting_admitted() {
    let mut fleet = Fleet::new(Setup {
        instances: 1,
        limit: 2,
        counting: Counting::Admitted,
        ..Setup::default()
    });
    fleet.call(0, "warm-up");
    for _ in 0..5 {
        fleet.call(0, "acme");
    }
    assert_eq!(fleet.families[0].buffered("acme"), 2);
    assert_eq!(fleet.served(), 3);
}

#[test]
fn the_refusal_is_429_with_retry_after_by_the_store_clock() {
    let mut fleet = Fleet::new(Setup {
        instances: 1,
        limit: 1,
        ..Setup::default()
    });
    fleet.warm_up();
    fleet.advance(Duration::from_millis(200));
    fleet.call(0, "acme");
    let refused = fleet.call(0, "acme");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // 800 ms left of the store's interval: 1 s, rounded up.
    assert_eq!(
        fleet.families[0].until_interval_end(),
        Some(Duration::from_millis(800))
    );
    assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
    assert_eq!(refused.body(), "");
}

#[test]
fn a_request_without_a_key_is_not_counted() {
    let mut fleet = Fleet::new(Setup {
        instances: 1,
        limit: 0,
        ..Setup::default()
    });
    for _ in 0..10 {
        assert_eq!(fleet.send(0, Request::new(())).status(), StatusCode::OK);
    }
    // A header that is not text gives no key either.
    let mut odd = Request::new(());
    odd.headers_mut()
        .insert("x-api-key", HeaderValue::from_bytes(&[0xff, 0xfe]).unwrap());
    assert_eq!(fleet.send(0, odd).status(), StatusCode::OK);
    assert!(fleet.families[0].is_empty());
    // A limit of 0 refuses every request with a key, and says when to retry once the store
    // has answered.
    let refused = fleet.call(0, "acme");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers().get(header::RETRY_AFTER), None);
    let refused = fleet.call(0, "acme");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
}

#[test]
fn keys_past_the_cap_are_let_through_and_reported() {
    let mut fleet = Fleet::new(Setup {
        instances: 1,
        limit: 2,
        max_keys: 3,
        ..Setup::default()
    });
    fleet.warm_up();
    fleet.call(0, "a");
    fleet.call(0, "b");
    // Full: the warm-up key, "a" and "b".
    assert_eq!(fleet.families[0].len(), 3);
    // "c" is past the cap: never limited, never held.
    for _ in 0..10 {
        assert_eq!(fleet.call(0, "c").status(), StatusCode::OK);
    }
    assert_eq!(fleet.families[0].len(), 3);
    // The keys held keep their limits.
    fleet.call(0, "a");
    assert_eq!(fleet.call(0, "a").status(), StatusCode::TOO_MANY_REQUESTS);
    fleet.advance(INTERVAL);
    let refused = fleet.events.with_message("key refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].attribute("reason"), Some("full"));
    assert_eq!(refused[0].attribute("calls"), Some("10"));
}

#[test]
fn a_flood_of_distinct_keys_stays_within_the_cap() {
    let mut fleet = Fleet::new(Setup {
        instances: 2,
        limit: 1,
        max_keys: 500,
        partitions: 2,
        ..Setup::default()
    });
    let service = fleet.services[0].clone();
    let mut refused = 0;
    for n in 0..20_000u32 {
        let key = format!("key-{n}");
        let response = fleet.pool.run_until(service.clone().oneshot(request(&key)));
        if response.map(|r| r.status()) == Ok(StatusCode::TOO_MANY_REQUESTS) {
            refused += 1;
        }
        if n % 1000 == 0 {
            fleet.advance(INTERVAL / 10);
        }
    }
    fleet.advance(INTERVAL);
    // Each key came once: none passed its limit of 1.
    assert_eq!(refused, 0);
    assert!(fleet.families[0].len() <= 500);
    assert!(fleet.families[1].is_empty());
    let full: u64 = fleet
        .events
        .with_message("key refused")
        .iter()
        .filter(|r| r.attribute("reason") == Some("full"))
        .map(|r| r.attribute("calls").unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(full >= 20_000 - 500, "{full} refused as full");
}

#[test]
fn over_long_and_empty_keys_are_let_through_and_reported() {
    let mut fleet = Fleet::new(Setup {
        instances: 1,
        limit: 1,
        ..Setup::default()
    });
    fleet.warm_up();
    let at_most = "k".repeat(256);
    let too_long = "k".repeat(257);
    let far_too_long = "k".repeat(100_000);
    assert_eq!(fleet.call(0, &at_most).status(), StatusCode::OK);
    assert_eq!(
        fleet.call(0, &at_most).status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    for key in [too_long.as_str(), far_too_long.as_str(), ""] {
        for _ in 0..3 {
            assert_eq!(fleet.call(0, key).status(), StatusCode::OK, "{}", key.len());
        }
    }
    // The warm-up key and the longest key allowed: none of the others is held.
    assert_eq!(fleet.families[0].len(), 2);
    fleet.advance(INTERVAL);
    let reasons: Vec<_> = fleet
        .events
        .with_message("key refused")
        .iter()
        .map(|r| {
            (
                r.attribute("reason").unwrap().to_owned(),
                r.attribute("calls").unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        reasons.contains(&("too_long".into(), "6".into())),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&("empty".into(), "3".into())),
        "{reasons:?}"
    );
}

#[test]
fn while_the_store_does_not_answer_nothing_unsent_is_held_against_the_limit() {
    let clock = VirtualClock::new();
    let store = ScriptedStore::with_clock(clock.clone());
    let mut fleet = Fleet::on(
        store.clone(),
        clock,
        Setup {
            instances: 1,
            limit: 5,
            ..Setup::default()
        },
    );
    fleet.call(0, "warm-up");
    // The store stops answering.
    store.otherwise(Step::Fail(StoreErrorKind::Unavailable));
    fleet.advance(INTERVAL * 3);
    assert_eq!(fleet.families[0].until_interval_end(), None);
    // The unsent count grows over every interval of the outage: it refuses nothing.
    for _ in 0..30 {
        assert_eq!(fleet.call(0, "acme").status(), StatusCode::OK);
        fleet.advance(INTERVAL / 10);
    }
    assert!(fleet.families[0].buffered("acme") > 5);
    // The store answers again: the first flush brings the outage's count back, and the
    // limit holds again.
    store.otherwise(Step::Pass);
    fleet.advance(INTERVAL * 2);
    assert!(fleet.families[0].until_interval_end().is_some());
    let statuses: Vec<_> = (0..8).map(|_| fleet.call(0, "acme").status()).collect();
    assert!(
        statuses.contains(&StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
}

#[test]
fn a_hook_builds_the_refusal_and_the_inner_service_never_sees_it() {
    let clock = VirtualClock::new();
    let (family, worker) = Family::builder("api", INTERVAL)
        .build(MemoryStore::with_clock(clock.clone()), clock.clone())
        .unwrap();
    let mut pool = LocalPool::new();
    pool.spawner().spawn_local(worker).unwrap();
    let served = Arc::new(AtomicU64::new(0));
    let inner = {
        let served = Arc::clone(&served);
        service_fn(move |_request: Request<()>| {
            served.fetch_add(1, Ordering::Relaxed);
            std::future::ready(Ok::<_, Infallible>(Response::new(String::from("ok"))))
        })
    };
    let layer = RateLimitLayer::new(family, 1, api_key)
        .limit_per_key(|key| if key == "gold" { 3 } else { 1 })
        .on_reject(|rejection: &Rejection<'_>| {
            let mut response: Response<String> = TooManyRequests::response(rejection);
            *response.body_mut() = format!(
                "{}: {} of {}",
                rejection.key(),
                rejection.counted(),
                rejection.limit()
            );
            response
        });
    let service = layer.layer(inner);
    let mut call = |key: &str| {
        let response = pool
            .run_until(service.clone().oneshot(request(key)))
            .unwrap();
        pool.run_until_stalled();
        (response.status(), response.into_body())
    };
    // The first request starts the family's flushes; its first flush goes out at once.
    assert_eq!(call("warm-up").0, StatusCode::OK);
    assert_eq!(call("plain").0, StatusCode::OK);
    assert_eq!(
        call("plain"),
        (StatusCode::TOO_MANY_REQUESTS, "plain: 2 of 1".into())
    );
    for _ in 0..3 {
        assert_eq!(call("gold").0, StatusCode::OK);
    }
    assert_eq!(
        call("gold"),
        (StatusCode::TOO_MANY_REQUESTS, "gold: 4 of 3".into())
    );
    assert_eq!(served.load(Ordering::Relaxed), 5);
}
