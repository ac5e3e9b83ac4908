//! The job file (`weir run <job.toml>`): what to read, which operators to run, where to write.
//! serde + toml refuse unknown keys everywhere and report a bad value with its line (a Kafka
//! property weir forces included); checks that span keys (operator names, plugin paths, the
//! transaction timeout) run after parsing.
//! Relative paths resolve against the file's directory.
//!
//! A complete job file, with every optional key at its default unless noted:
//!
//! ```toml
//! name = "clicks-per-user"        # the job id: consumer group of its committed offsets and
//!                                 # transactional.id of its producer; [A-Za-z0-9._-], 1-200 chars
//! parallelism = 2                 # subtasks per operator, 1..=64 and at most key_groups; may
//!                                 # change between runs: each subtask restores the key groups it owns
//! key_groups = 128                # optional: the key groups keyed state is kept in, 1..=32768;
//!                                 # default: the smallest multiple of the input's partition count
//!                                 # that is at least 128; fixed by the job's first checkpoint
//! changelog_topic = "clicks-per-user-changelog"  # default: "<name>-changelog"; on the sink's brokers,
//!                                 # created (compacted, a few partitions of several key groups) when missing
//! checkpoint_interval_ms = 1000   # 10..=600000, and at most half the sink's transaction.timeout.ms
//! state_dir = "state"             # the checkpoint store; relative to this file's directory
//! scale_out = false               # true: every process started with this file joins one job
//!                                 # through the job's consumer group and runs the input
//!                                 # partitions Kafka assigns it (exactly-once only; keyed input
//!                                 # must be co-partitioned by key: README "Scaling out")
//!
//! [source]
//! brokers = "127.0.0.1:9092"
//! topic = "clicks"
//! start = "earliest"              # earliest | latest: where to start when no checkpoint was committed
//!                                 # (a partition added later is read from its start)
//!                                 # (a checkpointed offset the broker lost stops the job: never skipped)
//! max_out_of_orderness_ms = 0     # watermark = max event time seen - this; at most 7 days
//! idle_timeout_ms = 30000         # optional, unset by default (every partition holds the watermark):
//!                                 # a partition with no record for this long (100 ms..7 days) stops
//!                                 # holding it back until its next record
//! [source.kafka]                  # optional librdkafka consumer properties; weir's tunable defaults
//! "fetch.min.bytes" = 1           # (source::config::TUNABLES) yield to them, a property weir forces
//!                                 # (source::config::FORCED) is refused; quote names with dots
//!
//! [[operators]]                   # the chain, in order; at least one
//! name = "count"                  # unique in the job; [A-Za-z0-9._-], 1-64 chars
//! plugin = "plugins/window-count.wasm"   # relative to this file's directory
//! key_by = true                   # route records to subtasks by key (default false)
//! tombstones = false              # hand records without a value marked (value offset
//!                                 # 0xFFFFFFFF), not as empty values (default false)
//! memory_limit_mb = 64            # the plugin's linear memory cap, 1..=4096
//! call_timeout_ms = 1000          # the deadline of one call into the plugin, 1..=600000, and
//!                                 # exactly-once, at most half the sink's transaction.timeout.ms
//!                                 # (plus 8 ms per MiB held and 32 per MiB grown)
//! max_output_records = 1000000    # records one call may return, 1..=100000000
//! max_output_mb = 64              # MiB of keys, values and headers one call may return, counted
//!                                 # per record, 1..=4095; default: memory_limit_mb
//! log_lines_per_sec = 100         # plugin log/stdio lines passed to the host log, 1..=100000,
//! log_kib_per_sec = 64            # and KiB; bursts of 10 s; the rest is dropped and counted
//! max_plugin_mb = 128             # largest plugin file accepted, 1..=4096
//! compile_timeout_ms = 120000     # how long compiling the plugin may take, 100..=3600000
//! [operators.config]              # optional, handed to the plugin's init as strings
//! window_ms = 10000               # integers, floats and booleans become strings
//!
//! [sink]
//! brokers = "127.0.0.1:9092"
//! topic = "counts"
//! delivery = "exactly-once"       # exactly-once | at-least-once
//! dead_letter_topic = "clicks-dlq"   # optional: where poison records go instead of stopping the job
//! [sink.kafka]                    # optional librdkafka producer properties, as for [source.kafka]
//! "linger.ms" = 5                 # e.g. a tunable default (sink::config::TUNABLES) changed
//!
//! [restarts]                      # optional: in-process restarts after a task fails
//! max = 5                         # more than this many restarts within window_ms: exit non-zero
//! window_ms = 600000
//! backoff_initial_ms = 500        # the first restart's delay, doubled each time up to backoff_max_ms
//! backoff_max_ms = 30000
//! ```
//!
//! The graph form (DESIGN.md §8) names its sources, what each operator reads and what
//! each sink takes; the top-level keys and `[restarts]` are the chain form's:
//!
//! ```toml
//! [[sources]]                     # 1..=16, all on one cluster
//! name = "clicks"                 # what `inputs` and `from` call it; unique among every
//!                                 # source, operator and sink
//! brokers = "127.0.0.1:9092"
//! topic = "clicks"                # start, max_out_of_orderness_ms, idle_timeout_ms and
//!                                 # [sources.kafka] as in [source]
//! [[sources]]
//! name = "users"
//! brokers = "127.0.0.1:9092"
//! topic = "users"
//! table = true                    # a compacted topic read as a table: read to its end before
//!                                 # any stream record at every start, holds no watermark back,
//!                                 # read only by key_by operators
//!
//! [[operators]]                   # every key of the chain form's [[operators]], and:
//! name = "enrich"
//! plugin = "plugins/enrich.wasm"
//! key_by = true                   # routes every input by key: one keyed state over all of them
//! inputs = ["clicks", "users"]    # sources, operators (their first output) or "operator/output"
//! outputs = ["out"]               # the default; a weir:operator@0.3 plugin may name several,
//!                                 # a 0.2 plugin has exactly one input and one output
//!
//! [[sinks]]                       # 1..=16
//! name = "enriched"
//! topic = "clicks-enriched"       # must exist, and be no topic the job reads
//! from = ["enrich"]               # operators, "operator/output"s or sources
//!
//! [producer]                      # the one producer of every sink: one transaction per
//! brokers = "127.0.0.1:9092"      # checkpoint holds every sink's records, the input offsets
//! delivery = "exactly-once"       # and the state changes; delivery, dead_letter_topic and
//!                                 # [producer.kafka] as in [sink]
//! ```
//!
//! Checked at load, each naming the line of its entry: names unique, inputs and `from`
//! that name something, no cycle, every source and every operator output read by
//! something, tables read by key.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use toml::Spanned;

