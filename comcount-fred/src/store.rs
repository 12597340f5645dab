//! The store: the flush script over a fred client or pool.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use comcount_core::diagnostics::{Event, Reporter};
use comcount_core::script::ScriptLoader;
use comcount_core::{FlushReply, FlushRequest, Store, StoreError, keys, script};
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::errors::{classify, is_no_script};
use crate::reply::fields;

/// How many cluster redirections one `EVALSHA` may follow (fred's default).
const MAX_REDIRECTIONS: u32 = 5;

/// A [`Store`] on Redis through a fred client: a [`fred::clients::Client`] (standalone, or
/// clustered when built with a cluster config) or a [`fred::clients::Pool`].
///
/// Each flush runs the flush script with `EVALSHA`; when the server answers `NOSCRIPT` (first
/// use, after `SCRIPT FLUSH`, a restart or a failover) the store loads the script with
/// `SCRIPT LOAD` (on every primary of a cluster), reports [`Event::ScriptLoaded`], and sends the
/// `EVALSHA` again. The flushes of one store and its clones that find the script missing
/// together load it once between them ([`ScriptLoader`](comcount_core::script::ScriptLoader)).
///
/// The `EVALSHA` of a flush is not written again after a reconnection: the store sends it with
/// `Options { fail_fast: true }`, whatever the client's settings, so a flush whose connection
/// closed before its reply comes back as an unanswered error. Should a copy reach the server all
/// the same, the participant's fence turns it into a duplicate.
///
/// It may follow every cluster redirection fred allows it (`MOVED` and `ASK`, each a write):
/// the store gives it one write attempt more than it has redirections. fred follows an `ASK`
/// only for a command with a write attempt left, and for one without it ends the client's
/// connection task, leaving every later command of the client waiting forever.
#[derive(Clone)]
pub struct FredStore<C> {
    client: C,
    sha: Arc<str>,
    loader: Arc<ScriptLoader>,
    /// Set by the first flush of the store or a clone, which reads the server's eviction
    /// policy.
    policy_read: Arc<AtomicBool>,
}

impl<C> FredStore<C>
where
    C: ClientLike + LuaInterface + Clone + Send + Sync + 'static,
{
    /// A store that sends its flushes through `client`, which must be initialized (`init()`,
    /// or `connect()` and `wait_for_connect()`) before the first flush.
    ///
    /// The client must reconnect for ever: a counter flushes for as long as the process runs,
    /// across server restarts and failovers. A fred client built without a reconnect policy
    /// never reconnects, and one whose policy has a `max_attempts` stops after that many
    /// failed attempts in a row; after that, every flush fails and the counter counts alone.
    /// The counter warns of either when it starts (the event `store caveat`).
    /// [`FredStore::connect`] builds a client that reconnects for ever, and
    /// [`FredStore::builder`] a builder with the same settings, for a pool.
    pub fn new(client: C) -> Self {
        Self {
            client,
            sha: script_sha(),
            loader: Arc::default(),
            policy_read: Arc::default(),
        }
    }

    /// The client the store sends through.
    pub fn client(&self) -> &C {
        &self.client
    }

    /// The SHA-1 of the flush script, as `EVALSHA` names it.
    pub fn script_sha(&self) -> &str {
        &self.sha
    }
}

impl<C> Store for FredStore<C>
where
    C: ClientLike + LuaInterface + Clone + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        "fred"
    }

    /// Says that the client will not reconnect, or will stop: one built without a reconnect
    /// policy, or with a policy whose `max_attempts` is not 0.
    fn caveat(&self) -> Option<Cow<'_, str>> {
        crate::connect::caveat(self.client.client_reconnect_policy().as_ref()).map(Cow::Owned)
    }

    fn flush(
        &self,
        request: &FlushRequest,
        report: &Reporter,
    ) -> impl Future<Output = Result<FlushReply, StoreError>> + Send {
        let client = self.client.clone();
        let (slot, arguments) = evalsha_arguments(&self.sha, request);
        let report = report.clone();
        let loader = Arc::clone(&self.loader);
        let read_policy = !self.policy_read.swap(true, Ordering::Relaxed);
        async move {
            if read_policy {
                // Boxed: once per store, out of every flush's future.
                Box::pin(warn_of_eviction(&client, &report)).await;
            }
            let seen = loader.attempts();
            let once = client.with_options(&Options {
                fail_fast: true,
                max_redirections: Some(MAX_REDIRECTIONS),
                max_attempts: Some(MAX_REDIRECTIONS + 1),
                ..Options::default()
            });
            let evalsha = || {
                once.custom::<Value, _>(
                    CustomCommand::new_static("EVALSHA", ClusterHash::Custom(slot), false),
                    arguments.clone(),
                )
            };
            let value = match evalsha().await {
                Ok(value) => value,
                Err(error) if is_no_script(&error) => {
                    let loaded = loader
                        .load(seen, || async {
                            client
                                .script_load_cluster::<String, _>(script::SOURCE)
                                .await
                                .map_err(classify)
                        })
                        .await?;
                    if let Some(sha) = loaded {
                        report.emit(Event::ScriptLoaded { sha: &sha });
                    }
                    evalsha().await.map_err(classify)?
                }
                Err(error) => return Err(classify(error)),
            };
            script::decode(request, &fields(&value)?)
        }
    }
}

