//! weir: exactly-once stream processing from Kafka through WebAssembly operators to
//! Kafka. The modules follow the data path: `job` describes it, `source` reads Kafka,
//! `operator` runs plugins, `sink` writes Kafka, `checkpoint` makes it exactly-once,
//! and `engine` wires them into tasks and keeps the job running.

pub mod batch;
pub mod checkpoint;
pub mod engine;
pub mod job;
pub mod kafka_config;
pub mod metrics;
pub mod operator;
pub mod sink;
pub mod source;
