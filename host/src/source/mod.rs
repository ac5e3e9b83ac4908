//! Source tasks: each reads the input partitions it is given (`assign()`, never a group
//! rebalance) and, in a job of one process, those added to its topic while it runs
//! (`discovery`); cuts them into batches, tracks per-partition watermarks, and on a
//! barrier records the next offset of every partition before forwarding the barrier.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};

use crate::batch::{BATCH_BYTES, BATCH_RECORDS};
use crate::checkpoint::layout::{self, PartitionState, TaskId};
use crate::checkpoint::recovery;
use crate::dataflow::{
    DeadLetter, Event, Fanout, KeyGroups, Message, Origin, Pace, Records, Shard, TaskFailure, input_id, kafka_partition, within_max_partitions,
};
use crate::metrics::{Metrics, PartitionMetrics};

mod bootstrap;
pub mod config;
mod discovery;
pub(crate) use discovery::Discovery;
mod fetch;
pub(crate) use bootstrap::Bootstrap;
use bootstrap::TableRead;
mod progress;
pub(crate) use config::consumer;
pub(crate) use fetch::Fetcher;
use progress::{Activity, Progress};

/// Records are fetched `FETCH_RECORDS` at a time into batches within `BATCH_RECORDS` and
/// `BATCH_BYTES`, which bound memory per channel slot.
const FETCH_RECORDS: usize = 128;
/// How long a poll waits for the first record of a batch; bounds barrier latency.
const POLL_WAIT: Duration = Duration::from_millis(20);
/// How often consumer lag is refreshed and quiet partitions are looked at, read or not.
const TICK: Duration = Duration::from_secs(1);
/// How long the broker may take to confirm that a quiet partition has nothing to read.
const DRAINED_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the broker may take to say where a partition ends when it is assigned.
const LAG_TIMEOUT: Duration = Duration::from_secs(1);
/// How long it may take when asked again for a table's: the table must be read to there.
const TABLE_END_TIMEOUT: Duration = Duration::from_secs(10);

/// Orders from the coordinator, checked between batches.
pub(crate) enum Control {
    Barrier(u64),
    Stop,
}

pub(crate) struct SourceTask {
    pub(crate) index: usize,
    /// The job source it reads (its partitions' ids are `input_id(source, partition)`).
    pub(crate) source: usize,
    pub(crate) topic: String,
    pub(crate) fetcher: Fetcher,
    /// By Kafka's partition number.
    pub(crate) partitions: BTreeMap<i32, PartitionState>,
    pub(crate) max_out_of_orderness_ms: i64,
    /// Every reader of the source.
    pub(crate) output: Fanout,
    /// The job's key groups when some reader routes by key.
    pub(crate) key_by: Option<KeyGroups>,
    /// Whether the source is a table: it reads to its end and then says so in band.
    pub(crate) table: bool,
    /// Open once every table of the job is loaded by its readers: a stream source
    /// delivers nothing before.
    pub(crate) bootstrap: Arc<Bootstrap>,
    /// Where it says whether it has caught up (a checkpoint may then come early).
    pub(crate) pace: Arc<Pace>,
    /// In a process of a scaled-out job, the partitions it owns: a keyed record must be
    /// in a key group of the partition it was read from.
    pub(crate) shard: Option<Shard>,
    /// With a dead-letter topic, the name of the keyed operator whose state a record
    /// that is not co-partitioned would split: such a record goes there instead of
    /// stopping the job.
    pub(crate) dead_letters: Option<String>,
    pub(crate) control: Receiver<Control>,
    pub(crate) events: Sender<Event>,
    pub(crate) metrics: Metrics,
    /// `[source] idle_timeout_ms`: when a partition that reads nothing stops holding
    /// the watermark back (never when `None`).
    pub(crate) idle_timeout: Option<Duration>,
    /// In a job of one process, when to look for partitions added to the topic.
    pub(crate) discovery: Option<Discovery>,
}

