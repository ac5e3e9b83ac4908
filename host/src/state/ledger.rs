//! What the changelog holds of one stage's key group: its live base, the segments
//! written since, and the segment keys earlier bases left. The group's owner decides
//! from it when to write a new base and which records it must remove by key; recovery
//! rebuilds it from the records it reads, and the store keeps it with the state. The
//! `GroupLog` itself is a word of `chunk`, as it travels with a checkpoint's changes.

use crate::chunk::GroupLog;

/// A group's segments since its base may outweigh the base (or this, while the base is
/// smaller) before the next checkpoint that changes the group writes a base instead.
/// Small, because what a group's records hold beyond its state stays on the broker:
/// a base waits for segments of this many bytes, and about as many stay behind it.
pub(crate) const MIN_BASE_BYTES: u64 = 16 << 10;
/// A group with this many segments since its base gets a base at its next change,
/// however small: a restore reads a bounded number of records per group.
pub(crate) const MAX_SEGMENTS: u32 = 1_000;
/// The greatest segment number a replay accepts: past `MAX_SEGMENTS` a base may wait
/// while checkpoints' budgets for bases are spent, until `FORCED_BASE_SEGMENTS`, and the
/// round that forces it adds its own. A greater one is no record weir wrote; its key
/// would make the next base remove that many.
pub(crate) const MAX_SEGMENT_SEQ: u32 = 1 << 17;
/// A group with this many segments since its base writes its base at its next change
/// whatever a checkpoint's budget for bases says: one checkpoint's round of a group
/// adds at most `MAX_ROUND_SEGMENTS`, so no segment number passes `MAX_SEGMENT_SEQ`.
pub(crate) const FORCED_BASE_SEGMENTS: u32 = 8 * MAX_SEGMENTS;
/// The most segments one round of one group fills: the largest round (twice the
/// largest memory limit) in records of which any two together pass `RECORD_FILL_BYTES`
/// (a record closes when the next entry would not fit).
const MAX_ROUND_SEGMENTS: u64 = 2 * (2 * (4096 << 20)) / crate::state::packed::RECORD_FILL_BYTES as u64 + 1;
const _: () = assert!(FORCED_BASE_SEGMENTS as u64 + MAX_ROUND_SEGMENTS < MAX_SEGMENT_SEQ as u64);
/// Bytes of an encoded `GroupLog`; before packed keys without the base's id, fewer.
const ENCODED_BYTES: usize = ENCODED_BYTES_1 + 4 + 1;
const ENCODED_BYTES_1: usize = 8 + 8 + 4 + 4 + 8 + 1;

impl GroupLog {
    /// Whether the group's next change of `bytes` should come as a base: everything
    /// since the base outweighs it, too many segments, or records of an older weir's
    /// keys (of one key each, or of version 1), which only a base removes.
    pub(crate) fn wants_base(&self, bytes: u64) -> bool {
        self.legacy
            || self.v1_keys
            || self.segments >= MAX_SEGMENTS
            || self.segment_bytes + bytes > self.base_bytes.max(MIN_BASE_BYTES)
    }

    /// Whether its base cannot wait for a later checkpoint's budget.
    pub(crate) fn base_forced(&self) -> bool {
        self.segments >= FORCED_BASE_SEGMENTS
    }

    /// The segment keys a new base leaves to the segments after it, and those it must
    /// remove: the keys past this base's segments, once they outnumber them (and 4). A
    /// shorter run of segments replaces only the first keys of a longer one before it.
    pub(crate) fn stale_slots(&self) -> (u32, std::ops::Range<u32>) {
        match self.slots.saturating_sub(self.segments) > self.segments.max(4) {
            true => (self.segments, self.segments..self.slots),
            false => (self.slots.max(self.segments), 0..0),
        }
    }

    pub(crate) fn encode(&self) -> [u8; ENCODED_BYTES] {
        let mut out = [0; ENCODED_BYTES];
        out[..8].copy_from_slice(&self.base.to_le_bytes());
        out[8..16].copy_from_slice(&self.base_bytes.to_le_bytes());
        out[16..20].copy_from_slice(&self.base_chunks.to_le_bytes());
        out[20..24].copy_from_slice(&self.segments.to_le_bytes());
        out[24..32].copy_from_slice(&self.segment_bytes.to_le_bytes());
        out[32] = u8::from(self.legacy);
        out[33..37].copy_from_slice(&self.slots.to_le_bytes());
        out[37] = u8::from(self.v1_keys);
        out
    }

    /// A log as encoded now, or as a store written before `slots` and `v1_keys` held it
    /// (its records are all under version 1's keys then).
    pub(crate) fn decode(bytes: &[u8]) -> Option<GroupLog> {
        if bytes.len() != ENCODED_BYTES && bytes.len() != ENCODED_BYTES_1 {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let flag = |byte: u8| match byte {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        };
        let mut log = GroupLog {
            base: u64_at(0),
            base_bytes: u64_at(8),
            base_chunks: u32_at(16),
            segments: u32_at(20),
            segment_bytes: u64_at(24),
            legacy: flag(bytes[32])?,
            slots: 0,
            v1_keys: false,
        };
        match bytes.len() {
            ENCODED_BYTES => (log.slots, log.v1_keys) = (u32_at(33), flag(bytes[37])?),
            _ => (log.slots, log.v1_keys) = (log.segments, log.base != 0 || log.segments > 0),
        }
        Some(log)
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
        assert!(GroupLog { v1_keys: true, base_bytes: 1 << 30, ..GroupLog::default() }.wants_base(1));
        assert!(GroupLog { segments: MAX_SEGMENTS, base_bytes: 1 << 30, ..GroupLog::default() }.wants_base(1));
    }

    #[test]
    fn it_round_trips() {
        let log = GroupLog { base: u64::MAX, base_bytes: 5, base_chunks: 2, segments: 9, segment_bytes: 1 << 33, legacy: true, slots: 12, v1_keys: true };
        assert_eq!(GroupLog::decode(&log.encode()), Some(log));
        assert_eq!(GroupLog::decode(&[0; 3]), None);
        let mut bad_flag = log.encode();
        bad_flag[37] = 2;
        assert_eq!(GroupLog::decode(&bad_flag), None);
    }

    #[test]
    fn a_log_stored_before_slots_reads_as_version_1_keys() {
        let now = GroupLog { base: 7, base_bytes: 5, base_chunks: 1, segments: 3, segment_bytes: 90, legacy: false, slots: 3, v1_keys: true };
        let before = &now.encode()[..ENCODED_BYTES_1];
        assert_eq!(GroupLog::decode(before), Some(now));
        let empty = &GroupLog::default().encode()[..ENCODED_BYTES_1];
        assert_eq!(GroupLog::decode(empty), Some(GroupLog::default()), "nothing written: no old keys");
    }

    #[test]
    fn stale_segment_keys_are_removed_once_they_outnumber_the_segments() {
        let log = |segments, slots| GroupLog { segments, slots, ..GroupLog::default() };
        assert_eq!(log(5, 5).stale_slots(), (5, 0..0), "the same keys again");
        assert_eq!(log(4, 6).stale_slots(), (6, 0..0), "two left to the next run");
        assert_eq!(log(3, 7).stale_slots(), (7, 0..0), "few: left");
        assert_eq!(log(3, 8).stale_slots(), (3, 3..8), "more than 4");
        assert_eq!(log(10, 20).stale_slots(), (20, 0..0), "as many as the last run's");
        assert_eq!(log(10, 40).stale_slots(), (10, 10..40), "more: removed");
        assert_eq!(log(0, 1_000).stale_slots(), (0, 0..1_000));
    }
}
