//! What a redis-rs error says about a flush: whether it can have been applied.

use comcount_core::StoreError;
use redis::{ErrorKind, RedisError};

/// Sorts a redis-rs error into the kinds of failure a flush can have.
///
/// - An error reply from the server means the script did not write: every check of the script
///   comes before its first write. One that says "not now" (see [`passing`]) → unavailable; any
///   other (a script error such as `ERR comcount: ...` or an overflowing total, `NOPERM`, ...)
///   → refused.
/// - A reply that does not parse → malformed.
/// - Everything else (connection lost, timed out, no node reachable, an error line whose first
///   word is not an upper-case code, which a proxy in the way may have written after the
///   command went on) leaves it unknown whether the flush ran. → unanswered, as the fred store
///   has it.
///
/// The store loads the script on the first `NOSCRIPT` and sends the `EVALSHA` again; only the
/// `NOSCRIPT` of that second `EVALSHA` reaches this function.
pub(crate) fn classify(error: RedisError) -> StoreError {
    match error.kind() {
        ErrorKind::Server(kind) if passing(kind) => StoreError::unavailable(error),
        ErrorKind::Extension if error.code().is_some_and(|code| PASSING.contains(&code)) => {
            StoreError::unavailable(error)
        }
        ErrorKind::Extension if !error.code().is_some_and(is_server_code) => {
            StoreError::unanswered(error)
        }
        ErrorKind::Server(_) | ErrorKind::Extension => StoreError::refused(error),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => StoreError::malformed(error),
        _ => StoreError::unanswered(error),
    }
}

/// Server errors that say "not now" rather than "no", and that redis-rs knows by kind: a slot
/// moving, a node failing over or loading (`LOADING` comes as `BusyLoading`), or the script
/// missing again right after it was loaded (a failover or `SCRIPT FLUSH` in between). The
/// script did not run, and the same flush may be sent again.
fn passing(kind: redis::ServerErrorKind) -> bool {
    use redis::ServerErrorKind::*;
    matches!(
        kind,
        BusyLoading | Moved | Ask | TryAgain | ClusterDown | MasterDown | ReadOnly | NoScript
    )
}

/// The same for codes redis-rs does not know, which come as extension errors: `BUSY` (another
/// script or function is running) and `NOREPLICAS` (too few replicas for a write, before any
/// command of the script ran).
const PASSING: [&str; 2] = ["BUSY", "NOREPLICAS"];

/// Whether `code`, an error line's first word, is a server's error code: upper-case letters.
fn is_server_code(code: &str) -> bool {
    code.len() >= 2 && code.bytes().all(|b| b.is_ascii_uppercase())
}

/// Whether the server answered that it does not hold the script.
pub(crate) fn is_no_script(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

#[cfg(test)]
mod tests {
    use super::*;
    use comcount_core::StoreErrorKind;

    /// The error redis-rs makes of a server's error reply `line`.
    fn reply(line: &str) -> RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
            .and_then(redis::Value::extract_error)
            .expect_err("an error reply")
    }

    fn kind(line: &str) -> StoreErrorKind {
        classify(reply(line)).kind()
    }

    #[test]
    fn a_script_refusal_is_refused() {
        assert_eq!(
            kind("ERR comcount: ARGV[1] (sequence number) is \"0\", not a plain decimal integer"),
            StoreErrorKind::Refused
        );
        assert_eq!(
            kind("ERR increment or decrement would overflow script: abc, on @user_script:1."),
            StoreErrorKind::Refused
        );
        assert_eq!(
            kind("NOPERM this user has no permissions to run the 'evalsha' command"),
            StoreErrorKind::Refused
        );
    }

    #[test]
    fn an_error_line_without_a_servers_code_is_unanswered() {
        for line in [
            "upstream failure",
            "comcount: fence is not a fence",
            "E oops",
        ] {
            assert_eq!(kind(line), StoreErrorKind::Unanswered, "{line}");
        }
    }

    #[test]
    fn busy_and_noreplicas_are_unavailable() {
        assert_eq!(
            kind(
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
            ),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            kind("NOREPLICAS Not enough good replicas to write."),
            StoreErrorKind::Unavailable
        );
    }

    #[test]
    fn noscript_after_a_load_is_unavailable() {
        let error = reply("NOSCRIPT No matching script. Please use EVAL.");
        assert!(is_no_script(&error));
        assert_eq!(classify(error).kind(), StoreErrorKind::Unavailable);
    }

    #[test]
    fn passing_server_states_are_unavailable() {
        for line in [
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "MOVED 3999 127.0.0.1:6381",
            "ASK 3999 127.0.0.1:6381",
            "CLUSTERDOWN The cluster is down",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "READONLY You can't write against a read only replica.",
            "LOADING Redis is loading the dataset in memory",
        ] {
            assert_eq!(kind(line), StoreErrorKind::Unavailable, "{line}");
        }
    }

    #[test]
    fn an_error_code_redis_rs_does_not_know_is_refused() {
        assert_eq!(
            kind("SOMENEWCODE a server error of a later version"),
            StoreErrorKind::Refused
        );
    }

    #[test]
    fn only_noscript_is_no_script() {
        assert!(!is_no_script(&reply(
            "BUSY Redis is busy running a script."
        )));
        assert!(!is_no_script(&reply("ERR comcount: fence is not a fence")));
    }

    #[test]
    fn lost_connections_are_unanswered_and_bad_frames_malformed() {
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        ));
        assert_eq!(classify(io).kind(), StoreErrorKind::Unanswered);
        let parse = RedisError::from((ErrorKind::Parse, "bad frame"));
        assert_eq!(classify(parse).kind(), StoreErrorKind::Malformed);
    }
}
