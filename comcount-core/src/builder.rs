//! Building a counter or a family: its settings, checked, and the pair it is made of.
//!
//! [`Counter::builder`] and [`Family::builder`] start a [`Builder`]; this module names its type
//! for code that passes one around. It is not re-exported at the crate root, so that a glob
//! import of this crate and of a Redis client's prelude (fred's has a `Builder` too) do not
//! collide.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock, Timer};
use crate::diagnostics::{Diagnostics, LogDiagnostics, Reporter};
use crate::engine::parts::Parts;
use crate::engine::slow_alarm::SharedAlarm;
use crate::engine::worker::Worker;
use crate::error::ConfigError;
use crate::handle::counter::Counter;
use crate::handle::family::Family;
use crate::handle::registry::Registry;
use crate::handle::sequence;
use crate::handle::settings::{self, FamilyChoice, PolicyChoice, Settings};
use crate::handle::shared::{Lifetime, Shared};
use crate::handle::slot::Slot;
use crate::handle::timing::Timing;
use crate::protocol::participant::ParticipantId;
use crate::protocol::store::Store;

/// The settings of a counter, from [`Counter::builder`], or of a family, from
/// [`Family::builder`]: the same settings, and a family's own on top.
///
/// ```
/// use std::time::Duration;
/// use comcount_core::{Counter, MemoryStore, diagnostics::Recorder, clock::VirtualClock};
///
/// let (counter, worker) = Counter::builder("jobs", Duration::from_millis(500))
///     .prefix("billing:")
///     .diagnostics(Recorder::new())
///     .build(MemoryStore::new(), VirtualClock::new())?;
/// # drop((counter, worker));
/// # Ok::<(), comcount_core::ConfigError>(())
/// ```
pub struct Builder<K = ForCounter> {
    name: String,
    interval: Duration,
    prefix: String,
    diagnostics: Arc<dyn Diagnostics>,
    participant: Option<ParticipantId>,
    policy: PolicyChoice,
    kind: K,
}

/// Marks a [`Builder`] that builds a [`Counter`].
#[derive(Clone, Copy, Debug)]
pub struct ForCounter(());

/// Marks a [`Builder`] that builds a [`Family`], and holds the family's own settings.
#[derive(Clone, Copy, Debug)]
pub struct ForFamily(FamilyChoice);

impl Counter {
    /// Starts building a counter named `name` whose total runs over intervals of `interval`.
    ///
    /// Participants whose counters share a name (and a prefix, and a store) share a total.
    pub fn builder(name: impl Into<String>, interval: Duration) -> Builder {
        Builder::new(name.into(), interval)
    }
}

impl Family {
    /// Starts building a family named `name` whose totals run over intervals of `interval`.
    ///
    /// Participants whose families share a name (and a prefix, a store and a number of
    /// partitions) share a total for each key.
    pub fn builder(name: impl Into<String>, interval: Duration) -> Builder<ForFamily> {
        Builder::family(name.into(), interval)
    }
}

impl Builder {
    pub(crate) fn new(name: String, interval: Duration) -> Self {
        Self::with_kind(name, interval, ForCounter(()))
    }
}

impl Builder<ForFamily> {
    pub(crate) fn family(name: String, interval: Duration) -> Self {
        Self::with_kind(name, interval, ForFamily(FamilyChoice::default()))
    }

