//! Seeing a running job: `/api/v1/job` (`api.rs`), the status page built from it
//! (`page/`), and `/metrics`, served by `server.rs` on `--metrics-addr`. Read-only: nothing
//! served can change the job. `Status` joins what the job file says (its graph) with what
//! the engine's metrics and history say now.

pub mod api;
mod rates;
pub mod server;

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::job::{Delivery, Job, Port};
use crate::metrics::{Metrics, history, progress};
use crate::operator::Plugin;
use api::{Checkpoints, Edge, Graph, JobStatus, OperatorNode, PartitionStatus, Restarts, SinkNode, SourceNode, SubtaskStatus};
pub use rates::{Rates, SAMPLE_EVERY};

/// The job as its file and plugins describe it, with its live metrics.
pub struct Status {
    job: Job,
    /// Per operator, its plugin's path and world.
    plugins: Vec<(String, String)>,
    metrics: Metrics,
    rates: Arc<Rates>,
    started_at_ms: u64,
}

impl Status {
    pub fn new(job: &Job, plugins: &[Plugin], metrics: Metrics) -> Status {
        let plugins = plugins.iter().map(|p| (p.path().display().to_string(), p.info().world.to_string())).collect();
        Status::described(job, plugins, metrics)
    }

    /// With each operator's plugin path and world given as text.
    fn described(job: &Job, plugins: Vec<(String, String)>, metrics: Metrics) -> Status {
        assert_eq!(plugins.len(), job.operators.len(), "one plugin per operator");
        Status { job: job.clone(), plugins, metrics, rates: Arc::default(), started_at_ms: history::now_ms() }
    }

    /// The rates' sampler: call [`Rates::sample`] with [`Status::metrics`] once a second.
    pub fn rates(&self) -> &Arc<Rates> {
        &self.rates
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The job now, as `/api/v1/job` answers.
    pub fn job(&self) -> JobStatus {
        let recorded = self.metrics.history().recorded();
        let group = self.job.scale_out.then(|| api::Group {
            member_id: recorded.member_id.clone(),
            owned_partitions: recorded.owned.clone().unwrap_or_default(),
            rebalances: self.metrics.group().rebalances.get(),
            recent: recorded.rebalances.clone(),
        });
        let owned = group.as_ref().map(|g| g.owned_partitions.iter().copied().collect::<BTreeSet<i32>>());
        JobStatus {
            api_version: api::VERSION,
            name: self.job.name.clone(),
            phase: recorded.phase,
            delivery: match self.job.producer.delivery {
                Delivery::ExactlyOnce => "exactly-once",
                Delivery::AtLeastOnce => "at-least-once",
            }
            .to_owned(),
            checkpoint_interval_ms: self.job.checkpoint_interval_ms,
            scale_out: self.job.scale_out,
            started_at_ms: self.started_at_ms,
            now_ms: history::now_ms(),
            graph: self.graph(owned.as_ref()),
            checkpoints: Checkpoints { last_committed: recorded.last_committed, recent: recorded.checkpoints },
            restarts: Restarts { count: self.metrics.restarts().get(), recent: recorded.restarts },
            dead_letters: self.metrics.dead_letter_records().get(),
            progress: progress::current(),
            group,
        }
    }

    /// The graph, with each source's partitions (those `owned`, for a scaled-out
    /// process) and each operator's subtasks as the metrics read now.
    fn graph(&self, owned: Option<&BTreeSet<i32>>) -> Graph {
        let partitions = self.metrics.partitions();
        let sources = self.job.sources.iter().map(|source| SourceNode {
            name: source.name.clone(),
            topic: source.topic.clone(),
            table: source.table,
            partitions: partitions
                .iter()
                .filter(|p| p.topic == source.topic && owned.is_none_or(|owned| owned.contains(&p.partition)))
                .map(|p| PartitionStatus { partition: p.partition, lag: p.lag, watermark_ms: p.watermark })
                .collect(),
        });
        let sinks = self.job.sinks.iter().map(|sink| SinkNode { name: sink.name.clone(), topic: sink.topic.clone(), from: sink.from.clone() });
        Graph { sources: sources.collect(), operators: self.operators(), sinks: sinks.collect(), edges: self.edges() }
    }

    fn operators(&self) -> Vec<OperatorNode> {
        let subtasks = self.metrics.subtasks();
        let rates = self.rates.per_second();
        let sum = |rates: &[Option<f64>]| rates.iter().copied().sum::<Option<f64>>();
        self.job.operators.iter().zip(&self.plugins).map(|(operator, (plugin, world))| {
            let subtasks: Vec<SubtaskStatus> = subtasks
                .iter()
                .filter(|s| s.operator == operator.name)
                .map(|s| {
                    let rate = rates.get(&(s.operator.clone(), s.subtask)).copied();
                    SubtaskStatus {
                        subtask: s.subtask,
                        records_in: s.records_in,
                        records_out: s.records_out,
                        records_in_per_s: rate.map(|r| r.0),
                        records_out_per_s: rate.map(|r| r.1),
                        watermark_ms: s.watermark,
                        log_dropped_lines: s.log_dropped_lines,
                        log_dropped_bytes: s.log_dropped_bytes,
                    }
                })
                .collect();
            let ins: Vec<Option<f64>> = subtasks.iter().map(|s| s.records_in_per_s).collect();
            let outs: Vec<Option<f64>> = subtasks.iter().map(|s| s.records_out_per_s).collect();
            OperatorNode {
                name: operator.name.clone(),
                plugin: plugin.clone(),
                world: world.clone(),
                parallelism: self.job.parallelism,
                key_by: operator.key_by,
                inputs: operator.inputs.clone(),
                outputs: operator.outputs.clone(),
                records_in_per_s: if subtasks.is_empty() { None } else { sum(&ins) },
                records_out_per_s: if subtasks.is_empty() { None } else { sum(&outs) },
                subtasks,
            }
        })
        .collect()
    }

    /// Every edge: each operator input and each sink's `from`, named by the nodes' names.
    fn edges(&self) -> Vec<Edge> {
        let job = &self.job;
        let edge = |name: &str, to: &str| {
            let port = job.port(name).expect("edges checked at load");
            let (from, output) = match port {
                Port::Source(index) => (job.sources[index].name.clone(), None),
                Port::Operator { stage, output } => {
                    let operator = &job.operators[stage];
                    (operator.name.clone(), (operator.outputs.len() > 1).then(|| operator.outputs[output].clone()))
                }
            };
            Edge { from, output, to: to.to_owned() }
        };
        let into_operators = job.operators.iter().flat_map(|op| op.inputs.iter().map(|input| edge(input, &op.name)).collect::<Vec<_>>());
        let into_sinks = job.sinks.iter().flat_map(|sink| sink.from.iter().map(|from| edge(from, &sink.name)).collect::<Vec<_>>());
        into_operators.chain(into_sinks).collect()
    }
}
