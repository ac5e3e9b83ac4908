//! Source tasks: each reads a fixed set of input partitions (`assign()`, never a group
//! rebalance), cuts them into batches, tracks per-partition watermarks, and on a
//! barrier records the next offset of every partition before forwarding the barrier.

use std::collections::BTreeMap;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::checkpoint::Event;
use crate::engine::message::{Message, Origin, Records};
use crate::engine::route::subtask_for;
use crate::engine::TaskFailure;
use crate::metrics::Metrics;

pub mod config;
pub mod fetch;
pub use config::consumer;
use fetch::Fetcher;

/// Records and bytes one batch holds at most (the bytes bound is passed by one record
/// at most): bounds memory per channel slot. Records are fetched `FETCH_RECORDS` at a time.
const BATCH_RECORDS: usize = 1024;
const BATCH_BYTES: usize = 1 << 20;
const FETCH_RECORDS: usize = 128;
/// How long a poll waits for the first record of a batch; bounds barrier latency.
const POLL_WAIT: Duration = Duration::from_millis(20);
/// How often, and how patiently, consumer lag is measured.
const LAG_EVERY: Duration = Duration::from_secs(5);
const LAG_TIMEOUT: Duration = Duration::from_secs(1);

/// What a source task checkpoints for one partition.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartitionState {
    pub partition: i32,
    /// The offset of the next record to read: a real offset, never a logical one.
    pub next_offset: i64,
    /// The largest event time read so far (`i64::MIN` before the first record).
    pub max_timestamp: i64,
}

/// Orders from the coordinator, checked between batches.
pub enum Control {
    Barrier(u64),
    Stop,
}

pub struct SourceTask {
    pub index: usize,
    pub topic: String,
    pub fetcher: Fetcher,
    pub partitions: BTreeMap<i32, PartitionState>,
    pub max_out_of_orderness_ms: i64,
    /// One sender per downstream subtask; records go by key when `key_by`, else to
    /// the subtask with this task's index.
    pub outputs: Vec<Sender<Message>>,
    pub key_by: bool,
    pub control: Receiver<Control>,
    pub events: Sender<Event>,
    pub metrics: Metrics,
    pub lag_reported: Option<std::time::Instant>,
}

impl SourceTask {
    /// Assigns the task's partitions at their checkpointed offsets.
    pub fn assign(&self) -> Result<(), TaskFailure> {
        let mut assignment = TopicPartitionList::new();
        for state in self.partitions.values() {
            assignment
                .add_partition_offset(&self.topic, state.partition, Offset::Offset(state.next_offset))
                .map_err(|e| self.kafka_failure("assigning partitions", e))?;
        }
        self.fetcher
            .consumer()
            .assign(&assignment)
            .map_err(|e| self.kafka_failure("assigning partitions", e))
    }

    pub fn run(mut self) -> Result<(), TaskFailure> {
        self.assign()?;
        let mut watermark = i64::MIN;
        if self.partitions.is_empty() {
            // Nothing to read: never hold back downstream event time.
            watermark = i64::MAX;
            self.broadcast(Message::Watermark(watermark))?;
        }
        loop {
            match self.control.try_recv() {
                Ok(Control::Barrier(n)) => self.barrier(n)?,
                Ok(Control::Stop) | Err(TryRecvError::Disconnected) => return Ok(()),
                Err(TryRecvError::Empty) => {}
            }
            if self.partitions.is_empty() {
                // Wait for control only; a bounded wait keeps shutdown prompt.
                match self.control.recv_timeout(POLL_WAIT * 5) {
                    Ok(Control::Barrier(n)) => self.barrier(n)?,
                    Ok(Control::Stop) => return Ok(()),
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(()),
                }
                continue;
            }
            let records = self.read_batch()?;
            if !records.is_empty() {
                self.send_records(records)?;
                self.report_lag();
            }
            let current = self.watermark();
            if current > watermark {
                watermark = current;
                self.broadcast(Message::Watermark(watermark))?;
            }
        }
    }

