//! A connection to the primary that Redis Sentinel names, which asks the sentinels again when
//! the primary may have moved.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisError, RedisFuture, Value};

use crate::RedisStore;
use crate::urls::SentinelTarget;

/// The least time between two lookups of the primary: failures come in bursts (every
/// counter on the connection flushes at about the same moment), and one lookup answers them
/// all.
const LOOKUP_GAP: Duration = Duration::from_millis(200);

/// A connection to the primary that Redis Sentinel names for a service, opened by
/// [`RedisStore::connect_any`] for a `redis-sentinel://` URL (feature `sentinel`).
///
/// It asks the sentinels for the primary's address, checks with `ROLE` that the server there
/// is a primary, and sends over a `ConnectionManager` to it, set up with
/// [`manager_config`](RedisStore::manager_config): it reconnects to that address by itself.
/// When a command fails as a failover makes it fail (`READONLY` from a primary turned
/// replica, a lost or refused connection, a timeout), the connection asks the sentinels again,
/// at most once every 200 ms, and from then on sends to the primary they name, if it is
/// another. The command that failed is not sent again: its error goes back to the caller, and
/// a counter sends the flush again on its own.
///
/// It asks only the sentinels the URL names (it does not learn of others from them), follows
/// the primary only (it never reads from replicas), and trusts the system's certificates for
/// TLS. Clones share the connection, and what it learns of the primary.
#[derive(Clone)]
pub struct SentinelConnection {
    shared: Arc<Shared>,
}

struct Shared {
    sentinels: Vec<ConnectionInfo>,
    service: String,
    node: SentinelNodeConnectionInfo,
    db: i64,
    primary: Mutex<Primary>,
    lookups: Mutex<Lookups>,
}

/// The primary the connection sends to.
#[derive(Clone)]
struct Primary {
    addr: ConnectionAddr,
    manager: ConnectionManager,
}

/// Whether a lookup is under way, and when the last one ended.
#[derive(Default)]
struct Lookups {
    running: bool,
    last: Option<Instant>,
}

impl SentinelConnection {
    /// Asks the sentinels of `target` for the primary, and connects to it.
    pub(crate) async fn connect(target: SentinelTarget) -> Result<Self, RedisError> {
        let SentinelTarget {
            sentinels,
            service,
            primary,
        } = target;
        let mut node = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(primary.redis_settings().clone());
        if let ConnectionAddr::TcpTls { insecure, .. } = primary.addr() {
            node = node.set_tls_mode(if *insecure {
                redis::TlsMode::Insecure
            } else {
                redis::TlsMode::Secure
            });
        }
        let db = primary.redis_settings().db();
        let client = lookup(&sentinels, &service, &node).await?;
        let primary = Primary::connect(client).await?;
        Ok(Self {
            shared: Arc::new(Shared {
                sentinels,
                service,
                node,
                db,
                primary: Mutex::new(primary),
                lookups: Mutex::default(),
            }),
        })
    }

    /// The address of the primary the connection sends to now.
    pub fn primary(&self) -> ConnectionAddr {
        self.shared.primary().addr
    }

    /// The name the sentinels know the primary by.
    pub fn service(&self) -> &str {
        &self.shared.service
    }
}

impl Primary {
    async fn connect(client: redis::Client) -> Result<Self, RedisError> {
        let addr = client.get_connection_info().addr().clone();
        let config = RedisStore::<ConnectionManager>::manager_config();
        let manager = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self { addr, manager })
    }
}

/// A client for the primary the sentinels name for `service`, once `ROLE` has confirmed it.
async fn lookup(
    sentinels: &[ConnectionInfo],
    service: &str,
    node: &SentinelNodeConnectionInfo,
) -> Result<redis::Client, RedisError> {
    Sentinel::build(sentinels.to_vec())?
        .async_master_for(service, Some(node))
        .await
}

/// Whether `error` may come from a primary that is no longer the primary: one turned replica
/// answers `READONLY`, one that is gone cannot be reached.
fn may_have_moved(error: &RedisError) -> bool {
    error.code() == Some("READONLY")
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_unrecoverable_error()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; a poisoned one holds a whole value still.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn primary(&self) -> Primary {
        lock(&self.primary).clone()
    }

    /// After a command to `sent` failed with `error`: asks the sentinels for the primary, and
    /// connects to it if it is another, unless a lookup is under way or ended moments ago.
    async fn after_failure(&self, sent: &ConnectionAddr, error: &RedisError) {
        if !may_have_moved(error) {
            return;
        }
        let Some(_turn) = self.take_turn() else {
            return;
        };
        if lock(&self.primary).addr != *sent {
            // Another lookup has moved on since the command was sent.
            return;
        }
        // A lookup that fails leaves the primary as it was: the next failure asks again.
        let Ok(client) = lookup(&self.sentinels, &self.service, &self.node).await else {
            return;
        };
        if client.get_connection_info().addr() == sent {
            return;
        }
        if let Ok(primary) = Primary::connect(client).await {
            *lock(&self.primary) = primary;
        }
    }

    fn take_turn(&self) -> Option<Turn<'_>> {
        let mut lookups = lock(&self.lookups);
        let recent = lookups.last.is_some_and(|t| t.elapsed() < LOOKUP_GAP);
        if lookups.running || recent {
            return None;
        }
        lookups.running = true;
        Some(Turn(&self.lookups))
    }
}

/// The one lookup under way; ends it when dropped, even with its future.
struct Turn<'a>(&'a Mutex<Lookups>);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut lookups = lock(self.0);
        lookups.running = false;
        lookups.last = Some(Instant::now());
    }
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let Primary { addr, mut manager } = self.shared.primary();
            let result = manager.send_packed_command(cmd).await;
            if let Err(error) = &result {
                self.shared.after_failure(&addr, error).await;
            }
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let Primary { addr, mut manager } = self.shared.primary();
            let result = manager.send_packed_commands(pipeline, offset, count).await;
            if let Err(error) = &result {
                self.shared.after_failure(&addr, error).await;
            }
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.db
    }
}

impl fmt::Debug for SentinelConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelConnection")
            .field("service", &self.shared.service)
            .field("primary", &self.primary().to_string())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failover_s_errors_send_the_connection_to_the_sentinels() {
        let reply = |line: &str| {
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
                .and_then(Value::extract_error)
                .expect_err("an error reply")
        };
        let io = |kind| RedisError::from(std::io::Error::new(kind, "gone"));
        assert!(may_have_moved(&reply(
            "READONLY You can't write against a read only replica."
        )));
        assert!(may_have_moved(&reply(
            "READONLY You can't write against a read only replica. script: 5d1e, on \
             @user_script:440."
        )));
        assert!(may_have_moved(&io(std::io::ErrorKind::ConnectionRefused)));
        assert!(may_have_moved(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(may_have_moved(&io(std::io::ErrorKind::TimedOut)));
        for line in [
            "ERR comcount: fence {c}:f:1 is not a fence",
            "NOSCRIPT No matching script. Please use EVAL.",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "NOPERM this user has no permissions to run the 'evalsha' command",
        ] {
            assert!(!may_have_moved(&reply(line)), "{line}");
        }
    }
}
