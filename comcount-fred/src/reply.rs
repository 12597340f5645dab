//! The flush script's reply as fred delivers it, mapped into the fields
//! [`script::decode`](comcount_core::script::decode) reads.

use comcount_core::StoreError;
use comcount_core::script::Field;
use fred::types::Value;

/// The fields of the script's reply, an array of integers, strings and nils.
pub(crate) fn fields(value: &Value) -> Result<Vec<Field<'_>>, StoreError> {
    let Value::Array(items) = value else {
        return Err(StoreError::malformed(format!(
            "flush script reply: expected an array, got {value:?}"
        )));
    };
    items.iter().map(field).collect()
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
    use comcount_core::StoreErrorKind;

    #[test]
    fn maps_integers_strings_and_nil() {
        let value = Value::Array(vec![
            Value::Integer(1),
            Value::String("40".into()),
            Value::Bytes(b"7".to_vec().into()),
            Value::Null,
            Value::Boolean(false),
        ]);
        assert_eq!(
            fields(&value).unwrap(),
            [
                Field::Int(1),
                Field::Bytes(b"40"),
                Field::Bytes(b"7"),
                Field::Nil,
                Field::Nil,
            ]
        );
        assert_eq!(fields(&Value::Array(vec![])).unwrap(), []);
    }

    #[test]
    fn refuses_anything_else() {
        for value in [
            Value::Queued,
            Value::Integer(0),
            Value::Array(vec![Value::Integer(0), Value::Double(1.0)]),
            Value::Array(vec![Value::Boolean(true)]),
            Value::Array(vec![Value::Array(vec![])]),
        ] {
            let error = fields(&value).unwrap_err();
            assert_eq!(error.kind(), StoreErrorKind::Malformed, "{value:?}");
        }
    }
}
