use std::sync::{Arc, Mutex, MutexGuard};

use super::{Diagnostics, Event, Level};

/// Keeps every event in memory, for tests that check what a counter reported.
///
/// Clones share one record.
///
/// ```
/// use comcount_core::diagnostics::{Diagnostics, Event, Recorder};
///
/// let recorder = Recorder::new();
/// recorder.record("requests", &Event::CounterStopped { unsent: 0 });
/// assert_eq!(recorder.messages(), ["counter stopped"]);
/// assert_eq!(recorder.records()[0].counter, "requests");
/// ```
#[derive(Clone, Default, Debug)]
pub struct Recorder {
    records: Arc<Mutex<Vec<Record>>>,
}

/// One event, as a [`Recorder`] kept it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Record {
    /// The event's level.
    pub level: Level,
    /// The event's message.
    pub message: &'static str,
    /// The counter's name.
    pub counter: String,
    /// The event's attributes, each written out as text.
    pub attributes: Vec<(&'static str, String)>,
}

impl Record {
    /// The attribute named `key`, as text.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every event so far, oldest first.
    pub fn records(&self) -> Vec<Record> {
        self.lock().clone()
    }

    /// The messages of every event so far, oldest first.
    pub fn messages(&self) -> Vec<&'static str> {
        self.lock().iter().map(|r| r.message).collect()
    }

    /// The events with the given message.
    pub fn with_message(&self, message: &str) -> Vec<Record> {
        self.lock()
            .iter()
            .filter(|r| r.message == message)
            .cloned()
            .collect()
    }

    /// Forgets every event so far.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Record>> {
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Diagnostics for Recorder {
    fn record(&self, counter: &str, event: &Event<'_>) {
        let mut attributes = Vec::new();
        event.attributes(|key, value| attributes.push((key, value.to_string())));
        self.lock().push(Record {
            level: event.level(),
            message: event.message(),
            counter: counter.to_owned(),
            attributes,
        });
    }
}
