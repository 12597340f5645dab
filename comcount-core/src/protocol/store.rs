//! The contract between a counter and the place its flushes go.
//!
//! A [`Store`] runs a counter's flushes, one at a time for each participant id (a counter whose
//! store is farther away than an interval flushes through up to four lanes, each under an id of
//! its own: [`ParticipantId::lane`]), as laid down by the flush protocol: it adds the amount to
//! the running total of the interval the store's own clock is in, at most once per participant
//! and interval, provided that interval is within the flush's reach of the one it expects, and
//! answers with the total of the interval before. Every check comes before the first write, so
//! a refused flush leaves the store as it was.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use crate::diagnostics::Reporter;
use crate::error::StoreError;
use crate::protocol::reply::FlushReply;
use crate::protocol::request::FlushRequest;
#[cfg(doc)]
use crate::{Fence, Layout, Outcome};

/// Where a counter's flushes go: an implementation of the flush protocol.
///
/// Implementations exist for the in-process [`MemoryStore`](crate::MemoryStore) and, in their own
/// crates, for the redis-rs and fred Redis clients. A store is shared by the counter's background
/// task only; it is never called from [`Counter::increment`](crate::Counter::increment).
///
/// # Contract
///
/// - A flush lands in the interval `n` the store's clock is in when `n` is within
///   [`FlushRequest::window`] (the flush's reach, one to three intervals, either side of
///   `expect`); elsewhere it is
///   [`Outcome::WrongInterval`]. The fence decides as in [`Outcome`], against `n`.
/// - A refused flush ([`Outcome::Duplicate`], [`Outcome::Stale`], [`Outcome::Fenced`],
///   [`Outcome::WrongInterval`]) changes nothing in the store.
/// - A request outside the ranges of [`FlushRequest::check`] is an `Err` of kind
///   [`Refused`](crate::StoreErrorKind::Refused).
/// - An `Err` of kind [`Refused`](crate::StoreErrorKind::Refused) or
///   [`Unavailable`](crate::StoreErrorKind::Unavailable) means nothing was written; any other
///   error leaves it unknown whether the flush was applied. A store whose client may send a
///   command more than once on its own, and answers with the last attempt only, marks its
///   errors with [`StoreError::after_unseen_resends`].
/// - An applied flush adds every entry's amount, or none of them. A counter's total that would
///   pass `i64::MAX` refuses the flush; a family key's total stops at `i64::MAX`.
/// - Key names and expiry follow [`FlushRequest::keys`]: in the [`Layout::Counter`] layout the
///   interval key holds an integer; in the [`Layout::Family`] layout a hash with a field per
///   key holding its total as an integer. Either expires three intervals after each write, the
///   fence after [`FlushRequest::fence_ttl_ms`].
/// - The reply's [`previous_totals`](FlushReply::previous_totals) has one item per entry, in
///   the request's order, unless the outcome is [`Outcome::WrongInterval`].
/// - A reply should bring [`fence`](FlushReply::fence), what the participant's fence held as
///   the flush ran, so that a flush whose copies all went unanswered can be settled by the
///   next one applied; such a flush stays unsettled with a store that leaves it
///   [`Fence::Untold`].
/// - A single counter's applied flush should bring its
///   [`landed_totals`](FlushReply::landed_totals): one item, the interval's total right after
///   the flush was added. A counter whose flushes do not add to every interval learns its
///   group's total from it; without it, only from flushes in consecutive intervals.
///
/// # Writing one
///
/// `flush` may be written as an `async fn`; the compiler checks that its future is `Send`. A
/// store that adds something around another one, here a count of the flushes it passes on:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use comcount_core::diagnostics::Reporter;
/// use comcount_core::{Counter, FlushReply, FlushRequest, MemoryStore, Store, StoreError};
/// use comcount_core::clock::VirtualClock;
/// use futures::executor::LocalPool;
/// use futures::task::LocalSpawnExt;
///
/// struct Tallied<S> {
///     inner: S,
///     flushes: AtomicU64,
/// }
///
/// impl<S: Store> Store for Tallied<S> {
///     fn name(&self) -> &str {
///         self.inner.name()
///     }
///
///     async fn flush(
///         &self,
///         request: &FlushRequest,
///         report: &Reporter,
///     ) -> Result<FlushReply, StoreError> {
///         self.flushes.fetch_add(1, Ordering::Relaxed);
///         self.inner.flush(request, report).await
///     }
/// }
///
/// let clock = VirtualClock::new();
/// let store = Arc::new(Tallied {
///     inner: MemoryStore::with_clock(clock.clone()),
///     flushes: AtomicU64::new(0),
/// });
/// // `Arc<S>` is a store too, so this one stays at hand.
/// let (counter, worker) = Counter::builder("requests", Duration::from_secs(1))
///     .build(store.clone(), clock)?;
/// let mut pool = LocalPool::new();
/// pool.spawner().spawn_local(worker).unwrap();
///
/// counter.increment(3);
/// pool.run_until_stalled();
/// assert_eq!(store.flushes.load(Ordering::Relaxed), 1);
/// assert_eq!(store.inner.total("{requests}:0"), Some(3));
/// # Ok::<(), comcount_core::ConfigError>(())
/// ```
///
/// To hold a store whose type is chosen at run time, box it: [`BoxStore`](crate::BoxStore).
pub trait Store: Send + Sync + 'static {
    /// A short name for diagnostics, such as `"memory"`, `"redis-rs"` or `"fred"`.
    fn name(&self) -> &str;

    /// Something about how the store is set up that will make flushes fail, said once when
    /// the counter starts as the warning
    /// [`Event::StoreCaveat`](crate::diagnostics::Event::StoreCaveat). A connection that never
    /// reconnects is the case in point: after the server restarts or fails over, every flush
    /// fails and the counter counts alone. `None`, the default, for a store set up as it
    /// should be.
    ///
    /// ```
    /// use comcount_core::{MemoryStore, Store};
    ///
    /// assert_eq!(MemoryStore::new().caveat(), None);
    /// ```
    fn caveat(&self) -> Option<Cow<'_, str>> {
        None
    }

    /// Runs one flush. `report` is where the store reports events of its own, such as loading
    /// its script.
    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send;
}

impl<S: Store> Store for Arc<S> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn caveat(&self) -> Option<Cow<'_, str>> {
        (**self).caveat()
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        (**self).flush(request, report)
    }
}