/// The flush script's SHA-1, hashed once per process: a service may build a store for each of
/// thousands of counters.
/// Reads the server's `maxmemory-policy` (`INFO memory`, which a user without `CONFIG` may run)
/// and reports a policy that can evict a fence as a `store caveat`
/// ([`eviction_caveat`](comcount_core::keys::eviction_caveat)). A server that refuses `INFO`
/// is not warned of.
async fn warn_of_eviction<C: ClientLike>(client: &C, report: &Reporter) {
    let info = client
        .custom::<String, _>(
            CustomCommand::new_static("INFO", ClusterHash::Random, false),
            vec!["memory"],
        )
        .await;
    if let Some(caveat) = info.ok().as_deref().and_then(keys::eviction_caveat) {
        report.emit(Event::StoreCaveat {
            store: "fred",
            caveat: &caveat,
        });
    }
}

fn script_sha() -> Arc<str> {
    static SHA: OnceLock<Arc<str>> = OnceLock::new();
    Arc::clone(SHA.get_or_init(|| fred::util::sha1_hash(script::SOURCE).into()))
}

/// The slot and the arguments of `EVALSHA sha 5 keys... args...` for one flush: the keys of
/// [`FlushRequest::keys`], the arguments of [`script::arguments`].
fn evalsha_arguments(sha: &str, request: &FlushRequest) -> (u16, Vec<Value>) {
    let keys = request.keys();
    // Every key of a flush shares one hash tag, so the first one names the slot.
    let slot = fred::util::redis_keyslot(keys[0].as_bytes());
    let arguments = script::arguments(request);
    let mut all = Vec::with_capacity(2 + keys.len() + arguments.len());
    all.extend([Value::from(sha), Value::from(keys.len().to_string())]);
    all.extend(keys.into_iter().map(Value::from));
    all.extend(
        arguments
            .into_iter()
            .map(|argument| Value::Bytes(argument.into_owned().into())),
    );
    (slot, all)
}

impl<C> fmt::Debug for FredStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FredStore")
            .field("script_sha", &self.sha)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use comcount_core::{Entry, KeySpace, ParticipantId};

    #[test]
    fn evalsha_sends_the_keys_then_the_scripts_arguments_to_their_slot() {
        let request = FlushRequest::new(
            KeySpace::partition("p:", "f", 2),
            ParticipantId::from_u64(9),
            300,
        )
        .with_seq(4)
        .with_expect(10)
        .with_entries(vec![Entry::new("a", 1), Entry::new("b", 0)]);
        let (slot, arguments) = evalsha_arguments("sha", &request);
        let bytes = |value: &Value| value.as_bytes().expect("bytes").to_vec();
        let mut expected: Vec<Vec<u8>> = vec![b"sha".into(), b"5".into()];
        expected.extend(request.keys().into_iter().map(String::into_bytes));
        expected.extend(script::arguments(&request).into_iter().map(Cow::into_owned));
        assert_eq!(arguments.iter().map(bytes).collect::<Vec<_>>(), expected);
        assert_eq!(arguments[2].as_str().as_deref(), Some("p:{f@2}:8"));
        let entries: Vec<_> = arguments[12..].iter().map(bytes).collect();
        assert_eq!(entries, [&b"a"[..], b"1", b"b", b"0"]);
        assert_eq!(slot, fred::util::redis_keyslot(b"f@2"));
    }
}