impl SourceTask {
    /// Assigns the task's partitions at their checkpointed offsets; returns where each
    /// partition ends now, as far as the broker said so in time.
    pub(crate) fn assign(&self) -> Result<BTreeMap<i32, i64>, TaskFailure> {
        let mut assignment = TopicPartitionList::new();
        for state in self.partitions.values() {
            assignment
                .add_partition_offset(&self.topic, state.partition, Offset::Offset(state.next_offset))
                .map_err(|e| self.kafka_failure("assigning partitions", e))?;
        }
        self.fetcher
            .consumer()
            .assign(&assignment)
            .map_err(|e| self.kafka_failure("assigning partitions", e))?;
        Ok(self.start_lag())
    }

    /// A lag series exists from the moment a partition is assigned, measured against
    /// the broker's high watermark (one request for all the task's partitions: the task
    /// takes no barrier before it has the answer); the once-a-second refresh keeps it
    /// from then on. A broker that does not answer in time leaves the series at its
    /// last value. Returns the high watermarks it read.
    fn start_lag(&self) -> BTreeMap<i32, i64> {
        let ends = self.high_watermarks();
        for state in self.partitions.values() {
            let series = self.metrics.partition(&self.topic, state.partition);
            self.show_watermark(&series, state.partition);
            if let Some(&high) = ends.get(&state.partition) {
                series.lag.set((high - state.next_offset).max(0));
            }
        }
        ends
    }

    /// Where each of the task's partitions ends for it (read_committed: the last stable
    /// offset), those the broker gives in time: in one request, or, if that fails (one
    /// partition's error fails it whole), one request per partition.
    fn high_watermarks(&self) -> BTreeMap<i32, i64> {
        if self.partitions.is_empty() {
            return BTreeMap::new();
        }
        let mut list = TopicPartitionList::new();
        for state in self.partitions.values() {
            // As a ListOffsets timestamp, End (-1) asks for the end.
            let _ = list.add_partition_offset(&self.topic, state.partition, Offset::End);
        }
        match self.fetcher.consumer().offsets_for_times(list, LAG_TIMEOUT) {
            Ok(found) => {
                let ends = found.elements().into_iter().map(|element| (element.partition(), element.offset().to_raw()));
                ends.filter_map(|(partition, end)| Some((partition, end.filter(|&high| high >= 0)?))).collect()
            }
            Err(error) => {
                tracing::debug!(topic = %self.topic, "partition ends unknown in one request ({error}); asking per partition");
                self.partitions.values().filter_map(|state| self.high_watermark(state.partition)).collect()
            }
        }
    }

    fn high_watermark(&self, partition: i32) -> Option<(i32, i64)> {
        match self.fetcher.consumer().fetch_watermarks(&self.topic, partition, LAG_TIMEOUT) {
            Ok((_, high)) => Some((partition, high)),
            Err(error) => {
                tracing::debug!(topic = %self.topic, partition, "lag unknown until the next refresh: {error}");
                None
            }
        }
    }

    pub(crate) fn run(mut self) -> Result<(), TaskFailure> {
        let ends = self.assign()?;
        let mut table_read = None;
        // What downstream was told of this task's event time.
        let mut sent = Progress::Watermark(i64::MIN);
        if self.partitions.is_empty() {
            if self.table {
                self.broadcast(Message::TableEnd)?;
            }
            if !self.wait_for_partitions()? {
                return Ok(());
            }
            sent = Progress::Idle;
        } else if self.table {
            table_read = Some(TableRead::new(self.table_ends(ends)?));
        }
        let mut activity = Activity::new(self.idle_timeout, &self.partitions, Instant::now());
        let mut next_tick = Instant::now();
        loop {
            match self.control.try_recv() {
                Ok(Control::Barrier(n)) => self.barrier(n)?,
                Ok(Control::Stop) | Err(TryRecvError::Disconnected) => return Ok(()),
                Err(TryRecvError::Empty) => {}
            }
            if table_read.as_ref().is_some_and(|read| read.reached(&self.read_positions(), &self.topic)) {
                table_read = None;
                self.broadcast(Message::TableEnd)?;
            }
            if !self.table && !self.bootstrap.is_open() {
                std::thread::sleep(POLL_WAIT);
                continue;
            }
            let records = self.read_batch()?;
            self.pace.read(self.index, records.is_full());
            if !records.is_empty() {
                self.send_records(records)?;
                self.wake(&mut activity);
            }
            if Instant::now() >= next_tick {
                self.tick(&mut activity);
                self.discover(&mut activity)?;
                next_tick = Instant::now() + TICK;
            }
            let progress = activity.progress(&self.partitions, self.max_out_of_orderness_ms);
            if progress != sent {
                sent = progress;
                self.broadcast(match progress {
                    Progress::Watermark(watermark) => Message::Watermark(watermark),
                    Progress::Idle => Message::Idle,
                })?;
            }
        }
    }

