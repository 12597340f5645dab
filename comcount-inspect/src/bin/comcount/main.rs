//! `comcount`: tools for comcount's counters and families. `comcount inspect` prints what Redis
//! holds for a counter or a family; `comcount inspect --help` says how.

mod args;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use comcount_inspect::redis::aio::ConnectionLike;
use comcount_inspect::{Error, Reader};

use args::{Command, Inspect, Target};

/// The server read without `--url` or `REDIS_URL`.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

fn main() -> ExitCode {
    let default_url = std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned());
    let command = match args::parse(std::env::args_os().skip(1).collect(), default_url) {
        Ok(command) => command,
        Err(error) => {
            eprintln!("comcount: {error}");
            eprintln!("(comcount inspect --help shows every option)");
            return ExitCode::from(2);
        }
    };
    let inspect = match command {
        Command::Help(text) => return print(text),
        Command::Version => return print(&format!("comcount {}\n", env!("CARGO_PKG_VERSION"))),
        Command::Inspect(inspect) => inspect,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("comcount: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&inspect)) {
        Ok(text) => print(&text),
        Err(error) => {
            eprintln!("comcount: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `text` to the standard output; a closed pipe (`comcount ... | head`) is no error.
fn print(text: &str) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    ExitCode::SUCCESS
}

/// Connects, reads and returns the report as text.
async fn run(inspect: &Inspect) -> Result<String, Error> {
    let interval = Duration::from_millis(inspect.interval_ms);
    #[cfg(feature = "cluster")]
    if inspect.cluster {
        let urls: Vec<&str> = inspect.urls.iter().map(String::as_str).collect();
        let connection = comcount_inspect::connect_cluster(&urls).await?;
        let reader = Reader::new(connection, &inspect.prefix, interval)?;
        return report(reader.intervals(inspect.intervals)?, &inspect.target).await;
    }
    let url = inspect.urls.first().map_or(DEFAULT_URL, String::as_str);
    let connection = comcount_inspect::connect(url).await?;
    let reader = Reader::new(connection, &inspect.prefix, interval)?;
    report(reader.intervals(inspect.intervals)?, &inspect.target).await
}

async fn report<C: ConnectionLike + Send + 'static>(
    mut reader: Reader<C>,
    target: &Target,
) -> Result<String, Error> {
    Ok(match target {
        Target::Counter(name) => reader.counter(name).await?.to_string(),
        Target::FamilyKey {
            name,
            partitions,
            key,
        } => reader.family_key(name, *partitions, key).await?.to_string(),
        Target::FamilyTop {
            name,
            partitions,
            top,
        } => reader
            .family_top(name, *partitions, *top)
            .await?
            .to_string(),
    })
}
