//! The flush protocol as a Redis Lua script, shared by every Redis store, and the reading of
//! its reply.
//!
//! The script takes the keys of [`FlushRequest::keys`] and the arguments of [`arguments`], and
//! answers with four fields: the outcome code, the interval number, the phase in milliseconds,
//! and the previous interval's total (nil where there is none). A store turns the fields it got
//! from its client into [`Field`]s and hands them to [`decode`].

use std::time::Duration;

use crate::error::StoreError;
use crate::store::{FlushReply, FlushRequest, Outcome};

/// The Lua source of the flush script.
pub const SOURCE: &str = include_str!("flush.lua");

/// The script's arguments for `request`, in order: sequence number, amount, interval (ms),
/// expected interval, fence life (ms).
pub fn arguments(request: &FlushRequest) -> [String; 5] {
    [
        request.seq.to_string(),
        request.amount.to_string(),
        request.interval_ms.to_string(),
        request.expect.to_string(),
        request.fence_ttl_ms.to_string(),
    ]
}

/// One field of the script's reply, as a client delivered it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Field<'a> {
    /// An integer reply.
    Int(i64),
    /// A bulk string reply.
    Bytes(&'a [u8]),
    /// A nil reply.
    Nil,
}

/// Reads the script's reply.
///
/// # Errors
///
/// A [`StoreError`] of kind [`Malformed`](crate::StoreErrorKind::Malformed) when the reply is not
/// the script's.
pub fn decode(fields: &[Field<'_>]) -> Result<FlushReply, StoreError> {
    let [code, interval, phase, previous] = fields else {
        return Err(malformed(format!(
            "expected 4 fields, got {}",
            fields.len()
        )));
    };
    let outcome = match int(code)? {
        0 => Outcome::Applied,
        1 => Outcome::Duplicate,
        2 => Outcome::Stale,
        3 => Outcome::Fenced,
        4 => Outcome::WrongInterval,
        other => return Err(malformed(format!("unknown outcome code {other}"))),
    };
    let previous_total = match previous {
        Field::Nil => None,
        other => Some(int(other)?),
    };
    Ok(FlushReply {
        outcome,
        interval: int(interval)?,
        phase: Duration::from_millis(int(phase)?),
        previous_total,
        counted_in: None,
    })
}

fn int(field: &Field<'_>) -> Result<u64, StoreError> {
    let n = match field {
        Field::Int(n) => *n,
        Field::Bytes(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| {
                malformed(format!(
                    "{:?} is not an integer",
                    String::from_utf8_lossy(bytes)
                ))
            })?,
        Field::Nil => return Err(malformed("a field is nil".into())),
    };
    u64::try_from(n).map_err(|_| malformed(format!("{n} is negative")))
}

fn malformed(what: String) -> StoreError {
    StoreError::malformed(format!("flush script reply: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_outcome_and_both_kinds_of_total() {
        let reply = decode(&[
            Field::Int(0),
            Field::Int(42),
            Field::Int(17),
            Field::Bytes(b"9"),
        ])
        .unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(reply.interval, 42);
        assert_eq!(reply.phase, Duration::from_millis(17));
        assert_eq!(reply.previous_total, Some(9));
        for (code, outcome) in [
            (1, Outcome::Duplicate),
            (2, Outcome::Stale),
            (3, Outcome::Fenced),
            (4, Outcome::WrongInterval),
        ] {
            let reply =
                decode(&[Field::Int(code), Field::Int(1), Field::Int(0), Field::Nil]).unwrap();
            assert_eq!(reply.outcome, outcome);
            assert_eq!(reply.previous_total, None);
        }
    }

    #[test]
    fn refuses_what_the_script_never_sends() {
        assert!(decode(&[Field::Int(0)]).is_err());
        assert!(decode(&[Field::Int(9), Field::Int(1), Field::Int(0), Field::Nil]).is_err());
        assert!(decode(&[Field::Int(0), Field::Int(-1), Field::Int(0), Field::Nil]).is_err());
        assert!(
            decode(&[
                Field::Int(0),
                Field::Int(1),
                Field::Int(0),
                Field::Bytes(b"x")
            ])
            .is_err()
        );
    }

    #[test]
    fn arguments_follow_the_documented_order() {
        let request = FlushRequest {
            key_base: "{c}".into(),
            participant: crate::ParticipantId::from_u64(1),
            seq: 2,
            amount: 3,
            interval_ms: 4,
            expect: 5,
            fence_ttl_ms: 6,
        };
        assert_eq!(arguments(&request), ["2", "3", "4", "5", "6"]);
        assert_eq!(request.keys(), ["{c}:5", "{c}:4", "{c}:f:0000000000000001"]);
    }
}
