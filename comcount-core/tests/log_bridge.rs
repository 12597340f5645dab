//! The default sink's lines keep every field where a logger drops structured key-values: here,
//! through `tracing`'s bridge from `log`, as an application on `tracing_subscriber` gets them.
#![allow(clippy::unwrap_used)] // a panic is how a test fails

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use comcount_core::clock::VirtualClock;
use comcount_core::testing::{ScriptedStore, Step};
use comcount_core::{Counter, StoreErrorKind};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;

/// What the subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

#[test]
fn a_tracing_subscriber_sees_the_counter_and_every_attribute_of_a_log_line() {
    let captured = Captured::default();
    // With its `tracing-log` feature, the subscriber also takes what goes to `log`.
    tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(LevelFilter::DEBUG)
        .with_ansi(false)
        .try_init()
        .unwrap();
    let clock = VirtualClock::new();
    let store = ScriptedStore::with_clock(clock.clone());
    store.then(Step::Fail(StoreErrorKind::Refused));
    let mut pool = LocalPool::new();
    let (counter, worker) = Counter::builder("log-bridge", Duration::from_secs(1))
        .build(store, clock.clone())
        .unwrap();
    pool.spawner().spawn_local(worker).unwrap();
    counter.increment(7);
    pool.run_until_stalled();
    counter.close();
    pool.run_until_stalled();

    let out = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = |message: &str| {
        out.lines()
            .find(|line| line.contains(message))
            .unwrap_or_else(|| panic!("no `{message}` in:\n{out}"))
            .to_owned()
    };
    let failed = line("flush failed");
    for field in [
        "counter=log-bridge",
        "error=",
        "dropped=7",
        "unsettled=0",
        "seq=",
    ] {
        assert!(failed.contains(field), "{field} missing from: {failed}");
    }
    let started = line("counter started");
    for field in ["counter=log-bridge", "interval_ms=1000", "store=scripted"] {
        assert!(started.contains(field), "{field} missing from: {started}");
    }
    assert!(line("counter stopped").contains("unsent=0"));
}
