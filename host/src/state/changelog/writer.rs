//! Writes one operator subtask's checkpoint changes into the changelog, in the
//! checkpoint's transaction (DESIGN.md §5, "Changelog segments"): per key group a few
//! packed segments, or, once what the group's segments hold outweighs its base, a new
//! base instead — the group's whole state at this checkpoint: the store's state merged
//! with the changes of the checkpoints the folder has not written into it yet, which the
//! writer keeps, and with these. A base's records take the keys of
//! the one before, and the segments after it those of the segments before, so
//! compaction drops what it replaces; only records no later one replaces are removed
//! by key (tombstones): those of an older weir's keys, a longer base's last chunks, and
//! segment keys of a longer run than the last. The removals come first: a restore that
//! reads them before the cleaner has run takes a removed key-per-record entry as a
//! removal, which the base that follows then overrides.
//!
//! An at-least-once job writes one record per changed key, as weir always did: its
//! records are not in transactions, so a base could be seen half written.

use std::collections::BTreeMap;
use std::ops::Range;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::checkpoint::layout;
use crate::checkpoint::store::CheckpointStore;
use crate::chunk::{GroupLog, StateChanges};
use crate::dataflow::TaskFailure;
use crate::sink::Sink;
use crate::state::packed::{BaseEnd, EntriesValue, Kind, PackedKey};

use super::Placement;

/// The least a subtask may spend on bases in one checkpoint, in bytes of keys and values;
/// it may spend as much as its changes hold. A group's base is due once its segments
/// outweigh it, so in a steady state bases cost about what the changes cost, and a
/// checkpoint writes about twice its changes; a base due beyond the budget waits.
const BASE_BUDGET_BYTES: u64 = 256 << 10;

/// Once a round's writes have taken this long, no further group of it writes a base.
/// Each base reads its group from the store, whose memtable holds many versions of a
/// busy key: 0.4 ms a base at p50 (up to 12 ms) for a window count's 780-key groups at
/// 100 ms checkpoints. Its groups grow alike, so their bases fell due in the same round,
/// and all 64 of a subtask's took 45-170 ms of that checkpoint. The rest wait a round or
/// more, writing segments meanwhile, and spread out; a round's first base is never held.
const BASE_TIME_BUDGET: Duration = Duration::from_millis(10);

/// One entry of a change: its group, key and new value (`None`: removed).
type Entry<'a> = (u32, &'a [u8], Option<&'a [u8]>);

pub(crate) struct ChangelogWriter<'a> {
    sink: &'a Sink,
    topic: &'a str,
    placement: Placement,
    stage: u32,
    /// Where a base reads the state of the last checkpoint folded.
    store: &'a CheckpointStore,
    /// The last checkpoint folded into the store.
    folded: &'a AtomicU64,
    /// The rounds of the checkpoints written since, which a base merges over the store's
    /// state: shared with the folder, which writes them into the store.
    unfolded: Vec<(u64, Arc<StateChanges>)>,
    /// The last checkpoint committed: checkpoint N's transaction is open once N-1 is.
    committed: &'a AtomicU64,
    /// The key groups the subtask owns.
    groups: Range<u32>,
    /// What the changelog holds of each of them, as of the last write; read from the
    /// store at the first.
    logs: Option<BTreeMap<u32, GroupLog>>,
    packed: bool,
    /// Where the next round starts offering bases: past the last group that wrote one,
    /// so a group due every round (a hot key's) cannot hold the others' off for good.
    bases_from: u32,
    key: Vec<u8>,
    value: EntriesValue,
    /// Called once per base, its chunks sent and its end not (the crash tests' kill point).
    in_base: fn(u64),
}

