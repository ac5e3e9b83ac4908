//! One operator subtask's guest: its own `Store` under a memory cap, every call
//! under a CPU deadline. A crash (trap, deadline, memory) poisons the Store, so it
//! is dropped and a fresh instance is stamped from the plugin's pre-instantiation.

use std::time::{Duration, Instant};

use wasmtime::{Store, Trap, UpdateDeadline};

use super::bindings::{Refused, WireEmitted, emitted_from_wire};
use super::contract::World;
use super::error::{self, Call, OperatorError, OperatorId};
use super::exports::Exports;
use super::plugin::Plugin;
use super::ports::{Emitted, Ports};
use super::sandbox::HostState;
use super::stdio::{self, LogGate, LogLimits};
use crate::batch::{Batch, BatchError, OutputBound};
use crate::chunk::{CHUNK_BYTES, Round, StateChanges, StateChunk};
use crate::metrics::PluginLogMetrics;

/// What one operator instance may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Total linear memory and table space of the instance.
    pub memory_bytes: usize,
    /// Deadline of every call (and of instantiation plus `init`), enforced with
    /// the runtime's epoch tick as granularity, and put off by the grace a call
    /// earns for the memory it holds and grows (`sandbox::GRACE_PER_MIB_HELD`,
    /// `sandbox::GRACE_PER_MIB_GROWN`).
    pub call_timeout: Duration,
    /// Most records one call may return.
    pub max_output_records: usize,
    /// Most bytes of keys, values and headers one call may return, counted per
    /// record (records may share bytes in the guest, never on the host).
    pub max_output_bytes: u64,
    /// How much of the guest's log and stdio reaches the host log.
    pub log: LogLimits,
    /// How it is handed records without a value.
    pub tombstones: Tombstones,
}

/// How an operator is handed input records without a value (Kafka's null value, a
/// tombstone). Whichever, it may emit such records itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tombstones {
    /// With an empty value, which every plugin reads.
    #[default]
    AsEmpty,
    /// With value offset [`crate::batch::NO_VALUE`] and length 0, for a plugin that
    /// tells them from empty values (the job file's `tombstones = true`).
    Marked,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            call_timeout: Duration::from_secs(1),
            max_output_records: 1_000_000,
            max_output_bytes: 64 << 20,
            log: LogLimits::default(),
            tombstones: Tombstones::AsEmpty,
        }
    }
}

impl Limits {
    fn output_bound(&self) -> OutputBound {
        OutputBound {
            max_records: self.max_output_records,
            max_bytes: self.max_output_bytes,
        }
    }

    /// Bytes the guest may hand the host in one call (wasmtime's hostcall fuel,
    /// 128 MiB unless set). An output lives in the guest's memory, and lifted
    /// it takes up to about twice that on the host (a header's host form is
    /// 56 bytes for 20 in the guest), so the fuel follows the memory cap.
    pub fn hostcall_bytes(&self) -> usize {
        self.memory_bytes.saturating_mul(2)
    }

    /// The most bytes one snapshot round may hand over, counting
    /// `chunk::ENTRY_OVERHEAD_BYTES` per entry: twice the memory limit, since the
    /// guest holds what changed (a round that never ends stops there). Sorting the
    /// round copies its keys and values once into key order, so the host holds up
    /// to twice its keys and values for that moment.
    pub fn round_bytes(&self) -> usize {
        self.memory_bytes.saturating_mul(2)
    }
}

/// A running operator: one guest instance plus what it takes to replace it.
/// `Send`, not `Sync`: each subtask thread owns its instance.
pub struct OperatorInstance {
    plugin: Plugin,
    limits: Limits,
    config: Vec<(String, String)>,
    /// Handed to every `init`, the first and those after a crash.
    ports: Ports,
    id: OperatorId,
    /// `limits.call_timeout` in epoch ticks, computed once: every call sets it.
    deadline_ticks: u64,
    /// The log rate limit, shared by every guest of this label ([`Plugin::log_gate`]).
    log: LogGate,
    /// `None` only after a crash whose replacement failed; the next call retries.
    live: Option<Live>,
    /// Whether it was told it is handed tombstones as empty values.
    told_of_tombstones: bool,
}

