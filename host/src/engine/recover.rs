//! An attempt's first half (DESIGN.md §2, recovery order): fence earlier instances,
//! read the committed checkpoint from Kafka, load and decode it from the store, discard
//! what was sealed after it, bring the keyed state to it, and rebuild every task's
//! starting point from it: each operator subtask restores the key groups it owns now,
//! whatever the parallelism that wrote them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::checkpoint::layout::{self, FormatError, PartitionState, Shape, Snapshot};
use crate::checkpoint::recovery::{self, RecoveryError, ShardResume};
use crate::checkpoint::store::{CheckpointStore, StoreError};
use crate::chunk;
use crate::dataflow::{InputTopics, KeyGroups, Shard, TaskFailure, input_id, within_max_partitions};
use crate::job::{self, Job, Port};
use crate::metrics::{Metrics, progress};
use crate::operator::{OperatorInstance, Plugin};
use crate::sink::{self, Delivery, Member, ShardSink, Sink, SinkConfig, SinkError};
use crate::source;
use crate::state::changelog;

use super::fault::{self, Step};

/// How long Kafka may take to answer at start-up before the job gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where an attempt starts: every task's state as of the last committed checkpoint.
pub(super) struct Recovered {
    /// Fenced, with a transaction open.
    pub(super) sink: Sink,
    /// `sources[i]`: where source task i starts (`parallelism` tasks per job source).
    pub(super) sources: Vec<SourceStart>,
    /// `operators[stage][subtask]`: a restored instance and the watermark it had reached.
    pub(super) operators: Vec<Vec<(OperatorInstance, i64)>>,
    /// The id of the attempt's first checkpoint.
    pub(super) next: u64,
    /// The job's key groups: recorded by its checkpoints, or chosen now on a fresh start.
    pub(super) key_groups: KeyGroups,
    /// Which changelog partition holds each key group (a job without keyed state: one
    /// partition per group, which nothing writes).
    pub(super) placement: changelog::Placement,
    /// The changelog positions the store's state reflects (`StateBase::positions`).
    pub(super) positions: BTreeMap<i32, i64>,
    /// In a process of a scaled-out job, the input partitions (and key groups) it owns.
    pub(super) shard: Option<Shard>,
}

/// Where one source task starts: the job source it reads and its partitions (Kafka's
/// numbers) at the offsets to read next.
pub(super) struct SourceStart {
    pub(super) source: usize,
    pub(super) partitions: BTreeMap<i32, PartitionState>,
}

pub(super) fn recover(job: &Job, plugins: &[Plugin], store: &CheckpointStore, metrics: &Metrics) -> Result<Recovered, TaskFailure> {
    let started = Instant::now();
    let step = |what: &str| tracing::debug!(elapsed_ms = started.elapsed().as_millis() as u64, "recovery: {what}");
    let offsets_consumer = consumer(job)?;
    let inputs = input_topics(job);
    let partitions = input_partitions(job, &offsets_consumer)?;
    let resume_consumer = consumer(job)?;
    // Fence first: a zombie's open transaction is aborted before offsets are read.
    let sink = Sink::connect(&sink_config(job, &job.name), offsets_consumer, None)?;
    step("fenced the earlier instance and connected the producer");
    refuse_scaled_out_members(job, &resume_consumer)?;
    step("found no scaled-out member of the job's group");
    metrics.group().owned_partitions.set(partitions.len() as i64);
    let resume = committed_inputs(job, &resume_consumer, &partitions, &inputs)?;
    step("read committed offsets");
    // Anything sealed after the committed checkpoint (on a fresh start: anything at all)
    // never reached its Kafka commit; the attempt reuses those ids, so it must go. The
    // keyed state becomes that of the committed checkpoint: the state_dir's, caught up
    // from the changelog's tail, else rebuilt from the whole changelog.
    let input_partitions = first_source_partitions(&inputs, &partitions);
    let (snapshot, positions, local, looked) = match resume.checkpoint {
        Some(n) if job.keeps_state() => {
            let expected = expected_groups(job, input_partitions);
            let Loaded { snapshot, positions, local, looked } = load(job, store, (n, expected), &resume.offsets)?;
            (Some(snapshot), Some(positions), local, looked)
        }
        Some(n) => (Some(load_stateless(job, store, n, &partitions, &resume)?), Some(BTreeMap::new()), None, None),
        None => (None, None, None, None),
    };
    let committed = resume.checkpoint.unwrap_or(0);
    step("brought the keyed state to the committed checkpoint");
    fault::point(Step::DuringRecovery, committed);

    let key_groups = key_groups(job, input_partitions, snapshot.as_ref())?;
    let (placement, prepared) = match job.keeps_state() {
        true => {
            let input_partitions = u32::try_from(input_partitions).unwrap_or(u32::MAX);
            changelog::prepare(job, (key_groups, input_partitions), resume.checkpoint, local.as_ref(), looked)?
        }
        false => (changelog::Placement::new(key_groups, key_groups.count()), changelog::Prepared::Ready),
    };
    step("looked at the changelog topic");
    let mut positions = match (positions, &prepared, resume.checkpoint) {
        (Some(positions), changelog::Prepared::Ready, Some(n)) if job.keeps_state() && job.producer.delivery == job::Delivery::AtLeastOnce => {
            changelog::skip_uncommitted(job, store, n, placement, &positions)?
        }
        (Some(positions), _, _) => positions,
        (None, _, _) => start_fresh(job, store, placement)?,
    };
    let max_timestamp = |partition| snapshot.as_ref().and_then(|s| s.partitions.get(&partition)).map(|state| state.max_timestamp);
    let sources = start_offsets(job, &resume_consumer, &partitions, &resume.offsets, true, max_timestamp)?;
    let restore = snapshot.as_ref().map_or(Restore::Fresh, Restore::Checkpoint);
    let operators = instances(job, plugins, metrics, store, restore, key_groups)?;
    step("restored the operators");
    sink.begin()?;
    if let changelog::Prepared::Reseed(why) = prepared {
        let stages = u32::try_from(job.operators.len()).expect("a job has few operators");
        let kill_point = || fault::point(Step::DuringReseed, committed);
        positions = changelog::reseed(job, store, &sink, placement, (committed, stages), &why, kill_point)?;
    }
    tracing::info!(
        job = %job.name, checkpoint = ?resume.checkpoint, partitions = partitions.len(),
        key_groups = key_groups.count(), changelog_partitions = placement.partitions(), "recovered; running"
    );
    Ok(Recovered { sink, sources, operators, next: committed + 1, key_groups, placement, positions, shard: None })
}

