//! What can go wrong loading a plugin or calling an operator, worded for the
//! person who has to act on it: every message names the plugin file (and the
//! operator's label) and says what to do.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::batch::BatchError;

/// A plugin file cannot be used. Each message is one paragraph naming the file.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    // `cause`, not `source`: the message already includes it, once.
    #[error("cannot read plugin {}: {cause}; check the path and its permissions", path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },

    #[error(
        "plugin {} is {size} bytes, over the {max}-byte limit for a plugin; is it the right file? \
         If so, raise the operator's max_plugin_mb in the job file (weir check: --max-plugin-mb)",
        path.display()
    )]
    TooLarge { path: PathBuf, size: u64, max: u64 },

    #[error("plugin {} is not a regular file; give the path of a .wasm component file", path.display())]
    NotAFile { path: PathBuf },

    #[error(
        "plugin {} did not compile within {} ms; a component of a few MB compiles in seconds, so \
         check it is the right file; if so, raise the operator's compile_timeout_ms in the job file \
         (weir check: --compile-timeout-ms)",
        path.display(), timeout.as_millis()
    )]
    CompileTimeout { path: PathBuf, timeout: Duration },

    #[error(
        "plugin {} is not a WebAssembly file (it does not start with the bytes `\\0asm`); \
         give the path of a component, e.g. one built with `cargo build --target wasm32-wasip2`",
        path.display()
    )]
    NotWasm { path: PathBuf },

    #[error(
        "plugin {} is a core WebAssembly module, not a component; weir runs components that export \
         the weir:operator world: build it with `cargo build --target wasm32-wasip2` (or wrap a \
         wasip1 module with `wasm-tools component new`)",
        path.display()
    )]
    CoreModule { path: PathBuf },

    #[error(
        "plugin {} uses WebAssembly binary encoding version {version:#x} (layer {layer}), which this \
         host's wasmtime cannot read; rebuild it with a toolchain producing component-model \
         encoding 0xd",
        path.display()
    )]
    UnknownEncoding {
        path: PathBuf,
        version: u16,
        layer: u16,
    },

    #[error("plugin {} is truncated ({detail}); rebuild it or copy it again", path.display())]
    Truncated { path: PathBuf, detail: String },

    #[error("plugin {} is not a valid component ({detail}); rebuild it", path.display())]
    Invalid { path: PathBuf, detail: String },

    #[error(
        "plugin {} was built against weir:operator@{plugin}, which this host cannot run: it speaks \
         {} (newest weir:operator@{host}), and versions are compatible only with the same \
         major version (and, before 1.0, the same minor); rebuild the plugin against wit/ of \
         this weir release",
        path.display(), super::contract::spoken()
    )]
    IncompatibleVersion {
        path: PathBuf,
        plugin: semver::Version,
        /// The newest version this host speaks (it speaks every one of `World::ALL`).
        host: semver::Version,
    },

    #[error(
        "plugin {} does not export the weir:operator/operator world: missing {}; it exports {}; \
         implement the world in wit/operator.wit (init, process, on-watermark, snapshot, restore, \
         restored)",
        path.display(), list(missing), list_or_nothing(found)
    )]
    WrongWorld {
        path: PathBuf,
        missing: Vec<String>,
        found: Vec<String>,
    },

    #[error(
        "plugin {} exports the operator functions with other types than weir:operator@{host} \
         defines ({detail}); rebuild it against wit/ of this weir release",
        path.display()
    )]
    WrongSignature {
        path: PathBuf,
        host: semver::Version,
        detail: String,
    },

    #[error(
        "plugin {} imports {}, which weir does not provide; a plugin may import only \
         weir:operator/log and WASI 0.2 (granted without filesystem, network, environment or clock)",
        path.display(), list(imports)
    )]
    UnsupportedImports { path: PathBuf, imports: Vec<String> },

    #[error("plugin {} cannot be linked against the host ({detail})", path.display())]
    Link { path: PathBuf, detail: String },
}

/// Which export of the world a call went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Init,
    Process,
    OnWatermark,
    Snapshot,
    Restore,
    Restored,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Call::Init => "init",
            Call::Process => "process",
            Call::OnWatermark => "on-watermark",
            Call::Snapshot => "snapshot",
            Call::Restore => "restore",
            Call::Restored => "restored",
        })
    }
}

/// Names an operator instance in messages: its label and its plugin file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorId {
    pub label: String,
    pub plugin: PathBuf,
}

impl fmt::Display for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "operator `{}` (plugin {})",
            self.label,
            self.plugin.display()
        )
    }
}