/// What its gate dropped is said when the instance goes, though the gate lives on.
impl Drop for OperatorInstance {
    fn drop(&mut self) {
        self.log.summarise();
    }
}

// The engine moves each instance to its subtask's thread and shares plugins.
const _: () = {
    const fn send<T: Send>() {}
    const fn send_sync<T: Send + Sync>() {}
    send::<OperatorInstance>();
    send_sync::<Plugin>();
};

struct Live {
    store: Store<HostState>,
    exports: Exports,
}

/// What instantiating a plugin costs, reported by `weir check`.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub instantiate_time: Duration,
    /// Linear memory the fresh instance holds before any call.
    pub memory_bytes: usize,
}

/// How a call ended when it did not return: the Store is poisoned in every case.
enum Crash {
    Trap {
        trap: String,
        guest_output: Option<String>,
    },
    /// `grace`: what the call was given beyond its deadline for the memory it held and grew.
    Deadline { grace: Duration },
    Memory {
        requested_bytes: usize,
    },
    /// The guest handed the host more bytes than its hostcall budget.
    HostcallData,
}

impl Plugin {
    /// Instantiates the plugin once under `limits` without calling `init`
    /// (which may need a config), to prove it can start here.
    pub fn probe(&self, limits: Limits, label: &str) -> Result<Probe, OperatorError> {
        let id = OperatorId {
            label: label.to_owned(),
            plugin: self.path().to_owned(),
        };
        let started = Instant::now();
        let log = LogGate::new(label.into(), limits.log);
        let live = instantiate(self, limits, &log, &id)?;
        Ok(Probe {
            instantiate_time: started.elapsed(),
            memory_bytes: live.store.data().memory_in_use(),
        })
    }
}

impl OperatorInstance {
    /// Instantiates `plugin` and calls `init(config)`, as an operator with one input
    /// and one output ([`Ports::single`]). `label` names the instance in logs and
    /// errors (e.g. `"enrich[3]"`).
    pub fn new(
        plugin: &Plugin,
        limits: Limits,
        config: Vec<(String, String)>,
        label: String,
    ) -> Result<Self, OperatorError> {
        Self::with_ports(plugin, limits, config, Ports::single(), label)
    }

    /// Instantiates `plugin` as an operator with the inputs and outputs `ports` names
    /// and calls `init`: a weir:operator@0.3 plugin's with the names, a 0.2 plugin's
    /// with the config alone. A 0.2 plugin cannot tell inputs apart: given other
    /// ports than one input and one output it is refused, as a config `init`
    /// refuses is ([`OperatorError::Init`]).
    pub fn with_ports(
        plugin: &Plugin,
        limits: Limits,
        config: Vec<(String, String)>,
        ports: Ports,
        label: String,
    ) -> Result<Self, OperatorError> {
        let id = OperatorId {
            label: label.clone(),
            plugin: plugin.path().to_owned(),
        };
        let world = plugin.info().world;
        let problem = ports.problem().or_else(|| {
            (!world.has_ports() && !ports.is_single()).then(|| {
                format!(
                    "the plugin targets {world}, whose operators have one input and one output, \
                     but this operator has {}; rebuild it against {} (wit/0.3) to read \
                     several inputs or write several outputs",
                    ports.describe(),
                    World::NEWEST
                )
            })
        });
        if let Some(detail) = problem {
            return Err(OperatorError::Init { id, detail });
        }
        let mut instance = Self {
            plugin: plugin.clone(),
            limits,
            config,
            ports,
            id,
            deadline_ticks: plugin.runtime().deadline_ticks(limits.call_timeout),
            log: plugin.log_gate(&label, limits.log),
            live: None,
            told_of_tombstones: false,
        };
        instance.live = Some(instance.start()?);
        Ok(instance)
    }

    /// The inputs and outputs this instance was started with.
    pub fn ports(&self) -> &Ports {
        &self.ports
    }

    /// The world of its plugin.
    pub fn world(&self) -> World {
        self.plugin.info().world
    }

