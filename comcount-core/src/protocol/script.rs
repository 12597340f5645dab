//! The flush protocol as a Redis Lua script, shared by every Redis store: its arguments, and
//! the reading of its reply.
//!
//! The script takes the keys of [`FlushRequest::keys`] (five, or more for a further reach) and
//! the arguments of [`arguments`], and answers with the outcome code, the server's interval
//! number, its phase in milliseconds, the interval the flush is counted in (nil where there is
//! none) and what the participant's fence held as the script read it, before any write
//! ([`FlushReply::fence`]: `"SEQ:N"`, 0 where it held nothing, nil for a wrong interval),
//! then, unless the outcome is a wrong interval, the previous interval's total of
//! each entry, in the request's order (nil where there is none). An applied counter's flush
//! adds its own interval's total right after it, an integer or, from 2^53 up, a string of
//! digits. A store turns the fields it got from its client into [`Field`]s and hands them to
//! [`decode`]; it never builds arguments or reads replies itself.
//!
//! The script checks its keys and arguments before anything else, against the ranges of
//! [`FlushRequest::check`]; what it refuses it answers with an error reply that starts with
//! `ERR comcount:`, having written nothing. An error the server gives the script's first write
//! (`READONLY`, `OOM`, `NOREPLICAS`, `MISCONF`, `NOPERM`, ...) comes back as the server said it.

use std::borrow::Cow;
use std::time::Duration;

use crate::error::StoreError;
use crate::protocol::keys::Layout;
use crate::protocol::reply::{Fence, FlushReply, Outcome};
use crate::protocol::request::FlushRequest;

pub use crate::protocol::script_loader::ScriptLoader;

/// The Lua source of the flush script.
pub const SOURCE: &str = include_str!("flush.lua");

/// The script's arguments for `request`, in order: sequence number, interval (ms), expected
/// interval, fence life (ms), layout (`c` for a counter, `f` for a family), then each entry's
/// key and amount (a counter's one key is empty).
pub fn arguments(request: &FlushRequest) -> Vec<Cow<'static, [u8]>> {
    let mut args = Vec::with_capacity(5 + 2 * request.entries.len());
    each_argument(request, |argument| args.push(Cow::Owned(argument.to_vec())));
    args
}

/// Hands each of the [`arguments`] to `argument`, in order, numbers written on the stack: for
/// a store that copies them into its command as they come.
///
/// ```
/// use comcount_core::{FlushRequest, KeySpace, ParticipantId, script};
///
/// let request = FlushRequest::new(
///     KeySpace::counter("app:", "requests"),
///     ParticipantId::from_u64(1),
///     1000,
/// )
/// .with_amount(5);
/// let mut arguments = Vec::new();
/// script::each_argument(&request, |argument| arguments.push(argument.to_vec()));
/// assert_eq!(arguments[0], b"1"); // the sequence number
/// assert_eq!(arguments[6], b"5"); // the amount
/// ```
pub fn each_argument(request: &FlushRequest, mut argument: impl FnMut(&[u8])) {
    let mut digits = [0; 20];
    for n in [
        request.seq,
        request.interval_ms,
        request.expect,
        request.fence_ttl_ms,
    ] {
        argument(decimal(n, &mut digits));
    }
    argument(match request.space.layout() {
        Layout::Counter => b"c",
        Layout::Family => b"f",
    });
    for entry in &request.entries {
        argument(entry.key.as_bytes());
        argument(decimal(entry.amount, &mut digits));
    }
}

/// `n` in decimal, written at the end of `digits`.
fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &digits[start..];
        }
    }
}

