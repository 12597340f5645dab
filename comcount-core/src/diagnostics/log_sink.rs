use std::fmt;

use log::kv::{self, VisitSource};

use super::{Diagnostics, Event, Value};

/// Sends events to the [`log`] crate, under the target `comcount`: the message followed by the
/// counter's name and the event's attributes as `key=value` (quoted where a value holds a space,
/// a quote or an `=`), so that a logger which drops structured fields, or a bridge to
/// `tracing`, still shows them all; and the same again as structured key-values, for loggers
/// that read them. The default.
///
/// ```text
/// flush failed counter=requests error="connection refused: …" seq=42 dropped=0 unsettled=5
/// ```
#[derive(Clone, Copy, Default, Debug)]
pub struct LogDiagnostics;

impl Diagnostics for LogDiagnostics {
    fn record(&self, counter: &str, event: &Event<'_>) {
        let level = event.level().to_log();
        if level > log::max_level() {
            return;
        }
        let pairs = Pairs { counter, event };
        log::logger().log(
            &log::Record::builder()
                .target("comcount")
                .level(level)
                .args(format_args!("{}", Line { counter, event }))
                .module_path_static(Some(module_path!()))
                .key_values(&pairs)
                .build(),
        );
    }
}

/// An event as one line: its message, then `counter=…` and each attribute as `key=value`.
struct Line<'a> {
    counter: &'a str,
    event: &'a Event<'a>,
}

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.event.message())?;
        write_pair(f, "counter", self.counter)?;
        let mut result = Ok(());
        self.event.attributes(|key, value| {
            if result.is_ok() {
                result = match value {
                    Value::U64(n) => write!(f, " {key}={n}"),
                    Value::Str(s) => write_pair(f, key, s),
                    Value::Error(e) => write_pair(f, key, &e.to_string()),
                };
            }
        });
        result
    }
}

/// Writes ` key=value`, the value quoted (as Rust's `{:?}` writes it) when it is empty or holds
/// a space, a quote or an `=`, so that the line splits back into its pairs.
fn write_pair(f: &mut fmt::Formatter<'_>, key: &str, value: &str) -> fmt::Result {
    if value.is_empty() || value.contains(|c: char| c.is_whitespace() || c == '"' || c == '=') {
        write!(f, " {key}={value:?}")
    } else {
        write!(f, " {key}={value}")
    }
}

struct Pairs<'a> {
    counter: &'a str,
    event: &'a Event<'a>,
}

impl kv::Source for Pairs<'_> {
    fn visit<'kvs>(&'kvs self, visitor: &mut dyn VisitSource<'kvs>) -> Result<(), kv::Error> {
        visitor.visit_pair(kv::Key::from_str("counter"), kv::Value::from(self.counter))?;
        let mut result = Ok(());
        self.event.attributes(|key, value| {
            if result.is_err() {
                return;
            }
            let key = kv::Key::from_str(key);
            result = match value {
                Value::U64(n) => visitor.visit_pair(key, kv::Value::from(n)),
                Value::Str(s) => visitor.visit_pair(key, kv::Value::from(s)),
                Value::Error(e) => visitor.visit_pair(key, kv::Value::from_dyn_display(e)),
            };
        });
        result
    }
}