/// One attempt of a process of a scaled-out job (DESIGN.md §7) over the input
/// partitions `owned` that the job's consumer group assigned it: fences every earlier
/// owner of them, reads their committed offsets, rebuilds the state of their key groups
/// from the changelog and restores it into the operator subtasks.
pub(super) fn recover_shard(
    job: &Job,
    plugins: &[Plugin],
    store: &CheckpointStore,
    metrics: &Metrics,
    owned: &[i32],
    member: Member,
    abandoned: &dyn Fn() -> bool,
) -> Result<Recovered, TaskFailure> {
    let started = Instant::now();
    // A process that lost these partitions meanwhile fences no one and reads nothing more.
    let go_on = || if abandoned() { Err(TaskFailure::Stopped) } else { Ok(()) };
    let offsets_consumer = consumer(job)?;
    let input = &job.sources[0];
    let partitions = recovery::partitions(&offsets_consumer, &input.brokers, &input.topic, CONNECT_TIMEOUT)
        .map_err(TaskFailure::Recovery)?;
    let count = u32::try_from(partitions.len()).expect("fewer than 2^32 partitions");
    if let Some(missing) = owned.iter().find(|p| !partitions.contains(p)) {
        return Err(TaskFailure::Kafka(format!("assigned partition {missing} of `{}`, which has {count}", input.topic)));
    }
    check_co_partitioned(job, &offsets_consumer, partitions.len())?;
    let shard = Shard::new(count, owned.iter().copied());
    // The group assigns the first source's partitions; the process owns the same
    // partition numbers of every source.
    let owned_inputs: Vec<i32> =
        (0..job.sources.len()).flat_map(|source| owned.iter().map(move |&partition| input_id(source, partition))).collect();
    go_on()?;
    let operators: Vec<String> = job.operators.iter().map(|o| o.name.clone()).collect();
    let shape = layout::shape_hash(&operators, &source_topics(job));
    let lowest = *owned.first().expect("an attempt owns a partition");
    let transactional_id = sink::shard_transactional_id(&job.name, lowest);
    let config = sink_config(job, &transactional_id);
    let step = |what: &str| tracing::debug!(elapsed_ms = started.elapsed().as_millis() as u64, "recovery: {what}");
    // The changelog is looked at (a few requests) while the earlier owners are fenced.
    let (connected, inspected) = std::thread::scope(|scope| {
        let inspecting = scope.spawn(|| match job.keeps_state() {
            true => changelog::inspect_shard(job, (expected_groups(job, count as usize), count)),
            false => Ok(None),
        });
        let shard_sink = ShardSink { member, partitions: count, shape, lowest, key_groups: None };
        let connected = connect_fencing(job, &config, &owned[1..], || Sink::connect(&config, offsets_consumer, Some(shard_sink)))
            .and_then(|sink| {
                step("fenced the earlier owners and connected the producer");
                let resume_consumer = consumer(job)?;
                let resume = committed_shard_inputs(job, &resume_consumer, owned)?;
                step("read committed offsets");
                Ok((sink, resume_consumer, resume))
            });
        (connected, inspecting.join().expect("the inspecting thread panicked"))
    });
    let (mut sink, resume_consumer, resume) = connected?;
    go_on()?;
    check_placement(job, count, shape, &resume)?;
    let recorded = recorded_groups(job, &resume)?;
    let (placement, rebuilt) = match inspected?.map(|placement| as_recorded(job, placement, recorded, count)).transpose()? {
        Some(placement) => {
            let committed = resume.offsets.keys().copied().collect();
            let fence_committers = |stuck: &[i32]| fence_last_committers(job, &config, &shard, stuck, &resume);
            let rebuilt = changelog::rebuild_shard(job, store, placement, &shard, &committed, fence_committers)?;
            if let Some((&input, &first)) = rebuilt.with_state.iter().find(|(input, _)| !resume.offsets.contains_key(input)) {
                return Err(changelog::earlier_state(job, input, first));
            }
            (placement, rebuilt)
        }
        None => {
            let key_groups = shardable(job, recorded.unwrap_or_else(|| expected_groups(job, count as usize)), count)?;
            let placement = changelog::Placement::for_new(key_groups, count);
            if job.keeps_state() {
                changelog::create_shard(job, placement, !resume.offsets.is_empty())?;
            }
            store.clear()?;
            (placement, changelog::Rebuilt::default())
        }
    };
    let key_groups = placement.groups();
    sink.record_key_groups(key_groups.count());
    let entries = rebuilt.entries;
    step("rebuilt the key groups");
    let offsets = resume.offsets.iter().map(|(&partition, &(offset, _))| (partition, offset)).collect();
    let max_timestamp = |partition| resume.offsets.get(&partition).and_then(|(_, meta)| meta.max_timestamp);
    let sources = start_offsets(job, &resume_consumer, &owned_inputs, &offsets, false, max_timestamp)?;
    let restore = match resume.offsets.is_empty() {
        true => Restore::Fresh,
        false => Restore::Shard { watermark: shard_watermark(job, &owned_inputs, &resume) },
    };
    let operators = instances(job, plugins, metrics, store, restore, key_groups)?;
    step("restored the operators");
    sink.begin()?;
    tracing::info!(
        job = %job.name, partitions = ?owned, key_groups = shard.groups(key_groups).count(), changelog_partitions_from_state_dir = rebuilt.cached, entries,
        transactional_id = %transactional_id, duration_ms = started.elapsed().as_millis() as u64,
        "restored this process's partitions; running"
    );
    let next = resume.checkpoint.unwrap_or(0) + 1;
    Ok(Recovered { sink, sources, operators, next, key_groups, placement, positions: rebuilt.positions, shard: Some(shard) })
}

/// Connects this process's producer (`connect`, which fences the earlier holder of its
/// own transactional.id) while fencing, in parallel, the producers of the processes whose
/// lowest partition was one of `partitions` and of a single process of the job: what a
/// dead or paused owner left pending would hold back every read_committed reader of it
/// until its transaction timed out, and a single process would not stop.
fn connect_fencing(
    job: &Job,
    config: &SinkConfig<'_>,
    partitions: &[i32],
    connect: impl FnOnce() -> Result<Sink, SinkError> + Send,
) -> Result<Sink, TaskFailure> {
    std::thread::scope(|scope| {
        // A process of this job run without scale_out too (the single process's id).
        let ids = partitions.iter().map(|&partition| sink::shard_transactional_id(&job.name, partition)).chain([job.name.clone()]);
        let fencing: Vec<_> = ids.map(|id| scope.spawn(move || sink::fence(config, &id))).collect();
        let sink = connect();
        for fence in fencing {
            fence.join().expect("a fencing thread panicked")?;
        }
        Ok(sink?)
    })
}

