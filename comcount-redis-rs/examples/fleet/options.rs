//! The fleet's options: its flags, their defaults, and their parsing.

use std::path::PathBuf;
use std::time::Duration;

/// The fleet's settings, from the command line.
pub(crate) struct Options {
    pub(crate) participants: usize,
    pub(crate) interval: Duration,
    pub(crate) duration: Duration,
    pub(crate) rate: f64,
    pub(crate) chart: PathBuf,
    pub(crate) redis_url: String,
    pub(crate) fault: Option<Fault>,
    pub(crate) fault_at: Option<Duration>,
    pub(crate) fault_for: Option<Duration>,
}

/// A fault to inject mid-run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Cut the participants' connections, again and again, for a while.
    Cut,
    /// Stop the demo's own Redis, and start it again after a while.
    Restart,
}

impl Options {
    const USAGE: &'static str = "usage: fleet [--participants N] [--interval-ms MS] \
        [--duration-s S] [--rate EVENTS_PER_S] [--chart PATH]
             [--fault cut|restart] [--fault-at-s S] [--fault-for-ms MS]

REDIS_URL picks the server (default redis://127.0.0.1:6379); without one, the fleet counts on
the in-memory store, where --fault does nothing.
  --fault cut       cut the participants' connections (CLIENT KILL ID) again and again
  --fault restart   start a redis-server of the demo's own on a free port, instead of REDIS_URL,
                    and restart it (SHUTDOWN SAVE, then the same server again, its data kept)
  --fault-at-s S    when the fault starts (default: a third into the run)
  --fault-for-ms MS how long connections are cut, or the server stays down (default: two
                    intervals)";

    pub(crate) fn parse() -> Result<Self, String> {
        let mut options = Options {
            participants: 6,
            interval: Duration::from_millis(1000),
            duration: Duration::from_secs(20),
            rate: 200.0,
            chart: PathBuf::from("target/fleet.svg"),
            redis_url: std::env::var("REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
            fault: None,
            fault_at: None,
            fault_for: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "--help" || flag == "-h" {
                println!("{}", Self::USAGE);
                std::process::exit(0);
            }
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{}", Self::USAGE))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}\n{}", Self::USAGE);
            let seconds = |value: &str| {
                value
                    .parse::<f64>()
                    .map_err(|e| e.to_string())
                    .and_then(|s| Duration::try_from_secs_f64(s).map_err(|e| e.to_string()))
            };
            match flag.as_str() {
                "--participants" => options.participants = value.parse().map_err(|e| bad(&e))?,
                "--interval-ms" => {
                    options.interval = Duration::from_millis(value.parse().map_err(|e| bad(&e))?)
                }
                "--duration-s" => options.duration = seconds(&value).map_err(|e| bad(&e))?,
                "--rate" => options.rate = value.parse().map_err(|e| bad(&e))?,
                "--chart" => options.chart = value.into(),
                "--fault" => {
                    options.fault = Some(match value.as_str() {
                        "cut" => Fault::Cut,
                        "restart" => Fault::Restart,
                        _ => return Err(bad(&"the fault is `cut` or `restart`")),
                    })
                }
                "--fault-at-s" => options.fault_at = Some(seconds(&value).map_err(|e| bad(&e))?),
                "--fault-for-ms" => {
                    options.fault_for =
                        Some(Duration::from_millis(value.parse().map_err(|e| bad(&e))?))
                }
                _ => return Err(format!("unknown option {flag}\n{}", Self::USAGE)),
            }
        }
        if options.participants == 0 {
            return Err(format!(
                "--participants must be at least 1\n{}",
                Self::USAGE
            ));
        }
        if options.interval < Duration::from_millis(10) {
            return Err(format!(
                "--interval-ms must be at least 10\n{}",
                Self::USAGE
            ));
        }
        if options.fault.is_some() && options.fault_at() >= options.duration {
            return Err(format!(
                "--fault-at-s must come before the end of the run (--duration-s)\n{}",
                Self::USAGE
            ));
        }
        Ok(options)
    }

    pub(crate) fn fault_at(&self) -> Duration {
        self.fault_at.unwrap_or(self.duration / 3)
    }

    pub(crate) fn fault_for(&self) -> Duration {
        self.fault_for.unwrap_or(self.interval * 2)
    }
}
