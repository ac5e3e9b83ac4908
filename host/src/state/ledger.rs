//! What the changelog holds of one stage's key group: its live base and the segments
//! written since. The group's owner decides from it when to write a new base, and
//! removes the records the base replaces by their keys; recovery rebuilds it from the
//! records it reads, and the store keeps it with the state.

/// A group's segments since its base may outweigh the base (or this, while the base is
/// smaller) before the next checkpoint that changes the group writes a base instead.
pub(crate) const MIN_BASE_BYTES: u64 = 64 << 10;
/// A group with this many segments since its base gets a base at its next change,
/// however small: a restore reads a bounded number of records per group.
pub(crate) const MAX_SEGMENTS: u32 = 1_000;
/// Bytes of an encoded `GroupLog`.
const ENCODED_BYTES: usize = 8 + 8 + 4 + 4 + 8 + 1;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupLog {
    /// The live base's id (0: the group has none).
    pub base: u64,
    /// Bytes of keys and values in it.
    pub base_bytes: u64,
    /// Its chunk records.
    pub base_chunks: u32,
    /// Segment records since it.
    pub segments: u32,
    /// Bytes of keys and values in them.
    pub segment_bytes: u64,
    /// The changelog holds records of one key each for the group (an older weir wrote
    /// them, or a reseed): the next base removes them.
    pub legacy: bool,
}

impl GroupLog {
    /// Whether the group's next change of `bytes` should come as a base: everything
    /// since the base outweighs it, too many segments, or records of one key each.
    pub(crate) fn wants_base(&self, bytes: u64) -> bool {
        self.legacy || self.segments >= MAX_SEGMENTS || self.segment_bytes + bytes > self.base_bytes.max(MIN_BASE_BYTES)
    }

    pub(crate) fn encode(&self) -> [u8; ENCODED_BYTES] {
        let mut out = [0; ENCODED_BYTES];
        out[..8].copy_from_slice(&self.base.to_le_bytes());
        out[8..16].copy_from_slice(&self.base_bytes.to_le_bytes());
        out[16..20].copy_from_slice(&self.base_chunks.to_le_bytes());
        out[20..24].copy_from_slice(&self.segments.to_le_bytes());
        out[24..32].copy_from_slice(&self.segment_bytes.to_le_bytes());
        out[32] = u8::from(self.legacy);
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<GroupLog> {
        let bytes: &[u8; ENCODED_BYTES] = bytes.try_into().ok()?;
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        Some(GroupLog {
            base: u64_at(0),
            base_bytes: u64_at(8),
            base_chunks: u32_at(16),
            segments: u32_at(20),
            segment_bytes: u64_at(24),
            legacy: match bytes[32] {
                0 => false,
                1 => true,
                _ => return None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_comes_once_the_segments_outweigh_it() {
        let log = GroupLog { base: 7, base_bytes: 1 << 20, segment_bytes: 900 << 10, segments: 3, ..GroupLog::default() };
        assert!(!log.wants_base(100 << 10));
        assert!(log.wants_base(200 << 10));
        assert!(GroupLog::default().wants_base(MIN_BASE_BYTES + 1), "a small group's first base");
        assert!(!GroupLog::default().wants_base(10), "a small change of a small group");
        assert!(GroupLog { legacy: true, ..GroupLog::default() }.wants_base(1));
        assert!(GroupLog { segments: MAX_SEGMENTS, base_bytes: 1 << 30, ..GroupLog::default() }.wants_base(1));
    }

    #[test]
    fn it_round_trips() {
        let log = GroupLog { base: u64::MAX, base_bytes: 5, base_chunks: 2, segments: 9, segment_bytes: 1 << 33, legacy: true };
        assert_eq!(GroupLog::decode(&log.encode()), Some(log));
        assert_eq!(GroupLog::decode(&[0; 3]), None);
    }
}
