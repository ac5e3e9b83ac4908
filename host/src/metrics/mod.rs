//! What a running job shows: its series, rendered in Prometheus text format for
//! `GET /metrics`, and (`history.rs`, `progress.rs`) its recent checkpoints, restarts,
//! rebalances and long work, for the status API (`crate::status`). Tasks resolve their
//! handles once (`Metrics::operator`) and then only touch atomics, so counting costs the
//! hot path one relaxed increment per batch; the registry and encoder are `prometheus-client`'s.

pub mod history;
pub mod progress;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter as PromCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as PromGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use history::History;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperatorLabels {
    operator: String,
    subtask: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    topic: String,
    partition: i32,
}

/// A monotonically increasing count. Clones share the value.
#[derive(Clone, Debug, Default)]
pub struct Counter(PromCounter);

impl Counter {
    pub fn inc(&self) {
        self.0.inc();
    }
    pub fn inc_by(&self, n: u64) {
        self.0.inc_by(n);
    }
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// A value that goes up and down. Clones share the value.
#[derive(Clone, Debug, Default)]
pub struct Gauge(PromGauge);

impl Gauge {
    pub fn set(&self, v: i64) {
        self.0.set(v);
    }
    pub fn get(&self) -> i64 {
        self.0.get()
    }
    pub fn add(&self, v: i64) {
        self.0.inc_by(v);
    }
}

/// An event-time watermark in milliseconds since the epoch: a gauge for Prometheus (0
/// until the first one), and for the API whether there is one yet. Clones share it.
#[derive(Clone, Debug)]
pub struct Watermark {
    gauge: Gauge,
    value: Arc<AtomicI64>,
}

impl Watermark {
    fn new(gauge: Gauge) -> Self {
        Watermark { gauge, value: Arc::new(AtomicI64::new(i64::MIN)) }
    }

    /// `i64::MAX`, what a task with no input left passes on, is no time to show: the
    /// gauge and the API keep what they had.
    pub fn set(&self, millis: i64) {
        if millis == i64::MAX {
            return;
        }
        self.gauge.set(millis);
        self.value.store(millis, Ordering::Relaxed);
    }