use crate::kafka_config::{self, Forced};
use crate::operator::{Limits, LoadLimits, LogLimits, Ports, Tombstones};

mod graph;
pub use graph::{Input, Port};

/// Largest parallelism: subtasks per operator.
pub const MAX_PARALLELISM: u32 = 64;
/// Largest number of key groups.
pub use crate::checkpoint::layout::MAX_KEY_GROUPS;
/// Checkpoint interval bounds, in milliseconds.
pub const MIN_CHECKPOINT_INTERVAL_MS: u64 = 10;
pub const MAX_CHECKPOINT_INTERVAL_MS: u64 = 600_000;
pub use crate::sink::config::DEFAULT_TRANSACTION_TIMEOUT_MS;
/// Largest allowed out-of-orderness: 7 days.
pub const MAX_OUT_OF_ORDERNESS_MS: u64 = 7 * 24 * 3600 * 1000;
/// `[source] idle_timeout_ms` bounds: idleness is checked about once a second, and a
/// partition quiet for a week is idle under any sensible setting.
pub const MIN_IDLE_TIMEOUT_MS: u64 = 100;
pub const MAX_IDLE_TIMEOUT_MS: u64 = 7 * 24 * 3600 * 1000;
/// Largest number of operators in a job.
pub const MAX_OPERATORS: usize = 64;
/// Largest number of sources, of sinks, and of one operator's outputs.
pub const MAX_SOURCES: usize = 16;
pub const MAX_SINKS: usize = 16;
pub const MAX_OUTPUTS: usize = 16;
/// Largest `memory_limit_mb`: a wasm32 linear memory cannot exceed 4 GiB.
pub const MAX_MEMORY_LIMIT_MB: u32 = 4096;
/// Largest number of entries in one `[...kafka]` or `[operators.config]` table.
pub const MAX_MAP_ENTRIES: usize = 1024;
/// Longest value in one `[...kafka]` or `[operators.config]` table, in bytes.
pub const MAX_MAP_VALUE_BYTES: usize = 64 * 1024;

const MAX_JOB_NAME_CHARS: usize = 200;
const MAX_OPERATOR_NAME_CHARS: usize = 64;
const MAX_TOPIC_CHARS: usize = 249;

/// A parsed and checked job file: a graph of named sources, operators and sinks (the
/// chain form is the graph of one source, a chain and one sink). Paths are absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The job id: consumer group of its committed offsets and `transactional.id` of its
    /// producer, so renaming a job starts it over.
    pub name: String,
    /// Subtasks per operator, `1..=MAX_PARALLELISM`.
    pub parallelism: u32,
    /// The key groups of keyed state; `None`: the default for the input, or the
    /// number the job's checkpoints recorded.
    pub key_groups: Option<u32>,
    /// The compacted topic keyed state is kept in; `None`: `<name>-changelog`.
    pub changelog_topic: Option<String>,
    pub checkpoint_interval_ms: u64,
    /// The checkpoint store's directory.
    pub state_dir: PathBuf,
    /// Several processes share the job through its consumer group (DESIGN.md §7).
    pub scale_out: bool,
    /// The inputs, in the job file's order (which fixes how checkpoints name them); never
    /// empty, all on one cluster.
    pub sources: Vec<Source>,
    /// Every operator, in the job file's order (its position is its stage: keyed state
    /// is kept per stage); never empty, and the graph they make has no cycle.
    pub operators: Vec<Operator>,
    /// The outputs; never empty.
    pub sinks: Vec<Sink>,
    /// The one producer every sink, the dead-letter topic and the changelog are written with.
    pub producer: Producer,
    pub restarts: Restarts,
}

