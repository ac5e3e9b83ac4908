//! Reads changelog records into the store, in each partition's order: records of one
//! key each (what weir wrote before segments, and what an at-least-once job and a
//! reseed write), packed segments, and bases, each of which, once its end record is
//! read with every chunk before it, becomes its group's whole state. A base whose end
//! or chunks are missing (the cleaner removed part of a replaced one) is not used. The
//! store learns what the changelog holds of each group (`GroupLog`) from the same read.
//! Groups read from their start into a store that holds nothing of them are merged in
//! memory and taken in whole at the end (`emptied`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::Offset;
use rdkafka::message::{BorrowedMessage, Headers, Message};

use crate::checkpoint::layout::{self, ChangelogRecord};
use crate::checkpoint::store::{Checkpoint, CheckpointStore};
use crate::chunk::{GroupLog, StateChanges};
use crate::dataflow::{KeyGroups, TaskFailure};

use super::Placement;
use crate::job::Job;
use crate::metrics::progress::{self, Work};
use crate::state::MAX_SEGMENT_SEQ;
use crate::state::packed::{self, BaseEnd, Kind, PackedRecord};

use super::emptied::Emptied;

/// Replayed entries written to the store per batch, or fewer once they hold
/// `WRITE_BATCH_BYTES` of keys and values (an entry may hold a megabyte).
const WRITE_BATCH: usize = 100_000;
const WRITE_BATCH_BYTES: usize = 64 << 20;
/// The most threads a replay reads with, each a consumer of its own share of the
/// partitions (no more than the machine has cores): parsing and the store's writes are
/// most of a replay's work, and a partition's key groups are independent of the others'.
/// A new changelog has as many partitions (`placement::NEW_PARTITIONS`).
pub(super) const MAX_READERS: usize = 4;

/// What a replay read.
#[derive(Default)]
pub(super) struct Read {
    pub(super) entries: u64,
    /// The last checkpoint record read (partition 0 holds them).
    pub(super) checkpoint: Option<Checkpoint>,
    /// Per partition, the offset after the last record read, or where the read began.
    pub(super) positions: BTreeMap<i32, i64>,
    /// Per partition that held a record, the first one's offset.
    pub(super) firsts: BTreeMap<i32, i64>,
}

/// Whether the store holds anything of the key groups a replay reads from their start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Emptiness {
    /// Nothing: it was cleared, or their state dropped.
    Emptied,
    /// It may.
    Held,
}

/// Reads each of `starts` (a partition, from where) to its end into the store, the
/// partitions shared out over several threads, each a run of neighbouring ones (so that,
/// with one group per partition, the table files of groups read into nothing do not
/// overlap).
pub(super) fn read_into_store(
    job: &Job,
    store: &CheckpointStore,
    placement: Placement,
    topic: &str,
    (starts, emptiness): (&[(i32, Offset)], Emptiness),
) -> Result<Read, TaskFailure> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let readers = cores.min(MAX_READERS).min(starts.len()).max(1);
    let shares: Vec<Vec<(i32, Offset)>> = starts.chunks(starts.len().div_ceil(readers).max(1)).map(<[_]>::to_vec).collect();
    let running = progress::begin("restoring keyed state from the changelog", "offsets");
    let work = running.work();
    let ranges = &ranges(job, starts);
    let results: Vec<Result<Read, TaskFailure>> = std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .iter()
            .map(|share| scope.spawn(move || read_share(job, store, placement, topic, (share, emptiness, ranges), work)))
            .collect();
        // A reader's panic is the caller's, as if it had read alone.
        handles.into_iter().map(|handle| handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    let mut read = Read::default();
    for result in results {
        let share = result?;
        read.entries += share.entries;
        read.checkpoint = read.checkpoint.or(share.checkpoint);
        read.positions.extend(share.positions);
        read.firsts.extend(share.firsts);
    }
    Ok(read)
}

