//! One top-level field of a record's JSON value, read without building the object:
//! the other fields are skipped unparsed, so a record costs no allocation beyond the
//! field's own value. For operators that key their logic on one field of JSON input.

use std::fmt;

use serde::Deserializer;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// The value of the top-level `field` of the JSON object `value` (the last one if the
/// object repeats it), `None` when the object has none; an error when `value` is not
/// one whole JSON object.
///
/// ```
/// use weir_guest::json::top_level_field;
///
/// let amount = top_level_field(br#"{"user":"u1","amount":3,"tags":[1,2]}"#, "amount").unwrap();
/// assert_eq!(amount, Some(serde_json::json!(3)));
/// assert!(top_level_field(b"[1]", "amount").is_err());
/// ```
pub fn top_level_field(value: &[u8], field: &str) -> Result<Option<Value>, serde_json::Error> {
    let mut json = serde_json::Deserializer::from_slice(value);
    let found = json.deserialize_map(FieldOf { field })?;
    json.end()?;
    Ok(found)
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
