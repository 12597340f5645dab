//! The command line: `comcount inspect [OPTIONS] counter NAME | family NAME [KEY]`.

use std::ffi::OsString;
use std::fmt;

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Print this text and stop.
    Help(&'static str),
    /// Print the version and stop.
    Version,
    /// Read and print.
    Inspect(Inspect),
}

/// `comcount inspect`'s settings.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Inspect {
    /// The server's URL; with `cluster`, every node given to start from.
    pub(crate) urls: Vec<String>,
    pub(crate) cluster: bool,
    pub(crate) prefix: String,
    pub(crate) interval_ms: u64,
    pub(crate) intervals: u32,
    pub(crate) target: Target,
}

/// What to read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Counter(String),
    FamilyKey {
        name: String,
        partitions: u32,
        key: String,
    },
    FamilyTop {
        name: String,
        partitions: u32,
        top: usize,
    },
}

/// A command line that cannot be run, and what to write instead.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn usage(message: impl Into<String>) -> UsageError {
    UsageError(message.into())
}

pub(crate) const HELP: &str = "\
comcount: tools for comcount's counters and families

Usage: comcount inspect [OPTIONS] --interval-ms MS counter NAME
       comcount inspect [OPTIONS] --interval-ms MS family NAME [KEY]

Commands:
  inspect        read what Redis holds for a counter or a family (comcount inspect --help)

Options:
  -h, --help     print this help
  -V, --version  print the version
";

pub(crate) const INSPECT_HELP: &str = "\
Reads what Redis holds for a counter or a family of counters, by the server's clock.

Usage: comcount inspect [OPTIONS] --interval-ms MS counter NAME
       comcount inspect [OPTIONS] --interval-ms MS family NAME [KEY]

  counter NAME       the counter's totals of the last intervals, and its participants' fences
  family NAME        the family's keys and totals per interval, its top keys, and the
                     participants that flushed
  family NAME KEY    one key of the family: its totals, and its partition's fences