/// Fences the producers that last committed the input partitions of the `stuck`
/// changelog partitions (named in their offsets), when a transaction stays open there:
/// an earlier owner whose lowest partition went to a process that has not started yet,
/// or one that failed and waits to restart.
fn fence_last_committers(job: &Job, config: &SinkConfig<'_>, shard: &Shard, stuck: &[i32], resume: &ShardResume) {
    // Each changelog partition's groups travel in one input partition: its number's.
    let inputs: BTreeSet<i32> = stuck.iter().map(|&partition| shard.partition_of(partition as u32)).collect();
    let committers: BTreeSet<i32> = inputs
        .iter()
        .filter_map(|input| resume.offsets.get(input).and_then(|(_, meta)| meta.by))
        .filter(|by| !shard.owns_partition(*by))
        .collect();
    for by in committers {
        let id = sink::shard_transactional_id(&job.name, by);
        tracing::info!(transactional_id = %id, "a transaction stays open on this process's key groups: fencing the producer that last committed them");
        if let Err(error) = sink::fence(config, &id) {
            tracing::warn!("fencing {id}: {error}");
        }
    }
}

/// A scaled-out job's state stays where its offsets say it was placed: by the same
/// input partition count and key groups, for the same operators.
fn check_placement(job: &Job, partitions: u32, shape: u64, resume: &ShardResume) -> Result<(), TaskFailure> {
    for (&partition, (_, meta)) in &resume.offsets {
        if let (Some(wanted), Some(recorded)) = (job.key_groups, meta.key_groups)
            && wanted != recorded
        {
            return Err(TaskFailure::Incompatible(format!(
                "the job file sets key_groups = {wanted}, but this job's checkpoints were taken with {recorded} key \
                 groups (the offsets of partition {partition} of `{}` say so): key groups are fixed by a job's first \
                 checkpoint; set key_groups = {recorded}, or start over under a new job name",
                job.sources[0].topic
            )));
        }
        if let Some(placed) = meta.partitions.filter(|&placed| placed != partitions) {
            return Err(TaskFailure::Incompatible(format!(
                "the input topic `{}` has {partitions} partitions, but this job's keyed state was placed for {placed} \
                 (the offsets of partition {partition} say so): partitions were added, which moves keys to other \
                 partitions and so their state out of reach, and Kafka cannot remove them. Start the job over under \
                 a new job name (its state starts empty)",
                job.sources[0].topic
            )));
        }
        if meta.shape.is_some_and(|committed| committed != shape) {
            return Err(TaskFailure::Incompatible(format!(
                "the offsets of partition {partition} of `{}` were committed by a job with other operators or \
                 another input topic than this job file's; keyed state cannot move between them: restore the old \
                 job file, or start over under a new job name",
                job.sources[0].topic
            )));
        }
    }
    Ok(())
}

/// The watermark a restored operator subtask starts from: the least, over this
/// process's partitions of stream sources (`owned`, by input id), of the greatest event
/// time read before the checkpoint, less the source's allowed out-of-orderness; unknown
/// (a partition without a time) holds it back.
fn shard_watermark(job: &Job, owned: &[i32], resume: &ShardResume) -> i64 {
    let inputs = input_topics(job);
    let streams = owned.iter().map(|&id| (id, &job.sources[inputs.resolve(id).0])).filter(|(_, source)| !source.table);
    streams
        .map(|(id, source)| {
            let out_of_orderness = i64::try_from(source.max_out_of_orderness_ms).unwrap_or(i64::MAX);
            match resume.offsets.get(&id).and_then(|(_, meta)| meta.max_timestamp) {
                Some(time) if time != i64::MIN => time.saturating_sub(out_of_orderness),
                _ => i64::MIN,
            }
        })
        .min()
        .unwrap_or(i64::MIN)
}

/// Scaled out, every source has the first source's partition count: a process owns
/// the same partition numbers of each, so the key groups of a key are in one process
/// whichever source its records come from.
fn check_co_partitioned(job: &Job, consumer: &BaseConsumer, count: usize) -> Result<(), TaskFailure> {
    for source in &job.sources[1..] {
        let partitions =
            recovery::partitions(consumer, &source.brokers, &source.topic, CONNECT_TIMEOUT).map_err(TaskFailure::Recovery)?;
        if partitions.len() != count {
            return Err(TaskFailure::Incompatible(format!(
                "scale_out needs every source co-partitioned with the first: `{}` has {} partitions, `{}` has {count}; \
                 the processes own the same partition numbers of every source, so give the topics one partition \
                 count (and produce them keyed with Kafka's default partitioner), or run one process",
                source.topic,
                partitions.len(),
                job.sources[0].topic
            )));
        }
    }
    Ok(())
}

/// The committed offsets of the partitions `owned` of every source, by input id; the
/// checkpoint is the greatest any of them names.
fn committed_shard_inputs(job: &Job, consumer: &BaseConsumer, owned: &[i32]) -> Result<ShardResume, TaskFailure> {
    let mut resume = ShardResume::default();
    for (index, source) in job.sources.iter().enumerate() {
        let found = recovery::committed_shard(consumer, &job.name, &source.topic, owned, CONNECT_TIMEOUT)
            .map_err(TaskFailure::Recovery)?;
        resume.checkpoint = resume.checkpoint.max(found.checkpoint);
        resume.offsets.extend(found.offsets.into_iter().map(|(partition, committed)| (input_id(index, partition), committed)));
    }
    Ok(resume)
}

/// The key groups a scaled-out job's committed offsets recorded, when its job file names
/// none (`check_placement` refuses one that names another count): the default for its
/// input may have been another when they were taken. Offsets that disagree are refused.
fn recorded_groups(job: &Job, resume: &ShardResume) -> Result<Option<KeyGroups>, TaskFailure> {
    if job.key_groups.is_some() {
        return Ok(None);
    }
    let counts: BTreeSet<u32> = resume.offsets.values().filter_map(|(_, meta)| meta.key_groups).filter(|&g| g > 0).collect();
    match counts.len() {
        0 | 1 => Ok(counts.first().copied().map(KeyGroups::new)),
        _ => Err(TaskFailure::Incompatible(format!(
            "the committed offsets of `{}` record different key-group counts ({counts:?}): they were written by \
             another job of the same name, or changed outside weir; start over under a new job name",
            job.sources[0].topic
        ))),
    }
}

