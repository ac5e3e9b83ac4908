//! A record's JSON object read without building it: one top-level field
//! ([`top_level_field`]; the others are skipped unparsed), or every top-level member as
//! raw bytes ([`canonical_members`], for objects already written the way serde_json
//! writes them), so an operator can key on a field or rewrite an object without
//! allocating a map per record.

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

/// The deepest nesting [`canonical_members`] takes (the object itself is level 1);
/// serde_json's own limit is 127, so whatever passes also parses.
pub const MAX_DEPTH: usize = 32;

/// The most top-level members [`canonical_members`] takes: the bound on its work and on
/// [`sort_members`]'s.
pub const MAX_MEMBERS: usize = 256;

/// Where one top-level member `"key":value` of a JSON object lies in the object's
/// text, as byte offsets into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// The key's opening quote.
    start: usize,
    /// The colon after the key.
    colon: usize,
    /// Just past the value.
    end: usize,
}

impl Member {
    /// The key, without its quotes: also its text, as it holds no escape.
    pub fn key<'a>(&self, object: &'a [u8]) -> &'a [u8] {
        &object[self.start + 1..self.colon - 1]
    }

    /// The value's JSON text.
    pub fn value<'a>(&self, object: &'a [u8]) -> &'a [u8] {
        &object[self.colon + 1..self.end]
    }

    /// The whole member, `"key":value`.
    pub fn raw<'a>(&self, object: &'a [u8]) -> &'a [u8] {
        &object[self.start..self.end]
    }
}

/// Scans the JSON object `object` for its top-level members, in text order, into
/// `members` (cleared first). True when the object is in the form serde_json writes, so
/// its bytes can stand for what serde_json would parse and write again:
///
/// - `object` is one JSON object that `serde_json::from_slice` parses into a
///   `Map<String, Value>`, with whitespace at most before and after it;
/// - no key holds an escape, so a key's bytes are its text;
/// - each value's bytes are exactly what `serde_json::to_vec` writes for the value
///   parsed from them: no whitespace; nested objects with their keys in increasing order
///   (none repeated, none escaped); integers within `i64` or `u64` without a leading
///   zero, and not `-0`; no fraction or exponent (serde_json would rewrite `1.50` as
///   `1.5`); strings whose escapes are those serde_json writes (`\"`, `\\`, `\n`, `\r`,
///   `\t`, `\b`, `\f`, and `\u00xx` in lowercase for the other control characters);
/// - at most [`MAX_MEMBERS`] members and [`MAX_DEPTH`] levels.
///
/// The top-level members may come in any order and repeat a key; [`sort_members`] puts
/// them in the order of serde_json's `Map`. False says only that the object is not in
/// that form (it may still be valid JSON); `members` then holds nothing of use.
///
/// ```
/// use weir_guest::json::{canonical_members, sort_members};
///
/// let click = br#"{"user":"u1","ts":17,"tags":["a","b"],"user":"u2"}"#;
/// let mut members = Vec::new();
/// assert!(canonical_members(click, &mut members));
/// sort_members(click, &mut members);
/// let keys: Vec<_> = members.iter().map(|m| m.key(click)).collect();
/// assert_eq!(keys, [&b"tags"[..], b"ts", b"user"]);
/// assert_eq!(members[2].value(click), br#""u2""#); // the last of a repeated key
///
/// // What serde_json would write otherwise: 1.5, "é", {"a":1,"b":2}.
/// for other in [&br#"{"n":1.50}"#[..], br#"{"s":"\u00e9"}"#, br#"{"o":{"b":2,"a":1}}"#] {
///     assert!(!canonical_members(other, &mut members));
/// }
/// ```
pub fn canonical_members(object: &[u8], members: &mut Vec<Member>) -> bool {
    members.clear();
    let mut scan = Scan {
        text: object,
        at: 0,
    };
    scan.whitespace();
    scan.top_level(members).is_some() && {
        scan.whitespace();
        scan.at == object.len()
    }
}

/// Sorts the members [`canonical_members`] found in `object` by key and keeps the last
/// of each repeated key: the members of the `Map` serde_json parses, in its order.
pub fn sort_members(object: &[u8], members: &mut Vec<Member>) {
    debug_assert!(members.len() <= MAX_MEMBERS);
    if members.is_sorted_by(|a, b| a.key(object) < b.key(object)) {
        return;
    }
    // Stable: the members of one key stay in text order, so the last one is theirs.
    members.sort_by(|a, b| a.key(object).cmp(b.key(object)));
    members.dedup_by(|later, earlier| {
        let same = later.key(object) == earlier.key(object);
        if same {
            *earlier = *later;
        }
        same
    });
}

