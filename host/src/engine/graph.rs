//! An attempt's second half: the task graph. Sources, operator subtasks and the sink
//! each run on a named thread of one scope, joined by bounded channels; the coordinator
//! runs on the calling thread until the attempt stops or fails.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};

use crate::checkpoint::layout;
use crate::checkpoint::store::CheckpointStore;
use crate::dataflow::{Event, Fanout, InputTopics, KeyGroups, Message, Pace, Reader, Shard, TaskFailure};
use crate::job::{self, Input, Port};
use crate::operator::OperatorInstance;
use crate::sink::{self, SinkTask};
use crate::source::{self, Bootstrap, Control, SourceTask};
use crate::state::changelog;
use crate::state::changelog::writer::{ChangelogWriter, StateOut};

use super::{Engine, Records};
use super::coordinator::{Coordinator, Outcome};
use super::fault::{self, Step};
use super::folder::{self, Fold, FolderEnds, Handover};
use super::operator_task::{EarlyRounds, InputChannel, OperatorTask};
use super::recover::{self, Recovered, SourceStart};
use super::watchdog::Watchdog;

/// Batches a channel holds: bounds memory and makes a slow stage push back; few, so a
/// barrier waits behind few records (16 let it wait 100-250 ms at 1 M keys).
const CHANNEL_BATCHES: usize = 4;
/// Control messages (barriers, stop) a source task may have queued.
const CONTROL_MESSAGES: usize = 4;
/// The shortest time a checkpoint may take before it fails the attempt.
const MIN_CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the task graph of one attempt until the coordinator returns.
/// `stop` asks for a final checkpoint and the end of the attempt; `abandon`, for its end
/// without one.
pub(super) fn execute(
    engine: &Engine,
    store: &CheckpointStore,
    recovered: Recovered,
    records: &Records,
    stop: &Arc<AtomicBool>,
    abandon: Option<&Arc<AtomicBool>>,
) -> Result<Outcome, TaskFailure> {
    let Recovered { sink, sources, operators, next, key_groups, placement, positions, shard } = recovered;
    let scaled_out = shard.is_some();
    let job = &engine.job;
    let parallelism = job.parallelism as usize;
    let stages = job.operators.len();
    let tasks = sources.len() + parallelism * stages;
    let (events_tx, events_rx) = bounded::<Event>(4 * (tasks + parallelism) + 16);
    let (committed_tx, committed_rx) = bounded::<u64>(1);
    let changelog_topic = changelog::topic(job);
    let inputs = recover::input_topics(job);
    // The stream sources wait until every subtask that reads a table has loaded it.
    let table_readers = (0..stages).filter(|&stage| job.reads_table(stage)).count();
    let bootstrap = Arc::new(Bootstrap::new(table_readers * parallelism));
    let pace = Arc::new(Pace::new(sources.len()));
    // The store holds the state of every checkpoint before the attempt's first.
    let folded = AtomicU64::new(next.saturating_sub(1));
    // The last checkpoint committed: its successor's transaction is open.
    let committed = AtomicU64::new(next.saturating_sub(1));

    let outcome = std::thread::scope(|scope| {
        // Owned by this closure, so an early return drops every channel end and no
        // spawned task blocks for ever.
        let mut wiring = wire(job, key_groups);
        let mut handles = Vec::new();
        let routing = Routing { key_groups, shard: shard.as_ref() };
        let starts = Sources { starts: sources, routing, bootstrap: &bootstrap, pace: &pace };
        let control = spawn_sources(engine, scope, starts, &mut wiring, &events_tx, &mut handles)?;
        let state_out = StateOut {
            sink: &sink,
            changelog_topic: &changelog_topic,
            placement,
            store,
            folded: &folded,
            committed: &committed,
            packed: job.producer.delivery == job::Delivery::ExactlyOnce,
            in_base: |n| fault::point(Step::InBase, n),
        };
        let operators = Operators { instances: operators, routing, records, state_out, next, inputs: &inputs, bootstrap: &bootstrap, pace: &pace };
        spawn_operators(engine, scope, operators, &mut wiring, &events_tx, &mut handles);
        let sink_task = SinkTask {
            sink: &sink,
            source_topics: inputs.clone(),
            inputs: std::mem::take(&mut wiring.sink_inputs),
            events: events_tx.clone(),
            committed: committed_rx,
        };
        let topics: Vec<&str> = job.sinks.iter().map(|sink| sink.topic.as_str()).collect();
        let what = format!("the sink task (topics {})", topics.join(", "));
        handles.push(spawn_task(scope, "sink".to_string(), what, events_tx.clone(), move || sink_task.run()));
        let (folds_tx, folds_rx) = bounded::<Fold>(1);
        // At-least-once checkpoints wait for the previous fold (Coordinator::await_fold).
        let (folded_tx, folded_rx) = match job.producer.delivery {
            job::Delivery::AtLeastOnce => {
                let (tx, rx) = bounded::<u64>(1);
                (Some(tx), Some(rx))
            }
            job::Delivery::ExactlyOnce => (None, None),
        };
        let what = "the state folder".to_string();
        let ends = FolderEnds { store, committed: folds_rx, folded: folded_tx, through: &folded };
        handles.push(spawn_task(scope, "fold".to_string(), what, events_tx.clone(), move || folder::run(ends)));
        drop(events_tx);

        let mut coordinator = Coordinator {
            store,
            sink: &sink,
            inputs: &inputs,
            changelog_topic: &changelog_topic,
            sources: control.clone(),
            events: events_rx,
            committed: committed_tx,
            committed_through: &committed,
            pace: (job.producer.delivery == job::Delivery::ExactlyOnce).then_some(&*pace),
            folds: Handover::new(folds_tx, folded_rx.is_some()),
            folded: folded_rx,
            fold_in_flight: None,
            changelog_ends: changelog::Ends::new(job)?,
            placement,
            positions,
            expected_states: tasks,
            interval: job.checkpoint_interval(),
            timeout: job.checkpoint_interval().max(MIN_CHECKPOINT_TIMEOUT),
            meta: layout::encode_shape(&recover::shape(job, key_groups)),
            next,
            stop: Arc::clone(stop),
            abandon: abandon.cloned(),
            scaled_out: shard.is_some(),
            keeps_state: job.keeps_state(),
            metrics: &engine.options.metrics,
            watchdog: Watchdog::start(),
        };
        let outcome = coordinator.run();
        // Tear down: sources stop, channel closures end everything downstream.
        for source in &control {
            let _ = source.try_send(Control::Stop);
        }
        drop(control);
        let root = first_failure(&coordinator.into_events());
        for handle in handles {
            let _ = handle.join();
        }
        match outcome {
            Err(TaskFailure::Stopped) if !abandon.is_some_and(|a| a.load(Ordering::Relaxed)) => Err(root.unwrap_or(TaskFailure::Stopped)),
            outcome => outcome,
        }
    });
    // After a final commit the open transaction holds nothing. A scaled-out process that
    // failed aborts what it holds too: the next owner of its partitions waits for it.
    let failed_shard = scaled_out && matches!(&outcome, Err(failure) if !matches!(failure, TaskFailure::Fenced(_)));
    if matches!(outcome, Ok(Outcome::Stopped)) || failed_shard {
        let what = "aborting the open transaction".to_string();
        Watchdog::start().guard(what, sink::COMMIT_BOUND, || sink.abort());
    }
    outcome
}

