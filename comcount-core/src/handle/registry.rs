//! The keys of a family: found without a lock on the hot path, added and evicted one at a time.
//!
//! Every key lives twice: in a concurrent map, where `increment(key, n)` finds it without
//! taking a lock or allocating, and in its partition's member list, which the partition's
//! flushes walk. Adding and evicting keys are rare next to counting, so they take turns under
//! one lock.
//!
//! A key is evicted only when no handle holds it and its buffer is empty; eviction retires the
//! buffer first, so an add that found the key just before it left the map is refused and looks
//! again, and lands in the key's next slot. No unit is lost.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::KeyError;
use crate::handle::slot::Slot;
use crate::protocol::keys::partition_of;
use crate::protocol::request::FlushRequest;

/// How many references to a slot the registry holds: the map's and the member list's. A slot
/// with more is held by a handle.
const REGISTRY_HOLDS: usize = 2;

pub(crate) struct Registry {
    /// A family's keys; `None` for a single counter, whose one key is never looked up, added
    /// or evicted. A map costs some 18 KB even empty (its collector's per-thread buckets),
    /// several times all the rest of a counter; boxed, so that a counter's `None` takes 8
    /// bytes, not 72.
    keys: Option<Box<papaya::HashMap<Arc<str>, Arc<Slot>>>>,
    partitions: Box<[Mutex<Vec<Arc<Slot>>>]>,
    /// Held while a key is added or evicted.
    writer: Mutex<()>,
    max_keys: usize,
}

impl Registry {
    /// The registry of a single counter: one partition, holding `slot`.
    pub(crate) fn single(slot: Arc<Slot>) -> Self {
        Self {
            keys: None,
            partitions: vec![Mutex::new(vec![slot])].into_boxed_slice(),
            writer: Mutex::new(()),
            max_keys: 1,
        }
    }

    /// An empty family registry of `partitions` partitions, taking at most `max_keys` keys.
    pub(crate) fn family(partitions: u32, max_keys: usize) -> Self {
        Self {
            keys: Some(Box::default()),
            partitions: (0..partitions).map(|_| Mutex::default()).collect(),
            writer: Mutex::new(()),
            max_keys,
        }
    }

    /// Calls `f` with the slot of `key`, if it is there; no lock, no allocation.
    #[inline]
    pub(crate) fn find<R>(&self, key: &str, f: impl FnOnce(&Slot) -> R) -> Option<R> {
        let keys = self.keys.as_ref()?;
        let guard = keys.guard();
        keys.get(key, &guard).map(|slot| f(slot))
    }

    /// The slot of `key`, added if it is new.
    ///
    /// # Errors
    ///
    /// An empty or over-long key, or a new key past the family's cap (a single counter
    /// takes none).
    pub(crate) fn get_or_add(&self, key: &str, epoch: u64) -> Result<Arc<Slot>, KeyError> {
        let Some(keys) = &self.keys else {
            return Err(KeyError::Full {
                max_keys: self.max_keys,
            });
        };
        let _writer = lock(&self.writer);
        let guard = keys.guard();
        if let Some(slot) = keys.get(key, &guard) {
            return Ok(Arc::clone(slot));
        }
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > FlushRequest::MAX_KEY_LEN {
            return Err(KeyError::TooLong {
                len: key.len(),
                max: FlushRequest::MAX_KEY_LEN,
            });
        }
        if keys.len() >= self.max_keys {
            return Err(KeyError::Full {
                max_keys: self.max_keys,
            });
        }
        let key: Arc<str> = key.into();
        let partition = partition_of(&key, self.partitions.len() as u32);
        let slot = Arc::new(Slot::new(Arc::clone(&key), epoch));
        lock(&self.partitions[partition as usize]).push(Arc::clone(&slot));
        keys.insert(key, Arc::clone(&slot), &guard);
        Ok(slot)
    }

    /// How many keys the family holds now.
    pub(crate) fn len(&self) -> usize {
        self.keys.as_ref().map_or(1, |keys| keys.len())
    }

    /// The most keys a family may hold; `None` for a single counter.
    pub(crate) fn max_keys(&self) -> Option<usize> {
        self.keys.as_ref().map(|_| self.max_keys)
    }

    /// How many partitions there are.
    pub(crate) fn partitions(&self) -> u32 {
        self.partitions.len() as u32
    }

    /// Whether a handle holds `slot` (a counter's key always counts as held), so that it is
    /// flushed every interval and never evicted.
    pub(crate) fn is_held(&self, slot: &Arc<Slot>) -> bool {
        self.keys.is_none() || Arc::strong_count(slot) > REGISTRY_HOLDS
    }

    /// Evicts every key of `partition` for which `idle` holds, that no handle holds, and whose
    /// buffer is empty; then calls `f` with the partition's members.
    pub(crate) fn with_members<R>(
        &self,
        partition: u32,
        idle: impl Fn(&Slot) -> bool,
        f: impl FnOnce(&[Arc<Slot>]) -> R,
    ) -> R {
        let members = &self.partitions[partition as usize];
        let Some(keys) = &self.keys else {
            return f(&lock(members));
        };
        let _writer = lock(&self.writer);
        let mut members = lock(members);
        let guard = keys.guard();
        members.retain(|slot| {
            let evict = !self.is_held(slot) && idle(slot) && slot.buffer.retire();
            if evict {
                keys.remove(&*slot.key, &guard);
            }
            !evict
        });
        f(&members)
    }

    /// Calls `f` with every key of every partition.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Slot)) {
        for partition in &self.partitions {
            lock(partition).iter().for_each(|slot| f(slot));
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("keys", &self.len())
            .field("partitions", &self.partitions.len())
            .finish_non_exhaustive()
    }
}