    /// `None` until a watermark was set (`i64::MIN`, "no event time yet", counts as none).
    pub fn get(&self) -> Option<i64> {
        let millis = self.value.load(Ordering::Relaxed);
        (millis != i64::MIN).then_some(millis)
    }
}

/// One operator subtask's series.
#[derive(Clone, Debug)]
pub struct OperatorMetrics {
    pub records_in: Counter,
    pub records_out: Counter,
    /// The watermark the subtask last passed on.
    pub watermark: Watermark,
}

/// One input partition's series.
#[derive(Clone, Debug)]
pub struct PartitionMetrics {
    /// Records between the source's position and the partition's high watermark.
    pub lag: Gauge,
    /// The partition's own watermark: its greatest event time read, less the allowed
    /// out-of-orderness.
    pub watermark: Watermark,
}

/// One operator subtask's series as they read now.
#[derive(Clone, Debug)]
pub struct SubtaskReading {
    pub operator: String,
    pub subtask: u32,
    pub records_in: u64,
    pub records_out: u64,
    pub watermark: Option<i64>,
    pub log_dropped_lines: u64,
    pub log_dropped_bytes: u64,
}

/// One input partition's series as they read now.
#[derive(Clone, Debug)]
pub struct PartitionReading {
    pub topic: String,
    pub partition: i32,
    pub lag: i64,
    pub watermark: Option<i64>,
}

/// What the log rate limit of one operator subtask's plugin dropped.
#[derive(Clone, Debug, Default)]
pub struct PluginLogMetrics {
    pub dropped_lines: Counter,
    pub dropped_bytes: Counter,
}

/// The checkpoint coordinator's series.
#[derive(Clone, Debug)]
pub struct CheckpointMetrics {
    duration: Histogram,
    size_bytes: Gauge,
    last_committed: Gauge,
    state_changes: Gauge,
    state_change_bytes: Gauge,
    restore_entries: Gauge,
    restore_millis: Gauge,
}

impl CheckpointMetrics {
    /// Records checkpoint `n`, committed `duration` after its barrier was injected, with
    /// `size_bytes` of snapshots in the store.
    pub fn committed(&self, n: u64, duration: Duration, size_bytes: u64) {
        self.duration.observe(duration.as_secs_f64());
        self.size_bytes
            .set(i64::try_from(size_bytes).unwrap_or(i64::MAX));
        self.last_committed
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Records the keyed state changes of the checkpoint being committed.
    pub fn state_changes(&self, entries: u64, bytes: u64) {
        self.state_changes.set(i64::try_from(entries).unwrap_or(i64::MAX));
        self.state_change_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// An attempt resumes from checkpoint `n`, committed before it began.
    fn resumed(&self, n: u64) {
        if self.last_committed.get() < i64::try_from(n).unwrap_or(i64::MAX) {
            self.last_committed.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Records a restore of keyed state: `entries` restored in `duration`.
    pub fn restored(&self, entries: u64, duration: Duration) {
        self.restore_entries.set(i64::try_from(entries).unwrap_or(i64::MAX));
        self.restore_millis.set(i64::try_from(duration.as_millis()).unwrap_or(i64::MAX));
    }
}

struct Families {
    records_in: Family<OperatorLabels, PromCounter>,
    records_out: Family<OperatorLabels, PromCounter>,
    watermark: Family<OperatorLabels, PromGauge>,
    consumer_lag: Family<PartitionLabels, PromGauge>,
    partition_watermark: Family<PartitionLabels, PromGauge>,
    plugin_log_dropped_lines: Family<OperatorLabels, PromCounter>,
    plugin_log_dropped_bytes: Family<OperatorLabels, PromCounter>,
}

/// Every series handed out, by labels, so that a reading finds them without going
/// through the encoder, and a second resolution of the same labels shares the first's.
#[derive(Default)]
struct Index {
    subtasks: BTreeMap<(String, u32), (OperatorMetrics, PluginLogMetrics)>,
    partitions: BTreeMap<(String, i32), PartitionMetrics>,
}

/// The job's metrics registry. Cheap to clone; every clone updates the same series.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    families: Arc<Families>,
    index: Arc<Mutex<Index>>,
    history: History,
    checkpoint: CheckpointMetrics,
    restarts: Counter,
    dead_letter_records: Counter,
    group: GroupMetrics,
}

/// A scaled-out process's share of its job: what the group assigned it.
#[derive(Clone, Debug, Default)]
pub struct GroupMetrics {
    /// Input partitions this process owns now.
    pub owned_partitions: Gauge,
    /// Changes of this process's partitions.
    pub rebalances: Counter,
    /// How long the last rebalance took, from the change to running again.
    pub rebalance_millis: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Families {
    /// The labelled series, registered. Counters get their `_total` suffix from the encoder.
    fn registered(registry: &mut Registry) -> Families {
        let families = Families {
            records_in: Family::default(),
            records_out: Family::default(),
            watermark: Family::default(),
            consumer_lag: Family::default(),
            partition_watermark: Family::default(),
            plugin_log_dropped_lines: Family::default(),
            plugin_log_dropped_bytes: Family::default(),
        };
        registry.register("records_in", "Records received by an operator subtask", families.records_in.clone());
        registry.register("records_out", "Records emitted by an operator subtask", families.records_out.clone());
        registry.register(
            "watermark_milliseconds",
            "Event-time watermark an operator subtask last passed on, in ms since the epoch (0 before the first)",
            families.watermark.clone(),
        );
        registry.register(
            "consumer_lag",
            "Records between the source's position and the partition's high watermark",
            families.consumer_lag.clone(),
        );
        registry.register(
            "partition_watermark_milliseconds",
            "An input partition's greatest event time read less the allowed out-of-orderness, in ms since the epoch",
            families.partition_watermark.clone(),
        );
        registry.register(
            "plugin_log_dropped_lines",
            "Lines of plugin log and stdio output dropped by the per-instance rate limit",
            families.plugin_log_dropped_lines.clone(),
        );
        registry.register(
            "plugin_log_dropped_bytes",
            "Bytes of plugin log and stdio output dropped by the per-instance rate limit",
            families.plugin_log_dropped_bytes.clone(),
        );
        families
    }
}

impl CheckpointMetrics {
    fn registered(registry: &mut Registry) -> CheckpointMetrics {
        // 5 ms .. ~80 s: a checkpoint spans barrier alignment, snapshots and the commit.
        let duration = Histogram::new(exponential_buckets(0.005, 2.0, 15));
        registry.register(
            "checkpoint_duration_seconds",
            "Time from injecting a checkpoint's barrier to committing its transaction",
            duration.clone(),
        );
        let checkpoint = CheckpointMetrics {
            duration,
            size_bytes: Gauge::default(),
            last_committed: Gauge::default(),
            state_changes: Gauge::default(),
            state_change_bytes: Gauge::default(),
            restore_entries: Gauge::default(),
            restore_millis: Gauge::default(),
        };
        for (name, help, gauge) in [
            ("checkpoint_size_bytes", "Snapshot bytes of the last committed checkpoint", &checkpoint.size_bytes),
            ("last_committed_checkpoint", "Id of the last checkpoint whose Kafka transaction committed", &checkpoint.last_committed),
            ("checkpoint_state_changes", "Keyed state entries changed or removed by the last committed checkpoint", &checkpoint.state_changes),
            ("checkpoint_state_change_bytes", "Bytes of keys and values of those changes", &checkpoint.state_change_bytes),
            ("restore_entries", "Keyed state entries restored by the last recovery", &checkpoint.restore_entries),
            ("restore_duration_milliseconds", "How long the last recovery took to restore keyed state", &checkpoint.restore_millis),
        ] {
            registry.register(name, help, gauge.0.clone());
        }
        checkpoint
    }
}

impl GroupMetrics {
    fn registered(registry: &mut Registry) -> GroupMetrics {
        let group = GroupMetrics::default();
        registry.register(
            "owned_partitions",
            "Input partitions this process owns: all of them for a single process, the group's share with scale_out",
            group.owned_partitions.0.clone(),
        );
        registry.register("rebalances", "Changes of the input partitions this process owns (scale_out)", group.rebalances.0.clone());
        registry.register(
            "rebalance_duration_milliseconds",
            "How long the last change of this process's partitions took, until it ran again (scale_out)",
            group.rebalance_millis.0.clone(),
        );
        group
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("weir");
        let families = Families::registered(&mut registry);
        let checkpoint = CheckpointMetrics::registered(&mut registry);
        let restarts = Counter::default();
        registry.register("restarts", "In-process restarts of the job from its last committed checkpoint", restarts.0.clone());
        let dead_letter_records = Counter::default();
        registry.register(
            "dead_letter_records",
            "Records committed to the dead-letter topic (poison records, records not co-partitioned by key)",
            dead_letter_records.0.clone(),
        );
        let group = GroupMetrics::registered(&mut registry);
        Metrics {
            registry: Arc::new(registry),
            families: Arc::new(families),
            index: Arc::default(),
            history: History::default(),
            checkpoint,
            restarts,
            dead_letter_records,
            group,
        }
    }

    /// The series of one operator subtask. Call once per task, then count through the handles.
    pub fn operator(&self, operator: &str, subtask: u32) -> OperatorMetrics {
        self.subtask(operator, subtask).0
    }

    /// The log-drop counters of one operator subtask's plugin.
    pub fn plugin_log(&self, operator: &str, subtask: u32) -> PluginLogMetrics {
        self.subtask(operator, subtask).1
    }

    fn subtask(&self, operator: &str, subtask: u32) -> (OperatorMetrics, PluginLogMetrics) {
        let mut index = self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let families = &self.families;
        let series = index.subtasks.entry((operator.to_owned(), subtask)).or_insert_with(|| {
            let labels = OperatorLabels { operator: operator.to_owned(), subtask };
            let counts = OperatorMetrics {
                records_in: Counter(families.records_in.get_or_create_owned(&labels)),
                records_out: Counter(families.records_out.get_or_create_owned(&labels)),
                watermark: Watermark::new(Gauge(families.watermark.get_or_create_owned(&labels))),
            };
            let log = PluginLogMetrics {
                dropped_lines: Counter(families.plugin_log_dropped_lines.get_or_create_owned(&labels)),
                dropped_bytes: Counter(families.plugin_log_dropped_bytes.get_or_create_owned(&labels)),
            };
            (counts, log)
        });
        series.clone()
    }

    /// The series of one input partition.
    pub fn partition(&self, topic: &str, partition: i32) -> PartitionMetrics {
        let mut index = self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let families = &self.families;
        let series = index.partitions.entry((topic.to_owned(), partition)).or_insert_with(|| {
            let labels = PartitionLabels { topic: topic.to_owned(), partition };
            PartitionMetrics {
                lag: Gauge(families.consumer_lag.get_or_create_owned(&labels)),
                watermark: Watermark::new(Gauge(families.partition_watermark.get_or_create_owned(&labels))),
            }
        });
        series.clone()
    }

    /// Drops the series of an input partition this process no longer reads (a scaled-out
    /// process that lost it): its lag and watermark would otherwise stay frozen in sums.
    pub fn forget_partition(&self, topic: &str, partition: i32) {
        let mut index = self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        index.partitions.remove(&(topic.to_owned(), partition));
        let labels = PartitionLabels { topic: topic.to_owned(), partition };
        self.families.consumer_lag.remove(&labels);
        self.families.partition_watermark.remove(&labels);
    }

    /// Every operator subtask's series, in operator name and subtask order.
    pub fn subtasks(&self) -> Vec<SubtaskReading> {
        let index = self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let reading = |((operator, subtask), (counts, log)): (&(String, u32), &(OperatorMetrics, PluginLogMetrics))| SubtaskReading {
            operator: operator.clone(),
            subtask: *subtask,
            records_in: counts.records_in.get(),
            records_out: counts.records_out.get(),
            watermark: counts.watermark.get(),
            log_dropped_lines: log.dropped_lines.get(),
            log_dropped_bytes: log.dropped_bytes.get(),
        };
        index.subtasks.iter().map(reading).collect()
    }

    /// Every input partition's series, in topic and partition order.
    pub fn partitions(&self) -> Vec<PartitionReading> {
        let index = self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let reading = |((topic, partition), series): (&(String, i32), &PartitionMetrics)| PartitionReading {
            topic: topic.clone(),
            partition: *partition,
            lag: series.lag.get(),
            watermark: series.watermark.get(),
        };
        index.partitions.iter().map(reading).collect()
    }

    /// Recent checkpoints, restarts and rebalances.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// An attempt resumes from checkpoint `n`, committed before it began: the last
    /// committed checkpoint until it commits one.
    pub fn resumed(&self, n: u64) {
        self.checkpoint.resumed(n);
        self.history.resumed(n);
    }

    /// An attempt failed with `failure` and the next begins after `backoff`; `budgeted`
    /// when it counts against the job's restart budget (a poison record set aside does not).
    pub fn restarted(&self, failure: &dyn std::fmt::Display, backoff: Duration, budgeted: bool) {
        if budgeted {
            self.restarts.inc();
        }
        self.history.restarted(failure, backoff);
    }

    pub fn checkpoint(&self) -> CheckpointMetrics {
        self.checkpoint.clone()
    }

    pub fn restarts(&self) -> Counter {
        self.restarts.clone()
    }

    pub fn group(&self) -> GroupMetrics {
        self.group.clone()
    }

    pub fn dead_letter_records(&self) -> Counter {
        self.dead_letter_records.clone()
    }

    /// Every series in Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

