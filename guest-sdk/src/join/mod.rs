//! Joins of two inputs, as keyed state: [`Table`] keeps the latest row per key of a table
//! input for a stream–table join, [`IntervalJoin`] buffers both streams of an interval
//! join by event time. Both track the keys they change, so a checkpoint writes only
//! those, and an operator author writes no state code.
//!
//! Both sides must be keyed alike (the table key, or the join key, is each record's
//! key): the host routes records and keeps state by key, so the two sides of a key
//! meet in the same instance.

mod interval;
mod table;

pub use interval::{IntervalJoin, Match};
pub use table::Table;
