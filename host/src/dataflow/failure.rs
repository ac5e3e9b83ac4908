//! Why a task, and so the attempt, failed, and whether a restart can cure it.

use std::time::Duration;

use crate::checkpoint::recovery::RecoveryError;
use crate::checkpoint::store::StoreError;
use crate::operator::OperatorError;

use super::Origin;

/// Why one task, and so the attempt, failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskFailure {
    /// A channel closed because another task ended first; never the root cause.
    #[error("stopped because another task of the job stopped")]
    Stopped,
    #[error("Kafka: {0}")]
    Kafka(String),
    /// The producer failed (its message names the topic and the call).
    #[error("{0}")]
    Sink(String),
    /// Another instance of the job took its transactional id over.
    #[error("{0}")]
    Fenced(String),
    /// A scaled-out process's commit was refused because the group moved on without it
    /// (its producer is not fenced): it waits for the group to say what it owns now.
    #[error("{0}")]
    LeftGroup(String),
    /// Boxed: the largest error, and failures travel in every task's `Result`.
    #[error("{error}")]
    Operator { error: Box<OperatorError>, origins: Vec<Origin> },
    #[error(
        "record {topic}/{partition}@{offset} crashed the plugin again after a restart: {error}; \
         set dead_letter_topic ([sink] or [producer]) to divert such records and keep the job running",
        offset = origin.offset
    )]
    /// `origin` names the record by input id; `topic` and `partition` as Kafka does.
    Poison { topic: String, partition: i32, origin: Origin, error: String },
    /// As `Poison`, with a dead-letter topic configured: the next attempt sends the
    /// record there unprocessed.
    #[error(
        "record {topic}/{partition}@{offset} crashed the plugin again after a restart: {error}; \
         restarting to send it to the dead-letter topic",
        offset = origin.offset
    )]
    Poisoned { topic: String, partition: i32, origin: Origin, error: String },
    #[error("{0}")]
    Store(StoreError),
    #[error("checkpoint {n} did not complete within {}s", timeout.as_secs())]
    CheckpointTimeout { n: u64, timeout: Duration },
    #[error("{0}")]
    Recovery(RecoveryError),
    #[error("{0}")]
    Incompatible(String),
    #[error("{0}")]
    OffsetLost(String),
    /// A bug in weir, not in the job: the task's thread panicked.
    #[error("{task} panicked: {message}; this is a bug in weir: please report it with this log")]
    Panicked { task: String, message: String },
}

impl From<StoreError> for TaskFailure {
    fn from(error: StoreError) -> TaskFailure {
        TaskFailure::Store(error)
    }
}

impl TaskFailure {
    pub(crate) fn operator(error: OperatorError) -> TaskFailure {
        TaskFailure::Operator { error: Box::new(error), origins: Vec::new() }
    }

    /// The checkpoint store's directory was deleted under the attempt.
    pub(crate) fn is_store_vanished(&self) -> bool {
        matches!(self, TaskFailure::Store(StoreError::Vanished { .. }))
    }

    /// Failures a restart cannot cure: the job must stop and say why.
    pub(crate) fn is_fatal(&self) -> bool {
        match self {
            TaskFailure::Poison { .. }
            | TaskFailure::Fenced(_)
            | TaskFailure::Incompatible(_)
            | TaskFailure::OffsetLost(_) => true,
            TaskFailure::Store(e) => !matches!(e, StoreError::Rocks { .. } | StoreError::Vanished { .. }),
            TaskFailure::Recovery(e) => !matches!(e, RecoveryError::Unreachable { .. } | RecoveryError::Offsets { .. }),
            TaskFailure::Operator { error, .. } => {
                // Malformed state changes come back the same after a restart.
                matches!(
                    **error,
                    OperatorError::Init { .. } | OperatorError::Instantiate { .. } | OperatorError::InvalidState { .. }
                )
            }
            TaskFailure::Stopped
            | TaskFailure::LeftGroup(_)
            | TaskFailure::Poisoned { .. }
            | TaskFailure::Kafka(_)
            | TaskFailure::Sink(_)
            | TaskFailure::CheckpointTimeout { .. }
            | TaskFailure::Panicked { .. } => false,
        }
    }
}
