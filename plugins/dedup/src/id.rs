//! A record's id: one top-level field of its JSON value, read without building the
//! object (`weir_guest::json`). Shared with `plugins/dedup-btree`.

use serde_json::Value;
use weir_guest::json::top_level_field;

/// The id in `field` of the JSON object `value`: a string's text, any other value but
/// `null` in compact JSON (`42`, `true`, `[1,2]`); `None` when there is none.
pub(crate) fn of(value: &[u8], field: &str) -> Option<Vec<u8>> {
    match top_level_field(value, field).ok()?? {
        Value::String(text) => Some(text.into_bytes()),
        Value::Null => None,
        other => Some(other.to_string().into_bytes()),
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
