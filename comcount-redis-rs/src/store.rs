//! The store: the flush script over any redis-rs async connection.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use comcount_core::diagnostics::{Event, Reporter};
use comcount_core::script::ScriptLoader;
use comcount_core::{FlushReply, FlushRequest, Store, StoreError, keys, script};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Value};

use crate::errors::{classify, is_no_script};
use crate::reply::fields;

/// A [`Store`] on Redis through a redis-rs async connection.
///
/// `C` is any connection that redis-rs can run commands on and that clones cheaply into a
/// handle on the same connection: `redis::aio::ConnectionManager` (feature
/// `connection-manager`, and what [`RedisStore::connect`] opens),
/// `redis::cluster_async::ClusterConnection` (feature `cluster`, what
/// [`RedisStore::connect_cluster`] opens), or [`redis::aio::MultiplexedConnection`], which
/// never reconnects (see [`new`](Self::new)). Each flush runs the flush
/// script with `EVALSHA`; when the server answers `NOSCRIPT` (first use, after `SCRIPT FLUSH`,
/// a restart or a failover) the store loads the script with `SCRIPT LOAD`, reports
/// [`Event::ScriptLoaded`], and sends the `EVALSHA` again. The flushes of one store and its
/// clones that find the script missing together load it once between them
/// ([`ScriptLoader`](comcount_core::script::ScriptLoader)).
#[derive(Clone)]
pub struct RedisStore<C> {
    connection: C,
    sha: Arc<str>,
    loader: Arc<ScriptLoader>,
    /// Set by the first flush of the store or a clone, which reads the server's eviction
    /// policy.
    policy_read: Arc<AtomicBool>,
    /// Whether the connection may send a command more than once on its own
    /// ([`resends_unseen`]).
    resends: bool,
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store that sends its flushes over `connection`.
    ///
    /// The connection must survive the server: a `ConnectionManager` reconnects after a
    /// restart, a failover or a dropped connection, and a `ClusterConnection` reconnects to
    /// its nodes. A bare [`MultiplexedConnection`] never reconnects: once it is lost, every
    /// flush fails for as long as the process runs, the group's total stays unknown and the
    /// counter counts alone. The counter warns of it when it starts (the event `store
    /// caveat`). Use [`RedisStore::connect`] (feature `connection-manager`, on by default),
    /// [`RedisStore::connect_cluster`] (feature `cluster`), or a `ConnectionManager` of your
    /// own instead.
    pub fn new(connection: C) -> Self {
        Self {
            resends: resends_unseen(&connection),
            connection,
            sha: script_sha(),
            loader: Arc::default(),
            policy_read: Arc::default(),
        }
    }

    /// The connection the store sends over.
    pub fn connection(&self) -> &C {
        &self.connection
    }

    /// The SHA-1 of the flush script, as `EVALSHA` names it.
    pub fn script_sha(&self) -> &str {
        &self.sha
    }
}

impl<C> Store for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        "redis-rs"
    }

    /// Says that a bare [`MultiplexedConnection`] never reconnects.
    fn caveat(&self) -> Option<Cow<'_, str>> {
        (TypeId::of::<C>() == TypeId::of::<MultiplexedConnection>()).then_some(Cow::Borrowed(
            "a redis-rs MultiplexedConnection never reconnects: once it is lost, every flush \
             fails until the process restarts; use RedisStore::connect, or a ConnectionManager",
        ))
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let mut connection = self.connection.clone();
        let evalsha = evalsha(&self.sha, request);
        let report = report.clone();
        let loader = Arc::clone(&self.loader);
        let read_policy = !self.policy_read.swap(true, Ordering::Relaxed);
        let resends = self.resends;
        async move {
            if read_policy {
                // Boxed, as the load below: once per store, out of every flush's future.
                Box::pin(warn_of_eviction(&mut connection, &report)).await;
            }
            let seen = loader.attempts();
            let value = match evalsha.query_async::<Value>(&mut connection).await {
                Ok(value) => value,
                // Boxed: few flushes find the script missing, and the room to load it would
                // otherwise be in every flush in the air, a third of its size.
                Err(error) if is_no_script(&error) => {
                    let resend =
                        load_and_resend(&evalsha, &mut connection, &loader, seen, &report, resends);
                    Box::pin(resend).await?
                }
                Err(error) => return Err(failure(error, resends)),
            };
            script::decode(request, &fields(&value)?)
        }
    }
}