/// Where an operator subtask's state changes go.
#[derive(Clone, Copy)]
pub(crate) struct StateOut<'a> {
    pub(crate) sink: &'a Sink,
    pub(crate) changelog_topic: &'a str,
    /// Which of its partitions holds each key group.
    pub(crate) placement: Placement,
    pub(crate) store: &'a CheckpointStore,
    /// The last checkpoint the folder has written into the store.
    pub(crate) folded: &'a AtomicU64,
    /// The last checkpoint committed in Kafka.
    pub(crate) committed: &'a AtomicU64,
    /// Segments and bases (exactly-once), else one record per key.
    pub(crate) packed: bool,
    pub(crate) in_base: fn(u64),
}

impl<'a> ChangelogWriter<'a> {
    /// The writer of `stage`'s subtask that owns `groups`.
    pub(crate) fn new(out: StateOut<'a>, stage: u32, groups: Range<u32>) -> Self {
        ChangelogWriter {
            sink: out.sink,
            topic: out.changelog_topic,
            placement: out.placement,
            stage,
            store: out.store,
            folded: out.folded,
            unfolded: Vec::new(),
            committed: out.committed,
            groups,
            logs: None,
            packed: out.packed,
            bases_from: 0,
            key: Vec::new(),
            value: EntriesValue::default(),
            in_base: out.in_base,
        }
    }

    /// Waits until every record written so far is in Kafka (the crash tests' kill points).
    pub(crate) fn deliver(&self) -> Result<(), TaskFailure> {
        self.sink.flush_pending().map_err(TaskFailure::from)
    }

    /// Whether checkpoint `n`'s transaction is open (checkpoint n-1 is committed), so that
    /// a snapshot round before its barrier may write into it; never for an at-least-once
    /// job, whose changelog records are in no transaction.
    pub(crate) fn open_for(&self, n: u64) -> bool {
        self.packed && self.committed.load(Ordering::Acquire) + 1 >= n
    }

