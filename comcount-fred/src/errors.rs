//! What a fred error says about a flush: whether it can have been applied.

use comcount_core::StoreError;
use comcount_core::script::ServerReply;
use fred::error::{Error, ErrorKind};

/// Sorts a fred error into the kinds of failure a flush can have.
///
/// fred reports an error reply from the server with its text, which starts with the server's
/// upper-case error code, whether the server refused the `EVALSHA` or a command of the script
/// got it (the script's name and line come after). It chooses a kind from a few codes only
/// (`MOVED`, `ASK` and `CLUSTERDOWN` are cluster errors, most are unknown), so the sorting
/// goes by the code, as [`ServerReply`](comcount_core::script::ServerReply) says. A reply fred
/// could not read → malformed. Redirections run out ([`TOO_MANY_REDIRECTIONS`]) →
/// unavailable. Everything else (connection lost, timed out, canceled, given up after its
/// write attempts) leaves it unknown whether the flush ran. → unanswered.
///
/// The store loads the script on the first `NOSCRIPT` and sends the `EVALSHA` again; only the
/// `NOSCRIPT` of that second `EVALSHA` reaches this function.
pub(crate) fn classify(error: Error) -> StoreError {
    match error.kind() {
        ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled => StoreError::unanswered(error),
        ErrorKind::Protocol | ErrorKind::Parse | ErrorKind::NotFound => {
            StoreError::malformed(error)
        }
        ErrorKind::Routing if error.details() == TOO_MANY_REDIRECTIONS => {
            StoreError::unavailable(error)
        }
        _ => {
            let text = error.details().trim_start();
            let (code, detail) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
            match ServerReply::of(code, detail) {
                Some(reply) => reply.error(error),
                None => StoreError::unanswered(error),
            }
        }
    }
}

/// fred's error for a command that the cluster redirected (`MOVED`, `ASK`) at every attempt
/// until its redirections ran out: no attempt ran. It is what a flush gets while its slot is
/// migrating and the old owner holds none of its keys: fred 10 sends the command after an `ASK`
/// to the old owner again, which answers `ASK` again.
const TOO_MANY_REDIRECTIONS: &str = "Too many redirections.";

/// The first word of the error's text: a server's error code, if it is a server's reply.
fn code(error: &Error) -> &str {
    error.details().split_whitespace().next().unwrap_or("")
}

/// Whether the server answered that it does not hold the script.
pub(crate) fn is_no_script(error: &Error) -> bool {
    code(error) == "NOSCRIPT"
}

#[cfg(test)]
mod tests {
    use super::*;
    use comcount_core::StoreErrorKind;

    /// The error fred makes of a server's error reply `line`: its text, and a kind from the
    /// first word as fred's reply parser chooses it.
    fn reply(line: &str) -> Error {
        let kind = match line.split_whitespace().next() {
            Some("MOVED" | "ASK" | "CLUSTERDOWN") => ErrorKind::Cluster,
            Some("WRONGTYPE") => ErrorKind::InvalidArgument,
            Some("NOAUTH" | "WRONGPASS") => ErrorKind::Auth,
            _ => ErrorKind::Unknown,
        };
        Error::new(kind, line.to_owned())
    }

    fn kind(kind: ErrorKind, details: &str) -> StoreErrorKind {
        classify(Error::new(kind, details.to_owned())).kind()
    }

    #[test]
    fn a_script_refusal_is_refused_not_unanswered() {
        for line in [
            "ERR comcount: ARGV[1] (sequence number) is \"0\", not a plain decimal integer",
            "ERR comcount: fence {c}:f:0000000000000001 is not a fence",
            "ERR increment or decrement would overflow",
            "NOPERM this user has no permissions to run the 'evalsha' command",
        ] {
            assert_eq!(
                classify(reply(line)).kind(),
                StoreErrorKind::Refused,
                "{line}"
            );
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
            assert_eq!(
                classify(reply(line)).kind(),
                StoreErrorKind::Unavailable,
                "{line}"
            );
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
        for line in ["ERR comcount: fence {c}:f:1 is not a fence", "ERR"] {
            let other = classify(reply(line)).to_string();
            assert!(!other.contains("permission the flush needs"), "{other}");
        }
    }

    #[test]
    fn noscript_after_a_load_is_unavailable() {
        let error = reply("NOSCRIPT No matching script. Please use EVAL.");
        assert!(is_no_script(&error));
        assert_eq!(classify(error).kind(), StoreErrorKind::Unavailable);
    }

    #[test]
    fn passing_server_states_are_unavailable() {
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
            kind(
                ErrorKind::Unknown,
                "LOADING Redis is loading the dataset in memory"
            ),
            StoreErrorKind::Unavailable
        );
    }

    #[test]
    fn redirections_run_out_are_unavailable() {
        assert_eq!(
            kind(ErrorKind::Routing, "Too many redirections."),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            kind(ErrorKind::Routing, "Failed to route command."),
            StoreErrorKind::Unanswered
        );
    }

    #[test]
    fn a_transport_error_is_unanswered_whatever_its_text() {
        for (error, text) in [
            (ErrorKind::IO, "EOF"),
            (ErrorKind::Timeout, "TIMEOUT"),
            (ErrorKind::Canceled, "CANCELED"),
        ] {
            assert_eq!(kind(error, text), StoreErrorKind::Unanswered, "{text}");
        }
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
        // A lower-case first word is not a server's code.
        assert_eq!(
            kind(ErrorKind::Unknown, "comcount: fence is not a fence"),
            StoreErrorKind::Unanswered
        );
    }
}
