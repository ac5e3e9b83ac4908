//! One snapshot round checked against `wit/operator.wit`, the same for a job's operator
//! subtask and `weir check`: each entry fits one changelog record, a key comes once, and
//! the round stays within its cap (twice the instance's memory limit), so a round that
//! never ends stops there; the caller says which keys it may hold.

use super::{ENTRY_OVERHEAD_BYTES, MAX_ENTRY_BYTES, StateChanges, StateChunk};

/// The bytes of a key an error shows; the rest is counted.
const SHOWN_KEY_BYTES: usize = 64;

/// A round that breaks the contract; each message says what the plugin must keep.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RoundError {
    #[error(
        "the state of key {key} is {bytes} bytes, more than a changelog record may hold \
         ({MAX_ENTRY_BYTES} bytes of key and value): keep less per key, or split it over more keys"
    )]
    EntryTooLarge { key: String, bytes: usize },
    #[error(
        "one round of changes holds more than {cap} bytes (counting {ENTRY_OVERHEAD_BYTES} bytes per \
         entry), more than its memory can hold; a round that never ends is a bug in the plugin"
    )]
    OverCap { cap: usize },
    #[error("key {key} comes twice in one round")]
    Twice { key: String },
    /// A key the caller refused, with its reason.
    #[error("{0}")]
    Refused(String),
}

/// The changes of one round so far, and the bytes they hold counted against its cap.
#[derive(Debug)]
pub(crate) struct Round {
    changes: StateChanges,
    held: usize,
    cap: usize,
}

impl Round {
    /// A round of `stage`'s changes that may hold `cap` bytes, counting
    /// `ENTRY_OVERHEAD_BYTES` per entry; never more than 4 GiB, which the offsets of its
    /// one chunk can address.
    pub(crate) fn new(stage: u32, cap: usize) -> Self {
        Round { changes: StateChanges::new(stage), held: 0, cap: cap.min(u32::MAX as usize) }
    }

    /// Adds `chunk`'s entries, each in the key group `group_of` gives it, or refused with
    /// the reason `group_of` returns. All are checked before any is kept.
    pub(crate) fn add(
        &mut self,
        chunk: StateChunk,
        mut group_of: impl FnMut(&[u8]) -> Result<u32, String>,
    ) -> Result<(), RoundError> {
        let mut groups = Vec::with_capacity(chunk.len());
        for (key, value) in chunk.iter() {
            groups.push(group_of(key).map_err(RoundError::Refused)?);
            let bytes = key.len() + value.map_or(0, <[u8]>::len);
            if bytes > MAX_ENTRY_BYTES {
                return Err(RoundError::EntryTooLarge { key: shown_key(key), bytes });
            }
            self.held += bytes + ENTRY_OVERHEAD_BYTES;
            if self.held > self.cap {
                return Err(RoundError::OverCap { cap: self.cap });
            }
        }
        self.changes.append(chunk, groups);
        Ok(())
    }

    /// Ends the round (an empty chunk came): its changes, by group and key.
    pub(crate) fn finish(mut self) -> Result<StateChanges, RoundError> {
        if let Some(key) = self.changes.sort() {
            return Err(RoundError::Twice { key: shown_key(key) });
        }
        Ok(self.changes)
    }
}

/// A key as an error shows it: `b"..."`, escaped, cut after `SHOWN_KEY_BYTES`.
pub(crate) fn shown_key(key: &[u8]) -> String {
    let shown = key[..key.len().min(SHOWN_KEY_BYTES)].escape_ascii();
    match key.len() > SHOWN_KEY_BYTES {
        true => format!("b\"{shown}\"... ({} bytes)", key.len()),
        false => format!("b\"{shown}\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(entries: &[(&[u8], Option<&[u8]>)]) -> StateChunk {
        let mut chunk = StateChunk::default();
        for (key, value) in entries {
            chunk.push(key, *value);
        }
        chunk
    }

    fn any(_: &[u8]) -> Result<u32, String> {
        Ok(0)
    }

    #[test]
    fn a_round_keeps_its_changes_by_key() {
        let mut round = Round::new(3, 1 << 20);
        round.add(chunk(&[(b"b", Some(b"2")), (b"a", None)]), any).unwrap();
        round.add(chunk(&[(b"c", Some(b""))]), |key| Ok(u32::from(key[0]))).unwrap();
        let changes = round.finish().unwrap();
        assert_eq!(changes.stage, 3);
        let entries: Vec<_> = changes.entries().collect();
        assert_eq!(entries, [(0, &b"a"[..], None), (0, b"b", Some(&b"2"[..])), (99, b"c", Some(b""))]);
    }

    #[test]
    fn a_key_twice_across_chunks_is_refused_at_the_end() {
        let mut round = Round::new(0, 1 << 20);
        round.add(chunk(&[(b"k", Some(b"1"))]), any).unwrap();
        round.add(chunk(&[(b"k", None)]), any).unwrap();
        let error = round.finish().unwrap_err();
        assert_eq!(error.to_string(), "key b\"k\" comes twice in one round");
    }

    #[test]
    fn an_entry_over_one_changelog_record_is_refused() {
        let mut round = Round::new(0, 1 << 30);
        let fits = vec![0; MAX_ENTRY_BYTES - 1];
        round.add(chunk(&[(b"a", Some(&fits))]), any).unwrap();
        let key = vec![b'x'; MAX_ENTRY_BYTES + 1];
        let error = round.add(chunk(&[(&key, None)]), any).unwrap_err();
        assert!(matches!(error, RoundError::EntryTooLarge { bytes, .. } if bytes == MAX_ENTRY_BYTES + 1), "{error}");
        assert!(error.to_string().contains(&format!("b\"{}\"... ({} bytes)", "x".repeat(64), key.len())), "{error}");
    }

    #[test]
    fn the_cap_counts_each_entry_with_its_overhead() {
        // 8 entries of 2 bytes each hold 8 * 130 bytes: a cap of 1,039 stops the eighth.
        let mut round = Round::new(0, 8 * (2 + ENTRY_OVERHEAD_BYTES) - 1);
        for at in 0..7u8 {
            round.add(chunk(&[(&[at], Some(b"v"))]), any).unwrap();
        }
        let error = round.add(chunk(&[(b"z", Some(b"v"))]), any).unwrap_err();
        assert!(matches!(error, RoundError::OverCap { cap: 1039 }), "{error}");
        assert!(Round::new(0, usize::MAX).cap <= u32::MAX as usize, "within a chunk's offsets");
    }

    #[test]
    fn a_key_the_caller_refuses_stops_the_round_with_its_reason() {
        let mut round = Round::new(0, 1 << 20);
        let error = round.add(chunk(&[(b"k", Some(b"v"))]), |key| Err(format!("not {}", shown_key(key)))).unwrap_err();
        assert_eq!(error.to_string(), "not b\"k\"");
    }
}