    /// Writes checkpoint `n`'s `changes` (sorted by group and key) and records in them
    /// what the changelog then holds of every group written. Called once per snapshot
    /// round: a checkpoint's early rounds, then its barrier's; `earlier` holds what the
    /// checkpoint's rounds before this one wrote, which a base of a group they wrote
    /// holds too.
    pub(crate) fn write(&mut self, n: u64, changes: &mut StateChanges, earlier: &[StateChanges]) -> Result<(), TaskFailure> {
        if !self.packed {
            return self.write_per_key(changes);
        }
        if self.logs.is_none() {
            self.logs = Some(self.store.group_logs(self.stage, self.groups.clone())?);
        }
        // Read before any base scans the store, which then holds at least this checkpoint.
        let folded = self.folded.load(Ordering::Acquire);
        self.unfolded.retain(|&(m, _)| m > folded);
        let unfolded: Vec<Arc<StateChanges>> = self.unfolded.iter().map(|(_, round)| Arc::clone(round)).collect();
        // Oldest first: what a base merges over the store's state, before this round.
        let older: Vec<&StateChanges> = unfolded.iter().map(|round| &**round).chain(earlier).collect();
        let entries: Vec<Entry<'_>> = changes.entries().collect();
        let total: u64 = entries.iter().map(|(_, key, value)| entry_bytes(key, *value)).sum();
        let mut budget = BASE_BUDGET_BYTES.max(total);
        let started = Instant::now();
        let (mut records, mut bytes, mut bases) = (0, 0, 0);
        let mut logs = Vec::new();
        let runs: Vec<&[Entry<'_>]> = entries.chunk_by(|a, b| a.0 == b.0).collect();
        for run in starting_at(&runs, self.bases_from) {
            let group = run[0].0;
            let run_bytes: u64 = run.iter().map(|(_, key, value)| entry_bytes(key, *value)).sum();
            let log = self.logs.as_ref().and_then(|logs| logs.get(&group)).copied().unwrap_or_default();
            let in_time = bases == 0 || started.elapsed() < BASE_TIME_BUDGET;
            let written = match log.wants_base(run_bytes) && ((budget > 0 && in_time) || log.base_forced()) {
                true => {
                    let merged;
                    let since_store = match older.is_empty() {
                        true => run,
                        false => {
                            merged = latest_in_group(&older, group, run);
                            &merged
                        }
                    };
                    let (written, base) = self.write_base(n, group, &log, since_store)?;
                    budget = budget.saturating_sub(base.base_bytes);
                    bases += 1;
                    self.bases_from = group + 1;
                    (written, base)
                }
                false => self.write_segments(group, &log, run, run_bytes)?,
            };
            let ((r, b), log) = written;
            (records, bytes) = (records + r, bytes + b);
            self.logs.get_or_insert_default().insert(group, log);
            logs.push((group, log));
        }
        drop(runs);
        drop(entries);
        drop(older);
        changes.logs = logs;
        changes.written = (records, bytes);
        changes.bases = bases;
        Ok(())
    }

    /// Keeps checkpoint `n`'s rounds, all written, for the bases of later checkpoints
    /// until the folder has written them into the store (after `n`'s commit).
    pub(crate) fn keep(&mut self, n: u64, rounds: &[Arc<StateChanges>]) {
        if self.packed {
            let written = rounds.iter().filter(|round| !round.is_empty());
            self.unfolded.extend(written.map(|round| (n, Arc::clone(round))));
        }
    }

    fn write_per_key(&mut self, changes: &mut StateChanges) -> Result<(), TaskFailure> {
        let (mut records, mut bytes) = (0, 0);
        let mut writer = super::StateWriter::new(self.sink, (self.topic, self.placement), self.stage);
        for (group, key, state) in changes.entries() {
            bytes += writer.send(group, key, state)? as u64;
            records += 1;
        }
        changes.written = (records, bytes);
        Ok(())
    }

    /// The group's changes (`run`, of `run_bytes` keys and values) as segments after its
    /// base; returns (records, bytes) and what the changelog then holds of the group.
    fn write_segments(&mut self, group: u32, log: &GroupLog, run: &[Entry<'_>], run_bytes: u64) -> Result<((u64, u64), GroupLog), TaskFailure> {
        let mut log = *log;
        let (mut records, mut bytes) = (0, 0);
        for &(_, key, value) in run {
            if self.value.full_for(key.len() + value.map_or(0, <[u8]>::len)) {
                bytes += self.flush(Kind::Segment, group, log.base, log.segments)?;
                (records, log.segments) = (records + 1, log.segments + 1);
            }
            self.value.push(key, value);
        }
        bytes += self.flush(Kind::Segment, group, log.base, log.segments)?;
        (records, log.segments) = (records + 1, log.segments + 1);
        log.segment_bytes += run_bytes;
        log.slots = log.slots.max(log.segments);
        Ok(((records, bytes), log))
    }

    /// A new base of the group at checkpoint `n`, after removing what it replaces: the
    /// store's state merged with `run`, the group's changes since it in key order.
    fn write_base(&mut self, n: u64, group: u32, old: &GroupLog, run: &[Entry<'_>]) -> Result<((u64, u64), GroupLog), TaskFailure> {
        let (slots, stale) = old.stale_slots();
        let mut records = self.remove_replaced(group, old, stale)?;
        let id = new_base_id(self.stage, group, n);
        let mut base = GroupLog { base: id, slots, ..GroupLog::default() };
        let (mut bytes, mut entries) = (0, 0u64);
        let mut changes = run.iter().map(|&(_, key, value)| (key, value)).peekable();
        let mut add = |writer: &mut Self, key: &[u8], value: &[u8]| -> Result<(), TaskFailure> {
            if writer.value.full_for(key.len() + value.len()) {
                bytes += writer.flush(Kind::BaseChunk, group, id, base.base_chunks)?;
                base.base_chunks += 1;
            }
            writer.value.push(key, Some(value));
            base.base_bytes += (key.len() + value.len()) as u64;
            entries += 1;
            Ok(())
        };
        // The store's state merged with the changes since, both in key order.
        let store = self.store;
        store.scan_group(self.stage, group, |key, value| -> Result<(), TaskFailure> {
            while let Some(&(changed, new)) = changes.peek()
                && changed <= key
            {
                changes.next();
                if let Some(new) = new {
                    add(self, changed, new)?;
                }
                if changed == key {
                    return Ok(());
                }
            }
            add(self, key, value)
        })?;
        for (key, value) in changes {
            if let Some(value) = value {
                add(self, key, value)?;
            }
        }
        if !self.value.is_empty() {
            bytes += self.flush(Kind::BaseChunk, group, id, base.base_chunks)?;
            base.base_chunks += 1;
        }
        if !old.v1_keys {
            // The old base's chunks past this one's: no record of this base replaces them.
            for seq in base.base_chunks..old.base_chunks {
                self.remove(PackedKey { kind: Kind::BaseChunk, stage: self.stage, group, base: old.base, seq }, false)?;
                records += 1;
            }
        }
        (self.in_base)(n);
        let end = BaseEnd { n, chunks: base.base_chunks, entries, bytes: base.base_bytes };
        PackedKey { kind: Kind::BaseEnd, stage: self.stage, group, base: id, seq: 0 }.encode_into(&mut self.key);
        let end = end.encode(id);
        self.sink.send_changelog(self.topic, self.placement.partition_of(group), &self.key, Some(&end))?;
        bytes += (self.key.len() + end.len()) as u64;
        records += u64::from(base.base_chunks) + 1;
        Ok(((records, bytes), base))
    }

    /// Removes the group's records that no record of a new base or of the segments
    /// after it will replace: an old base and its segments under version 1's keys, the
    /// `stale` segment keys, and records of one key each for the keys the store holds.
    fn remove_replaced(&mut self, group: u32, old: &GroupLog, stale: Range<u32>) -> Result<u64, TaskFailure> {
        let mut removed = 0;
        if old.v1_keys {
            let chunks = (0..old.base_chunks).map(|seq| (Kind::BaseChunk, seq));
            let base = (old.base != 0).then_some((Kind::BaseEnd, 0));
            let segments = (0..old.segments).map(|seq| (Kind::Segment, seq));
            for (kind, seq) in chunks.chain(base).chain(segments) {
                self.remove(PackedKey { kind, stage: self.stage, group, base: old.base, seq }, true)?;
                removed += 1;
            }
        }
        for seq in stale {
            self.remove(PackedKey { kind: Kind::Segment, stage: self.stage, group, base: old.base, seq }, false)?;
            removed += 1;
        }
        if old.legacy {
            let (sink, topic, stage, store) = (self.sink, self.topic, self.stage, self.store);
            let partition = self.placement.partition_of(group);
            let mut key = Vec::new();
            store.scan_group(stage, group, |user_key, _| -> Result<(), TaskFailure> {
                layout::changelog_key_into(stage, user_key, &mut key);
                sink.send_changelog(topic, partition, &key, None)?;
                removed += 1;
                Ok(())
            })?;
        }
        Ok(removed)
    }

    /// Removes the record of `key`, under version 1's keys if `v1`.
    fn remove(&mut self, key: PackedKey, v1: bool) -> Result<(), TaskFailure> {
        match v1 {
            true => key.encode_v1_into(&mut self.key),
            false => key.encode_into(&mut self.key),
        }
        self.sink.send_changelog(self.topic, self.placement.partition_of(key.group), &self.key, None).map_err(TaskFailure::from)
    }

    /// Sends the packed entries as one record; returns its bytes.
    fn flush(&mut self, kind: Kind, group: u32, base: u64, seq: u32) -> Result<u64, TaskFailure> {
        PackedKey { kind, stage: self.stage, group, base, seq }.encode_into(&mut self.key);
        let value = self.value.finish(base);
        self.sink.send_changelog(self.topic, self.placement.partition_of(group), &self.key, Some(value))?;
        let bytes = (self.key.len() + value.len()) as u64;
        self.value.clear();
        Ok(bytes)
    }
}

/// The group's entries of the rounds `before` (sorted, oldest first) and of `run`, each
/// key once with its newest value, in key order: all the group's changes since the
/// store's state. A round holds a key once, so each merge of one round into what came
/// before is a walk of both.
fn latest_in_group<'e>(before: &[&'e StateChanges], group: u32, run: &[Entry<'e>]) -> Vec<Entry<'e>> {
    let mut latest: Vec<(&[u8], Option<&[u8]>)> = Vec::new();
    for round in before {
        latest = newest_of(latest, round.group_entries(group));
    }
    latest = newest_of(latest, run.iter().map(|&(_, key, value)| (key, value)));
    latest.into_iter().map(|(key, value)| (group, key, value)).collect()
}

/// `older` and `newer`, both in key order, merged: a key in both with `newer`'s value.
fn newest_of<'e>(older: Vec<(&'e [u8], Option<&'e [u8]>)>, newer: impl Iterator<Item = (&'e [u8], Option<&'e [u8]>)>) -> Vec<(&'e [u8], Option<&'e [u8]>)> {
    let mut merged = Vec::with_capacity(older.len());
    let mut older = older.into_iter().peekable();
    for (key, value) in newer {
        while let Some(&(old, _)) = older.peek()
            && old < key
        {
            merged.extend(older.next());
        }
        if older.peek().is_some_and(|&(old, _)| old == key) {
            older.next();
        }
        merged.push((key, value));
    }
    merged.extend(older);
    merged
}

/// The runs of groups from `group` on, then those before it: each run once.
fn starting_at<'r, 'e>(runs: &'r [&'r [Entry<'e>]], group: u32) -> impl Iterator<Item = &'r [Entry<'e>]> {
    let first = runs.partition_point(|run| run[0].0 < group);
    runs[first..].iter().chain(&runs[..first]).copied()
}

fn entry_bytes(key: &[u8], value: Option<&[u8]>) -> u64 {
    (key.len() + value.map_or(0, <[u8]>::len)) as u64
}

/// A base's id: random (never 0), so two owners of a group over time, each counting
/// checkpoints of its own, never write records of the same key.
fn new_base_id(stage: u32, group: u32, n: u64) -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(stage);
    hasher.write_u32(group);
    hasher.write_u64(n);
    hasher.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_over_unfolded_and_earlier_rounds_holds_each_key_once_with_its_newest_value() {
        let round = |entries: &[Entry<'_>]| {
            let mut changes = StateChanges::new(0);
            for &(group, key, value) in entries {
                changes.push(group, key, value);
            }
            assert!(changes.sort().is_none());
            changes
        };
        // An unfolded checkpoint's round, then one of this checkpoint's earlier rounds.
        let first = round(&[(3, b"z", Some(b"1")), (2, b"d", Some(b"1")), (1, b"a", Some(b"1")), (2, b"b", Some(b"1"))]);
        let second = round(&[(2, b"c", Some(b"2")), (2, b"b", None)]);
        let run: Vec<Entry<'_>> = vec![(2, b"a", Some(b"3")), (2, b"d", Some(b"3"))];
        let merged = latest_in_group(&[&first, &second], 2, &run);
        let expected: Vec<Entry<'_>> = vec![(2, b"a", Some(b"3")), (2, b"b", None), (2, b"c", Some(b"2")), (2, b"d", Some(b"3"))];
        assert_eq!(merged, expected);
    }

    #[test]
    fn a_round_offers_bases_from_the_group_after_the_last_base_and_wraps() {
        let entries: Vec<Entry<'_>> = vec![(1, b"a", None), (1, b"b", None), (4, b"a", None), (9, b"a", None)];
        let runs: Vec<&[Entry<'_>]> = entries.chunk_by(|a, b| a.0 == b.0).collect();
        let order = |from| starting_at(&runs, from).map(|run| run[0].0).collect::<Vec<_>>();
        assert_eq!(order(0), [1, 4, 9]);
        assert_eq!(order(2), [4, 9, 1]);
        assert_eq!(order(9), [9, 1, 4]);
        assert_eq!(order(10), [1, 4, 9]);
        assert_eq!(starting_at(&runs, 5).map(<[Entry<'_>]>::len).sum::<usize>(), entries.len());
    }
}
