//! Reading the flush script's reply as fred delivers it.

use comcount_core::script::{self, Field};
use comcount_core::{FlushReply, StoreError};
use fred::types::Value;

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
        Value::Integer(n) => Ok(Field::Int(*n)),
        Value::String(text) => Ok(Field::Bytes(text.as_bytes())),
        Value::Bytes(bytes) => Ok(Field::Bytes(bytes)),
        // Lua's false reaches a RESP2 client as nil, and a RESP3 one may see a boolean.
        Value::Null | Value::Boolean(false) => Ok(Field::Nil),
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
            Value::Integer(1),
            Value::Integer(12),
            Value::Integer(3),
            Value::String("40".into()),
            Value::String("11".into()),
        ]))
        .unwrap();
        assert_eq!(reply.outcome, Outcome::Duplicate);
        assert_eq!(reply.previous_total, Some(40));
        assert_eq!(reply.counted_in, Some(11));
        let reply = decode(&Value::Array(vec![
            Value::Integer(4),
            Value::Integer(12),
            Value::Integer(3),
            Value::Null,
            Value::Boolean(false),
        ]))
        .unwrap();
        assert_eq!(reply.previous_total, None);
        assert_eq!(reply.counted_in, None);
    }

    #[test]
    fn refuses_anything_else() {
        assert!(decode(&Value::Queued).is_err());
        assert!(decode(&Value::Array(vec![Value::Double(1.0); 5])).is_err());
        // The old script's four fields.
        assert!(
            decode(&Value::Array(vec![
                Value::Integer(4),
                Value::Integer(12),
                Value::Integer(3),
                Value::Null,
            ]))
            .is_err()
        );
    }
}
