//! End-to-end exactly-once through the real broker: the window-count job's committed
//! output equals a reference computation exactly, with and without the process being
//! SIGKILLed at random moments and at every step of the checkpoint protocol.

use crate::support;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use support::clicks::{self, Clicks};
use support::job::{self, JobDir, StateDir};
use support::{Isolation, Tail};


const PARTITIONS: i32 = 4;
const WINDOW_MS: i64 = 1000;

fn topics(job: &JobDir) {
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
}

/// Stops the job gracefully and checks the whole committed output against the reference.
/// Returns what the job's metrics endpoint served just before the stop.
fn stop_and_compare(job: &JobDir, child: &mut std::process::Child, input: &[clicks::Input], log: &std::path::Path) -> String {
    let expected = clicks::window_counts(input, WINDOW_MS);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    let complete = tail.until_while(expected.len(), Duration::from_secs(180), child);
    let metrics = job::scrape_metrics(log);
    let status = job::terminate(child, Duration::from_secs(60));
    let log_text = job::read_log(log);
    assert!(complete, "output incomplete after 180 s ({} of {}); log:\n{log_text}", tail.records.len(), expected.len());
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{log_text}");
    let committed = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted);
    let actual = clicks::as_multiset(&committed);
    assert!(actual == expected, "{}", clicks::difference(&expected, &actual));
    for (partition, key, _) in &committed {
        let key = key.as_deref().expect("window counts are keyed");
        assert_eq!(*partition, clicks::java_partition(key, PARTITIONS), "key {key:?} is not where a Java producer puts it");
    }
    metrics
}

#[test]
fn window_count_commits_exactly_the_reference_output() {
    let job = job::job_dir("wc-exact");
    topics(&job);
    job.window_count(2, 200, WINDOW_MS as u64, "");
    let mut clicks = Clicks::new(7, PARTITIONS, 300);
    let mut input = clicks.take(20_000);
    input.extend(clicks.flush());
    clicks::assert_keys_spread(&input, PARTITIONS);
    support::produce(&job.input, &input);

    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let metrics = stop_and_compare(&job, &mut child, &input, &log);
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("checkpoint committed"), "no checkpoint was logged:\n{log_text}");
    // Once every window has fired, nothing changes: an idle job's checkpoint holds no state.
    let last = log_text.lines().rfind(|line| line.contains("checkpoint committed")).unwrap();
    assert!(last.contains("state_changes=0"), "the final checkpoint still wrote state: {last}");
    let changed = log_text.lines().any(job::committed_state);
    assert!(changed, "no checkpoint wrote state changes:\n{log_text}");
    for series in [
        "weir_records_in_total{operator=\"count\",subtask=\"0\"}",
        "weir_records_out_total{operator=\"count\",subtask=\"1\"}",
        "weir_last_committed_checkpoint",
        "weir_checkpoint_duration_seconds",
        "weir_checkpoint_size_bytes",
        "weir_checkpoint_state_changes",
        "weir_checkpoint_state_change_bytes",
        "weir_restarts_total",
        "weir_consumer_lag",
    ] {
        assert!(metrics.contains(series), "metrics lack {series}:\n{metrics}");
    }
}

/// Windows that fire once the job has caught up with its input commit at once, not at
/// the end of the checkpoint interval: with checkpoints every 30 s the results are
/// visible well before the second, and exact.
#[test]
fn fired_windows_commit_before_the_interval_ends_once_the_input_is_read() {
    let job = job::job_dir("wc-early");
    topics(&job);
    job.window_count(2, 30_000, WINDOW_MS as u64, "");
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    // An attempt's first checkpoint comes early anyway; the next is due 30 s later.
    job::wait_for_log(&log, "checkpoint committed", Duration::from_secs(60));
    let mut clicks = Clicks::new(11, PARTITIONS, 100);
    let mut input = clicks.take(5_000);
    input.extend(clicks.flush());
    support::produce(&job.input, &input);

    let expected = clicks::window_counts(&input, WINDOW_MS);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    let complete = tail.until_while(expected.len(), Duration::from_secs(15), &mut child);
    let log_text = job::read_log(&log);
    assert!(complete, "{} of {} results visible after 15 s; log:\n{log_text}", tail.records.len(), expected.len());
    stop_and_compare(&job, &mut child, &input, &log);
}

