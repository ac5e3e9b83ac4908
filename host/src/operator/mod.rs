//! The Wasm operator runtime: plugins are WebAssembly components loaded at
//! runtime, checked against `wit/operator.wit`, and run one sandboxed instance
//! per operator subtask with a memory cap and a per-call CPU deadline.
//!
//! [`Runtime`] (one per process) → [`Plugin::load`] (once per plugin file) →
//! [`OperatorInstance::new`] (once per subtask) → `process` / `on_watermark` /
//! `snapshot` / `restore` on the subtask's thread.

mod bindings;
mod cache;
mod contract;
mod error;
mod instance;
mod memory;
mod plugin;
mod runtime;
mod sandbox;
mod stdio;

pub use contract::{EXPORTS, PACKAGE, compatible, host_version};
pub use error::{Call, OperatorError, OperatorId, PluginError};
pub use instance::{Limits, OperatorInstance, Probe};
pub use plugin::{Compiled, DEFAULT_COMPILE_TIMEOUT, LoadLimits, Plugin, PluginInfo};
pub use stdio::LogLimits;
pub use cache::CacheError;
pub use runtime::{Runtime, RuntimeConfig, RuntimeError};
