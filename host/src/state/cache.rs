//! Keyed state in the checkpoint store: the materialized state of the last checkpoint
//! known committed (the *base*), with the changelog offsets from which a replay brings
//! it to the changelog's end. The changelog, written in each checkpoint's transaction,
//! is the state's record; the store is its local cache, written once a checkpoint is
//! committed and never on a checkpoint's path. The keyed half of `CheckpointStore`,
//! kept with the changelog it caches; `checkpoint/store.rs` lends it the RocksDB
//! handle, the framing and the key spaces, and knows nothing of what is in them.
//!
//! ```text
//! 0x02 len(job):u8 job  stage:u32be group:u32be key  -> framed value   (the base)
//! 0x04 len(job):u8 job                               -> framed marker  (what the base reflects)
//! 0x05 len(job):u8 job                               -> framed empty   (the changelog is being reseeded)
//! 0x06 len(job):u8 job  stage:u32be group:u32be      -> framed GroupLog (what the changelog holds of it)
//! ```
//!
//! The marker: n:u64le ‖ written_ms:i64le ‖ count:u32le ‖ count × (partition:i32le ‖
//! offset:i64le); a marker of 8 bytes (n alone) is what weir wrote up to commit 36c9be7,
//! with no offsets. Space 0x03 held each checkpoint's changes up to that commit; recovery
//! deletes what is left of it. Stage and group are big-endian, so one stage's state sorts
//! by key group and a subtask reads its contiguous range of groups with one scan,
//! whatever the parallelism that wrote it.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rocksdb::{IngestExternalFileOptions, SstFileWriter, WriteBatch};

use crate::checkpoint::store::{Checkpoint, CheckpointStore, INGEST_PREFIX, StoreError, frame_into, rocks_options, unframe};
use crate::chunk::{GroupLog, RestoreChunks, StateChunk};

const STATE: u8 = 0x02;
const BASE: u8 = 0x04;
/// Present while the changelog is being written afresh from the base.
const RESEED: u8 = 0x05;
/// Per stage and key group, what the changelog holds of it (`chunk::GroupLog`).
const LEDGER: u8 = 0x06;
/// Bytes of one changelog position in the marker.
const POSITION_BYTES: usize = 4 + 8;
/// Bytes of state changes a fold writes at a time.
const FOLD_BATCH_BYTES: usize = 4 << 20;
/// Room past `FOLD_BATCH_BYTES` for the change that fills a batch.
const FOLD_BATCH_SLACK: usize = 64 << 10;
/// Numbers those files apart within the process.
static INGESTS: AtomicU64 = AtomicU64::new(0);

/// A state key and its framed value, reused from one entry to the next.
#[derive(Default)]
struct Buffers {
    key: Vec<u8>,
    value: Vec<u8>,
}

/// One changed key of a stage: its group, the key, and its new value or `None`.
pub type Change<'a> = (u32, &'a [u8], Option<&'a [u8]>);

/// What the stored keyed state reflects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateBase {
    /// The committed checkpoint whose state the base holds; 0 when it is empty.
    pub n: u64,
    /// When the base was written, in ms since the Unix epoch (0: unknown).
    pub written_ms: i64,
    /// Per changelog partition, an offset at or before the first record written after
    /// checkpoint `n` (a partition not listed: its start). Replaying each partition from
    /// there to its end brings the base to the changelog's state. `None` when unknown
    /// (an older weir wrote the base): only a full rebuild can catch up then.
    pub positions: Option<BTreeMap<i32, i64>>,
}

/// How a fold reaches the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldDurability {
    /// Not synced and not logged (RocksDB's write-ahead log): a crash loses what was not
    /// yet flushed, in the order written, so a marker kept has its changes kept, and
    /// recovery replays from the changelog what the lost folds held. For exactly-once jobs: a replay reads only committed
    /// transactions, so it never reads past the checkpoint it recovers.
    Unlogged,
    /// Logged and synced before the fold returns. For at-least-once jobs: the next
    /// checkpoint writes the changelog outside a transaction, and a crash before its
    /// commit leaves its changes there; a replay from a lost fold's older marker would
    /// read them, and the state would count its input twice.
    Synced,
}