/// What a server's error reply to a flush says of it, by the reply's code (its first word) and
/// the text after it. Every check of the script comes before its first write, so an error
/// reply means nothing was written. Each Redis store sorts its client's errors with it, so that
/// both sort a reply alike:
///
/// ```
/// use comcount_core::StoreErrorKind;
/// use comcount_core::script::ServerReply;
///
/// let sorted = |line: &str| {
///     let (code, detail) = line.split_once(' ').unwrap_or((line, ""));
///     ServerReply::of(code, detail).map(|reply| reply.error(line.to_owned()).kind())
/// };
/// assert_eq!(sorted("OOM command not allowed"), Some(StoreErrorKind::Unavailable));
/// assert_eq!(sorted("ERR comcount: ARGV[1] ..."), Some(StoreErrorKind::Refused));
/// assert_eq!(sorted("NOPERM no permissions to run the 'evalsha' command"), Some(StoreErrorKind::Refused));
/// assert_eq!(sorted("not a server's line"), None);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ServerReply {
    /// "Not now": the same flush may be sent again ([`NOT_NOW`](Self::NOT_NOW)).
    NotNow,
    /// The store's Redis user lacks a permission the flush needs: `NOPERM` (for `EVALSHA`,
    /// `SCRIPT LOAD` or a key of the flush), or the `ERR` a command of the script gets when the
    /// user's ACL denies it, which Redis 7.2 and later word `ACL failure in script: ...`, and
    /// 7.0 and 7.1 `The user executing the script can't run this command or subcommand`.
    LacksPermission,
    /// Any other: the script's own `ERR comcount: ...`, an overflowing total, ...
    Refused,
}

impl ServerReply {
    /// Codes that say "not now" rather than "no": the script did not run, or was refused its
    /// first write, and the same flush may be sent again. A slot moving (`MOVED`, `ASK`,
    /// `TRYAGAIN`); a cluster or a node failing over or loading (`CLUSTERDOWN`, `MASTERDOWN`,
    /// `LOADING`); another script or function running (`BUSY`); a primary turned replica
    /// (`READONLY`), too few replicas for a write (`NOREPLICAS`), the server's memory full
    /// under a `noeviction` policy (`OOM`), or its last save or AOF write failed (`MISCONF`),
    /// for each of which Redis refuses a script's first write, which the script passes back as
    /// it came; the script missing again right after it was loaded (`NOSCRIPT`, after a
    /// failover or a `SCRIPT FLUSH`).
    pub const NOT_NOW: [&'static str; 12] = [
        "MOVED",
        "ASK",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "MASTERDOWN",
        "LOADING",
        "BUSY",
        "READONLY",
        "NOREPLICAS",
        "OOM",
        "MISCONF",
        "NOSCRIPT",
    ];

    /// Sorts the error reply whose code is `code` and whose text after it is `detail`; `None`
    /// when `code` is no server's error code (two upper-case letters or more), such as a line
    /// a proxy in the way wrote after the command went on: whether the flush ran is unknown.
    pub fn of(code: &str, detail: &str) -> Option<Self> {
        if code.len() < 2 || !code.bytes().all(|b| b.is_ascii_uppercase()) {
            return None;
        }
        let detail = detail.trim_start();
        Some(if Self::NOT_NOW.contains(&code) {
            Self::NotNow
        } else if code == "NOPERM"
            || (code == "ERR"
                && (detail.starts_with("ACL failure in script")
                    || detail.starts_with("The user executing the script can't")))
        {
            Self::LacksPermission
        } else {
            Self::Refused
        })
    }

    /// The store error for this reply, with `source` (the client's error) as its cause.
    pub fn error(self, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        match self {
            Self::NotNow => StoreError::unavailable(source),
            Self::LacksPermission => StoreError::lacks_permission(source),
            Self::Refused => StoreError::refused(source),
        }
    }
}

/// One field of the script's reply, as a client delivered it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Field<'a> {
    /// An integer reply.
    Int(i64),
    /// A bulk string reply.
    Bytes(&'a [u8]),
    /// A nil reply.
    Nil,
}