/// The changelog's `placement` as found from the job file's key groups, or, if its
/// offsets recorded others, those in the same partitions; refused unless a scaled-out
/// job can keep its state in them (`shardable`).
fn as_recorded(job: &Job, placement: changelog::Placement, recorded: Option<KeyGroups>, partitions: u32) -> Result<changelog::Placement, TaskFailure> {
    let placement = match recorded {
        Some(groups) if groups != placement.groups() => {
            if placement.partitions() > groups.count() {
                return Err(TaskFailure::Incompatible(format!(
                    "the changelog of job `{}` has {} partitions, more than the {} key groups its checkpoints recorded: \
                     it was changed outside weir; start over under a new job name",
                    job.name,
                    placement.partitions(),
                    groups.count()
                )));
            }
            changelog::Placement::new(groups, placement.partitions())
        }
        _ => placement,
    };
    shardable(job, placement.groups(), partitions)?;
    Ok(placement)
}

/// `key_groups`, if a scaled-out job can keep its state in them: whole groups per input
/// partition, and at least one per subtask.
fn shardable(job: &Job, key_groups: KeyGroups, partitions: u32) -> Result<KeyGroups, TaskFailure> {
    if key_groups.count().is_multiple_of(partitions) && job.parallelism <= key_groups.count() {
        return Ok(key_groups);
    }
    Err(TaskFailure::Incompatible(format!(
        "scale_out needs the job's key groups ({}) to be a multiple of the partition count of `{}` ({partitions}), \
         so that each partition carries whole key groups, and at least parallelism ({}); set key_groups to such \
         a multiple (or remove it on a new job), or run one process",
        key_groups.count(),
        job.sources[0].topic,
        job.parallelism
    )))
}

/// How long the group listing's metadata request may take before the listing asks anyway.
const METADATA_FIRST: Duration = Duration::from_secs(2);

/// A single process refuses to run a job whose consumer group has members: processes of
/// it run with scale_out, and the two would process the same partitions (the broker
/// takes a transactional commit without membership). Asked after its producer started,
/// so a scaled-out process that joins later fences it. A group that cannot be described
/// (a broker down) is an error too: better not to start than to run beside them.
fn refuse_scaled_out_members(job: &Job, consumer: &BaseConsumer) -> Result<(), TaskFailure> {
    // librdkafka lists groups on the brokers its metadata names; a new client that has
    // none yet waits for its first metadata refresh, about a second (measured: 950 ms of
    // every restart). Asking for metadata first takes milliseconds. A broker that does
    // not answer is left for the listing to report.
    let _ = consumer.fetch_metadata(Some(&job.sources[0].topic), METADATA_FIRST);
    let groups = recovery::while_coordinator_loads(CONNECT_TIMEOUT, || consumer.fetch_group_list(Some(&job.name), CONNECT_TIMEOUT)).map_err(|e| {
        TaskFailure::Kafka(format!(
            "describing consumer group `{}`, to make sure no process with scale_out = true runs this job: {e}; \
             start again once every broker answers",
            job.name
        ))
    })?;
    let members = groups.groups().iter().filter(|group| group.name() == job.name).map(|group| group.members().len()).sum::<usize>();
    if members > 0 {
        return Err(TaskFailure::Incompatible(format!(
            "consumer group `{}` has {members} member(s): processes of this job run with scale_out = true (a group \
             session outlives a killed one by up to its session timeout). Set scale_out = true here too, or stop them",
            job.name
        )));
    }
    Ok(())
}

/// That the input topics exist and their brokers answer (a scaled-out process would
/// otherwise wait for partitions without end).
pub(super) fn check_source(job: &Job) -> Result<(), TaskFailure> {
    let consumer = consumer(job)?;
    input_partitions(job, &consumer).map(|_| ())
}

/// The job's input topics, in source order.
pub(super) fn input_topics(job: &Job) -> InputTopics {
    InputTopics::new(job.sources.iter().map(|source| source.topic.clone()).collect())
}

/// Every input partition's id (`dataflow::input_id`), source by source.
fn input_partitions(job: &Job, consumer: &BaseConsumer) -> Result<Vec<i32>, TaskFailure> {
    let mut ids = Vec::new();
    for (index, source) in job.sources.iter().enumerate() {
        let partitions =
            recovery::partitions(consumer, &source.brokers, &source.topic, CONNECT_TIMEOUT).map_err(TaskFailure::Recovery)?;
        within_max_partitions(&source.topic, &partitions)?;
        ids.extend(partitions.into_iter().map(|partition| input_id(index, partition)));
    }
    Ok(ids)
}

/// How many of `partitions` (input ids) are the first source's: the default key groups
/// are a multiple of that.
fn first_source_partitions(inputs: &InputTopics, partitions: &[i32]) -> usize {
    partitions.iter().filter(|&&id| inputs.resolve(id).0 == 0).count()
}

/// The job's committed offsets over every source (one transaction commits them all, so
/// they name one checkpoint), by input id.
fn committed_inputs(job: &Job, consumer: &BaseConsumer, ids: &[i32], inputs: &InputTopics) -> Result<recovery::Resume, TaskFailure> {
    let mut resume = recovery::Resume::default();
    let mut checkpoints = BTreeSet::new();
    for (index, source) in job.sources.iter().enumerate() {
        let partitions: Vec<i32> =
            ids.iter().map(|&id| inputs.resolve(id)).filter(|&(of, _, _)| of == index).map(|(_, _, partition)| partition).collect();
        let found = recovery::committed(consumer, &job.name, &source.topic, &partitions, CONNECT_TIMEOUT)
            .map_err(TaskFailure::Recovery)?;
        checkpoints.extend(found.checkpoint);
        resume.offsets.extend(found.offsets.into_iter().map(|(partition, offset)| (input_id(index, partition), offset)));
        resume.max_timestamps.extend(found.max_timestamps.into_iter().map(|(partition, time)| (input_id(index, partition), time)));
    }
    if checkpoints.len() > 1 {
        let found = checkpoints.into_iter().collect();
        return Err(TaskFailure::Recovery(RecoveryError::Mixed { group: job.name.clone(), found }));
    }
    resume.checkpoint = checkpoints.into_iter().next();
    Ok(resume)
}