impl CheckpointStore {
    /// What the stored keyed state reflects.
    pub fn state_base(&self) -> Result<StateBase, StoreError> {
        let key = self.space_key(BASE);
        let value = self
            .db
            .get_pinned(&key)
            .map_err(|source| self.rocks("reading the checkpoint of the keyed state".into(), source))?;
        let Some(value) = value else { return Ok(StateBase::default()) };
        let payload = unframe(&key, &value).map_err(|detail| self.state_corrupt(0, detail))?;
        decode_base(payload).ok_or_else(|| self.state_corrupt(0, format!("a state marker of {} bytes", payload.len())))
    }

    /// Folds committed checkpoint `n`'s changes into the base and records `positions`
    /// with it; that last write reaches the disk as `durability` says. The changes go
    /// first, in batches of `FOLD_BATCH_BYTES`: RocksDB applies one write at a time, and
    /// the coordinator's writes wait behind each. A crash between them leaves some
    /// changes in the state with the marker before them, which a replay from its
    /// positions writes again.
    pub fn fold(
        &self,
        n: u64,
        changes: &[(u32, Change<'_>)],
        logs: impl IntoIterator<Item = (u32, u32, GroupLog)>,
        positions: &BTreeMap<i32, i64>,
        durability: FoldDurability,
    ) -> Result<(), StoreError> {
        let what = || format!("folding the state changes of checkpoint {n} into the state");
        let mut buffers = Buffers::default();
        let fresh = || WriteBatch::with_capacity_bytes(FOLD_BATCH_BYTES + FOLD_BATCH_SLACK);
        let mut batch = fresh();
        for &(stage, (group, key, value)) in changes {
            if batch.size_in_bytes() >= FOLD_BATCH_BYTES {
                let full = std::mem::replace(&mut batch, fresh());
                self.write_fold_part(full, durability, what)?;
            }
            self.put_state_into(&mut batch, &mut buffers, stage, group, key, value);
        }
        for (stage, group, log) in logs {
            self.put_log_into(&mut batch, &mut buffers, stage, group, &log);
        }
        self.put_base_into(&mut batch, n, positions);
        match durability {
            FoldDurability::Unlogged => self.write_unlogged(batch, what),
            FoldDurability::Synced => self.write_synced(batch, what),
        }
    }

    /// A fold's batch of changes before its last: unlogged, or logged and not yet synced
    /// (the last write syncs what it follows).
    fn write_fold_part(&self, batch: WriteBatch, durability: FoldDurability, what: impl FnOnce() -> String) -> Result<(), StoreError> {
        match durability {
            FoldDurability::Unlogged => self.write_unlogged(batch, what),
            FoldDurability::Synced => self.write_logged(batch, what),
        }
    }

    /// Recovery with no committed checkpoint (a fresh start), or before a rebuild from
    /// the whole changelog: deletes every checkpoint and all keyed state, synced.
    pub fn clear(&self) -> Result<(), StoreError> {
        self.discard_after(0)?;
        let mut batch = WriteBatch::default();
        let (start, end) = (self.space_key(STATE), self.space_end(STATE));
        // A range deletion over nothing would still keep the table files a rebuild hands
        // RocksDB (`ingest_state`) out of the bottom level, and costs their compaction.
        if self.holds_any(&start, &end)? {
            batch.delete_range(start, end);
        }
        batch.delete_range(self.space_key(LEDGER), self.space_end(LEDGER));
        batch.delete(self.space_key(BASE));
        batch.delete(self.space_key(RESEED));
        self.write_synced(batch, || "clearing the keyed state".into())
    }

    /// A scaled-out process's store keeps only the key groups it owns now: deletes the
    /// state of `groups` in `stages` stages, and records `positions` (those of the groups
    /// it keeps) as what the state reflects. Synced.
    pub fn drop_groups(&self, stages: u32, groups: impl IntoIterator<Item = u32>, positions: &BTreeMap<i32, i64>) -> Result<(), StoreError> {
        self.discard_after(0)?;
        let mut batch = WriteBatch::default();
        for group in groups {
            for stage in 0..stages {
                let (start, end) = (self.state_key(stage, group, b""), self.state_key(stage, group + 1, b""));
                // As in `clear`: no range deletion over nothing.
                if self.holds_any(&start, &end)? {
                    batch.delete_range(start, end);
                }
                batch.delete(self.ledger_key(stage, group));
            }
        }
        self.put_base_into(&mut batch, 0, positions);
        self.write_synced(batch, || "dropping the state of key groups this process no longer owns".into())
    }

    /// Starts writing the base (checkpoint `n`'s state) into a changelog that lost it,
    /// from `positions` (where that changelog ends now): until [`end_reseed`](Self::end_reseed),
    /// [`reseeding`](Self::reseeding) says so, and every recovery writes it again (an
    /// interrupted reseed committed only part). Synced.
    pub fn begin_reseed(&self, n: u64, positions: &BTreeMap<i32, i64>) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        let key = self.space_key(RESEED);
        let mut framed = Vec::new();
        frame_into(&key, b"", &mut framed);
        batch.put(&key, framed);
        self.put_base_into(&mut batch, n, positions);
        self.write_synced(batch, || format!("marking the state of checkpoint {n} for the changelog"))
    }

    /// The changelog holds the base again (a reseed's last transaction committed). Synced.
    pub fn end_reseed(&self) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.delete(self.space_key(RESEED));
        self.write_synced(batch, || "clearing the reseed marker".into())
    }

