use std::error::Error;
use std::fmt::Write;

use super::{Diagnostics, Event, Level, Value};
use crate::error::StoreError;

/// Sends events to the [`tracing`](https://docs.rs/tracing) crate, under the target
/// `comcount`, at the event's level, with the event's constant message and its attributes as
/// typed fields: numbers as `u64` (durations in milliseconds, under names ending in `_ms`),
/// texts as `&str`, the error as a `dyn Error`, and the counter's name as `counter`. Field
/// names are those of the [table](super).
///
/// ```
/// use std::time::Duration;
/// use comcount_core::{Counter, MemoryStore, clock::VirtualClock};
/// use comcount_core::diagnostics::TracingDiagnostics;
///
/// let (counter, worker) = Counter::builder("requests", Duration::from_secs(1))
///     .diagnostics(TracingDiagnostics)
///     .build(MemoryStore::new(), VirtualClock::new())?;
/// # drop((counter, worker));
/// # Ok::<(), comcount_core::ConfigError>(())
/// ```
///
/// A `tracing-subscriber` filter such as `comcount=debug` shows the copies sent again and the
/// store's answers that were not counted; `comcount=trace` every answer.
#[cfg_attr(docsrs, doc(cfg(feature = "tracing")))]
#[derive(Clone, Copy, Default, Debug)]
pub struct TracingDiagnostics;

/// An event's attributes, each in the field of its name.
#[derive(Default)]
struct Fields<'a> {
    interval: Option<u64>,
    interval_ms: Option<u64>,
    amount: Option<u64>,
    keys: Option<u64>,
    count: Option<u64>,
    total: Option<u64>,
    total_age_ms: Option<u64>,
    held: Option<u64>,
    max_keys: Option<u64>,
    dropped: Option<u64>,
    unsettled: Option<u64>,
    after_ms: Option<u64>,
    round_trip_ms: Option<u64>,
    stale_for_ms: Option<u64>,
    copy: Option<u64>,
    lanes: Option<u64>,
    unsent: Option<u64>,
    calls: Option<u64>,
    seq: Option<u64>,
    prefix: Option<&'a str>,
    store: Option<&'a str>,
    key: Option<&'a str>,
    sha: Option<&'a str>,
    outcome: Option<&'a str>,
    reason: Option<&'a str>,
    caveat: Option<&'a str>,
    error: Option<&'a StoreError>,
    /// Attributes with no field of their own above, written out as `name=value` pairs.
    others: Option<String>,
}

impl<'a> Fields<'a> {
    fn of(event: &'a Event<'a>) -> Self {
        let mut fields = Fields::default();
        event.attributes(|name, value| fields.take(name, value));
        fields
    }

    fn take(&mut self, name: &'static str, value: Value<'a>) {
        let number = match name {
            "interval" => &mut self.interval,
            "interval_ms" => &mut self.interval_ms,
            "amount" => &mut self.amount,
            "keys" => &mut self.keys,
            "count" => &mut self.count,
            "total" => &mut self.total,
            "total_age_ms" => &mut self.total_age_ms,
            "held" => &mut self.held,
            "max_keys" => &mut self.max_keys,
            "dropped" => &mut self.dropped,
            "unsettled" => &mut self.unsettled,
            "after_ms" => &mut self.after_ms,
            "round_trip_ms" => &mut self.round_trip_ms,
            "stale_for_ms" => &mut self.stale_for_ms,
            "copy" => &mut self.copy,
            "lanes" => &mut self.lanes,
            "unsent" => &mut self.unsent,
            "calls" => &mut self.calls,
            "seq" => &mut self.seq,
            _ => return self.take_other(name, value),
        };
        match value {
            Value::U64(n) => *number = Some(n),
            other => self.add_other(name, other),
        }
    }

    fn take_other(&mut self, name: &'static str, value: Value<'a>) {
        let text = match name {
            "prefix" => &mut self.prefix,
            "store" => &mut self.store,
            "key" => &mut self.key,
            "sha" => &mut self.sha,
            "outcome" => &mut self.outcome,
            "reason" => &mut self.reason,
            "caveat" => &mut self.caveat,
            _ => match (name, value) {
                ("error", Value::Error(error)) => return self.error = Some(error),
                _ => return self.add_other(name, value),
            },
        };
        match value {
            Value::Str(s) => *text = Some(s),
            other => self.add_other(name, other),
        }
    }

    fn add_other(&mut self, name: &str, value: Value<'_>) {
        let others = self.others.get_or_insert_with(String::new);
        if !others.is_empty() {
            others.push(' ');
        }
        let _ = write!(others, "{name}={value}");
    }
}

