//! What a fred error says about a flush: whether it can have been applied.

use comcount_core::StoreError;
use fred::error::{Error, ErrorKind};

/// Sorts a fred error into the kinds of failure a flush can have.
///
/// fred reports an error reply from the server with its text, which starts with the server's
/// upper-case error code: the script did not write, since every check comes before its first
/// write. One that says "not now" (`TRYAGAIN`, `MOVED`, `CLUSTERDOWN`, ...) → unavailable; any
/// other (`ERR`, `NOSCRIPT`, `OOM`, ...) → refused. A reply fred
/// could not read → malformed. Everything else (connection lost, timed out, canceled, given up
/// after its write attempts) leaves it unknown whether the flush ran. → unanswered.
pub(crate) fn classify(error: Error) -> StoreError {
    match error.kind() {
        ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled => StoreError::unanswered(error),
        ErrorKind::Protocol | ErrorKind::Parse | ErrorKind::NotFound => {
            StoreError::malformed(error)
        }
        _ if is_passing(&error) => StoreError::unavailable(error),
        _ if is_server_reply(&error) => StoreError::refused(error),
        _ => StoreError::unanswered(error),
    }
}

/// Server errors that say "not now" rather than "no": a slot moving or a node failing over or
/// loading. The script did not run, and the same flush may be sent again.
fn is_passing(error: &Error) -> bool {
    const PASSING: [&str; 7] = [
        "TRYAGAIN",
        "MOVED",
        "ASK",
        "CLUSTERDOWN",
        "MASTERDOWN",
        "READONLY",
        "LOADING",
    ];
    let code = error.details().split_whitespace().next().unwrap_or("");
    PASSING.contains(&code)
}

/// Whether the error carries a server's error reply: its first word is an upper-case code.
fn is_server_reply(error: &Error) -> bool {
    let code = error.details().split_whitespace().next().unwrap_or("");
    code.len() >= 2 && code.bytes().all(|b| b.is_ascii_uppercase())
}

/// Whether the server answered that it does not hold the script.
pub(crate) fn is_no_script(error: &Error) -> bool {
    error.details().starts_with("NOSCRIPT")
}

#[cfg(test)]
mod tests {
    use super::*;
    use comcount_core::StoreErrorKind;

    fn kind(kind: ErrorKind, details: &str) -> StoreErrorKind {
        classify(Error::new(kind, details.to_owned())).kind()
    }

    #[test]
    fn server_replies_are_refusals_and_lost_connections_are_unknown() {
        assert_eq!(
            kind(
                ErrorKind::Unknown,
                "ERR increment or decrement would overflow"
            ),
            StoreErrorKind::Refused
        );
        assert_eq!(
            kind(ErrorKind::Cluster, "MOVED 3999 127.0.0.1:6381"),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            kind(
                ErrorKind::Unknown,
                "TRYAGAIN Multiple keys request during rehashing of slot"
            ),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            kind(ErrorKind::Unknown, "Too many failed write attempts."),
            StoreErrorKind::Unanswered
        );
        assert_eq!(
            kind(ErrorKind::IO, "connection reset"),
            StoreErrorKind::Unanswered
        );
        assert_eq!(
            kind(ErrorKind::Protocol, "bad frame"),
            StoreErrorKind::Malformed
        );
        assert!(is_no_script(&Error::new(
            ErrorKind::Unknown,
            "NOSCRIPT No matching script."
        )));
    }
}
