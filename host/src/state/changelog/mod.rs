//! The job's changelog topic (DESIGN.md §5): every checkpoint's keyed state changes and
//! its checkpoint record, written in the checkpoint's own Kafka transaction, so that the
//! topic read to its end (read_committed) is the state of the last committed checkpoint.
//! The local store is a cache of it, written after each commit with the offsets the
//! changelog's partitions had reached: recovery replays only what follows those
//! offsets, or, when the `state_dir` cannot give them (a new machine, a deleted
//! directory), the whole topic.
//!
//! The topic has a few partitions, each holding several key groups (`placement.rs`),
//! and `cleanup.policy=compact`: Kafka keeps each key's last state and, once compacted,
//! drops removed keys.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::checkpoint::{layout, recovery};
use crate::checkpoint::store::CheckpointStore;
use crate::dataflow::{KeyGroups, Shard, TaskFailure};
use crate::job::{Delivery, Job};
use crate::metrics::progress;
use crate::sink::{Sink, SinkError};
use crate::source;
use crate::state::StateBase;

mod emptied;
mod placement;
mod replay;
pub(crate) mod writer;

pub(crate) use placement::Placement;

use replay::{Emptiness, read_into_store};

/// How long Kafka may take to answer a metadata or admin request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a rebuild may go without reading anything before it gives up.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a restore waits for a transaction on its key groups before it fences the
/// producers that last committed them.
const STUCK_AFTER: Duration = Duration::from_secs(2);
/// Bytes of stored state read per chunk when reseeding the changelog.
const RESEED_CHUNK_BYTES: usize = 1 << 20;
/// Bytes of keys and values a reseed commits per transaction.
const RESEED_TRANSACTION_BYTES: usize = 64 << 20;
/// A new changelog's cleaner settings. A base replaces its group's older records,
/// which the cleaner drops only from closed log segments and once they are this share
/// of a partition's log: small segments, closed every 10 s, and a low ratio keep the
/// topic near its live records (Kafka's defaults, 1 GiB, 7 days and 0.5, would keep up
/// to a gigabyte per partition). The open segment holds what was written since it was
/// last closed, which no cleaner touches: with segments closed once a minute, that was
/// most of what the topic kept (docs/benchmarks.md, "Changelog bytes on the broker").
const CLEANABLE_DIRTY_RATIO: &str = "0.1";
const SEGMENT_BYTES: &str = "8388608";
const SEGMENT_MS: &str = "10000";
/// The broker keeps a new changelog's records compressed: packed entries of keys in
/// order take a fraction of their bytes, on disk and on a restore's way back (zstd:
/// 5.3x on a window count's segments, lz4 3.2x; docs/benchmarks.md).
const COMPRESSION: &str = "zstd";
/// Kafka's default `delete.retention.ms`: how long the cleaner keeps a removal at least.
const DEFAULT_DELETE_RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// The changelog topic of `job`: `changelog_topic`, else `<name>-changelog`.
pub(crate) fn topic(job: &Job) -> String {
    job.changelog_topic.clone().unwrap_or_else(|| format!("{}-changelog", job.name))
}

/// Writes one stage's state entries to the changelog in the open transaction: a record
/// per key as `checkpoint::layout` encodes it, in the partition of its key group.
pub(crate) struct StateWriter<'a> {
    sink: &'a Sink,
    topic: &'a str,
    placement: Placement,
    stage: u32,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl<'a> StateWriter<'a> {
    pub(crate) fn new(sink: &'a Sink, (topic, placement): (&'a str, Placement), stage: u32) -> Self {
        Self { sink, topic, placement, stage, key: Vec::new(), value: Vec::new() }
    }

    /// Writes `key`'s new state (`None`: its removal); returns the record's bytes.
    pub(crate) fn send(&mut self, group: u32, key: &[u8], state: Option<&[u8]>) -> Result<usize, SinkError> {
        layout::changelog_key_into(self.stage, key, &mut self.key);
        let value = state.map(|state| {
            layout::changelog_value_into(state, &mut self.value);
            &self.value[..]
        });
        self.sink.send_changelog(self.topic, self.placement.partition_of(group), &self.key, value)?;
        Ok(self.key.len() + value.map_or(0, <[u8]>::len))
    }
}

/// What recovery must do with the changelog before the job runs.
#[derive(Debug)]
pub(crate) enum Prepared {
    /// It holds the state of the committed checkpoint.
    Ready,
    /// It lost that state (for this reason), which the state_dir holds: write it again.
    Reseed(String),
}

/// Makes sure the changelog exists, with no more partitions than key groups, creating
/// it (compacted, placed for `input_partitions`) on a fresh start; returns where its
/// groups are. A fresh start refuses a changelog that already holds
/// committed records: they are the state of an earlier run of a job of this name, and
/// a later rebuild would bring them back. `local` is the state_dir's state when it is
/// that of `checkpoint` (an exactly-once job's recovery read it from there, not from
/// the changelog): a changelog that lost it (deleted, or recreated empty) is to be
/// reseeded from it rather than refused.
pub(crate) fn prepare(
    job: &Job,
    (key_groups, input_partitions): (KeyGroups, u32),
    checkpoint: Option<u64>,
    local: Option<&Local>,
    looked: Option<Looked>,
) -> Result<(Placement, Prepared), TaskFailure> {
    let topic = topic(job);
    // A new client's first answer waits for its connection, about 100 ms: the client
    // that reads where the topic ends connects while the topic is looked at, and its
    // settings are read while its partitions are counted; after a `catch_up`, which
    // looked at the topic a moment ago, no client at all.
    let ends = local.map(|_| Ends::new(job)).transpose()?;
    let (partitions, policy) = match looked {
        Some(Looked { placement, policy }) => (Ok(Some(placement.partitions())), Ok(policy)),
        None => alongside(|| partition_count(job, &topic), || topic_config(job, &topic, "cleanup.policy")),
    };
    let new = Placement::for_new(key_groups, input_partitions);
    match (partitions?, checkpoint) {
        (None, None) => create(job, &topic, new).map(|()| (new, Prepared::Ready)),
        (None, Some(_)) if local.is_some() => {
            create(job, &topic, new)?;
            Ok((new, Prepared::Reseed("the topic did not exist".into())))
        }
        (None, Some(n)) => Err(TaskFailure::Incompatible(format!(
            "the changelog topic `{topic}` on {} does not exist, but Kafka's committed offsets name checkpoint {n}: \
             the job's state is gone from Kafka. Restore the topic, or start over deliberately with empty state by \
             deleting consumer group `{}`",
            job.producer.brokers, job.name
        ))),
        (Some(found), _) if found > key_groups.count() => Err(wrong_partitions(job, &topic, found, key_groups)),
        (Some(found), checkpoint) => {
            let placement = Placement::new(key_groups, found);
            check_compacted(job, &topic, &policy?)?;
            if let (Some(local), Some(ends)) = (local, &ends) {
                return holds(job, &topic, found, local, ends).map(|prepared| (placement, prepared));
            }
            if checkpoint.is_none() && job.producer.delivery == Delivery::ExactlyOnce {
                // At-least-once writes the changelog outside transactions, so a run killed
                // before its first offset commit leaves records; it never rebuilds from them.
                refuse_earlier_state(job, &topic, found)?;
            }
            Ok((placement, Prepared::Ready))
        }
    }
}