/// The job file as written, in either form: `[source]` + `[[operators]]` (a chain) +
/// `[sink]`, or `[[sources]]` + `[[operators]]` with `inputs` + `[[sinks]]` + `[producer]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    #[serde(deserialize_with = "job_name")]
    name: String,
    #[serde(deserialize_with = "parallelism")]
    parallelism: u32,
    #[serde(default, deserialize_with = "key_groups")]
    key_groups: Option<u32>,
    #[serde(default, deserialize_with = "optional_topic")]
    changelog_topic: Option<String>,
    #[serde(deserialize_with = "checkpoint_interval_ms")]
    checkpoint_interval_ms: u64,
    state_dir: PathBuf,
    #[serde(default)]
    scale_out: bool,
    #[serde(default)]
    source: Option<Spanned<Source>>,
    #[serde(default)]
    sources: Option<Vec<Spanned<Source>>>,
    #[serde(deserialize_with = "operators")]
    operators: Vec<Spanned<Operator>>,
    #[serde(default)]
    sink: Option<Spanned<ChainSink>>,
    #[serde(default)]
    sinks: Option<Vec<Spanned<Sink>>>,
    #[serde(default)]
    producer: Option<Producer>,
    #[serde(default)]
    restarts: Restarts,
}

/// A `[[sources]]` entry (or the chain form's `[source]`): a Kafka topic the job reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// What operators and sinks call it in `inputs` and `from`; `source` in the chain form.
    #[serde(default = "default_source_name", deserialize_with = "source_name")]
    pub name: String,
    /// A compacted topic read as a table: its records are updates of the latest value
    /// per key, it holds no watermark back, and an attempt reads it to its end before
    /// any stream record is delivered.
    #[serde(default)]
    pub table: bool,
    #[serde(deserialize_with = "brokers")]
    pub brokers: String,
    #[serde(deserialize_with = "topic")]
    pub topic: String,
    /// Where to start when Kafka holds no committed checkpoint for this job.
    #[serde(default)]
    pub start: Start,
    #[serde(default, deserialize_with = "out_of_orderness_ms")]
    pub max_out_of_orderness_ms: u64,
    /// A partition with no record for this long stops holding the watermark back until
    /// its next record; `None` (the default): a partition always holds it.
    #[serde(default, deserialize_with = "idle_timeout_ms")]
    pub idle_timeout_ms: Option<u64>,
    /// librdkafka consumer properties, set after weir's tunable defaults; those weir
    /// forces (`source::config::FORCED`) are refused.
    #[serde(default, deserialize_with = "source_kafka")]
    pub kafka: BTreeMap<String, String>,
}

/// `[source] start`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    #[default]
    Earliest,
    Latest,
}

/// One `[[operators]]` entry: a Wasm component and its settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operator {
    #[serde(deserialize_with = "operator_name")]
    pub name: String,
    /// What it reads: sources, operators (their first output) or `operator/output`;
    /// the chain form leaves it out (each operator reads the one before it).
    #[serde(default)]
    pub inputs: Vec<String>,
    /// The names of its outputs, handed to the plugin's `init`; default `["out"]`.
    #[serde(default = "default_outputs", deserialize_with = "output_names")]
    pub outputs: Vec<String>,
    /// The component file, absolute once loaded; it exists when `load`/`parse` return.
    pub plugin: PathBuf,
    /// Route each record to the subtask owning its key's key group rather than keep it
    /// local; an operator that keeps state needs it.
    #[serde(default)]
    pub key_by: bool,
    /// Hand its input records without a value (tombstones) marked as such
    /// (`operator::Tombstones::Marked`) rather than with an empty value.
    #[serde(default)]
    pub tombstones: bool,
    #[serde(
        default = "default_memory_limit_mb",
        deserialize_with = "memory_limit_mb"
    )]
    pub memory_limit_mb: u32,
    #[serde(
        default = "default_call_timeout_ms",
        deserialize_with = "call_timeout_ms"
    )]
    pub call_timeout_ms: u64,
    #[serde(
        default = "default_max_output_records",
        deserialize_with = "max_output_records"
    )]
    pub max_output_records: u32,
    /// `None`: as much as `memory_limit_mb`.
    #[serde(default, deserialize_with = "max_output_mb")]
    pub max_output_mb: Option<u32>,
    #[serde(
        default = "default_log_lines_per_sec",
        deserialize_with = "log_lines_per_sec"
    )]
    pub log_lines_per_sec: u32,
    #[serde(
        default = "default_log_kib_per_sec",
        deserialize_with = "log_kib_per_sec"
    )]
    pub log_kib_per_sec: u32,
    #[serde(default = "default_max_plugin_mb", deserialize_with = "max_plugin_mb")]
    pub max_plugin_mb: u32,
    #[serde(
        default = "default_compile_timeout_ms",
        deserialize_with = "compile_timeout_ms"
    )]
    pub compile_timeout_ms: u64,
    /// Handed to the plugin's `init`.
    #[serde(default, deserialize_with = "plugin_config")]
    pub config: BTreeMap<String, String>,
}

