//! A store that passes every flush on to another one and writes down what went by.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::diagnostics::Reporter;
use crate::{FlushReply, FlushRequest, Store, StoreError};

/// What a [`Recorded`] store writes down of each copy of a flush it sends, and of its answer.
///
/// [`sent`](Self::sent) is called as the counter calls [`Store::flush`], before the inner
/// store sees the request; what it returns is kept until the answer comes, then handed to
/// [`answered`](Self::answered) with it. A flush whose future is dropped unanswered (the
/// counter stopped waiting for it, or was closed) never reaches `answered`: its
/// [`Sent`](Self::Sent) is dropped instead, so a `Sent` with a `Drop` of its own learns of it.
///
/// One log may serve many stores: it is shared behind an [`Arc`].
pub trait FlushLog: Send + Sync + 'static {
    /// What to keep of a copy until its answer comes; `()` when the answer alone matters.
    type Sent: Send + 'static;

    /// Notes a copy of a flush about to go to the inner store.
    fn sent(&self, request: &FlushRequest) -> Self::Sent;

    /// Notes the inner store's answer to the copy that `sent` was made for.
    fn answered(&self, sent: Self::Sent, answer: &Result<FlushReply, StoreError>);
}

/// A [`Store`] that passes every flush to `inner` and tells its [`FlushLog`] of each copy and
/// of each answer, which it passes back unchanged. Its name and caveat are the inner store's.
///
/// Clones share the log.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use comcount_core::clock::VirtualClock;
/// use comcount_core::diagnostics::{Recorder, Reporter};
/// use comcount_core::testing::{FlushLog, Recorded};
/// use comcount_core::{
///     FlushReply, FlushRequest, KeySpace, MemoryStore, Outcome, ParticipantId, Store, StoreError,
/// };
/// use futures::executor::block_on;
///
/// /// Counts the copies sent, and adds up the amounts the store applied.
/// #[derive(Default)]
/// struct Applied {
///     copies: AtomicU64,
///     amount: AtomicU64,
/// }
///
/// impl FlushLog for Applied {
///     // The request's amount, until the answer says whether it was applied.
///     type Sent = u64;
///
///     fn sent(&self, request: &FlushRequest) -> u64 {
///         self.copies.fetch_add(1, Ordering::Relaxed);
///         request.amount()
///     }
///
///     fn answered(&self, amount: u64, answer: &Result<FlushReply, StoreError>) {
///         if answer.as_ref().is_ok_and(|reply| reply.outcome == Outcome::Applied) {
///             self.amount.fetch_add(amount, Ordering::Relaxed);
///         }
///     }
/// }
///
/// let store = Recorded::new(
///     MemoryStore::with_clock(VirtualClock::new()),
///     Arc::new(Applied::default()),
/// );
/// let report = Reporter::new("requests", Arc::new(Recorder::new()));
/// let request =
///     FlushRequest::new(KeySpace::counter("", "requests"), ParticipantId::from_u64(1), 1000)
///         .with_amount(5);
///
/// // The same flush sent twice: the second copy is a duplicate, applied once in all.
/// let first = block_on(store.flush(&request, &report)).unwrap();
/// let second = block_on(store.flush(&request, &report)).unwrap();
/// assert_eq!((first.outcome, second.outcome), (Outcome::Applied, Outcome::Duplicate));
/// assert_eq!(store.log().copies.load(Ordering::Relaxed), 2);
/// assert_eq!(store.log().amount.load(Ordering::Relaxed), 5);
/// assert_eq!(store.inner().total("{requests}:0"), Some(5));
/// ```
pub struct Recorded<S, L> {
    inner: S,
    log: Arc<L>,
}

impl<S, L> Recorded<S, L> {
    /// Wraps `inner`, telling `log` of every flush.
    pub fn new(inner: S, log: Arc<L>) -> Self {
        Self { inner, log }
    }

    /// The store every flush goes to.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The log every flush is told to.
    pub fn log(&self) -> &Arc<L> {
        &self.log
    }
}

impl<S: Clone, L> Clone for Recorded<S, L> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            log: Arc::clone(&self.log),
        }
    }
}

impl<S: fmt::Debug, L> fmt::Debug for Recorded<S, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorded")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S: Store, L: FlushLog> Store for Recorded<S, L> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn caveat(&self) -> Option<Cow<'_, str>> {
        self.inner.caveat()
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        // Both happen at the call, not at the first poll: a copy whose future is dropped
        // before it is polled was still sent, as far as the counter knows.
        let sent = self.log.sent(request);
        let flushing = self.inner.flush(request, report);
        async move {
            let answer = flushing.await;
            self.log.answered(sent, &answer);
            answer
        }
    }
}
