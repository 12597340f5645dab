//! What the benchmark examples share: the two rule sets they compare, and Redis's own figures.

use std::collections::HashMap;

use comcount_core::Builder;
use redis::aio::MultiplexedConnection;

/// The rules a fleet counts under: this library's defaults, or the original design's.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Rules {
    /// The defaults: aimed flushes, copies resent.
    Default,
    /// [`Builder::original_rules`]: a flush an interval after each reply, none resent.
    Original,
}

impl Rules {
    /// Both, defaults first.
    pub const BOTH: [Rules; 2] = [Rules::Default, Rules::Original];

    /// Applies the rules to a counter being built.
    pub fn configure(self, builder: Builder) -> Builder {
        match self {
            Rules::Default => builder,
            Rules::Original => builder.original_rules(),
        }
    }

    /// The rules' name in a table.
    pub fn label(self) -> &'static str {
        match self {
            Rules::Default => "default",
            Rules::Original => "original",
        }
    }
}

/// The `key:value` lines of one `INFO` section.
pub async fn info(stats: &mut MultiplexedConnection, section: &str) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(stats)
        .await
        .expect("INFO answers");
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// The CPU time Redis has used, `used_cpu_sys + used_cpu_user`, in seconds.
pub async fn redis_cpu(stats: &mut MultiplexedConnection) -> f64 {
    let cpu = info(stats, "cpu").await;
    let number = |key: &str| -> f64 {
        cpu.get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("INFO cpu has no {key}"))
    };
    number("used_cpu_sys") + number("used_cpu_user")
}
