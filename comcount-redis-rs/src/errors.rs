//! What a redis-rs error says about a flush: whether it can have been applied.

use comcount_core::StoreError;
use redis::{ErrorKind, RedisError};

/// Sorts a redis-rs error into the kinds of failure a flush can have.
///
/// - An error reply from the server means the script did not write: every check of the script
///   comes before its first write. One that says "not now" (`TRYAGAIN`, `MOVED`, `ASK`,
///   `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`, `LOADING`) → unavailable; any other (a script error
///   such as an overflowing total, `NOSCRIPT`, ...) → refused.
/// - A reply that does not parse → malformed.
/// - Everything else (connection lost, timed out, no node reachable) leaves it unknown whether
///   the flush ran. → unanswered.
pub(crate) fn classify(error: RedisError) -> StoreError {
    match error.kind() {
        ErrorKind::Server(kind) if passing(kind) => StoreError::unavailable(error),
        ErrorKind::Server(_) | ErrorKind::Extension => StoreError::refused(error),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => StoreError::malformed(error),
        _ => StoreError::unanswered(error),
    }
}

/// Server errors that say "not now" rather than "no": a slot moving or a node failing over or
/// loading. The script did not run, and the same flush may be sent again. (`LOADING` comes as
/// `BusyLoading`.)
fn passing(kind: redis::ServerErrorKind) -> bool {
    use redis::ServerErrorKind::*;
    matches!(
        kind,
        BusyLoading | Moved | Ask | TryAgain | ClusterDown | MasterDown | ReadOnly
    )
}

/// Whether the server answered that it does not hold the script.
pub(crate) fn is_no_script(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

#[cfg(test)]
mod tests {
    use super::*;
    use comcount_core::StoreErrorKind;

    #[test]
    fn server_replies_are_refusals_and_lost_connections_are_unknown() {
        let script_error = redis::make_extension_error("BUSY".into(), None);
        assert_eq!(classify(script_error).kind(), StoreErrorKind::Refused);
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        ));
        assert_eq!(classify(io).kind(), StoreErrorKind::Unanswered);
        let try_again = RedisError::from((
            ErrorKind::Server(redis::ServerErrorKind::TryAgain),
            "TRYAGAIN",
        ));
        assert_eq!(classify(try_again).kind(), StoreErrorKind::Unavailable);
        let parse = RedisError::from((ErrorKind::Parse, "bad frame"));
        assert_eq!(classify(parse).kind(), StoreErrorKind::Malformed);
    }
}
