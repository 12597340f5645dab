//! What a counter tells about itself: a fixed set of events, each with a constant message and
//! its values as attributes.
//!
//! | level | message | attributes |
//! | --- | --- | --- |
//! | error | `flush failed` | `counter`, `error`, `seq`, `key` (families only), `dropped`, `unsettled` |
//! | warn | `total went stale` | `counter`, `after_ms` |
//! | warn | `round trip slow` | `counter`, `round_trip_ms`, `interval_ms` |
//! | warn | `store caveat` | `counter`, `store`, `caveat` |
//! | info | `round trip normal` | `counter`, `round_trip_ms`, `interval_ms` |
//! | info | `total fresh again` | `counter`, `stale_for_ms` |
//! | info | `flush lanes changed` | `counter`, `lanes`, `round_trip_ms`, `interval_ms` |
//! | info | `counter started` | `counter`, `interval_ms`, `prefix`, `store` |
//! | warn | `key refused` | `counter`, `reason` (`empty`, `too_long`, `full`), `calls` |
//! | info, warn | `counter stopped` | `counter`, `unsent`; warn when `unsent` is above 0 |
//! | debug | `flush completed` | `counter`, `interval`, `amount`, `keys`, `count`, `total` and `total_age_ms` (counters only, once known) |
//! | debug | `keys held` | `counter`, `held`, `max_keys` (families only) |
//! | debug | `script loaded` | `counter`, `sha` |
//! | debug | `copy resent` | `counter`, `reason`, `copy`, `error` (when `reason` is `failed`) |
//! | debug, trace | `flush answered` | `counter`, `outcome`, `interval`, `round_trip_ms`; trace when `outcome` is `applied` or `duplicate`, debug otherwise |
//!
//! Every attribute keeps one meaning in every event: `interval` is an interval number (the
//! store's interval a flush was counted or answered in), `interval_ms` the interval's length. A
//! duration's name ends with its unit, `_ms`, and its value is a whole number of milliseconds.
//!
//! A healthy counter says nothing above info. Events go to the [`log`] crate by default
//! ([`LogDiagnostics`], target `comcount`, attributes as `key=value` in the line and as
//! structured key-values); pass any
//! [`Diagnostics`] to [`Builder::diagnostics`](crate::builder::Builder::diagnostics) to send them
//! elsewhere, or a [`Recorder`] to look at them in tests. With the `tracing` feature,
//! [`TracingDiagnostics`] sends them to the [`tracing`](https://docs.rs/tracing) crate with typed
//! fields; with the `metrics` feature, [`MetricsDiagnostics`] turns them into metrics through the
//! [`metrics`](https://docs.rs/metrics) facade.
//!
//! A pair of sinks is a sink that sends every event to both, so log lines and metrics (or more,
//! as pairs of pairs) come from one counter:
//!
//! ```
//! use std::time::Duration;
//! use comcount_core::{Counter, MemoryStore, clock::VirtualClock};
//! use comcount_core::diagnostics::{LogDiagnostics, Recorder};
//!
//! let recorder = Recorder::new();
//! let (counter, worker) = Counter::builder("jobs", Duration::from_secs(1))
//!     .diagnostics((LogDiagnostics, recorder.clone()))
//!     .build(MemoryStore::new(), VirtualClock::new())?;
//! # drop((counter, worker));
//! # Ok::<(), comcount_core::ConfigError>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::error::StoreError;
use crate::protocol::reply::Outcome;

mod log_sink;
#[cfg(feature = "metrics")]
mod metrics_sink;
mod recorder;
#[cfg(feature = "tracing")]
mod tracing_sink;

pub use log_sink::LogDiagnostics;
#[cfg(feature = "metrics")]
pub use metrics_sink::MetricsDiagnostics;
pub use recorder::{Record, Recorder};
#[cfg(feature = "tracing")]
pub use tracing_sink::TracingDiagnostics;

/// How much an event matters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Level {
    /// Every answer of the store: finer than debug.
    Trace,
    /// What a healthy counter does every interval, and the copies it sends again.
    Debug,
    /// A counter starting or stopping, its store answering in time again, or its total known
    /// again.
    Info,
    /// The group's total went unknown, the store answers too slowly for the interval, or it
    /// is set up in a way that will make flushes fail.
    Warn,
    /// A flush's amount was lost, or may have been.
    Error,
}

impl Level {
    /// The `log` crate's level of the same name.
    pub fn to_log(self) -> log::Level {
        match self {
            Level::Trace => log::Level::Trace,
            Level::Debug => log::Level::Debug,
            Level::Info => log::Level::Info,
            Level::Warn => log::Level::Warn,
            Level::Error => log::Level::Error,
        }
    }
}