/// A call into an operator failed.
///
/// [`OperatorError::is_trap`] separates the plugin crashing (trap, deadline,
/// memory cap: the instance was replaced by a fresh, empty one that must be
/// restored from a checkpoint) from the plugin refusing (it returned an error and
/// keeps its state).
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The guest returned `Err(message)`; its state is intact.
    #[error("{id}: {call} returned an error: {message}")]
    Guest {
        id: OperatorId,
        call: Call,
        message: String,
    },

    /// The guest trapped: a panic, `unreachable`, an out-of-bounds access, `exit`.
    #[error(
        "{id} trapped in {call}: {trap}{}; the instance was reset to a fresh one with empty state",
        guest_output.as_deref().map(|o| format!(" (guest said: {o})")).unwrap_or_default()
    )]
    Trap {
        id: OperatorId,
        call: Call,
        trap: String,
        guest_output: Option<String>,
    },

    /// The call ran past its deadline, and the grace it earned by the memory it
    /// held and grew, and was interrupted.
    #[error(
        "{id}: {call} did not return within its {} ms deadline{} and was interrupted; the \
         instance was reset to a fresh one with empty state; if the work is legitimate, raise the \
         call timeout or send smaller batches",
        timeout.as_millis(),
        grace_clause(*grace)
    )]
    DeadlineExceeded {
        id: OperatorId,
        call: Call,
        timeout: Duration,
        /// What it was given beyond `timeout` for the memory it held and grew.
        grace: Duration,
    },

    /// The guest's memory would have grown past the cap.
    #[error(
        "{id}: {call} tried to grow its memory and tables to {requested_bytes} bytes, over its limit of \
         {limit_bytes} bytes; the instance was reset to a fresh one with empty state; raise the \
         memory limit if the plugin legitimately needs more"
    )]
    MemoryLimitExceeded {
        id: OperatorId,
        call: Call,
        limit_bytes: usize,
        requested_bytes: usize,
    },

    /// The guest handed the host more bytes in one call than its hostcall budget.
    #[error(
        "{id}: {call} handed the host more than {limit_bytes} bytes in one call (twice its memory \
         limit of {memory_bytes} bytes) and was stopped; the instance was reset to a fresh one with \
         empty state; raise the operator's memory_limit_mb (weir check: --memory-limit-mb) if the \
         plugin legitimately returns that much, e.g. a large snapshot"
    )]
    HostcallDataExceeded {
        id: OperatorId,
        call: Call,
        limit_bytes: usize,
        memory_bytes: usize,
    },

    /// The guest returned more than one call may: too many records, or records
    /// that add up to too many bytes once each is copied out.
    #[error(
        "{id}: {call} returned too much output: {problem}; nothing of it was passed on and the \
         input is handled as if the plugin had crashed on it; if the output is legitimate, raise \
         the operator's max_output_records or max_output_mb in the job file (weir check: \
         --max-output-records, --max-output-mb)"
    )]
    OutputTooLarge {
        id: OperatorId,
        call: Call,
        problem: BatchError,
    },

    /// The component could not be instantiated (e.g. its initial memory is over the cap).
    #[error("{id} cannot be instantiated: {detail}")]
    Instantiate { id: OperatorId, detail: String },

    /// `init` failed: it rejected the config, trapped or ran out of time or memory.
    #[error("{id}: init failed: {detail}; check the operator's config")]
    Init { id: OperatorId, detail: String },

    /// The guest returned a batch whose offsets do not fit its data, or a record
    /// with a timestamp Kafka refuses.
    #[error("{id}: {call} returned a malformed batch: {problem}; this is a bug in the plugin")]
    InvalidOutput {
        id: OperatorId,
        call: Call,
        problem: BatchError,
    },

    /// The guest returned an `outputs` list (weir:operator@0.3) that does not route
    /// its records: not one index per record, or an index past the operator's outputs.
    #[error(
        "{id}: {call} returned malformed outputs: {problem}; nothing of it was passed on and the \
         input is handled as if the plugin had crashed on it; this is a bug in the plugin"
    )]
    InvalidOutputs {
        id: OperatorId,
        call: Call,
        problem: OutputsError,
    },

    /// The guest's `snapshot` returned state changes that break the contract: an entry
    /// outside its chunk, a chunk over the limit, a key twice in a round, a key this
    /// subtask does not own, state from an operator that may keep none.
    #[error("{id}: snapshot returned malformed state changes: {detail}")]
    InvalidState { id: OperatorId, detail: String },
}

/// " (and N ms more for the memory it held and grew)", or nothing without a grace.
pub(super) fn grace_clause(grace: Duration) -> String {
    match grace.is_zero() {
        true => String::new(),
        false => format!(" (and {} ms more for the memory it held and grew)", grace.as_millis()),
    }
}

impl OperatorError {
    /// True when the plugin crashed (trap, deadline or memory cap) rather than
    /// returned an error: the instance now runs a fresh, initialised guest whose
    /// state is empty, and the caller restores it from its last checkpoint. The
    /// engine counts these to detect poison records.
    pub fn is_trap(&self) -> bool {
        matches!(
            self,
            Self::Trap { .. }
                | Self::DeadlineExceeded { .. }
                | Self::MemoryLimitExceeded { .. }
                | Self::HostcallDataExceeded { .. }
        )
    }

    /// The operator the error is about.
    pub fn id(&self) -> &OperatorId {
        match self {
            Self::Guest { id, .. }
            | Self::Trap { id, .. }
            | Self::DeadlineExceeded { id, .. }
            | Self::MemoryLimitExceeded { id, .. }
            | Self::HostcallDataExceeded { id, .. }
            | Self::OutputTooLarge { id, .. }
            | Self::Instantiate { id, .. }
            | Self::Init { id, .. }
            | Self::InvalidOutput { id, .. }
            | Self::InvalidOutputs { id, .. }
            | Self::InvalidState { id, .. } => id,
        }
    }
}

/// What is wrong with the `outputs` list a weir:operator@0.3 call returned beside its
/// records (see `emitted` in `wit/0.3/operator.wit`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OutputsError {
    #[error(
        "it lists {outputs} output(s) for {records} record(s): the list must be empty (every \
         record to the first output) or name one output per record"
    )]
    Length { records: usize, outputs: usize },
    #[error(
        "record {index} goes to output {output}, but the operator has {count} output(s) \
         (indices 0..{count})"
    )]
    OutOfRange {
        index: usize,
        output: u8,
        count: usize,
    },
}

fn list(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn list_or_nothing(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".to_owned()
    } else {
        list(items)
    }
}