/// A `[[sinks]]` entry: a topic the job writes, and what it takes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sink {
    #[serde(default = "default_sink_name", deserialize_with = "sink_name")]
    pub name: String,
    #[serde(deserialize_with = "topic")]
    pub topic: String,
    /// Operators (their first output), `operator/output`s or sources; the chain form's
    /// sink takes the last operator.
    #[serde(default)]
    pub from: Vec<String>,
}

/// `[producer]`: how every sink is written. One producer, so one transaction per
/// checkpoint holds every sink's records, the input offsets and the state changes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Producer {
    #[serde(deserialize_with = "brokers")]
    pub brokers: String,
    #[serde(default)]
    pub delivery: Delivery,
    #[serde(default, deserialize_with = "optional_topic")]
    pub dead_letter_topic: Option<String>,
    /// librdkafka producer properties, set after weir's tunable defaults; those weir
    /// forces (`sink::config::FORCED`) are refused.
    #[serde(default, deserialize_with = "sink_kafka")]
    pub kafka: BTreeMap<String, String>,
}

/// The chain form's `[sink]`: one topic and the producer.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChainSink {
    #[serde(deserialize_with = "brokers")]
    brokers: String,
    #[serde(deserialize_with = "topic")]
    topic: String,
    #[serde(default)]
    delivery: Delivery,
    #[serde(default, deserialize_with = "optional_topic")]
    dead_letter_topic: Option<String>,
    #[serde(default, deserialize_with = "sink_kafka")]
    kafka: BTreeMap<String, String>,
}

/// `[sink] delivery`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// Output is written in one Kafka transaction per checkpoint, committed with the offsets.
    #[default]
    ExactlyOnce,
    /// No transactions: after a failure, output since the last checkpoint is written again.
    AtLeastOnce,
}

/// `[restarts]`: how a failed task restarts the job in-process (DESIGN §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Restarts {
    /// More than this many restarts within `window_ms` stops the job with an error.
    #[serde(default = "default_restarts_max")]
    pub max: u32,
    #[serde(default = "default_restarts_window_ms")]
    pub window_ms: u64,
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
}

impl Default for Restarts {
    fn default() -> Self {
        Restarts {
            max: default_restarts_max(),
            window_ms: default_restarts_window_ms(),
            backoff_initial_ms: default_backoff_initial_ms(),
            backoff_max_ms: default_backoff_max_ms(),
        }
    }
}

/// A job file that cannot be used: names the file, then what is wrong and what to do.
#[derive(Debug, thiserror::Error)]
#[error("job file {}: {kind}", file.display())]
pub struct JobError {
    /// The job file, or `<job text>` for `parse`.
    pub file: PathBuf,
    pub kind: JobErrorKind,
}

/// What is wrong with a job file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobErrorKind {
    #[error("cannot read it: {0}")]
    Read(#[source] std::io::Error),
    /// Syntax, unknown or missing keys, values of the wrong type or out of range; toml's message
    /// gives the line and column.
    #[error("{0}")]
    Parse(#[source] toml::de::Error),
    #[error("two operators are named `{name}`; give each [[operators]] entry a unique name")]
    DuplicateOperator { name: String },
    /// The graph form's checks across entries (names, inputs, cycles, tables); `line` is
    /// that of the entry at fault.
    #[error("line {line}: {problem}")]
    Graph { line: usize, problem: String },
    /// A mix of the chain form and the graph form, or a part of neither.
    #[error("{0}")]
    Form(String),
    #[error(
        "operator `{operator}`: plugin {path} {problem} (plugin paths are relative to the job \
         file's directory); build the plugin or fix `plugin`",
        path = .path.display()
    )]
    Plugin {
        operator: String,
        path: PathBuf,
        problem: &'static str,
    },
    #[error("[sink.kafka] `transaction.timeout.ms` = {value:?} is not a number of milliseconds")]
    TransactionTimeout { value: String },
    #[error(
        "checkpoint_interval_ms = {interval_ms} is more than half the sink's \
         transaction.timeout.ms ({timeout_ms}{default}): a transaction stays open for about a \
         checkpoint interval, and one that times out aborts the checkpoint; lower \
         checkpoint_interval_ms or raise [sink.kafka] \"transaction.timeout.ms\"",
        default = if *.defaulted { ", librdkafka's default" } else { "" }
    )]
    CheckpointIntervalTooLong {
        interval_ms: u64,
        timeout_ms: u64,
        defaulted: bool,
    },
    #[error(
        "operator `{operator}` has call_timeout_ms = {call_ms}, more than half the sink's \
         transaction.timeout.ms ({timeout_ms}{default}): a call that long holds the checkpoint's \
         transaction open until the broker aborts it, which fences the job for good; lower \
         call_timeout_ms or raise [sink.kafka] \"transaction.timeout.ms\" (the broker allows up to its \
         transaction.max.timeout.ms, 15 minutes unless set)",
        default = if *.defaulted { ", librdkafka's default" } else { "" }
    )]
    CallTimeoutTooLong {
        operator: String,
        call_ms: u64,
        timeout_ms: u64,
        defaulted: bool,
    },
    #[error("{what} is `{topic}`, a topic the job reads: {why}; use another topic")]
    TopicLoop {
        what: &'static str,
        topic: String,
        why: &'static str,
    },
    #[error("[restarts] backoff_initial_ms = {initial} is more than backoff_max_ms = {max}")]
    Backoff { initial: u64, max: u64 },
    #[error(
        "scale_out = true needs delivery = \"exactly-once\": the processes of a job are fenced \
         from each other by its transactions; set delivery = \"exactly-once\" or run one process"
    )]
    ScaleOutAtLeastOnce,
}