/// One thing a counter did.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The background task began.
    CounterStarted {
        /// The interval length.
        interval: Duration,
        /// The key prefix.
        prefix: &'a str,
        /// The store's [`name`](crate::Store::name).
        store: &'a str,
    },
    /// Right after [`CounterStarted`](Event::CounterStarted): the store is set up in a way
    /// that will make flushes fail, such as a connection that never reconnects (see
    /// [`Store::caveat`](crate::Store::caveat)). Said once, at start.
    StoreCaveat {
        /// The store's [`name`](crate::Store::name).
        store: &'a str,
        /// What is wrong, and what to do about it.
        caveat: &'a str,
    },
    /// The background task ended, however it ended: after
    /// [`Counter::close`](crate::Counter::close), when the last handle was dropped, or when the
    /// [`Worker`](crate::Worker) was dropped before it ended (its runtime shut down, or a panic
    /// unwound through it). Nothing flushes the counter after it.
    CounterStopped {
        /// The units still in its buffers, over all its keys, that were never sent and now
        /// never will be: counted since the last flush, or put back from a flush that was
        /// certainly not counted. 0 after a flush that took everything.
        unsent: u64,
    },
    /// A flush was counted by the store.
    FlushCompleted {
        /// The interval number it was counted in.
        interval: u64,
        /// The amount it carried, over all its keys.
        amount: u64,
        /// How many keys it carried: 1 for a counter.
        keys: usize,
        /// What `increment(0)` returns right after it: for a family, the largest of its keys'
        /// counts.
        count: u64,
        /// A counter's group total right after it (what
        /// [`Counter::group_total`](crate::Counter::group_total) returns), when known; `None`
        /// for a family, whose totals are its keys'.
        total: Option<u64>,
        /// How long before it a reply last brought the counter's group total (what
        /// [`Counter::total_age`](crate::Counter::total_age) returns), on the counter's timer;
        /// `None` before the first, and for a family.
        total_age: Option<Duration>,
    },
    /// A flush was given up without being counted, as far as the counter knows. Its amount
    /// is never sent again, and is in exactly one of the two attributes:
    ///
    /// - `dropped`: certainly not counted by the store (it refused the flush);
    /// - `unsettled`: perhaps counted, perhaps not: a flush in doubt that no later flush
    ///   settled (the counter stopped first, another flush went in doubt, or half the fence's
    ///   life passed), or one refused after a copy may have run.
    ///
    /// A family reports each key of a failed flush with an event of its own.
    FlushFailed {
        /// Why.
        error: &'a StoreError,
        /// The flush's sequence number: the store's fence holds it while it is the
        /// participant's last flush applied.
        seq: u64,
        /// The family's key the amount was for; `None` for a counter.
        key: Option<&'a str>,
        /// The amount certainly not counted.
        dropped: u64,
        /// The amount whose fate is unknown.
        unsettled: u64,
    },
    /// The store's round trip stayed above half the interval: flushes can no longer reach
    /// every interval, and the group's total arrives late. Raised once, until
    /// [`RoundTripNormal`](Event::RoundTripNormal).
    RoundTripSlow {
        /// The longest round trip seen (or the age of a copy still unanswered).
        round_trip: Duration,
        /// The interval length.
        interval: Duration,
    },
    /// After [`RoundTripSlow`](Event::RoundTripSlow), the replies have come well within half
    /// the interval (under three eighths of it) for a whole interval: a store that is slow in
    /// bursts stays reported slow.
    RoundTripNormal {
        /// The last reply's round trip.
        round_trip: Duration,
        /// The interval length.
        interval: Duration,
    },
    /// The counter now flushes through `lanes` lanes: more than one while its store is farther
    /// away than an interval and the round trip is steady (the README's "How a flush
    /// settles"), one again once it is not, or when the round trip grew with lanes open.
    FlushLanesChanged {
        /// How many lanes flush from now on.
        lanes: u32,
        /// The round trip the first lane planned with.
        round_trip: Duration,
        /// The interval length.
        interval: Duration,
    },
    /// The group's total was not refreshed for two intervals and is no longer used.
    TotalWentStale {
        /// How long since it was last refreshed.
        after: Duration,
    },
    /// A store loaded its flush script into the server.
    ScriptLoaded {
        /// The script's SHA-1.
        sha: &'a str,
    },
    /// [`Family::increment`](crate::Family::increment) was given keys it could not count, for
    /// one reason: said at most once an interval, with how many calls it refused since the last
    /// time. Nothing of those calls was counted.
    KeyRefused {
        /// Why: `empty`, `too_long`, or `full` (a new key past the family's cap).
        reason: &'static str,
        /// How many calls were refused for it.
        calls: u64,
    },
    /// How many keys a family holds, against its cap
    /// ([`max_keys`](crate::builder::Builder::max_keys)): said once an interval, and as it
    /// stops. A counter never says it.
    KeysHeld {
        /// The keys the family holds now.
        held: usize,
        /// The most it may hold: a new key past it is refused
        /// ([`KeyRefused`](Event::KeyRefused), reason `full`).
        max_keys: usize,
    },
    /// After [`TotalWentStale`](Event::TotalWentStale), a reply brought a total again: said
    /// once each time a stale total recovers.
    TotalFreshAgain {
        /// How long the total was unknown, since it went stale.
        stale_for: Duration,
    },
    /// Another copy of a flush went out: the same flush, with the same sequence number and
    /// amount, so that the store applies at most one of its copies.
    CopyResent {
        /// Why.
        reason: ResendReason,
        /// The copy's number within its flush: 2 for the first one sent again.
        copy: u32,
        /// When `reason` is [`ResendReason::Failed`], the error the last copy failed with.
        error: Option<&'a StoreError>,
    },
    /// The store answered a copy of a flush. Errors are not answers: a copy that fails on the
    /// way is sent again ([`CopyResent`](Event::CopyResent), reason `failed`), or its flush is
    /// given up ([`FlushFailed`](Event::FlushFailed)).
    ///
    /// Trace when the copy was counted (applied, or a duplicate of one that was), debug when
    /// not: a stale, fenced or wrong-interval answer is worth a look, a counted one is the
    /// every-interval case [`FlushCompleted`](Event::FlushCompleted) also tells.
    FlushAnswered {
        /// What the store did with it.
        outcome: Outcome,
        /// The interval the store's clock was in.
        interval: u64,
        /// How long the copy took, from sending to answer, on the counter's timer.
        round_trip: Duration,
    },
}