#[test]
fn at_least_once_mode_runs_the_same_pipeline_without_transactions() {
    let job = job::job_dir("wc-alo");
    topics(&job);
    job.window_count(2, 200, WINDOW_MS as u64, "delivery = \"at-least-once\"");
    let mut clicks = Clicks::new(9, PARTITIONS, 300);
    let mut input = clicks.take(10_000);
    input.extend(clicks.flush());
    support::produce(&job.input, &input);

    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    // Without failures, at-least-once delivers exactly the reference too.
    let _ = stop_and_compare(&job, &mut child, &input, &log);
}

/// Kills at random moments: 20 by default, `WEIR_CRASH_KILLS` for a longer run.
fn random_kills() -> usize {
    std::env::var("WEIR_CRASH_KILLS").ok().and_then(|n| n.parse().ok()).unwrap_or(20)
}

/// Every step of the protocol, at the job's first checkpoint and at a later one, in the
/// order one job meets them: each run is killed by the switch at exactly that point.
const STEP_KILLS: [(&str, u64); 9] = [
    ("during-recovery", 0),
    ("after-barrier", 1),
    ("after-seal", 1),
    ("after-commit", 1),
    ("during-recovery", 1),
    ("after-barrier", 2),
    ("after-seal", 2),
    ("after-commit", 2),
    ("during-recovery", 2),
];

fn kill_at_every_protocol_step(job: &JobDir, log: &std::path::Path) {
    kill_at_steps(job, log, &STEP_KILLS);
    let text = std::fs::read_to_string(log).unwrap();
    for (step, n) in [("AfterBarrier", 1), ("AfterSeal", 1), ("AfterCommit", 1), ("DuringRecovery", 0), ("DuringRecovery", 2)] {
        assert!(text.contains(&format!("killing the process at {step} of checkpoint {n}\n")), "no kill at {step} of {n}");
    }
}

/// Runs the job once per `(step, checkpoint)`, each run killed by the switch at exactly that point.
fn kill_at_steps(job: &JobDir, log: &std::path::Path, steps: &[(&str, u64)]) {
    for &(step, n) in steps {
        let fault = format!("{step}:{n}");
        let mut child = job::start(&job.path(), log, &[("WEIR_FAULT", fault.as_str())]);
        let status = job::wait(&mut child, Duration::from_secs(90)).unwrap_or_else(|| {
            panic!("WEIR_FAULT={fault} did not fire within 90 s; log:\n{}", job::read_log(log))
        });
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "WEIR_FAULT={fault}: expected death by SIGKILL, got {status}; log:\n{}",
            job::read_log(log)
        );
    }
}

/// Input that keeps arriving while the job is being killed: 100,000 records in paced
/// chunks, then the flush records. Returns everything produced.
fn produce_while_killing(topic: &str, seed: u64) -> std::thread::JoinHandle<Vec<clicks::Input>> {
    produce_paced(topic, seed, 40)
}

