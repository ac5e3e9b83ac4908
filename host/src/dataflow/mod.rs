//! The words every task of a job speaks: what travels on the channels between tasks
//! (`message`), which key group a key is in and which subtask owns it (`key_group`),
//! and why a task failed (`failure`).
//! A leaf below its users: sources, operator subtasks, the sink and the engine import
//! it; it imports none of them, only the error types of the pieces below it.

mod failure;
mod key_group;
mod message;

pub use failure::TaskFailure;
pub(crate) use key_group::{KeyGroups, Shard};
pub use message::Origin;
pub(crate) use message::{DeadLetter, Event, Message, Records};