/// A cursor over JSON text; each method checks one construct in canonical form and
/// steps past it, `None` when the text is anything else.
struct Scan<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let next = self.peek() == Some(byte);
        self.at += usize::from(next);
        next
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.at += 1;
        }
    }

    /// The top-level object: its members in any order, each pushed to `members`.
    fn top_level(&mut self, members: &mut Vec<Member>) -> Option<()> {
        self.eat(b'{').then_some(())?;
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            if members.len() == MAX_MEMBERS {
                return None;
            }
            let start = self.at;
            self.key()?;
            let colon = self.at;
            self.eat(b':').then_some(())?;
            self.value(1)?;
            members.push(Member {
                start,
                colon,
                end: self.at,
            });
            if !self.eat(b',') {
                return self.eat(b'}').then_some(());
            }
        }
    }

    /// A value inside an object or array at nesting level `depth`.
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// A nested object: its keys in strictly increasing order, as a `Map` writes them.
    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        if self.eat(b'}') {
            return Some(());
        }
        let mut previous: Option<&[u8]> = None;
        loop {
            let key = self.key()?;
            if previous.is_some_and(|previous| previous >= key) {
                return None;
            }
            previous = Some(key);
            self.eat(b':').then_some(())?;
            self.value(depth)?;
            if !self.eat(b',') {
                return self.eat(b'}').then_some(());
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        if self.eat(b']') {
            return Some(());
        }
        loop {
            self.value(depth)?;
            if !self.eat(b',') {
                return self.eat(b']').then_some(());
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let found = self.text.get(self.at..self.at + word.len())? == word;
        self.at += word.len();
        found.then_some(())
    }

    /// An integer serde_json keeps as `i64` or `u64` and writes back digit for digit.
    fn number(&mut self) -> Option<()> {
        let negative = self.eat(b'-');
        let digits = self.at;
        let mut magnitude: u64 = 0;
        while let Some(digit @ b'0'..=b'9') = self.peek() {
            magnitude = magnitude
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
            self.at += 1;
        }
        let (first, count) = (self.text.get(digits).copied(), self.at - digits);
        let plain = count > 0 && (count == 1 || first != Some(b'0'));
        let in_range = !negative || (1..=1 << 63).contains(&magnitude);
        let integer = !matches!(self.peek(), Some(b'.' | b'e' | b'E'));
        (plain && in_range && integer).then_some(())
    }

    /// A key: a string without escapes, returned without its quotes.
    fn key(&mut self) -> Option<&'a [u8]> {
        let text = self.text;
        let start = self.at;
        (self.peek()? == b'"' && !self.string()?).then(|| &text[start + 1..self.at - 1])
    }

    /// A string, checked to be valid UTF-8 with only the escapes serde_json writes:
    /// `Some(true)` when it holds one.
    fn string(&mut self) -> Option<bool> {
        self.at += 1;
        let start = self.at;
        let (mut escaped, mut ascii) = (false, true);
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' => {
                    self.escape()?;
                    escaped = true;
                    continue;
                }
                0x00..=0x1f => return None,
                0x80.. => ascii = false,
                _ => {}
            }
            self.at += 1;
        }
        if !ascii && std::str::from_utf8(&self.text[start..self.at]).is_err() {
            return None;
        }
        self.at += 1;
        Some(escaped)
    }

    /// An escape exactly as serde_json writes it (`Scan::string`).
    fn escape(&mut self) -> Option<()> {
        match *self.text.get(self.at + 1)? {
            b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
            b'u' => {
                let hex = self.text.get(self.at + 2..self.at + 6)?;
                let low = |digit: u8| match digit {
                    b'0'..=b'9' => Some(digit - b'0'),
                    b'a'..=b'f' => Some(digit - b'a' + 10),
                    _ => None,
                };
                let code = (low(hex[2])? << 4) | low(hex[3])?;
                let short = matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d);
                if hex[..2] != *b"00" || code >= 0x20 || short {
                    return None;
                }
                self.at += 6;
            }
            _ => return None,
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(object: &str) -> bool {
        canonical_members(object.as_bytes(), &mut Vec::new())
    }

    #[test]
    fn takes_what_serde_json_writes_back_unchanged() {
        let taken = [
            "{}",
            " {} \n",
            r#"{"a":1,"b":-2,"c":18446744073709551615,"d":-9223372036854775808}"#,
            r#"{"s":"é😀 \"q\" \\ \n\r\t\b\f\u0001\u001f"}"#,
            "{\"del\":\"\x7f\"}",
            r#"{"o":{"a":[1,{"b":null}],"b":{}},"l":[true,false,[]]}"#,
            r#"{"z":0,"a":1,"z":2}"#,
        ];
        for object in taken {
            assert!(canonical(object), "{object}");
        }
    }

    #[test]
    fn refuses_what_serde_json_would_rewrite_or_refuse() {
        let refused = [
            r#"{"a" :1}"#,
            r#"{"a":[1, 2]}"#,
            r#"{"a":1.0}"#,
            r#"{"a":1e2}"#,
            r#"{"a":-0}"#,
            r#"{"a":01}"#,
            r#"{"a":18446744073709551616}"#,
            r#"{"a":-9223372036854775809}"#,
            r#"{"a":"\/"}"#,
            r#"{"a":"\u00e9"}"#,
            r#"{"a":"\u000a"}"#,
            r#"{"a":"\u001F"}"#,
            r#"{"a":"\u007f"}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a\"b":1}"#,
            r#"{"o":{"b":1,"a":2}}"#,
            r#"{"o":{"a":1,"a":2}}"#,
            "{\"a\":\"\x01\"}",
            r#"{"a":1,}"#,
            r#"{"a":1}x"#,
            r#"{"a":tru}"#,
            r#"{"a":"x"#,
            "[1]",
            "",
        ];
        for object in refused {
            assert!(!canonical(object), "{object}");
        }
        assert!(!canonical_members(b"{\"a\":\"\xff\"}", &mut Vec::new()));
    }

    #[test]
    fn bounds_depth_and_members() {
        let nested = |depth: usize| format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        assert!(canonical(&nested(MAX_DEPTH)));
        assert!(!canonical(&nested(MAX_DEPTH + 1)));
        let members = |count: usize| {
            let list: Vec<_> = (0..count).map(|i| format!("\"k{i}\":{i}")).collect();
            format!("{{{}}}", list.join(","))
        };
        assert!(canonical(&members(MAX_MEMBERS)));
        assert!(!canonical(&members(MAX_MEMBERS + 1)));
    }
}