    /// True while a reseed of the changelog has not been committed.
    pub fn reseeding(&self) -> Result<bool, StoreError> {
        let key = self.space_key(RESEED);
        let value = self.db.get_pinned(&key).map_err(|source| self.rocks("reading the reseed marker".into(), source))?;
        Ok(value.is_some())
    }

    /// Reads `stage`'s state for `groups` in chunks of at most `chunk_bytes` of data (an
    /// entry bigger alone; `RestoreChunks`, as `weir check` restores), calling `f` with
    /// each. Returns the number of entries.
    pub fn read_state<E: From<StoreError>>(
        &self,
        stage: u32,
        groups: Range<u32>,
        chunk_bytes: usize,
        mut f: impl FnMut(StateChunk) -> Result<(), E>,
    ) -> Result<u64, E> {
        let base = self.state_base()?.n;
        let start = self.state_key(stage, groups.start, b"");
        let end = self.state_key(stage, groups.end, b"");
        let mut chunks = RestoreChunks::new(chunk_bytes);
        let mut entries = 0;
        let what = || format!("reading the state of stage {stage}");
        self.scan(&start, &end, base, what, |key, value| -> Result<(), E> {
            if let Some(full) = chunks.push(&key[start.len()..], value) {
                f(full)?;
            }
            entries += 1;
            Ok(())
        })?;
        if let Some(last) = chunks.finish() {
            f(last)?;
        }
        Ok(entries)
    }

    /// Calls `f` with each key and value of `stage`'s `group`, in key order, as they are
    /// at this call (a snapshot: a fold meanwhile is not seen).
    pub fn scan_group<E: From<StoreError>>(&self, stage: u32, group: u32, mut f: impl FnMut(&[u8], &[u8]) -> Result<(), E>) -> Result<(), E> {
        let start = self.state_key(stage, group, b"");
        let end = self.state_key(stage, group + 1, b"");
        let what = || format!("reading key group {group} of stage {stage}");
        self.scan(&start, &end, 0, what, |key, value| f(&key[start.len()..], value))
    }