    /// Hands the guest a batch that arrived on input `input` (an index into
    /// [`Ports::inputs`]); returns the records it emits now, each with its output.
    /// Records and outputs are checked as they cross: records within the limits,
    /// [`OperatorError::InvalidOutputs`] for an `outputs` list that does not route
    /// them. A 0.2 plugin's records all go to output 0.
    ///
    /// # Panics
    /// If `input` is not an index into [`Ports::inputs`]: the caller's bug.
    pub fn process_input(&mut self, input: u32, batch: &Batch) -> Result<Emitted, OperatorError> {
        assert!(
            (input as usize) < self.ports.inputs.len(),
            "{}: input {input} of {}",
            self.id,
            self.ports.describe()
        );
        let tombstones = self.limits.tombstones;
        if tombstones == Tombstones::AsEmpty && batch.tombstones() > 0 && !self.told_of_tombstones {
            self.told_of_tombstones = true;
            tracing::info!(
                "{} is handed records without a value (tombstones) as empty values, so what it passes on of \
                 them is written as empty values, not deletions; set tombstones = true for it if it reads \
                 the mark (logged once per instance)",
                self.id
            );
        }
        let output = self.call(Call::Process, |live| {
            live.exports.process(&mut live.store, input, batch, tombstones)
        })?;
        self.emitted(Call::Process, output)
    }

    /// Event time reached `watermark`; returns the records this completes, each with
    /// its output, checked as [`Self::process_input`]'s are.
    pub fn on_watermark_emitted(&mut self, watermark: i64) -> Result<Emitted, OperatorError> {
        let output = self.call(Call::OnWatermark, |live| {
            live.exports.on_watermark(&mut live.store, watermark)
        })?;
        self.emitted(Call::OnWatermark, output)
    }

    /// Hands the guest a batch on input 0; returns the records it emits now, of every
    /// output, in order (for an operator with one output: its records).
    pub fn process(&mut self, batch: &Batch) -> Result<Batch, OperatorError> {
        Ok(self.process_input(0, batch)?.into_batch())
    }

    /// Event time reached `watermark`; returns the records this completes, of every
    /// output, in order.
    pub fn on_watermark(&mut self, watermark: i64) -> Result<Batch, OperatorError> {
        Ok(self.on_watermark_emitted(watermark)?.into_batch())
    }

    /// What a call emitted, checked against the limits and the outputs.
    fn emitted(&self, call: Call, output: WireEmitted) -> Result<Emitted, OperatorError> {
        emitted_from_wire(output, self.limits.output_bound(), self.ports.outputs.len()).map_err(
            |refused| match refused {
                Refused::Batch(problem) => self.output_error(call, problem),
                Refused::Outputs(problem) => OperatorError::InvalidOutputs {
                    id: self.id.clone(),
                    call,
                    problem,
                },
            },
        )
    }

    /// The next chunk of the keys whose state changed since the previous round, within
    /// `max_bytes` of data (at most [`CHUNK_BYTES`]: more is asked as that) unless one
    /// entry alone is bigger; an empty chunk ends the round. A chunk that breaks the
    /// contract is an error, as a malformed batch is; one too big to be valid is
    /// refused before it is copied out of the guest.
    pub fn snapshot(&mut self, max_bytes: u32) -> Result<StateChunk, OperatorError> {
        let max_bytes = max_bytes.min(CHUNK_BYTES);
        let chunk = self.call(Call::Snapshot, |live| live.exports.snapshot(&mut live.store, max_bytes))?;
        chunk
            .into_chunk(max_bytes)
            .map_err(|problem| self.invalid_state(problem.to_string()))
    }

    /// One whole snapshot round of stage `stage`, in chunks of [`CHUNK_BYTES`], checked
    /// as a job checks it (`chunk::Round`): each key in the key group `group_of` gives
    /// it (or refused with the reason it returns), once, within one changelog record,
    /// and the round within [`Limits::round_bytes`].
    pub fn snapshot_round(
        &mut self,
        stage: u32,
        mut group_of: impl FnMut(&[u8]) -> Result<u32, String>,
    ) -> Result<StateChanges, OperatorError> {
        let mut round = Round::new(stage, self.limits.round_bytes());
        loop {
            let chunk = self.snapshot(CHUNK_BYTES)?;
            if chunk.is_empty() {
                return round.finish().map_err(|problem| self.invalid_state(problem.to_string()));
            }
            round.add(chunk, &mut group_of).map_err(|problem| self.invalid_state(problem.to_string()))?;
        }
    }