/// What the source tasks of an attempt start from.
struct Sources<'a> {
    /// One per task: `parallelism` per job source.
    starts: Vec<SourceStart>,
    routing: Routing<'a>,
    /// The gate the stream sources wait at until every table is loaded.
    bootstrap: &'a Arc<Bootstrap>,
    pace: &'a Arc<Pace>,
}

/// The source tasks; returns their control channels.
fn spawn_sources<'scope>(
    engine: &'scope Engine,
    scope: &'scope Scope<'scope, '_>,
    sources: Sources<'_>,
    wiring: &mut Wiring,
    events: &Sender<Event>,
    handles: &mut Vec<ScopedJoinHandle<'scope, ()>>,
) -> Result<Vec<Sender<Control>>, TaskFailure> {
    let Sources { starts, routing, bootstrap, pace } = sources;
    let job = &engine.job;
    let parallelism = job.parallelism as usize;
    let mut control = Vec::with_capacity(starts.len());
    for (index, SourceStart { source, partitions }) in starts.into_iter().enumerate() {
        let spec = &job.sources[source];
        let (control_tx, control_rx) = bounded(CONTROL_MESSAGES);
        control.push(control_tx);
        let consumer = recover::consumer(job)?;
        let port = Port::Source(source);
        let output = Fanout::new(wiring.take_outputs(port, index % parallelism));
        let task = SourceTask {
            index,
            source,
            topic: spec.topic.clone(),
            fetcher: source::Fetcher::new(consumer, &spec.topic, partitions.keys().copied())
                .map_err(|e| TaskFailure::Kafka(format!("source {index} of topic {}: {e}", spec.topic)))?,
            partitions,
            max_out_of_orderness_ms: spec.max_out_of_orderness_ms as i64,
            key_by: output.is_keyed().then_some(routing.key_groups),
            output,
            table: spec.table,
            bootstrap: Arc::clone(bootstrap),
            pace: Arc::clone(pace),
            shard: routing.shard.cloned(),
            dead_letters: job.producer.dead_letter_topic.as_ref().and_then(|_| first_operator_reading(job, port)),
            control: control_rx,
            events: events.clone(),
            metrics: engine.options.metrics.clone(),
            idle_timeout: spec.idle_timeout(),
            discovery: routing.shard.is_none().then(|| source::Discovery::new(parallelism, index % parallelism, Instant::now())),
        };
        let what = format!("source task {index} (topic {})", spec.topic);
        handles.push(spawn_task(scope, format!("source-{index}"), what, events.clone(), move || task.run()));
    }
    Ok(control)
}