    /// What the changelog holds of each of `stage`'s `groups` that it holds anything of.
    pub fn group_logs(&self, stage: u32, groups: Range<u32>) -> Result<BTreeMap<u32, GroupLog>, StoreError> {
        let (start, end) = (self.ledger_key(stage, groups.start), self.ledger_key(stage, groups.end));
        let mut logs = BTreeMap::new();
        let what = || format!("reading the changelog ledger of stage {stage}");
        self.scan(&start, &end, 0, what, |key, payload| -> Result<(), StoreError> {
            let detail = || format!("a changelog ledger entry of {} bytes", payload.len());
            let log = GroupLog::decode(payload).ok_or_else(|| self.state_corrupt(0, detail()))?;
            let group = key[key.len() - 4..].try_into().map(u32::from_be_bytes).expect("4 bytes");
            logs.insert(group, log);
            Ok(())
        })?;
        Ok(logs)
    }

    /// Whether any key lies in `start..end`.
    fn holds_any(&self, start: &[u8], end: &[u8]) -> Result<bool, StoreError> {
        let mut iter = self.db.raw_iterator();
        iter.seek(start);
        let found = iter.key().is_some_and(|key| key < end);
        iter.status().map_err(|source| self.rocks("looking for keyed state".into(), source))?;
        Ok(found)
    }

    /// Calls `f` with each key in `start..end` and its value unframed, in key order, as
    /// they are at this call (a snapshot: a fold meanwhile is not seen). A value that
    /// does not unframe is corrupt state of checkpoint `n`; `what` names the read in
    /// RocksDB's errors.
    fn scan<E: From<StoreError>>(
        &self,
        start: &[u8],
        end: &[u8],
        n: u64,
        what: impl FnOnce() -> String,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let snapshot = self.db.snapshot();
        let mut iter = snapshot.raw_iterator();
        iter.seek(start);
        while let Some((key, value)) = iter.item() {
            if key >= end {
                break;
            }
            let value = unframe(key, value).map_err(|detail| self.state_corrupt(n, detail))?;
            f(key, value)?;
            iter.next();
        }
        iter.status().map_err(|source| self.rocks(what(), source))?;
        Ok(())
    }