impl Job {
    /// Time between checkpoints.
    pub fn checkpoint_interval(&self) -> Duration {
        Duration::from_millis(self.checkpoint_interval_ms)
    }

    /// Whether any operator keeps keyed state (only one whose input is `key_by` may):
    /// a job without one has no changelog topic.
    pub fn keeps_state(&self) -> bool {
        self.operators.iter().any(|op| op.key_by)
    }
}

impl Source {
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout_ms.map(Duration::from_millis)
    }
}

impl Operator {
    /// The plugin's linear memory cap in bytes.
    pub fn memory_limit_bytes(&self) -> usize {
        self.memory_limit_mb as usize * 1024 * 1024
    }

    /// The CPU deadline of one call into the plugin.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    /// Most bytes of keys, values and headers one call may return.
    pub fn max_output_bytes(&self) -> u64 {
        u64::from(self.max_output_mb.unwrap_or(self.memory_limit_mb)) << 20
    }

    /// How long compiling the plugin may take.
    pub fn compile_timeout(&self) -> Duration {
        Duration::from_millis(self.compile_timeout_ms)
    }

    /// What loading its plugin may take.
    pub fn load_limits(&self) -> LoadLimits {
        LoadLimits { max_bytes: u64::from(self.max_plugin_mb) << 20, compile_timeout: self.compile_timeout() }
    }

    /// What each of its instances may use, and how it is handed tombstones.
    pub fn limits(&self) -> Limits {
        Limits {
            memory_bytes: self.memory_limit_bytes(),
            call_timeout: self.call_timeout(),
            max_output_records: self.max_output_records as usize,
            max_output_bytes: self.max_output_bytes(),
            log: LogLimits { lines_per_sec: self.log_lines_per_sec, bytes_per_sec: u64::from(self.log_kib_per_sec) << 10 },
            tombstones: if self.tombstones { Tombstones::Marked } else { Tombstones::AsEmpty },
        }
    }

    /// The names of its inputs and outputs, as its plugin's `init` gets them.
    pub fn ports(&self) -> Ports {
        Ports { inputs: self.inputs.clone(), outputs: self.outputs.clone() }
    }

    /// Its `[operators.config]`, as its plugin's `init` gets it: sorted by key.
    pub fn init_config(&self) -> Vec<(String, String)> {
        self.config.iter().map(|(key, value)| (key.clone(), value.clone())).collect()
    }
}

/// Why state under `key` cannot be kept by `operator`, whose input is not routed by key:
/// the records of a key reach every subtask.
pub fn unkeyed_state(operator: &str, key: &[u8]) -> String {
    format!(
        "it keeps state (key {}) but its input is not routed by key, so the records of a key reach every \
         subtask and its state could not follow them on restore; set key_by = true for operator `{operator}`",
        crate::chunk::shown_key(key)
    )
}

/// Reads and checks the job file at `path`; relative paths in it resolve against its directory.
pub fn load(path: &Path) -> Result<Job, JobError> {
    let error = |kind| JobError {
        file: path.to_owned(),
        kind,
    };
    let text = std::fs::read_to_string(path).map_err(|e| error(JobErrorKind::Read(e)))?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base = std::path::absolute(base).map_err(|e| error(JobErrorKind::Read(e)))?;
    parse_at(&text, &base).map_err(error)
}

/// Parses and checks job file text as if the file were in `base_dir`.
pub fn parse(text: &str, base_dir: &Path) -> Result<Job, JobError> {
    let error = |kind| JobError {
        file: PathBuf::from("<job text>"),
        kind,
    };
    let base = std::path::absolute(base_dir).map_err(|e| error(JobErrorKind::Read(e)))?;
    parse_at(text, &base).map_err(error)
}