    /// The error for state changes that break the contract.
    fn invalid_state(&self, detail: String) -> OperatorError {
        OperatorError::InvalidState { id: self.id.clone(), detail }
    }

    /// Adds a chunk of checkpointed entries to this freshly started instance.
    pub fn restore(&mut self, chunk: &StateChunk) -> Result<(), OperatorError> {
        self.call(Call::Restore, |live| live.exports.restore(&mut live.store, chunk))
    }

    /// Ends a restore: the instance had reached event time `watermark` at the checkpoint.
    pub fn restored(&mut self, watermark: i64) -> Result<(), OperatorError> {
        self.call(Call::Restored, |live| {
            live.exports.restored(&mut live.store, watermark)
        })
    }

    /// Counts the guest output the log rate limit drops in `metrics` from now on.
    pub fn count_log_drops(&mut self, metrics: PluginLogMetrics) {
        self.log.count_drops(metrics);
    }

    /// Lines and bytes of guest output dropped by the log rate limit so far.
    pub fn log_dropped(&self) -> (u64, u64) {
        self.log.dropped()
    }

    /// Linear memory the guest holds now (0 if it is between a crash and its replacement).
    pub fn memory_in_use(&self) -> usize {
        self.live
            .as_ref()
            .map_or(0, |live| live.store.data().memory_in_use())
    }

    /// Runs one export under the deadline and sorts out how it ended.
    fn call<R>(
        &mut self,
        call: Call,
        f: impl FnOnce(&mut Live) -> wasmtime::Result<Result<R, String>>,
    ) -> Result<R, OperatorError> {
        if self.live.is_none() {
            self.live = Some(self.start()?);
        }
        let live = self.live.as_mut().expect("an instance was just started");
        live.store.data_mut().begin_call();
        live.store.set_epoch_deadline(self.deadline_ticks);
        match f(live) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(message)) => Err(OperatorError::Guest {
                id: self.id.clone(),
                call,
                message: stdio::cut(&message).to_owned(),
            }),
            Err(err) => {
                let crash = diagnose(&err, live.store.data());
                let error = self.crash_error(call, crash);
                tracing::debug!("{error}");
                self.replace();
                Err(error)
            }
        }
    }

    /// An output the host refuses: it breaks the contract or the limits. The
    /// guest did not crash, but the call failed, so the engine treats its input
    /// as it treats a crashing one.
    fn output_error(&self, call: Call, problem: BatchError) -> OperatorError {
        let id = self.id.clone();
        match problem {
            BatchError::TooManyRecords { .. } | BatchError::TooManyBytes { .. } => {
                OperatorError::OutputTooLarge { id, call, problem }
            }
            problem => OperatorError::InvalidOutput { id, call, problem },
        }
    }

    fn crash_error(&self, call: Call, crash: Crash) -> OperatorError {
        let id = self.id.clone();
        match crash {
            Crash::Trap { trap, guest_output } => OperatorError::Trap {
                id,
                call,
                trap,
                guest_output,
            },
            Crash::Deadline { grace } => OperatorError::DeadlineExceeded {
                id,
                call,
                timeout: self.limits.call_timeout,
                grace,
            },
            Crash::Memory { requested_bytes } => OperatorError::MemoryLimitExceeded {
                id,
                call,
                limit_bytes: self.limits.memory_bytes,
                requested_bytes,
            },
            Crash::HostcallData => OperatorError::HostcallDataExceeded {
                id,
                call,
                limit_bytes: self.limits.hostcall_bytes(),
                memory_bytes: self.limits.memory_bytes,
            },
        }
    }

    /// Drops the poisoned Store and starts over from the pre-instantiation. If
    /// that fails too, the next call retries and reports why.
    fn replace(&mut self) {
        self.live = None;
        match self.start() {
            Ok(live) => self.live = Some(live),
            Err(err) => {
                tracing::error!(operator = %self.id, "cannot replace the crashed instance: {err}")
            }
        }
    }

    /// A fresh instance with `init` done, given the config and the ports.
    fn start(&self) -> Result<Live, OperatorError> {
        let mut live = instantiate(&self.plugin, self.limits, &self.log, &self.id)?;
        let config: Vec<(&str, &str)> = self
            .config
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        live.store.data_mut().begin_call();
        live.store.set_epoch_deadline(self.deadline_ticks);
        let detail = match live.exports.init(&mut live.store, &config, &self.ports) {
            Ok(Ok(())) => return Ok(live),
            Ok(Err(message)) => format!("it returned an error: {}", stdio::cut(&message)),
            Err(err) => describe(diagnose(&err, live.store.data()), self.limits),
        };
        Err(OperatorError::Init {
            id: self.id.clone(),
            detail,
        })
    }
}

