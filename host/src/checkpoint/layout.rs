//! The checkpoint format's single owner: how tasks are named in the store, how each
//! task's entry and the job's shape are encoded, and which format wrote them. Every
//! format ever written stays readable: the shape records its format, and each decoder
//! dispatches on it, so a change here never turns an old checkpoint into "corrupt".
//!
//! | format | shape (the manifest's metadata) | source entry | operator entry |
//! |---|---|---|---|
//! | 0 (up to commit e4e419b) | JSON, no `format` field | JSON list of partition states | watermark i64le, guest bytes |
//! | 1 | JSON `{"format": 1, "shape": {..}}` | packed: count u32le, then per partition i32le, i64le, i64le | as format 0 |
//! | 2 | as format 1, the shape with `key_groups` | as format 1 | watermark i64le only |
//!
//! Formats 0 and 1 hold each operator subtask's whole state in its entry (plugins of
//! weir:operator@0.1). From format 2 on, keyed state lives apart, per key group, in
//! the store's state key space (`state/cache.rs`); the entry keeps the watermark.
//!
//! From format 2 on, every checkpoint is also in the job's changelog topic (DESIGN.md §5),
//! in the checkpoint's own Kafka transaction: each changed key as a record in partition
//! = its key group, key = stage u32be ‖ key, value = 0x01 ‖ state (none: a removal,
//! which compaction then drops); and the checkpoint record, with header `weir.job` =
//! the job, in partition 0, key = `CHECKPOINT_RECORD_KEY`, value = n u64le ‖ meta len u32le ‖
//! meta ‖ per task (name len u16le ‖ name ‖ len u32le ‖ entry). Compaction keeps each
//! key's last record, so the topic read to its end is the state of the last committed
//! checkpoint.
//!
//! Format 1 nests the shape so that a weir that reads only format 0 refuses it as an
//! unreadable job description (it cannot go back) rather than reading its packed
//! entries as corrupt JSON. Each format's serde structs are its own and frozen: the
//! types the engine uses may change without changing how an old checkpoint reads.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::store::Checkpoint;

/// The format this build writes.
pub const FORMAT: u32 = 2;
/// The most key groups a job has, and so a recorded shape or offset may name: a count
/// read back is bounded before anything is sized by it.
pub const MAX_KEY_GROUPS: u32 = 32_768;

/// The header naming the job on the changelog's checkpoint records.
pub const CHANGELOG_JOB_HEADER: &str = "weir.job";
/// The key of the checkpoint record; its stage, `u32::MAX`, is no operator's.
pub const CHECKPOINT_RECORD_KEY: &[u8] = b"\xff\xff\xff\xffcheckpoint";
const CHANGELOG_VALUE_TAG: u8 = 1;

/// Kafka offset metadata: names the checkpoint that the committed offsets belong to.
const OFFSET_METADATA_PREFIX: &str = "weir:ckpt=";
/// Bytes of one partition in a packed source entry.
const PARTITION_BYTES: usize = 4 + 8 + 8;
const WATERMARK_BYTES: usize = 8;

/// A task that checkpoints state: a source task, or a subtask of the operator at a
/// position of the chain. Its store name (`Display`) is part of the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaskId {
    Source { index: u32 },
    Operator { stage: u32, subtask: u32 },
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskId::Source { index } => write!(f, "source/{index}"),
            TaskId::Operator { stage, subtask } => write!(f, "op/{stage}/{subtask}"),
        }
    }
}

impl TaskId {
    /// The inverse of `Display`; `None` for a name no format has used.
    pub fn parse(name: &str) -> Option<TaskId> {
        // Digits only, without leading zeros: one name per task.
        let canonical = |text: &str| {
            !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'))
        };
        let number = |text: &str| text.parse::<u32>().ok().filter(|_| canonical(text));
        match name.split('/').collect::<Vec<_>>().as_slice() {
            ["source", index] => Some(TaskId::Source { index: number(index)? }),
            ["op", stage, subtask] => Some(TaskId::Operator { stage: number(stage)?, subtask: number(subtask)? }),
            _ => None,
        }
    }