/// A fresh start: deletes every checkpoint and all keyed state, and records where the
/// changelog ends, so that a replay never reads what an earlier run of the job left in
/// it (an at-least-once job keeps that). Returns those ends.
fn start_fresh(job: &Job, store: &CheckpointStore, placement: changelog::Placement) -> Result<BTreeMap<i32, i64>, TaskFailure> {
    store.clear()?;
    if !job.keeps_state() {
        store.mark_state(0, &BTreeMap::new())?;
        return Ok(BTreeMap::new());
    }
    let ends = changelog::Ends::new(job)?.all(placement.partitions())?;
    store.mark_state(0, &ends)?;
    Ok(ends)
}

/// What a checkpoint of this job records about it.
pub(super) fn shape(job: &Job, key_groups: KeyGroups) -> Shape {
    Shape {
        parallelism: job.parallelism,
        key_groups: Some(key_groups.count()),
        operators: job.operators.iter().map(|o| o.name.clone()).collect(),
        source_topic: source_topics(job),
    }
}

/// The shape's `source_topic`: the input topics in source order, joined by `,`.
fn source_topics(job: &Job) -> String {
    job.sources.iter().map(|source| source.topic.as_str()).collect::<Vec<_>>().join(",")
}

/// The key groups the job file gives, else the default for the input's partition count:
/// the job's, unless its checkpoints recorded others.
fn expected_groups(job: &Job, partitions: usize) -> KeyGroups {
    job.key_groups.map_or_else(|| KeyGroups::default_for(u32::try_from(partitions).unwrap_or(u32::MAX)), KeyGroups::new)
}

/// The job's key groups: what its checkpoints recorded (the job file may only repeat
/// it), else the job file's, else the default for the input's partition count.
fn key_groups(job: &Job, partitions: usize, snapshot: Option<&Snapshot>) -> Result<KeyGroups, TaskFailure> {
    let recorded = snapshot.and_then(|s| s.shape.key_groups.map(|g| (s.n, g)));
    let count = match (job.key_groups, recorded) {
        (Some(wanted), Some((n, found))) if wanted != found => {
            return Err(TaskFailure::Incompatible(format!(
                "the job file sets key_groups = {wanted} but checkpoint {n} was taken with {found}; key groups \
                 are fixed by a job's first checkpoint: set key_groups = {found} (or remove it), or start over \
                 under a new job name"
            )));
        }
        (_, Some((_, found))) => found,
        (_, None) => expected_groups(job, partitions).count(),
    };
    if job.parallelism > count {
        return Err(TaskFailure::Incompatible(format!(
            "parallelism {} is more than the job's {count} key groups, so some subtask would own none; \
             lower parallelism to at most {count}",
            job.parallelism
        )));
    }
    Ok(KeyGroups::new(count))
}

/// A consumer of the job's group on its source brokers.
pub(super) fn consumer(job: &Job) -> Result<BaseConsumer, TaskFailure> {
    source::consumer(job.source_brokers(), &job.name, job.source_kafka())
        .map_err(|e| TaskFailure::Kafka(format!("creating a consumer for {}: {e}", job.source_brokers())))
}

fn sink_config<'a>(job: &'a Job, transactional_id: &'a str) -> SinkConfig<'a> {
    SinkConfig {
        job: &job.name,
        transactional_id,
        brokers: &job.producer.brokers,
        topics: job.sinks.iter().map(|sink| sink.topic.as_str()).collect(),
        dead_letter_topic: job.producer.dead_letter_topic.as_deref(),
        delivery: match job.producer.delivery {
            job::Delivery::ExactlyOnce => Delivery::ExactlyOnce,
            job::Delivery::AtLeastOnce => Delivery::AtLeastOnce,
        },
        extra: &job.producer.kafka,
    }
}

/// The committed checkpoint as recovery found it.
struct Loaded {
    /// Decoded and checked against this job's shape.
    snapshot: Snapshot,
    /// The changelog positions the stored state reflects.
    positions: BTreeMap<i32, i64>,
    /// The stored state, when recovery took it as it was, without reading the changelog
    /// (which may then have lost it: `changelog::prepare` checks).
    local: Option<changelog::Local>,
    /// The changelog topic as reading it found it.
    looked: Option<changelog::Looked>,
}

/// Checkpoint `n` with the keyed state brought to it. The state_dir's state is that of
/// `n`, or of an earlier committed checkpoint (a crash came before the fold of the later
/// ones) that the changelog's tail brings to `n`; a state_dir that cannot give `n`
/// (lost, or holding another instance's checkpoint of that number) is rebuilt from the
/// whole changelog. `expected`: the job's key groups unless its checkpoints say otherwise.
fn load(job: &Job, store: &CheckpointStore, (n, expected): (u64, KeyGroups), committed: &BTreeMap<i32, i64>) -> Result<Loaded, TaskFailure> {
    store.discard_after(n)?;
    let base = store.state_base()?;
    if base.n > n {
        let detail = format!(
            "it holds the state of checkpoint {}, newer than checkpoint {n} that Kafka's committed offsets name; \
             the offsets were moved back outside weir",
            base.n
        );
        return Err(TaskFailure::Store(corrupt(store, base.n, Some("keyed state".into()), detail)));
    }
    if base.n == n {
        match checkpoint_here(job, store, n, committed) {
            Err(TaskFailure::Store(StoreError::Missing { .. })) => {}
            Err(other) => return Err(other),
            Ok(snapshot) => {
                let positions = base.positions.clone().unwrap_or_default();
                let local = changelog::Local { base, reseeding: store.reseeding()? };
                return Ok(Loaded { snapshot, positions, local: Some(local), looked: None });
            }
        }
    }
    if job.producer.delivery == job::Delivery::AtLeastOnce {
        // Its checkpoint entry must be here: the changelog's last checkpoint record may be
        // a later one, written outside a transaction.
        let snapshot = checkpoint_here(job, store, n, committed).map_err(|error| match error {
            TaskFailure::Store(StoreError::Missing { .. }) => TaskFailure::Incompatible(format!(
                "checkpoint {n} is not in the state_dir {}, and an at-least-once job cannot rebuild it from its \
                 changelog, which it writes outside transactions (the changelog may hold more or less than \
                 checkpoint {n}); restore the state_dir, or start over deliberately with empty state by deleting \
                 consumer group `{}`",
                store.dir().display(),
                job.name
            )),
            other => other,
        })?;
        let groups = snapshot.shape.key_groups.map_or(expected, KeyGroups::new);
        let looked = changelog::catch_up(job, store, (n, groups), &base)?;
        return Ok(Loaded { snapshot, positions: store.state_base()?.positions.unwrap_or_default(), local: None, looked: Some(looked) });
    }
    let groups = stored_groups(store, base.n).unwrap_or(expected);
    let looked = changelog::catch_up(job, store, (n, groups), &base)?;
    let snapshot = checkpoint_here(job, store, n, committed)?;
    Ok(Loaded { snapshot, positions: store.state_base()?.positions.unwrap_or_default(), local: None, looked: Some(looked) })
}

