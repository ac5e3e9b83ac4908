//! The restart budget: how many failed attempts the engine restarts within a window
//! (`[restarts]` in the job file), and the exponential backoff before each.

use std::time::{Duration, Instant};

use crate::job;

/// The most doublings of the initial backoff (then `backoff_max_ms` caps it anyway).
const MAX_DOUBLINGS: u32 = 16;

pub(super) struct RestartBudget {
    window: Duration,
    max: usize,
    initial: Duration,
    ceiling: Duration,
    /// When each restart within the window happened.
    recent: Vec<Instant>,
}

impl RestartBudget {
    pub(super) fn new(policy: &job::Restarts) -> RestartBudget {
        RestartBudget {
            window: Duration::from_millis(policy.window_ms),
            max: policy.max as usize,
            initial: Duration::from_millis(policy.backoff_initial_ms),
            ceiling: Duration::from_millis(policy.backoff_max_ms),
            recent: Vec::new(),
        }
    }

    /// Records a restart now and returns how long to wait before it; `None` once the
    /// budget of the window is spent.
    pub(super) fn next_backoff(&mut self) -> Option<Duration> {
        let now = Instant::now();
        self.recent.retain(|at| now.duration_since(*at) < self.window);
        if self.recent.len() >= self.max {
            return None;
        }
        self.recent.push(now);
        let doublings = (self.recent.len() as u32 - 1).min(MAX_DOUBLINGS);
        Some(self.initial.saturating_mul(1 << doublings).min(self.ceiling))
    }

    pub(super) fn describe_budget(&self) -> String {
        format!("{} restarts within {} ms", self.recent.len(), self.window.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_ceiling_and_the_budget_runs_out() {
        let policy = job::Restarts { max: 4, window_ms: 60_000, backoff_initial_ms: 100, backoff_max_ms: 300 };
        let mut restarts = RestartBudget::new(&policy);
        let waits: Vec<_> = std::iter::from_fn(|| restarts.next_backoff()).map(|d| d.as_millis()).collect();
        assert_eq!(waits, [100, 200, 300, 300]);
        assert_eq!(restarts.describe_budget(), "4 restarts within 60000 ms");
    }
}
