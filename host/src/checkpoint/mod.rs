//! Checkpoints' durable side. `store` keeps every task's entry of checkpoint N in the
//! job's `state_dir` (RocksDB, sealed with a synced write); `layout` owns what those
//! entries and the job shape mean, in every format ever written; `recovery` reads which
//! N Kafka's committed offsets name. Nothing here drives the protocol: the engine does.

pub mod layout;
pub mod recovery;
pub mod store;
