//! The run's settings, from the command line.

use std::time::Duration;

use comcount_tests::bench::take_flag;

pub(crate) struct Settings {
    pub(crate) counters: Vec<usize>,
    pub(crate) interval: Duration,
    pub(crate) warmup: Duration,
    pub(crate) window: Duration,
    pub(crate) response_timeout: Option<Duration>,
    /// The connection's pipeline buffer; `None` keeps `RedisStore::manager_config`'s.
    pub(crate) pipeline_buffer: Option<usize>,
    pub(crate) cores_apart: bool,
}

impl Settings {
    pub(crate) fn from_args() -> Self {
        let mut settings = Self {
            counters: vec![2_000, 5_000, 10_000, 20_000],
            interval: Duration::from_millis(100),
            warmup: Duration::from_secs(3),
            window: Duration::from_secs(12),
            response_timeout: None,
            pipeline_buffer: None,
            cores_apart: false,
        };
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        settings.cores_apart = take_flag(&mut args, "--cores-apart");
        for pair in args.chunks(2) {
            let value = pair.get(1).map(String::as_str).unwrap_or_default();
            let number = || -> u64 {
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value {value:?} for {}", pair[0]))
            };
            match pair[0].as_str() {
                "--counters" => {
                    settings.counters = value
                        .split(',')
                        .map(|n| n.parse().expect("--counters takes numbers"))
                        .collect()
                }
                "--interval-ms" => settings.interval = Duration::from_millis(number()),
                "--warmup-s" => settings.warmup = Duration::from_secs(number()),
                "--seconds" => settings.window = Duration::from_secs(number()),
                "--pipeline-buffer" => settings.pipeline_buffer = Some(number() as usize),
                "--response-timeout-ms" => {
                    settings.response_timeout =
                        (value != "none").then(|| Duration::from_millis(number()))
                }
                flag => panic!(
                    "unknown flag {flag}; use --counters, --interval-ms, --warmup-s, --seconds, \
                     --response-timeout-ms, --pipeline-buffer, --cores-apart"
                ),
            }
        }
        settings
    }

    pub(crate) fn timeout_label(&self) -> String {
        self.response_timeout
            .map_or("none".to_owned(), |t| format!("{} ms", t.as_millis()))
    }
}
