//! A test-only fault-injection switch: `WEIR_FAULT=<step>:<n>` kills the process with
//! SIGKILL when it reaches `<step>` of checkpoint `n` exactly (checkpoint 1 included), so
//! the crash tests can prove recovery from each step of the protocol; `panic-in-operator`
//! panics an operator task instead, `slow-restore:<ms>` slows a restore down,
//! `slow-commit:<ms>` every Kafka commit and `slow-fold:<ms>` every write of the folder.
//! Compiled in only with the `fault-injection` feature (the test suite's build); in the
//! binary users run, `point` is empty.

#[cfg(feature = "fault-injection")]
use std::sync::OnceLock;
#[cfg(feature = "fault-injection")]
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Barrier N injected into the sources, nothing of N durable yet.
    AfterBarrier,
    /// Every snapshot of N durable in the store, N not committed in Kafka.
    AfterSeal,
    /// As `AfterSeal`, at the first checkpoint from N on that changed keyed state: its
    /// changes are in the changelog (an at-least-once job's outside a transaction).
    AfterChangesSealed,
    /// N committed in Kafka, older checkpoints not yet pruned.
    AfterCommit,
    /// Restarting: producer fenced and checkpoint N loaded, tasks not yet running
    /// (N = 0 on a fresh start).
    DuringRecovery,
    /// An operator subtask received barrier N: it panics rather than snapshot.
    PanicInOperator,
    /// Rewriting the changelog from the state_dir's checkpoint N: every record sent, the
    /// last transaction not committed.
    DuringReseed,
    /// An operator subtask writing a base in checkpoint N or the first after it that
    /// writes one: the records it replaces removed and its chunks sent, its end not.
    InBase,
    /// An operator subtask wrote a snapshot round before barrier N, or before the first
    /// barrier after it that has one: its records delivered into N's open transaction.
    InEarlyRound,
}

#[cfg(feature = "fault-injection")]
impl Step {
    fn parse(name: &str) -> Option<Step> {
        match name {
            "after-barrier" => Some(Step::AfterBarrier),
            "after-seal" => Some(Step::AfterSeal),
            "after-changes-sealed" => Some(Step::AfterChangesSealed),
            "after-commit" => Some(Step::AfterCommit),
            "during-recovery" => Some(Step::DuringRecovery),
            "panic-in-operator" => Some(Step::PanicInOperator),
            "during-reseed" => Some(Step::DuringReseed),
            "in-base" => Some(Step::InBase),
            "in-early-round" => Some(Step::InEarlyRound),
            _ => None,
        }
    }
}

#[cfg(feature = "fault-injection")]
fn armed() -> Option<(Step, u64)> {
    static ARMED: std::sync::OnceLock<Option<(Step, u64)>> = std::sync::OnceLock::new();
    *ARMED.get_or_init(|| {
        let spec = std::env::var("WEIR_FAULT").ok()?;
        let (step, n) = spec.split_once(':')?;
        if matches!(step, "slow-restore" | "slow-commit" | "slow-fold") {
            return None; // not a kill: metrics::progress::pace, `slow_commit` and `slow_fold` read them
        }
        let parsed = Step::parse(step).zip(n.parse().ok());
        if parsed.is_none() {
            tracing::warn!(
                "ignoring WEIR_FAULT={spec}: expected \
                 <after-barrier|after-seal|after-changes-sealed|after-commit|during-recovery|panic-in-operator|during-reseed|in-base|in-early-round>:<checkpoint> \
                 or slow-restore:<ms>, slow-commit:<ms> or slow-fold:<ms>"
            );
        }
        parsed
    })
}

/// Does nothing: this build has no fault injection.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn point(_step: Step, _n: u64) {}

/// Does nothing: this build has no fault injection.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn slow_commit() {}

/// Does nothing: this build has no fault injection.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn slow_fold() {}

/// False: this build has no fault injection.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn early_rounds_forced() -> bool {
    false
}

/// With `WEIR_EARLY_ROUNDS=always`, operator subtasks run early snapshot rounds whenever
/// one is due, whatever their checkpoints cost: the crash tests prove the rounds exact on
/// input too small for them to pay.
#[cfg(feature = "fault-injection")]
pub(crate) fn early_rounds_forced() -> bool {
    std::env::var("WEIR_EARLY_ROUNDS").is_ok_and(|value| value == "always")
}

/// With `WEIR_FAULT=slow-commit:<ms>`, pauses that long before each Kafka commit, so that
/// the tasks run on while a checkpoint is in flight.
#[cfg(feature = "fault-injection")]
pub(crate) fn slow_commit() {
    static PAUSE: OnceLock<Option<Duration>> = OnceLock::new();
    pause_if_named(&PAUSE, "slow-commit:");
}

/// With `WEIR_FAULT=slow-fold:<ms>`, pauses that long before each of the folder's writes,
/// so that committed checkpoints wait for it and join.
#[cfg(feature = "fault-injection")]
pub(crate) fn slow_fold() {
    static PAUSE: OnceLock<Option<Duration>> = OnceLock::new();
    pause_if_named(&PAUSE, "slow-fold:");
}

/// Sleeps as long as `WEIR_FAULT=<prefix><ms>` says, read once into `pause`.
#[cfg(feature = "fault-injection")]
fn pause_if_named(pause: &OnceLock<Option<Duration>>, prefix: &str) {
    let pause = pause.get_or_init(|| {
        let spec = std::env::var("WEIR_FAULT").ok()?;
        let ms = spec.strip_prefix(prefix)?.parse().ok()?;
        Some(Duration::from_millis(ms))
    });
    if let Some(pause) = pause {
        std::thread::sleep(*pause);
    }
}

/// Does nothing: this build has no fault injection.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn point_after(_step: Step, _n: u64, _prepare: impl FnOnce()) {}

/// As `point`, running `prepare` first when the switch names this step and checkpoint
/// (what the kill must find done, such as records delivered).
#[cfg(feature = "fault-injection")]
pub(crate) fn point_after(step: Step, n: u64, prepare: impl FnOnce()) {
    if fires(step, n) {
        prepare();
        point(step, n);
    }
}

/// Whether the switch names this step and checkpoint.
#[cfg(feature = "fault-injection")]
fn fires(step: Step, n: u64) -> bool {
    let Some((armed_step, at)) = armed() else { return false };
    let reached = match step {
        // Which checkpoint writes a base or changes state depends on the input: the
        // first from `at` on.
        Step::InBase | Step::AfterChangesSealed | Step::InEarlyRound => n >= at,
        _ => n == at,
    };
    armed_step == step && reached
}

/// Kills the process here (or panics, for `PanicInOperator`) if the switch names this
/// step and checkpoint.
#[cfg(feature = "fault-injection")]
pub(crate) fn point(step: Step, n: u64) {
    if !fires(step, n) {
        return;
    }
    if step == Step::PanicInOperator {
        panic!("WEIR_FAULT: panicking at {step:?} of checkpoint {n}");
    }
    tracing::warn!("WEIR_FAULT: killing the process at {step:?} of checkpoint {n}");
    // SAFETY: kill(2) on our own pid with a constant signal has no memory effects.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}
