//! What the layer adds to a request: a service that answers at once, called bare and through
//! the layer, with a key that is admitted, one that is refused, and each way of counting.
//!
//! Run with `cargo bench -p comcount-tower --bench layer`. Each sample builds its request
//! (`http::Request` with an `x-api-key` header), as the bare service's does: the difference
//! between the two is the layer's cost.

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::task::{Context, Poll};
use std::time::Duration;

use comcount_core::clock::VirtualClock;
use comcount_core::{Family, MemoryStore};
use comcount_tower::{Counting, RateLimitLayer};
use divan::{Bencher, black_box};
use futures::FutureExt;
use http::{HeaderValue, Request, Response};
use tower_layer::Layer;
use tower_service::Service;

fn main() {
    divan::main();
}

/// A service that answers at once.
#[derive(Clone)]
struct Hello;

impl Service<Request<()>> for Hello {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        ready(Ok(Response::new(String::new())))
    }
}

fn api_key(request: &Request<()>) -> Option<Cow<'_, str>> {
    let key = request.headers().get("x-api-key")?.to_str().ok()?;
    Some(Cow::Borrowed(key))
}

fn request(key: &'static str) -> Request<()> {
    let mut request = Request::new(());
    request
        .headers_mut()
        .insert("x-api-key", HeaderValue::from_static(key));
    request
}

fn run<S: Service<Request<()>, Response = Response<String>>>(
    bencher: Bencher<'_, '_>,
    mut service: S,
    key: &'static str,
) {
    bencher.bench_local(|| {
        let response = service.call(request(key)).now_or_never();
        black_box(response.map(|r| r.is_ok()))
    });
}

/// A family that has heard from its store (the in-memory one), with `refused` over its limit.
fn layered(counting: Counting) -> impl Service<Request<()>, Response = Response<String>> {
    let clock = VirtualClock::new();
    let (family, worker) = Family::builder("bench", Duration::from_secs(1))
        .build(MemoryStore::with_clock(clock.clone()), clock)
        .expect("a family");
    let mut pool = futures::executor::LocalPool::new();
    futures::task::LocalSpawnExt::spawn_local(&pool.spawner(), worker).expect("spawned");
    family.increment("refused", 1);
    pool.run_until_stalled();
    // The worker is kept on its pool: the family stays open, and its store answered.
    std::mem::forget(pool);
    // A limit no benchmark reaches for "admitted"; "refused" is past it from the start.
    let layer = RateLimitLayer::new(family.clone(), u64::MAX / 2, api_key)
        .limit_per_key(|key| if key == "refused" { 0 } else { u64::MAX / 2 })
        .counting(counting);
    family.increment("admitted", 1);
    layer.layer(Hello)
}

#[divan::bench]
fn bare(bencher: Bencher<'_, '_>) {
    run(bencher, Hello, "admitted");
}

#[divan::bench(args = [Counting::Every, Counting::Admitted])]
fn admitted(bencher: Bencher<'_, '_>, counting: Counting) {
    run(bencher, layered(counting), "admitted");
}

#[divan::bench(args = [Counting::Every, Counting::Admitted])]
fn refused(bencher: Bencher<'_, '_>, counting: Counting) {
    run(bencher, layered(counting), "refused");
}