Options:
  --url URL          the Redis server to read [default: $REDIS_URL, else redis://127.0.0.1:6379]
  --cluster          the URL is a node of a Redis Cluster; give --url for each node to try
  --prefix P         the counters' key prefix [default: none]
  --interval-ms MS   the counters' interval in milliseconds, which numbers the intervals
                     (required)
  --partitions P     the family's number of partitions, as its participants are built with
                     [default: 1]
  --intervals N      how many of the newest intervals to read, the open one included
                     [default: 3]
  --top N            how many of the family's keys to list, the most counted first
                     [default: 10]
  -h, --help         print this help
";

/// The options `inspect` takes a value for.
const WITH_VALUE: [&str; 6] = [
    "--url",
    "--prefix",
    "--interval-ms",
    "--partitions",
    "--intervals",
    "--top",
];

/// Reads the command line, less the program's name; `default_url` is the URL to read without
/// `--url` (`REDIS_URL`, or the default server's).
pub(crate) fn parse(args: Vec<OsString>, default_url: String) -> Result<Command, UsageError> {
    let args = args
        .into_iter()
        .map(|arg| {
            arg.into_string()
                .map_err(|arg| usage(format!("{arg:?} is not UTF-8")))
        })
        .collect::<Result<Vec<String>, _>>()?;
    let Some((command, rest)) = args.split_first() else {
        return Ok(Command::Help(HELP));
    };
    match command.as_str() {
        "inspect" => inspect(rest, default_url),
        "-h" | "--help" | "help" => Ok(Command::Help(HELP)),
        "-V" | "--version" => Ok(Command::Version),
        other => Err(usage(format!(
            "there is no command {other:?}: the one command is inspect"
        ))),
    }
}

fn inspect(args: &[String], default_url: String) -> Result<Command, UsageError> {
    let mut urls = Vec::new();
    let mut cluster = false;
    let mut values: Vec<(&str, String)> = Vec::new();
    let mut positional: Vec<&str> = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            positional.extend(args.by_ref().map(String::as_str));
            break;
        }
        if arg == "-h" {
            return Ok(Command::Help(INSPECT_HELP));
        }
        if !arg.starts_with("--") {
            if arg.starts_with('-') && arg.len() > 1 {
                return Err(usage(format!("there is no option {arg:?}")));
            }
            positional.push(arg);
            continue;
        }
        let (option, inline) = match arg.split_once('=') {
            Some((option, value)) => (option, Some(value.to_owned())),
            None => (arg.as_str(), None),
        };
        match option {
            "--help" => return Ok(Command::Help(INSPECT_HELP)),
            "--cluster" => {
                if inline.is_some() {
                    return Err(usage("--cluster takes no value"));
                }
                cluster = true;
            }
            option if WITH_VALUE.contains(&option) => {
                let value = match inline {
                    Some(value) => value,
                    None => args
                        .next()
                        .cloned()
                        .ok_or_else(|| usage(format!("{option} needs a value")))?,
                };
                if option == "--url" {
                    urls.push(value);
                } else if values.iter().any(|(given, _)| *given == option) {
                    return Err(usage(format!("{option} is given twice")));
                } else {
                    values.push((option, value));
                }
            }
            other => return Err(usage(format!("there is no option {other:?}"))),
        }
    }
    let value = |option: &str| {
        values
            .iter()
            .find(|(given, _)| *given == option)
            .map(|(_, value)| value.as_str())
    };

    if cluster && !cfg!(feature = "cluster") {
        return Err(usage(
            "this comcount was built without Redis Cluster: install it with \
             `cargo install comcount-inspect --features cluster`",
        ));
    }
    if urls.len() > 1 && !cluster {
        return Err(usage(
            "--url is given twice: give one server, or --cluster and a node of the cluster \
             per --url",
        ));
    }
    if urls.is_empty() {
        urls.push(default_url);
    }
    let interval_ms = match value("--interval-ms") {
        Some(text) => number::<u64>("--interval-ms", text)?,
        None => {
            return Err(usage(
                "--interval-ms is missing: give the counters' interval in milliseconds, the \
                 one they are built with (the interval numbers N = server time in ms / \
                 interval come from it)",
            ));
        }
    };
    let intervals = value("--intervals")
        .map(|text| number::<u32>("--intervals", text))
        .transpose()?
        .unwrap_or(comcount_inspect::DEFAULT_INTERVALS);

    let target = match positional.as_slice() {
        ["counter", name] => {
            for option in ["--partitions", "--top"] {
                if value(option).is_some() {
                    return Err(usage(format!("{option} is for a family, not a counter")));
                }
            }
            Target::Counter((*name).to_owned())
        }
        ["family", name, rest @ ..] if rest.len() <= 1 => {
            let partitions = value("--partitions")
                .map(|text| number::<u32>("--partitions", text))
                .transpose()?
                .unwrap_or(1);
            match rest {
                [key] => {
                    if value("--top").is_some() {
                        return Err(usage(
                            "--top is for a whole family: leave out the KEY, or --top",
                        ));
                    }
                    Target::FamilyKey {
                        name: (*name).to_owned(),
                        partitions,
                        key: (*key).to_owned(),
                    }
                }
                _ => Target::FamilyTop {
                    name: (*name).to_owned(),
                    partitions,
                    top: value("--top")
                        .map(|text| number::<usize>("--top", text))
                        .transpose()?
                        .unwrap_or(10),
                },
            }
        }
        ["counter"] | ["family"] => {
            return Err(usage(format!(
                "{} needs a NAME: the name the counters are built with, without the prefix",
                positional[0]
            )));
        }
        [] => {
            return Err(usage(
                "say what to read: counter NAME, family NAME, or family NAME KEY",
            ));
        }
        other => {
            return Err(usage(format!(
                "{:?} is not what to read: give counter NAME, family NAME, or family NAME KEY",
                other.join(" ")
            )));
        }
    };
    Ok(Command::Inspect(Inspect {
        urls,
        cluster,
        prefix: value("--prefix").unwrap_or_default().to_owned(),
        interval_ms,
        intervals,
        target,
    }))
}

