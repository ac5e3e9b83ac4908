//! `GET /api/v1/job`: what the job is and does, as JSON. Version 1: fields may be added,
//! none is renamed or removed without a `/api/v2`. Built on each request from what the
//! engine already keeps (the metrics' series, their history, the rates sampled once a
//! second), so the record path pays nothing for it. The README documents the shape.

use serde::{Deserialize, Serialize};

use crate::metrics::history::{CheckpointEntry, Phase, RebalanceEntry, RestartEntry};
use crate::metrics::progress;

/// The version in the path, and in every answer.
pub const VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobStatus {
    pub api_version: u32,
    pub name: String,
    pub phase: Phase,
    /// `exactly-once` or `at-least-once`.
    pub delivery: String,
    pub checkpoint_interval_ms: u64,
    pub scale_out: bool,
    /// When this process started, and now, in ms since the epoch.
    pub started_at_ms: u64,
    pub now_ms: u64,
    pub graph: Graph,
    pub checkpoints: Checkpoints,
    pub restarts: Restarts,
    /// Poison records written to the dead-letter topic since the process started.
    pub dead_letters: u64,
    /// Long work under way: a restore of keyed state, a reseed of the changelog.
    pub progress: Option<progress::Reading>,
    /// A scaled-out process's share of its job.
    pub group: Option<Group>,
}

/// Sources, operators and sinks, and the edges between them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Graph {
    pub sources: Vec<SourceNode>,
    pub operators: Vec<OperatorNode>,
    pub sinks: Vec<SinkNode>,
    pub edges: Vec<Edge>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SourceNode {
    pub name: String,
    pub topic: String,
    /// A table (read whole at every start), not a stream.
    pub table: bool,
    /// The partitions this process reads.
    pub partitions: Vec<PartitionStatus>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PartitionStatus {
    pub partition: i32,
    /// Records between the source's position and the partition's high watermark,
    /// refreshed once a second.
    pub lag: i64,
    /// The partition's greatest event time read, less the allowed out-of-orderness.
    pub watermark_ms: Option<i64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OperatorNode {
    pub name: String,
    pub plugin: String,
    /// The WIT world it runs as, e.g. `weir:operator@0.3.0`.
    pub world: String,
    pub parallelism: u32,
    pub key_by: bool,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Summed over its subtasks, over the last 10 s.
    pub records_in_per_s: Option<f64>,
    pub records_out_per_s: Option<f64>,
    pub subtasks: Vec<SubtaskStatus>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SubtaskStatus {
    pub subtask: u32,
    pub records_in: u64,
    pub records_out: u64,
    /// Over the last 10 s; `None` until two samples a second apart exist.
    pub records_in_per_s: Option<f64>,
    pub records_out_per_s: Option<f64>,
    pub watermark_ms: Option<i64>,
    /// What its plugin's log rate limit dropped.
    pub log_dropped_lines: u64,
    pub log_dropped_bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SinkNode {
    pub name: String,
    pub topic: String,
    pub from: Vec<String>,
}

/// An edge from a source or an operator's output to an operator or a sink.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    pub from: String,
    /// The output's name when the operator has more than one.
    pub output: Option<String>,
    pub to: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Checkpoints {
    pub last_committed: Option<u64>,
    /// The last 50, oldest first, committed or not.
    pub recent: Vec<CheckpointEntry>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Restarts {
    /// Restarts counted against the job's budget since the process started.
    pub count: u64,
    /// The last 50 attempts that ended in a failure and were started again, oldest
    /// first: those of the budget, and poison records set aside (backoff 0).
    pub recent: Vec<RestartEntry>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Group {
    pub member_id: Option<String>,
    pub owned_partitions: Vec<i32>,
    pub rebalances: u64,
    /// The last 20, oldest first.
    pub recent: Vec<RebalanceEntry>,
}
