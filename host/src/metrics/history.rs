//! The recent past of a running job, for the status API: its last checkpoints (committed,
//! or why not), restarts with their cause, a scaled-out process's rebalances, and what
//! the job is doing now. Written on the control path (once per checkpoint, attempt or
//! rebalance), never per record; every list and message is bounded.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Checkpoints kept, newest last.
pub const CHECKPOINTS: usize = 50;
/// Restarts kept, newest last.
pub const RESTARTS: usize = 50;
/// Rebalances kept, newest last.
pub const REBALANCES: usize = 20;
/// A failure's message longer than this is cut (a plugin's trap can carry a long one).
const MAX_MESSAGE_BYTES: usize = 2048;

/// What the job is doing, as the status page shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Loading plugins, before the first attempt.
    #[default]
    Starting,
    /// An attempt is bringing the job to its last committed checkpoint.
    Recovering,
    /// The attempt has committed a checkpoint since it began.
    Running,
    /// An attempt failed; the next waits out its backoff.
    Restarting,
    /// A scaled-out process that the group has given no partitions (yet).
    Waiting,
}

/// One checkpoint, committed or not. The status API shows these as they are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointEntry {
    pub id: u64,
    /// When its barrier was injected, in ms since the epoch.
    pub started_at_ms: u64,
    /// From the barrier to the commit, or to the failure.
    pub duration_ms: u64,
    pub committed: bool,
    /// Why it did not commit.
    pub error: Option<String>,
    /// Keyed state entries it changed or removed.
    pub state_changes: u64,
    /// Records and bytes it wrote into the changelog topic.
    pub changelog_records: u64,
    pub changelog_bytes: u64,
    /// Key groups whose state it wrote anew as a base.
    pub bases: u32,
}

impl CheckpointEntry {
    /// Checkpoint `id`, begun `took` ago and not committed, having changed nothing:
    /// what a commit or a failure fills in.
    pub fn began(id: u64, took: Duration) -> CheckpointEntry {
        CheckpointEntry {
            id,
            started_at_ms: now_ms().saturating_sub(took.as_millis() as u64),
            duration_ms: took.as_millis() as u64,
            committed: false,
            error: None,
            state_changes: 0,
            changelog_records: 0,
            changelog_bytes: 0,
            bases: 0,
        }
    }
}

/// An attempt that failed and was started again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartEntry {
    pub at_ms: u64,
    /// The failure's message: it names the plugin, partition or checkpoint.
    pub cause: String,
    /// How long the next attempt waited; 0 when no backoff applied (a poison record set aside).
    pub backoff_ms: u64,
}

/// A change of the partitions a scaled-out process owns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalanceEntry {
    pub at_ms: u64,
    pub owned: Vec<i32>,
    pub gained: Vec<i32>,
    pub lost: Vec<i32>,
    /// From the change to running again over the new partitions, once known.
    pub duration_ms: Option<u64>,
}

/// Everything recorded, as it stands.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Recorded {
    pub phase: Phase,
    /// The last checkpoint committed, by this process or (after a restart) before it.
    pub last_committed: Option<u64>,
    pub checkpoints: Vec<CheckpointEntry>,
    pub restarts: Vec<RestartEntry>,
    pub rebalances: Vec<RebalanceEntry>,
    /// A scaled-out process's member id in the job's group, and what the group gave it.
    pub member_id: Option<String>,
    pub owned: Option<Vec<i32>>,
}

#[derive(Default)]
struct Inner {
    phase: Phase,
    last_committed: Option<u64>,
    checkpoints: VecDeque<CheckpointEntry>,
    restarts: VecDeque<RestartEntry>,
    rebalances: VecDeque<RebalanceEntry>,
    member_id: Option<String>,
    owned: Option<Vec<i32>>,
}

/// The job's recent past. Cheap to clone; every clone records into the same one.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<Inner>>);

impl History {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn phase(&self, phase: Phase) {
        self.inner().phase = phase;
    }

    /// A committed checkpoint; the job is running from then on.
    pub fn committed(&self, mut entry: CheckpointEntry) {
        entry.committed = true;
        let mut inner = self.inner();
        inner.phase = Phase::Running;
        inner.last_committed = inner.last_committed.max(Some(entry.id));
        push(&mut inner.checkpoints, entry, CHECKPOINTS);
    }

    /// An attempt resumes from checkpoint `n`, committed before it began.
    pub fn resumed(&self, n: u64) {
        let mut inner = self.inner();
        inner.last_committed = inner.last_committed.max(Some(n));
    }

