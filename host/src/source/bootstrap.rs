//! A table's bootstrap (DESIGN.md §8): at the start of every attempt each table source
//! reads its partitions to where they ended when it began, and only then do the stream
//! sources deliver a record, so that a lookup never misses an entry the table already
//! held. Barriers and stops are served meanwhile.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Open once every table source task has read its table to its end.
#[derive(Debug)]
pub(crate) struct Bootstrap {
    pending: AtomicUsize,
}

impl Bootstrap {
    /// A gate for `tables` table source tasks (open at once when there are none).
    pub(crate) fn new(tables: usize) -> Bootstrap {
        Bootstrap { pending: AtomicUsize::new(tables) }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0
    }

    fn arrive(&self) {
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A table source task's way to its end.
pub(crate) struct TableEnd {
    /// Per partition, the offset its reading must reach.
    ends: BTreeMap<i32, i64>,
    started: Instant,
}

impl TableEnd {
    pub(crate) fn new(ends: BTreeMap<i32, i64>) -> TableEnd {
        TableEnd { ends, started: Instant::now() }
    }

    /// Whether reading up to `positions` reached every end; the first time it does,
    /// the task arrives at `gate`.
    pub(crate) fn reached(&self, positions: &BTreeMap<i32, i64>, gate: &Bootstrap, topic: &str) -> bool {
        let done = self.ends.iter().all(|(partition, &end)| positions.get(partition).is_some_and(|&at| at >= end));
        if done {
            let elapsed_ms = self.started.elapsed().as_millis() as u64;
            tracing::info!(topic, partitions = self.ends.len(), elapsed_ms, "table read to its end");
            gate.arrive();
        }
        done
    }
}
