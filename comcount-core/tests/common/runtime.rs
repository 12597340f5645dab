//! The same scenario on three runtimes: virtual time, tokio (with paused time) and smol (real
//! time). The last two need the core's `tokio` and `smol` features.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use comcount_core::Worker;
use comcount_core::clock::{Timer, VirtualClock};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;

/// What a scenario needs of its runtime.
pub trait Runtime: Clone + 'static {
    type Timer: Timer;

    fn timer(&self) -> Self::Timer;

    /// Spawns the worker; the flag turns true when it completes.
    fn spawn(&self, worker: Worker) -> Finished;

    /// The interval scenarios run at: long on simulated time, short on real time.
    fn interval(&self) -> Duration;

    /// Whether time is simulated, so that a timer fires exactly when due.
    fn exact_time(&self) -> bool;
}

#[derive(Clone, Default)]
pub struct Finished(Arc<AtomicBool>);

impl Finished {
    pub fn is_finished(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn wrap(&self, worker: Worker) -> impl Future<Output = ()> + Send + 'static {
        let flag = self.clone();
        async move {
            worker.await;
            flag.0.store(true, Ordering::SeqCst);
        }
    }
}

/// Sleeps in small steps until `condition` holds, for at most `within`; says whether it held.
pub async fn eventually<T: Timer>(
    timer: &T,
    within: Duration,
    mut condition: impl FnMut() -> bool,
) -> bool {
    let start = timer.now();
    loop {
        if condition() {
            return true;
        }
        if timer.now().saturating_sub(start) > within {
            return false;
        }
        timer.sleep(Duration::from_millis(1)).await;
    }
}

/// Virtual time on a single-threaded pool: whenever everything waits, time jumps to the next
/// sleeper.
#[derive(Clone)]
pub struct Virtual {
    clock: VirtualClock,
    spawner: futures::executor::LocalSpawner,
}

impl Virtual {
    pub fn run<F, Fut>(scenario: F)
    where
        F: FnOnce(Virtual) -> Fut,
        Fut: Future<Output = ()> + 'static,
    {
        let mut pool = LocalPool::new();
        let rt = Virtual {
            clock: VirtualClock::starting_at(Duration::from_secs(1_000_000)),
            spawner: pool.spawner(),
        };
        let done = Finished::default();
        let flag = done.clone();
        let scenario = scenario(rt.clone());
        pool.spawner()
            .spawn_local(async move {
                scenario.await;
                flag.0.store(true, Ordering::SeqCst);
            })
            .unwrap();
        while !done.is_finished() {
            pool.run_until_stalled();
            if done.is_finished() {
                break;
            }
            let next = rt
                .clock
                .next_wake()
                .expect("the scenario waits on nothing: deadlock");
            rt.clock.advance_to(next);
        }
    }
}

impl Runtime for Virtual {
    type Timer = VirtualClock;

    fn timer(&self) -> VirtualClock {
        self.clock.clone()
    }

    fn spawn(&self, worker: Worker) -> Finished {
        let finished = Finished::default();
        self.spawner.spawn_local(finished.wrap(worker)).unwrap();
        finished
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn exact_time(&self) -> bool {
        true
    }
}

/// tokio with paused time: deterministic, and time jumps while everything waits.
#[cfg(feature = "tokio")]
#[derive(Clone)]
pub struct Tokio;

#[cfg(feature = "tokio")]
impl Tokio {
    pub fn run<F, Fut>(scenario: F)
    where
        F: FnOnce(Tokio) -> Fut,
        Fut: Future<Output = ()>,
    {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(scenario(Tokio));
    }
}

#[cfg(feature = "tokio")]
impl Runtime for Tokio {
    type Timer = comcount_core::clock::TokioTimer;

    fn timer(&self) -> Self::Timer {
        comcount_core::clock::TokioTimer::new()
    }

    fn spawn(&self, worker: Worker) -> Finished {
        let finished = Finished::default();
        tokio::spawn(finished.wrap(worker));
        finished
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn exact_time(&self) -> bool {
        true
    }
}

/// smol on real time, with a short interval.
#[cfg(feature = "smol")]
#[derive(Clone)]
pub struct Smol;

#[cfg(feature = "smol")]
impl Smol {
    pub fn run<F, Fut>(scenario: F)
    where
        F: FnOnce(Smol) -> Fut,
        Fut: Future<Output = ()>,
    {
        smol::block_on(scenario(Smol));
    }
}

#[cfg(feature = "smol")]
impl Runtime for Smol {
    type Timer = comcount_core::clock::SmolTimer;

    fn timer(&self) -> Self::Timer {
        comcount_core::clock::SmolTimer::new()
    }

    fn spawn(&self, worker: Worker) -> Finished {
        let finished = Finished::default();
        smol::spawn(finished.wrap(worker)).detach();
        finished
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(100)
    }

    fn exact_time(&self) -> bool {
        false
    }
}

/// Runs `pool` on `clock` up to `until`: everything runs until it waits, then time jumps to the
/// next sleeper due, and so on; last, time moves to `until` and what that wakes runs.
pub fn run_virtual_until(pool: &mut LocalPool, clock: &VirtualClock, until: Duration) {
    loop {
        pool.run_until_stalled();
        match clock.next_wake() {
            Some(at) if at <= until => clock.advance_to(at),
            _ => break,
        }
    }
    clock.advance_to(until);
    pool.run_until_stalled();
}
