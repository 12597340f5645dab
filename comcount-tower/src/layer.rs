//! The layer and the service it wraps around yours.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use comcount_core::Family;
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::decision::{Decision, Knowledge, decide};
use crate::response::{OnReject, Rejection, TooManyRequests};

/// Which requests count against a key's limit.
///
/// Measured on virtual time, three instances, a limit of 30 a second and a key asking 90 a
/// second evenly over them (`tests/limits.rs`): both let 90 through in the key's first
/// interval (each instance its own limit, before the key's total is known) and 45 in the
/// second; then [`Every`](Counting::Every) admits none, [`Admitted`](Counting::Admitted) 0,
/// 45, 90, 45 in turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Counting {
    /// Every request, refused ones included (the default), as a limiter that counts each
    /// request in Redis (`INCR`) does: one lookup of the key per request, and once the key's
    /// total is known the fleet admits no more than the limit. A client that keeps asking
    /// for more than its limit each interval is refused all of it, until it asks for less
    /// (as `Retry-After` tells it to).
    #[default]
    Every,
    /// Only the requests let through: the key's two halves are read first (two lookups) and
    /// the request counted only if admitted (a third). A client that keeps asking past its
    /// limit is not shut out, but an interval whose requests were all refused leaves a total
    /// of 0, and the next admits up to each instance's limit again: waves of up to the
    /// number of instances times the limit, about 1.5 times the limit on average in the
    /// measurement above. Concurrent requests of one key on one instance can each read the
    /// count below the limit before any is counted.
    Admitted,
}

/// The limit of each key: one for all, or one per key.
#[derive(Clone)]
enum Limits {
    All(u64),
    PerKey(Arc<dyn Fn(&str) -> u64 + Send + Sync>),
}

impl Limits {
    fn of(&self, key: &str) -> u64 {
        match self {
            Limits::All(limit) => *limit,
            Limits::PerKey(limit) => limit(key),
        }
    }
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limits::All(limit) => f.debug_tuple("All").field(limit).finish(),
            Limits::PerKey(_) => f.write_str("PerKey(..)"),
        }
    }
}

/// What the layer and its services share.
struct Config<K, R> {
    family: Family,
    key: Arc<K>,
    limits: Limits,
    counting: Counting,
    on_reject: Arc<R>,
}

impl<K, R> Clone for Config<K, R> {
    fn clone(&self) -> Self {
        Self {
            family: self.family.clone(),
            key: Arc::clone(&self.key),
            limits: self.limits.clone(),
            counting: self.counting,
            on_reject: Arc::clone(&self.on_reject),
        }
    }
}

/// A [`Layer`] that limits how many requests each key may make per interval, across every
/// instance that counts in the same family (the same name and store): see the
/// [crate docs](crate) for what it guarantees.
///
/// `K` takes a key from a request; `R` builds the response to a refused one
/// ([`TooManyRequests`] unless [`on_reject`](RateLimitLayer::on_reject) says otherwise).
/// Cheap to clone: the services it makes share one configuration.
pub struct RateLimitLayer<K, R = TooManyRequests> {
    config: Config<K, R>,
}

impl<K> RateLimitLayer<K> {
    /// Limits each key to `limit` requests per interval of `family`, taking the key of a
    /// request with `key`: a header, the peer's address, a route, or `None` to let the
    /// request through uncounted. A borrowed key costs no allocation:
    /// `.map(Cow::Borrowed)`; a key made for the request, `.map(Cow::Owned)`.
    ///
    /// The family is yours to build, on any store, and its worker yours to spawn; the layer
    /// holds a handle on it. Its interval is the limit's window.
    ///
    /// ```
    /// use std::borrow::Cow;
    /// use std::time::Duration;
    /// use comcount_core::{Family, MemoryStore, clock::VirtualClock};
    /// use comcount_tower::RateLimitLayer;
    ///
    /// let (family, _worker) = Family::builder("api", Duration::from_secs(1))
    ///     .build(MemoryStore::new(), VirtualClock::new())?;
    /// let layer = RateLimitLayer::new(family, 100, |request: &http::Request<()>| {
    ///     let key = request.headers().get("x-api-key")?.to_str().ok()?;
    ///     Some(Cow::Borrowed(key))
    /// });
    /// # drop(layer);
    /// # Ok::<(), comcount_core::ConfigError>(())
    /// ```
    pub fn new<Req>(family: Family, limit: u64, key: K) -> Self
    where
        K: for<'a> Fn(&'a Req) -> Option<Cow<'a, str>>,
    {
        Self {
            config: Config {
                family,
                key: Arc::new(key),
                limits: Limits::All(limit),
                counting: Counting::default(),
                on_reject: Arc::new(TooManyRequests),
            },
        }
    }
}

impl<K, R> RateLimitLayer<K, R> {
    /// The family the layer counts in.
    pub fn family(&self) -> &Family {
        &self.config.family
    }

    /// Gives each key a limit of its own, `limit(key)` (`u64::MAX` for no limit), in place of
    /// the one for all keys. Called for each request that has a key; it should be quick.
    ///
    /// ```
    /// # use std::borrow::Cow;
    /// # use std::time::Duration;
    /// # use comcount_core::{Family, MemoryStore, clock::VirtualClock};
    /// # use comcount_tower::RateLimitLayer;
    /// # let (family, _worker) = Family::builder("api", Duration::from_secs(1))
    /// #     .build(MemoryStore::new(), VirtualClock::new())?;
    /// let layer = RateLimitLayer::new(family, 100, |key: &String| Some(Cow::Borrowed(key)))
    ///     .limit_per_key(|key| if key.starts_with("gold-") { 10_000 } else { 100 });
    /// # drop(layer);
    /// # Ok::<(), comcount_core::ConfigError>(())
    /// ```
    pub fn limit_per_key(mut self, limit: impl Fn(&str) -> u64 + Send + Sync + 'static) -> Self {
        self.config.limits = Limits::PerKey(Arc::new(limit));
        self
    }

