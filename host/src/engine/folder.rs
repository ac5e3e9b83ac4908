//! The folder: writes each committed checkpoint's changes into the store's state, off
//! the coordinator's path (a crash before a fold leaves them for a replay). Checkpoints
//! committed within `GATHER` of its last write go in together, each key once; the
//! coordinator hands folds over through a `Handover`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};

use crate::checkpoint::store::CheckpointStore;
use crate::chunk::{self, StateChanges};
use crate::dataflow::TaskFailure;
use crate::state::FoldDurability;

use super::fault;

/// How long after a write the folder holds committed checkpoints before the next. A key
/// changed in each of them is written once: at 100 ms checkpoints of a window count over
/// 100 k keys, a second's worth cost 13.1-13.4 CPU-s per 10 M records against 16.1-16.2
/// at 300 ms. An exactly-once checkpoint does not wait for it (bases merge what it
/// holds; only `UNSENT_LIMIT` stops one), so holding costs memory, about a second of
/// changes, and a restart's replay, from the store's positions, reads what it held.
const GATHER: Duration = Duration::from_millis(1_000);
/// Bytes of state changes the coordinator keeps while the folder writes; a checkpoint
/// that would keep more waits for the folder.
const UNSENT_LIMIT: u64 = 256 << 20;

/// A committed checkpoint's state changes, for the folder to write into the store, and
/// the changelog positions the store then reflects.
pub(super) struct Fold {
    /// The first checkpoint whose changes it holds (earlier than `n` once folds joined).
    pub(super) first: u64,
    pub(super) n: u64,
    pub(super) changes: Vec<Arc<StateChanges>>,
    pub(super) positions: BTreeMap<i32, i64>,
}

impl Fold {
    /// Takes in the next committed checkpoint's fold: this one's changes, then `next`'s,
    /// reflected at `next`'s checkpoint and positions (which cover all earlier ones').
    fn join(&mut self, next: Fold) {
        self.n = next.n;
        self.changes.extend(next.changes);
        self.positions = next.positions;
    }

    fn bytes(&self) -> u64 {
        self.changes.iter().map(|c| c.size().1).sum()
    }
}

/// The coordinator's end of the folder's channel. A fold the folder cannot take yet (it
/// is writing the last) is kept here and later ones join it, so a checkpoint does not wait
/// for RocksDB; it waits only when `UNSENT_LIMIT` would be passed, or when it must
/// (`waits`: at-least-once checkpoints wait for each fold anyway).
pub(super) struct Handover {
    folds: Sender<Fold>,
    unsent: Option<Fold>,
    waits: bool,
}

impl Handover {
    pub(super) fn new(folds: Sender<Fold>, waits: bool) -> Handover {
        Handover { folds, unsent: None, waits }
    }

    /// Hands `fold` over, or keeps it with those the folder has not taken yet.
    pub(super) fn hand(&mut self, fold: Fold) -> Result<(), TaskFailure> {
        let fold = match self.unsent.take() {
            Some(mut unsent) => {
                unsent.join(fold);
                unsent
            }
            None => fold,
        };
        if self.waits || fold.bytes() > UNSENT_LIMIT {
            return self.folds.send(fold).map_err(|_| TaskFailure::Stopped);
        }
        self.offer_fold(fold)
    }

    /// Hands over what is kept, if the folder can take it now.
    pub(super) fn offer(&mut self) -> Result<(), TaskFailure> {
        match self.unsent.take() {
            Some(fold) => self.offer_fold(fold),
            None => Ok(()),
        }
    }

    fn offer_fold(&mut self, fold: Fold) -> Result<(), TaskFailure> {
        match self.folds.try_send(fold) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(fold)) => {
                self.unsent = Some(fold);
                Ok(())
            }
            Err(TrySendError::Disconnected(_)) => Err(TaskFailure::Stopped),
        }
    }

    /// The attempt ends: hands over what is kept, waiting for the folder, which writes
    /// it before it ends. A folder that failed has left anyway; recovery then replays
    /// these checkpoints from the changelog.
    pub(super) fn finish(self) {
        if let Some(fold) = self.unsent {
            let _ = self.folds.send(fold);
        }
    }
}

