//! What a redis-rs error says about a flush: whether it can have been applied.

use comcount_core::StoreError;
use comcount_core::script::ServerReply;
use redis::{ErrorKind, RedisError};

/// Sorts a redis-rs error into the kinds of failure a flush can have.
///
/// - An error reply from the server is sorted by its code, as
///   [`ServerReply`](comcount_core::script::ServerReply) says: redis-rs gives the codes it
///   knows as [`ErrorKind::Server`] and the others (`OOM`, `MISCONF`, `BUSY`, `NOREPLICAS`,
///   ...) as [`ErrorKind::Extension`], and an error a command of the script got reaches it
///   either way, with the code first.
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
        ErrorKind::Server(_) | ErrorKind::Extension => {
            let reply = error
                .code()
                .and_then(|code| ServerReply::of(code, error.detail().unwrap_or("")));
            match reply {
                Some(reply) => reply.error(error),
                None => StoreError::unanswered(error),
            }
        }
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => StoreError::malformed(error),
        _ => StoreError::unanswered(error),
    }
}

/// Whether the server answered that it does not hold the script.
pub(crate) fn is_no_script(error: &RedisError) -> bool {
    error.code() == Some("NOSCRIPT")
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
    fn busy_and_a_refused_first_write_are_unavailable() {
        for line in [
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
            "NOREPLICAS Not enough good replicas to write.",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to \
             persist to disk. Commands that may modify the data set are disabled",
            "MISCONF Errors writing to the AOF file: No space left on device",
            "READONLY You can't write against a read only replica.",
            // As a family's redis.call passes them on: the code first, the script after.
            "OOM command not allowed when used memory > 'maxmemory'. script: 5d1e, on \
             @user_script:440.",
            "READONLY You can't write against a read only replica. script: 5d1e, on \
             @user_script:440.",
        ] {
            assert_eq!(kind(line), StoreErrorKind::Unavailable, "{line}");
        }
    }

    #[test]
    fn a_missing_permission_is_refused_saying_what_to_grant() {
        for (line, names) in [
            (
                "NOPERM User app has no permissions to run the 'evalsha' command",
                "'evalsha'",
            ),
            (
                "NOPERM this user has no permissions to access one of the keys used as arguments",
                "keys",
            ),
            (
                "ERR ACL failure in script: User app has no permissions to run the 'incrby' \
                 command script: 5d1e, on @user_script:445.",
                "'incrby'",
            ),
            (
                "ERR The user executing the script can't run this command or subcommand script: \
                 5d1e, on @user_script:440.",
                "INCRBY",
            ),
        ] {
            let error = classify(reply(line));
            assert_eq!(error.kind(), StoreErrorKind::Refused, "{line}");
            let text = error.to_string();
            assert!(
                text.contains("lacks a permission the flush needs"),
                "{text}"
            );
            assert!(text.contains(names), "{names} missing from {text}");
        }
        let other = classify(reply("ERR comcount: fence {c}:f:1 is not a fence")).to_string();
        assert!(!other.contains("permission the flush needs"), "{other}");
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
