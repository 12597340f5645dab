//! The faults it injects: connections cut, and a redis-server of the example's own restarted.

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use comcount_redis_rs::redis::aio::ConnectionManager;
use comcount_redis_rs::{KeySpace, redis};
use tokio::time::Instant;

use crate::options::{Fault, Options};
use crate::probe;
use crate::record::{Held, Reader, StoreClock, lock};

/// What the demo can break, when it counts on Redis.
pub(crate) struct Faults {
    /// A connection of the demo's own, not the participants'.
    pub(crate) observer: ConnectionManager,
    /// A handle on each participant's connection.
    pub(crate) participants: Vec<ConnectionManager>,
    /// The server the demo started, if it did.
    pub(crate) server: Option<OwnRedis>,
}

/// When the fault is on, in ms of the store's clock; the end is unknown until it is over.
#[derive(Default)]
pub(crate) struct FaultWindow(Mutex<Option<(u64, Option<u64>)>>);

impl FaultWindow {
    pub(crate) fn covers(&self, from_ms: u64, to_ms: u64) -> bool {
        match *lock(&self.0) {
            Some((start, end)) => start < to_ms && end.is_none_or(|end| from_ms < end),
            None => false,
        }
    }
}

/// Injects the fault of the options, if any and if there is Redis to inject it into; returns
/// what it did and when, in ms of the store's clock.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn inject(
    options: &Options,
    faults: Option<&mut Faults>,
    started: Instant,
    clock: StoreClock,
    window: &FaultWindow,
    held: &Held,
    mut reader: Reader,
    space: &KeySpace,
) -> Option<(Fault, u64, u64)> {
    let (fault, faults) = options.fault.zip(faults)?;
    tokio::time::sleep_until(started + options.fault_at()).await;
    let from = clock.now_ms();
    *lock(&window.0) = Some((from, None));
    let down_for = options.fault_for();
    match fault {
        Fault::Cut => {
            println!(
                "-- fault: cutting the participants' connections for {down_for:?} \
                 (CLIENT KILL ID, again and again)"
            );
            let cuts = cut(faults, started + options.fault_at() + down_for).await;
            println!("-- fault over: {cuts} connections cut; each reconnects by itself");
        }
        Fault::Restart => {
            // Read what the store holds just before it goes, so that every total a
            // participant may have been told is known.
            let interval_ms = options.interval.as_millis() as u64;
            held.read(
                &mut reader,
                space,
                clock.now_ms() / interval_ms,
                options.interval / 4,
            )
            .await;
            let Some(server) = faults.server.as_mut() else {
                println!("-- fault: not restarting a Redis the demo did not start");
                return None;
            };
            println!("-- fault: stopping Redis (SHUTDOWN SAVE) for {down_for:?}");
            match server.restart(down_for).await {
                Ok(()) => println!("-- fault over: Redis is back, with its data"),
                Err(error) => println!("-- fault: Redis did not come back: {error}"),
            }
        }
    }
    let to = clock.now_ms();
    *lock(&window.0) = Some((from, Some(to)));
    Some((fault, from, to))
}

/// Cuts every participant's connection, again and again until `until`, from a connection of
/// the demo's own: `CLIENT ID` through the participant's connection names it, and `CLIENT KILL
/// ID` closes it on the server. Each reconnects on its next command. Returns how many were cut.
async fn cut(faults: &mut Faults, until: Instant) -> usize {
    let mut cuts = 0;
    while Instant::now() < until {
        for connection in &mut faults.participants {
            let mut asking = redis::cmd("CLIENT");
            asking.arg("ID");
            let asked = asking.query_async::<u64>(connection);
            let Ok(Ok(id)) = tokio::time::timeout(Duration::from_millis(100), asked).await else {
                // Already cut, and reconnecting.
                continue;
            };
            let mut kill = redis::cmd("CLIENT");
            kill.arg("KILL").arg("ID").arg(id);
            let kill = kill.query_async::<u64>(&mut faults.observer);
            if let Ok(Ok(killed)) = tokio::time::timeout(Duration::from_millis(100), kill).await {
                cuts += killed as usize;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cuts
}

/// A `redis-server` the demo started, on a free loopback port, with a data directory of its
/// own; stopped when dropped, or by a watchdog when the demo ends some other way.
pub(crate) struct OwnRedis {
    port: u16,
    dir: PathBuf,
    server: Option<Child>,
    watchdog: Option<Child>,
}

impl OwnRedis {
    pub(crate) async fn start() -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("comcount-fleet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let mut last_error = String::new();
        // Another process may take the port between picking it and the server binding it.
        for _ in 0..5 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|listener| listener.local_addr())
                .map_err(|e| format!("no free port on 127.0.0.1: {e}"))?
                .port();
            let mut server = Self {
                port,
                dir: dir.clone(),
                server: None,
                watchdog: None,
            };
            match server.spawn().await {
                Ok(()) => return Ok(server),
                Err(error) => last_error = error,
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(last_error)
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    async fn spawn(&mut self) -> Result<(), String> {
        let mut server = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run redis-server ({e}); --fault restart starts one of its own: \
                     install it (apt-get install redis-server)"
                )
            })?;
        self.watchdog = watchdog(server.id()).ok();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = server.try_wait() {
                self.stop();
                return Err(format!(
                    "redis-server on port {} exited with {status}; its log is in {}",
                    self.port,
                    self.dir.join("redis.log").display()
                ));
            }
            if probe(&self.url()).await.is_ok() {
                self.server = Some(server);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = server.kill();
                let _ = server.wait();
                self.stop();
                return Err(format!("redis-server on port {} never answered", self.port));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server as an operator would, saving its data (`SHUTDOWN SAVE`), waits
    /// `down_for`, and starts it again on the same port and data.
    pub(crate) async fn restart(&mut self, down_for: Duration) -> Result<(), String> {
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        // The server closes the connection instead of answering.
        let _ = redis::cmd("SHUTDOWN")
            .arg("SAVE")
            .query_async::<()>(&mut connection)
            .await;
        let deadline = Instant::now() + Duration::from_secs(5);
        if let Some(server) = self.server.as_mut() {
            while !matches!(server.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.stop();
        tokio::time::sleep(down_for).await;
        let mut last_error = String::new();
        // The port may linger for a moment.
        for _ in 0..20 {
            match self.spawn().await {
                Ok(()) => return Ok(()),
                Err(error) => last_error = error,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last_error)
    }

    fn stop(&mut self) {
        for mut child in [self.server.take(), self.watchdog.take()]
            .into_iter()
            .flatten()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A shell that kills the server once the demo is gone, however it ended.
fn watchdog(server: u32) -> std::io::Result<Child> {
    let script = format!(
        "while kill -0 {parent} 2>/dev/null && kill -0 {server} 2>/dev/null; do sleep 0.5; done; \
         kill -9 {server} 2>/dev/null",
        parent = std::process::id(),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}
