//! The key groups a replay reads from their start into a store that holds nothing of
//! them (a rebuild from the whole changelog, a scaled-out process's groups new to it).
//! Their entries are merged in memory as they are read, each key once with its last
//! value, and go into the store at the end as one sorted table file per reader, not one
//! entry at a time through its memtable. Memory is bounded: past `SPILL_BYTES` the
//! groups held so far go into the store, and what follows of them takes the store's way.

use std::collections::{BTreeMap, BTreeSet};

use crate::checkpoint::store::{CheckpointStore, StoreError};
use crate::chunk::StateChunk;

/// The most bytes one reader holds before it writes what it holds into the store.
const SPILL_BYTES: usize = 512 << 20;
/// What a held entry costs beyond its key and value (its place in the chunk).
const ENTRY_BYTES: usize = 24;
/// A group's entries are merged once they are this many, and twice the last merge's.
const MIN_MERGE: usize = 4096;

/// One reader's groups read into nothing, and what it holds of them.
pub(super) struct Emptied {
    groups: BTreeSet<u32>,
    /// What it holds at most before it writes (`SPILL_BYTES`).
    spill_bytes: usize,
    /// Per (stage, group), its entries as read since the last merge.
    held: BTreeMap<(u32, u32), GroupMerge>,
    bytes: usize,
}

impl Emptied {
    /// `groups`: those the store holds nothing of.
    pub(super) fn new(groups: BTreeSet<u32>) -> Self {
        Emptied { groups, spill_bytes: SPILL_BYTES, held: BTreeMap::new(), bytes: 0 }
    }

    /// Whether `group`'s entries are held here.
    pub(super) fn holds(&self, group: u32) -> bool {
        self.groups.contains(&group)
    }

    /// Holds `key` of `stage`'s `group` with its new `value`, or its removal for `None`.
    pub(super) fn push(&mut self, stage: u32, group: u32, key: &[u8], value: Option<&[u8]>) {
        let merge = self.held.entry((stage, group)).or_default();
        let before = merge.bytes();
        merge.push(key, value);
        self.bytes = self.bytes + merge.bytes() - before;
    }

    /// `stage`'s `group` holds exactly `entries` (a base, in key order), whatever came before.
    pub(super) fn replace(&mut self, stage: u32, group: u32, entries: &[(&[u8], &[u8])]) {
        let merge = self.held.entry((stage, group)).or_default();
        self.bytes -= merge.bytes();
        *merge = GroupMerge::of(entries);
        self.bytes += merge.bytes();
    }

    /// Whether what is held has passed the memory bound.
    pub(super) fn full(&self) -> bool {
        self.bytes > self.spill_bytes
    }

    /// Writes every group held into the store, which then holds them: what follows of
    /// them takes the store's way. Returns the entries written.
    pub(super) fn write(&mut self, store: &CheckpointStore) -> Result<u64, StoreError> {
        for merge in self.held.values_mut() {
            merge.merge();
        }
        let entries = self.held.iter().flat_map(|(&(stage, group), merge)| {
            merge.chunk.iter().filter_map(move |(key, value)| Some((stage, group, key, value?)))
        });
        let written = store.ingest_state(entries)?;
        for &(_, group) in self.held.keys() {
            self.groups.remove(&group);
        }
        (self.held, self.bytes) = (BTreeMap::new(), 0);
        Ok(written)
    }
}

/// One group's entries, as read: merged now and then to each key's last value.
#[derive(Default)]
struct GroupMerge {
    chunk: StateChunk,
    /// How many entries the last merge left.
    merged: usize,
}

impl GroupMerge {
    /// A group holding `entries` (in key order, each key once).
    fn of(entries: &[(&[u8], &[u8])]) -> Self {
        let mut chunk = StateChunk::default();
        for (key, value) in entries {
            chunk.push(key, Some(value));
        }
        GroupMerge { merged: chunk.len(), chunk }
    }

    fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.chunk.push(key, value);
        if self.chunk.len() >= MIN_MERGE.max(2 * self.merged) {
            self.merge();
        }
    }

    /// Keeps each key's last entry, in key order, and drops removals: the store holds
    /// nothing of the group for them to remove. What the last merge left is in key
    /// order already: only the entries pushed since are sorted, then the two runs are
    /// merged in one pass.
    fn merge(&mut self) {
        let entries: Vec<(&[u8], Option<&[u8]>)> = self.chunk.iter().collect();
        let (held, pushed) = entries.split_at(self.merged);
        let mut order: Vec<u32> = (0..pushed.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| pushed[a as usize].0.cmp(pushed[b as usize].0).then(a.cmp(&b)));
        let latest = order.chunk_by(|&a, &b| pushed[a as usize].0 == pushed[b as usize].0).map(|run| pushed[*run.last().expect("a run holds an entry") as usize]);
        let mut merged = StateChunk::default();
        let mut held = held.iter().copied().peekable();
        for (key, value) in latest {
            while let Some(&(before, kept)) = held.peek().filter(|(before, _)| *before < key) {
                merged.push(before, kept);
                held.next();
            }
            held.next_if(|(same, _)| *same == key);
            if value.is_some() {
                merged.push(key, value);
            }
        }
        held.for_each(|(key, value)| merged.push(key, value));
        self.merged = merged.len();
        self.chunk = merged;
    }

    fn bytes(&self) -> usize {
        self.chunk.data_len() + self.chunk.len() * ENTRY_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(merge: &GroupMerge) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        merge.chunk.iter().map(|(key, value)| (key.to_vec(), value.map(<[u8]>::to_vec))).collect()
    }

    #[test]
    fn a_merge_keeps_each_key_last_value_in_key_order_and_drops_removals() {
        let mut merge = GroupMerge::default();
        merge.push(b"b", Some(b"1"));
        merge.push(b"a", Some(b"1"));
        merge.push(b"c", Some(b"1"));
        merge.push(b"b", Some(b"2"));
        merge.push(b"c", None);
        merge.push(b"a", None);
        merge.push(b"a", Some(b"3"));
        merge.merge();
        assert_eq!(held(&merge), vec![(b"a".to_vec(), Some(b"3".to_vec())), (b"b".to_vec(), Some(b"2".to_vec()))]);
        assert_eq!(merge.merged, 2);
    }

    #[test]
    fn a_group_merges_as_it_grows_and_keeps_the_latest() {
        let mut merge = GroupMerge::default();
        for round in 0..5u32 {
            for key in 0..3000u32 {
                merge.push(&key.to_be_bytes(), Some(&round.to_le_bytes()));
            }
        }
        assert!(merge.chunk.len() < 2 * MIN_MERGE, "merged while it grew: {} entries held", merge.chunk.len());
        merge.merge();
        assert_eq!(merge.chunk.len(), 3000);
        assert!(merge.chunk.iter().all(|(_, value)| value == Some(&4u32.to_le_bytes()[..])));
    }

    #[test]
    fn merges_in_runs_give_what_one_map_of_last_values_gives() {
        // Keys from a small space, so that later pushes update, remove and bring back
        // what earlier merges left; merged at uneven points.
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut merge, mut expected) = (GroupMerge::default(), BTreeMap::new());
        for step in 0..20_000u32 {
            let r = next();
            let key = format!("k{}", r % 700).into_bytes();
            let value = (r % 5 != 0).then(|| step.to_le_bytes().to_vec());
            merge.push(&key, value.as_deref());
            match value {
                Some(value) => expected.insert(key, value),
                None => expected.remove(&key),
            };
            if r % 997 == 0 {
                merge.merge();
            }
        }
        merge.merge();
        let expected: Vec<(Vec<u8>, Option<Vec<u8>>)> = expected.into_iter().map(|(k, v)| (k, Some(v))).collect();
        assert_eq!(held(&merge), expected);
        assert_eq!(merge.merged, expected.len());
    }

    fn stored(store: &CheckpointStore, group: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut found = Vec::new();
        store
            .scan_group(0, group, |key, value| -> Result<(), StoreError> {
                found.push((key.to_vec(), value.to_vec()));
                Ok(())
            })
            .expect("the store reads");
        found
    }

    #[test]
    fn groups_written_past_the_bound_go_on_through_the_store_and_each_key_keeps_its_last_value() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = CheckpointStore::open(&dir.path().join("state"), "job").expect("the store opens");
        let mut emptied = Emptied::new(BTreeSet::from([1, 2, 3]));
        emptied.spill_bytes = 100;
        emptied.push(0, 1, b"a", Some(b"1"));
        emptied.push(0, 1, b"b", Some(b"1"));
        emptied.push(0, 2, b"c", Some(b"1"));
        emptied.push(0, 1, b"a", Some(b"2"));
        emptied.push(0, 1, b"b", None);
        assert!(emptied.full());
        assert_eq!(emptied.write(&store).expect("written"), 2);
        assert!(!emptied.holds(1) && !emptied.holds(2) && emptied.holds(3), "held groups are the store's now; the others stay");
        emptied.push(0, 3, b"d", Some(b"1"));
        assert_eq!(emptied.write(&store).expect("written"), 1);
        assert_eq!(stored(&store, 1), vec![(b"a".to_vec(), b"2".to_vec())]);
        assert_eq!(stored(&store, 2), vec![(b"c".to_vec(), b"1".to_vec())]);
        assert_eq!(stored(&store, 3), vec![(b"d".to_vec(), b"1".to_vec())]);
        let left: Vec<_> = std::fs::read_dir(dir.path().join("state")).expect("listed").flatten().map(|entry| entry.file_name()).collect();
        assert!(!left.iter().any(|name| name.to_string_lossy().starts_with("ingest-")), "no table file left behind: {left:?}");
    }

    #[test]
    fn a_base_replaces_what_was_held() {
        let mut emptied = Emptied::new(BTreeSet::from([7]));
        emptied.push(0, 7, b"x", Some(b"old"));
        emptied.push(0, 7, b"y", Some(b"old"));
        emptied.replace(0, 7, &[(b"y", b"base")]);
        emptied.push(0, 7, b"z", Some(b"new"));
        let merge = emptied.held.get_mut(&(0, 7)).expect("held");
        merge.merge();
        assert_eq!(held(merge), vec![(b"y".to_vec(), Some(b"base".to_vec())), (b"z".to_vec(), Some(b"new".to_vec()))]);
        assert!(emptied.holds(7) && !emptied.holds(8));
    }
}