/// Why a copy of a flush was sent again, in a [`CopyResent`](Event::CopyResent) event.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum ResendReason {
    /// The last copy went unanswered for the resend timeout (the flush timeout until a reply
    /// has timed the round trip). It may still land; the store's
    /// fence applies at most one copy.
    Unanswered,
    /// The last copy failed on the way, with an error worth sending again for (a dropped
    /// connection, a cluster moving a slot, ...).
    Failed,
    /// The store's clock was in an interval outside the copy's window (more than its reach
    /// from the one it was aimed at).
    WrongInterval,
    /// This participant had already added to the interval the copy landed in: the flush goes
    /// to a later one.
    Fenced,
}

impl ResendReason {
    /// The reason as the `reason` attribute writes it: `unanswered`, `failed`,
    /// `wrong_interval` or `fenced`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResendReason::Unanswered => "unanswered",
            ResendReason::Failed => "failed",
            ResendReason::WrongInterval => "wrong_interval",
            ResendReason::Fenced => "fenced",
        }
    }
}

/// An outcome as the `outcome` attribute of [`FlushAnswered`](Event::FlushAnswered) writes it:
/// `applied`, `duplicate`, `stale`, `fenced` or `wrong_interval`.
pub(crate) fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Applied => "applied",
        Outcome::Duplicate => "duplicate",
        Outcome::Stale => "stale",
        Outcome::Fenced => "fenced",
        Outcome::WrongInterval => "wrong_interval",
    }
}

/// The value of an event's attribute.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    /// A number (durations are in milliseconds, under a name ending in `_ms`).
    U64(u64),
    /// A text.
    Str(&'a str),
    /// An error.
    Error(&'a StoreError),
}

impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U64(n) => write!(f, "{n}"),
            Value::Str(s) => f.write_str(s),
            Value::Error(e) => write!(f, "{e}"),
        }
    }
}