fn read_share(
    job: &Job,
    store: &CheckpointStore,
    placement: Placement,
    topic: &str,
    (share, emptiness, ranges): (&[(i32, Offset)], Emptiness, &Ranges),
    work: &Work,
) -> Result<Read, TaskFailure> {
    let positions = share.iter().filter_map(|&(partition, start)| start.to_raw().filter(|&at| at >= 0).map(|at| (partition, at))).collect();
    let emptied = match emptiness {
        Emptiness::Emptied => {
            share.iter().filter(|(_, start)| *start == Offset::Beginning).flat_map(|&(partition, _)| placement.groups_in(partition)).collect()
        }
        Emptiness::Held => BTreeSet::new(),
    };
    let consumer = super::reader_for(job, topic, share.iter().copied())?;
    let stages = u32::try_from(job.operators.len()).unwrap_or(u32::MAX);
    let mut replayed = Replayed::new(store, (placement, stages), (&job.name, topic), positions, Emptied::new(emptied));
    let mut firsts = BTreeMap::new();
    let mut read_progress = ReadProgress::expect(share, ranges, work);
    super::read_to_end(&consumer, topic, share.len() as u32, |partition, offset, message| {
        firsts.entry(partition).or_insert(offset);
        read_progress.read(partition, offset, message.payload_len() as u64, replayed.entries, work);
        replayed.add(partition, offset, message)
    })?;
    replayed.finish()?;
    read_progress.finish(replayed.entries, work);
    Ok(Read { entries: replayed.entries, checkpoint: replayed.checkpoint, positions: replayed.positions, firsts })
}

/// Per partition, its first and next offset.
type Ranges = BTreeMap<i32, (i64, i64)>;

/// Where each of `starts`' partitions begins and ends, in two requests; none if the
/// broker does not say (the progress estimate is then left out, not the read).
fn ranges(job: &Job, starts: &[(i32, Offset)]) -> Ranges {
    let partitions = starts.iter().map(|&(partition, _)| partition).collect();
    let ends = super::Ends::stable(job).and_then(|ends| Ok((ends.starts(&partitions)?, ends.of(&partitions)?)));
    match ends {
        Ok((lows, highs)) => {
            let highs: BTreeMap<i32, i64> = highs.into_iter().collect();
            lows.into_iter().filter_map(|(partition, low)| Some((partition, (low, *highs.get(&partition)?)))).collect()
        }
        Err(error) => {
            tracing::debug!("restore progress unknown: {error}");
            Ranges::new()
        }
    }
}

/// One reader's progress, handed to the shared counters in batches.
struct ReadProgress {
    /// Per partition, the offset read up to (where the read began, at first) and where
    /// it ended when the read began.
    at: BTreeMap<i32, (i64, i64)>,
    offsets: u64,
    bytes: u64,
    entries: u64,
    records: u32,
    flushed: Instant,
}

/// A reader hands its counts over after this many records, or this long, whichever first.
const COUNT_EVERY: u32 = 256;
const COUNT_INTERVAL: Duration = Duration::from_millis(500);

impl ReadProgress {
    /// Expects, per partition of the share, the offsets from where its read begins to
    /// its end (`ranges`: each partition's first and next offset, where known).
    fn expect(share: &[(i32, Offset)], ranges: &Ranges, work: &Work) -> ReadProgress {
        let mut at = BTreeMap::new();
        for &(partition, start) in share {
            let Some(&(low, high)) = ranges.get(&partition) else { continue };
            let from = start.to_raw().filter(|&offset| offset >= 0).map_or(low, |offset| offset.max(low));
            work.add_total(high.saturating_sub(from).max(0) as u64);
            at.insert(partition, (from, high));
        }
        ReadProgress { at, offsets: 0, bytes: 0, entries: 0, records: 0, flushed: Instant::now() }
    }

    fn read(&mut self, partition: i32, offset: i64, bytes: u64, entries: u64, work: &Work) {
        progress::pace();
        if let Some((at, _)) = self.at.get_mut(&partition) {
            self.offsets += (offset + 1).saturating_sub(*at).max(0) as u64;
            *at = (*at).max(offset + 1);
        }
        self.bytes += bytes;
        self.records += 1;
        if self.records >= COUNT_EVERY || self.flushed.elapsed() >= COUNT_INTERVAL {
            self.flush(entries, work);
        }
    }

    fn flush(&mut self, entries: u64, work: &Work) {
        work.add(self.offsets, entries - self.entries, self.bytes);
        (self.offsets, self.bytes, self.entries, self.records, self.flushed) = (0, 0, entries, 0, Instant::now());
    }

