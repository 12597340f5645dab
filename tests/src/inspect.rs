//! Reading a store's keys from outside the store: values and time to live.

use std::collections::BTreeMap;
use std::time::Duration;

use comcount_core::MemoryStore;
use comcount_core::clock::Clock;
use redis::aio::ConnectionLike;

/// What a key holds and how long it has to live.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KeyState {
    /// The value as text: a total as its number, a fence as `SEQ:N`; empty for a family's
    /// interval key.
    pub value: String,
    /// A family's interval key: each family key's total, the sum of what the participants'
    /// fields hold for it ([`family_totals`]); empty for any other key.
    pub fields: BTreeMap<String, String>,
    /// The time to live; `None` for a key that never expires.
    pub ttl: Option<Duration>,
}

/// Every key under a key base, by name.
pub type Snapshot = BTreeMap<String, KeyState>;

/// Reads the keys of a store.
pub trait Inspector {
    /// The state of `key`, if it exists.
    fn key(&self, key: &str) -> impl Future<Output = Option<KeyState>>;

    /// The names of every key that starts with `base`.
    fn keys(&self, base: &str) -> impl Future<Output = Vec<String>>;

    /// Every key that starts with `base`, with its state.
    fn snapshot(&self, base: &str) -> impl Future<Output = Snapshot> {
        async move {
            let mut snapshot = Snapshot::new();
            for key in self.keys(base).await {
                if let Some(state) = self.key(&key).await {
                    snapshot.insert(key, state);
                }
            }
            snapshot
        }
    }
}

/// Reads a [`MemoryStore`] through its helpers.
pub struct MemoryInspector<C>(pub MemoryStore<C>);

impl<C: Clock> Inspector for MemoryInspector<C> {
    async fn key(&self, key: &str) -> Option<KeyState> {
        let fields: BTreeMap<String, String> = self
            .0
            .fields(key)
            .into_iter()
            .map(|(field, total)| (field, total.to_string()))
            .collect();
        let value = match (self.0.total(key), self.0.fence(key)) {
            (Some(total), _) => total.to_string(),
            (None, Some((seq, interval))) => format!("{seq}:{interval}"),
            (None, None) if !fields.is_empty() => String::new(),
            (None, None) => return None,
        };
        Some(KeyState {
            value,
            fields,
            ttl: self.0.time_to_live(key),
        })
    }

    async fn keys(&self, base: &str) -> Vec<String> {
        self.0
            .keys()
            .into_iter()
            .filter(|k| k.starts_with(base))
            .collect()
    }
}

/// Reads Redis through a plain redis-rs connection (standalone or cluster).
pub struct RedisInspector<C>(pub C);

impl<C: ConnectionLike + Clone + Send + Sync> Inspector for RedisInspector<C> {
    async fn key(&self, key: &str) -> Option<KeyState> {
        let mut connection = self.0.clone();
        let kind: String = redis::cmd("TYPE")
            .arg(key)
            .query_async(&mut connection)
            .await
            .unwrap();
        let (value, fields) = match kind.as_str() {
            "none" => return None,
            "string" => {
                let value: Option<String> = redis::cmd("GET")
                    .arg(key)
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                (value?, BTreeMap::new())
            }
            "hash" => {
                let hash: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
                    .arg(key)
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                if hash.is_empty() {
                    // Expired since TYPE.
                    return None;
                }
                // Fields that are not totals (written by another program, in a test of the
                // script's refusals) are shown as they are.
                let fields = match family_totals(&hash) {
                    Ok(totals) => totals
                        .into_iter()
                        .map(|(key, total)| (key, total.to_string()))
                        .collect(),
                    Err(_) => hash
                        .iter()
                        .map(|(f, v)| {
                            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                            (text(f), text(v))
                        })
                        .collect(),
                };
                (String::new(), fields)
            }
            other => panic!("{key} holds a {other}, which no store writes"),
        };
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut connection)
            .await
            .unwrap();
        Some(KeyState {
            value,
            fields,
            ttl: u64::try_from(ttl).ok().map(Duration::from_millis),
        })
    }

    async fn keys(&self, base: &str) -> Vec<String> {
        let mut connection = self.0.clone();
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", glob_escape(base)))
            .query_async(&mut connection)
            .await
            .unwrap();
        keys.sort();
        keys
    }
}

/// The totals of a family's interval key, read from its hash (`HGETALL`, field and value
/// pairs) as Redis holds it: each family key's field holds its total as an integer.
///
/// # Errors
///
/// When a field is not an integer.
pub fn family_totals(hash: &[(Vec<u8>, Vec<u8>)]) -> Result<BTreeMap<String, u64>, String> {
    hash.iter()
        .map(|(field, value)| {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            let total = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| format!("field {:?} holds {:?}", text(field), text(value)))?;
            Ok((text(field), total))
        })
        .collect()
}

fn glob_escape(text: &str) -> String {
    let mut escaped = String::new();
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}