    /// Whether a job of `shape` has this task.
    fn fits(&self, shape: &Shape) -> bool {
        match *self {
            TaskId::Source { index } => index < shape.parallelism.saturating_mul(shape.sources()),
            TaskId::Operator { stage, subtask } => (stage as usize) < shape.operators.len() && subtask < shape.parallelism,
        }
    }
}

/// What a source task checkpoints for one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionState {
    pub partition: i32,
    /// The offset of the next record to read: a real offset, never a logical one.
    pub next_offset: i64,
    /// The largest event time read so far (`i64::MIN` before the first record).
    pub max_timestamp: i64,
}

/// What a checkpoint's state is valid for: the same chain reading the same topic
/// with the same key groups. The parallelism it ran with is recorded, not required.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub parallelism: u32,
    /// `None` in formats 0 and 1, whose state was per subtask.
    pub key_groups: Option<u32>,
    pub operators: Vec<String>,
    /// The input topic, or a job graph's input topics in source order joined by `,`
    /// (which no topic name holds): the order fixes the ids of their partitions.
    pub source_topic: String,
}

impl Shape {
    /// How many sources the job reads: `parallelism` source tasks each.
    pub fn sources(&self) -> u32 {
        u32::try_from(self.source_topic.split(',').count()).unwrap_or(u32::MAX)
    }
}

/// An operator subtask's entry: the event time it had reached and, in formats 0 and
/// 1, the guest's whole snapshot (empty from format 2 on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorState {
    pub watermark: i64,
    pub guest: Vec<u8>,
}

/// A checkpoint as the engine restores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub n: u64,
    /// The format that wrote it.
    pub format: u32,
    pub shape: Shape,
    pub partitions: BTreeMap<i32, PartitionState>,
    pub operators: BTreeMap<(u32, u32), OperatorState>,
}

/// Why a stored checkpoint cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error(
        "it was written by a newer weir (checkpoint format {found}; this weir reads formats 0 to {FORMAT}): \
         run that weir or a newer one"
    )]
    Newer { found: u32 },
    #[error("{detail}")]
    Corrupt { task: Option<String>, detail: String },
}

impl FormatError {
    fn entry(task: &str, detail: impl Into<String>) -> FormatError {
        FormatError::Corrupt { task: Some(task.to_string()), detail: detail.into() }
    }
}

/// The job shape as formats 0 and 1 write it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShapeV0 {
    parallelism: u32,
    operators: Vec<String>,
    source_topic: String,
}

/// Format 1's metadata: the format, and the shape nested under it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetaV1 {
    format: u32,
    shape: ShapeV0,
}

/// The job shape as format 2 writes it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShapeV2 {
    parallelism: u32,
    key_groups: u32,
    operators: Vec<String>,
    source_topic: String,
}

/// Format 2's metadata.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetaV2 {
    format: u32,
    shape: ShapeV2,
}

/// A partition of a format-0 source entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionV0 {
    partition: i32,
    next_offset: i64,
    max_timestamp: i64,
}

impl From<ShapeV0> for Shape {
    fn from(v0: ShapeV0) -> Shape {
        Shape { parallelism: v0.parallelism, key_groups: None, operators: v0.operators, source_topic: v0.source_topic }
    }
}

impl From<ShapeV2> for Shape {
    fn from(v2: ShapeV2) -> Shape {
        Shape {
            parallelism: v2.parallelism,
            key_groups: Some(v2.key_groups),
            operators: v2.operators,
            source_topic: v2.source_topic,
        }
    }
}

/// The manifest's metadata for `shape`, in this build's format.
///
/// # Panics
/// If `shape` has no key groups: this build's checkpoints always do.
pub fn encode_shape(shape: &Shape) -> Vec<u8> {
    let shape = ShapeV2 {
        parallelism: shape.parallelism,
        key_groups: shape.key_groups.expect("a format-2 shape has key groups"),
        operators: shape.operators.clone(),
        source_topic: shape.source_topic.clone(),
    };
    serde_json::to_vec(&MetaV2 { format: FORMAT, shape }).expect("a shape serializes")
}