/// The key groups stored checkpoint `n` recorded, if the store holds it.
fn stored_groups(store: &CheckpointStore, n: u64) -> Option<KeyGroups> {
    let checkpoint = store.load(n).ok()?;
    layout::decode(&checkpoint).ok()?.shape.key_groups.filter(|&count| count > 0).map(KeyGroups::new)
}

/// Checkpoint `n` of a job that keeps no state, which has no changelog to rebuild
/// from: the state_dir's, else what Kafka's committed offsets say of it. Only event
/// time is lost with the state_dir, and no operator of such a job keeps any state that
/// depends on it.
fn load_stateless(job: &Job, store: &CheckpointStore, n: u64, partitions: &[i32], resume: &recovery::Resume) -> Result<Snapshot, TaskFailure> {
    store.discard_after(n)?;
    match checkpoint_here(job, store, n, &resume.offsets) {
        Err(TaskFailure::Store(StoreError::Missing { .. })) => {}
        loaded => return loaded,
    }
    tracing::info!(checkpoint = n, "the state_dir lacks checkpoint {n}; this job keeps no state, so it resumes from the committed offsets");
    let count = u32::try_from(first_source_partitions(&input_topics(job), partitions)).unwrap_or(u32::MAX);
    let key_groups = job.key_groups.map_or_else(|| KeyGroups::default_for(count), KeyGroups::new);
    let max_timestamp = |id: &i32| resume.max_timestamps.get(id).copied().unwrap_or(i64::MIN);
    let states = resume
        .offsets
        .iter()
        .map(|(&partition, &next_offset)| (partition, PartitionState { partition, next_offset, max_timestamp: max_timestamp(&partition) }))
        .collect();
    let operators = derived_watermarks(job, partitions, max_timestamp)
        .into_iter()
        .map(|(at, watermark)| (at, layout::OperatorState { watermark, guest: Vec::new() }))
        .collect();
    Ok(Snapshot { n, format: layout::FORMAT, shape: shape(job, key_groups), partitions: states, operators })
}

/// Each operator subtask's watermark as the checkpoint had it, derived from the greatest
/// event time of each input partition (`max_timestamp`, by input id): a source task's
/// is the least over its partitions of that less the source's out-of-orderness, and a
/// subtask's the least over its stream inputs: every upstream subtask for a key_by
/// operator, the one of its index otherwise. A source task without partitions is idle
/// (as it runs) and left out of every least, as is a subtask whose inputs are all idle,
/// which starts from the least of all. A source task reports its progress after each
/// batch and a barrier comes between batches, so at a barrier every subtask had reached
/// exactly this. (A partition idle then counts here; the watermark is then lower than
/// it was, never higher.)
fn derived_watermarks(job: &Job, partitions: &[i32], max_timestamp: impl Fn(&i32) -> i64) -> BTreeMap<(u32, u32), i64> {
    let parallelism = job.parallelism as usize;
    // `sources[s][i]`: source task i of source s; `None` while it is idle.
    let mut sources: Vec<Vec<Option<i64>>> = vec![vec![None; parallelism]; job.sources.len()];
    for (id, task) in source_tasks(job, partitions) {
        let source = task / parallelism;
        let out_of_orderness = i64::try_from(job.sources[source].max_out_of_orderness_ms).unwrap_or(i64::MAX);
        let reached = &mut sources[source][task % parallelism];
        let time = max_timestamp(&id);
        let watermark = if time == i64::MIN { i64::MIN } else { time.saturating_sub(out_of_orderness) };
        *reached = Some(reached.map_or(watermark, |before| before.min(watermark)));
    }
    let mut operators: Vec<Vec<Option<i64>>> = vec![Vec::new(); job.operators.len()];
    for stage in job.upstream_first() {
        let key_by = job.operators[stage].key_by;
        let upstream = |port: Port, subtask: usize| -> Option<i64> {
            let tasks = match port {
                Port::Source(source) => &sources[source],
                Port::Operator { stage, .. } => &operators[stage],
            };
            if key_by { tasks.iter().flatten().copied().min() } else { tasks[subtask] }
        };
        let streams: Vec<Port> = job.inputs_of(stage).into_iter().filter(|&port| !job.is_table(port)).collect();
        operators[stage] = (0..parallelism).map(|subtask| streams.iter().filter_map(|&port| upstream(port, subtask)).min()).collect();
    }
    let subtasks = operators.into_iter().enumerate().flat_map(|(stage, subtasks)| {
        let reached = subtasks.into_iter().map(|watermark| watermark.unwrap_or(i64::MIN));
        reached.enumerate().map(move |(subtask, watermark)| ((stage as u32, subtask as u32), watermark))
    });
    subtasks.collect()
}