/// The folder's ends: the store it writes, the committed checkpoints it takes, and what
/// it tells. `folded`, if given, hears of each fold as soon as it is done
/// (at-least-once: checkpoint N+1 begins only then, so nothing is held); `through` is
/// the last checkpoint the store holds.
pub(super) struct FolderEnds<'a> {
    pub(super) store: &'a CheckpointStore,
    pub(super) committed: Receiver<Fold>,
    pub(super) folded: Option<Sender<u64>>,
    pub(super) through: &'a AtomicU64,
}

/// Folds until the coordinator hangs up, then writes what it holds.
pub(super) fn run(ends: FolderEnds<'_>) -> Result<(), TaskFailure> {
    let FolderEnds { store, committed, folded, through } = ends;
    let folded = folded.as_ref();
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
    let changes: Vec<&StateChanges> = held.iter().flat_map(|fold| fold.changes.iter().map(|round| &**round)).collect();
    let entries = chunk::latest_of(&changes);
    let logs = changes.iter().flat_map(|c| c.logs.iter().map(move |&(group, log)| (c.stage, group, log)));
    // The folder tells of its folds exactly when checkpoints wait for them: at-least-once.
    let durability = if folded.is_some() { FoldDurability::Synced } else { FoldDurability::Unlogged };
    fault::slow_fold();
    store.fold(n, &entries, logs, &positions, durability)?;
    through.store(n, Ordering::Release);
    store.prune_before(n)?;
    let checkpoints = n + 1 - held[0].first;
    tracing::debug!(checkpoint = n, checkpoints, duration_ms = started.elapsed().as_millis() as u64, "folded state changes");
    if let Some(folded) = folded {
        folded.send(n).map_err(|_| TaskFailure::Stopped)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crossbeam_channel::bounded;

    use super::*;

    fn fold(n: u64, key: &[u8]) -> Fold {
        let mut changes = StateChanges::new(0);
        changes.push(1, key, Some(b"v"));
        Fold { first: n, n, changes: vec![Arc::new(changes)], positions: BTreeMap::from([(0, n as i64 * 10)]) }
    }

    fn keys(fold: &Fold) -> Vec<Vec<u8>> {
        fold.changes.iter().flat_map(|c| c.entries().map(|(_, key, _)| key.to_vec())).collect()
    }

    #[test]
    fn checkpoints_the_folder_cannot_take_yet_join_the_kept_fold_in_order_without_waiting() {
        let (tx, rx) = bounded::<Fold>(1);
        let mut handover = Handover::new(tx, false);
        handover.hand(fold(1, b"a")).unwrap();
        // The folder is busy: its channel is full, and none of these waits.
        handover.hand(fold(2, b"b")).unwrap();
        handover.hand(fold(3, b"c")).unwrap();
        handover.offer().unwrap();
        let first = rx.try_recv().unwrap();
        assert_eq!((first.n, keys(&first)), (1, vec![b"a".to_vec()]));
        handover.offer().unwrap();
        let joined = rx.try_recv().unwrap();
        assert_eq!((joined.n, keys(&joined)), (3, vec![b"b".to_vec(), b"c".to_vec()]));
        assert_eq!(joined.positions, BTreeMap::from([(0, 30)]));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn what_is_kept_reaches_the_folder_when_the_attempt_ends() {
        let (tx, rx) = bounded::<Fold>(1);
        let mut handover = Handover::new(tx, false);
        handover.hand(fold(1, b"a")).unwrap();
        handover.hand(fold(2, b"b")).unwrap();
        let folder = std::thread::spawn(move || rx.iter().map(|fold| fold.n).collect::<Vec<_>>());
        handover.finish();
        assert_eq!(folder.join().unwrap(), vec![1, 2]);
    }

    #[test]
    fn a_checkpoint_that_must_wait_for_its_fold_is_handed_over_at_once() {
        let (tx, rx) = bounded::<Fold>(1);
        let mut handover = Handover::new(tx, true);
        let folder = std::thread::spawn(move || rx.iter().map(|fold| fold.n).collect::<Vec<_>>());
        for n in 1..=3 {
            handover.hand(fold(n, b"a")).unwrap();
        }
        handover.finish();
        assert_eq!(folder.join().unwrap(), vec![1, 2, 3]);
    }
}
