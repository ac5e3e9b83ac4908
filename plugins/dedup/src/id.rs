//! A record's id: one top-level field of its JSON value, read without building the
//! object (other fields are skipped unparsed). Shared with `plugins/dedup-btree`.

use std::fmt;

use serde::Deserializer;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// The id in `field` of the JSON object `value`: a string's text, any other value but
/// `null` in compact JSON (`42`, `true`, `[1,2]`); `None` when there is none.
pub(crate) fn of(value: &[u8], field: &str) -> Option<Vec<u8>> {
    let mut json = serde_json::Deserializer::from_slice(value);
    let found = json.deserialize_map(FieldOf { field }).ok()?;
    json.end().ok()?;
    match found? {
        Value::String(text) => Some(text.into_bytes()),
        Value::Null => None,
        other => Some(other.to_string().into_bytes()),
    }
}

/// Visits an object, keeping only the value of `field` (the last one if repeated).
struct FieldOf<'f> {
    field: &'f str,
}

impl<'de> Visitor<'de> for FieldOf<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut found = None;
        while let Some(is_field) = map.next_key_seed(IsKey(self.field))? {
            if is_field {
                found = Some(map.next_value()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Compares an object key with the wanted name without allocating it.
struct IsKey<'f>(&'f str);

impl<'de> DeserializeSeed<'de> for IsKey<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for IsKey<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_strings_as_text_and_other_values_as_json() {
        assert_eq!(
            of(br#"{"id":"a-1","x":{"id":2}}"#, "id"),
            Some(b"a-1".to_vec())
        );
        assert_eq!(of(br#"{"n":1,"id":42}"#, "id"), Some(b"42".to_vec()));
        assert_eq!(of(br#"{"id":[1, 2]}"#, "id"), Some(b"[1,2]".to_vec()));
        for none in [
            &br#"{"id":null}"#[..],
            br#"{"other":1}"#,
            b"not json",
            b"[1]",
            br#"{"id":1} x"#,
        ] {
            assert_eq!(of(none, "id"), None, "{}", String::from_utf8_lossy(none));
        }
    }
}
