//! The background task of a counter: the tick that flushes its buffer, once an interval.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::oneshot;

use crate::aim::Aim;
use crate::clock::Timer;
use crate::diagnostics::{Event, Reporter};
use crate::error::StoreError;
use crate::settings::Settings;
use crate::shared::Shared;
use crate::store::{FlushReply, FlushRequest, Outcome, ParticipantId, Store};
use crate::watch::Watch;

/// How many wrong-interval replies in a row one flush may get before it waits an interval;
/// each costs a round trip, so a run of them is short and never a busy loop.
const MAX_WRONG_INTERVAL: u32 = 3;

/// The background task of a [`Counter`](crate::Counter): a future to spawn on any executor.
///
/// It does nothing until the first increment, then flushes the buffer once an interval. It
/// completes after [`Counter::close`](crate::Counter::close) or when every handle is dropped.
///
/// ```no_run
/// # #[cfg(feature = "tokio")]
/// # async fn doc() -> Result<(), comcount_core::ConfigError> {
/// use std::time::Duration;
/// use comcount_core::{Counter, MemoryStore, clock::TokioTimer};
///
/// let (counter, worker) = Counter::builder("requests", Duration::from_secs(5))
///     .build(MemoryStore::new(), TokioTimer::new())?;
/// tokio::spawn(worker);
/// counter.increment(1);
/// # Ok(())
/// # }
/// ```
#[must_use = "a worker does nothing unless spawned or polled"]
pub struct Worker {
    future: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Worker {
    pub(crate) fn new<S: Store, T: Timer>(
        tick: Tick<S, T>,
        stopped: oneshot::Receiver<()>,
    ) -> Self {
        Self {
            future: Box::pin(tick.run(stopped)),
        }
    }
}

impl Future for Worker {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.future.as_mut().poll(cx)
    }
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker").finish_non_exhaustive()
    }
}

/// Everything the tick needs, as the builder hands it over.
pub(crate) struct Tick<S, T> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) store: S,
    pub(crate) timer: T,
    pub(crate) settings: Settings,
    pub(crate) report: Reporter,
    pub(crate) participant: ParticipantId,
}

impl<S: Store, T: Timer> Tick<S, T> {
    async fn run(self, mut stop: oneshot::Receiver<()>) {
        let Tick {
            shared,
            store,
            timer,
            settings,
            report,
            participant,
        } = self;
        report.emit(Event::CounterStarted {
            interval: settings.interval,
            prefix: &settings.prefix,
            store: store.name(),
        });
        let mut flusher = Flusher {
            watch: Watch::new(
                timer.clone(),
                Arc::clone(&shared),
                report.clone(),
                settings.interval,
            ),
            aim: Aim::new(settings.interval_ms),
            request: FlushRequest {
                key_base: Arc::clone(&settings.key_base),
                participant,
                seq: 0,
                amount: 0,
                interval_ms: settings.interval_ms,
                expect: 0,
                fence_ttl_ms: settings.fence_ttl_ms,
            },
            shared,
            store,
            timer,
            settings,
            report: report.clone(),
        };
        flusher.run(&mut stop).await;
        report.emit(Event::CounterStopped);
    }
}

struct Flusher<S, T> {
    shared: Arc<Shared>,
    store: S,
    timer: T,
    settings: Settings,
    report: Reporter,
    watch: Watch<T>,
    aim: Aim,
    request: FlushRequest,
}

impl<S: Store, T: Timer> Flusher<S, T> {
    /// Waits for the first increment, then flushes and waits an interval after each reply, until
    /// stopped.
    async fn run(&mut self, stop: &mut oneshot::Receiver<()>) -> Option<()> {
        self.watch.until(self.shared.started(), stop).await?;
        loop {
            self.flush(stop).await?;
            let pause = self.timer.sleep(self.settings.interval);
            self.watch.until(pause, stop).await?;
        }
    }

    /// Sends the buffer as one new flush and settles what became of it.
    async fn flush(&mut self, stop: &mut oneshot::Receiver<()>) -> Option<()> {
        self.request.seq += 1;
        self.request.amount = self.shared.buffer.take();
        let mut wrong_intervals = 0;
        loop {
            self.request.expect = self.aim.expected_interval(self.timer.now());
            let sent = self.timer.now();
            let reply = self
                .watch
                .until(self.store.flush(&self.request, &self.report), stop)
                .await?;
            let reply = match reply {
                Ok(reply) => reply,
                Err(error) => {
                    self.fail(&error, self.request.amount);
                    return Some(());
                }
            };
            self.aim.observe(&reply, sent, self.timer.now());
            if reply.outcome == Outcome::WrongInterval {
                wrong_intervals += 1;
                if wrong_intervals < MAX_WRONG_INTERVAL {
                    continue;
                }
            }
            self.settle(&reply);
            return Some(());
        }
    }

    /// Takes a reply as final for the current flush.
    fn settle(&mut self, reply: &FlushReply) {
        let amount = self.request.amount;
        match reply.outcome {
            Outcome::Applied | Outcome::Duplicate => {
                self.watch.refresh(reply.previous_total);
                self.report.emit(Event::FlushCompleted {
                    interval: reply.interval,
                    amount,
                    count: self.shared.count(),
                });
            }
            Outcome::Fenced => {
                self.watch.refresh(reply.previous_total);
                self.put_back(amount);
            }
            Outcome::Stale => {
                self.watch.refresh(reply.previous_total);
                self.fail(&StoreError::refused(StaleFlush), amount);
            }
            // The store read no total then; nothing was written, so the amount goes back to
            // try again at the next flush.
            Outcome::WrongInterval => self.put_back(amount),
        }
    }

    /// Returns an amount that was certainly not counted to the buffer.
    fn put_back(&self, amount: u64) {
        let overflow = self.shared.buffer.put_back(amount);
        if overflow > 0 {
            self.fail(
                &StoreError::refused(crate::AmountError::BufferFull { amount }),
                overflow,
            );
        }
    }

    fn fail(&self, error: &StoreError, dropped: u64) {
        self.report.emit(Event::FlushFailed { error, dropped });
    }
}

/// A flush the store found older than one it already applied from this participant: two live
/// participants share an id.
#[derive(Debug)]
struct StaleFlush;

impl fmt::Display for StaleFlush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the store already applied a later flush under this participant id; \
             give every live participant its own id",
        )
    }
}

impl std::error::Error for StaleFlush {}