fn number<T: std::str::FromStr>(option: &str, text: &str) -> Result<T, UsageError> {
    text.parse()
        .map_err(|_| usage(format!("{option} takes a whole number, not {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: &str = "redis://127.0.0.1:6379";

    fn parse_line(line: &str) -> Result<Command, UsageError> {
        parse(
            line.split_whitespace().map(OsString::from).collect(),
            DEFAULT.to_owned(),
        )
    }

    fn inspect_line(line: &str) -> Inspect {
        match parse_line(line) {
            Ok(Command::Inspect(inspect)) => inspect,
            other => panic!("{line}: {other:?}"),
        }
    }

    fn error(line: &str) -> String {
        match parse_line(line) {
            Err(UsageError(message)) => message,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn a_counter() {
        let inspect = inspect_line(
            "inspect --url redis://h:1 --prefix app: --interval-ms 1000 counter requests",
        );
        assert_eq!(
            inspect,
            Inspect {
                urls: vec!["redis://h:1".to_owned()],
                cluster: false,
                prefix: "app:".to_owned(),
                interval_ms: 1000,
                intervals: 3,
                target: Target::Counter("requests".to_owned()),
            }
        );
    }

    #[test]
    fn a_family_and_its_key_with_options_anywhere() {
        let top = inspect_line("inspect family tenants --interval-ms=250 --partitions 8");
        assert_eq!(top.urls, [DEFAULT]);
        assert_eq!(top.interval_ms, 250);
        assert_eq!(
            top.target,
            Target::FamilyTop {
                name: "tenants".to_owned(),
                partitions: 8,
                top: 10
            }
        );
        let key = inspect_line("inspect --interval-ms 250 --intervals 5 family tenants acme");
        assert_eq!(key.intervals, 5);
        assert_eq!(
            key.target,
            Target::FamilyKey {
                name: "tenants".to_owned(),
                partitions: 1,
                key: "acme".to_owned()
            }
        );
        let dashed = inspect_line("inspect --interval-ms 250 -- family tenants --odd--");
        assert!(matches!(dashed.target, Target::FamilyKey { key, .. } if key == "--odd--"));
    }

    #[test]
    fn help_and_version() {
        assert_eq!(parse_line(""), Ok(Command::Help(HELP)));
        assert_eq!(parse_line("--help"), Ok(Command::Help(HELP)));
        assert_eq!(parse_line("-V"), Ok(Command::Version));
        assert_eq!(
            parse_line("inspect --help"),
            Ok(Command::Help(INSPECT_HELP))
        );
        assert_eq!(
            parse_line("inspect counter x -h"),
            Ok(Command::Help(INSPECT_HELP))
        );
    }

    #[test]
    fn mistakes_say_what_to_write() {
        assert!(error("inspect counter requests").contains("--interval-ms is missing"));
        assert!(error("inspect --interval-ms 1s counter x").contains("whole number"));
        assert!(error("inspect --interval-ms 1 --partitions 2 counter x").contains("family"));
        assert!(error("inspect --interval-ms 1 --top 2 family f k").contains("--top"));
        assert!(error("inspect --interval-ms 1 counter").contains("needs a NAME"));
        assert!(error("inspect --interval-ms 1").contains("counter NAME"));
        assert!(error("inspect --interval-ms 1 gauge x").contains("not what to read"));
        assert!(error("inspect --interval-ms 1 --prefix a --prefix b counter x").contains("twice"));
        assert!(error("inspect --url a --url b --interval-ms 1 counter x").contains("--cluster"));
        assert!(error("inspect --frobnicate counter x").contains("no option"));
        assert!(error("inspect --interval-ms").contains("needs a value"));
        assert!(error("count").contains("inspect"));
    }

    #[test]
    fn a_cluster_needs_the_feature() {
        let line =
            "inspect --cluster --url redis://a:1 --url redis://b:2 --interval-ms 1 counter x";
        if cfg!(feature = "cluster") {
            let inspect = inspect_line(line);
            assert!(inspect.cluster);
            assert_eq!(inspect.urls, ["redis://a:1", "redis://b:2"]);
        } else {
            assert!(error(line).contains("--features cluster"));
        }
    }
}