    /// Writes what a replay learned of the changelog: each `(stage, group, log)`.
    pub fn put_logs(&self, logs: impl IntoIterator<Item = (u32, u32, GroupLog)>) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        let mut buffers = Buffers::default();
        for (stage, group, log) in logs {
            self.put_log_into(&mut batch, &mut buffers, stage, group, &log);
        }
        self.write_unlogged(batch, || "writing the changelog ledger".into())
    }

    /// A replay read a complete base of `stage`'s `group` (`entries`, in key order): its
    /// state is that, whatever it was before. One atomic write; the keys it drops are
    /// deleted one by one (a range deletion per base would slow every later read).
    pub fn replace_group(&self, stage: u32, group: u32, entries: &[(&[u8], &[u8])]) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        let mut buffers = Buffers::default();
        let mut kept = entries.iter().map(|(key, _)| *key).peekable();
        self.scan_group(stage, group, |key, _| -> Result<(), StoreError> {
            while kept.next_if(|kept| *kept < key).is_some() {}
            if kept.peek() != Some(&key) {
                self.put_state_into(&mut batch, &mut buffers, stage, group, key, None);
            }
            Ok(())
        })?;
        for (key, value) in entries {
            self.put_state_into(&mut batch, &mut buffers, stage, group, key, Some(value));
        }
        self.write_unlogged(batch, || format!("writing a base of key group {group} of stage {stage} read from the changelog"))
    }

    /// After a reseed wrote one record per key: every group of `stages` holds such
    /// records and no base. Synced.
    pub fn mark_legacy(&self, stages: u32, groups: u32) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.delete_range(self.space_key(LEDGER), self.space_end(LEDGER));
        let mut buffers = Buffers::default();
        let legacy = GroupLog { legacy: true, ..GroupLog::default() };
        for stage in 0..stages {
            for group in 0..groups {
                self.put_log_into(&mut batch, &mut buffers, stage, group, &legacy);
            }
        }
        self.write_synced(batch, || "recording the changelog's records of one key each".into())
    }

    /// Writes replayed state: each `(stage, group, key, state)`, `None` deleting the key.
    pub fn put_state<'a>(&self, entries: impl IntoIterator<Item = (u32, u32, &'a [u8], Option<&'a [u8]>)>) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        let mut buffers = Buffers::default();
        for (stage, group, key, state) in entries {
            self.put_state_into(&mut batch, &mut buffers, stage, group, key, state);
        }
        self.write_unlogged(batch, || "writing state replayed from the changelog".into())
    }

    /// Writes replayed state of key groups the store holds nothing of: each `(stage,
    /// group, key, value)`, in stage, group and key order, each key once. They go into
    /// one table file that RocksDB takes in whole (`IngestExternalFile`): no memtable,
    /// no log, and on disk when this returns. Returns the number of entries.
    pub fn ingest_state<'a>(&self, entries: impl IntoIterator<Item = (u32, u32, &'a [u8], &'a [u8])>) -> Result<u64, StoreError> {
        let what = || "writing state replayed from the changelog into a table file".to_owned();
        let options = rocks_options();
        let mut writer = SstFileWriter::create(&options);
        let path = self.dir().join(format!("{INGEST_PREFIX}{}-{}.sst", std::process::id(), INGESTS.fetch_add(1, Ordering::Relaxed)));
        writer.open(&path).map_err(|source| self.rocks(what(), source))?;
        let mut buffers = Buffers::default();
        let mut written = 0;
        let result = entries.into_iter().try_for_each(|(stage, group, key, value)| {
            let Buffers { key: state_key, value: framed } = &mut buffers;
            self.state_key_into(stage, group, key, state_key);
            frame_into(state_key, value, framed);
            written += 1;
            writer.put(state_key.as_slice(), framed.as_slice())
        });
        let result = result.and_then(|()| if written == 0 { Ok(()) } else { writer.finish() });
        let result = result.and_then(|()| {
            if written == 0 {
                return Ok(());
            }
            let mut ingest = IngestExternalFileOptions::default();
            ingest.set_move_files(true);
            self.db.ingest_external_file_opts(&ingest, vec![&path])
        });
        drop(writer);
        let _ = std::fs::remove_file(&path);
        result.map_err(|source| self.rocks(what(), source))?;
        Ok(written)
    }

    /// Ends a replay: stores `checkpoint` (replacing one of that number sealed here but
    /// never committed) as the one the state now reflects, with the changelog
    /// `positions` the replay reached. Synced.
    pub fn finish_replay(&self, checkpoint: &Checkpoint, positions: &BTreeMap<i32, i64>) -> Result<(), StoreError> {
        let n = checkpoint.n;
        self.discard_after(n.saturating_sub(1))?;
        for (task, bytes) in &checkpoint.tasks {
            self.put(n, task, bytes)?;
        }
        let tasks: Vec<&str> = checkpoint.tasks.keys().map(String::as_str).collect();
        self.seal(n, &tasks, &checkpoint.meta)?;
        self.mark_state(n, positions)
    }

    /// Ends a replay into a store that holds checkpoint `n` already: the state is now
    /// that of `n` (or later), with the changelog `positions` the replay reached. Synced.
    pub fn mark_state(&self, n: u64, positions: &BTreeMap<i32, i64>) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        self.put_base_into(&mut batch, n, positions);
        self.write_synced(batch, || format!("marking the state as that of checkpoint {n}"))
    }

    fn put_state_into(&self, batch: &mut WriteBatch, buffers: &mut Buffers, stage: u32, group: u32, key: &[u8], value: Option<&[u8]>) {
        let Buffers { key: state_key, value: framed } = buffers;
        self.state_key_into(stage, group, key, state_key);
        match value {
            Some(value) => {
                frame_into(state_key, value, framed);
                batch.put(state_key.as_slice(), framed.as_slice());
            }
            None => batch.delete(state_key.as_slice()),
        }
    }

    fn put_log_into(&self, batch: &mut WriteBatch, buffers: &mut Buffers, stage: u32, group: u32, log: &GroupLog) {
        let Buffers { key, value } = buffers;
        *key = self.ledger_key(stage, group);
        frame_into(key, &log.encode(), value);
        batch.put(key.as_slice(), value.as_slice());
    }

    fn ledger_key(&self, stage: u32, group: u32) -> Vec<u8> {
        let mut key = self.space_key(LEDGER);
        key.extend_from_slice(&stage.to_be_bytes());
        key.extend_from_slice(&group.to_be_bytes());
        key
    }

    fn put_base_into(&self, batch: &mut WriteBatch, n: u64, positions: &BTreeMap<i32, i64>) {
        let written_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let key = self.space_key(BASE);
        let mut framed = Vec::new();
        frame_into(&key, &encode_base(n, written_ms, positions), &mut framed);
        batch.put(&key, framed);
    }

    fn state_key(&self, stage: u32, group: u32, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.state_key_into(stage, group, key, &mut out);
        out
    }

    fn state_key_into(&self, stage: u32, group: u32, key: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.prefix);
        out[0] = STATE;
        out.extend_from_slice(&stage.to_be_bytes());
        out.extend_from_slice(&group.to_be_bytes());
        out.extend_from_slice(key);
    }

    fn state_corrupt(&self, n: u64, detail: String) -> StoreError {
        StoreError::Corrupt { dir: self.dir().to_path_buf(), job: self.job().to_string(), n, task: Some("keyed state".into()), detail }
    }
}