    /// Splits the family into `partitions` parts, each flushed with one round trip per
    /// interval, under a hash tag of its own (so that a Redis Cluster spreads them). 1 by
    /// default, at most 65,536.
    ///
    /// Every participant of a family must use the same number: it decides which partition
    /// a key belongs to. A flush carries at most 1000 keys; take about one partition per 700
    /// keys counted at once, so that a round trip carries many keys and a partition that draws
    /// more keys than the others still fits in one flush. A flush costs Redis a constant and a
    /// term per key it carries, however many participants or keys the partition has. A
    /// partition with more keys than a flush carries flushes them in turns, and their totals
    /// come less often.
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.kind.0.partitions = partitions;
        self
    }

    /// The most keys the family holds at once, 100,000 by default. A new key past it is
    /// refused with [`KeyError::Full`](crate::KeyError::Full), and nothing is counted.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.kind.0.max_keys = max_keys;
        self
    }

    /// How long a key may go without being used (incremented, read, or held by a handle),
    /// with nothing left to send, before it is evicted: by default a minute, or ten intervals
    /// if longer; at least one interval.
    ///
    /// A key is flushed in every interval it is used in and the one after, so that the total
    /// of a key in use stays fresh; a key used less often gets its total with the flush after
    /// its next use, and a key used while the flushes are held up (the store down, say) is
    /// kept for the first flush after. An evicted key loses nothing, its buffer being empty;
    /// used again, it comes back, and its total is unknown until the next flush brings it.
    pub fn evict_after(mut self, evict_after: Duration) -> Self {
        self.kind.0.evict_after = Some(evict_after);
        self
    }

    /// Checks the settings and makes the family: the [`Family`] handle to count with, and
    /// the [`Worker`] that flushes it, to spawn on the runtime of your choice with `timer` as
    /// its time.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] says which setting cannot work and how to fix it.
    pub fn build<S: Store, T: Timer>(
        self,
        store: S,
        timer: T,
    ) -> Result<(Family, Worker), ConfigError> {
        let family = self.kind.0;
        let settings = self.settings()?.with_family(family)?;
        let keys = Registry::family(family.partitions, family.max_keys);
        let (life, worker) = self.start(settings, keys, store, timer);
        Ok((Family::new(life), worker))
    }
}

impl<K> Builder<K> {
    fn with_kind(name: String, interval: Duration, kind: K) -> Self {
        Self {
            name,
            interval,
            prefix: String::new(),
            diagnostics: Arc::new(LogDiagnostics),
            participant: None,
            policy: PolicyChoice::default(),
            kind,
        }
    }

    /// Puts `prefix` before every key of the counter, to keep it apart from other users of the
    /// store. Empty by default. It must not hold `{` or `}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sends the counter's events to `diagnostics` instead of the `log` crate.
    pub fn diagnostics(mut self, diagnostics: impl Diagnostics) -> Self {
        self.diagnostics = Arc::new(diagnostics);
        self
    }

    /// Uses `id` as this participant's identity instead of a random one.
    ///
    /// Two live participants must never share an id: the store would take them for one and
    /// refuse the flushes of the one that numbers them lower, reporting each as `flush failed`
    /// (`stale`). Two started in the same millisecond would number them alike; each start is
    /// placed at random within its millisecond, which makes that unlikely, not impossible. A
    /// fixed id suits tests that need stable key names, and a participant whose identity
    /// outlives its process (a pod of a StatefulSet, say).
    ///
    /// On a store farther away than an interval, a counter flushes through up to three more
    /// lanes, each under an id derived from this one (the same in every run), with a fence of
    /// its own: "Lanes" in docs/design.md tells how. What follows holds for each.
    ///
    /// # Restarting with the same id
    ///
    /// The store keeps each participant's fence (its last flush's sequence number and
    /// interval) for ten minutes, or three intervals if longer. A participant built again under
    /// the same id, after a restart, numbers its flushes from the wall clock (a thousand
    /// numbers a millisecond), so they follow the ones it sent before it stopped and its first
    /// flush is applied, not taken for an old copy. Two things must hold for that: the wall
    /// clock must not step back across the restart, and the old process must be gone (it
    /// would otherwise be a second live participant with the same id). A clock stepped back
    /// numbers the new run's flushes below the fence's: they are refused as `stale`, and
    /// reported dropped, until the fence expires. Should the numbers reach the fence's first
    /// (a step back of a few milliseconds), the one that equals it is answered as a duplicate
    /// of the old run's flush; it is reported as `flush failed`, since that flush was counted
    /// in an interval none of its copies could reach, unless the restart took less than an
    /// interval or two, which leaves the two apart by too little to tell. If the old process
    /// already added to the interval the restarted one first reaches, that flush waits for the
    /// next interval, as any flush does.
    pub fn participant(mut self, id: ParticipantId) -> Self {
        self.participant = Some(id);
        self
    }