/// The C or Go window count in a real job, SIGKILLed once after a few checkpoints, one
/// of them with state (the input may come after the first ones), and restarted without
/// its state_dir (its state comes back from the changelog alone), then at random moments
/// while input arrives: the committed output is exact.
fn port_survives_sigkill(plugin: &str) {
    let job = job::job_dir(plugin);
    topics(&job);
    job.window_count_in(plugin, 2, 100, WINDOW_MS as u64, "");
    let producer = produce_paced(&job.input, 11, 10);
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_more(&log, "checkpoint committed", 3, Duration::from_secs(60));
    job::wait_for_committed_state(&log, Duration::from_secs(60));
    job::kill(&mut child);
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_log(&log, "restored keyed state", Duration::from_secs(60));
    job::kill(&mut child);
    job::kill_at_random_moments(&job, &log, 4, support::crash_seed(), StateDir::Lost);
    let input = producer.join().expect("producer thread");
    let mut child = job::start(&job.path(), &log, &[]);
    stop_and_compare(&job, &mut child, &input, &log);
    let text = job::read_log(&log);
    assert!(text.contains("rebuilding keyed state from the whole changelog"), "no rebuild without the state_dir:\n{text}");
    let changelog = format!("{}-changelog", job.name);
    assert_eq!(support::partition_count(&changelog), job::CHANGELOG_PARTITIONS as usize, "several key groups in each partition");
    let restored = text.lines().find(|line| line.contains("restored keyed state")).expect("restored");
    assert!(!restored.contains("entries=0"), "the first restore found no state: {restored}");
    eprintln!("{plugin}: {restored}");
}

#[test]
fn c_window_count_survives_sigkill_and_a_lost_state_dir() {
    port_survives_sigkill("c-window-count");
}

#[test]
fn go_window_count_survives_sigkill_and_a_lost_state_dir() {
    port_survives_sigkill("go-window-count");
}

#[test]
#[cfg_attr(not(feature = "fault-injection"), ignore = "needs WEIR_FAULT: build with --features fault-injection, as scripts/test does")]
fn survives_sigkill_at_random_moments_and_at_every_protocol_step() {
    let job = job::job_dir("wc-crash");
    topics(&job);
    job.window_count(2, 100, WINDOW_MS as u64, "");
    let log = job.dir.path().join("weir.log");
    let kills = random_kills();
    let seed = support::crash_seed();

    let producer = produce_while_killing(&job.input, seed);
    kill_at_every_protocol_step(&job, &log);
    // Every fourth of these kills waits for the job to run (and a rebuild before it).
    let while_running = job::kill_at_random_moments(&job, &log, kills, seed, StateDir::Lost);
    let rebuilt = job::count_in_log(&log, "replayed keyed state from the whole changelog");
    assert!(rebuilt > 0, "no restart rebuilt its state from the changelog");
    // The kill after checkpoint 2's commit comes before its fold into the state_dir: the
    // next start replays only what the changelog holds after checkpoint 1.
    let caught_up = job::count_in_log(&log, "replayed keyed state from the changelog's tail");
    assert!(caught_up > 0, "no restart caught up from the changelog's tail");

    let input = producer.join().expect("producer thread");
    clicks::assert_keys_spread(&input, PARTITIONS);
    // The last kill comes once the job has caught up; the restart is timed up to its first commit.
    let mut child = job::start(&job.path(), &log, &[]);
    wait_for_another(&log, "checkpoint committed", Duration::from_secs(60));
    job::kill(&mut child);
    let killed = Instant::now();
    let mut child = job::start(&job.path(), &log, &[]);
    wait_for_another(&log, "checkpoint committed", Duration::from_secs(60));
    let recovery = killed.elapsed();
    let _ = stop_and_compare(&job, &mut child, &input, &log);
    eprintln!(
        "survived {} random kills ({while_running} in a running job, {rebuilt} restarts rebuilt from the \
         changelog, {caught_up} caught up from its tail) and {} protocol-step kills; checked {} input records; \
         kill → first new commit: {} ms",
        kills + 1,
        STEP_KILLS.len(),
        input.len(),
        recovery.as_millis()
    );
}