/// Loads the flush script that the server lacked (once for the flushes of a store that found it
/// missing together: `seen` is the loader's count of attempts before this flush was sent), and
/// sends `evalsha` again. `resends`: whether the connection may send a command more than once.
async fn load_and_resend<C>(
    evalsha: &Cmd,
    connection: &mut C,
    loader: &ScriptLoader,
    seen: u64,
    report: &Reporter,
    resends: bool,
) -> Result<Value, StoreError>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut loading = connection.clone();
    let loaded = loader
        .load(seen, || async move {
            load()
                .query_async::<String>(&mut loading)
                .await
                .map_err(|error| failure(error, resends))
        })
        .await?;
    if let Some(sha) = loaded {
        report.emit(Event::ScriptLoaded { sha: &sha });
    }
    evalsha
        .query_async::<Value>(connection)
        .await
        .map_err(|error| failure(error, resends))
}

/// Reads the server's `maxmemory-policy` (`INFO memory`, which a user without `CONFIG` may run)
/// and reports a policy that can evict a fence as a `store caveat`
/// ([`eviction_caveat`](comcount_core::keys::eviction_caveat)). A server that refuses `INFO`
/// is not warned of.
async fn warn_of_eviction<C: ConnectionLike>(connection: &mut C, report: &Reporter) {
    let info = redis::cmd("INFO")
        .arg("memory")
        .query_async::<String>(connection)
        .await;
    if let Some(caveat) = info.ok().as_deref().and_then(keys::eviction_caveat) {
        report.emit(Event::StoreCaveat {
            store: "redis-rs",
            caveat: &caveat,
        });
    }
}

/// The store's error for a flush that failed with `error` on a connection that may send a
/// command more than once on its own (`resends`) or not.
///
/// redis-rs's cluster connection sends a command again on its own after a lost connection or
/// an I/O error, and returns only the last attempt's answer: an earlier attempt may have run.
/// Its errors are marked as such ([`StoreError::after_unseen_resends`]), so that a refusal
/// after an attempt that was applied is never reported dropped.
fn failure(error: redis::RedisError, resends: bool) -> StoreError {
    let failure = classify(error);
    if resends {
        failure.after_unseen_resends()
    } else {
        failure
    }
}

/// Whether `connection` may send a command more than once on its own: a cluster connection,
/// bare or as [`AnyConnection::Cluster`](crate::AnyConnection::Cluster).
// Without a connection that resends, `connection` goes unread.
#[cfg_attr(
    not(any(feature = "connection-manager", feature = "cluster")),
    allow(unused_variables)
)]
fn resends_unseen<C: 'static>(connection: &C) -> bool {
    let connection: &dyn Any = connection;
    #[cfg(feature = "cluster")]
    if connection.is::<redis::cluster_async::ClusterConnection>() {
        return true;
    }
    #[cfg(any(feature = "connection-manager", feature = "cluster"))]
    if let Some(any) = connection.downcast_ref::<crate::AnyConnection>() {
        return any.resends_unseen();
    }
    false
}

/// `EVALSHA sha 5 keys... args...` for one flush: the keys of [`FlushRequest::keys`], the
/// arguments of [`script::arguments`].
///
/// Keys and arguments are copied into the command as they are made, into room sized up front:
/// built apart first, they took a dozen allocations a flush, and the command, grown one
/// argument at a time, was reallocated about ten times more.
fn evalsha(sha: &str, request: &FlushRequest) -> Cmd {
    let keys = request.key_count();
    let entries: usize = request.entries.iter().map(|e| e.key.len() + 20).sum();
    // Each key at most the base, a colon and 20 digits; the four numbers and the layout, 81
    // bytes at most; each entry its key and 20 digits at most.
    let bytes =
        "EVALSHA".len() + sha.len() + 1 + keys * (request.space.base().len() + 21) + 81 + entries;
    let mut cmd = Cmd::with_capacity(3 + keys + 5 + 2 * request.entries.len(), bytes);
    cmd.arg("EVALSHA").arg(sha).arg(keys);
    request.each_key(|key| {
        cmd.arg(key);
    });
    script::each_argument(request, |argument| {
        cmd.arg(argument);
    });
    cmd
}