    /// When flushes go out: aimed at the middle of each interval ([`Timing::MidInterval`], the
    /// default) or an interval after each reply ([`Timing::AfterReply`]).
    pub fn timing(mut self, timing: Timing) -> Self {
        self.policy.timing = timing;
        self
    }

    /// How long a flush may wait for its reply before it counts as unanswered (and is resent,
    /// within the resend window). By default the interval, kept between 100 ms and 2 s. This
    /// keeps a hung client from freezing the counter. At least 10 ms
    /// ([`ConfigError::FlushTimeoutTooShort`]); `Duration::MAX` never times out.
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.policy.flush_timeout = Some(timeout);
        self
    }

    /// How long copies of an unanswered flush are sent again, with the same sequence number and
    /// amount. By default a tenth of the fence's life (one minute for intervals up to 200 s); at
    /// most half of it.
    ///
    /// The copies already sent are still awaited after the window: a flush is given up once it
    /// has had no reply for the window, four intervals or four round trips, whichever is
    /// longest, and `flush failed` then reports its amount as `unsettled`.
    ///
    /// `Duration::ZERO` sends no copy again for want of a reply, and gives the flush up at the
    /// first copy that fails on the way: `dropped` if refused outright, `unsettled` otherwise. A
    /// copy answered as a wrong interval or fenced still goes again: nothing of it was counted.
    pub fn resend_window(mut self, window: Duration) -> Self {
        self.policy.resend_window = Some(window);
        self
    }

    /// The simplest rule, the baseline the defaults are measured against: [`Timing::AfterReply`]
    /// and no resending. A participant then misses about one interval in
    /// `interval / round trip`, and a flush whose reply is lost is given up.
    pub fn after_reply_without_resend(self) -> Self {
        self.timing(Timing::AfterReply)
            .resend_window(Duration::ZERO)
    }

    fn settings(&self) -> Result<Settings, ConfigError> {
        Settings::with_policy(&self.name, &self.prefix, self.interval, self.policy)
    }

    /// The shared state over `keys`, and the worker that flushes it.
    fn start<S: Store, T: Timer>(
        self,
        settings: Settings,
        keys: Registry,
        store: S,
        timer: T,
    ) -> (Arc<Lifetime>, Worker) {
        let clock: Arc<dyn Clock> = Arc::new(timer.clone());
        let shared = Arc::new(Shared::new(Arc::clone(&settings.name), keys, clock));
        let parts = Parts {
            first_seq: sequence::first(SystemClock.now(), fastrand::u64(..sequence::SPREAD)),
            alarm: SharedAlarm::new(settings.interval, settings.partitions()),
            report: Reporter::new(Arc::clone(&settings.name), self.diagnostics),
            participant: self.participant.unwrap_or_else(ParticipantId::random),
            shared: Arc::clone(&shared),
            store: Arc::new(store),
            timer,
            settings,
        };
        (Arc::new(Lifetime(shared)), Worker::new(parts))
    }
}

impl Builder {
    /// Checks the settings and makes the counter: the [`Counter`] handle to count with, and
    /// the [`Worker`] that flushes it, to spawn on the runtime of your choice with `timer` as
    /// its time.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] says which setting cannot work and how to fix it.
    pub fn build<S: Store, T: Timer>(
        self,
        store: S,
        timer: T,
    ) -> Result<(Counter, Worker), ConfigError> {
        let settings = self.settings()?;
        settings::check_counter_name(&self.name)?;
        let slot = Arc::new(Slot::new("".into(), 0));
        let keys = Registry::single(Arc::clone(&slot));
        let (life, worker) = self.start(settings, keys, store, timer);
        Ok((Counter::new(slot, life), worker))
    }
}

impl<K: fmt::Debug> fmt::Debug for Builder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.name)
            .field("interval", &self.interval)
            .field("prefix", &self.prefix)
            .field("participant", &self.participant)
            .field("policy", &self.policy)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}