#[test]
fn at_least_once_loses_nothing_under_sigkill() {
    let job = job::job_dir("wc-alo-crash");
    topics(&job);
    job.window_count(2, 100, WINDOW_MS as u64, "delivery = \"at-least-once\"");
    let log = job.dir.path().join("weir.log");
    let seed = support::crash_seed();
    let producer = produce_while_killing(&job.input, seed);
    // Killed after a commit and before its fold: the restart replays the changelog's
    // tail, which must hold nothing of a later checkpoint (written outside transactions,
    // it would count records twice). Then killed with a checkpoint's changes in the
    // changelog and not committed, a checkpoint after the restart's first: a replay
    // from before that first checkpoint's fold would read them.
    kill_at_steps(&job, &log, &[("after-commit", 1), ("after-commit", 2), ("after-changes-sealed", 4)]);
    assert!(job::count_in_log(&log, "replayed keyed state from the changelog's tail") >= 1, "{}", job::read_log(&log));
    let while_running = job::kill_at_random_moments(&job, &log, 12, seed, StateDir::Kept);
    let input = producer.join().expect("producer thread");
    let expected = clicks::window_counts(&input, WINDOW_MS);
    let mut child = job::start(&job.path(), &log, &[]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    // Duplicates are allowed: read until every expected record has been seen at least once.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut missing: std::collections::BTreeSet<_> = expected.keys().cloned().collect();
    while !missing.is_empty() {
        let read = tail.records.len();
        tail.until_while(read + missing.len(), Duration::from_millis(500), &mut child);
        for (_, key, value) in &tail.records[read..] {
            missing.remove(&(key.clone().unwrap_or_default(), value.clone()));
        }
        assert!(
            Instant::now() < deadline,
            "at-least-once lost {} records, e.g. {:?}; log:\n{}",
            missing.len(),
            missing.iter().next().map(|(k, v)| (String::from_utf8_lossy(k), String::from_utf8_lossy(v))),
            job::read_log(&log)
        );
    }
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success());
    let skipped = "a replay of the changelog will start past the records that follow";
    assert!(job::count_in_log(&log, skipped) >= 1, "no restart skipped the uncommitted changes; log:\n{}", job::read_log(&log));
    let committed = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted);
    let actual = clicks::as_multiset(&committed);
    let lost = expected.keys().filter(|k| !actual.contains_key(*k)).count();
    let wrong = actual.keys().filter(|k| !expected.contains_key(*k)).count();
    assert_eq!((lost, wrong), (0, 0), "at-least-once: {}", clicks::difference(&expected, &actual));
    eprintln!(
        "at-least-once: {while_running} of 12 kills in a running job; {} records, {} duplicated",
        committed.len(),
        committed.len() - expected.len()
    );
}

/// Waits until the log has one more `needle` than it had when called.
fn wait_for_another(log: &std::path::Path, needle: &str, within: Duration) {
    job::wait_for_more(log, needle, job::count_in_log(log, needle), within);
}

fn produce_paced(topic: &str, seed: u64, chunks: usize) -> std::thread::JoinHandle<Vec<clicks::Input>> {
    clicks::produce_paced(topic, seed, PARTITIONS, chunks, false)
}

#[test]
fn rescaling_between_runs_keeps_the_output_exact() {
    // Parallelism 2, killed mid-stream; 3, stopped with SIGTERM; then 1 to the end. Each
    // run restores the key groups its subtasks own now from the previous run's state.
    let job = job::job_dir("wc-rescale");
    topics(&job);
    let log = job.dir.path().join("weir.log");
    let producer = produce_paced(&job.input, support::crash_seed(), 30);

    job.window_count(2, 100, WINDOW_MS as u64, "");
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_log(&log, "recovered; running", Duration::from_secs(60));
    for _ in 0..5 {
        wait_for_another(&log, "checkpoint committed", Duration::from_secs(60));
    }
    job::kill(&mut child);

    job.window_count(3, 100, WINDOW_MS as u64, "");
    let mut child = job::start(&job.path(), &log, &[]);
    for _ in 0..5 {
        wait_for_another(&log, "checkpoint committed", Duration::from_secs(60));
    }
    let status = job::terminate(&mut child, Duration::from_secs(60));
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{}", job::read_log(&log));

    let input = producer.join().expect("producer thread");
    job.window_count(1, 100, WINDOW_MS as u64, "");
    let mut child = job::start(&job.path(), &log, &[]);
    let _ = stop_and_compare(&job, &mut child, &input, &log);
    let text = job::read_log(&log);
    for parallelism in [3, 1] {
        let restored = text.lines().any(|line| {
            line.contains("restored keyed state") && line.contains(&format!("parallelism={parallelism}"))
        });
        assert!(restored, "no restore at parallelism {parallelism}:\n{text}");
    }
}

