//! Connections to read through, with timeouts chosen for a reader and errors that say what to
//! do.

use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use crate::error::Error;

/// How long [`connect`] and `connect_cluster` wait for a connection, and then for each
/// reply.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to the Redis server at `url` (`redis://[[user]:password@]host[:port][/db]`),
/// on the tokio runtime, that gives up on a connection or a reply after [`TIMEOUT`].
///
/// # Errors
///
/// [`Error::BadUrl`] for a URL redis-rs does not take; [`Error::Unreachable`] when the server
/// does not answer, refuses the connection, or turns the credentials away.
pub async fn connect(url: &str) -> Result<MultiplexedConnection, Error> {
    let client = redis::Client::open(url).map_err(|e| Error::BadUrl {
        url: redact(url),
        reason: e.to_string(),
    })?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| Error::Unreachable {
            url: redact(url),
            reason: e.to_string(),
        })
}

/// A connection to the Redis Cluster whose nodes include those at `urls`, on the tokio
/// runtime, that gives up on a connection or a reply after [`TIMEOUT`].
///
/// # Errors
///
/// As [`connect`].
#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub async fn connect_cluster(
    urls: &[&str],
) -> Result<redis::cluster_async::ClusterConnection, Error> {
    let named = || {
        let urls: Vec<String> = urls.iter().map(|url| redact(url)).collect();
        urls.join(", ")
    };
    let client = redis::cluster::ClusterClientBuilder::new(urls.iter().copied())
        .connection_timeout(TIMEOUT)
        .response_timeout(TIMEOUT)
        .build()
        .map_err(|e| Error::BadUrl {
            url: named(),
            reason: e.to_string(),
        })?;
    client
        .get_async_connection()
        .await
        .map_err(|e| Error::Unreachable {
            url: named(),
            reason: e.to_string(),
        })
}

/// `url` with its password, if any, left out: what an error may show.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) if user_info.contains(':') => {
            let user = user_info.split_once(':').map_or("", |(user, _)| user);
            format!("{scheme}://{user}:***@{host}{path}")
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_left_out_of_what_errors_show() {
        assert_eq!(
            redact("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(
            redact("redis://:secret@host:6379"),
            "redis://:***@host:6379"
        );
        assert_eq!(
            redact("redis://user:se@cret@host/2"),
            "redis://user:***@host/2"
        );
        assert_eq!(redact("redis://user@host"), "redis://user@host");
        assert_eq!(redact("nonsense"), "nonsense");
    }
}