    /// Every partition read to its end: what is left of the expected offsets (commit
    /// markers, the cleaner's gaps after the last record) is done too.
    fn finish(&mut self, entries: u64, work: &Work) {
        for (at, high) in self.at.values_mut() {
            self.offsets += high.saturating_sub(*at).max(0) as u64;
            *at = (*at).max(*high);
        }
        self.flush(entries, work);
    }
}

/// A base being read: its id and the chunks read so far.
struct PendingBase {
    id: u64,
    chunks: BTreeMap<u32, Vec<u8>>,
}

/// What a replay has read so far.
pub(super) struct Replayed<'a> {
    store: &'a CheckpointStore,
    placement: Placement,
    key_groups: KeyGroups,
    /// The job's operators: a record of a stage past them is no record of this job.
    stages: u32,
    job: &'a str,
    topic: &'a str,
    /// Replayed entries not yet written, by stage, in the order read.
    pending: BTreeMap<u32, StateChanges>,
    /// The groups read into nothing, and what is held of them.
    emptied: Emptied,
    pending_entries: usize,
    /// Bytes of keys and values pending.
    pending_bytes: usize,
    /// Per (stage, group), what the changelog holds of it, for those read.
    logs: BTreeMap<(u32, u32), GroupLog>,
    bases: BTreeMap<(u32, u32), PendingBase>,
    entries: u64,
    checkpoint: Option<Checkpoint>,
    /// Per partition, the offset after the last record read.
    positions: BTreeMap<i32, i64>,
}

impl<'a> Replayed<'a> {
    /// Nothing read yet, of a job of `stages` operators; `positions`: where the read
    /// starts, per partition.
    fn new(
        store: &'a CheckpointStore,
        (placement, stages): (Placement, u32),
        (job, topic): (&'a str, &'a str),
        positions: BTreeMap<i32, i64>,
        emptied: Emptied,
    ) -> Self {
        Replayed {
            store,
            placement,
            key_groups: placement.groups(),
            stages,
            job,
            topic,
            pending: BTreeMap::new(),
            emptied,
            pending_entries: 0,
            pending_bytes: 0,
            logs: BTreeMap::new(),
            bases: BTreeMap::new(),
            entries: 0,
            checkpoint: None,
            positions,
        }
    }

    fn add(&mut self, partition: i32, offset: i64, message: &BorrowedMessage<'_>) -> Result<(), TaskFailure> {
        self.positions.insert(partition, offset + 1);
        let (topic, job) = (self.topic, self.job);
        let foreign = |why: String| {
            TaskFailure::Incompatible(format!(
                "the changelog topic `{topic}` holds a record weir did not write for job `{job}` at partition {partition} \
                 offset {offset}: {why}. Give the job a changelog topic of its own (changelog_topic)"
            ))
        };
        let key = message.key().ok_or_else(|| foreign("it has no key".into()))?;
        if let Some(packed) = PackedRecord::parse(key, message.payload()) {
            let packed = packed.map_err(|why| match packed::newer_version(key) {
                Some(version) => TaskFailure::Incompatible(format!(
                    "the changelog topic `{topic}` holds a record of packed format version {version} at partition \
                     {partition} offset {offset}, newer than this weir reads: a newer weir wrote it. Run the job \
                     with that weir or a newer one"
                )),
                None => foreign(why),
            })?;
            let (stage, group) = (packed.key.stage, packed.key.group);
            if stage >= self.stages {
                return Err(self.past_the_operators(stage, (partition, offset)));
            }
            if group >= self.key_groups.count() || self.placement.partition_of(group) != partition {
                let groups = self.key_groups.count();
                return Err(foreign(format!("a packed record of key group {group}, which is not in this partition of a job of {groups} key groups")));
            }
            return self.add_packed(packed).map_err(|why| match why {
                Replay::Foreign(why) => foreign(why),
                Replay::Failed(failure) => failure,
            });
        }
        match layout::parse_changelog(key, message.payload()).map_err(foreign)? {
            ChangelogRecord::Checkpoint(checkpoint) => {
                let job = message.headers().and_then(|headers| {
                    headers.iter().find(|h| h.key == layout::CHANGELOG_JOB_HEADER).and_then(|h| h.value)
                });
                if job != Some(self.job.as_bytes()) {
                    let why = format!("a checkpoint record whose `{}` header is not `{}`", layout::CHANGELOG_JOB_HEADER, self.job);
                    return Err(foreign(why));
                }
                self.checkpoint = Some(checkpoint);
            }
            ChangelogRecord::State { stage, key, state } => {
                if stage >= self.stages {
                    return Err(self.past_the_operators(stage, (partition, offset)));
                }
                let group = self.key_groups.group_of(Some(key));
                if self.placement.partition_of(group) != partition {
                    return Err(foreign(format!("its key belongs to key group {group}, which is not in this partition")));
                }
                self.log(stage, group)?.legacy = true;
                self.push(stage, group, key, state)?;
            }
        }
        Ok(())
    }