/// A source task's entry, in this build's format.
pub fn encode_source(states: &[PartitionState]) -> Vec<u8> {
    let count = u32::try_from(states.len()).expect("a source task holds fewer than 2^32 partitions");
    let mut bytes = Vec::with_capacity(4 + states.len() * PARTITION_BYTES);
    bytes.extend_from_slice(&count.to_le_bytes());
    for state in states {
        bytes.extend_from_slice(&state.partition.to_le_bytes());
        bytes.extend_from_slice(&state.next_offset.to_le_bytes());
        bytes.extend_from_slice(&state.max_timestamp.to_le_bytes());
    }
    bytes
}

/// An operator subtask's entry, in this build's format.
pub fn encode_operator(watermark: i64) -> Vec<u8> {
    watermark.to_le_bytes().to_vec()
}

/// Reads a loaded checkpoint in whichever format wrote it.
pub fn decode(checkpoint: &Checkpoint) -> Result<Snapshot, FormatError> {
    let (format, shape) = decode_shape(&checkpoint.meta)?;
    let mut snapshot =
        Snapshot { n: checkpoint.n, format, shape, partitions: BTreeMap::new(), operators: BTreeMap::new() };
    for (name, bytes) in &checkpoint.tasks {
        match TaskId::parse(name).filter(|task| task.fits(&snapshot.shape)) {
            Some(TaskId::Source { .. }) => {
                for state in decode_source(format, name, bytes)? {
                    if snapshot.partitions.insert(state.partition, state).is_some() {
                        let detail = format!("partition {} is also in another source entry", state.partition);
                        return Err(FormatError::entry(name, detail));
                    }
                }
            }
            Some(TaskId::Operator { stage, subtask }) => {
                let state = decode_operator(format, name, bytes)?;
                snapshot.operators.insert((stage, subtask), state);
            }
            None => return Err(FormatError::entry(name, "no task of the checkpoint's job shape has this name")),
        }
    }
    Ok(snapshot)
}

fn decode_shape(meta: &[u8]) -> Result<(u32, Shape), FormatError> {
    let corrupt = |e: serde_json::Error| FormatError::Corrupt {
        task: None,
        detail: format!("its job shape is unreadable: {e}"),
    };
    let value: Value = serde_json::from_slice(meta).map_err(corrupt)?;
    let format = match value.get("format") {
        None => 0,
        Some(found) => found.as_u64().and_then(|f| u32::try_from(f).ok()).ok_or_else(|| FormatError::Corrupt {
            task: None,
            detail: format!("its format is {found}, not a format number"),
        })?,
    };
    match format {
        0 => Ok((0, serde_json::from_value::<ShapeV0>(value).map_err(corrupt)?.into())),
        1 => Ok((1, serde_json::from_value::<MetaV1>(value).map_err(corrupt)?.shape.into())),
        2 => {
            let shape: Shape = serde_json::from_value::<MetaV2>(value).map_err(corrupt)?.shape.into();
            if let Some(count) = shape.key_groups.filter(|count| !(1..=MAX_KEY_GROUPS).contains(count)) {
                let detail = format!("its job shape has {count} key groups, outside 1..={MAX_KEY_GROUPS}");
                return Err(FormatError::Corrupt { task: None, detail });
            }
            Ok((2, shape))
        }
        newer => Err(FormatError::Newer { found: newer }),
    }
}

