//! A table's bootstrap (DESIGN.md §8): at the start of every attempt each table source
//! reads its partitions to where they ended when it began and then says so in band
//! (`Message::TableEnd`); each operator subtask that reads a table arrives at the
//! attempt's `Bootstrap` once it has processed every table channel up to that marker,
//! and only then do the stream sources deliver a record. So a lookup never misses an
//! entry the table held. Barriers and stops are served meanwhile.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Open once every operator subtask that reads a table has loaded it.
#[derive(Debug)]
pub(crate) struct Bootstrap {
    pending: AtomicUsize,
    created: Instant,
}

impl Bootstrap {
    /// A gate for `readers` operator subtasks that read tables (open at once for none).
    pub(crate) fn new(readers: usize) -> Bootstrap {
        Bootstrap { pending: AtomicUsize::new(readers), created: Instant::now() }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0
    }

    /// One reader has loaded every table it reads; the last one says so.
    pub(crate) fn arrive(&self) {
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            let elapsed_ms = self.created.elapsed().as_millis() as u64;
            tracing::info!(elapsed_ms, "every table is loaded; the stream sources start");
        }
    }
}

/// A table source task's way to the end its partitions had when it began.
pub(crate) struct TableRead {
    /// Per partition, the offset its reading must reach.
    ends: BTreeMap<i32, i64>,
    started: Instant,
}

impl TableRead {
    pub(crate) fn new(ends: BTreeMap<i32, i64>) -> TableRead {
        TableRead { ends, started: Instant::now() }
    }

    /// Whether reading up to `positions` reached every end.
    pub(crate) fn reached(&self, positions: &BTreeMap<i32, i64>, topic: &str) -> bool {
        let done = self.ends.iter().all(|(partition, &end)| positions.get(partition).is_some_and(|&at| at >= end));
        if done {
            let elapsed_ms = self.started.elapsed().as_millis() as u64;
            tracing::info!(topic, partitions = self.ends.len(), elapsed_ms, "table read to its end");
        }
        done
    }
}
