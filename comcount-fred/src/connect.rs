//! One-line constructors: a store on a fred client that reconnects, with settings that suit a
//! counter. The settings are documented, with their reasons, on `FredStore::builder`.

use std::time::Duration;

use fred::clients::Client;
use fred::error::Error;
use fred::interfaces::ClientLike;
use fred::types::Builder;
use fred::types::config::{Config, ReconnectPolicy};

use crate::FredStore;

/// The first wait before reconnecting, in ms.
const RECONNECT_MIN_DELAY_MS: u32 = 100;

/// The longest wait between two attempts to reconnect, in ms.
const RECONNECT_MAX_DELAY_MS: u32 = 2_000;

/// How long one attempt to connect may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);

impl FredStore<Client> {
    /// Connects to Redis at `url` with a client that reconnects, built with
    /// [`builder`](Self::builder), and initialized (`init()`) before it returns.
    ///
    /// `url` is any URL fred takes: `redis://host:port/db`, `rediss://` for TLS (with one of
    /// fred's TLS features), `redis-cluster://host:port?node=host:port` for a cluster,
    /// `redis-sentinel://...`. It fails when `url` is not valid, or when the first connection
    /// fails; after that the client reconnects for as long as it lives. Needs a tokio runtime,
    /// as fred does.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use comcount_fred::{Counter, FredStore, clock::TokioTimer};
    ///
    /// let store = FredStore::connect("redis://127.0.0.1:6379").await?;
    /// let (counter, worker) = Counter::builder("requests", Duration::from_secs(5))
    ///     .build(store, TokioTimer::new())?;
    /// tokio::spawn(worker);
    /// counter.increment(1);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Counters can share the client: build each with `store.clone()`. So can the rest of
    /// your code, through [`client`](Self::client).
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let client = Self::builder(url)?.build()?;
        client.init().await?;
        Ok(Self::new(client))
    }

    /// The client builder [`connect`](Self::connect) uses, to add settings of your own, or to
    /// build a pool (`build_pool`) with the same ones:
    ///
    /// - **Reconnection: for ever**, after waits of 100 ms, then 200 ms, 400 ms, doubling, never
    ///   more than 2 s (each with up to 100 ms of jitter, fred's). A counter flushes for as long
    ///   as the process runs, so its client must never stop reconnecting: a fred client built
    ///   without a policy stays disconnected after its first lost connection, and one whose
    ///   policy has a `max_attempts` gives up after that many failed attempts in a row. The
    ///   cap keeps the connection back within about two seconds of the server.
    /// - **Connection timeout: 1 s** (fred's default is 10 s). Connecting to Redis on the same
    ///   network takes about a millisecond; a second covers a distant or congested one, and
    ///   an address that does not answer costs an attempt no longer than that.
    /// - **No command timeout** (fred's default). The counter has its own timeout for a
    ///   flush's reply, which follows the measured round trip, and keeps waiting for every
    ///   copy it sends, so a reply that comes late still settles its flush; a client timeout
    ///   shorter than the store's round trip would fail every copy instead.
    ///
    /// ```
    /// use comcount_fred::FredStore;
    /// use comcount_fred::fred::prelude::*;
    ///
    /// let builder = FredStore::builder("redis://127.0.0.1:6379")?;
    /// assert_eq!(builder.get_policy().map(ReconnectPolicy::max_attempts), Some(0)); // for ever
    /// let pool = builder.build_pool(4)?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn builder(url: &str) -> Result<Builder, Error> {
        let mut builder = Builder::from_config(Config::from_url(url)?);
        builder
            .set_policy(ReconnectPolicy::new_exponential(
                0,
                RECONNECT_MIN_DELAY_MS,
                RECONNECT_MAX_DELAY_MS,
                2,
            ))
            .with_connection_config(|config| config.connection_timeout = CONNECTION_TIMEOUT);
        Ok(builder)
    }
}

/// What is wrong with `client`'s reconnect policy for a counter, if anything.
pub(crate) fn caveat(policy: Option<&ReconnectPolicy>) -> Option<String> {
    match policy.map(ReconnectPolicy::max_attempts) {
        None => Some(
            "the fred client has no reconnect policy: once its connection is lost, every flush \
             fails until the process restarts; build it with FredStore::connect, or \
             Builder::set_policy"
                .to_owned(),
        ),
        Some(0) => None,
        Some(n) => Some(format!(
            "the fred client stops reconnecting after {n} failed attempts in a row, and then \
             every flush fails until the process restarts; give its reconnect policy a \
             max_attempts of 0 (for ever), as FredStore::connect does"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_that_reconnects_for_ever_has_no_caveat() {
        let builder = FredStore::builder("redis://127.0.0.1:1").unwrap();
        assert_eq!(caveat(builder.get_policy()), None);
        assert_eq!(
            builder.get_connection_config().connection_timeout,
            CONNECTION_TIMEOUT
        );
        let caveat = caveat(None).unwrap();
        assert!(caveat.contains("no reconnect policy"), "{caveat}");
        let bounded = ReconnectPolicy::new_constant(3, 50);
        let caveat = super::caveat(Some(&bounded)).unwrap();
        assert!(caveat.contains("after 3 failed attempts"), "{caveat}");
    }
}
