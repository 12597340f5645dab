//! A store that answers from a script before it passes flushes on to a `MemoryStore`.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::clock::Timer;
use comcount_core::diagnostics::Reporter;
use comcount_core::{FlushReply, FlushRequest, MemoryStore, Store, StoreError};
use futures::FutureExt;

/// What the store does with one flush.
pub enum Action {
    /// Passes it to the memory store.
    Pass,
    /// Answers with this reply without touching the memory store.
    Reply(FlushReply),
    /// Fails with this error.
    Fail(fn() -> StoreError),
    /// Fails with this error after this long: a client that kept trying on its own first.
    FailAfter(Duration, fn() -> StoreError),
    /// Never answers.
    Hang,
    /// Passes it to the memory store after this long, and answers then.
    Delay(Duration),
    /// Passes it to the memory store at once, and answers after this long: a store whose way
    /// back is long.
    ReplyAfter(Duration),
}

#[derive(Clone)]
pub struct ScriptedStore<C> {
    pub memory: MemoryStore<C>,
    clock: C,
    times: Arc<Mutex<Vec<Duration>>>,
    script: Arc<Mutex<VecDeque<Action>>>,
    calls: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<FlushRequest>>>,
    /// The replies to [`Action::ReplyAfter`], each with when it is delivered.
    late_replies: Arc<Mutex<Vec<(Duration, FlushReply)>>>,
}

impl<C: Timer> ScriptedStore<C> {
    pub fn new(clock: C) -> Self {
        Self {
            memory: MemoryStore::with_clock(clock.clone()),
            clock,
            times: Arc::default(),
            script: Arc::default(),
            calls: Arc::default(),
            requests: Arc::default(),
            late_replies: Arc::default(),
        }
    }

    /// Queues actions for the next flushes; once they run out, flushes pass.
    pub fn then(&self, actions: impl IntoIterator<Item = Action>) -> &Self {
        self.script.lock().unwrap().extend(actions);
        self
    }

    /// Forgets the actions not yet taken: flushes pass from now on.
    pub fn clear(&self) {
        self.script.lock().unwrap().clear();
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// When each flush was called, on the store's clock.
    pub fn call_times(&self) -> Vec<Duration> {
        self.times.lock().unwrap().clone()
    }

    pub fn requests(&self) -> Vec<FlushRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// The replies to [`Action::ReplyAfter`], in the order of their calls, each with when it
    /// is delivered.
    pub fn late_replies(&self) -> Vec<(Duration, FlushReply)> {
        self.late_replies.lock().unwrap().clone()
    }
}

impl<C: Timer> Store for ScriptedStore<C> {
    fn name(&self) -> &str {
        "scripted"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.times.lock().unwrap().push(self.clock.now());
        self.requests.lock().unwrap().push(request.clone());
        let action = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Action::Pass);
        let future: Pin<Box<dyn Future<Output = _> + Send>> = match action {
            Action::Pass => {
                let memory = self.memory.clone();
                let request = request.clone();
                let report = report.clone();
                Box::pin(async move { memory.flush(&request, &report).await })
            }
            Action::Reply(reply) => Box::pin(std::future::ready(Ok(reply))),
            Action::Fail(error) => Box::pin(std::future::ready(Err(error()))),
            Action::FailAfter(by, error) => {
                let sleep = self.clock.sleep(by);
                Box::pin(async move {
                    sleep.await;
                    Err(error())
                })
            }
            Action::Hang => Box::pin(std::future::pending()),
            Action::Delay(by) => {
                let memory = self.memory.clone();
                let request = request.clone();
                let report = report.clone();
                let sleep = self.clock.sleep(by);
                Box::pin(async move {
                    sleep.await;
                    memory.flush(&request, &report).await
                })
            }
            Action::ReplyAfter(by) => {
                let reply = self
                    .memory
                    .flush(request, report)
                    .now_or_never()
                    .expect("the memory store answers at once");
                if let Ok(reply) = &reply {
                    let at = self.clock.now() + by;
                    self.late_replies.lock().unwrap().push((at, reply.clone()));
                }
                let sleep = self.clock.sleep(by);
                Box::pin(async move {
                    sleep.await;
                    reply
                })
            }
        };
        future
    }
}