fn parse_at(text: &str, base: &Path) -> Result<Job, JobErrorKind> {
    let file: JobFile = toml::from_str(text).map_err(JobErrorKind::Parse)?;
    let mut job = graph::build(file, text)?;
    job.state_dir = base.join(&job.state_dir);

    for operator in &mut job.operators {
        operator.plugin = base.join(&operator.plugin);
        let problem = match std::fs::metadata(&operator.plugin) {
            Ok(meta) if meta.is_file() => None,
            Ok(_) => Some("is not a file"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("does not exist"),
            Err(_) => Some("cannot be read"),
        };
        if let Some(problem) = problem {
            return Err(JobErrorKind::Plugin {
                operator: operator.name.clone(),
                path: operator.plugin.clone(),
                problem,
            });
        }
    }

    if job.producer.delivery == Delivery::ExactlyOnce {
        let (timeout_ms, defaulted) = match job.producer.kafka.get("transaction.timeout.ms") {
            Some(value) => (
                value
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| JobErrorKind::TransactionTimeout {
                        value: value.clone(),
                    })?,
                false,
            ),
            None => (DEFAULT_TRANSACTION_TIMEOUT_MS, true),
        };
        if job.checkpoint_interval_ms > timeout_ms / 2 {
            return Err(JobErrorKind::CheckpointIntervalTooLong {
                interval_ms: job.checkpoint_interval_ms,
                timeout_ms,
                defaulted,
            });
        }
        if let Some(op) = job.operators.iter().find(|op| op.call_timeout_ms > timeout_ms / 2) {
            let (operator, call_ms) = (op.name.clone(), op.call_timeout_ms);
            return Err(JobErrorKind::CallTimeoutTooLong { operator, call_ms, timeout_ms, defaulted });
        }
    }

    if job.scale_out && job.producer.delivery == Delivery::AtLeastOnce {
        return Err(JobErrorKind::ScaleOutAtLeastOnce);
    }
    check_topic_loops(&job)?;

    if job.restarts.backoff_initial_ms > job.restarts.backoff_max_ms {
        return Err(JobErrorKind::Backoff {
            initial: job.restarts.backoff_initial_ms,
            max: job.restarts.backoff_max_ms,
        });
    }
    Ok(job)
}

/// No sink, dead-letter topic or changelog may be a topic the job reads (on the same
/// cluster): the job would read what it writes.
fn check_topic_loops(job: &Job) -> Result<(), JobErrorKind> {
    let reads = |topic: &str| job.sources.iter().any(|s| s.brokers == job.producer.brokers && s.topic == topic);
    if let Some(sink) = job.sinks.iter().find(|sink| reads(&sink.topic)) {
        return Err(JobErrorKind::TopicLoop {
            what: if job.sinks.len() == 1 { "[sink] topic" } else { "a [[sinks]] topic" },
            topic: sink.topic.clone(),
            why: "the job would read its own output forever",
        });
    }
    if let Some(topic) = job.producer.dead_letter_topic.as_deref().filter(|topic| reads(topic)) {
        return Err(JobErrorKind::TopicLoop {
            what: "dead_letter_topic",
            topic: topic.to_string(),
            why: "a poison record would come back to poison the job again",
        });
    }
    Ok(())
}

// Field checks. Each runs inside deserialization, so toml reports the value's line and column.

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

fn checked_name<E: de::Error>(what: &str, value: String, max: usize) -> Result<String, E> {
    match name_problem(what, &value, max) {
        Some(problem) => Err(E::custom(problem)),
        None => Ok(value),
    }
}

/// What is wrong with `value` as a name of `what` (at most `max` characters), if anything.
fn name_problem(what: &str, value: &str, max: usize) -> Option<String> {
    if value.is_empty() {
        return Some(format!("{what} is empty"));
    }
    if value.chars().count() > max {
        return Some(format!("{what} `{value}` is longer than {max} characters"));
    }
    let c = value.chars().find(|&c| !is_name_char(c))?;
    Some(format!("{what} `{value}` contains {c:?}; use only letters, digits, '.', '_' and '-'"))
}

/// What a `[...kafka]` or `[operators.config]` table holding `held` entries refuses of
/// its next, if anything: one entry too many, or a value too long. `weir check` holds
/// its `--config` to this.
pub fn map_entry_problem(held: usize, key: &str, value: &str) -> Option<String> {
    if held >= MAX_MAP_ENTRIES {
        return Some(format!("the table has more than {MAX_MAP_ENTRIES} entries"));
    }
    if value.len() > MAX_MAP_VALUE_BYTES {
        return Some(format!("`{key}` is {} bytes long, over the limit of {MAX_MAP_VALUE_BYTES}", value.len()));
    }
    None
}

