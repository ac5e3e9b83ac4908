//! Checkpoints: the barrier protocol's control and durable side. The coordinator
//! drives barrier N to a Kafka commit; `store` keeps every task's snapshot of N in the
//! job's `state_dir`; `recovery` finds the last committed N on every start; `watchdog`
//! ends a process whose commit hangs in librdkafka.

pub mod coordinator;
pub mod fault;
pub mod recovery;
pub mod store;
pub mod watchdog;

pub use coordinator::Event;
