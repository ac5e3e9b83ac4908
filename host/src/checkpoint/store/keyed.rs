//! Keyed state in the checkpoint store: the materialized state of the last checkpoint
//! known committed (the *base*), and each later checkpoint's changes (its *delta*),
//! kept until that checkpoint is known committed and folded into the base.
//!
//! ```text
//! 0x02 len(job):u8 job  stage:u32be group:u32be key     -> framed value           (base)
//! 0x03 len(job):u8 job  n:u64be stage:u32be group:u32be key -> framed tag ‖ value  (delta of n)
//! 0x04 len(job):u8 job                                  -> framed n:u64le         (the base's checkpoint)
//! ```
//!
//! A delta's tag is 1 for a new value, 0 for a removal. Stage and group are big-endian,
//! so one stage's state sorts by key group and a subtask reads its contiguous range of
//! groups with one scan, whatever the parallelism that wrote it.

use std::ops::Range;

use rocksdb::{WriteBatch, WriteOptions};

use super::{Checkpoint, CheckpointStore, StoreError, frame, unframe};
use crate::state::StateChunk;

const STATE: u8 = 0x02;
const DELTA: u8 = 0x03;
const BASE: u8 = 0x04;
const TAG_REMOVED: u8 = 0;
const TAG_VALUE: u8 = 1;
/// Bytes of `n`, `stage` and `group` in a delta key.
const DELTA_HEAD: usize = 8 + 4 + 4;

/// One changed key of a stage: its group, the key, and its new value or `None`.
pub type Change<'a> = (u32, &'a [u8], Option<&'a [u8]>);