    /// A task with nothing to read never holds back downstream event time; it only
    /// forwards barriers until it is given a partition added to the topic (true) or is
    /// stopped (false). One that may be given one is idle, not done: what it reads
    /// later is held to the watermark downstream has reached.
    fn wait_for_partitions(&mut self) -> Result<bool, TaskFailure> {
        let mut activity = Activity::new(self.idle_timeout, &self.partitions, Instant::now());
        self.broadcast(if self.discovery.is_some() { Message::Idle } else { Message::Watermark(i64::MAX) })?;
        while self.partitions.is_empty() {
            // A bounded wait keeps shutdown prompt.
            match self.control.recv_timeout(POLL_WAIT * 5) {
                Ok(Control::Barrier(n)) => self.barrier(n)?,
                Ok(Control::Stop) | Err(RecvTimeoutError::Disconnected) => return Ok(false),
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.discover(&mut activity)?;
        }
        Ok(true)
    }

    /// Once an interval, partitions added to the topic that are this task's are
    /// assigned (`starts`): they are read from the next batch on, and the next barrier
    /// records them. A broker that does not answer in time is asked again at the next
    /// interval.
    fn discover(&mut self, activity: &mut Activity) -> Result<(), TaskFailure> {
        let Some(discovery) = self.discovery.as_mut() else { return Ok(()) };
        if !discovery.due(Instant::now()) {
            return Ok(());
        }
        let listed = match recovery::partitions_now(self.fetcher.consumer(), &self.topic, LAG_TIMEOUT) {
            Ok(Some(listed)) => listed,
            Ok(None) => return Ok(()),
            Err(error) => {
                tracing::debug!(topic = %self.topic, "partitions not listed, asked again later: {error}");
                return Ok(());
            }
        };
        within_max_partitions(&self.topic, &listed)?;
        let added = self.discovery.as_ref().map_or_else(Vec::new, |discovery| discovery.added(&listed, &self.partitions));
        if added.is_empty() {
            return Ok(());
        }
        let Some(starts) = self.starts(&added) else { return Ok(()) };
        let mut assignment = TopicPartitionList::new();
        for &(partition, start) in &starts {
            self.fetcher.forward(partition).map_err(|e| TaskFailure::Kafka(format!("source {} of topic {}: {e}", self.index, self.topic)))?;
            assignment
                .add_partition_offset(&self.topic, partition, Offset::Offset(start))
                .map_err(|e| self.kafka_failure("assigning an added partition of", e))?;
        }
        self.fetcher
            .consumer()
            .incremental_assign(&assignment)
            .map_err(|e| self.kafka_failure("assigning an added partition of", e))?;
        self.metrics.group().owned_partitions.add(starts.len() as i64);
        for (partition, next_offset) in starts {
            tracing::info!(source = self.index, topic = %self.topic, partition, next_offset, "a partition added to the topic: read from there");
            self.partitions.insert(partition, PartitionState { partition, next_offset, max_timestamp: i64::MIN });
            activity.add(partition, next_offset, Instant::now());
        }
        Ok(())
    }

    /// Where each added partition starts: at the job's committed offset if it has one
    /// (a restart that a broker answered from metadata older than the partition missed
    /// it, and the job read it before), else at its first record still on the broker.
    /// `None` unless the broker says both in time, for every partition.
    fn starts(&self, added: &[i32]) -> Option<Vec<(i32, i64)>> {
        let list = |at: Offset| {
            let mut list = TopicPartitionList::new();
            for &partition in added {
                let _ = list.add_partition_offset(&self.topic, partition, at);
            }
            list
        };
        let consumer = self.fetcher.consumer();
        let asked = consumer.committed_offsets(list(Offset::Invalid), LAG_TIMEOUT).and_then(|committed| {
            // As a ListOffsets timestamp, Beginning (-2) asks for the first offset.
            Ok((committed, consumer.offsets_for_times(list(Offset::Beginning), LAG_TIMEOUT)?))
        });
        let (committed, first) = match asked {
            Ok(answers) => answers,
            Err(error) => {
                tracing::debug!(topic = %self.topic, "where added partitions start is unknown, asked again later: {error}");
                return None;
            }
        };
        let offset_in = |answer: &TopicPartitionList, partition| match answer.find_partition(&self.topic, partition)?.offset() {
            Offset::Offset(offset) if offset >= 0 => Some(offset),
            _ => None,
        };
        added.iter().map(|&partition| Some((partition, offset_in(&committed, partition).or(offset_in(&first, partition))?))).collect()
    }

    /// Up to one batch of records: what the consumer holds now, or what arrives
    /// within `POLL_WAIT` when it holds nothing.
    fn read_batch(&mut self) -> Result<Records, TaskFailure> {
        self.check_client()?;
        let mut records = Records::default();
        let mut wait = POLL_WAIT;
        while !records.is_full() {
            let max = FETCH_RECORDS.min(BATCH_RECORDS - records.batch.len());
            if !self.read_into(&mut records, wait, max)? {
                break;
            }
            wait = Duration::ZERO;
        }
        Ok(records)
    }

    /// Appends fetched records, at most `max` and until the batch holds `BATCH_BYTES`;
    /// false if there was none. Records left over come first in the next batch.
    fn read_into(&mut self, records: &mut Records, wait: Duration, max: usize) -> Result<bool, TaskFailure> {
        let fetched = self.fetcher.fetch(wait, max);
        let mut read = 0;
        for message in fetched.iter().take(max) {
            if records.batch.bytes() >= BATCH_BYTES {
                break;
            }
            if let Some(error) = message.error() {
                return Err(read_failure(self.index, &self.topic, error, &message.error_detail()));
            }
            let partition = message.partition();
            let timestamp = message.timestamp().unwrap_or(0);
            let headers = message.headers();
            let headers: Vec<(&str, &[u8])> = headers.iter().map(|(name, value)| (name.as_ref(), *value)).collect();
            records.batch.push_maybe_valued(message.key(), message.payload(), timestamp, &headers);
            records.origins.push(Origin { partition: input_id(self.source, partition), offset: message.offset() });
            let state = self
                .partitions
                .get_mut(&partition)
                .expect("the consumer only returns assigned partitions");
            state.next_offset = message.offset() + 1;
            state.max_timestamp = state.max_timestamp.max(timestamp);
            read += 1;
        }
        self.fetcher.mark_used(read);
        Ok(read > 0)
    }

    /// Errors the consumer reports apart from records (e.g. every broker down) fail
    /// the attempt, which restarts from the last checkpoint: riding them out would
    /// leave the checkpoint's commit to librdkafka calls that can hang on a broker
    /// that went away (librdkafka #5456).
    fn check_client(&self) -> Result<(), TaskFailure> {
        match self.fetcher.consumer().poll(Duration::ZERO) {
            None => Ok(()),
            Some(Err(error)) => Err(read_failure(self.index, &self.topic, error, "reported by the consumer")),
            Some(Ok(message)) => Err(TaskFailure::Kafka(format!(
                "source {} of topic {}: a record of partition {} arrived outside its partition's queue",
                self.index,
                self.topic,
                rdkafka::message::Message::partition(&message)
            ))),
        }
    }

    /// Once a second, read or not: consumer lag from the consumer's cached high
    /// watermarks (no broker request), and quiet partitions with nothing left to read
    /// go idle.
    fn tick(&self, activity: &mut Activity) {
        let positions = self.read_positions();
        for (&partition, &read) in &positions {
            let series = self.metrics.partition(&self.topic, partition);
            if let Some(high) = self.fetcher.cached_high_watermark(partition) {
                series.lag.set((high - read).max(0));
            }
            self.show_watermark(&series, partition);
        }
        for partition in activity.quiet(&self.partitions, Instant::now()) {
            if self.drained(partition, positions[&partition]) {
                tracing::info!(
                    source = self.index, topic = %self.topic, partition,
                    "partition idle: it no longer holds the watermark back until it reads a record"
                );
                activity.set_idle(partition, self.partitions[&partition].next_offset);
            }
        }
    }

    /// A partition's own watermark, once it has read an event time.
    fn show_watermark(&self, series: &PartitionMetrics, partition: i32) {
        let max = self.partitions[&partition].max_timestamp;
        if max > i64::MIN {
            series.watermark.set(max.saturating_sub(self.max_out_of_orderness_ms));
        }
    }

    /// Idle partitions that read a record hold the watermark again.
    fn wake(&self, activity: &mut Activity) {
        for partition in activity.wake(&self.partitions, Instant::now()) {
            tracing::info!(
                source = self.index, topic = %self.topic, partition,
                "idle partition read a record: it holds the watermark again"
            );
        }
    }

    /// Where each partition's reading stands: its next offset or, once every fetched
    /// message is used, the consumer's position, which also steps over transaction
    /// markers (they carry no record, so the next offset never passes them).
    fn read_positions(&self) -> BTreeMap<i32, i64> {
        let consumer = (self.fetcher.pending() == 0).then(|| self.fetcher.consumer().position().ok()).flatten();
        let position = |partition| match consumer.as_ref()?.find_partition(&self.topic, partition)?.offset() {
            Offset::Offset(offset) => Some(offset),
            _ => None,
        };
        let read = |state: &PartitionState| position(state.partition).map_or(state.next_offset, |at| at.max(state.next_offset));
        self.partitions.values().map(|state| (state.partition, read(state))).collect()
    }

    /// Whether `partition`, read up to `read`, has nothing left: the cached high
    /// watermark first (free), then the broker's, since the cache goes stale while a
    /// full read-ahead pauses fetching.
    fn drained(&self, partition: i32, read: i64) -> bool {
        if self.fetcher.cached_high_watermark(partition).is_none_or(|high| read < high) {
            return false;
        }
        match self.fetcher.consumer().fetch_watermarks(&self.topic, partition, DRAINED_TIMEOUT) {
            Ok((_, high)) => read >= high,
            Err(error) => {
                tracing::debug!(topic = %self.topic, partition, "high watermark unknown, partition stays active: {error}");
                false
            }
        }
    }

    fn send_records(&self, mut records: Records) -> Result<(), TaskFailure> {
        if let (Some(groups), Some(shard)) = (self.key_by, &self.shard) {
            records = self.keep_co_partitioned(groups, shard, records)?;
        }
        self.output.records(records)
    }

    /// Where each partition ended when the task began (`ends`, as `assign` read them): a
    /// table's bootstrap reads to there. An end the broker did not say in time is asked
    /// for again; unknown, it fails the attempt: a table taken as loaded before it is
    /// would let stream records miss its entries.
    fn table_ends(&self, mut ends: BTreeMap<i32, i64>) -> Result<BTreeMap<i32, i64>, TaskFailure> {
        for &partition in self.partitions.keys() {
            if ends.contains_key(&partition) {
                continue;
            }
            let (_, high) = self
                .fetcher
                .consumer()
                .fetch_watermarks(&self.topic, partition, TABLE_END_TIMEOUT)
                .map_err(|e| self.kafka_failure(&format!("reading where partition {partition} of the table ends, of"), e))?;
            ends.insert(partition, high);
        }
        Ok(ends)
    }

    /// Scaled out, each process keeps the state of the key groups its partitions carry:
    /// a record whose key group another partition carries would split a key's state
    /// between processes. It is a bad input record: dead-lettered with the reason when
    /// the job has a dead-letter topic, else the job stops naming it.
    fn keep_co_partitioned(&self, groups: KeyGroups, shard: &Shard, records: Records) -> Result<Records, TaskFailure> {
        let stray = |index: usize| {
            let belongs = shard.partition_of(groups.group_of(records.batch.get(index).key));
            input_id(self.source, belongs) != records.origins[index].partition
        };
        let Some(first) = (0..records.batch.len()).find(|&index| stray(index)) else {
            return Ok(records);
        };
        let Some(operator) = &self.dead_letters else {
            return Err(TaskFailure::Incompatible(self.not_co_partitioned(groups, shard, &records, first)));
        };
        let mut kept = Records::default();
        for index in 0..records.batch.len() {
            if !stray(index) {
                kept.push_from(&records, index);
                continue;
            }
            let mut one = Records::default();
            one.push_from(&records, index);
            let error = self.not_co_partitioned(groups, shard, &records, index);
            let origin = records.origins[index];
            tracing::warn!(
                topic = %self.topic, partition = kafka_partition(origin.partition), offset = origin.offset,
                "record not co-partitioned by key; sending it to the dead-letter topic"
            );
            let letter = DeadLetter { records: one, operator: operator.clone(), error };
            self.output.dead_letter(letter)?;
        }
        Ok(kept)
    }

    fn not_co_partitioned(&self, groups: KeyGroups, shard: &Shard, records: &Records, index: usize) -> String {
        let key = records.batch.get(index).key;
        let origin = records.origins[index];
        let mut why = shard.not_co_partitioned(&self.topic, groups.group_of(key), Some(kafka_partition(origin.partition)));
        if key.is_none() {
            why.insert_str(0, "a record without a key (keyed operators count it under the empty key) breaks co-partitioning: ");
        }
        why
    }

    fn barrier(&self, n: u64) -> Result<(), TaskFailure> {
        let by_id = |state: &PartitionState| PartitionState { partition: input_id(self.source, state.partition), ..*state };
        let states: Vec<PartitionState> = self.partitions.values().map(by_id).collect();
        let bytes = layout::encode_source(&states);
        let task = TaskId::Source { index: u32::try_from(self.index).expect("fewer than 2^32 source tasks") };
        self.events
            .send(Event::State { n, task, bytes, offsets: Some(states), changes: Vec::new() })
            .map_err(|_| TaskFailure::Stopped)?;
        self.broadcast(Message::Barrier(n))
    }

    fn broadcast(&self, marker: Message) -> Result<(), TaskFailure> {
        self.output.marker(&marker)
    }

    fn kafka_failure(&self, doing: &str, error: rdkafka::error::KafkaError) -> TaskFailure {
        TaskFailure::Kafka(format!("source {} {doing} topic {}: {error}", self.index, self.topic))
    }
}

/// Why reading failed: a lost offset stops the job, anything else restarts it.
fn read_failure(index: usize, topic: &str, error: rdkafka::error::KafkaError, detail: &str) -> TaskFailure {
    if error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::AutoOffsetReset) {
        return TaskFailure::OffsetLost(format!(
            "source {index} of topic {topic}: {error} ({detail}); the records after the last checkpoint \
             are no longer on the broker (deleted by retention, or the topic was recreated); weir stops \
             rather than skip them: restore the data, or reset the job's consumer group to start over \
             deliberately"
        ));
    }
    TaskFailure::Kafka(format!("source {index} reading topic {topic}: {error} ({detail})"))
}

