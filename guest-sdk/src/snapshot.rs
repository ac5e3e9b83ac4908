//! Versioned state entries: each key's state is stored as an encoding byte (1 =
//! postcard), the author's state version as a little-endian u16, then the state. An
//! entry of another version is refused unless the operator can upgrade it.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;

/// The body encoding this build writes and reads.
const ENCODING_POSTCARD: u8 = 1;
const HEADER_LEN: usize = 1 + 2;

/// An entry's header, checked, and its still-encoded body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot<'a> {
    /// The state version the entry was written with.
    pub version: u16,
    /// The encoded state; decode it with [`decode_body`].
    pub body: &'a [u8],
}

/// Appends `state` to `out` as an entry of state version `version`.
pub fn encode_into<S: Serialize + ?Sized>(
    state: &S,
    version: u16,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    encode_tagged_into(state, version, &[], out)
}

/// Appends `state` as an entry of state version `version` whose body is `state` as the
/// variant `tags` (outermost first; each below 128) of nested enums would encode it:
/// postcard writes an enum's variant index as a varint before its contents.
pub(crate) fn encode_tagged_into<S: Serialize + ?Sized>(
    state: &S,
    version: u16,
    tags: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    out.push(ENCODING_POSTCARD);
    out.extend_from_slice(&version.to_le_bytes());
    debug_assert!(
        tags.iter().all(|&tag| tag < 0x80),
        "one varint byte per tag"
    );
    out.extend_from_slice(tags);
    let buffer = std::mem::take(out);
    *out = postcard::to_extend(state, buffer)
        .map_err(|e| Error::new(format!("state: an entry does not encode: {e}")))?;
    Ok(())
}

/// `state` as an entry of state version `version`.
pub fn encode<S: Serialize + ?Sized>(state: &S, version: u16) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + 16);
    encode_into(state, version, &mut bytes)?;
    Ok(bytes)
}

/// Checks an entry's header and splits off its body.
pub fn parse(bytes: &[u8]) -> Result<Snapshot<'_>, Error> {
    if bytes.len() < HEADER_LEN {
        return Err(Error::new(format!(
            "state entry of {} bytes is too short to be a weir-guest entry; restore only \
             state written by this plugin",
            bytes.len()
        )));
    }
    let encoding = bytes[0];
    if encoding != ENCODING_POSTCARD {
        return Err(Error::new(format!(
            "state entry uses encoding {encoding}, which this build of weir-guest cannot read \
             (it reads encoding {ENCODING_POSTCARD}); it was written by another plugin or a \
             newer weir-guest"
        )));
    }
    Ok(Snapshot {
        version: u16::from_le_bytes([bytes[1], bytes[2]]),
        body: &bytes[HEADER_LEN..],
    })
}

/// Decodes an entry body, e.g. into an older state type inside
/// [`Operator::upgrade_state`](crate::Operator::upgrade_state).
pub fn decode_body<S: DeserializeOwned>(body: &[u8]) -> Result<S, Error> {
    let (state, rest) = postcard::take_from_bytes(body).map_err(|e| {
        Error::new(format!(
            "state entry does not decode ({e}); it is corrupt or was written by another plugin"
        ))
    })?;
    if !rest.is_empty() {
        return Err(Error::new(format!(
            "state entry is followed by {} unexpected bytes; it is corrupt or was written by \
             another plugin",
            rest.len()
        )));
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct State {
        count: u64,
        names: Vec<String>,
    }

    #[test]
    fn round_trips_with_its_version() {
        let state = State {
            count: 3,
            names: vec!["a".into()],
        };
        let bytes = encode(&state, 7).unwrap();
        assert_eq!(&bytes[..3], b"\x01\x07\x00");
        let entry = parse(&bytes).unwrap();
        assert_eq!(entry.version, 7);
        assert_eq!(decode_body::<State>(entry.body).unwrap(), state);
    }

    #[test]
    fn refuses_short_entries_unknown_encodings_and_trailing_garbage() {
        let error = parse(b"\x01").unwrap_err();
        assert!(error.message().contains("too short"), "{error}");

        let mut bytes = encode(&State::default(), 1).unwrap();
        bytes[0] = 9;
        let error = parse(&bytes).unwrap_err();
        assert!(error.message().contains("encoding 9"), "{error}");

        let mut bytes = encode(&State::default(), 1).unwrap();
        bytes.push(0);
        let error = decode_body::<State>(parse(&bytes).unwrap().body).unwrap_err();
        assert!(error.message().contains("1 unexpected bytes"), "{error}");
    }
}