/// Checkpoint `n` from the state_dir, if it is the one Kafka committed: its source
/// offsets are the committed ones. A checkpoint of that number that another instance
/// sealed here but never committed (it was fenced or died, and a successor committed
/// its own `n` elsewhere) counts as missing.
fn checkpoint_here(job: &Job, store: &CheckpointStore, n: u64, committed: &BTreeMap<i32, i64>) -> Result<Snapshot, TaskFailure> {
    let checkpoint = store.load(n)?;
    let snapshot = layout::decode(&checkpoint).map_err(|error| match error {
        FormatError::Newer { .. } => TaskFailure::Incompatible(format!("checkpoint {n} cannot be read: {error}")),
        FormatError::Corrupt { task, detail } => TaskFailure::Store(corrupt(store, n, task, detail)),
    })?;
    if snapshot.shape.key_groups.is_none() {
        return Err(TaskFailure::Incompatible(format!(
            "checkpoint {n} (format {}) holds each operator subtask's whole state, as plugins of \
             weir:operator@0.1 kept it; this weir keeps keyed state (weir:operator@0.2) and cannot restore \
             it: let the weir that wrote it finish the job, or start over under a new job name",
            snapshot.format
        )));
    }
    let operators: Vec<String> = job.operators.iter().map(|o| o.name.clone()).collect();
    let topics = source_topics(job);
    if snapshot.shape.operators != operators || snapshot.shape.source_topic != topics {
        return Err(TaskFailure::Incompatible(format!(
            "checkpoint {n} was taken by operators {:?} reading topics `{}`, but this job file has operators \
             {operators:?} reading `{topics}`; keyed state and input offsets cannot move between them: restore \
             the old job file, or start over under a new job name",
            snapshot.shape.operators, snapshot.shape.source_topic
        )));
    }
    let foreign = committed.iter().find(|&(partition, &offset)| {
        snapshot.partitions.get(partition).map(|state| state.next_offset) != Some(offset)
    });
    if let Some((partition, offset)) = foreign {
        tracing::warn!(
            checkpoint = n, partition, committed = offset,
            "the state_dir's checkpoint {n} is not the one Kafka committed (another instance sealed it); rebuilding"
        );
        return Err(TaskFailure::Store(StoreError::Missing {
            dir: store.dir().to_path_buf(),
            job: job.name.clone(),
            n,
        }));
    }
    Ok(snapshot)
}

/// Each source task's partitions, at the committed offset or, for a partition that
/// has none, at its source's start position resolved to a real offset (a table's is
/// its start). With `added_from_start` (one process, which commits every partition it
/// reads at every checkpoint), a partition without one of a source that has others was
/// added since: it is read from its start whatever `start` says, as its records all came
/// after the job's. A scaled-out process knows only its own partitions' offsets.
/// `partitions` and `committed` are by input id; each source's partitions are spread
/// over its `parallelism` tasks.
fn start_offsets(
    job: &Job,
    consumer: &BaseConsumer,
    partitions: &[i32],
    committed: &BTreeMap<i32, i64>,
    added_from_start: bool,
    max_timestamp: impl Fn(i32) -> Option<i64>,
) -> Result<Vec<SourceStart>, TaskFailure> {
    let parallelism = job.parallelism as usize;
    let inputs = input_topics(job);
    let resumed: BTreeSet<usize> = committed.keys().map(|&id| inputs.resolve(id).0).collect();
    let mut tasks: Vec<SourceStart> = (0..job.sources.len() * parallelism)
        .map(|index| SourceStart { source: index / parallelism, partitions: BTreeMap::new() })
        .collect();
    for (id, task) in source_tasks(job, partitions) {
        let (source, topic, partition) = inputs.resolve(id);
        let spec = &job.sources[source];
        let next_offset = match committed.get(&id) {
            Some(&offset) => offset,
            None => {
                let (low, high) = consumer
                    .fetch_watermarks(topic, partition, CONNECT_TIMEOUT)
                    .map_err(|e| TaskFailure::Kafka(format!("reading the offsets of {topic}/{partition}: {e}")))?;
                match spec.start {
                    _ if spec.table => low,
                    _ if added_from_start && resumed.contains(&source) => {
                        tracing::info!(topic, partition, "a partition added since the job's last checkpoint: read from its start");
                        low
                    }
                    job::Start::Earliest => low,
                    job::Start::Latest => high,
                }
            }
        };
        let max_timestamp = max_timestamp(id).unwrap_or(i64::MIN);
        tasks[task].partitions.insert(partition, PartitionState { partition, next_offset, max_timestamp });
    }
    Ok(tasks)
}

/// The source task that reads each of `partitions` (input ids, each source's in order):
/// source `s` has tasks `s × parallelism ..`, and its k-th partition goes to its task
/// `k mod parallelism`. The one rule for where an attempt reads a partition, and so for
/// the watermark a restart derives for each task.
fn source_tasks(job: &Job, partitions: &[i32]) -> Vec<(i32, usize)> {
    let parallelism = job.parallelism as usize;
    let inputs = input_topics(job);
    let mut spread = vec![0usize; job.sources.len()];
    partitions
        .iter()
        .map(|&id| {
            let (source, _, _) = inputs.resolve(id);
            let task = source * parallelism + spread[source] % parallelism;
            spread[source] += 1;
            (id, task)
        })
        .collect()
}

/// What operator instances are restored from.
#[derive(Clone, Copy)]
enum Restore<'a> {
    /// Nothing: a fresh start.
    Fresh,
    /// A checkpoint of this process, its keyed state in the store.
    Checkpoint(&'a Snapshot),
    /// A scaled-out process's key groups, rebuilt into the store, and the watermark its
    /// partitions had reached.
    Shard { watermark: i64 },
}

/// A fresh instance per operator subtask, restored if there is something to restore
/// from: the key groups the subtask owns, and the watermark it had reached (at another
/// parallelism, the least its stage had reached).
fn instances(
    job: &Job,
    plugins: &[Plugin],
    metrics: &Metrics,
    store: &CheckpointStore,
    restore: Restore<'_>,
    key_groups: KeyGroups,
) -> Result<Vec<Vec<(OperatorInstance, i64)>>, TaskFailure> {
    let started = Instant::now();
    let mut restored_entries = 0u64;
    let mut stages = Vec::with_capacity(job.operators.len());
    let restoring = !matches!(restore, Restore::Fresh);
    let running = restoring.then(|| progress::begin("restoring keyed state into the operators", "key groups"));
    // Restored tables fill fresh memory faster in small pages (operator/linear.rs).
    let _small_pages: Option<Vec<_>> = restoring.then(|| plugins.iter().map(Plugin::restoring).collect());
    if let Some(running) = &running {
        let keyed = job.operators.iter().filter(|spec| spec.key_by).count() as u64;
        running.work().add_total(keyed * u64::from(key_groups.count()));
    }
    let work = running.as_ref().map(progress::Running::work);
    for (stage, (spec, plugin)) in (0u32..).zip(job.operators.iter().zip(plugins)) {
        if !spec.key_by && !matches!(restore, Restore::Fresh) {
            refuse_unkeyed_state(store, stage, spec, key_groups)?;
        }
        let from = Restored { job, metrics, store, restore, key_groups, work };
        let (subtasks, entries) = stage_instances(&from, stage, spec, plugin)?;
        restored_entries += entries;
        stages.push(subtasks);
    }
    if !matches!(restore, Restore::Fresh) {
        let duration = started.elapsed();
        metrics.checkpoint().restored(restored_entries, duration);
        let checkpoint = match restore {
            Restore::Checkpoint(snapshot) => Some(snapshot.n),
            _ => None,
        };
        tracing::info!(
            checkpoint, entries = restored_entries, duration_ms = duration.as_millis() as u64,
            parallelism = job.parallelism, "restored keyed state"
        );
    }
    Ok(stages)
}

