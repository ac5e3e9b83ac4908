//! The folder: writes each committed checkpoint's changes into the store's state and
//! prunes what is older, off the coordinator's path (checkpoint N+1 runs meanwhile; a
//! crash before a fold leaves its changes for recovery to replay from the changelog).
//! Checkpoints committed less than `GATHER` after its last write are held and written
//! together, each key once, with the latest of its values: at short intervals most keys
//! change in every checkpoint, and the store is a cache, not the record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::checkpoint::store::CheckpointStore;
use crate::chunk::{self, StateChanges};
use crate::dataflow::TaskFailure;
use crate::state::FoldDurability;

use super::coordinator::Fold;

/// How long after a write the folder holds committed checkpoints before the next.
const GATHER: Duration = Duration::from_millis(300);

/// Folds until the coordinator hangs up, then writes what it holds. `folded`, if given,
/// hears of each fold as soon as it is done (at-least-once: checkpoint N+1 begins only
/// then, so nothing is held); `through` is the last checkpoint the store holds.
pub(super) fn run(store: &CheckpointStore, committed: &Receiver<Fold>, folded: Option<&Sender<u64>>, through: &AtomicU64) -> Result<(), TaskFailure> {
    let mut held: Vec<Fold> = Vec::new();
    let mut written = Instant::now() - GATHER;
    loop {
        let next = match held.is_empty() {
            true => committed.recv().map_err(|_| RecvTimeoutError::Disconnected),
            false => committed.recv_deadline(written + GATHER),
        };
        match next {
            Ok(fold) => held.push(fold),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return write(store, std::mem::take(&mut held), folded, through),
        }
        if folded.is_some() || written.elapsed() >= GATHER {
            write(store, std::mem::take(&mut held), folded, through)?;
            written = Instant::now();
        }
    }
}

/// Writes `held` (committed checkpoints, oldest first) into the store as one.
fn write(store: &CheckpointStore, held: Vec<Fold>, folded: Option<&Sender<u64>>, through: &AtomicU64) -> Result<(), TaskFailure> {
    let Some(last) = held.last() else { return Ok(()) };
    let (n, positions) = (last.n, last.positions.clone());
    let started = Instant::now();
    let changes: Vec<&StateChanges> = held.iter().flat_map(|fold| &fold.changes).collect();
    let entries = chunk::latest_of(&changes);
    let logs = changes.iter().flat_map(|c| c.logs.iter().map(move |&(group, log)| (c.stage, group, log)));
    // The folder tells of its folds exactly when checkpoints wait for them: at-least-once.
    let durability = if folded.is_some() { FoldDurability::Synced } else { FoldDurability::Unlogged };
    store.fold(n, entries, logs, &positions, durability)?;
    through.store(n, Ordering::Release);
    store.prune_before(n)?;
    tracing::debug!(checkpoint = n, checkpoints = held.len(), duration_ms = started.elapsed().as_millis() as u64, "folded state changes");
    if let Some(folded) = folded {
        folded.send(n).map_err(|_| TaskFailure::Stopped)?;
    }
    Ok(())
}