/// One `tracing` event at `$level`, a constant (tracing's levels are constants at each call
/// site), with the fields of `$f`, a [`Fields`].
macro_rules! event_at {
    ($level:expr, $counter:expr, $message:expr, $f:expr) => {{
        let f = $f;
        let error = f.error.map(|e| e as &(dyn Error + 'static));
        tracing::event!(
            target: "comcount",
            $level,
            counter = $counter,
            interval = f.interval,
            interval_ms = f.interval_ms,
            amount = f.amount,
            keys = f.keys,
            count = f.count,
            total = f.total,
            total_age_ms = f.total_age_ms,
            held = f.held,
            max_keys = f.max_keys,
            dropped = f.dropped,
            unsettled = f.unsettled,
            after_ms = f.after_ms,
            round_trip_ms = f.round_trip_ms,
            stale_for_ms = f.stale_for_ms,
            copy = f.copy,
            lanes = f.lanes,
            unsent = f.unsent,
            calls = f.calls,
            seq = f.seq,
            prefix = f.prefix,
            store = f.store,
            key = f.key,
            sha = f.sha,
            outcome = f.outcome,
            reason = f.reason,
            caveat = f.caveat,
            error = error,
            attributes = f.others.as_deref(),
            "{}",
            $message
        )
    }};
}

impl Diagnostics for TracingDiagnostics {
    fn record(&self, counter: &str, event: &Event<'_>) {
        use tracing::Level as L;
        // Each level is a call site of its own, checked before the fields are gathered.
        let message = event.message();
        match event.level() {
            Level::Trace if tracing::enabled!(target: "comcount", L::TRACE) => {
                event_at!(L::TRACE, counter, message, &Fields::of(event))
            }
            Level::Debug if tracing::enabled!(target: "comcount", L::DEBUG) => {
                event_at!(L::DEBUG, counter, message, &Fields::of(event))
            }
            Level::Info if tracing::enabled!(target: "comcount", L::INFO) => {
                event_at!(L::INFO, counter, message, &Fields::of(event))
            }
            Level::Warn if tracing::enabled!(target: "comcount", L::WARN) => {
                event_at!(L::WARN, counter, message, &Fields::of(event))
            }
            Level::Error if tracing::enabled!(target: "comcount", L::ERROR) => {
                event_at!(L::ERROR, counter, message, &Fields::of(event))
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tracing::field::{Field, Visit};
    use tracing::span;
    use tracing::{Metadata, Subscriber};

    use super::*;
    use crate::protocol::reply::Outcome;

    /// A field as it reached the subscriber, with the type it came as.
    #[derive(Clone, PartialEq, Debug)]
    enum Typed {
        U64(u64),
        Str(String),
        Error(String),
        Debug(String),
    }

    #[derive(Clone, Debug)]
    struct Captured {
        target: String,
        level: tracing::Level,
        fields: Vec<(String, Typed)>,
    }

    impl Captured {
        fn field(&self, name: &str) -> Option<&Typed> {
            self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
        }
    }

    /// A subscriber that keeps every event's fields, typed.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<Captured>>>);

    impl Capture {
        fn events(&self) -> Vec<Captured> {
            self.0.lock().unwrap().clone()
        }
    }

    struct Fields<'a>(&'a mut Vec<(String, Typed)>);

    impl Visit for Fields<'_> {
        fn record_u64(&mut self, field: &Field, value: u64) {
            self.0.push((field.name().into(), Typed::U64(value)));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.push((field.name().into(), Typed::Str(value.into())));
        }
        fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
            self.0
                .push((field.name().into(), Typed::Error(value.to_string())));
        }
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0
                .push((field.name().into(), Typed::Debug(format!("{value:?}"))));
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut fields = Vec::new();
            event.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().push(Captured {
                target: event.metadata().target().into(),
                level: *event.metadata().level(),
                fields,
            });
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }

    fn capture(events: &[Event<'_>]) -> Vec<Captured> {
        let capture = Capture::default();
        tracing::subscriber::with_default(capture.clone(), || {
            for event in events {
                TracingDiagnostics.record("requests", event);
            }
        });
        capture.events()
    }

    #[test]
    fn fields_arrive_typed_with_the_constant_message_and_level() {
        let error = StoreError::refused("too big");
        let events = capture(&[
            Event::FlushAnswered {
                outcome: Outcome::WrongInterval,
                interval: 42,
                round_trip: Duration::from_micros(12_700),
            },
            Event::FlushAnswered {
                outcome: Outcome::Applied,
                interval: 43,
                round_trip: Duration::from_millis(3),
            },
            Event::FlushFailed {
                error: &error,
                seq: 7,
                key: Some("acme"),
                dropped: 5,
                unsettled: 0,
            },
            Event::TotalFreshAgain {
                stale_for: Duration::from_secs(2),
            },
        ]);
        assert_eq!(events.len(), 4);
        assert!(events.iter().all(|e| e.target == "comcount"));
        let levels: Vec<_> = events.iter().map(|e| e.level).collect();
        assert_eq!(
            levels,
            [
                tracing::Level::DEBUG,
                tracing::Level::TRACE,
                tracing::Level::ERROR,
                tracing::Level::INFO
            ]
        );

        let answered = &events[0];
        assert_eq!(
            answered.field("message"),
            Some(&Typed::Debug("flush answered".into()))
        );
        assert_eq!(
            answered.field("counter"),
            Some(&Typed::Str("requests".into()))
        );
        assert_eq!(
            answered.field("outcome"),
            Some(&Typed::Str("wrong_interval".into()))
        );
        assert_eq!(answered.field("interval"), Some(&Typed::U64(42)));
        assert_eq!(answered.field("round_trip_ms"), Some(&Typed::U64(12)));
        // Attributes the event does not have are not recorded at all.
        assert_eq!(answered.field("amount"), None);
        assert_eq!(answered.field("attributes"), None);
        assert_eq!(answered.fields.len(), 5, "{:?}", answered.fields);

        let failed = &events[2];
        assert_eq!(
            failed.field("error"),
            Some(&Typed::Error(error.to_string()))
        );
        assert_eq!(failed.field("key"), Some(&Typed::Str("acme".into())));
        assert_eq!(failed.field("dropped"), Some(&Typed::U64(5)));
        assert_eq!(failed.field("unsettled"), Some(&Typed::U64(0)));

        assert_eq!(events[3].field("stale_for_ms"), Some(&Typed::U64(2000)));
    }

    #[test]
    fn every_attribute_of_every_event_has_a_typed_field() {
        let error = StoreError::refused("no");
        let all = [
            Event::CounterStarted {
                interval: Duration::from_secs(1),
                prefix: "p:",
                store: "memory",
            },
            Event::StoreCaveat {
                store: "redis-rs",
                caveat: "never reconnects",
            },
            Event::CounterStopped { unsent: 3 },
            Event::FlushCompleted {
                interval: 1,
                amount: 2,
                keys: 1,
                count: 4,
                total: Some(3),
                total_age: Some(Duration::from_millis(250)),
            },
            Event::KeysHeld {
                held: 3,
                max_keys: 10,
            },
            Event::FlushFailed {
                error: &error,
                seq: 7,
                key: Some("k"),
                dropped: 1,
                unsettled: 2,
            },
            Event::RoundTripSlow {
                round_trip: Duration::from_millis(600),
                interval: Duration::from_secs(1),
            },
            Event::RoundTripNormal {
                round_trip: Duration::from_millis(6),
                interval: Duration::from_secs(1),
            },
            Event::TotalWentStale {
                after: Duration::from_secs(2),
            },
            Event::FlushLanesChanged {
                lanes: 3,
                round_trip: Duration::from_millis(2100),
                interval: Duration::from_secs(1),
            },
            Event::ScriptLoaded { sha: "abc" },
            Event::TotalFreshAgain {
                stale_for: Duration::from_secs(1),
            },
            Event::KeyRefused {
                reason: "full",
                calls: 7,
            },
            Event::CopyResent {
                reason: crate::diagnostics::ResendReason::Failed,
                copy: 2,
                error: Some(&error),
            },
            Event::FlushAnswered {
                outcome: Outcome::Fenced,
                interval: 9,
                round_trip: Duration::from_millis(1),
            },
        ];
        let captured = capture(&all);
        assert_eq!(captured.len(), all.len());
        for (event, captured) in all.iter().zip(&captured) {
            let mut expected = 0;
            event.attributes(|name, value| {
                expected += 1;
                let typed = captured.field(name);
                let ok = match value {
                    Value::U64(n) => typed == Some(&Typed::U64(n)),
                    Value::Str(s) => typed == Some(&Typed::Str(s.into())),
                    Value::Error(e) => typed == Some(&Typed::Error(e.to_string())),
                };
                assert!(ok, "{}: {name} came as {typed:?}", event.message());
            });
            // The message, the counter, and the attributes: nothing else.
            assert_eq!(captured.fields.len(), expected + 2, "{captured:?}");
        }
    }
}