impl CheckpointStore {
    /// Writes one stage's changes of checkpoint `n`, which must not be sealed yet; the
    /// seal's synced write makes them durable. Returns the bytes of keys and values.
    pub fn put_changes<'a>(
        &self,
        n: u64,
        stage: u32,
        changes: impl IntoIterator<Item = Change<'a>>,
    ) -> Result<u64, StoreError> {
        let mut batch = WriteBatch::default();
        let mut bytes = 0u64;
        let mut payload = Vec::new();
        for (group, key, value) in changes {
            let delta_key = self.delta_key(n, stage, group, key);
            payload.clear();
            payload.push(if value.is_some() { TAG_VALUE } else { TAG_REMOVED });
            payload.extend_from_slice(value.unwrap_or_default());
            batch.put(&delta_key, frame(&delta_key, &payload).0);
            bytes += (key.len() + value.map_or(0, <[u8]>::len)) as u64;
        }
        self.db
            .write_opt(batch, &WriteOptions::default())
            .map_err(|source| self.rocks(format!("writing the state changes of stage {stage} for checkpoint {n}"), source))?;
        Ok(bytes)
    }

    /// The checkpoint the base reflects; 0 when the base is empty.
    pub fn state_checkpoint(&self) -> Result<u64, StoreError> {
        let key = self.space_key(BASE);
        let value = self
            .db
            .get_pinned(&key)
            .map_err(|source| self.rocks("reading the checkpoint of the keyed state".into(), source))?;
        let Some(value) = value else { return Ok(0) };
        let payload = unframe(&key, &value).map_err(|detail| self.state_corrupt(0, detail))?;
        let n: [u8; 8] = payload.try_into().map_err(|_| self.state_corrupt(0, format!("{} bytes", payload.len())))?;
        Ok(u64::from_le_bytes(n))
    }

    /// Folds the deltas of every checkpoint up to `n`, which is committed, into the base.
    /// One atomic write: a crash leaves the base as it was, deltas included.
    pub fn materialize(&self, n: u64) -> Result<(), StoreError> {
        let base = self.state_checkpoint()?;
        if n <= base {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        let mut iter = self.db.raw_iterator();
        let end = self.delta_start(n + 1);
        iter.seek(self.delta_start(base + 1));
        while let Some((key, value)) = iter.item() {
            if key >= &end[..] {
                break;
            }
            let (checkpoint, stage, group, user_key) = self.parse_delta_key(key)?;
            let payload = unframe(key, value).map_err(|detail| self.state_corrupt(checkpoint, detail))?;
            let state_key = self.state_key(stage, group, user_key);
            match payload.split_first() {
                Some((&TAG_VALUE, value)) => batch.put(&state_key, frame(&state_key, value).0),
                Some((&TAG_REMOVED, [])) => batch.delete(&state_key),
                _ => return Err(self.state_corrupt(checkpoint, "a change that is neither a value nor a removal".into())),
            }
            iter.next();
        }
        iter.status().map_err(|source| self.rocks(format!("reading the state changes up to checkpoint {n}"), source))?;
        batch.delete_range(self.delta_start(0), end);
        let base_key = self.space_key(BASE);
        batch.put(&base_key, frame(&base_key, &n.to_le_bytes()).0);
        self.db
            .write_opt(batch, &WriteOptions::default())
            .map_err(|source| self.rocks(format!("folding the state changes up to checkpoint {n} into the state"), source))
    }

    /// Recovery: makes the base the state of committed checkpoint `n` (0: a fresh start,
    /// so an empty state). Discards what came after `n` first. `Missing` if a checkpoint
    /// between the base and `n` is gone, so its changes cannot be had.
    pub fn restore_point(&self, n: u64) -> Result<(), StoreError> {
        self.discard_after(n)?;
        if n == 0 {
            // Unconditionally: a rebuild killed before its end leaves state without a base.
            return self.clear_state();
        }
        let base = self.state_checkpoint()?;
        if base > n {
            return Err(self.state_corrupt(
                base,
                format!("it holds the state of checkpoint {base}, newer than checkpoint {n} that Kafka's committed offsets name; the offsets were moved back outside weir"),
            ));
        }
        for k in base + 1..=n {
            let sealed = self
                .db
                .get_pinned(self.manifest_key(k))
                .map_err(|source| self.rocks(format!("reading the manifest of checkpoint {k}"), source))?
                .is_some();
            if !sealed {
                return Err(StoreError::Missing { dir: self.dir.clone(), job: self.job.clone(), n: k });
            }
        }
        self.materialize(n)
    }

    /// Reads `stage`'s state for `groups` in chunks of about `chunk_bytes`, calling `f` with
    /// each. Returns the number of entries.
    pub fn read_state<E: From<StoreError>>(
        &self,
        stage: u32,
        groups: Range<u32>,
        chunk_bytes: usize,
        mut f: impl FnMut(StateChunk) -> Result<(), E>,
    ) -> Result<u64, E> {
        let base = self.state_checkpoint()?;
        let start = self.state_key(stage, groups.start, b"");
        let end = self.state_key(stage, groups.end, b"");
        let snapshot = self.db.snapshot();
        let mut iter = snapshot.raw_iterator();
        iter.seek(&start);
        let mut chunk = StateChunk::default();
        let mut entries = 0;
        while let Some((key, value)) = iter.item() {
            if key >= &end[..] {
                break;
            }
            let value = unframe(key, value).map_err(|detail| self.state_corrupt(base, detail))?;
            let user_key = &key[start.len()..];
            if !chunk.is_empty() && chunk.data_len() + user_key.len() + value.len() > chunk_bytes {
                f(std::mem::take(&mut chunk))?;
            }
            chunk.push(user_key, Some(value));
            entries += 1;
            iter.next();
        }
        iter.status().map_err(|source| self.rocks(format!("reading the state of stage {stage}"), source))?;
        if !chunk.is_empty() {
            f(chunk)?;
        }
        Ok(entries)
    }

    /// Starts rebuilding the keyed state from elsewhere (the changelog): deletes every
    /// checkpoint, delta and the state. Until `finish_rebuild`, recovery finds no
    /// checkpoint here and rebuilds again.
    pub fn begin_rebuild(&self) -> Result<(), StoreError> {
        self.discard_after(0)?;
        self.clear_state()
    }

    /// Writes rebuilt state: each `(stage, group, key, state)`, `None` deleting the key.
    pub fn put_state<'a>(&self, entries: impl IntoIterator<Item = (u32, u32, &'a [u8], Option<&'a [u8]>)>) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        for (stage, group, key, state) in entries {
            let state_key = self.state_key(stage, group, key);
            match state {
                Some(state) => batch.put(&state_key, frame(&state_key, state).0),
                None => batch.delete(&state_key),
            }
        }
        self.db
            .write_opt(batch, &WriteOptions::default())
            .map_err(|source| self.rocks("writing rebuilt state".into(), source))
    }

    /// Ends a rebuild: seals `checkpoint` as the one the state now reflects.
    pub fn finish_rebuild(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let n = checkpoint.n;
        for (task, bytes) in &checkpoint.tasks {
            self.put(n, task, bytes)?;
        }
        let tasks: Vec<&str> = checkpoint.tasks.keys().map(String::as_str).collect();
        self.seal(n, &tasks, &checkpoint.meta)?;
        let base_key = self.space_key(BASE);
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        self.db
            .put_opt(&base_key, frame(&base_key, &n.to_le_bytes()).0, &sync)
            .map_err(|source| self.rocks(format!("marking the state as that of checkpoint {n}"), source))
    }

    /// Deletes the base and every delta: the job starts over with empty state.
    fn clear_state(&self) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.delete_range(self.space_key(STATE), self.space_end(STATE));
        batch.delete_range(self.space_key(DELTA), self.space_end(DELTA));
        batch.delete(self.space_key(BASE));
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        self.db.write_opt(batch, &sync).map_err(|source| self.rocks("clearing the keyed state".into(), source))
    }

    /// Deletes the deltas of checkpoints `from` and later (part of `discard_after`).
    pub(super) fn discard_deltas_from(&self, batch: &mut WriteBatch, from: u64) {
        batch.delete_range(self.delta_start(from), self.space_end(DELTA));
    }

    /// `[space, len(job), job..]`: the start of a key space of this job.
    fn space_key(&self, space: u8) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key[0] = space;
        key
    }

    /// Above every key of a space of this job.
    fn space_end(&self, space: u8) -> Vec<u8> {
        let mut key = self.space_key(space);
        key.extend_from_slice(&[0xff; DELTA_HEAD + 1]);
        key
    }

    fn state_key(&self, stage: u32, group: u32, key: &[u8]) -> Vec<u8> {
        let mut out = self.space_key(STATE);
        out.extend_from_slice(&stage.to_be_bytes());
        out.extend_from_slice(&group.to_be_bytes());
        out.extend_from_slice(key);
        out
    }

    fn delta_start(&self, n: u64) -> Vec<u8> {
        let mut out = self.space_key(DELTA);
        out.extend_from_slice(&n.to_be_bytes());
        out
    }

    fn delta_key(&self, n: u64, stage: u32, group: u32, key: &[u8]) -> Vec<u8> {
        let mut out = self.delta_start(n);
        out.extend_from_slice(&stage.to_be_bytes());
        out.extend_from_slice(&group.to_be_bytes());
        out.extend_from_slice(key);
        out
    }

    fn parse_delta_key<'k>(&self, key: &'k [u8]) -> Result<(u64, u32, u32, &'k [u8]), StoreError> {
        let head = key
            .get(self.prefix.len()..self.prefix.len() + DELTA_HEAD)
            .ok_or_else(|| self.state_corrupt(0, format!("a state change key of {} bytes", key.len())))?;
        let n = u64::from_be_bytes(head[..8].try_into().expect("8 bytes"));
        let stage = u32::from_be_bytes(head[8..12].try_into().expect("4 bytes"));
        let group = u32::from_be_bytes(head[12..].try_into().expect("4 bytes"));
        Ok((n, stage, group, &key[self.prefix.len() + DELTA_HEAD..]))
    }

    fn state_corrupt(&self, n: u64, detail: String) -> StoreError {
        StoreError::Corrupt { dir: self.dir.clone(), job: self.job.clone(), n, task: Some("keyed state".into()), detail }
    }
}