fn decode_source(format: u32, name: &str, bytes: &[u8]) -> Result<Vec<PartitionState>, FormatError> {
    if format == 0 {
        let partitions: Vec<PartitionV0> =
            serde_json::from_slice(bytes).map_err(|e| FormatError::entry(name, format!("unreadable: {e}")))?;
        let state = |p: PartitionV0| PartitionState {
            partition: p.partition,
            next_offset: p.next_offset,
            max_timestamp: p.max_timestamp,
        };
        return Ok(partitions.into_iter().map(state).collect());
    }
    let (count, packed) = bytes.split_first_chunk::<4>().ok_or_else(|| FormatError::entry(name, "shorter than its count"))?;
    let count = u32::from_le_bytes(*count) as usize;
    if packed.len() != count.saturating_mul(PARTITION_BYTES) {
        return Err(FormatError::entry(
            name,
            format!("{} bytes for {count} partitions of {PARTITION_BYTES} bytes", packed.len()),
        ));
    }
    let states = packed.chunks_exact(PARTITION_BYTES).map(|chunk| {
        let (partition, rest) = chunk.split_first_chunk::<4>().expect("chunk of PARTITION_BYTES");
        let (next_offset, max_timestamp) = rest.split_first_chunk::<8>().expect("chunk of PARTITION_BYTES");
        PartitionState {
            partition: i32::from_le_bytes(*partition),
            next_offset: i64::from_le_bytes(*next_offset),
            max_timestamp: i64::from_le_bytes(max_timestamp.try_into().expect("8 bytes")),
        }
    });
    Ok(states.collect())
}

fn decode_operator(format: u32, name: &str, bytes: &[u8]) -> Result<OperatorState, FormatError> {
    let (watermark, guest) =
        bytes.split_first_chunk::<WATERMARK_BYTES>().ok_or_else(|| FormatError::entry(name, "shorter than its header"))?;
    if format >= 2 && !guest.is_empty() {
        return Err(FormatError::entry(name, format!("{} bytes after its watermark", guest.len())));
    }
    Ok(OperatorState { watermark: i64::from_le_bytes(*watermark), guest: guest.to_vec() })
}

/// A changed key's changelog record key.
pub fn changelog_key(stage: u32, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    changelog_key_into(stage, key, &mut out);
    out
}

/// `changelog_key` into a reused buffer.
pub fn changelog_key_into(stage: u32, key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&stage.to_be_bytes());
    out.extend_from_slice(key);
}

/// A changed key's changelog record value.
pub fn changelog_value(state: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    changelog_value_into(state, &mut out);
    out
}

/// `changelog_value` into a reused buffer.
pub fn changelog_value_into(state: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.push(CHANGELOG_VALUE_TAG);
    out.extend_from_slice(state);
}

/// What a changelog record holds.
#[derive(Debug, PartialEq, Eq)]
pub enum ChangelogRecord<'a> {
    /// A key's state, or its removal (`None`).
    State { stage: u32, key: &'a [u8], state: Option<&'a [u8]> },
    /// A checkpoint's manifest and task entries.
    Checkpoint(Checkpoint),
}

/// Reads a changelog record; the error says why it is no weir record of this format.
pub fn parse_changelog<'a>(key: &'a [u8], value: Option<&'a [u8]>) -> Result<ChangelogRecord<'a>, String> {
    if key == CHECKPOINT_RECORD_KEY {
        let value = value.ok_or("a checkpoint record without a value")?;
        return parse_checkpoint_record(value).map(ChangelogRecord::Checkpoint);
    }
    let (stage, key) = key.split_first_chunk::<4>().ok_or_else(|| format!("a key of {} bytes", key.len()))?;
    let stage = u32::from_be_bytes(*stage);
    if stage == u32::MAX {
        return Err("a key of the reserved stage".into());
    }
    let state = match value {
        None => None,
        Some([CHANGELOG_VALUE_TAG, state @ ..]) => Some(state),
        Some(other) => return Err(format!("a value of {} bytes not tagged {CHANGELOG_VALUE_TAG}", other.len())),
    };
    Ok(ChangelogRecord::State { stage, key, state })
}