/// The name of the first operator that reads `port`, if one does.
fn first_operator_reading(job: &job::Job, port: Port) -> Option<String> {
    job.readers_of(port).into_iter().find_map(|reader| match reader {
        Input::Operator { stage, .. } => Some(job.operators[stage].name.clone()),
        Input::Sink(_) => None,
    })
}

/// Where keyed records and state go: the job's key groups and, in a process of a
/// scaled-out job, the partitions (and so the groups) this process owns.
#[derive(Clone, Copy)]
struct Routing<'a> {
    key_groups: KeyGroups,
    shard: Option<&'a Shard>,
}

/// What the operator subtasks of an attempt start from.
struct Operators<'a> {
    /// `instances[stage][subtask]`: restored, with the watermark it had reached.
    instances: Vec<Vec<(OperatorInstance, i64)>>,
    routing: Routing<'a>,
    records: &'a Records,
    state_out: StateOut<'a>,
    /// The attempt's first checkpoint.
    next: u64,
    inputs: &'a InputTopics,
    bootstrap: &'a Arc<Bootstrap>,
    pace: &'a Arc<Pace>,
}

/// Every subtask of every operator, with the channels `wiring` made for it.
fn spawn_operators<'scope>(
    engine: &'scope Engine,
    scope: &'scope Scope<'scope, '_>,
    operators: Operators<'scope>,
    wiring: &mut Wiring,
    events: &Sender<Event>,
    handles: &mut Vec<ScopedJoinHandle<'scope, ()>>,
) {
    let job = &engine.job;
    let suspects = Arc::new(operators.records.suspects.clone());
    let poisoned = Arc::new(operators.records.poisoned.clone());
    let key_groups = operators.routing.key_groups;
    for (stage, subtasks) in operators.instances.into_iter().enumerate() {
        let spec = &job.operators[stage];
        for (subtask, (instance, watermark)) in subtasks.into_iter().enumerate() {
            let outputs = (0..spec.outputs.len())
                .map(|output| Fanout::new(wiring.take_outputs(Port::Operator { stage, output }, subtask)))
                .collect();
            let task = OperatorTask {
                name: spec.name.clone(),
                stage: stage as u32,
                subtask: subtask as u32,
                instance,
                watermark,
                bootstrap: job.reads_table(stage).then(|| Arc::clone(operators.bootstrap)),
                pace: Arc::clone(operators.pace),
                inputs: std::mem::take(&mut wiring.operator_inputs[stage][subtask]),
                outputs,
                key_groups,
                owned: spec.key_by.then(|| key_groups.range(subtask as u32, job.parallelism)),
                shard: operators.routing.shard.cloned(),
                events: events.clone(),
                suspects: Arc::clone(&suspects),
                poisoned: Arc::clone(&poisoned),
                changelog: ChangelogWriter::new(operators.state_out, stage as u32, key_groups.range(subtask as u32, job.parallelism)),
                early: EarlyRounds::new(job.checkpoint_interval(), 2 * spec.limits().round_bytes() as u64),
                barrier: operators.next.saturating_sub(1),
                dead_letters: job.producer.dead_letter_topic.is_some(),
                source_topics: operators.inputs.clone(),
                metrics: engine.options.metrics.operator(&spec.name, subtask as u32),
            };
            let name = format!("{}-{subtask}", spec.name);
            let what = format!(
                "operator `{}` subtask {subtask} (plugin {})",
                spec.name,
                engine.plugins[stage].path().display()
            );
            handles.push(spawn_task(scope, name, what, events.clone(), move || task.run()));
        }
    }
}

