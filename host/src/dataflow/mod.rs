//! The words every task of a job speaks: what travels on the channels between tasks
//! (`message`), which subtask owns a key (`route`), and why a task failed (`failure`).
//! A leaf below its users: sources, operator subtasks, the sink and the engine import
//! it; it imports none of them, only the error types of the pieces below it.

mod failure;
mod message;
mod route;

pub use failure::TaskFailure;
pub use message::Origin;
pub(crate) use message::{DeadLetter, Event, Message, Records};
pub(crate) use route::subtask_for;