/// The changelog's checkpoint record of `checkpoint`.
///
/// # Panics
/// If a task name is 64 KiB or longer or an entry or the meta 4 GiB or more; the
/// store's limits keep them far below.
pub fn checkpoint_record(checkpoint: &Checkpoint) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&checkpoint.n.to_le_bytes());
    let len32 = |len: usize| u32::try_from(len).expect("below 4 GiB").to_le_bytes();
    out.extend_from_slice(&len32(checkpoint.meta.len()));
    out.extend_from_slice(&checkpoint.meta);
    for (name, bytes) in &checkpoint.tasks {
        out.extend_from_slice(&u16::try_from(name.len()).expect("a short task name").to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&len32(bytes.len()));
        out.extend_from_slice(bytes);
    }
    out
}

fn parse_checkpoint_record(mut bytes: &[u8]) -> Result<Checkpoint, String> {
    fn take<'b>(bytes: &mut &'b [u8], n: usize) -> Result<&'b [u8], String> {
        if bytes.len() < n {
            return Err(format!("a checkpoint record cut short ({} bytes left, {n} needed)", bytes.len()));
        }
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(head)
    }
    let n = u64::from_le_bytes(take(&mut bytes, 8)?.try_into().expect("8 bytes"));
    let meta_len = u32::from_le_bytes(take(&mut bytes, 4)?.try_into().expect("4 bytes")) as usize;
    let meta = take(&mut bytes, meta_len)?.to_vec();
    let mut tasks = BTreeMap::new();
    while !bytes.is_empty() {
        let name_len = u16::from_le_bytes(take(&mut bytes, 2)?.try_into().expect("2 bytes")) as usize;
        let name = String::from_utf8(take(&mut bytes, name_len)?.to_vec()).map_err(|_| "a task name that is not UTF-8")?;
        let len = u32::from_le_bytes(take(&mut bytes, 4)?.try_into().expect("4 bytes")) as usize;
        tasks.insert(name, take(&mut bytes, len)?.to_vec());
    }
    Ok(Checkpoint { n, meta, tasks })
}

/// The offset metadata a single process commits with checkpoint `n` for a partition
/// whose greatest event time read is `max_timestamp`: `weir:ckpt=N;mt=T`. The time
/// lets a job without keyed state, which has no changelog, start again from the event
/// time it had reached when its state_dir is lost.
pub fn offset_metadata(n: u64, max_timestamp: i64) -> String {
    format!("{OFFSET_METADATA_PREFIX}{n};mt={max_timestamp}")
}

/// The checkpoint that a single process's offset metadata names, and the partition's
/// greatest event time if it was recorded (weir up to commit 88ba1f1 wrote `weir:ckpt=N`
/// alone); `None` if a single process of weir did not write it.
pub fn parse_offset_metadata(metadata: &str) -> Option<(u64, Option<i64>)> {
    let rest = metadata.strip_prefix(OFFSET_METADATA_PREFIX)?;
    match rest.split_once(';') {
        None => Some((rest.parse().ok()?, None)),
        Some((n, time)) => Some((n.parse().ok()?, Some(time.strip_prefix("mt=")?.parse().ok()?))),
    }
}

/// What a process of a scaled-out job commits for a partition with its checkpoint `n`
/// (its own count), besides the offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardMetadata {
    pub n: u64,
    /// The greatest event time read from the partition: where the watermark of its next
    /// owner starts. Unknown when a single process committed it.
    pub max_timestamp: Option<i64>,
    /// The input's partition count the job's keyed state was placed by.
    pub partitions: Option<u32>,
    /// `shape_hash` of the job that committed it.
    pub shape: Option<u64>,
    /// The lowest partition the committing process owned, which names its producer.
    pub by: Option<i32>,
    /// The job's key groups (weir up to commit 76f81c8 did not record them).
    pub key_groups: Option<u32>,
}

/// The offset metadata of `meta`: `weir:ckpt=N;ts=T;p=P;shape=H;by=B;g=G`.
pub fn shard_offset_metadata(meta: &ShardMetadata) -> String {
    let mut text = format!("{OFFSET_METADATA_PREFIX}{}", meta.n);
    let fields = [
        ("ts", meta.max_timestamp.map(|t| t.to_string())),
        ("p", meta.partitions.map(|p| p.to_string())),
        ("shape", meta.shape.map(|h| format!("{h:016x}"))),
        ("by", meta.by.map(|p| p.to_string())),
        ("g", meta.key_groups.map(|g| g.to_string())),
    ];
    for (key, value) in fields {
        if let Some(value) = value {
            text.push_str(&format!(";{key}={value}"));
        }
    }
    text
}