    /// Which requests count against the limit: [`Counting::Every`] (the default) or
    /// [`Counting::Admitted`].
    pub fn counting(mut self, counting: Counting) -> Self {
        self.config.counting = counting;
        self
    }

    /// Answers refused requests with `on_reject`'s response instead of the default
    /// [`TooManyRequests`]: any `Fn(&Rejection<'_>) -> Response`, or an [`OnReject`] of your
    /// own.
    ///
    /// ```
    /// # use std::borrow::Cow;
    /// # use std::time::Duration;
    /// # use comcount_core::{Family, MemoryStore, clock::VirtualClock};
    /// use comcount_tower::{RateLimitLayer, Rejection, TooManyRequests};
    /// # let (family, _worker) = Family::builder("api", Duration::from_secs(1))
    /// #     .build(MemoryStore::new(), VirtualClock::new())?;
    ///
    /// let layer = RateLimitLayer::new(family, 100, |key: &String| Some(Cow::Borrowed(key)))
    ///     .on_reject(|rejection: &Rejection<'_>| {
    ///         let mut response: http::Response<String> = TooManyRequests::response(rejection);
    ///         *response.body_mut() = format!("{} requests a second at most\n", rejection.limit());
    ///         response
    ///     });
    /// # drop(layer);
    /// # Ok::<(), comcount_core::ConfigError>(())
    /// ```
    pub fn on_reject<R2>(self, on_reject: R2) -> RateLimitLayer<K, R2> {
        let Config {
            family,
            key,
            limits,
            counting,
            on_reject: _,
        } = self.config;
        RateLimitLayer {
            config: Config {
                family,
                key,
                limits,
                counting,
                on_reject: Arc::new(on_reject),
            },
        }
    }
}

impl<K, R> Clone for RateLimitLayer<K, R> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
        }
    }
}

impl<K, R> fmt::Debug for RateLimitLayer<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("family", &self.config.family)
            .field("limits", &self.config.limits)
            .field("counting", &self.config.counting)
            .finish_non_exhaustive()
    }
}

impl<S, K, R> Layer<S> for RateLimitLayer<K, R> {
    type Service = RateLimit<S, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            config: Arc::new(self.config.clone()),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around yours: counts each request under its key and
/// answers those past the key's limit itself, without calling yours.
pub struct RateLimit<S, K, R = TooManyRequests> {
    inner: S,
    config: Arc<Config<K, R>>,
}

impl<S, K, R> RateLimit<S, K, R> {
    /// The service it wraps.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The family it counts in.
    pub fn family(&self) -> &Family {
        &self.config.family
    }
}

impl<S: Clone, K, R> Clone for RateLimit<S, K, R> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, K, R> fmt::Debug for RateLimit<S, K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("family", &self.config.family)
            .field("limits", &self.config.limits)
            .finish_non_exhaustive()
    }
}

impl<K, R> Config<K, R> {
    /// Counts a request under `key` and decides on it; the response when refused.
    fn check<Res>(&self, key: &str) -> Option<Res>
    where
        R: OnReject<Res>,
    {
        let family = &self.family;
        let limit = self.limits.of(key);
        let (counted, group_total) = match self.counting {
            Counting::Every => (family.increment(key, 1), None),
            Counting::Admitted => {
                // Both halves of the count, as `increment` would return it with this request.
                let total = family.group_total(key);
                let unsent = family.buffered(key).saturating_add(1);
                (total.unwrap_or(0).max(unsent), Some(total))
            }
        };
        let decision = decide(counted, limit, || Knowledge {
            group_total: group_total.unwrap_or_else(|| family.group_total(key)),
            store_answers: family.until_interval_end().is_some(),
        });
        match decision {
            Decision::Admit => {
                if self.counting == Counting::Admitted {
                    family.increment(key, 1);
                }
                None
            }
            Decision::Reject => Some(self.on_reject.respond(&Rejection {
                key,
                counted,
                limit,
                retry_after: family.until_interval_end(),
            })),
        }
    }
}

impl<S, K, R, Req> Service<Req> for RateLimit<S, K, R>
where
    S: Service<Req>,
    K: for<'a> Fn(&'a Req) -> Option<Cow<'a, str>>,
    R: OnReject<S::Response>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let refused = (self.config.key)(&request).and_then(|key| self.config.check(&key));
        match refused {
            None => ResponseFuture {
                kind: Kind::Called {
                    future: self.inner.call(request),
                },
            },
            Some(response) => ResponseFuture {
                kind: Kind::Refused {
                    response: Some(response),
                },
            },
        }
    }
}

pin_project! {
    /// The future of a [`RateLimit`]'s response: the wrapped service's, or the refusal,
    /// ready at once.
    pub struct ResponseFuture<F, Res> {
        #[pin]
        kind: Kind<F, Res>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<F, Res> {
        Called { #[pin] future: F },
        Refused { response: Option<Res> },
    }
}

impl<F, Res, E> Future for ResponseFuture<F, Res>
where
    F: Future<Output = Result<Res, E>>,
{
    type Output = Result<Res, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProjection::Called { future } => future.poll(cx),
            KindProjection::Refused { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => panic!("a RateLimit response future polled after it completed"),
            },
        }
    }
}

impl<F, Res> fmt::Debug for ResponseFuture<F, Res> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Called { .. } => "called",
            Kind::Refused { .. } => "refused",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}
