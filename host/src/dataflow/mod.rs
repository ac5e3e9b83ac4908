//! The words every task of a job speaks: what travels on the channels between tasks
//! (`message`), where a task's output port goes (`fanout`), which input partition an id names (`input`), which key group a key is in and which subtask owns it (`key_group`), when a checkpoint may come early (`pace`),
//! and why a task failed (`failure`).
//! A leaf below its users: sources, operator subtasks, the sink and the engine import
//! it; it imports none of them, only the error types of the pieces below it.

mod failure;
mod fanout;
mod input;
mod key_group;
mod message;
mod pace;

pub use failure::TaskFailure;
pub(crate) use fanout::{Fanout, Reader};
pub(crate) use input::{InputTopics, input_id, kafka_partition, within_max_partitions};
pub(crate) use key_group::{KeyGroups, Shard, murmur2};
pub use message::Origin;
pub(crate) use message::{DeadLetter, Event, Message, Records};
pub(crate) use pace::Pace;