fn encode_base(n: u64, written_ms: i64, positions: &BTreeMap<i32, i64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 8 + 4 + positions.len() * POSITION_BYTES);
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&written_ms.to_le_bytes());
    out.extend_from_slice(&(positions.len() as u32).to_le_bytes());
    for (&partition, &offset) in positions {
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
    }
    out
}

fn decode_base(payload: &[u8]) -> Option<StateBase> {
    let (n, rest) = payload.split_first_chunk::<8>()?;
    let n = u64::from_le_bytes(*n);
    if rest.is_empty() {
        return Some(StateBase { n, written_ms: 0, positions: None });
    }
    let (written_ms, rest) = rest.split_first_chunk::<8>()?;
    let (count, rest) = rest.split_first_chunk::<4>()?;
    if rest.len() != u32::from_le_bytes(*count) as usize * POSITION_BYTES {
        return None;
    }
    let position = |p: &[u8]| {
        let (partition, offset) = p.split_at(4);
        (i32::from_le_bytes(partition.try_into().expect("4 bytes")), i64::from_le_bytes(offset.try_into().expect("8 bytes")))
    };
    let positions = rest.chunks_exact(POSITION_BYTES).map(position).collect();
    Some(StateBase { n, written_ms: i64::from_le_bytes(*written_ms), positions: Some(positions) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_read_back_and_the_old_one_has_no_positions() {
        let positions = BTreeMap::from([(0, 17), (5, 1 << 40)]);
        let base = decode_base(&encode_base(9, 1234, &positions)).unwrap();
        assert_eq!(base, StateBase { n: 9, written_ms: 1234, positions: Some(positions) });
        assert_eq!(decode_base(&7u64.to_le_bytes()), Some(StateBase { n: 7, written_ms: 0, positions: None }));
        let cut = encode_base(9, 1, &BTreeMap::from([(1, 2)]));
        assert_eq!(decode_base(&cut[..cut.len() - 1]), None);
        assert_eq!(decode_base(&[1, 2, 3]), None);
    }
}