impl Event<'_> {
    /// The event's level.
    pub fn level(&self) -> Level {
        match self {
            Event::FlushFailed { .. } => Level::Error,
            Event::CounterStopped { unsent } if *unsent > 0 => Level::Warn,
            Event::KeyRefused { .. }
            | Event::TotalWentStale { .. }
            | Event::RoundTripSlow { .. }
            | Event::StoreCaveat { .. } => Level::Warn,
            Event::CounterStarted { .. }
            | Event::CounterStopped { .. }
            | Event::RoundTripNormal { .. }
            | Event::FlushLanesChanged { .. } => Level::Info,
            Event::FlushCompleted { .. } | Event::ScriptLoaded { .. } | Event::KeysHeld { .. } => {
                Level::Debug
            }
            Event::TotalFreshAgain { .. } => Level::Info,
            Event::CopyResent { .. } => Level::Debug,
            Event::FlushAnswered { outcome, .. } if outcome.is_counted() => Level::Trace,
            Event::FlushAnswered { .. } => Level::Debug,
        }
    }

    /// The event's message, the same for every event of its kind.
    pub fn message(&self) -> &'static str {
        match self {
            Event::CounterStarted { .. } => "counter started",
            Event::StoreCaveat { .. } => "store caveat",
            Event::CounterStopped { .. } => "counter stopped",
            Event::FlushCompleted { .. } => "flush completed",
            Event::FlushFailed { .. } => "flush failed",
            Event::TotalWentStale { .. } => "total went stale",
            Event::RoundTripSlow { .. } => "round trip slow",
            Event::RoundTripNormal { .. } => "round trip normal",
            Event::FlushLanesChanged { .. } => "flush lanes changed",
            Event::ScriptLoaded { .. } => "script loaded",
            Event::TotalFreshAgain { .. } => "total fresh again",
            Event::KeyRefused { .. } => "key refused",
            Event::KeysHeld { .. } => "keys held",
            Event::CopyResent { .. } => "copy resent",
            Event::FlushAnswered { .. } => "flush answered",
        }
    }

    /// Calls `f` with each attribute of the event, in the order of the table above (the
    /// counter's name, which a [`Reporter`] adds, is not among them).
    pub fn attributes<'s>(&'s self, mut f: impl FnMut(&'static str, Value<'s>)) {
        let ms = |d: &Duration| Value::U64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        match self {
            Event::CounterStarted {
                interval,
                prefix,
                store,
            } => {
                f("interval_ms", ms(interval));
                f("prefix", Value::Str(prefix));
                f("store", Value::Str(store));
            }
            Event::StoreCaveat { store, caveat } => {
                f("store", Value::Str(store));
                f("caveat", Value::Str(caveat));
            }
            Event::CounterStopped { unsent } => f("unsent", Value::U64(*unsent)),
            Event::FlushCompleted {
                interval,
                amount,
                keys,
                count,
                total,
                total_age,
            } => {
                f("interval", Value::U64(*interval));
                f("amount", Value::U64(*amount));
                f("keys", Value::U64(*keys as u64));
                f("count", Value::U64(*count));
                if let Some(total) = total {
                    f("total", Value::U64(*total));
                }
                if let Some(total_age) = total_age {
                    f("total_age_ms", ms(total_age));
                }
            }
            Event::FlushFailed {
                error,
                seq,
                key,
                dropped,
                unsettled,
            } => {
                f("error", Value::Error(error));
                f("seq", Value::U64(*seq));
                if let Some(key) = key {
                    f("key", Value::Str(key));
                }
                f("dropped", Value::U64(*dropped));
                f("unsettled", Value::U64(*unsettled));
            }
            Event::TotalWentStale { after } => f("after_ms", ms(after)),
            Event::RoundTripSlow {
                round_trip,
                interval,
            }
            | Event::RoundTripNormal {
                round_trip,
                interval,
            } => {
                f("round_trip_ms", ms(round_trip));
                f("interval_ms", ms(interval));
            }
            Event::FlushLanesChanged {
                lanes,
                round_trip,
                interval,
            } => {
                f("lanes", Value::U64(u64::from(*lanes)));
                f("round_trip_ms", ms(round_trip));
                f("interval_ms", ms(interval));
            }
            Event::ScriptLoaded { sha } => f("sha", Value::Str(sha)),
            Event::TotalFreshAgain { stale_for } => f("stale_for_ms", ms(stale_for)),
            Event::KeyRefused { reason, calls } => {
                f("reason", Value::Str(reason));
                f("calls", Value::U64(*calls));
            }
            Event::KeysHeld { held, max_keys } => {
                f("held", Value::U64(*held as u64));
                f("max_keys", Value::U64(*max_keys as u64));
            }
            Event::CopyResent {
                reason,
                copy,
                error,
            } => {
                f("reason", Value::Str(reason.as_str()));
                f("copy", Value::U64(u64::from(*copy)));
                if let Some(error) = error {
                    f("error", Value::Error(error));
                }
            }
            Event::FlushAnswered {
                outcome,
                interval,
                round_trip,
            } => {
                f("outcome", Value::Str(outcome_name(*outcome)));
                f("interval", Value::U64(*interval));
                f("round_trip_ms", ms(round_trip));
            }
        }
    }
}

