//! The flush protocol as a Redis Lua script, shared by every Redis store, and the reading of
//! its reply.
//!
//! The script takes the five keys of [`FlushRequest::keys`] and the five arguments of
//! [`arguments`], and answers with five fields: the outcome code, the server's interval number,
//! its phase in milliseconds, the previous interval's total, and the interval the flush is counted
//! in (each of the last two nil where there is none). A store turns the fields it got from its
//! client into [`Field`]s and hands them to [`decode`].
//!
//! The script checks its keys and arguments before anything else, against the ranges of
//! [`FlushRequest::check`]; what it refuses it answers with an error reply that starts with
//! `ERR comcount:`, having written nothing.

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
    let [code, interval, phase, previous, counted_in] = fields else {
        return Err(malformed(format!(
            "expected 5 fields, got {}",
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
    let interval = int(interval)?;
    let counted_in = optional(counted_in)?;
    let consistent = match outcome {
        Outcome::Applied => counted_in == Some(interval),
        Outcome::Duplicate => counted_in.is_some(),
        _ => counted_in.is_none(),
    };
    if !consistent {
        return Err(malformed(format!(
            "outcome {outcome:?} in interval {interval} with counted_in {counted_in:?}"
        )));
    }
    Ok(FlushReply {
        outcome,
        interval,
        phase: Duration::from_millis(int(phase)?),
        previous_total: optional(previous)?,
        counted_in,
    })
}

fn optional(field: &Field<'_>) -> Result<Option<u64>, StoreError> {
    match field {
        Field::Nil => Ok(None),
        other => int(other).map(Some),
    }
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
            Field::Int(42),
        ])
        .unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(reply.interval, 42);
        assert_eq!(reply.phase, Duration::from_millis(17));
        assert_eq!(reply.previous_total, Some(9));
        assert_eq!(reply.counted_in, Some(42));
        for (code, outcome) in [
            (2, Outcome::Stale),
            (3, Outcome::Fenced),
            (4, Outcome::WrongInterval),
        ] {
            let reply = decode(&[
                Field::Int(code),
                Field::Int(1),
                Field::Int(0),
                Field::Nil,
                Field::Nil,
            ])
            .unwrap();
            assert_eq!(reply.outcome, outcome);
            assert_eq!(reply.previous_total, None);
            assert_eq!(reply.counted_in, None);
        }
    }

    #[test]
    fn a_duplicate_reports_the_interval_its_earlier_copy_counted_in() {
        let reply = decode(&[
            Field::Int(1),
            Field::Int(8),
            Field::Int(0),
            Field::Nil,
            Field::Bytes(b"7"),
        ])
        .unwrap();
        assert_eq!(reply.outcome, Outcome::Duplicate);
        assert_eq!(reply.interval, 8);
        assert_eq!(reply.counted_in, Some(7));
    }

    #[test]
    fn refuses_what_the_script_never_sends() {
        let nil = Field::Nil;
        let refused: [&[Field<'_>]; 9] = [
            &[Field::Int(0)],
            // The four fields of the old script.
            &[Field::Int(4), Field::Int(1), Field::Int(0), nil],
            &[Field::Int(9), Field::Int(1), Field::Int(0), nil, nil],
            &[
                Field::Int(0),
                Field::Int(-1),
                Field::Int(0),
                nil,
                Field::Int(-1),
            ],
            &[
                Field::Int(0),
                Field::Int(1),
                Field::Int(0),
                Field::Bytes(b"x"),
                Field::Int(1),
            ],
            // Applied elsewhere than in the server's interval, or nowhere.
            &[
                Field::Int(0),
                Field::Int(1),
                Field::Int(0),
                nil,
                Field::Int(2),
            ],
            &[Field::Int(0), Field::Int(1), Field::Int(0), nil, nil],
            // A duplicate that does not say where, and a refusal that claims to count.
            &[Field::Int(1), Field::Int(1), Field::Int(0), nil, nil],
            &[
                Field::Int(3),
                Field::Int(1),
                Field::Int(0),
                nil,
                Field::Int(1),
            ],
        ];
        for fields in refused {
            assert!(decode(fields).is_err(), "{fields:?}");
        }
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
        assert_eq!(
            request.keys(),
            ["{c}:3", "{c}:4", "{c}:5", "{c}:6", "{c}:f:0000000000000001"]
        );
        assert_eq!(request.window(), 4..=6);
    }

    #[test]
    fn keys_of_the_first_intervals_stop_at_zero() {
        let request = |expect| FlushRequest {
            key_base: "{c}".into(),
            participant: crate::ParticipantId::from_u64(1),
            seq: 1,
            amount: 1,
            interval_ms: 1,
            expect,
            fence_ttl_ms: 1,
        };
        let fence = "{c}:f:0000000000000001";
        assert_eq!(
            request(0).keys(),
            ["{c}:0", "{c}:0", "{c}:0", "{c}:1", fence]
        );
        assert_eq!(
            request(1).keys(),
            ["{c}:0", "{c}:0", "{c}:1", "{c}:2", fence]
        );
        assert_eq!(request(0).window(), 0..=1);
    }

    #[test]
    fn the_script_checks_the_ranges_the_rust_side_documents() {
        for (limit, text) in [
            (FlushRequest::MAX_SEQ, "'9007199254740991'"),
            (FlushRequest::MAX_AMOUNT, "'9223372036854775807'"),
            (FlushRequest::MAX_INTERVAL_MS, "'3002399751580330'"),
            (FlushRequest::MAX_EXPECT, "'9007199254740991'"),
            (FlushRequest::MAX_FENCE_TTL_MS, "'9007199254740991'"),
        ] {
            assert_eq!(format!("'{limit}'"), text);
            assert!(SOURCE.contains(text), "the script does not check {text}");
        }
        assert_eq!(FlushRequest::MAX_INTERVAL_MS * 3, (1 << 53) - 2);
        for line in SOURCE.lines().filter(|l| l.contains("error_reply(")) {
            assert!(line.contains("error_reply('ERR comcount: "), "{line}");
        }
    }
}