    /// A record of operator `stage`, which the job does not have: most likely, the job
    /// file lost an operator since the checkpoints were taken.
    fn past_the_operators(&self, stage: u32, (partition, offset): (i32, i64)) -> TaskFailure {
        let (topic, job, stages) = (self.topic, self.job, self.stages);
        let operators = if stages == 1 { "operator" } else { "operators" };
        TaskFailure::Incompatible(format!(
            "the changelog topic `{topic}` holds state of operator {stage} (counting from 0) at partition {partition} \
             offset {offset}, and job `{job}` has {stages} {operators}: the job file lost operators since its \
             checkpoints were taken, or another writer wrote the record. Restore the job file the checkpoints were \
             taken with, or start over deliberately under a new job name"
        ))
    }

    fn add_packed(&mut self, record: PackedRecord<'_>) -> Result<(), Replay> {
        // A removal of a record a base replaced.
        let PackedRecord { key, version, body: Some(value) } = record else { return Ok(()) };
        let (stage, group) = (key.stage, key.group);
        match key.kind {
            Kind::Segment => {
                if key.seq > MAX_SEGMENT_SEQ {
                    return Err(Replay::Foreign(format!("segment number {} of key group {group}, past {MAX_SEGMENT_SEQ}", key.seq)));
                }
                let entries = packed::entries(value).map_err(Replay::Foreign)?;
                let bytes: usize = entries.iter().map(|(key, value)| key.len() + value.map_or(0, <[u8]>::len)).sum();
                let log = self.log(stage, group)?;
                // A segment of an older base than the group's is one whose key no later
                // segment has taken yet; the base after it replaces what it holds.
                if log.base == key.base {
                    log.segments = log.segments.max(key.seq + 1);
                    log.segment_bytes += bytes as u64;
                }
                log.slots = log.slots.max(key.seq + 1);
                log.v1_keys |= version == packed::VERSION_1;
                for (entry_key, state) in entries {
                    self.check_group(group, entry_key)?;
                    self.push(stage, group, entry_key, state)?;
                }
            }
            Kind::BaseChunk => {
                let base = self.bases.entry((stage, group)).or_insert_with(|| PendingBase { id: key.base, chunks: BTreeMap::new() });
                if base.id != key.base {
                    // A base whose end never came: replaced by this one.
                    *base = PendingBase { id: key.base, chunks: BTreeMap::new() };
                }
                base.chunks.insert(key.seq, value.to_vec());
            }
            Kind::BaseEnd => {
                let end = BaseEnd::decode(value).map_err(Replay::Foreign)?;
                let base = self.bases.remove(&(stage, group)).filter(|base| base.id == key.base);
                let chunks = base.map(|base| base.chunks).unwrap_or_default();
                let complete = chunks.len() == end.chunks as usize && chunks.keys().copied().eq(0..end.chunks);
                if !complete {
                    tracing::debug!(stage, group, base = key.base, "a base of which the changelog holds no longer every chunk: not used");
                    return Ok(());
                }
                self.replace(stage, group, (key.base, version), &end, &chunks)?;
            }
        }
        Ok(())
    }