/// Checks an operator's output names as a job file's `outputs` are checked: 1 to
/// `MAX_OUTPUTS`, each a name, none twice. `weir check` holds its `--outputs` to this.
pub fn check_output_names(names: &[String]) -> Result<(), String> {
    if names.is_empty() || names.len() > MAX_OUTPUTS {
        return Err(format!("outputs has {} names; give 1..={MAX_OUTPUTS}", names.len()));
    }
    let mut seen = BTreeSet::new();
    for name in names {
        if let Some(problem) = name_problem("output name", name, MAX_OPERATOR_NAME_CHARS) {
            return Err(problem);
        }
        if !seen.insert(name) {
            return Err(format!("output `{name}` is named twice"));
        }
    }
    Ok(())
}

/// Checks an operator's input names as a job gives them to `init`: at least one, each
/// a source's or an operator's name, or `operator/output`, none twice. `weir check`
/// holds its `--inputs` to this.
pub fn check_input_names(names: &[String]) -> Result<(), String> {
    if names.is_empty() {
        return Err("an operator has at least one input".to_string());
    }
    let mut seen = BTreeSet::new();
    for name in names {
        for part in name.splitn(2, '/') {
            if let Some(problem) = name_problem("input name", part, MAX_OPERATOR_NAME_CHARS) {
                return Err(format!("{problem} (input `{name}`)"));
            }
        }
        if !seen.insert(name) {
            return Err(format!("input `{name}` is named twice"));
        }
    }
    Ok(())
}

fn in_range<E: de::Error, T: PartialOrd + fmt::Display>(
    key: &str,
    value: T,
    min: T,
    max: T,
) -> Result<T, E> {
    if value < min || value > max {
        return Err(E::custom(format!(
            "{key} = {value} is out of range; use {min}..={max}"
        )));
    }
    Ok(value)
}

fn job_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked_name("job name", String::deserialize(d)?, MAX_JOB_NAME_CHARS)
}

fn operator_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked_name("operator name", String::deserialize(d)?, MAX_OPERATOR_NAME_CHARS)
}

fn source_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked_name("source name", String::deserialize(d)?, MAX_OPERATOR_NAME_CHARS)
}

fn sink_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked_name("sink name", String::deserialize(d)?, MAX_OPERATOR_NAME_CHARS)
}

fn output_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    check_output_names(&names).map_err(de::Error::custom)?;
    Ok(names)
}

fn default_outputs() -> Vec<String> {
    vec!["out".to_string()]
}
fn default_source_name() -> String {
    "source".to_string()
}
fn default_sink_name() -> String {
    "sink".to_string()
}

fn topic<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let topic = checked_name("topic", String::deserialize(d)?, MAX_TOPIC_CHARS)?;
    if topic == "." || topic == ".." {
        return Err(de::Error::custom(format!(
            "topic `{topic}` is not a legal Kafka topic name"
        )));
    }
    Ok(topic)
}

fn optional_topic<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    topic(d).map(Some)
}

fn brokers<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let brokers = String::deserialize(d)?;
    if brokers.trim().is_empty() {
        return Err(de::Error::custom(
            "brokers is empty; give host:port[,host:port...]",
        ));
    }
    Ok(brokers)
}

fn parallelism<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    in_range("parallelism", u32::deserialize(d)?, 1, MAX_PARALLELISM)
}

fn key_groups<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    in_range("key_groups", u32::deserialize(d)?, 1, MAX_KEY_GROUPS).map(Some)
}

fn checkpoint_interval_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    in_range(
        "checkpoint_interval_ms",
        u64::deserialize(d)?,
        MIN_CHECKPOINT_INTERVAL_MS,
        MAX_CHECKPOINT_INTERVAL_MS,
    )
}

fn out_of_orderness_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    in_range(
        "max_out_of_orderness_ms",
        u64::deserialize(d)?,
        0,
        MAX_OUT_OF_ORDERNESS_MS,
    )
}

fn idle_timeout_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    in_range("idle_timeout_ms", u64::deserialize(d)?, MIN_IDLE_TIMEOUT_MS, MAX_IDLE_TIMEOUT_MS).map(Some)
}

fn memory_limit_mb<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    in_range("memory_limit_mb", u32::deserialize(d)?, 1, MAX_MEMORY_LIMIT_MB)
}

fn call_timeout_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    in_range("call_timeout_ms", u64::deserialize(d)?, 1, 600_000)
}

fn max_output_records<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    in_range("max_output_records", u32::deserialize(d)?, 1, 100_000_000)
}

fn max_output_mb<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    // Below 4 GiB: a batch's offsets are u32.
    in_range("max_output_mb", u32::deserialize(d)?, 1, 4095).map(Some)
}

fn log_lines_per_sec<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    in_range("log_lines_per_sec", u32::deserialize(d)?, 1, 100_000)
}

fn log_kib_per_sec<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    in_range("log_kib_per_sec", u32::deserialize(d)?, 1, 1 << 20)
}

