//! A store whose type is chosen at run time.
//!
//! [`Store::flush`] returns `impl Future + Send`, which keeps every store's flush free of
//! allocation but makes the trait impossible to use as `dyn Store`. [`BoxStore`] puts any store
//! behind a trait of its own that is dyn-compatible: its `flush` returns the store's future
//! boxed, as `Pin<Box<dyn Future + Send + '_>>`.
//!
//! That inner trait is written by hand rather than with the `async-trait` crate: it is private,
//! a few lines long, and has one implementation, and `async-trait` would compile a procedural
//! macro (and `syn`) into every build of a crate meant to stay light. The cost is the same
//! either way: one allocation per flush, which is once an interval per counter or partition,
//! on the background task. `increment`, the hot path, never reaches a store.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::diagnostics::Reporter;
use crate::error::StoreError;
use crate::protocol::reply::FlushReply;
use crate::protocol::request::FlushRequest;
use crate::protocol::store::Store;

/// The future a boxed store's flush returns.
type BoxFlush<'a> = Pin<Box<dyn Future<Output = Result<FlushReply, StoreError>> + Send + 'a>>;

/// What [`BoxStore`] needs of a store, in a dyn-compatible form.
trait DynStore: Send + Sync + 'static {
    fn name(&self) -> &str;

    fn caveat(&self) -> Option<Cow<'_, str>>;

    fn flush<'a>(&'a self, request: &'a FlushRequest, report: &'a Reporter) -> BoxFlush<'a>;
}

impl<S: Store> DynStore for S {
    fn name(&self) -> &str {
        Store::name(self)
    }

    fn caveat(&self) -> Option<Cow<'_, str>> {
        Store::caveat(self)
    }

    fn flush<'a>(&'a self, request: &'a FlushRequest, report: &'a Reporter) -> BoxFlush<'a> {
        Box::pin(Store::flush(self, request, report))
    }
}

/// Any [`Store`], behind one type: for a store chosen at run time.
///
/// Each store is a type of its own, and [`build`](crate::builder::Builder::build) is generic
/// over it. Where one variable, field or function result must hold whichever store was
/// chosen, box it:
///
/// ```
/// use std::time::Duration;
/// use comcount_core::{BoxStore, Counter, MemoryStore, Store, clock::VirtualClock};
///
/// # fn run(shared: bool) -> Result<(), comcount_core::ConfigError> {
/// let clock = VirtualClock::new();
/// // In a service: the Redis store when Redis is configured, the in-memory one when not.
/// let store: BoxStore = if shared {
///     BoxStore::new(MemoryStore::with_clock(clock.clone()))
/// } else {
///     BoxStore::new(MemoryStore::new())
/// };
/// assert_eq!(store.name(), "memory");
///
/// // Clones share the one store, so counters may share it.
/// let (requests, _worker) = Counter::builder("requests", Duration::from_secs(1))
///     .build(store.clone(), clock.clone())?;
/// let (jobs, _jobs_worker) = Counter::builder("jobs", Duration::from_secs(1))
///     .build(store, clock)?;
/// assert_eq!(requests.increment(1), 1);
/// assert_eq!(jobs.increment(2), 2);
/// # Ok(())
/// # }
/// # run(true)?;
/// # run(false)?;
/// # Ok::<(), comcount_core::ConfigError>(())
/// ```
///
/// A boxed store names itself, and behaves, as the store inside it; its clones share that
/// store. Its flush costs one
/// allocation more than the store's own: once an interval per counter or partition, on the
/// background task, never in [`increment`](crate::Counter::increment).
///
/// # Without a box
///
/// Where the choice is made next to the [`build`](crate::builder::Builder::build) call, no box
/// is needed: every `build` of a counter yields the same `(Counter, Worker)`, whatever its store
/// and timer (and a family's the same `(Family, Worker)`), so each branch of a `match` can
/// build with a store of another type.
///
/// ```
/// use std::time::Duration;
/// use comcount_core::{Counter, MemoryStore, Worker, clock::VirtualClock};
///
/// enum Backend {
///     /// A store of its own.
///     Local,
///     /// A store other counters share, and its clock.
///     Shared(MemoryStore<VirtualClock>, VirtualClock),
/// }
///
/// fn build(backend: Backend) -> Result<(Counter, Worker), comcount_core::ConfigError> {
///     let builder = Counter::builder("requests", Duration::from_secs(1));
///     match backend {
///         Backend::Local => builder.build(MemoryStore::new(), VirtualClock::new()),
///         Backend::Shared(store, clock) => builder.build(store, clock),
///     }
/// }
///
/// let clock = VirtualClock::new();
/// let (shared, _worker) = build(Backend::Shared(MemoryStore::with_clock(clock.clone()), clock))?;
/// assert_eq!(shared.increment(2), 2);
/// let (local, _local_worker) = build(Backend::Local)?;
/// assert_eq!(local.increment(3), 3);
/// # Ok::<(), comcount_core::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct BoxStore {
    inner: Arc<dyn DynStore>,
}

impl BoxStore {
    /// Boxes `store`.
    pub fn new(store: impl Store) -> Self {
        Self {
            inner: Arc::new(store),
        }
    }
}

impl Store for BoxStore {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn caveat(&self) -> Option<Cow<'_, str>> {
        self.inner.caveat()
    }

    async fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> Result<FlushReply, StoreError> {
        self.inner.flush(request, report).await
    }
}

impl fmt::Debug for BoxStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BoxStore").field(&self.inner.name()).finish()
    }
}
