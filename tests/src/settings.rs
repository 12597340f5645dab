//! What the tests run at: the interval, and key prefixes no other test uses.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The counters' interval: `TEST_INTERVAL` milliseconds, 300 by default.
pub fn interval() -> Duration {
    let ms = match std::env::var("TEST_INTERVAL") {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("TEST_INTERVAL={text:?} is not a number of milliseconds")),
        Err(_) => 300,
    };
    assert!(ms >= 20, "TEST_INTERVAL={ms} is too short to test against");
    Duration::from_millis(ms)
}

/// A key prefix that no other test, run or process uses: `tag:PID-N-RANDOM:`.
pub fn unique_prefix(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{tag}:{}-{}-{:x}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        fastrand::u32(..)
    )
}

/// Sleeps on any runtime (tokio or smol).
pub async fn sleep(duration: Duration) {
    async_io::Timer::after(duration).await;
}
