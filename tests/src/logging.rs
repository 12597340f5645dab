//! A store wrapper that logs every flush: what was sent and what came back.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use comcount_core::diagnostics::Reporter;
use comcount_core::{FlushReply, FlushRequest, Store, StoreError, StoreErrorKind};

/// One flush as it went.
#[derive(Clone, Debug)]
pub struct Logged {
    /// The store's name.
    pub store: String,
    /// What was sent.
    pub request: FlushRequest,
    /// What came back.
    pub result: Result<FlushReply, StoreErrorKind>,
    /// When the flush was sent.
    pub sent: Instant,
}

/// The log that [`LoggingStore`]s write to; clones share it.
#[derive(Clone, Default)]
pub struct FlushLog(Arc<Mutex<Vec<Logged>>>);

impl FlushLog {
    /// Every flush so far.
    pub fn entries(&self) -> Vec<Logged> {
        self.0.lock().unwrap().clone()
    }

    fn push(&self, entry: Logged) {
        self.0.lock().unwrap().push(entry);
    }
}

/// Passes every flush to the store it wraps, and logs it.
pub struct LoggingStore<S> {
    inner: S,
    log: FlushLog,
}

impl<S> LoggingStore<S> {
    /// Wraps `inner`, logging to `log`.
    pub fn new(inner: S, log: FlushLog) -> Self {
        Self { inner, log }
    }
}

impl<S: Store> Store for LoggingStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let sent = Instant::now();
        let flush = self.inner.flush(request, report);
        let request = request.clone();
        let store = self.inner.name().to_owned();
        let log = self.log.clone();
        async move {
            let result = flush.await;
            log.push(Logged {
                store,
                request,
                result: result.as_ref().map(|r| *r).map_err(StoreError::kind),
                sent,
            });
            result
        }
    }
}
