//! What travels on the channels between tasks: batches of records, watermarks and
//! checkpoint barriers, in band and in order, so a barrier cuts every stream at one
//! consistent point; and what tasks report to the checkpoint coordinator.

use std::sync::Arc;

use crate::batch::{BATCH_BYTES, BATCH_RECORDS, Batch};
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

    /// Whether it reached a bound of a batch.
    pub(crate) fn is_full(&self) -> bool {
        self.batch.len() >= BATCH_RECORDS || self.batch.bytes() >= BATCH_BYTES
    }

    /// A copy of the records in `range`, with their origins.
    pub(crate) fn piece(&self, range: std::ops::Range<usize>) -> Records {
        let origins = self.origins.get(range.clone()).map_or_else(Vec::new, <[Origin]>::to_vec);
        Records { batch: self.batch.copy_of(range), origins }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{Entry, OutputBound};

    /// The records of each piece `records` is cut into.
    fn sizes(records: &Records) -> Vec<usize> {
        let ends = records.batch.piece_ends();
        std::iter::once(0).chain(ends.iter().copied()).zip(ends.iter().copied()).map(|(start, end)| end - start).collect()
    }

    #[test]
    fn a_batch_within_the_bounds_is_one_piece() {
        let mut records = Records::default();
        (0..BATCH_RECORDS).for_each(|i| records.batch.push(None, format!("{i}").as_bytes(), 0, &[]));
        assert_eq!(sizes(&records), [BATCH_RECORDS]);
    }

    #[test]
    fn records_are_cut_by_count_and_by_bytes_with_their_origins() {
        let mut records = Records::default();
        for i in 0..2_500 {
            records.batch.push(Some(b"k"), &[0; 99], 0, &[]);
            records.origins.push(Origin { partition: 0, offset: i });
        }
        assert_eq!(sizes(&records), [1024, 1024, 452]);
        let last = records.piece(2_048..2_500);
        assert_eq!((last.batch.len(), last.origins[0].offset, last.origins.len()), (452, 2_048, 452));
        let mut big = Records::default();
        (0..5).for_each(|_| big.batch.push(None, &vec![0; 400 << 10], 0, &[]));
        assert_eq!(sizes(&big), [3, 2], "a piece closes with the record that fills it");
        assert!(big.piece(0..3).origins.is_empty());
    }

    /// Headers count toward the bytes: records of no key or value but 2 000 headers
    /// each hold far more than their data on the host.
    #[test]
    fn headers_count_toward_a_batchs_bytes() {
        let headers: Vec<(&str, &[u8])> = vec![("h", b""); 2_000];
        let mut records = Records::default();
        (0..20).for_each(|_| records.batch.push(None, b"", 0, &headers));
        assert!(records.is_full(), "{} bytes", records.batch.bytes());
        let sizes = sizes(&records);
        assert!(sizes.len() > 1 && sizes.iter().all(|&n| n <= 10), "{sizes:?}");
    }

    /// An operator's output may point every record at the same bytes: its data is small,
    /// the records handed on are not.
    #[test]
    fn records_that_share_their_bytes_are_measured_one_by_one() {
        let entry = Entry { has_key: false, key_offset: 0, key_len: 0, value_offset: 0, value_len: 512 << 10, timestamp: 0 };
        let bound = OutputBound { max_records: 16, max_bytes: 1 << 30 };
        let batch = Batch::from_parts(vec![0; 512 << 10], vec![entry; 6], Vec::new(), bound).unwrap();
        assert_eq!(sizes(&Records { batch, origins: Vec::new() }), [2, 2, 2]);
    }
}