/// The flush script's SHA-1, hashed once per process: a service may build a store for each of
/// thousands of counters.
fn script_sha() -> Arc<str> {
    static SHA: OnceLock<Arc<str>> = OnceLock::new();
    Arc::clone(SHA.get_or_init(|| redis::Script::new(script::SOURCE).get_hash().into()))
}

/// `SCRIPT LOAD source`; redis-rs sends it to every primary of a cluster.
fn load() -> Cmd {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("LOAD").arg(script::SOURCE);
    cmd
}

impl<C> fmt::Debug for RedisStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("script_sha", &self.sha)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use comcount_core::{Entry, KeySpace, ParticipantId};

    fn words(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                other => panic!("EVALSHA holds no {other:?}"),
            })
            .collect()
    }

    #[test]
    fn evalsha_sends_the_keys_then_the_scripts_arguments() {
        let request = FlushRequest::new(
            KeySpace::partition("p:", "f", 2),
            ParticipantId::from_u64(9),
            300,
        )
        .with_seq(4)
        .with_expect(10)
        .with_entries(vec![Entry::new("a", 1), Entry::new("b", 0)]);
        let mut expected: Vec<Vec<u8>> = vec![b"EVALSHA".into(), b"sha".into(), b"5".into()];
        expected.extend(request.keys().into_iter().map(String::into_bytes));
        expected.extend(script::arguments(&request).into_iter().map(Cow::into_owned));
        assert_eq!(words(&evalsha("sha", &request)), expected);
        assert_eq!(expected[3], b"p:{f@2}:8");
        assert_eq!(expected[8..13], [&b"4"[..], b"300", b"10", b"600000", b"f"]);
        assert_eq!(expected[13..], [&b"a"[..], b"1", b"b", b"0"]);
    }

    /// The error line redis-rs makes an error of.
    fn refusal() -> redis::RedisError {
        redis::parse_redis_value(b"-ERR comcount: fence {c}:f:1 is not a fence\r\n")
            .and_then(Value::extract_error)
            .expect_err("an error reply")
    }

    #[test]
    fn a_connection_that_sends_once_reports_a_refusal_as_not_applied() {
        let failure = failure(refusal(), false);
        assert_eq!(failure.kind(), comcount_core::StoreErrorKind::Refused);
        assert!(!failure.may_have_applied());
    }

    #[test]
    fn a_cluster_connections_refusal_may_follow_an_attempt_that_ran() {
        let failure = failure(refusal(), true);
        assert_eq!(failure.kind(), comcount_core::StoreErrorKind::Refused);
        assert!(failure.may_have_applied(), "{failure}");
        assert!(!failure.worth_resending());
    }

    #[test]
    fn only_a_cluster_connection_resends_on_its_own() {
        assert!(!resends_unseen(&0_u8));
        #[cfg(feature = "connection-manager")]
        {
            // A manager that has never connected: built lazily, on a runtime, with no I/O.
            #[cfg(feature = "tokio")]
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            #[cfg(feature = "tokio")]
            let _entered = runtime.enter();
            let client = redis::Client::open("redis://127.0.0.1:1/").expect("a client");
            let manager = redis::aio::ConnectionManager::new_lazy_with_config(
                client,
                crate::RedisStore::manager_config(),
            )
            .expect("a lazy manager");
            assert!(!resends_unseen(&manager));
            assert!(!resends_unseen(&crate::AnyConnection::Server(manager)));
        }
    }
}