/// A new Store under `limits`, with the plugin instantiated in it (no `init`).
fn instantiate(
    plugin: &Plugin,
    limits: Limits,
    log: &LogGate,
    id: &OperatorId,
) -> Result<Live, OperatorError> {
    let runtime = plugin.runtime();
    let mut store = Store::new(runtime.engine(), HostState::new(log.clone(), limits.memory_bytes));
    store.limiter(HostState::limiter);
    store.set_hostcall_fuel(limits.hostcall_bytes());
    store.set_epoch_deadline(runtime.deadline_ticks(limits.call_timeout));
    let ticks = runtime.clone();
    store.epoch_deadline_callback(move |mut store| {
        let grace = store.data_mut().claim_grace();
        Ok(match grace.is_zero() {
            true => UpdateDeadline::Interrupt,
            false => UpdateDeadline::Continue(ticks.deadline_ticks(grace)),
        })
    });
    let instantiated = plugin
        .pre()
        .instance_pre()
        .instantiate(&mut store)
        .and_then(|instance| Exports::new(plugin.pre(), &mut store, &instance));
    match instantiated {
        Ok(exports) => Ok(Live { store, exports }),
        Err(err) => Err(OperatorError::Instantiate {
            id: id.clone(),
            detail: describe(diagnose(&err, store.data()), limits),
        }),
    }
}

/// Sorts a failed call into what the user can act on. A refused memory growth
/// wins: the trap that follows (usually `unreachable` after a failed
/// allocation) is its consequence.
fn diagnose(err: &wasmtime::Error, state: &HostState) -> Crash {
    if let Some(requested_bytes) = state.memory_denied() {
        return Crash::Memory { requested_bytes };
    }
    // wasmtime's own error type for it is private; its message is stable.
    if format!("{err:#}").contains("fuel allocated for hostcalls has been exhausted") {
        return Crash::HostcallData;
    }
    let trap = if let Some(trap) = err.downcast_ref::<Trap>() {
        if *trap == Trap::Interrupt {
            return Crash::Deadline {
                grace: state.grace(),
            };
        }
        trap.to_string()
    } else if let Some(exit) = err.downcast_ref::<wasmtime_wasi::I32Exit>() {
        format!("it called exit({})", exit.0)
    } else {
        // A host call's error carries the guest's backtrace: names the guest chose.
        stdio::one_line(&format!("{err:#}"))
    };
    Crash::Trap {
        trap,
        guest_output: state.output_tail(),
    }
}

/// A crash as a sentence, for failures outside a call (instantiation, `init`).
fn describe(crash: Crash, limits: Limits) -> String {
    match crash {
        Crash::Trap {
            trap,
            guest_output: Some(output),
        } => format!("it trapped: {trap} (guest said: {output})"),
        Crash::Trap {
            trap,
            guest_output: None,
        } => format!("it trapped: {trap}"),
        Crash::Deadline { grace } => format!(
            "it did not finish within the {} ms call timeout{}",
            limits.call_timeout.as_millis(),
            error::grace_clause(grace)
        ),
        Crash::Memory { requested_bytes } => format!(
            "it needs {requested_bytes} bytes of memory and tables, over the limit of {} bytes; raise the memory limit",
            limits.memory_bytes
        ),
        Crash::HostcallData => format!(
            "it handed the host more than {} bytes in one call (twice its memory limit); \
             raise the memory limit if that is legitimate",
            limits.hostcall_bytes()
        ),
    }
}