/// Every channel of an attempt's graph (DESIGN.md §8), by the ends they join. An edge
/// into an operator read by key connects every upstream task to every subtask; any
/// other edge connects upstream task i to subtask i, or every upstream task to the sink.
struct Wiring {
    /// `outputs[port][i]`: the readers of `port` as upstream task i sends to them.
    outputs: BTreeMap<Port, Vec<Vec<Reader>>>,
    /// `operator_inputs[stage][subtask]`: every channel into that subtask.
    operator_inputs: Vec<Vec<Vec<InputChannel>>>,
    /// Every channel into the sink task, with its sink's topic.
    sink_inputs: Vec<(Receiver<Message>, String)>,
}

impl Wiring {
    fn take_outputs(&mut self, port: Port, task: usize) -> Vec<Reader> {
        self.outputs.get_mut(&port).map(|tasks| std::mem::take(&mut tasks[task])).unwrap_or_default()
    }
}

fn wire(job: &job::Job, key_groups: KeyGroups) -> Wiring {
    let parallelism = job.parallelism as usize;
    let mut wiring = Wiring {
        outputs: BTreeMap::new(),
        operator_inputs: (0..job.operators.len()).map(|_| (0..parallelism).map(|_| Vec::new()).collect()).collect(),
        sink_inputs: Vec::new(),
    };
    let sources = (0..job.sources.len()).map(Port::Source);
    let outputs = job.operators.iter().enumerate().flat_map(|(stage, operator)| {
        (0..operator.outputs.len()).map(move |output| Port::Operator { stage, output })
    });
    for port in sources.chain(outputs) {
        let table = job.is_table(port);
        let mut upstream: Vec<Vec<Reader>> = (0..parallelism).map(|_| Vec::new()).collect();
        for reader in job.readers_of(port) {
            match reader {
                Input::Operator { stage, input } if job.operators[stage].key_by => {
                    for readers in &mut upstream {
                        let mut subtasks = Vec::with_capacity(parallelism);
                        for into in &mut wiring.operator_inputs[stage] {
                            let (tx, rx) = bounded(CHANNEL_BATCHES);
                            subtasks.push(tx);
                            into.push(InputChannel { channel: rx, input: input as u32, table });
                        }
                        readers.push(Reader::Keyed { subtasks, key_groups });
                    }
                }
                Input::Operator { stage, input } => {
                    for (readers, into) in upstream.iter_mut().zip(&mut wiring.operator_inputs[stage]) {
                        let (tx, rx) = bounded(CHANNEL_BATCHES);
                        readers.push(Reader::Forward(tx));
                        into.push(InputChannel { channel: rx, input: input as u32, table });
                    }
                }
                Input::Sink(index) => {
                    for readers in &mut upstream {
                        let (tx, rx) = bounded(CHANNEL_BATCHES);
                        readers.push(Reader::Forward(tx));
                        wiring.sink_inputs.push((rx, job.sinks[index].topic.clone()));
                    }
                }
            }
        }
        wiring.outputs.insert(port, upstream);
    }
    wiring
}

/// The first failure a task reports while the attempt's tasks end, waiting until
/// every task has ended. A failing task's channels close before its failure
/// arrives, so the coordinator may see only the closed channel ("stopped"): this
/// is the cause, which the log names and the restart acts on (its suspects).
fn first_failure(events: &Receiver<Event>) -> Option<TaskFailure> {
    let mut first = None;
    // Every task holds a sender: the channel disconnects once all have ended.
    while let Ok(event) = events.recv() {
        if let (None, Event::Failed(failure)) = (&first, event) {
            first = Some(failure);
        }
    }
    first
}

/// Runs a task on its own named thread. Whatever ends it, an error or a panic, reaches
/// the coordinator as a failure naming the task (`what`), so the attempt ends at once.
fn spawn_task<'scope, F>(
    scope: &'scope Scope<'scope, '_>,
    name: String,
    what: String,
    events: Sender<Event>,
    body: F,
) -> ScopedJoinHandle<'scope, ()>
where
    F: FnOnce() -> Result<(), TaskFailure> + Send + 'scope,
{
    std::thread::Builder::new()
        .name(name)
        .spawn_scoped(scope, move || {
            // Unwind safety: a panicked task's state is dropped with the attempt, never reused.
            let failure = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                Ok(Ok(())) | Ok(Err(TaskFailure::Stopped)) => return,
                Ok(Err(failure)) => failure,
                Err(payload) => TaskFailure::Panicked { task: what, message: panic_message(payload.as_ref()) },
            };
            let _ = events.send(Event::Failed(failure));
        })
        .expect("spawning a task thread")
}

pub(super) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text.to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    }
}
