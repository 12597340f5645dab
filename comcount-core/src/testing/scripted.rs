//! A store that does, flush by flush, what a test tells it to.

use std::collections::VecDeque;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

use crate::clock::{Clock, SystemClock};
use crate::diagnostics::Reporter;
use crate::{FlushReply, FlushRequest, MemoryStore, Store, StoreError, StoreErrorKind};

/// What a [`ScriptedStore`] does with one flush.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Step {
    /// Passes the flush to the store's [`MemoryStore`], which applies it by the protocol's
    /// rules and answers.
    Pass,
    /// Answers with this reply; the memory store never sees the flush.
    Reply(FlushReply),
    /// Fails with an error of this kind; the memory store never sees the flush. That is what
    /// [`Refused`](StoreErrorKind::Refused) and [`Unavailable`](StoreErrorKind::Unavailable)
    /// promise; with [`Unanswered`](StoreErrorKind::Unanswered) it is a flush lost on its way
    /// to the store.
    Fail(StoreErrorKind),
    /// Passes the flush to the memory store, then fails with
    /// [`Unanswered`](StoreErrorKind::Unanswered): the flush was applied and its reply lost.
    LoseReply,
    /// Never answers: the flush's future stays pending for good.
    Hang,
    /// Waits until [`ScriptedStore::release`], then passes the flush to the memory store: a
    /// reply that comes as late as the test says, in the interval the store's clock is in by
    /// then.
    Hold,
    /// Passes the flush to the memory store twice and answers with the second copy's reply:
    /// a client that lost the first reply and sent the flush again after reconnecting. The
    /// fence makes the second copy a [`Duplicate`](crate::Outcome::Duplicate), counted once.
    Replay,
}

/// A [`Store`] for your unit tests that answers each flush as the next [`Step`] of its queue
/// says, and keeps every request it received. Once the queue is empty it takes the step set
/// with [`otherwise`](Self::otherwise), [`Step::Pass`] unless told.
///
/// Flushes that pass go to a [`MemoryStore`] on the scripted store's clock, which keeps the
/// totals by the protocol's rules: run it on a [`VirtualClock`](crate::clock::VirtualClock)
/// to move time by hand. Clones share the queue, the requests and the totals.
///
/// A counter whose first flush the store refuses reports the amount as dropped; the next
/// flush passes and is counted:
///
/// ```
/// use std::time::Duration;
/// use comcount_core::clock::VirtualClock;
/// use comcount_core::diagnostics::Recorder;
/// use comcount_core::testing::{ScriptedStore, Step};
/// use comcount_core::{Counter, StoreErrorKind};
/// use futures::{executor::LocalPool, task::LocalSpawnExt};
///
/// let clock = VirtualClock::new();
/// let store = ScriptedStore::with_clock(clock.clone());
/// store.then(Step::Fail(StoreErrorKind::Refused)).then(Step::Replay);
/// let events = Recorder::new();
/// let (counter, worker) = Counter::builder("jobs", Duration::from_secs(1))
///     .diagnostics(events.clone())
///     .build(store.clone(), clock.clone())?;
/// let mut pool = LocalPool::new();
/// pool.spawner().spawn_local(worker).unwrap();
///
/// // The first flush goes out at once, and is refused: its 3 are certainly not counted.
/// counter.increment(3);
/// pool.run_until_stalled();
/// let failed = events.with_message("flush failed");
/// assert_eq!(failed[0].attribute("dropped"), Some("3"));
///
/// // The next one is applied twice, as a client that resends would: counted once.
/// counter.increment(2);
/// clock.advance(Duration::from_millis(1500));
/// pool.run_until_stalled();
/// assert_eq!(store.memory().total("{jobs}:1"), Some(2));
/// assert_eq!(events.with_message("flush completed").len(), 1);
/// let requests = store.requests();
/// assert_eq!(requests.len(), 2);
/// assert_eq!((requests[0].amount(), requests[1].amount()), (3, 2));
///
/// // A flush held back until the test releases it: the counter waits for its reply.
/// store.then(Step::Hold);
/// counter.increment(4);
/// clock.advance(Duration::from_secs(1));
/// pool.run_until_stalled();
/// assert_eq!(store.held(), 1);
/// assert_eq!(store.release(), 1);
/// pool.run_until_stalled();
/// assert_eq!(store.memory().total("{jobs}:2"), Some(4));
/// # Ok::<(), comcount_core::ConfigError>(())
/// ```
pub struct ScriptedStore<C = SystemClock> {
    memory: Arc<MemoryStore<C>>,
    shared: Arc<Shared>,
}

impl<C> Clone for ScriptedStore<C> {
    fn clone(&self) -> Self {
        Self {
            memory: Arc::clone(&self.memory),
            shared: Arc::clone(&self.shared),
        }
    }
}

struct Shared {
    steps: Mutex<VecDeque<Step>>,
    otherwise: Mutex<Step>,
    requests: Mutex<Vec<FlushRequest>>,
    held: Mutex<Vec<Arc<Mutex<Gate>>>>,
}

