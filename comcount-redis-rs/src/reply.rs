//! Reading the flush script's reply as redis-rs delivers it.

use comcount_core::script::{self, Field};
use comcount_core::{FlushReply, StoreError};
use redis::Value;

/// Turns the script's five-field array into a [`FlushReply`].
pub(crate) fn decode(value: &Value) -> Result<FlushReply, StoreError> {
    let Value::Array(items) = value else {
        return Err(StoreError::malformed(format!(
            "flush script reply: expected an array, got {value:?}"
        )));
    };
    let fields = items.iter().map(field).collect::<Result<Vec<_>, _>>()?;
    script::decode(&fields)
}

fn field(value: &Value) -> Result<Field<'_>, StoreError> {
    match value {
        Value::Int(n) => Ok(Field::Int(*n)),
        Value::BulkString(bytes) => Ok(Field::Bytes(bytes)),
        Value::SimpleString(text) => Ok(Field::Bytes(text.as_bytes())),
        // Lua's false reaches a RESP2 client as nil, and a RESP3 one may see a boolean.
        Value::Nil | Value::Boolean(false) => Ok(Field::Nil),
        other => Err(StoreError::malformed(format!(
            "flush script reply: unexpected field {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use comcount_core::Outcome;

    #[test]
    fn reads_integers_strings_and_nil() {
        let reply = decode(&Value::Array(vec![
            Value::Int(0),
            Value::Int(12),
            Value::Int(3),
            Value::BulkString(b"40".to_vec()),
            Value::Int(12),
        ]))
        .unwrap();
        assert_eq!(reply.outcome, Outcome::Applied);
        assert_eq!(reply.interval, 12);
        assert_eq!(reply.previous_total, Some(40));
        assert_eq!(reply.counted_in, Some(12));
        let reply = decode(&Value::Array(vec![
            Value::Int(4),
            Value::Int(12),
            Value::Int(3),
            Value::Nil,
            Value::Boolean(false),
        ]))
        .unwrap();
        assert_eq!(reply.previous_total, None);
        assert_eq!(reply.counted_in, None);
    }

    #[test]
    fn a_duplicate_says_where_it_was_counted() {
        let reply = decode(&Value::Array(vec![
            Value::Int(1),
            Value::Int(12),
            Value::Int(3),
            Value::Nil,
            Value::Int(11),
        ]))
        .unwrap();
        assert_eq!(reply.outcome, Outcome::Duplicate);
        assert_eq!(reply.counted_in, Some(11));
    }

    #[test]
    fn refuses_anything_else() {
        assert!(decode(&Value::Okay).is_err());
        assert!(decode(&Value::Array(vec![Value::Double(1.0); 5])).is_err());
        // The old script's four fields.
        assert!(
            decode(&Value::Array(vec![
                Value::Int(4),
                Value::Int(12),
                Value::Int(3),
                Value::Nil,
            ]))
            .is_err()
        );
    }
}
