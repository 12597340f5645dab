//! The run's settings, from the command line.

use std::time::Duration;

fn parse<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| panic!("bad value {value:?} for {flag}"))
}

pub(crate) struct Settings {
    pub(crate) interval: Duration,
    pub(crate) intervals: u32,
    pub(crate) participants: usize,
    pub(crate) round_trips: Vec<f64>,
    /// Participants start counting spread evenly over this many intervals (0: all at once).
    pub(crate) stagger: f64,
    /// Intervals counted with no delay on the path before the round trip is put on it (0:
    /// from the start).
    pub(crate) near_first: u32,
}

impl Settings {
    pub(crate) fn from_args() -> Self {
        let mut settings = Self {
            interval: Duration::from_millis(100),
            intervals: 100,
            participants: 8,
            round_trips: vec![0.2, 0.5, 1.0, 1.5, 2.0, 3.0],
            stagger: 0.0,
            near_first: 0,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        for pair in args.chunks(2) {
            let (flag, value) = (pair[0].as_str(), pair.get(1).map_or("", String::as_str));
            match flag {
                "--interval-ms" => settings.interval = Duration::from_millis(parse(flag, value)),
                "--intervals" => settings.intervals = parse(flag, value),
                "--participants" => settings.participants = parse(flag, value),
                "--round-trips" => {
                    settings.round_trips = value.split(',').map(|r| parse(flag, r)).collect()
                }
                "--stagger" => settings.stagger = parse(flag, value),
                "--near-first" => settings.near_first = parse(flag, value),
                _ => panic!(
                    "unknown flag {flag}; use --interval-ms, --intervals, --participants, \
                     --round-trips, --stagger, --near-first"
                ),
            }
        }
        settings
    }
}
