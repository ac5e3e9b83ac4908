//! Versioned snapshots of an operator's state: the magic `WGST`, an encoding byte
//! (1 = postcard), the author's state version as a little-endian u16, then the state.
//! A snapshot of another version is refused unless the operator can upgrade it.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;

const MAGIC: [u8; 4] = *b"WGST";
/// The body encoding this build writes and reads.
const ENCODING_POSTCARD: u8 = 1;
const HEADER_LEN: usize = MAGIC.len() + 1 + 2;

/// A snapshot's header, checked, and its still-encoded body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot<'a> {
    /// The state version the snapshot was written with.
    pub version: u16,
    /// The encoded state; decode it with [`decode_body`].
    pub body: &'a [u8],
}

/// Encodes `state` as a snapshot of state version `version`.
pub fn encode<S: Serialize>(state: &S, version: u16) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + 64);
    bytes.extend_from_slice(&MAGIC);
    bytes.push(ENCODING_POSTCARD);
    bytes.extend_from_slice(&version.to_le_bytes());
    postcard::to_extend(state, bytes)
        .map_err(|e| Error::new(format!("snapshot: the operator state does not encode: {e}")))
}

/// Checks a snapshot's header and splits off its body.
pub fn parse(bytes: &[u8]) -> Result<Snapshot<'_>, Error> {
    if bytes.len() < HEADER_LEN || bytes[..MAGIC.len()] != MAGIC {
        let start = &bytes[..bytes.len().min(HEADER_LEN)];
        return Err(Error::new(format!(
            "snapshot is not a weir-guest state snapshot ({} bytes, starting b\"{}\"); \
             restore only snapshots taken by this plugin",
            bytes.len(),
            start.escape_ascii()
        )));
    }
    let encoding = bytes[MAGIC.len()];
    if encoding != ENCODING_POSTCARD {
        return Err(Error::new(format!(
            "snapshot body uses encoding {encoding}, which this build of weir-guest cannot \
             read (it reads encoding {ENCODING_POSTCARD}); rebuild the plugin with a newer weir-guest"
        )));
    }
    let version = u16::from_le_bytes([bytes[MAGIC.len() + 1], bytes[MAGIC.len() + 2]]);
    Ok(Snapshot {
        version,
        body: &bytes[HEADER_LEN..],
    })
}

/// Decodes a snapshot body, e.g. into an older state type inside
/// [`Operator::upgrade_state`](crate::Operator::upgrade_state).
pub fn decode_body<S: DeserializeOwned>(body: &[u8]) -> Result<S, Error> {
    let (state, rest) = postcard::take_from_bytes(body).map_err(|e| {
        Error::new(format!(
            "snapshot state does not decode ({e}); it is corrupt or was taken by another plugin"
        ))
    })?;
    if !rest.is_empty() {
        return Err(Error::new(format!(
            "snapshot state is followed by {} unexpected bytes; it is corrupt or was taken by \
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
        assert_eq!(&bytes[..5], b"WGST\x01");
        let snapshot = parse(&bytes).unwrap();
        assert_eq!(snapshot.version, 7);
        assert_eq!(decode_body::<State>(snapshot.body).unwrap(), state);
    }

    #[test]
    fn refuses_foreign_bytes_unknown_encodings_and_trailing_garbage() {
        let error = parse(b"garbage!").unwrap_err();
        assert!(
            error.message().starts_with(
                "snapshot is not a weir-guest state snapshot (8 bytes, starting b\"garbage\")"
            ),
            "{error}"
        );
        assert!(parse(b"WG").is_err());

        let mut bytes = encode(&State::default(), 1).unwrap();
        bytes[4] = 9;
        let error = parse(&bytes).unwrap_err();
        assert!(error.message().contains("encoding 9"), "{error}");

        let mut bytes = encode(&State::default(), 1).unwrap();
        bytes.push(0);
        let error = decode_body::<State>(parse(&bytes).unwrap().body).unwrap_err();
        assert!(error.message().contains("1 unexpected bytes"), "{error}");
    }
}