/// Where a counter's events go.
pub trait Diagnostics: Send + Sync + 'static {
    /// Takes one event of the counter named `counter`. Called from the counter's background
    /// task (never from `increment`); it should return quickly.
    ///
    /// A store may report an event while it is handing a flush over, which `close()` on
    /// another thread waits for. So `record` must never wait on a thread that may be closing
    /// this counter or dropping its last handle: a lock that such a thread holds across
    /// `close()`, say. Calling `close()` from `record` itself is fine.
    fn record(&self, counter: &str, event: &Event<'_>);
}

/// Both sinks, each event to the first, then to the second. Nest pairs for more: `(a, (b, c))`.
impl<A: Diagnostics, B: Diagnostics> Diagnostics for (A, B) {
    fn record(&self, counter: &str, event: &Event<'_>) {
        self.0.record(counter, event);
        self.1.record(counter, event);
    }
}

/// A counter's way to its [`Diagnostics`], with the counter's name attached. Stores receive one
/// with every flush to report events of their own.
///
/// One pointer: a counter's task holds a few clones, and each flush in the air two more.
#[derive(Clone)]
pub struct Reporter(Arc<Reporting>);

struct Reporting {
    counter: Arc<str>,
    sink: Arc<dyn Diagnostics>,
    /// Whether the sink panicked while recording an event, shared by the clones.
    sink_panicked: AtomicBool,
}

impl Reporter {
    /// A reporter for the counter named `counter`.
    pub fn new(counter: impl Into<Arc<str>>, sink: Arc<dyn Diagnostics>) -> Self {
        Self(Arc::new(Reporting {
            counter: counter.into(),
            sink,
            sink_panicked: AtomicBool::new(false),
        }))
    }

    /// Sends `event` to the diagnostics.
    pub fn emit(&self, event: Event<'_>) {
        /// Notes the sink's panic, if it unwinds through here.
        struct Unwinding<'a>(&'a AtomicBool);
        impl Drop for Unwinding<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let unwinding = Unwinding(&self.0.sink_panicked);
        self.0.sink.record(&self.0.counter, &event);
        std::mem::forget(unwinding);
    }

    /// Whether the sink has panicked while recording an event: a counter whose background task
    /// unwinds then reports nothing more to it, since a second panic would abort the process.
    pub(crate) fn sink_panicked(&self) -> bool {
        self.0.sink_panicked.load(Ordering::Relaxed)
    }

    /// The counter's name.
    pub fn counter(&self) -> &str {
        &self.0.counter
    }
}

impl fmt::Debug for Reporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reporter")
            .field("counter", &self.0.counter)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event, each duration 7 s and each number something else.
    fn every_event(error: &StoreError, mut each: impl FnMut(Event<'_>)) {
        let d = Duration::from_secs(7);
        each(Event::CounterStarted {
            interval: d,
            prefix: "p:",
            store: "memory",
        });
        each(Event::StoreCaveat {
            store: "memory",
            caveat: "none",
        });
        each(Event::CounterStopped { unsent: 3 });
        each(Event::FlushCompleted {
            interval: 42,
            amount: 2,
            keys: 1,
            count: 4,
            total: Some(5),
            total_age: Some(d),
        });
        each(Event::FlushFailed {
            error,
            seq: 9,
            key: Some("k"),
            dropped: 1,
            unsettled: 2,
        });
        each(Event::RoundTripSlow {
            round_trip: d,
            interval: d,
        });
        each(Event::RoundTripNormal {
            round_trip: d,
            interval: d,
        });
        each(Event::FlushLanesChanged {
            lanes: 2,
            round_trip: d,
            interval: d,
        });
        each(Event::TotalWentStale { after: d });
        each(Event::ScriptLoaded { sha: "abc" });
        each(Event::KeyRefused {
            reason: "full",
            calls: 6,
        });
        each(Event::KeysHeld {
            held: 8,
            max_keys: 10,
        });
        each(Event::TotalFreshAgain { stale_for: d });
        each(Event::CopyResent {
            reason: ResendReason::Failed,
            copy: 2,
            error: Some(error),
        });
        each(Event::FlushAnswered {
            outcome: Outcome::Applied,
            interval: 42,
            round_trip: d,
        });
    }

    #[test]
    fn a_duration_is_named_with_its_unit_and_an_interval_is_a_number() {
        let error = StoreError::refused("no");
        let mut seen = 0;
        every_event(&error, |event| {
            event.attributes(|name, value| {
                seen += 1;
                let text = value.to_string();
                assert_eq!(
                    name.ends_with("_ms"),
                    text == "7000",
                    "{}: {name}={text}",
                    event.message()
                );
                if name == "interval" {
                    assert_eq!(text, "42", "{}", event.message());
                }
            });
        });
        assert!(seen > 30, "{seen} attributes");
    }
}
