use log::kv::{self, VisitSource};

use super::{Diagnostics, Event, Value};

/// Sends events to the [`log`] crate, under the target `comcount`, with the counter's name and
/// the event's attributes as structured key-values (enable `log`'s `kv` feature in your logger
/// to see them). The default.
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
                .args(format_args!("{}", event.message()))
                .module_path_static(Some(module_path!()))
                .key_values(&pairs)
                .build(),
        );
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
