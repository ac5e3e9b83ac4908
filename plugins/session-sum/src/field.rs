//! Reads one top-level numeric field out of a JSON object without building the
//! object (`weir_guest::json`): other fields are skipped unparsed.

use serde_json::{Number, Value};
use weir_guest::json::top_level_field;

/// The number in `field` of the JSON object `value`; an error says why there is none.
pub(crate) fn number(value: &[u8], field: &str) -> Result<Number, String> {
    let found = top_level_field(value, field).map_err(|e| format!("the value is not a JSON object ({e})"))?;
    match found {
        Some(Value::Number(number)) => Ok(number),
        Some(other) => Err(format!("`{field}` holds {other}, not a number")),
        None => Err(format!("the object has no `{field}`")),
    }
}
