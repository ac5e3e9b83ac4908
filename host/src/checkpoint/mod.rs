//! Checkpoints' durable side. `store` keeps every task's entry of checkpoint N in the
//! job's `state_dir` (RocksDB, sealed with a synced write); `layout` owns what those
//! entries and the job shape mean, in every format ever written; `recovery` reads which
//! N Kafka's committed offsets name; `state_dir` claims the directory and opens the
//! store again when it fails or vanishes. Nothing here drives the protocol: the engine does.

pub mod layout;
pub mod recovery;
pub mod state_dir;
pub mod store;