fn max_plugin_mb<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    in_range("max_plugin_mb", u32::deserialize(d)?, 1, 4096)
}

fn compile_timeout_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    in_range("compile_timeout_ms", u64::deserialize(d)?, 100, 3_600_000)
}

fn operators<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Spanned<Operator>>, D::Error> {
    let operators = Vec::<Spanned<Operator>>::deserialize(d)?;
    if operators.is_empty() {
        return Err(de::Error::custom(
            "operators is empty; a job needs at least one [[operators]]",
        ));
    }
    if operators.len() > MAX_OPERATORS {
        return Err(de::Error::custom(format!(
            "{} operators is more than {MAX_OPERATORS}",
            operators.len()
        )));
    }
    Ok(operators)
}

fn default_memory_limit_mb() -> u32 {
    64
}
fn default_call_timeout_ms() -> u64 {
    1000
}
fn default_max_output_records() -> u32 {
    1_000_000
}
fn default_log_lines_per_sec() -> u32 {
    100
}
fn default_log_kib_per_sec() -> u32 {
    64
}
fn default_max_plugin_mb() -> u32 {
    128
}
fn default_compile_timeout_ms() -> u64 {
    crate::operator::DEFAULT_COMPILE_TIMEOUT.as_millis() as u64
}
fn default_restarts_max() -> u32 {
    5
}
fn default_restarts_window_ms() -> u64 {
    600_000
}
fn default_backoff_initial_ms() -> u64 {
    500
}
fn default_backoff_max_ms() -> u64 {
    30_000
}

fn plugin_config<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    string_map(d, "operators.config", &[])
}

fn source_kafka<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    string_map(d, "source.kafka", crate::source::config::FORCED)
}

fn sink_kafka<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    string_map(d, "sink.kafka", crate::sink::config::FORCED)
}

/// A table of string values that also takes TOML integers, floats and booleans, since users
/// write `window_ms = 10000` and `"fetch.min.bytes" = 1`. A key in `forced` is refused
/// while its value is read, so toml's error gives its line.
fn string_map<'de, D: Deserializer<'de>>(
    d: D,
    table: &'static str,
    forced: &'static [Forced],
) -> Result<BTreeMap<String, String>, D::Error> {
    struct MapVisitor {
        table: &'static str,
        forced: &'static [Forced],
    }
    impl<'de> Visitor<'de> for MapVisitor {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a table of strings, numbers or booleans")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
            let mut map = BTreeMap::new();
            while let Some(key) = access.next_key::<String>()? {
                if let Some(property) = kafka_config::forced(self.forced, &key) {
                    let why = property.why;
                    let message = format!("[{}] `{key}` cannot be set in the job file: {why}; remove it", self.table);
                    access.next_value_seed(Refuse(message.clone()))?;
                    return Err(de::Error::custom(message));
                }
                let ScalarString(value) = access.next_value()?;
                if let Some(problem) = map_entry_problem(map.len(), &key, &value) {
                    return Err(de::Error::custom(problem));
                }
                map.insert(key, value);
            }
            Ok(map)
        }
    }
    d.deserialize_map(MapVisitor { table, forced })
}

/// Fails with its message whatever the value is: the error then carries the value's
/// position, which toml turns into a line.
struct Refuse(String);

impl<'de> de::DeserializeSeed<'de> for Refuse {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Refuse {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(self.0))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(self.0))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(self.0))
    }
}

struct ScalarString(String);

impl<'de> Deserialize<'de> for ScalarString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = ScalarString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a string, number or boolean (a key that contains dots must be quoted, \
                     as in \"fetch.min.bytes\" = 1)",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<ScalarString, E> {
                Ok(ScalarString(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ScalarString, E> {
                Ok(ScalarString(v.to_string()))
            }
        }
        d.deserialize_any(ScalarVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_names_are_checked_alike_for_a_job_and_weir_check() {
        let names = |list: &[&str]| -> Vec<String> { list.iter().map(|n| n.to_string()).collect() };
        assert!(check_output_names(&names(&["hits", "misses"])).is_ok());
        assert!(check_output_names(&names(&[])).unwrap_err().contains("give 1..=16"));
        let seventeen: Vec<String> = (0..17).map(|o| format!("o{o}")).collect();
        assert!(check_output_names(&seventeen).unwrap_err().contains("17 names"));
        assert!(check_output_names(&names(&["a", "a"])).unwrap_err().contains("named twice"));
        assert!(check_output_names(&names(&["a b"])).unwrap_err().contains("contains ' '"));
        assert!(check_input_names(&names(&["clicks", "split/hits"])).is_ok());
        assert!(check_input_names(&names(&[])).is_err());
        assert!(check_input_names(&names(&["split/"])).unwrap_err().contains("input name is empty"));
        assert!(check_input_names(&names(&["a/b/c"])).unwrap_err().contains("contains '/'"));
        assert!(check_input_names(&names(&["x", "x"])).unwrap_err().contains("named twice"));
    }
}