    /// Up to one batch of records: what the consumer holds now, or what arrives
    /// within `POLL_WAIT` when it holds nothing.
    fn read_batch(&mut self) -> Result<Records, TaskFailure> {
        self.check_client()?;
        let mut records = Records::default();
        let mut wait = POLL_WAIT;
        while records.batch.len() < BATCH_RECORDS && records.batch.data_len() < BATCH_BYTES {
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
            if records.batch.data_len() >= BATCH_BYTES {
                break;
            }
            if let Some(error) = message.error() {
                return Err(read_failure(self.index, &self.topic, error, &message.error_detail()));
            }
            let partition = message.partition();
            let timestamp = message.timestamp().unwrap_or(0);
            let headers = message.headers();
            let headers: Vec<(&str, &[u8])> = headers.iter().map(|(name, value)| (name.as_ref(), *value)).collect();
            records.batch.push(message.key(), message.payload(), timestamp, &headers);
            records.origins.push(Origin { partition, offset: message.offset() });
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

    /// Consumer lag per partition: one high-watermark request per partition, at most
    /// every `LAG_EVERY`, so the metric costs the hot path nothing measurable.
    fn report_lag(&mut self) {
        if self.lag_reported.is_some_and(|at| at.elapsed() < LAG_EVERY) {
            return;
        }
        self.lag_reported = Some(std::time::Instant::now());
        for state in self.partitions.values() {
            if let Ok((_, high)) = self.fetcher.consumer().fetch_watermarks(&self.topic, state.partition, LAG_TIMEOUT) {
                self.metrics
                    .consumer_lag(&self.topic, state.partition)
                    .set((high - state.next_offset).max(0));
            }
        }
    }

    /// The task's watermark: the least of its partitions' (max event time − allowed lateness).
    fn watermark(&self) -> i64 {
        self.partitions
            .values()
            .map(|p| p.max_timestamp.saturating_sub(self.max_out_of_orderness_ms))
            .min()
            .unwrap_or(i64::MAX)
    }

    fn send_records(&self, records: Records) -> Result<(), TaskFailure> {
        if !self.key_by || self.outputs.len() == 1 {
            let target = if self.key_by { 0 } else { self.index % self.outputs.len() };
            return self.send(target, Message::Records(records));
        }
        let mut routed: Vec<Records> = vec![Records::default(); self.outputs.len()];
        for (index, record) in records.batch.iter().enumerate() {
            routed[subtask_for(record.key, self.outputs.len())].push_from(&records, index);
        }
        for (target, part) in routed.into_iter().enumerate() {
            if !part.is_empty() {
                self.send(target, Message::Records(part))?;
            }
        }
        Ok(())
    }

    fn barrier(&self, n: u64) -> Result<(), TaskFailure> {
        let states: Vec<PartitionState> = self.partitions.values().cloned().collect();
        let bytes = serde_json::to_vec(&states).expect("partition states serialize");
        self.events
            .send(Event::State { n, task: task_name(self.index), bytes, offsets: Some(states) })
            .map_err(|_| TaskFailure::Stopped)?;
        self.broadcast(Message::Barrier(n))
    }

    fn broadcast(&self, make: Message) -> Result<(), TaskFailure> {
        for target in 0..self.outputs.len() {
            let message = match &make {
                Message::Watermark(w) => Message::Watermark(*w),
                Message::Barrier(n) => Message::Barrier(*n),
                Message::Records(_) | Message::DeadLetter(_) => unreachable!("only markers are broadcast"),
            };
            self.send(target, message)?;
        }
        Ok(())
    }

    fn send(&self, target: usize, message: Message) -> Result<(), TaskFailure> {
        self.outputs[target].send(message).map_err(|_| TaskFailure::Stopped)
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

/// The checkpoint store's name for source task `index`.
pub fn task_name(index: usize) -> String {
    format!("source/{index}")
}