/// Runs `a` and `b` side by side; returns both results.
fn alongside<A: Send, B: Send>(a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B + Send) -> (A, B) {
    std::thread::scope(|scope| {
        let b = scope.spawn(b);
        let a = a();
        (a, b.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

/// A changelog that is anything but compacted (its `cleanup.policy`) loses state that
/// was never overwritten.
fn check_compacted(job: &Job, topic: &str, policy: &str) -> Result<(), TaskFailure> {
    if policy != "compact" {
        return Err(TaskFailure::Incompatible(format!(
            "the changelog topic `{topic}` on {} has cleanup.policy={policy}, but a changelog must be \
             compacted and nothing else (with `delete`, retention drops state that was never \
             overwritten): set cleanup.policy=compact on it",
            job.producer.brokers
        )));
    }
    Ok(())
}

/// A process of a scaled-out job whose changelog does not exist: creates it when none
/// of the process's partitions has a committed checkpoint (the job's other processes
/// may be creating it too); else the job's state is gone.
pub(crate) fn create_shard(job: &Job, placement: Placement, committed: bool) -> Result<(), TaskFailure> {
    let topic = topic(job);
    if committed {
        return Err(TaskFailure::Incompatible(format!(
            "the changelog topic `{topic}` on {} does not exist, but Kafka's committed offsets name checkpoints of \
             this process's partitions: the job's state is gone from Kafka. Restore the topic, or start over \
             deliberately with empty state by deleting consumer group `{}`",
            job.producer.brokers, job.name
        )));
    }
    create(job, &topic, placement)
}

/// What `rebuild_shard` brought into the store.
#[derive(Default)]
pub(crate) struct Rebuilt {
    /// Entries read from the changelog.
    pub(crate) entries: u64,
    /// Changelog partitions replayed from the positions the store held (the rest from
    /// the start).
    pub(crate) cached: usize,
    /// Per owned changelog partition, the offset the store's state now reflects.
    pub(crate) positions: BTreeMap<i32, i64>,
    /// Per input partition whose key groups hold committed state, where the first
    /// record of it is (changelog partition, offset).
    pub(crate) with_state: BTreeMap<i32, (i32, i64)>,
}

/// A process of a scaled-out job: where the changelog's key groups are (`expected`
/// groups, or one per partition of a changelog of more partitions, as weir created
/// them before placements; the caller checks that the job can keep its state in them),
/// after checking that it is compacted and that each partition's groups travel in one
/// input partition of `input_partitions`; `None` when it does not exist.
pub(crate) fn inspect_shard(job: &Job, (expected, input_partitions): (KeyGroups, u32)) -> Result<Option<Placement>, TaskFailure> {
    let topic = topic(job);
    let Some(found) = partition_count(job, &topic)? else { return Ok(None) };
    let placement = placed(job, &topic, expected, found)?;
    if !placement.follows_input(input_partitions) {
        return Err(TaskFailure::Incompatible(format!(
            "the changelog topic `{topic}` on {} has {found} partitions, not a multiple of the {input_partitions} \
             partitions of `{}`, so a changelog partition would hold the state of several processes' key groups: \
             it was created for a single process or changed outside weir; run one process (scale_out = false), \
             or start over under a new job name",
            job.producer.brokers, job.sources[0].topic
        )));
    }
    check_compacted(job, &topic, &topic_config(job, &topic, "cleanup.policy")?)?;
    Ok(Some(placement))
}

/// Where the key groups are in a changelog of `found` partitions when the job has
/// `expected` of them (from the job file, else the default for its input). A changelog
/// of more partitions than that is one of one partition per key group, as weir created
/// them before placements (its key_groups since changed in the job file, or the
/// default moved with the input's partition count): its groups are its partitions,
/// unless the job file names another count.
fn placed(job: &Job, topic: &str, expected: KeyGroups, found: u32) -> Result<Placement, TaskFailure> {
    if found <= expected.count() {
        return Ok(Placement::new(expected, found));
    }
    match job.key_groups {
        Some(_) => Err(wrong_partitions(job, topic, found, expected)),
        None => Ok(Placement::new(KeyGroups::new(found), found)),
    }
}

/// A process of a scaled-out job, once the earlier owners of its partitions are fenced:
/// brings the store's state of the key groups it owns to the changelog's end. A group
/// whose state the store holds with its position (this process owned it last, or before
/// a restart, and its input partition has committed offsets) replays only what follows;
/// any other is rebuilt from its partition's start. The store keeps no other group.
/// The read goes to where the partitions end now, every transaction before it resolved:
/// a commit's markers reach each partition after the commit returns, and a read that
/// stopped where a transaction still open began would miss what was committed after it.
/// `committed`: the input partitions with committed offsets.
pub(crate) fn rebuild_shard(
    job: &Job,
    store: &CheckpointStore,
    placement: Placement,
    shard: &Shard,
    committed: &BTreeSet<i32>,
    on_stuck: impl FnOnce(&[i32]),
) -> Result<Rebuilt, TaskFailure> {
    let topic = topic(job);
    let stages = u32::try_from(job.operators.len()).expect("a job has few operators");
    // Every group of a partition travels in one input partition (`inspect_shard`): the
    // process owns the changelog partitions of its groups whole.
    let input_of = |partition: i32| shard.partition_of(placement.groups_in(partition).next().expect("a partition holds a group"));
    let owned: Vec<i32> = (0..placement.partitions() as i32).filter(|&partition| shard.owns_partition(input_of(partition))).collect();
    let base = store.state_base()?;
    let (ends, retention) = (Ends::stable(job)?, || topic_config(job, &topic, "delete.retention.ms"));
    let cached = match tail_start(job, (&topic, placement.partitions()), &base, retention, &ends)? {
        Tail::From(positions) => positions,
        Tail::Whole(_) => BTreeMap::new(),
    };
    let from: BTreeMap<i32, i64> = owned
        .iter()
        .filter(|&&partition| committed.contains(&input_of(partition)))
        .filter_map(|partition| cached.get(partition).map(|&position| (*partition, position)))
        .collect();
    let dropped = (0..placement.groups().count()).filter(|&group| !from.contains_key(&placement.partition_of(group)));
    store.drop_groups(stages, dropped, &from)?;
    let ends = wait_resolved(job, &topic, &owned, on_stuck)?;
    let start = |partition| from.get(&partition).map_or(Offset::Beginning, |&position| Offset::Offset(position));
    let starts: Vec<(i32, Offset)> = owned.iter().map(|&partition| (partition, start(partition))).collect();
    // Each partition read from its start had its groups just dropped from the store.
    let read = read_into_store(job, store, placement, &topic, (&starts, Emptiness::Emptied))?;
    let mut with_state = BTreeMap::new();
    for (&partition, &offset) in &read.firsts {
        with_state.entry(input_of(partition)).or_insert((partition, offset));
    }
    // The read went past `ends` (to stable offsets at or after them).
    store.mark_state(0, &ends)?;
    Ok(Rebuilt { entries: read.entries, with_state, cached: from.len(), positions: ends })
}

/// Waits until no transaction is open before the current end of `partitions`: their
/// last stable offset (what read_committed reads to) reaches where they end. Bounded
/// by the job's transaction timeout, after which Kafka aborts a forgotten transaction;
/// `on_stuck` runs once, with the partitions still open, if it takes longer than
/// [`STUCK_AFTER`]. Returns those ends.
fn wait_resolved(job: &Job, topic: &str, partitions: &[i32], on_stuck: impl FnOnce(&[i32])) -> Result<BTreeMap<i32, i64>, TaskFailure> {
    let partitions: BTreeSet<i32> = partitions.iter().copied().collect();
    let ends: BTreeMap<i32, i64> = Ends::new(job)?.of(&partitions)?.into_iter().collect();
    let stable = Ends::stable(job)?;
    let timeout_ms = job.producer.kafka.get("transaction.timeout.ms").and_then(|ms| ms.trim().parse().ok());
    let started = Instant::now();
    let deadline = started + Duration::from_millis(timeout_ms.unwrap_or(crate::job::DEFAULT_TRANSACTION_TIMEOUT_MS)) + REQUEST_TIMEOUT;
    let mut on_stuck = Some(on_stuck);
    loop {
        let open: Vec<(i32, i64)> =
            stable.of(&partitions)?.into_iter().filter(|(partition, end)| ends.get(partition).is_some_and(|&e| *end < e)).collect();
        let Some(&(partition, stable_end)) = open.first() else { return Ok(ends) };
        if started.elapsed() > STUCK_AFTER
            && let Some(on_stuck) = on_stuck.take()
        {
            on_stuck(&open.iter().map(|&(partition, _)| partition).collect::<Vec<_>>());
        }
        if Instant::now() > deadline {
            return Err(TaskFailure::Kafka(format!(
                "partition {partition} of the changelog topic `{topic}` has had a transaction open at offset \
                 {stable_end} for longer than the transaction timeout: a producer other than this job's processes \
                 writes it, or an earlier owner of its key group was never fenced (a weir process of this job \
                 running without scale_out?)"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A scaled-out process found committed state (at `partition` `offset` of the changelog)
/// for input partition `input`, which has no committed offsets: an earlier run's.
pub(crate) fn earlier_state(job: &Job, input: i32, (partition, offset): (i32, i64)) -> TaskFailure {
    TaskFailure::Incompatible(format!(
        "the changelog topic `{}` already holds state (a committed record at partition {partition} offset \
         {offset}) for input partition {input}, but job `{}` has no committed checkpoint of that partition: it is \
         the state of an earlier run, or partitions were added to the input topic `{}` (which moves keys, and \
         their state, between partitions, and cannot be undone). Start over under a new job name (deleting the \
         topic deletes the job's state)",
        topic(job),
        job.name,
        job.sources[0].topic
    ))
}

/// The state_dir's state of the committed checkpoint, as recovery found it.
pub(crate) struct Local {
    pub(crate) base: StateBase,
    /// A reseed of the changelog from it has not been committed yet.
    pub(crate) reseeding: bool,
}

/// Whether the changelog still holds the state the state_dir's state was read from. An
/// interrupted reseed wants one; so does a topic without a single record (a committed
/// checkpoint leaves at least its checkpoint record, which compaction keeps), or one
/// that ends before the state_dir's positions and holds no committed record (recreated,
/// then written only by transactions that aborted): it was recreated. Positions past
/// the end of a topic with committed records are an error: it is another topic. (A
/// topic recreated and then written by others past those positions goes unnoticed.)
fn holds(job: &Job, topic: &str, partitions: u32, local: &Local, ends: &Ends) -> Result<Prepared, TaskFailure> {
    if local.reseeding {
        return Ok(Prepared::Reseed("writing the state_dir's state into it was interrupted".into()));
    }
    let ends = ends.all(partitions)?;
    if ends.values().all(|&end| end == 0) {
        return Ok(Prepared::Reseed("it holds no record at all: it was recreated".into()));
    }
    let Some(positions) = &local.base.positions else { return Ok(Prepared::Ready) };
    let past_end = positions.iter().find(|&(partition, position)| ends.get(partition).is_none_or(|end| position > end));
    let Some((&partition, &position)) = past_end else { return Ok(Prepared::Ready) };
    let consumer = reader(job, topic, partitions, None)?;
    if first_record(&consumer, topic, partitions)?.is_none() {
        return Ok(Prepared::Reseed(format!(
            "it holds no committed record, and it ends before offset {position} of partition {partition} that the \
             state_dir's state was read from: it was recreated"
        )));
    }
    Err(TaskFailure::Incompatible(format!(
        "the changelog topic `{topic}` on {} is not the one the state_dir's state (checkpoint {}) was written to: \
         it recorded offset {position} of partition {partition}, past the partition's end ({}), and the topic \
         holds records of its own. Delete the topic (weir writes it again from the state_dir), or start over \
         deliberately with empty state by deleting consumer group `{}` and the topic",
        job.producer.brokers,
        local.base.n,
        ends.get(&partition).copied().unwrap_or_default(),
        job.name
    )))
}

/// The first of `positions` that the topic does not hold (an offset before a
/// partition's start or past its end): `(partition, position, start, end)`. Two
/// requests for all partitions, not two per partition.
fn outside(ends: &Ends, partitions: u32, positions: &BTreeMap<i32, i64>) -> Result<Option<(i32, i64, i64, i64)>, TaskFailure> {
    if let Some((&partition, &position)) = positions.iter().find(|&(&partition, _)| partition as u32 >= partitions) {
        return Ok(Some((partition, position, 0, 0)));
    }
    let asked: BTreeSet<i32> = positions.keys().copied().collect();
    let starts: BTreeMap<i32, i64> = ends.starts(&asked)?.into_iter().collect();
    let ends: BTreeMap<i32, i64> = ends.of(&asked)?.into_iter().collect();
    Ok(positions.iter().find_map(|(&partition, &position)| {
        let (low, high) = (starts.get(&partition).copied().unwrap_or(0), ends.get(&partition).copied().unwrap_or(0));
        (position < low || position > high).then_some((partition, position, low, high))
    }))
}

/// Writes the state_dir's state of checkpoint `n` (every stage's entries, then `n`'s
/// checkpoint record) into the changelog before the job runs, in transactions of
/// [`RESEED_TRANSACTION_BYTES`] (a transaction has a time limit; the state has none),
/// after recording where the changelog ends and a reseed mark that only the last
/// commit clears: an interrupted reseed is done again, whole. `before_last_commit` runs
/// when every record is sent (the crash tests' kill point). Returns those ends, the
/// positions the state now reflects.
pub(crate) fn reseed(
    job: &Job,
    store: &CheckpointStore,
    sink: &Sink,
    placement: Placement,
    (n, stages): (u64, u32),
    why: &str,
    before_last_commit: impl FnOnce(),
) -> Result<BTreeMap<i32, i64>, TaskFailure> {
    let started = Instant::now();
    let topic = topic(job);
    tracing::warn!(checkpoint = n, "the changelog topic `{topic}` lost the job's state ({why}): writing the state_dir's state into it again");
    let (ends, key_groups) = (Ends::new(job)?.all(placement.partitions())?, placement.groups());
    store.begin_reseed(n, &ends)?;
    let (mut entries, mut transactions, mut pending) = (0, 0, 0);
    // Key by key group: keys hash evenly over them, so groups done tell the time left.
    let running = progress::begin("writing the state_dir's state into the changelog again", "key groups");
    running.work().add_total(u64::from(stages) * u64::from(key_groups.count()));
    for stage in 0..stages {
        let mut writer = StateWriter::new(sink, (&topic, placement), stage);
        for group in 0..key_groups.count() {
            let mut bytes = 0;
            let read = store.read_state(stage, group..group + 1, RESEED_CHUNK_BYTES, |chunk| -> Result<(), TaskFailure> {
                for (key, state) in chunk.iter() {
                    let sent = writer.send(key_groups.group_of(Some(key)), key, state)?;
                    (pending, bytes) = (pending + sent, bytes + sent);
                }
                if pending >= RESEED_TRANSACTION_BYTES {
                    sink.commit_alone()?;
                    (transactions, pending) = (transactions + 1, 0);
                }
                Ok(())
            })?;
            entries += read;
            running.work().add(1, read, bytes as u64);
        }
    }
    sink.send_checkpoint_record(&topic, &layout::checkpoint_record(&store.load(n)?))?;
    before_last_commit();
    sink.commit_alone()?;
    store.mark_legacy(stages, key_groups.count())?;
    store.end_reseed()?;
    tracing::warn!(
        checkpoint = n, entries, transactions = transactions + 1, duration_ms = started.elapsed().as_millis() as u64,
        "wrote the state_dir's state into the changelog topic `{topic}` again"
    );
    Ok(ends)
}

/// On a fresh start, a changelog that already holds committed records holds the state of
/// an earlier run of a job of this name, which a later rebuild would bring back.
fn refuse_earlier_state(job: &Job, topic: &str, partitions: u32) -> Result<(), TaskFailure> {
    let consumer = reader(job, topic, partitions, None)?;
    if let Some(offset) = first_record(&consumer, topic, partitions)? {
        return Err(TaskFailure::Incompatible(format!(
            "the changelog topic `{topic}` already holds state (a committed record at {offset}) but job `{}` \
             has no committed checkpoint: it is the state of an earlier run. Delete the topic to start over, \
             or set changelog_topic to a new name",
            job.name
        )));
    }
    Ok(())
}

/// Brings the store's keyed state to committed checkpoint `n` from the changelog. From
/// the positions the store's base recorded, only the tail is replayed; without them (an
/// empty or lost state_dir, one an older weir wrote, or a base so old that Kafka may
/// have dropped removals after it), the state is rebuilt from the whole topic. Either
/// way the store then holds checkpoint `n` as the changelog's last checkpoint record
/// gives it. Positions the topic no longer has are an error: it was recreated or
/// truncated, and what it lost cannot be rebuilt from it. `expected`: the job's key
/// groups as the job file or its input's default gives them, which the checkpoint
/// record read confirms.
pub(crate) fn catch_up(job: &Job, store: &CheckpointStore, (n, expected): (u64, KeyGroups), base: &StateBase) -> Result<Looked, TaskFailure> {
    let topic = topic(job);
    // As in `prepare`: three clients connect side by side, not one after the other.
    let ends = Ends::stable(job)?;
    let (partitions, configs) = alongside(|| partition_count(job, &topic), || topic_configs(job, &topic, ["delete.retention.ms", "cleanup.policy"]));
    // A topic that is gone says so first: describing it fails too, less clearly.
    let Some(partitions) = partitions? else {
        return Err(TaskFailure::Incompatible(format!(
            "the state_dir {} holds the state of checkpoint {}, not of checkpoint {n} that Kafka's committed offsets \
             name, and the changelog topic `{topic}` that could bring it there does not exist: the job's state is \
             lost. Restore the topic, or start over deliberately with empty state by deleting consumer group `{}`",
            store.dir().display(),
            base.n,
            job.name
        )));
    };
    let [retention, policy] = configs?;
    // Before any replay, which may empty the store: one from a topic that retention
    // trims would write the store's marker over a part of the state.
    check_compacted(job, &topic, &policy)?;
    // More partitions than groups: one partition per key group, as weir created them
    // before placements (the checkpoint record read says how many there are).
    let groups = if partitions > expected.count() { KeyGroups::new(partitions) } else { expected };
    let tail = tail_start(job, (&topic, partitions), base, || Ok(retention), &ends)?;
    let placement = Placement::new(groups, partitions);
    let placement = match replay_from(job, store, (n, base), (&topic, placement), &tail) {
        Err(TaskFailure::Incompatible(why)) => {
            // The job file, or its input's default, may give other key groups than the
            // job's checkpoints were taken with, and its records then lie in groups that
            // count does not place them in: the replay goes by the recorded count, and a
            // job file that names another is refused after it, with the count to set.
            let recorded = recorded_groups(job, &topic, &ends)?.filter(|&recorded| recorded != groups.count() && recorded >= partitions);
            let Some(recorded) = recorded else { return Err(TaskFailure::Incompatible(why)) };
            tracing::info!(checkpoint = n, key_groups = recorded, "the changelog's checkpoints were taken with {recorded} key groups, not {}: replaying by them", groups.count());
            let placement = Placement::new(KeyGroups::new(recorded), partitions);
            replay_from(job, store, (n, base), (&topic, placement), &after_failed_replay(job, tail, recorded))?;
            placement
        }
        replayed => replayed.map(|()| placement)?,
    };
    Ok(Looked { placement, policy })
}

/// Where a replay starts again after one by the wrong key groups failed. An exactly-once
/// job's failed replay may have stored part of what it read (it writes as it reads) in
/// the wrong groups, or emptied the store for a replay of the whole topic: the replay
/// reads the whole topic, into an emptied store. An at-least-once job's replay cannot
/// read the whole topic, and starts again where it started.
fn after_failed_replay(job: &Job, tail: Tail, recorded: u32) -> Tail {
    match (job.producer.delivery, tail) {
        (Delivery::AtLeastOnce, tail) => tail,
        (Delivery::ExactlyOnce, Tail::Whole(why)) => Tail::Whole(why),
        (Delivery::ExactlyOnce, Tail::From(_)) => Tail::Whole(format!(
            "a replay of the changelog's tail by other key groups than the {recorded} its checkpoints were taken with \
             failed, and may have stored part of it in the wrong groups"
        )),
    }
}

/// Replays the changelog into the store from where `tail` says, its records placed by
/// `placement`; from the whole topic if its tail cannot give checkpoint `n`.
fn replay_from(job: &Job, store: &CheckpointStore, (n, base): (u64, &StateBase), (topic, placement): (&str, Placement), tail: &Tail) -> Result<(), TaskFailure> {
    if job.producer.delivery == Delivery::AtLeastOnce {
        // Written outside transactions, the changelog may hold changes of the checkpoint
        // after `n`, and its last checkpoint record with them: the store keeps `n`'s
        // entry, and the state may run ahead of it, as at-least-once allows.
        return match tail {
            Tail::From(from) => replay(job, store, n, topic, placement, Some(from)).map_err(Unreplayed::failure),
            Tail::Whole(why) => Err(TaskFailure::Incompatible(format!(
                "the state in the state_dir {} is that of checkpoint {}, not {n}, and {why}; an at-least-once job \
                 cannot rebuild from its whole changelog, which it writes outside transactions: restore the \
                 state_dir, or start over deliberately with empty state by deleting consumer group `{}`",
                store.dir().display(),
                base.n,
                job.name
            ))),
        };
    }
    match tail {
        // A record the tail's read failed on is in the whole topic too: a replay of it
        // would empty the store only to fail on the same record.
        Tail::From(from) => match replay(job, store, n, topic, placement, Some(from)) {
            Err(Unreplayed::FallsShort(why)) => {
                tracing::warn!(checkpoint = n, from = base.n, "the changelog's tail cannot give checkpoint {n} ({why}); rebuilding from the whole topic");
            }
            other => return other.map_err(Unreplayed::failure),
        },
        Tail::Whole(why) => tracing::info!(checkpoint = n, from = base.n, "rebuilding keyed state from the whole changelog: {why}"),
    }
    replay(job, store, n, topic, placement, None).map_err(Unreplayed::failure)
}

/// Why a replay did not bring the store to checkpoint `n`.
enum Unreplayed {
    /// What it read does not end at checkpoint `n` (this says how): a replay from
    /// further back may.
    FallsShort(TaskFailure),
    /// Its read failed: a record weir did not write, the store, the broker.
    Failed(TaskFailure),
}

impl From<TaskFailure> for Unreplayed {
    fn from(failure: TaskFailure) -> Self {
        Unreplayed::Failed(failure)
    }
}

impl From<crate::checkpoint::store::StoreError> for Unreplayed {
    fn from(error: crate::checkpoint::store::StoreError) -> Self {
        Unreplayed::Failed(error.into())
    }
}

impl Unreplayed {
    fn failure(self) -> TaskFailure {
        match self {
            Unreplayed::FallsShort(failure) | Unreplayed::Failed(failure) => failure,
        }
    }
}

/// Records read back from the end of partition 0 for its last checkpoint record, at
/// first: a checkpoint's transaction writes it last, so only the commit's marker follows
/// it. Each further try reads back [`FURTHER_BACK`] times as far, the last from the start.
const FIRST_TAIL: i64 = 16;
const FURTHER_BACK: i64 = 64;

/// The key groups the changelog's last committed checkpoint record names, if it holds
/// one that names them.
fn recorded_groups(job: &Job, topic: &str, ends: &Ends) -> Result<Option<u32>, TaskFailure> {
    let zero = BTreeSet::from([0]);
    let (Some(&(_, start)), Some(&(_, end))) = (ends.starts(&zero)?.first(), ends.of(&zero)?.first()) else { return Ok(None) };
    let mut tail = FIRST_TAIL;
    loop {
        let from = (end - tail).max(start);
        let consumer = reader_for(job, topic, std::iter::once((0, Offset::Offset(from))))?;
        let mut last = None;
        read_to_end(&consumer, topic, 1, |_, _, message| {
            if let Some(key) = message.key()
                && let Ok(layout::ChangelogRecord::Checkpoint(checkpoint)) = layout::parse_changelog(key, message.payload())
            {
                last = Some(checkpoint);
            }
            Ok(())
        })?;
        if let Some(checkpoint) = last {
            return Ok(layout::decode(&checkpoint).ok().and_then(|snapshot| snapshot.shape.key_groups));
        }
        if from == start {
            return Ok(None);
        }
        tail = tail.saturating_mul(FURTHER_BACK);
    }
}

/// What `catch_up` saw of the changelog topic, which `prepare` need not ask again.
pub(crate) struct Looked {
    placement: Placement,
    /// Its `cleanup.policy`.
    policy: String,
}

/// An at-least-once job recovering checkpoint `n` whose state the store holds, at
/// `positions`: records past them are either `n`'s own, already in the store, or those
/// of a checkpoint a crash kept from its commit, written outside a transaction. A
/// later replay from `positions` would take the latter as state and count their input
/// twice, so the store's marker moves to where the changelog ends now. Returns those
/// ends.
pub(crate) fn skip_uncommitted(job: &Job, store: &CheckpointStore, n: u64, placement: Placement, positions: &BTreeMap<i32, i64>) -> Result<BTreeMap<i32, i64>, TaskFailure> {
    let ends = Ends::new(job)?.all(placement.partitions())?;
    let skipped: i64 = ends.iter().map(|(partition, &end)| end - positions.get(partition).copied().unwrap_or(0).min(end)).sum();
    if skipped > 0 {
        tracing::info!(checkpoint = n, records = skipped, "a replay of the changelog will start past the records that follow checkpoint {n}'s state (its own, or never committed)");
    }
    store.mark_state(n, &ends)?;
    Ok(ends)
}

/// Where a replay starts.
enum Tail {
    /// From these offsets, per partition.
    From(BTreeMap<i32, i64>),
    /// From the start of the topic, for this reason.
    Whole(String),
}

/// Where a replay of the tail starts: the base's positions, if the topic still holds
/// everything after them. Positions past a partition's end, or before its start, are an
/// error: the topic was recreated or truncated.
fn tail_start(
    job: &Job,
    (topic, partitions): (&str, u32),
    base: &StateBase,
    retention: impl FnOnce() -> Result<String, TaskFailure>,
    ends: &Ends,
) -> Result<Tail, TaskFailure> {
    let Some(positions) = &base.positions else {
        let why = if base.n == 0 { "the state_dir holds no state" } else { "the state_dir records no changelog offsets (an older weir wrote it)" };
        return Ok(Tail::Whole(why.to_string()));
    };
    // The cleaner drops a removal `delete.retention.ms` after it was written at the
    // earliest; a tail written longer ago than half that may have lost some.
    let retention_ms = retention()?.parse::<i64>().unwrap_or(DEFAULT_DELETE_RETENTION_MS);
    let age_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64) - base.written_ms;
    if age_ms > retention_ms / 2 {
        let why = format!(
            "the state_dir's state was written {} s ago, more than half the topic's delete.retention.ms ({retention_ms} ms), \
             so Kafka may have dropped removals that followed it",
            age_ms / 1000
        );
        return Ok(Tail::Whole(why));
    }
    if let Some((partition, position, low, high)) = outside(ends, partitions, positions)? {
        return Err(TaskFailure::Incompatible(format!(
            "the changelog topic `{topic}` on {} no longer holds what followed the state_dir's state (checkpoint {}): \
             it recorded offset {position} of partition {partition}, which now holds offsets {low}..{high}. The \
             topic was recreated or truncated outside weir, and the state it lost cannot be rebuilt from it: \
             restore the topic, or start over deliberately with empty state by deleting consumer group `{}` and \
             the topic",
            job.producer.brokers,
            base.n,
            job.name
        )));
    }
    Ok(Tail::From(positions.clone()))
}

/// Replays the changelog into the store, from `from` (per partition; a partition not
/// listed from its start) or, with `None`, from the start into an emptied store.
fn replay(
    job: &Job,
    store: &CheckpointStore,
    n: u64,
    topic: &str,
    placement: Placement,
    from: Option<&BTreeMap<i32, i64>>,
) -> Result<(), Unreplayed> {
    let started = Instant::now();
    let what = if from.is_some() { "the changelog's tail" } else { "the whole changelog" };
    let partitions = placement.partitions();
    tracing::info!(checkpoint = n, topic = %topic, partitions, key_groups = placement.groups().count(), "replaying keyed state from {what}");
    if from.is_none() {
        store.clear()?;
    }
    let start = |partition| from.and_then(|from| from.get(&partition)).map_or(Offset::Beginning, |&offset| Offset::Offset(offset));
    let starts: Vec<(i32, Offset)> = (0..partitions as i32).map(|partition| (partition, start(partition))).collect();
    let emptiness = if from.is_none() { Emptiness::Emptied } else { Emptiness::Held };
    let replay::Read { entries, checkpoint, positions, .. } = read_into_store(job, store, placement, topic, (&starts, emptiness))?;
    let done = |what: &str| {
        tracing::info!(
            checkpoint = n, entries, duration_ms = started.elapsed().as_millis() as u64,
            "replayed keyed state from {what}"
        );
    };
    if job.producer.delivery == Delivery::AtLeastOnce {
        store.mark_state(n, &positions)?;
        done(what);
        return Ok(());
    }
    let checkpoint = checkpoint.ok_or_else(|| {
        Unreplayed::FallsShort(TaskFailure::Incompatible(format!(
            "the changelog topic `{topic}` holds no checkpoint record, but Kafka's committed offsets name checkpoint \
             {n}: it is not this job's changelog, or it was emptied"
        )))
    })?;
    if checkpoint.n != n {
        return Err(Unreplayed::FallsShort(TaskFailure::Incompatible(format!(
            "the changelog topic `{topic}` ends at checkpoint {}, but Kafka's committed offsets name checkpoint {n}: \
             the topic or the offsets were changed outside weir",
            checkpoint.n
        ))));
    }
    let recorded = layout::decode(&checkpoint).ok().and_then(|snapshot| snapshot.shape.key_groups);
    if recorded != Some(placement.groups().count()) {
        return Err(Unreplayed::FallsShort(other_groups(job, topic, placement, recorded)));
    }
    store.finish_replay(&checkpoint, &positions)?;
    done(what);
    Ok(())
}

/// Reads every committed record of every partition, in order, until each partition's end.
/// A partition's end is counted once: librdkafka reports it again when records come after
/// it (a transaction's end moving the last stable offset), and two reports of one
/// partition must not end the read of another.
fn read_to_end(
    consumer: &BaseConsumer<Reader>,
    topic: &str,
    partitions: u32,
    mut each: impl FnMut(i32, i64, &rdkafka::message::BorrowedMessage<'_>) -> Result<(), TaskFailure>,
) -> Result<(), TaskFailure> {
    let mut ended = BTreeSet::new();
    // Since when nothing has been read; no clock is read per record.
    let mut quiet_since: Option<Instant> = None;
    while ended.len() < partitions as usize {
        let Some(result) = consumer.poll(Duration::from_millis(100)) else {
            if quiet_since.get_or_insert_with(Instant::now).elapsed() > STALL_TIMEOUT {
                return Err(TaskFailure::Kafka(format!(
                    "reading the changelog topic `{topic}` made no progress for {} s ({} of {partitions} \
                     partitions not read to their end)",
                    STALL_TIMEOUT.as_secs(),
                    partitions as usize - ended.len()
                )));
            }
            continue;
        };
        quiet_since = None;
        match result {
            Ok(message) => each(message.partition(), message.offset(), &message)?,
            Err(KafkaError::PartitionEOF(partition)) => {
                ended.insert(partition);
            }
            Err(error) => return Err(TaskFailure::Kafka(format!("reading the changelog topic `{topic}`: {error}"))),
        }
    }
    Ok(())
}

/// Where the first committed record of the changelog is, if it holds any.
fn first_record(consumer: &BaseConsumer<Reader>, topic: &str, partitions: u32) -> Result<Option<String>, TaskFailure> {
    let mut found = None;
    let result = read_to_end(consumer, topic, partitions, |partition, offset, _| {
        found = Some(format!("partition {partition} offset {offset}"));
        Err(TaskFailure::Stopped)
    });
    match (result, found) {
        (Err(TaskFailure::Stopped), found @ Some(_)) => Ok(found),
        (Err(error), _) => Err(error),
        (Ok(()), _) => Ok(None),
    }
}

/// A reader's client context: librdkafka reports each partition's end as a global
/// error too, which is the end a reader waits for, not an error.
struct Reader;

impl ClientContext for Reader {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)) {
            tracing::error!("librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for Reader {}

/// A read_committed consumer of every partition of the changelog, from `from` (a
/// partition not listed, or with `None` every partition, from its start).
fn reader(job: &Job, topic: &str, partitions: u32, from: Option<&BTreeMap<i32, i64>>) -> Result<BaseConsumer<Reader>, TaskFailure> {
    let start = |partition| from.and_then(|from| from.get(&partition)).map_or(Offset::Beginning, |&offset| Offset::Offset(offset));
    reader_for(job, topic, (0..partitions as i32).map(|partition| (partition, start(partition))))
}

/// A read_committed consumer of the changelog's `partitions`, each from its offset.
fn reader_for(job: &Job, topic: &str, partitions: impl Iterator<Item = (i32, Offset)>) -> Result<BaseConsumer<Reader>, TaskFailure> {
    let consumer: BaseConsumer<Reader> = client_config(job)
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        // A partition's end is known from a fetch that returns nothing new: the broker
        // would hold such a fetch 500 ms by default, and a replay waits for every end.
        .set("fetch.wait.max.ms", "10")
        .create_with_context(Reader)
        .map_err(|e| TaskFailure::Kafka(format!("creating a consumer of the changelog topic `{topic}`: {e}")))?;
    // With a broker connection up first, the partitions' first offsets are asked for at
    // once; without, librdkafka asks again 500 ms later. A broker that does not answer
    // is left for the read to report.
    let _ = consumer.fetch_metadata(Some(topic), REQUEST_TIMEOUT);
    let mut list = TopicPartitionList::new();
    for (partition, start) in partitions {
        list.add_partition_offset(topic, partition, start)
            .map_err(|e| TaskFailure::Kafka(format!("assigning the changelog topic `{topic}`: {e}")))?;
    }
    consumer
        .assign(&list)
        .map_err(|e| TaskFailure::Kafka(format!("assigning the changelog topic `{topic}`: {e}")))?;
    Ok(consumer)
}

/// A client for metadata and offsets on the sink's brokers.
fn client(job: &Job) -> Result<BaseConsumer, TaskFailure> {
    client_config(job)
        .create()
        .map_err(|e| TaskFailure::Kafka(format!("creating a client for {}: {e}", job.producer.brokers)))
}

/// The changelog's partition count; `None` if the topic does not exist.
fn partition_count(job: &Job, topic: &str) -> Result<Option<u32>, TaskFailure> {
    let consumer = client(job)?;
    let metadata = consumer
        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
        .map_err(|e| TaskFailure::Kafka(format!("reading the metadata of the changelog topic `{topic}` on {}: {e}", job.producer.brokers)))?;
    let found = metadata.topics().iter().find(|t| t.name() == topic);
    Ok(match found {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => Some(t.partitions().len() as u32),
        _ => None,
    })
}

/// The changelog's settings `keys`, as the broker describes them (empty for one it has
/// not), from one request.
fn topic_configs<const N: usize>(job: &Job, topic: &str, keys: [&str; N]) -> Result<[String; N], TaskFailure> {
    let kafka = |e: String| TaskFailure::Kafka(format!("describing the changelog topic `{topic}` on {}: {e}", job.producer.brokers));
    let admin = admin(job)?;
    let options = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
    let results = runtime()?
        .block_on(admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options))
        .map_err(|e| kafka(e.to_string()))?;
    let resource = results.into_iter().next().ok_or_else(|| kafka("no answer".into()))?.map_err(|code| kafka(code.to_string()))?;
    Ok(keys.map(|key| resource.get(key).and_then(|entry| entry.value.clone()).unwrap_or_default()))
}

/// The changelog's setting `key`, as the broker describes it (empty if it has none).
fn topic_config(job: &Job, topic: &str, key: &str) -> Result<String, TaskFailure> {
    topic_configs(job, topic, [key]).map(|[value]| value)
}

fn admin(job: &Job) -> Result<AdminClient<DefaultClientContext>, TaskFailure> {
    client_config(job)
        .create()
        .map_err(|e| TaskFailure::Kafka(format!("creating an admin client for {}: {e}", job.producer.brokers)))
}

/// A runtime for one admin call: the admin API is async, recovery is not.
fn runtime() -> Result<tokio::runtime::Runtime, TaskFailure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TaskFailure::Kafka(format!("starting a runtime for the admin client: {e}")))
}

fn create(job: &Job, topic: &str, placement: Placement) -> Result<(), TaskFailure> {
    let admin = admin(job)?;
    let partitions = i32::try_from(placement.partitions()).expect("at most 32768 key groups");
    // -1: the broker's default replication factor.
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1))
        .set("cleanup.policy", "compact")
        .set("min.cleanable.dirty.ratio", CLEANABLE_DIRTY_RATIO)
        .set("segment.bytes", SEGMENT_BYTES)
        .set("segment.ms", SEGMENT_MS)
        .set("compression.type", COMPRESSION);
    let options = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT)).request_timeout(Some(REQUEST_TIMEOUT));
    let results = runtime()?
        .block_on(admin.create_topics([&new], &options))
        .map_err(|e| TaskFailure::Kafka(format!("creating the changelog topic `{topic}` on {}: {e}", job.producer.brokers)))?;
    for result in results {
        match result {
            Ok(_) => {}
            // Created meanwhile, by another process of the job or by hand.
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => return created_meanwhile(job, topic, placement),
            Err((_, code)) => {
                return Err(TaskFailure::Kafka(format!(
                    "creating the changelog topic `{topic}` ({partitions} partitions, compacted) on {}: {code}; create \
                     it yourself, or grant weir the right to",
                    job.producer.brokers
                )));
            }
        }
    }
    tracing::info!(topic, partitions, "created the changelog topic");
    Ok(())
}

/// A changelog someone else created while this process meant to: used as it is only
/// with the partition count this process would have given it (another process of the
/// job gives the same); any other count ends the attempt, and the next one's `prepare`
/// takes the topic as it finds it, before anything is written into it.
fn created_meanwhile(job: &Job, topic: &str, placement: Placement) -> Result<(), TaskFailure> {
    let found = recovery::until_listed(|| partition_count(job, topic), |found| matches!(found, Ok(None)))?;
    if found == Some(placement.partitions()) {
        return Ok(());
    }
    Err(TaskFailure::Kafka(format!(
        "the changelog topic `{topic}` on {} was created by someone else while this process created it, with {} \
         partitions where it meant {}: the job starts again and takes the topic as it is",
        job.producer.brokers,
        found.map_or_else(|| "unknown".to_string(), |n| n.to_string()),
        placement.partitions()
    )))
}

fn wrong_partitions(job: &Job, topic: &str, found: u32, key_groups: KeyGroups) -> TaskFailure {
    TaskFailure::Incompatible(format!(
        "the changelog topic `{topic}` on {} has {found} partitions but the job has {} key groups, and a changelog \
         has one partition per key group at most: it is another job's changelog or was changed outside weir; set \
         changelog_topic to this job's",
        job.producer.brokers,
        key_groups.count()
    ))
}

/// The changelog's checkpoint record names `recorded` key groups, not those a replay
/// placed its records by.
fn other_groups(job: &Job, topic: &str, placement: Placement, recorded: Option<u32>) -> TaskFailure {
    let Some(recorded) = recorded else {
        return TaskFailure::Incompatible(format!(
            "the changelog topic `{topic}` on {} ends with a checkpoint record that names no key groups (an older \
             weir wrote it) but has {} partitions, not one per key group: it was changed outside weir",
            job.producer.brokers,
            placement.partitions()
        ));
    };
    TaskFailure::Incompatible(format!(
        "the changelog topic `{topic}` on {} holds the state of a job of {recorded} key groups, but was read as one \
         of {}: key groups are fixed by a job's first checkpoint, and this job file sets key_groups to another \
         count (or leaves it out while the input topic's partition count moved the default); set key_groups = \
         {recorded}",
        job.producer.brokers,
        placement.groups().count()
    ))
}

/// Clients of the changelog: on the sink's brokers (its transactions write it), with
/// the job's `[source.kafka]` properties (security settings, say).
fn client_config(job: &Job) -> ClientConfig {
    source::config::client_config(&job.producer.brokers, &job.name, job.source_kafka())
}

/// Reads where changelog partitions end, just before a checkpoint's commit and on a
/// fresh start: the offsets the store records with its state, from which recovery
/// replays the tail.
pub(crate) struct Ends {
    consumer: BaseConsumer,
    topic: String,
}

impl Ends {
    /// Where partitions end for read_committed readers (the source's properties force
    /// it): their last stable offsets.
    pub(crate) fn stable(job: &Job) -> Result<Ends, TaskFailure> {
        let consumer = client_config(job)
            .create()
            .map_err(|e| TaskFailure::Kafka(format!("creating a client for {}: {e}", job.producer.brokers)))?;
        Ok(Ends { consumer, topic: topic(job) })
    }

    pub(crate) fn new(job: &Job) -> Result<Ends, TaskFailure> {
        // Uncommitted records count: the checkpoint's own, not yet committed when this
        // reads, come before any of the next checkpoint's.
        let consumer = client_config(job)
            .set("isolation.level", "read_uncommitted")
            .create()
            .map_err(|e| TaskFailure::Kafka(format!("creating a client for {}: {e}", job.producer.brokers)))?;
        Ok(Ends { consumer, topic: topic(job) })
    }

    /// Where every partition of a changelog of `count` partitions ends.
    pub(crate) fn all(&self, count: u32) -> Result<BTreeMap<i32, i64>, TaskFailure> {
        Ok(self.of(&(0..count as i32).collect())?.into_iter().collect())
    }

    /// The end offset of each of `partitions`, in one request per leader. Called before
    /// the next checkpoint writes to the changelog, each is at or before its first record.
    /// Retried for a while: a topic just created has no leaders at first.
    pub(crate) fn of(&self, partitions: &BTreeSet<i32>) -> Result<Vec<(i32, i64)>, TaskFailure> {
        self.offsets(partitions, Offset::End)
    }

    /// The first offset each of `partitions` still holds, in one request per leader.
    pub(crate) fn starts(&self, partitions: &BTreeSet<i32>) -> Result<Vec<(i32, i64)>, TaskFailure> {
        self.offsets(partitions, Offset::Beginning)
    }

    /// Each partition's end, or start (`which`), retried for a while.
    fn offsets(&self, partitions: &BTreeSet<i32>, which: Offset) -> Result<Vec<(i32, i64)>, TaskFailure> {
        if partitions.is_empty() {
            // librdkafka refuses a request for no partition.
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            match self.try_offsets(partitions, which) {
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!("retrying: {error}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                done => return done,
            }
        }
    }

    fn try_offsets(&self, partitions: &BTreeSet<i32>, which: Offset) -> Result<Vec<(i32, i64)>, TaskFailure> {
        let topic = &self.topic;
        let kafka = |e: String| TaskFailure::Kafka(format!("reading where the changelog topic `{topic}` begins and ends: {e}"));
        let mut list = TopicPartitionList::new();
        for &partition in partitions {
            // As a ListOffsets timestamp, End (-1) asks for the end, Beginning (-2) the start.
            list.add_partition_offset(topic, partition, which).map_err(|e| kafka(e.to_string()))?;
        }
        let found = self.consumer.offsets_for_times(list, REQUEST_TIMEOUT).map_err(|e| kafka(e.to_string()))?;
        found
            .elements()
            .iter()
            .map(|element| {
                element.error().map_err(|e| kafka(format!("partition {}: {e}", element.partition())))?;
                match element.offset() {
                    Offset::Offset(offset) => Ok((element.partition(), offset)),
                    other => Err(kafka(format!("partition {}: no offset ({other:?})", element.partition()))),
                }
            })
            .collect()
    }
}