/// Reads the script's reply to `request`.
///
/// # Errors
///
/// A [`StoreError`] of kind [`Malformed`](crate::StoreErrorKind::Malformed) when the reply is not
/// the script's answer to `request`.
pub fn decode(request: &FlushRequest, fields: &[Field<'_>]) -> Result<FlushReply, StoreError> {
    let [code, interval, phase, counted_in, fence, totals @ ..] = fields else {
        return Err(malformed(format!(
            "expected at least 5 fields, got {}",
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
    // The fence decided the outcome: what it held says which.
    let fence = fence_held(fence)?;
    let (seq, held) = (request.seq, fence.seq());
    let consistent = match outcome {
        Outcome::Applied => fence == Fence::Empty || held.is_some_and(|f| f < seq),
        Outcome::Duplicate => {
            fence
                == Fence::Held {
                    seq,
                    interval: counted_in.unwrap_or_default(),
                }
        }
        Outcome::Stale => held.is_some_and(|f| f > seq),
        Outcome::Fenced => held.is_some_and(|f| f < seq),
        Outcome::WrongInterval => fence == Fence::Untold,
    };
    if !consistent {
        return Err(malformed(format!(
            "outcome {outcome:?} of sequence number {seq} with the fence {fence:?}"
        )));
    }
    let entries = request.entries.len();
    let (totals, landed) = match (outcome, request.space.layout()) {
        (Outcome::WrongInterval, _) => (totals, &[][..]),
        (Outcome::Applied, Layout::Counter) if totals.len() == entries + 1 => {
            totals.split_at(entries)
        }
        _ => (totals, &[][..]),
    };
    let expected = if outcome == Outcome::WrongInterval {
        0
    } else {
        entries
    };
    if totals.len() != expected {
        return Err(malformed(format!(
            "outcome {outcome:?} with {} totals for {entries} entries",
            totals.len()
        )));
    }
    Ok(FlushReply::new(
        outcome,
        interval,
        Duration::from_millis(int(phase)?),
        counted_in,
    )
    .with_fence(fence)
    .with_totals(totals.iter().map(optional).collect::<Result<_, _>>()?)
    .with_landed_totals(
        landed
            .iter()
            .map(|t| int(t).map(Some))
            .collect::<Result<_, _>>()?,
    ))
}

/// The fence as the script read it: `"SEQ:N"`, 0 when it held nothing, nil when not read.
fn fence_held(field: &Field<'_>) -> Result<Fence, StoreError> {
    let held = match field {
        Field::Nil => return Ok(Fence::Untold),
        Field::Int(0) => return Ok(Fence::Empty),
        Field::Bytes(held) => std::str::from_utf8(held).ok().and_then(|held| {
            let (seq, interval) = held.split_once(':')?;
            Some(Fence::Held {
                seq: seq.parse().ok()?,
                interval: interval.parse().ok()?,
            })
        }),
        Field::Int(_) => None,
    };
    held.ok_or_else(|| malformed(format!("{field:?} is not a fence")))
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
    use crate::ParticipantId;
    use crate::protocol::request::FlushRequest;
    const MAX: u64 = FlushRequest::MAX_AMOUNT;
    use crate::protocol::keys::KeySpace;
    use crate::protocol::request::Entry;

    fn counter() -> FlushRequest {
        FlushRequest::new(KeySpace::counter("", "c"), ParticipantId::from_u64(1), 4).with_amount(3)
    }

    fn family(keys: &[&str]) -> FlushRequest {
        FlushRequest::new(
            KeySpace::partition("", "f", 0),
            ParticipantId::from_u64(1),
            4,
        )
        .with_entries(keys.iter().map(|k| Entry::new(*k, 1)).collect())
    }

    #[test]
    fn numbers_are_written_as_to_string_writes_them() {
        let mut digits = [0; 20];
        for n in [0, 7, 10, 99, 1_000_000_007, u64::MAX - 1, u64::MAX] {
            assert_eq!(decimal(n, &mut digits), n.to_string().as_bytes());
        }
    }

    #[test]
    fn decodes_every_outcome_and_both_kinds_of_total() {
        let reply = decode(
            &counter(),
            &[
                Field::Int(0),
                Field::Int(42),
                Field::Int(17),
                Field::Int(42),
                Field::Int(0),
                Field::Bytes(b"9"),
            ],
        )
        .unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(reply.interval, 42);
        assert_eq!(reply.phase, Duration::from_millis(17));
        assert_eq!(reply.previous_total(), Some(9));
        assert_eq!(reply.counted_in, Some(42));
        assert_eq!(reply.fence, Fence::Empty);
        assert!(reply.landed_totals.is_empty(), "a reply of six fields");
        // An applied counter's seventh field, as a number or as digits from 2^53 up.
        for (landed, total) in [
            (Field::Int(12), 12),
            (Field::Bytes(b"9223372036854775807"), MAX),
        ] {
            let applied = [
                Field::Int(0),
                Field::Int(42),
                Field::Int(17),
                Field::Int(42),
                Field::Int(0),
            ];
            let reply = decode(&counter(), &[&applied[..], &[Field::Nil, landed]].concat());
            let reply = reply.unwrap();
            assert_eq!(reply.previous_total(), None);
            assert_eq!(reply.landed_totals, [Some(total)]);
        }
        for (code, outcome, fence, seq) in [
            (2, Outcome::Stale, &b"9:1"[..], 9),
            (3, Outcome::Fenced, b"3:1", 3),
        ] {
            let reply = decode(
                &counter().with_seq(5),
                &[
                    Field::Int(code),
                    Field::Int(1),
                    Field::Int(0),
                    Field::Nil,
                    Field::Bytes(fence),
                    Field::Nil,
                ],
            )
            .unwrap();
            assert_eq!(reply.outcome, outcome);
            assert_eq!(reply.previous_totals, vec![None]);
            assert_eq!(reply.counted_in, None);
            assert_eq!(reply.fence, Fence::Held { seq, interval: 1 });
        }
        let reply = decode(
            &counter(),
            &[
                Field::Int(4),
                Field::Int(1),
                Field::Int(0),
                Field::Nil,
                Field::Nil,
            ],
        )
        .unwrap();
        assert_eq!(reply.outcome, Outcome::WrongInterval);
        assert!(reply.previous_totals.is_empty());
        assert_eq!(reply.fence, Fence::Untold);
    }

    #[test]
    fn a_family_reply_carries_a_total_per_entry_in_order() {
        let applied = [
            Field::Int(0),
            Field::Int(5),
            Field::Int(1),
            Field::Int(5),
            Field::Int(0),
        ];
        let totals = [Field::Bytes(b"9"), Field::Nil, Field::Int(0)];
        let reply = decode(&family(&["a", "b", "c"]), &[&applied[..], &totals].concat());
        let reply = reply.unwrap();
        assert_eq!(reply.previous_totals, vec![Some(9), None, Some(0)]);
        assert_eq!(reply.previous_total(), Some(9));
        assert!(reply.landed_totals.is_empty());
        let none = [
            Field::Int(3),
            Field::Int(5),
            Field::Int(1),
            Field::Nil,
            Field::Bytes(b"3:5"),
            Field::Nil,
            Field::Nil,
        ];
        let reply = decode(&family(&["a", "b"]).with_seq(4), &none).unwrap();
        assert_eq!(reply.previous_totals, vec![None, None]);
        assert_eq!(
            reply.fence,
            Fence::Held {
                seq: 3,
                interval: 5
            }
        );
        // One total for each entry, no more and no fewer, each an integer.
        for bad in [
            &[Field::Int(3)][..],
            &[Field::Int(3), Field::Int(1), Field::Int(1)],
            &[Field::Bytes(b"x"), Field::Nil],
            &[Field::Int(-1), Field::Nil],
        ] {
            let fields = [&applied[..], bad].concat();
            assert!(decode(&family(&["a", "b"]), &fields).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_duplicate_reports_the_interval_its_earlier_copy_counted_in() {
        let reply = decode(
            &counter(),
            &[
                Field::Int(1),
                Field::Int(8),
                Field::Int(0),
                Field::Bytes(b"7"),
                Field::Bytes(b"1:7"),
                Field::Nil,
            ],
        )
        .unwrap();
        assert_eq!(reply.outcome, Outcome::Duplicate);
        assert_eq!(reply.interval, 8);
        assert_eq!(reply.counted_in, Some(7));
        assert_eq!(
            reply.fence,
            Fence::Held {
                seq: 1,
                interval: 7
            }
        );
    }

    #[test]
    fn the_fence_is_what_it_held_before_the_flush() {
        let request = counter().with_seq(5);
        let reply = |code: i64, counted_in: Field<'static>, fence: Field<'static>| {
            decode(
                &request,
                &[
                    Field::Int(code),
                    Field::Int(8),
                    Field::Int(0),
                    counted_in,
                    fence,
                    Field::Nil,
                ],
            )
        };
        let (eight, nil) = (Field::Int(8), Field::Nil);
        let held = |seq, interval| Fence::Held { seq, interval };
        for (code, counted_in, fence, told) in [
            // Applied: after an earlier flush, or on an empty fence.
            (0, eight, Field::Bytes(b"4:7"), held(4, 7)),
            (0, eight, Field::Int(0), Fence::Empty),
            (1, eight, Field::Bytes(b"5:8"), held(5, 8)),
            (2, nil, Field::Bytes(b"6:8"), held(6, 8)),
            (3, nil, Field::Bytes(b"4:8"), held(4, 8)),
        ] {
            let decoded = reply(code, counted_in, fence).unwrap();
            assert_eq!(decoded.fence, told, "{fence:?}");
        }
        // What no fence could have held for the outcome it decided.
        for (code, counted_in, fence) in [
            // Applied over its own number or a later one: the fence was read after the write.
            (0, eight, Field::Bytes(b"5:8")),
            (0, eight, Field::Bytes(b"6:8")),
            (0, eight, nil),
            // A duplicate of another number, of another interval, or of none.
            (1, eight, Field::Bytes(b"4:8")),
            (1, eight, Field::Bytes(b"5:7")),
            (1, eight, Field::Int(0)),
            // Stale below or at its own number, or on an empty fence.
            (2, nil, Field::Bytes(b"5:8")),
            (2, nil, Field::Bytes(b"4:8")),
            (2, nil, Field::Int(0)),
            // Fenced at or above its own number, or on an empty fence.
            (3, nil, Field::Bytes(b"5:8")),
            (3, nil, Field::Bytes(b"6:8")),
            (3, nil, Field::Int(0)),
            // Not a fence.
            (0, eight, Field::Bytes(b"x")),
            (0, eight, Field::Bytes(b"4")),
            (0, eight, Field::Int(4)),
            (0, eight, Field::Bytes(b"-1:8")),
        ] {
            assert!(
                reply(code, counted_in, fence).is_err(),
                "outcome {code} with the fence {fence:?}"
            );
        }
        // A wrong interval does not read the fence.
        let wrong = [
            Field::Int(4),
            Field::Int(8),
            Field::Int(0),
            Field::Nil,
            Field::Int(4),
        ];
        assert!(decode(&request, &wrong).is_err());
    }

    #[test]
    fn refuses_what_the_script_never_sends() {
        let nil = Field::Nil;
        let one = Field::Int(1);
        let refused: [&[Field<'_>]; 11] = [
            &[Field::Int(0)],
            // Without the fence's sequence number.
            &[Field::Int(4), one, Field::Int(0), nil],
            // Too few or too many totals for the request's one entry.
            &[Field::Int(0), one, Field::Int(0), one, nil],
            &[Field::Int(0), one, Field::Int(0), one, nil, nil, nil, nil],
            // A wrong interval with totals.
            &[Field::Int(4), one, Field::Int(0), nil, nil, nil],
            &[Field::Int(9), one, Field::Int(0), nil, nil, nil],
            &[
                Field::Int(0),
                Field::Int(-1),
                Field::Int(0),
                Field::Int(-1),
                nil,
                nil,
            ],
            &[
                Field::Int(0),
                one,
                Field::Int(0),
                one,
                nil,
                Field::Bytes(b"x"),
            ],
            // Applied elsewhere than in the server's interval, or nowhere.
            &[Field::Int(0), one, Field::Int(0), Field::Int(2), nil, nil],
            // A duplicate that does not say where, and a refusal that claims to count.
            &[Field::Int(1), one, Field::Int(0), nil, one, nil],
            &[Field::Int(3), one, Field::Int(0), one, Field::Int(0), nil],
        ];
        for fields in refused {
            assert!(decode(&counter(), fields).is_err(), "{fields:?}");
        }
    }

    #[test]
    fn arguments_follow_the_documented_order() {
        let request = counter().with_seq(2).with_expect(5).with_fence_ttl_ms(6);
        let args: Vec<_> = arguments(&request)
            .into_iter()
            .map(Cow::into_owned)
            .collect();
        assert_eq!(args, [&b"2"[..], b"4", b"5", b"6", b"c", b"", b"3"]);
        assert_eq!(
            request.keys(),
            ["{c}:3", "{c}:4", "{c}:5", "{c}:6", "{c}:f:0000000000000001"]
        );
        assert_eq!(request.window(), 4..=6);
        let batch = family(&["x", "y"]);
        let args: Vec<_> = arguments(&batch).into_iter().map(Cow::into_owned).collect();
        assert_eq!(
            args,
            [
                &b"1"[..],
                b"4",
                b"0",
                b"600000",
                b"f",
                b"x",
                b"1",
                b"y",
                b"1"
            ]
        );
        assert_eq!(batch.keys()[4], "{f@0}:f:0000000000000001");
    }

    #[test]
    fn keys_of_the_first_intervals_stop_at_zero() {
        let request = |expect| counter().with_expect(expect);
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
    fn a_further_reach_declares_two_more_keys_a_step_and_widens_the_window() {
        let request = |reach| counter().with_expect(10).with_reach(reach);
        let fence = "{c}:f:0000000000000001";
        assert_eq!(
            request(2).keys(),
            [
                "{c}:7", "{c}:8", "{c}:9", "{c}:10", "{c}:11", "{c}:12", fence
            ]
        );
        assert_eq!(request(2).window(), 8..=12);
        assert_eq!(request(3).keys().len(), 9);
        assert_eq!(request(3).window(), 7..=13);
        assert_eq!(counter().with_reach(3).keys()[..5], ["{c}:0"; 5]);
        assert!(request(FlushRequest::MAX_REACH).check().is_ok());
        for reach in [0, FlushRequest::MAX_REACH + 1] {
            assert!(request(reach).check().is_err(), "reach {reach}");
        }
        // Past the furthest, the keys of one step more, which the script refuses, whatever
        // the reach.
        assert_eq!(request(u64::MAX).keys().len(), 11);
        assert!(
            SOURCE.contains(&format!("local MAX_REACH = {}", FlushRequest::MAX_REACH)),
            "the script's furthest reach is FlushRequest::MAX_REACH"
        );
    }

    #[test]
    fn the_script_checks_the_ranges_the_rust_side_documents() {
        // Each check compares its argument with the limit of `FlushRequest::check`, and its
        // error names the argument's place in `arguments` and the limits.
        let checks = [
            format!("seq <= {}", FlushRequest::MAX_SEQ),
            format!(
                "out_of_range(1, 'sequence number', '1', '{}')",
                FlushRequest::MAX_SEQ
            ),
            format!("interval <= {}", FlushRequest::MAX_INTERVAL_MS),
            format!(
                "out_of_range(2, 'interval ms', '1', '{}')",
                FlushRequest::MAX_INTERVAL_MS
            ),
            format!("expect <= {}", FlushRequest::MAX_EXPECT),
            format!(
                "out_of_range(3, 'expected interval', '0', '{}')",
                FlushRequest::MAX_EXPECT
            ),
            format!("tonumber(ARGV[4]) <= {}", FlushRequest::MAX_FENCE_TTL_MS),
            format!(
                "out_of_range(4, 'fence life ms', '1', '{}')",
                FlushRequest::MAX_FENCE_TTL_MS
            ),
            "out_of_range(5 + 2 * j, 'amount', '0', MAX_TOTAL)".to_owned(),
            format!("local MAX_TOTAL = '{}'", FlushRequest::MAX_AMOUNT),
            format!("local MAX_ENTRIES = {}\n", FlushRequest::MAX_ENTRIES),
            format!("local MAX_KEY_LEN = {}\n", FlushRequest::MAX_KEY_LEN),
            "if layout == 'c' then".to_owned(),
            "local family = layout == 'f'".to_owned(),
        ];
        for text in checks {
            assert_eq!(
                SOURCE.matches(&text).count(),
                1,
                "the script does not check {text}"
            );
        }
        assert_eq!(FlushRequest::MAX_AMOUNT, i64::MAX as u64);
        assert_eq!(FlushRequest::MAX_INTERVAL_MS * 3, (1 << 53) - 2);
        // The script's own errors are ERR, but for an ACL's denial, which the stores sort by
        // its NOPERM.
        for line in SOURCE.lines().filter(|l| l.contains("error_reply(")) {
            assert!(
                line.contains("error_reply('ERR comcount: ")
                    || line.contains("error_reply('NOPERM comcount: "),
                "{line}"
            );
        }
    }

    #[test]
    fn check_refuses_malformed_batches() {
        assert!(counter().check().is_ok());
        assert!(family(&["a"]).check().is_ok());
        assert!(counter().with_entries(vec![]).check().is_err());
        assert!(
            counter()
                .with_entries(vec![Entry::new("k", 1)])
                .check()
                .is_err()
        );
        assert!(family(&[""]).check().is_err());
        assert!(family(&[&"k".repeat(257)]).check().is_err());
        assert!(family(&["a", "b", "a"]).check().is_ok());
        let many: Vec<String> = (0..=FlushRequest::MAX_ENTRIES)
            .map(|i| i.to_string())
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(family(&many).check().is_err());
        assert!(family(&many[1..]).check().is_ok());
        assert!(
            counter()
                .with_amount(FlushRequest::MAX_AMOUNT + 1)
                .check()
                .is_err()
        );
    }

    /// Every command the flush script calls is in the list the hint gives: a quoted upper-case
    /// word of the script is a command, or an argument of one named here.
    #[test]
    fn the_hint_names_every_command_the_script_calls() {
        const ARGUMENTS: [&str; 1] = ["PX"];
        let source = SOURCE;
        let named: Vec<&str> = crate::error::SCRIPT_COMMANDS
            .split(|c: char| !c.is_ascii_uppercase())
            .filter(|word| word.len() > 1)
            .collect();
        let mut seen = 0;
        for (at, _) in source.match_indices('\'') {
            let rest = &source[at + 1..];
            let len = rest.bytes().take_while(u8::is_ascii_uppercase).count();
            if len < 2 || !rest[len..].starts_with('\'') {
                continue;
            }
            let quoted = &rest[..len];
            seen += 1;
            assert!(
                named.contains(&quoted) || ARGUMENTS.contains(&quoted),
                "the flush script calls {quoted}, which SCRIPT_COMMANDS (and the README's ACL \
                 notes) must name"
            );
        }
        assert!(seen >= 5, "found only {seen} commands in the script");
    }
}