/// A held flush: whether it was released, and the task waiting for it.
#[derive(Default)]
struct Gate {
    open: bool,
    waker: Option<Waker>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ScriptedStore {
    /// A scripted store on the wall clock, with an empty queue.
    pub fn new() -> Self {
        Self::with_clock(SystemClock)
    }
}

impl Default for ScriptedStore {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Clock> ScriptedStore<C> {
    /// A scripted store on `clock`, with an empty queue.
    pub fn with_clock(clock: C) -> Self {
        Self {
            memory: Arc::new(MemoryStore::with_clock(clock)),
            shared: Arc::new(Shared {
                steps: Mutex::default(),
                otherwise: Mutex::new(Step::Pass),
                requests: Mutex::default(),
                held: Mutex::default(),
            }),
        }
    }
}

impl<C> ScriptedStore<C> {
    /// Queues `step` for a coming flush, after the steps already queued.
    pub fn then(&self, step: Step) -> &Self {
        lock(&self.shared.steps).push_back(step);
        self
    }

    /// Queues each of `steps`, in order.
    pub fn then_each(&self, steps: impl IntoIterator<Item = Step>) -> &Self {
        lock(&self.shared.steps).extend(steps);
        self
    }

    /// What the store does once the queue is empty: [`Step::Pass`] until set.
    pub fn otherwise(&self, step: Step) -> &Self {
        *lock(&self.shared.otherwise) = step;
        self
    }

    /// Forgets the steps not yet taken.
    pub fn clear(&self) {
        lock(&self.shared.steps).clear();
    }

    /// How many queued steps are not yet taken.
    pub fn steps_left(&self) -> usize {
        lock(&self.shared.steps).len()
    }

    /// Every request received so far, oldest first; a flush and its resends are separate
    /// requests.
    pub fn requests(&self) -> Vec<FlushRequest> {
        lock(&self.shared.requests).clone()
    }

    /// How many flushes the store received.
    pub fn calls(&self) -> usize {
        lock(&self.shared.requests).len()
    }

    /// The store that keeps the totals of the flushes passed on: read them with
    /// [`MemoryStore::total`] and [`MemoryStore::field`].
    pub fn memory(&self) -> &MemoryStore<C> {
        &self.memory
    }

    /// How many flushes [`Step::Hold`] holds back now.
    pub fn held(&self) -> usize {
        lock(&self.shared.held).len()
    }

    /// Lets every held flush go on to the memory store, and returns how many there were.
    /// Each runs when its counter next polls it, in the interval the store's clock is in then.
    pub fn release(&self) -> usize {
        let gates = std::mem::take(&mut *lock(&self.shared.held));
        for gate in &gates {
            let waker = {
                let mut gate = lock(gate);
                gate.open = true;
                gate.waker.take()
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        }
        gates.len()
    }

    fn next_step(&self) -> Step {
        lock(&self.shared.steps)
            .pop_front()
            .unwrap_or_else(|| lock(&self.shared.otherwise).clone())
    }
}

impl<C> fmt::Debug for ScriptedStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedStore")
            .field("steps", &*lock(&self.shared.steps))
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

type Reply = Result<FlushReply, StoreError>;

impl<C: Clock> Store for ScriptedStore<C> {
    fn name(&self) -> &str {
        "scripted"
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Reply> + Send {
        lock(&self.shared.requests).push(request.clone());
        let step = self.next_step();
        let memory = Arc::clone(&self.memory);
        let request = request.clone();
        let report = report.clone();
        let future: Pin<Box<dyn Future<Output = Reply> + Send>> = match step {
            Step::Pass => Box::pin(async move { memory.flush(&request, &report).await }),
            Step::Reply(reply) => Box::pin(std::future::ready(Ok(reply))),
            Step::Fail(kind) => Box::pin(std::future::ready(Err(StoreError::new(
                kind,
                "the scripted store failed the flush, as its test told it to",
            )))),
            Step::LoseReply => Box::pin(async move {
                let _lost = memory.flush(&request, &report).await;
                Err(StoreError::unanswered(
                    "the scripted store applied the flush and lost its reply, as its test \
                     told it to",
                ))
            }),
            Step::Hang => Box::pin(std::future::pending()),
            Step::Hold => {
                let gate = Arc::new(Mutex::new(Gate::default()));
                lock(&self.shared.held).push(Arc::clone(&gate));
                Box::pin(async move {
                    poll_fn(|cx| {
                        let mut gate = lock(&gate);
                        if gate.open {
                            Poll::Ready(())
                        } else {
                            gate.waker = Some(cx.waker().clone());
                            Poll::Pending
                        }
                    })
                    .await;
                    memory.flush(&request, &report).await
                })
            }
            Step::Replay => Box::pin(async move {
                let _first = memory.flush(&request, &report).await;
                memory.flush(&request, &report).await
            }),
        };
        future
    }
}