/// Where a stage's instances come from, and where their restore's progress goes.
#[derive(Clone, Copy)]
struct Restored<'a> {
    job: &'a Job,
    metrics: &'a Metrics,
    store: &'a CheckpointStore,
    restore: Restore<'a>,
    key_groups: KeyGroups,
    work: Option<&'a progress::Work>,
}

/// Every subtask of `stage`, each restored, side by side on up to as many threads as
/// the machine has cores (subtasks share nothing, and a restore is mostly the guest's
/// work); returns them in subtask order and the entries restored.
fn stage_instances(from: &Restored<'_>, stage: u32, spec: &job::Operator, plugin: &Plugin) -> Result<(Vec<(OperatorInstance, i64)>, u64), TaskFailure> {
    let parallelism = from.job.parallelism;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(parallelism as usize).max(1);
    let config = spec.init_config();
    let built: Vec<Vec<(u32, Result<Built, TaskFailure>)>> = std::thread::scope(|scope| {
        let config = &config;
        let handles: Vec<_> = (0..threads as u32)
            .map(|first| {
                scope.spawn(move || {
                    let mine = (first..parallelism).step_by(threads);
                    mine.map(|subtask| (subtask, subtask_instance(from, (stage, subtask), spec, plugin, config))).collect()
                })
            })
            .collect();
        // A thread's panic is the caller's, as if it had restored alone.
        handles.into_iter().map(|handle| handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    let mut built: Vec<_> = built.into_iter().flatten().collect();
    built.sort_by_key(|(subtask, _)| *subtask);
    let mut entries = 0;
    let mut subtasks = Vec::with_capacity(built.len());
    for (_, result) in built {
        let (instance, restored) = result?;
        entries += restored;
        subtasks.push(instance);
    }
    Ok((subtasks, entries))
}

/// A subtask's instance with the watermark it starts from, and the entries restored.
type Built = ((OperatorInstance, i64), u64);

/// A fresh instance of `stage`'s `subtask`, restored if there is something to restore,
/// with the watermark it starts from; and the entries restored.
fn subtask_instance(
    from: &Restored<'_>,
    (stage, subtask): (u32, u32),
    spec: &job::Operator,
    plugin: &Plugin,
    config: &[(String, String)],
) -> Result<Built, TaskFailure> {
    let label = format!("{}[{subtask}]", spec.name);
    let mut instance =
        OperatorInstance::with_ports(plugin, spec.limits(), config.to_vec(), spec.ports(), label).map_err(TaskFailure::operator)?;
    instance.count_log_drops(from.metrics.plugin_log(&spec.name, subtask));
    let parallelism = from.job.parallelism;
    let restored = match from.restore {
        Restore::Fresh => None,
        Restore::Checkpoint(snapshot) => Some(restored_watermark(from.store, snapshot, stage, subtask, parallelism)?),
        Restore::Shard { watermark } => Some(watermark),
    };
    let watermark = restored.unwrap_or(i64::MIN);
    let mut entries = 0;
    if restored.is_some() {
        if spec.key_by {
            entries = restore_groups(from.store, stage, from.key_groups.range(subtask, parallelism), &mut instance, from.work)?;
        }
        instance.restored(watermark).map_err(TaskFailure::operator)?;
    }
    Ok(((instance, watermark), entries))
}

/// Restores `groups` of `stage` into `instance`, group by group so that `work` can tell
/// how far it is; returns the entries restored.
fn restore_groups(
    store: &CheckpointStore,
    stage: u32,
    groups: std::ops::Range<u32>,
    instance: &mut OperatorInstance,
    work: Option<&progress::Work>,
) -> Result<u64, TaskFailure> {
    let mut entries = 0;
    for group in groups {
        let mut bytes = 0;
        let read = store.read_state(stage, group..group + 1, chunk::CHUNK_BYTES as usize, |chunk| {
            bytes += chunk.data_len() as u64;
            instance.restore(&chunk).map_err(TaskFailure::operator)
        })?;
        entries += read;
        if let Some(work) = work {
            work.add(1, read, bytes);
        }
    }
    Ok(entries)
}

/// The event time a subtask restarts from: its own at the same parallelism; else the
/// least of its stage's, as its key groups may come from any of them.
fn restored_watermark(
    store: &CheckpointStore,
    snapshot: &Snapshot,
    stage: u32,
    subtask: u32,
    parallelism: u32,
) -> Result<i64, TaskFailure> {
    let entry = |subtask: u32| {
        snapshot.operators.get(&(stage, subtask)).map(|state| state.watermark).ok_or_else(|| {
            let task = layout::TaskId::Operator { stage, subtask }.to_string();
            TaskFailure::Store(corrupt(store, snapshot.n, Some(task), "no entry for this subtask".into()))
        })
    };
    if snapshot.shape.parallelism == parallelism {
        return entry(subtask);
    }
    let mut least = i64::MAX;
    for old in 0..snapshot.shape.parallelism {
        least = least.min(entry(old)?);
    }
    Ok(least)
}

/// An operator whose input is not routed by key keeps no state; if the checkpoint holds
/// some for it, the job file changed under it.
fn refuse_unkeyed_state(store: &CheckpointStore, stage: u32, spec: &job::Operator, key_groups: KeyGroups) -> Result<(), TaskFailure> {
    let entries = store.read_state(stage, 0..key_groups.count(), 1, |_| {
        Err(TaskFailure::Incompatible(format!(
            "the checkpoint holds keyed state of operator `{}`, whose input the job file no longer routes by \
             key; set key_by = true for it again, or start over under a new job name",
            spec.name
        )))
    });
    entries.map(|_| ())
}

fn corrupt(store: &CheckpointStore, n: u64, task: Option<String>, detail: String) -> StoreError {
    StoreError::Corrupt { dir: store.dir().to_path_buf(), job: store.job().to_string(), n, task, detail }
}
