//! weir: exactly-once stream processing from Kafka through WebAssembly operators to
//! Kafka. The modules follow the data path: `job` describes it, `source` reads Kafka,
//! `operator` runs plugins, `sink` writes Kafka, `checkpoint` keeps state durable, and
//! `engine` wires them into tasks, drives checkpoints and keeps the job running;
//! `state` keeps keyed state (the changelog and the store's cache of it); `metrics` is
//! what it shows and `status` serves that. The words the tasks exchange live in
//! `dataflow`, `batch` and `chunk`, below all of them (ARCHITECTURE.md).

pub mod batch;
pub mod checkpoint;
pub mod chunk;
mod dataflow;
pub mod engine;
pub mod job;
pub mod kafka_config;
pub mod metrics;
pub mod operator;
pub mod sink;
pub mod source;
pub mod state;
pub mod status;
