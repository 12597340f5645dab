//! One load of the flush script at a time, for all the flushes of a store that find it missing.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::lock::Mutex;

/// Lets the flushes of one store that find the script missing together (thousands of
/// counters after a failover or a `SCRIPT FLUSH`) load it once between them, rather than once
/// each.
///
/// A store notes [`attempts`](Self::attempts) before it sends an `EVALSHA`. On `NOSCRIPT` it
/// calls [`load`](Self::load) with that number: the first caller loads, and a caller whose
/// `EVALSHA` went out before a load attempt ended sends it again without loading. Loads are
/// tried one at a time; a failed one is not tried again by the callers that waited for it (a
/// hung connection would otherwise hold each of them in turn), and a flush that still finds
/// the script missing is turned away for now, to be sent again later.
///
/// ```
/// # futures::executor::block_on(async {
/// use comcount_core::script::ScriptLoader;
///
/// let loader = ScriptLoader::new();
/// let seen = loader.attempts();
/// // ... the EVALSHA noted `seen` and came back NOSCRIPT ...
/// let loaded = loader.load(seen, || async { Ok::<_, ()>("sha") }).await;
/// assert_eq!(loaded, Ok(Some("sha")));
/// // Another flush that went out before that load: nothing to load.
/// assert_eq!(loader.load(seen, || async { Ok::<_, ()>("sha") }).await, Ok(None));
/// # });
/// ```
#[derive(Debug, Default)]
pub struct ScriptLoader {
    /// How many load attempts have ended.
    attempts: AtomicU64,
    loading: Mutex<()>,
}

impl ScriptLoader {
    /// A loader that has loaded nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many load attempts have ended so far: note it before sending an `EVALSHA`.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Acquire)
    }

    /// Runs `load` (a `SCRIPT LOAD`), unless a load attempt ended since `seen` was noted.
    /// Returns what `load` returned, the script's SHA-1 say, or `None` when the caller only
    /// needs to send its `EVALSHA` again.
    ///
    /// # Errors
    ///
    /// The error of `load`, when this caller ran it.
    pub async fn load<F, Fut, T, E>(&self, seen: u64, load: F) -> Result<Option<T>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let _one_at_a_time = self.loading.lock().await;
        if self.attempts() != seen {
            return Ok(None);
        }
        let loaded = load().await;
        self.attempts.fetch_add(1, Ordering::AcqRel);
        loaded.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::future::join_all;
    use std::sync::atomic::AtomicUsize;

    /// A thousand flushes that found the script missing together load it once; a flush that
    /// finds it missing after that load loads it again.
    #[test]
    fn flushes_that_find_the_script_missing_together_load_it_once() {
        let loader = ScriptLoader::new();
        let loads = AtomicUsize::new(0);
        let load = || async {
            loads.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>("sha")
        };
        let seen = loader.attempts();
        let results = block_on(join_all((0..1000).map(|_| loader.load(seen, load))));
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert_eq!(results.iter().filter(|r| **r == Ok(Some("sha"))).count(), 1);
        assert!(block_on(loader.load(loader.attempts(), load)).is_ok());
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }

    /// A failed load is not tried again by those that waited for it: each would otherwise
    /// wait out the same failure in turn.
    #[test]
    fn a_failed_load_is_not_tried_again_by_those_that_waited_for_it() {
        let loader = ScriptLoader::new();
        let loads = AtomicUsize::new(0);
        let load = || async {
            loads.fetch_add(1, Ordering::SeqCst);
            Err::<&str, _>("connection lost")
        };
        let seen = loader.attempts();
        let results = block_on(join_all((0..10).map(|_| loader.load(seen, load))));
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
        assert_eq!(results.iter().filter(|r| **r == Ok(None)).count(), 9);
    }
}
