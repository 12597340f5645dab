//! Building a counter: its settings, checked, and the pair it is made of.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock, Timer};
use crate::counter::Counter;
use crate::diagnostics::{Diagnostics, LogDiagnostics, Reporter};
use crate::error::ConfigError;
use crate::sequence;
use crate::settings::{PolicyChoice, Settings};
use crate::shared::Shared;
use crate::store::{ParticipantId, Store};
use crate::timing::Timing;
use crate::worker::{Tick, Worker};

/// The settings of a counter, from [`Counter::builder`].
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
pub struct Builder {
    name: String,
    interval: Duration,
    prefix: String,
    diagnostics: Arc<dyn Diagnostics>,
    participant: Option<ParticipantId>,
    policy: PolicyChoice,
}

impl Builder {
    pub(crate) fn new(name: String, interval: Duration) -> Self {
        Self {
            name,
            interval,
            prefix: String::new(),
            diagnostics: Arc::new(LogDiagnostics),
            participant: None,
            policy: PolicyChoice::default(),
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
    /// refuse the second's flushes. A fixed id suits tests that need stable key names, and a
    /// participant whose identity outlives its process (a pod of a StatefulSet, say).
    ///
    /// # Restarting with the same id
    ///
    /// The store keeps each participant's fence (its last flush's sequence number and
    /// interval) for ten minutes, or three intervals if longer. A participant built again under
    /// the same id, after a restart, numbers its flushes from the wall clock (a thousand
    /// numbers a millisecond), so they follow the ones it sent before it stopped and its first
    /// flush is applied, not taken for an old copy. Two things must hold for that: the wall
    /// clock must not step back across the restart, and the old process must be gone (it
    /// would otherwise be a second live participant with the same id). If the old process
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
    /// keeps a hung client from freezing the counter.
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.policy.flush_timeout = Some(timeout);
        self
    }

    /// How long an unanswered flush is resent, with the same sequence number and amount, before
    /// its amount is dropped and `flush failed` reported. By default a tenth of the fence's
    /// life (one minute for intervals up to 200 s); at most half of it.
    ///
    /// `Duration::ZERO` drops the amount at the first failure, as the original design does.
    pub fn resend_window(mut self, window: Duration) -> Self {
        self.policy.resend_window = Some(window);
        self
    }

    /// The original design's behaviour: [`Timing::AfterReply`] and no resending.
    pub fn original_rules(self) -> Self {
        self.timing(Timing::AfterReply)
            .resend_window(Duration::ZERO)
    }

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
        let settings = Settings::with_policy(&self.name, &self.prefix, self.interval, self.policy)?;
        let (shared, stopped) = Shared::new(Arc::clone(&settings.name));
        let shared = Arc::new(shared);
        let counter = Counter::new(Arc::clone(&shared));
        let tick = Tick {
            first_seq: sequence::first(SystemClock.now()),
            report: Reporter::new(Arc::clone(&settings.name), self.diagnostics),
            participant: self.participant.unwrap_or_else(ParticipantId::random),
            shared,
            store,
            timer,
            settings,
        };
        Ok((counter, Worker::new(tick, stopped)))
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.name)
            .field("interval", &self.interval)
            .field("prefix", &self.prefix)
            .field("participant", &self.participant)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}
