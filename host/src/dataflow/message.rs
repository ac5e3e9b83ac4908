//! What travels on the channels between tasks: batches of records, watermarks and
//! checkpoint barriers, in band and in order, so a barrier cuts every stream at one
//! consistent point; and what tasks report to the checkpoint coordinator.

use std::sync::Arc;

use crate::batch::Batch;
use crate::checkpoint::layout::{PartitionState, TaskId};
use crate::chunk::StateChanges;

use super::TaskFailure;

/// Where a record was read: its input partition and offset. Kept for records that
/// come straight from a source, so a poison record can be named and dead-lettered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    pub partition: i32,
    pub offset: i64,
}

/// A batch and, when it comes straight from a source, the origin of each record.
#[derive(Clone, Default)]
pub(crate) struct Records {
    pub(crate) batch: Batch,
    /// Empty, or one origin per record of `batch`.
    pub(crate) origins: Vec<Origin>,
}

impl Records {
    pub(crate) fn push_from(&mut self, other: &Records, index: usize) {
        self.batch.push_record(other.batch.get(index));
        if !other.origins.is_empty() {
            self.origins.push(other.origins[index]);
        }
        debug_assert!(self.origins.is_empty() || self.origins.len() == self.batch.len());
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }
}

/// A record that made a plugin trap twice, on its way to the dead-letter topic.
pub(crate) struct DeadLetter {
    pub(crate) records: Records,
    pub(crate) operator: String,
    pub(crate) error: String,
}

pub(crate) enum Message {
    Records(Records),
    /// Event time has reached this value (epoch ms) on the sending task; a task that
    /// was `Idle` is active again.
    Watermark(i64),
    /// The sending task has no active input (`[source] idle_timeout_ms`): until its
    /// next `Watermark`, it holds no downstream watermark back.
    Idle,
    /// Checkpoint `n`: everything before it belongs to epoch `n`.
    Barrier(u64),
    /// The sending table source task has read its table to where it ended when the
    /// attempt began: everything of it before this marker is delivered.
    TableEnd,
    DeadLetter(DeadLetter),
}

/// What tasks tell the checkpoint coordinator.
pub(crate) enum Event {
    /// A task's entry for checkpoint `n`, encoded by `checkpoint::layout`; sources add
    /// the offsets they reached, operator subtasks the state changes they wrote to the
    /// changelog (one per snapshot round, oldest first), for the store once `n` is committed;
    /// the subtask keeps them too until then, for its bases.
    State { n: u64, task: TaskId, bytes: Vec<u8>, offsets: Option<Vec<PartitionState>>, changes: Vec<Arc<StateChanges>> },
    /// The sink has handed every record of epoch `n` to the producer.
    SinkAligned(u64),
    /// An operator subtask's watermark fired output, the first since the last barrier
    /// (`Pace`): the coordinator may start the next checkpoint early.
    Fired,
    Failed(TaskFailure),
}