/// The state_dir deleted while a process's first recovery rebuilds it from the changelog
/// (slowed down so that the deletion lands in it): the process opens its store anew and
/// rebuilds again, as after a deletion under a running job, rather than exit; the
/// committed output is exact.
#[test]
#[cfg_attr(not(feature = "fault-injection"), ignore = "needs WEIR_FAULT: build with --features fault-injection, as scripts/test does")]
fn a_state_dir_deleted_during_the_first_recovery_is_rebuilt_and_the_job_goes_on() {
    let job = job::job_dir("wc-vanish-start");
    topics(&job);
    job.window_count(2, 100, WINDOW_MS as u64, "");
    let mut clicks = Clicks::new(29, PARTITIONS, 500);
    let mut input = clicks.take(15_000);
    support::produce(&job.input, &input);
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_committed_state(&log, Duration::from_secs(60));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");

    let slow = job.dir.path().join("slow.log");
    let mut child = job::start(&job.path(), &slow, &[("WEIR_FAULT", "slow-restore:50")]);
    job::wait_for_log(&slow, "replaying keyed state from the whole changelog", Duration::from_secs(60));
    // As `rm -rf` would, a deletion may fail partway while the store writes a file: again.
    while job.state_dir().exists() {
        let _ = std::fs::remove_dir_all(job.state_dir());
    }
    job::wait_for_log(&slow, "recovered; running", Duration::from_secs(120));
    if let Some(status) = job::wait(&mut child, Duration::ZERO) {
        panic!("weir exited with {status} after its state_dir was deleted; log:\n{}", job::read_log(&slow));
    }
    job::kill(&mut child);
    let text = job::read_log(&slow);
    let deleted = text.find("was deleted while the job ran");
    assert!(deleted.is_some_and(|at| at < text.find("recovered; running").unwrap_or(0)), "no deletion during the recovery:\n{text}");
    let flush = clicks.flush();
    support::produce(&job.input, &flush);
    input.extend(flush);
    let mut child = job::start(&job.path(), &log, &[]);
    stop_and_compare(&job, &mut child, &input, &log);
}

/// The state_dir deleted three times under a running process, while input arrives: the
/// process goes on (it opens its store anew and rebuilds the state from the changelog,
/// as on a new machine), never exits, and the committed output is exact.
#[test]
fn a_state_dir_deleted_under_a_running_job_is_rebuilt_and_the_job_goes_on() {
    let job = job::job_dir("wc-vanish");
    topics(&job);
    job.window_count(2, 100, WINDOW_MS as u64, "");
    let producer = produce_paced(&job.input, 23, 20);
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    for round in 0..3 {
        let committed = job::count_in_log(&log, "checkpoint committed");
        job::wait_for_more(&log, "checkpoint committed", committed + 2, Duration::from_secs(60));
        let reopened = job::count_in_log(&log, "opened the checkpoint store anew");
        // As `rm -rf` would, the deletion may fail partway when the store writes a file
        // meanwhile; weir clears what it left.
        let _ = std::fs::remove_dir_all(job.state_dir());
        job::wait_for_more(&log, "opened the checkpoint store anew", reopened, Duration::from_secs(60));
        if let Some(status) = job::wait(&mut child, Duration::ZERO) {
            panic!("weir exited with {status} after the state_dir's deletion {round}; log:\n{}", job::read_log(&log));
        }
        assert!(job.state_dir().join("CURRENT").is_file(), "the store was not created anew in {}", job.state_dir().display());
    }
    let input = producer.join().expect("producer thread");
    stop_and_compare(&job, &mut child, &input, &log);
    let text = job::read_log(&log);
    assert!(text.contains("was deleted while the job ran"), "the deletion was not reported:\n{text}");
    assert!(text.contains("rebuilding keyed state from the whole changelog"), "no rebuild after the deletion:\n{text}");
}