    /// Checkpoint `id`, begun `took` ago, that failed with `error`.
    pub fn failed(&self, id: u64, took: Duration, error: &dyn std::fmt::Display) {
        let entry = CheckpointEntry { error: Some(bounded(error)), ..CheckpointEntry::began(id, took) };
        push(&mut self.inner().checkpoints, entry, CHECKPOINTS);
    }

    /// An attempt failed with `cause`; the next begins after `backoff`.
    pub fn restarted(&self, cause: &dyn std::fmt::Display, backoff: Duration) {
        let entry = RestartEntry { at_ms: now_ms(), cause: bounded(cause), backoff_ms: backoff.as_millis() as u64 };
        let mut inner = self.inner();
        inner.phase = Phase::Restarting;
        push(&mut inner.restarts, entry, RESTARTS);
    }

    /// A scaled-out process's member id and partitions, as the group says now.
    pub fn membership(&self, member_id: Option<String>, owned: &[i32]) {
        let mut inner = self.inner();
        if owned.is_empty() && inner.phase != Phase::Restarting {
            inner.phase = Phase::Waiting;
        }
        inner.member_id = member_id;
        inner.owned = Some(owned.to_vec());
    }

    /// The process's partitions changed to `owned`.
    pub fn rebalanced(&self, owned: &[i32], gained: &[i32], lost: &[i32]) {
        let entry = RebalanceEntry {
            at_ms: now_ms(),
            owned: owned.to_vec(),
            gained: gained.to_vec(),
            lost: lost.to_vec(),
            duration_ms: None,
        };
        push(&mut self.inner().rebalances, entry, REBALANCES);
    }

    /// The last rebalance took `took`, until the process ran again.
    pub fn rebalance_took(&self, took: Duration) {
        if let Some(last) = self.inner().rebalances.back_mut() {
            last.duration_ms.get_or_insert(took.as_millis() as u64);
        }
    }

    pub fn recorded(&self) -> Recorded {
        let inner = self.inner();
        Recorded {
            phase: inner.phase,
            last_committed: inner.last_committed,
            checkpoints: inner.checkpoints.iter().cloned().collect(),
            restarts: inner.restarts.iter().cloned().collect(),
            rebalances: inner.rebalances.iter().cloned().collect(),
            member_id: inner.member_id.clone(),
            owned: inner.owned.clone(),
        }
    }
}

fn push<T>(list: &mut VecDeque<T>, entry: T, bound: usize) {
    if list.len() == bound {
        list.pop_front();
    }
    list.push_back(entry);
}

/// A message within [`MAX_MESSAGE_BYTES`], cut at a character boundary.
fn bounded(message: &dyn std::fmt::Display) -> String {
    let mut text = message.to_string();
    if text.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(id: u64) -> CheckpointEntry {
        CheckpointEntry::began(id, Duration::from_millis(2))
    }

    #[test]
    fn keeps_the_newest_within_its_bounds() {
        let history = History::default();
        for id in 1..=(CHECKPOINTS as u64 + 7) {
            history.committed(checkpoint(id));
        }
        let ids: Vec<u64> = history.recorded().checkpoints.iter().map(|c| c.id).collect();
        assert_eq!(ids.len(), CHECKPOINTS);
        assert_eq!((ids[0], ids[CHECKPOINTS - 1]), (8, CHECKPOINTS as u64 + 7));
        assert!(history.recorded().checkpoints.iter().all(|c| c.committed));
    }

    #[test]
    fn a_failure_is_recorded_with_its_message_cut_to_bound() {
        let history = History::default();
        history.failed(4, Duration::from_millis(30), &"x".repeat(10_000));
        history.restarted(&"é".repeat(5_000), Duration::from_millis(500));
        let recorded = history.recorded();
        let failed = &recorded.checkpoints[0];
        assert!(!failed.committed);
        assert!(failed.error.as_ref().unwrap().len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(recorded.restarts[0].cause.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert_eq!(recorded.phase, Phase::Restarting);
        history.committed(checkpoint(5));
        assert_eq!(history.recorded().phase, Phase::Running);
    }

    #[test]
    fn a_rebalance_learns_how_long_it_took_once() {
        let history = History::default();
        history.rebalanced(&[0, 1], &[1], &[]);
        history.rebalance_took(Duration::from_millis(300));
        history.rebalance_took(Duration::from_millis(900));
        assert_eq!(history.recorded().rebalances[0].duration_ms, Some(300));
    }
}
