//! The Wasm operator runtime: plugins are WebAssembly components loaded at
//! runtime, checked against `wit/operator.wit` (0.2) or `wit/0.3/operator.wit`, and
//! run one sandboxed instance per operator subtask with a memory cap and a per-call
//! CPU deadline.
//!
//! [`Runtime`] (one per process) → [`Plugin::load`] (once per plugin file) →
//! [`OperatorInstance::with_ports`] (once per subtask) → `process_input` /
//! `on_watermark_emitted` / `snapshot` / `restore` on the subtask's thread.

mod bindings;
mod cache;
mod contract;
mod error;
mod exports;
mod instance;
mod linear;
mod memory;
mod plugin;
mod ports;
mod runtime;
mod sandbox;
mod stdio;

pub use contract::{EXPORTS, PACKAGE, World, compatible, host_version};
pub use error::{Call, OperatorError, OperatorId, OutputsError, PluginError};
pub use instance::{Limits, OperatorInstance, Probe, Tombstones};
pub use ports::{Emitted, MAX_OUTPUTS, Ports};
pub use plugin::{Compiled, DEFAULT_COMPILE_TIMEOUT, LoadLimits, Plugin, PluginInfo};
pub use stdio::LogLimits;
pub use cache::CacheError;
pub use linear::Restoring;
pub use runtime::{Runtime, RuntimeConfig, RuntimeError};
