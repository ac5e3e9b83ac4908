//! When the next checkpoint may come early. Under exactly-once a window's results are
//! visible only at the commit after they were emitted; an operator subtask whose
//! watermark fired output notes it here, each source notes whether its last batch
//! emptied what its consumer held, and while every source is caught up the coordinator
//! starts the next checkpoint for the results rather than at the end of its interval.
//! A source that is behind holds it to the interval: catching up, firings come in every
//! batch and early checkpoints would only slow it down.

use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug)]
pub(crate) struct Pace {
    /// Output fired since the last barrier.
    fired: AtomicBool,
    /// Per source task: its last batch was full, so its consumer may hold more.
    behind: Box<[AtomicBool]>,
}

impl Pace {
    pub(crate) fn new(sources: usize) -> Self {
        Self { fired: AtomicBool::new(false), behind: (0..sources).map(|_| AtomicBool::new(false)).collect() }
    }

    /// Source `source` read a batch; `full` when it stopped at the batch's bound rather
    /// than at the end of what its consumer held.
    pub(crate) fn read(&self, source: usize, full: bool) {
        self.behind[source].store(full, Ordering::Relaxed);
    }

    /// An operator subtask's watermark fired output. True for the first since the last
    /// barrier: that one wakes the coordinator.
    pub(crate) fn fire(&self) -> bool {
        !self.fired.swap(true, Ordering::Relaxed)
    }

    /// Results wait for a commit and every source has caught up.
    pub(crate) fn wants_checkpoint(&self) -> bool {
        self.waiting() && !self.behind.iter().any(|behind| behind.load(Ordering::Relaxed))
    }

    /// Results wait for a commit, whether or not the sources have caught up.
    pub(crate) fn waiting(&self) -> bool {
        self.fired.load(Ordering::Relaxed)
    }

    /// A barrier is on its way: what fired before it commits with it.
    pub(crate) fn barrier(&self) {
        self.fired.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_want_a_checkpoint_once_every_source_has_caught_up() {
        let pace = Pace::new(2);
        assert!(!pace.wants_checkpoint());
        pace.read(1, true);
        assert!(pace.fire(), "the first firing wakes the coordinator");
        assert!(!pace.fire(), "later ones do not");
        assert!(!pace.wants_checkpoint(), "source 1 is behind");
        pace.read(1, false);
        assert!(pace.wants_checkpoint());
        pace.barrier();
        assert!(!pace.wants_checkpoint());
        assert!(pace.fire(), "after a barrier a firing wakes it again");
    }
}