    /// A complete base (its id and format version): the group's state is what it holds.
    fn replace(&mut self, stage: u32, group: u32, (id, version): (u64, u8), end: &BaseEnd, chunks: &BTreeMap<u32, Vec<u8>>) -> Result<(), Replay> {
        let mut entries = Vec::new();
        for chunk in chunks.values() {
            for (key, value) in packed::entries(chunk).map_err(Replay::Foreign)? {
                let value = value.ok_or_else(|| Replay::Foreign(format!("a base of key group {group} holds a removal")))?;
                self.check_group(group, key)?;
                entries.push((key, value));
            }
        }
        if entries.len() as u64 != end.entries {
            return Err(Replay::Foreign(format!("a base of {} entries whose end counts {}", entries.len(), end.entries)));
        }
        if !entries.is_sorted_by(|a, b| a.0 < b.0) {
            return Err(Replay::Foreign(format!("a base of key group {group} whose keys are not in order")));
        }
        if self.emptied.holds(group) {
            self.emptied.replace(stage, group, &entries);
            if self.emptied.full() {
                self.emptied.write(self.store).map_err(|e| Replay::Failed(e.into()))?;
            }
        } else {
            self.flush().map_err(Replay::Failed)?;
            self.store.replace_group(stage, group, &entries).map_err(|e| Replay::Failed(e.into()))?;
        }
        self.entries += entries.len() as u64;
        let slots = self.log(stage, group)?.slots;
        let v1_keys = version == packed::VERSION_1;
        let log = GroupLog { base: id, base_bytes: end.bytes, base_chunks: end.chunks, slots, v1_keys, ..GroupLog::default() };
        self.logs.insert((stage, group), log);
        Ok(())
    }

    fn check_group(&self, group: u32, key: &[u8]) -> Result<(), Replay> {
        let found = self.key_groups.group_of(Some(key));
        match found == group {
            true => Ok(()),
            false => Err(Replay::Foreign(format!("a packed record of key group {group} holds a key of group {found}"))),
        }
    }

    /// What the changelog holds of the group, as read so far (from the store at first).
    fn log(&mut self, stage: u32, group: u32) -> Result<&mut GroupLog, StoreFailure> {
        if !self.logs.contains_key(&(stage, group)) {
            let stored = self.store.group_logs(stage, group..group + 1)?.remove(&group).unwrap_or_default();
            self.logs.insert((stage, group), stored);
        }
        Ok(self.logs.get_mut(&(stage, group)).expect("just inserted"))
    }

    fn push(&mut self, stage: u32, group: u32, key: &[u8], state: Option<&[u8]>) -> Result<(), TaskFailure> {
        self.entries += 1;
        if self.emptied.holds(group) {
            self.emptied.push(stage, group, key, state);
            if self.emptied.full() {
                self.emptied.write(self.store)?;
            }
            return Ok(());
        }
        self.pending.entry(stage).or_insert_with(|| StateChanges::new(stage)).push(group, key, state);
        self.pending_entries += 1;
        self.pending_bytes += key.len() + state.map_or(0, <[u8]>::len);
        if self.pending_entries >= WRITE_BATCH || self.pending_bytes >= WRITE_BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes what is left: the pending entries, then the groups read into nothing.
    fn finish(&mut self) -> Result<(), TaskFailure> {
        self.flush()?;
        self.emptied.write(self.store)?;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TaskFailure> {
        for (_, mut changes) in std::mem::take(&mut self.pending) {
            // A key read twice comes twice, in the order read: the later record wins.
            let _ = changes.sort();
            let stage = changes.stage;
            self.store.put_state(changes.entries().map(|(group, key, state)| (stage, group, key, state)))?;
        }
        (self.pending_entries, self.pending_bytes) = (0, 0);
        self.store.put_logs(self.logs.iter().map(|(&(stage, group), log)| (stage, group, *log)))?;
        Ok(())
    }
}

/// Why a packed record could not be replayed.
enum Replay {
    /// It is no record weir wrote (this says why).
    Foreign(String),
    Failed(TaskFailure),
}

/// The store failed while the ledger was read.
type StoreFailure = crate::checkpoint::store::StoreError;

impl From<StoreFailure> for Replay {
    fn from(error: StoreFailure) -> Self {
        Replay::Failed(error.into())
    }
}

impl From<TaskFailure> for Replay {
    fn from(failure: TaskFailure) -> Self {
        Replay::Failed(failure)
    }
}
