//! Reads one top-level numeric field out of a JSON object without building the
//! object: other fields are skipped unparsed, so a record costs no allocation.

use std::fmt;

use serde::Deserializer;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::Number;

/// The number in `field` of the JSON object `value`; an error says why there is none.
pub(crate) fn number(value: &[u8], field: &str) -> Result<Number, String> {
    let mut json = serde_json::Deserializer::from_slice(value);
    let found = json
        .deserialize_map(FieldOf { field })
        .and_then(|found| json.end().map(|()| found))
        .map_err(|e| format!("the value is not a JSON object ({e})"))?;
    match found {
        Some(serde_json::Value::Number(number)) => Ok(number),
        Some(other) => Err(format!("`{field}` holds {other}, not a number")),
        None => Err(format!("the object has no `{field}`")),
    }
}

/// Visits an object, keeping only the value of `field` (the last one if repeated).
struct FieldOf<'f> {
    field: &'f str,
}

impl<'de> Visitor<'de> for FieldOf<'_> {
    type Value = Option<serde_json::Value>;

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