/// The metadata a scaled-out process (or a single one: only `n`) committed; `None` if
/// weir did not write it. Fields it does not know are skipped.
pub fn parse_shard_offset_metadata(metadata: &str) -> Option<ShardMetadata> {
    let mut fields = metadata.strip_prefix(OFFSET_METADATA_PREFIX)?.split(';');
    let mut meta =
        ShardMetadata { n: fields.next()?.parse().ok()?, max_timestamp: None, partitions: None, shape: None, by: None, key_groups: None };
    for field in fields {
        let (key, value) = field.split_once('=')?;
        match key {
            // A single process's `mt` is the same time: where a scaled-out process starts.
            "ts" | "mt" => meta.max_timestamp = Some(value.parse().ok()?),
            "p" => meta.partitions = Some(value.parse().ok()?),
            "shape" => meta.shape = Some(u64::from_str_radix(value, 16).ok()?),
            "by" => meta.by = Some(value.parse().ok()?),
            "g" => meta.key_groups = Some(value.parse().ok().filter(|g| (1..=MAX_KEY_GROUPS).contains(g))?),
            _ => {}
        }
    }
    Some(meta)
}

/// What a scaled-out job's offsets record of its shape: its operators, in order, and its
/// input topic (FNV-1a), so that a changed chain is refused rather than handed another
/// operator's state.
pub fn shape_hash(operators: &[String], source_topic: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in operators.iter().map(String::as_str).chain([source_topic]) {
        for byte in part.bytes().chain([0]) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(meta: &[u8], tasks: &[(&str, Vec<u8>)]) -> Checkpoint {
        Checkpoint {
            n: 7,
            meta: meta.to_vec(),
            tasks: tasks.iter().map(|(name, bytes)| (name.to_string(), bytes.clone())).collect(),
        }
    }

    #[test]
    fn task_ids_keep_their_store_names() {
        let source = TaskId::Source { index: 3 };
        let operator = TaskId::Operator { stage: 1, subtask: 12 };
        assert_eq!(source.to_string(), "source/3");
        assert_eq!(operator.to_string(), "op/1/12");
        assert_eq!(TaskId::parse("source/3"), Some(source));
        assert_eq!(TaskId::parse("op/1/12"), Some(operator));
        for bad in ["source/", "source/-1", "source/+1", "source/01", "op/1", "op/1/2/3", "op/01/0", "sink/0", ""] {
            assert_eq!(TaskId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn this_format_round_trips() {
        let shape = Shape { parallelism: 2, key_groups: Some(128), operators: vec!["count".into()], source_topic: "in".into() };
        let states = [
            PartitionState { partition: 0, next_offset: 10, max_timestamp: i64::MIN },
            PartitionState { partition: 2, next_offset: 5, max_timestamp: 1_700_000_000_000 },
        ];
        let stored = checkpoint(
            &encode_shape(&shape),
            &[("source/0", encode_source(&states)), ("op/0/1", encode_operator(-4))],
        );
        let snapshot = decode(&stored).expect("decodes");
        assert_eq!(snapshot.format, FORMAT);
        assert_eq!(snapshot.shape, shape);
        assert_eq!(snapshot.partitions.values().copied().collect::<Vec<_>>(), states);
        assert_eq!(snapshot.operators[&(0, 1)], OperatorState { watermark: -4, guest: Vec::new() });
    }

    #[test]
    fn format_zero_entries_still_decode() {
        let meta = br#"{"parallelism":1,"operators":["a","b"],"source_topic":"t"}"#;
        let source = br#"[{"partition":4,"next_offset":9,"max_timestamp":-9223372036854775808}]"#;
        let stored = checkpoint(meta, &[("source/0", source.to_vec()), ("op/1/0", 3i64.to_le_bytes().to_vec())]);
        let snapshot = decode(&stored).expect("decodes");
        assert_eq!(snapshot.format, 0);
        assert_eq!(snapshot.shape.operators, ["a", "b"]);
        assert_eq!(snapshot.partitions[&4].next_offset, 9);
        assert_eq!(snapshot.operators[&(1, 0)].watermark, 3);
    }

    #[test]
    fn format_one_keeps_whole_subtask_snapshots() {
        let meta = br#"{"format":1,"shape":{"parallelism":1,"operators":["a"],"source_topic":"t"}}"#;
        let operator = [7i64.to_le_bytes().to_vec(), b"guest".to_vec()].concat();
        let snapshot = decode(&checkpoint(meta, &[("op/0/0", operator)])).expect("decodes");
        assert_eq!((snapshot.format, snapshot.shape.key_groups), (1, None));
        assert_eq!(snapshot.operators[&(0, 0)], OperatorState { watermark: 7, guest: b"guest".to_vec() });
    }

    #[test]
    fn a_newer_format_is_refused_by_name() {
        let meta = br#"{"format":99,"shape":{"parallelism":1,"operators":[],"source_topic":"t"}}"#;
        let error = decode(&checkpoint(meta, &[])).expect_err("refused");
        assert!(matches!(error, FormatError::Newer { found: 99 }), "{error}");
    }

    /// A count read back sizes sets and loops: one past what a job may have is damage.
    #[test]
    fn a_recorded_key_group_count_is_bounded() {
        for count in [0, MAX_KEY_GROUPS + 1, u32::MAX - 3] {
            let shape = Shape { parallelism: 1, key_groups: Some(count), operators: vec!["a".into()], source_topic: "t".into() };
            let error = decode(&checkpoint(&encode_shape(&shape), &[])).expect_err("refused");
            assert!(error.to_string().contains(&format!("{count} key groups")), "{error}");
            assert_eq!(parse_shard_offset_metadata(&format!("weir:ckpt=7;g={count}")), None);
        }
        let most = Shape { parallelism: 1, key_groups: Some(MAX_KEY_GROUPS), operators: vec![], source_topic: "t".into() };
        assert!(decode(&checkpoint(&encode_shape(&most), &[])).is_ok());
    }

    #[test]
    fn damaged_entries_name_their_task() {
        let meta = encode_shape(&Shape { parallelism: 1, key_groups: Some(4), operators: vec!["count".into()], source_topic: "t".into() });
        let cases: [(&str, Vec<u8>); 8] = [
            ("source/0", vec![1, 0, 0, 0, 1]),
            ("source/0", vec![]),
            ("op/0/0", vec![1, 2, 3]),
            ("sink/0", vec![]),
            ("source/1", encode_source(&[])),
            ("op/1/0", encode_operator(0)),
            ("op/0/1", encode_operator(0)),
            ("op/0/0", [encode_operator(0), b"guest".to_vec()].concat()),
        ];
        for (name, bytes) in cases {
            match decode(&checkpoint(&meta, &[(name, bytes)])) {
                Err(FormatError::Corrupt { task: Some(task), .. }) => assert_eq!(task, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_partition_in_two_source_entries_is_refused() {
        let meta = encode_shape(&Shape { parallelism: 2, key_groups: Some(4), operators: vec![], source_topic: "t".into() });
        let state = PartitionState { partition: 3, next_offset: 1, max_timestamp: 0 };
        let stored = checkpoint(&meta, &[("source/0", encode_source(&[state])), ("source/1", encode_source(&[state]))]);
        match decode(&stored) {
            Err(FormatError::Corrupt { task: Some(task), detail }) => {
                assert_eq!(task, "source/1");
                assert!(detail.contains("partition 3"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn format_one_metadata_is_not_a_format_zero_shape() {
        // What the format-0 reader parses the metadata into: it must fail, so a weir that
        // knows only format 0 calls the checkpoint unreadable rather than misreading it.
        let meta = encode_shape(&Shape { parallelism: 1, key_groups: Some(4), operators: vec![], source_topic: "t".into() });
        assert!(serde_json::from_slice::<ShapeV0>(&meta).is_err());
        assert!(serde_json::from_slice::<serde_json::Value>(&meta).unwrap().get("parallelism").is_none());
    }

    #[test]
    fn changelog_records_round_trip_and_foreign_ones_are_refused() {
        let key = changelog_key(2, b"user-1");
        let value = changelog_value(b"state");
        let read = parse_changelog(&key, Some(&value)).unwrap();
        assert_eq!(read, ChangelogRecord::State { stage: 2, key: b"user-1", state: Some(b"state") });
        let removal = parse_changelog(&key, None).unwrap();
        assert_eq!(removal, ChangelogRecord::State { stage: 2, key: b"user-1", state: None });
        let stored = checkpoint(b"{}", &[("source/0", vec![1, 2]), ("op/0/0", encode_operator(5))]);
        let record = checkpoint_record(&stored);
        assert_eq!(parse_changelog(CHECKPOINT_RECORD_KEY, Some(&record)).unwrap(), ChangelogRecord::Checkpoint(stored));
        assert!(parse_changelog(b"abc", Some(&value)).is_err(), "a short key");
        assert!(parse_changelog(&key, Some(b"\x07x")).is_err(), "an untagged value");
        assert!(parse_changelog(CHECKPOINT_RECORD_KEY, Some(&record[..record.len() - 1])).is_err(), "cut short");
        assert!(parse_changelog(&changelog_key(u32::MAX, b"x"), Some(&value)).is_err(), "the reserved stage");
    }

    #[test]
    fn a_changelog_record_adds_to_a_state_entry_what_the_entry_limit_leaves_room_for() {
        let framing = changelog_key(7, b"").len() + changelog_value(b"").len();
        assert_eq!(framing, crate::chunk::RECORD_FRAMING_BYTES);
    }

    #[test]
    fn offset_metadata_round_trips() {
        assert_eq!(offset_metadata(42, -5), "weir:ckpt=42;mt=-5");
        assert_eq!(parse_offset_metadata("weir:ckpt=42;mt=-5"), Some((42, Some(-5))));
        assert_eq!(parse_offset_metadata("weir:ckpt=42"), Some((42, None)), "as weir wrote it before");
        assert_eq!(parse_offset_metadata("other"), None);
        assert_eq!(parse_offset_metadata("weir:ckpt=x"), None);
        assert_eq!(parse_offset_metadata("weir:ckpt=4;mt=x"), None);
        assert_eq!(parse_shard_offset_metadata("weir:ckpt=4;mt=9").and_then(|m| m.max_timestamp), Some(9));
        let meta = ShardMetadata { n: 7, max_timestamp: Some(-3), partitions: Some(12), shape: Some(0xab), by: Some(2), key_groups: Some(48) };
        assert_eq!(shard_offset_metadata(&meta), "weir:ckpt=7;ts=-3;p=12;shape=00000000000000ab;by=2;g=48");
        assert_eq!(parse_shard_offset_metadata(&shard_offset_metadata(&meta)), Some(meta));
        let before = ShardMetadata { key_groups: None, ..meta };
        assert_eq!(parse_shard_offset_metadata("weir:ckpt=7;ts=-3;p=12;shape=00000000000000ab;by=2"), Some(before));
        let single = ShardMetadata { n: 7, max_timestamp: None, partitions: None, shape: None, by: None, key_groups: None };
        assert_eq!(parse_shard_offset_metadata("weir:ckpt=7"), Some(single));
        assert_eq!(parse_shard_offset_metadata("weir:ckpt=7;ts=x"), None);
        assert_eq!(parse_shard_offset_metadata("weir:ckpt=7;later=1").map(|m| m.n), Some(7));
        assert_ne!(shape_hash(&["a".into(), "b".into()], "t"), shape_hash(&["ab".into()], "t"));
        assert_eq!(parse_offset_metadata("weir:ckpt=7;ts=1"), None);
    }
}
