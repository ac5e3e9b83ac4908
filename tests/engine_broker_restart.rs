//! The broker fails under a running job: it is frozen during the job's first commit while
//! the job is killed, and it is killed (not stopped) during a commit and started again.
//! Each time the committed output is still exact. Each test runs against a broker of its
//! own (`support::broker`), since the other tests share the main one meanwhile.

use crate::support;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use support::broker::PrivateBroker;
use support::clicks::{self, Clicks};
use support::job::{self, JobDir};
use support::{Isolation, Tail};

const PARTITIONS: i32 = 2;
const WINDOW_MS: i64 = 1000;
/// Logs the coordinator's line between seal and commit, which the tests wait for.
const LOG_SEALS: (&str, &str) = ("RUST_LOG", "info,weir::engine::coordinator=debug");
/// weir's exit code when a Kafka commit hung past its bound (README: start it again).
const EXIT_COMMIT_HUNG: i32 = 75;

/// Held by each test for its whole run, so that only one private broker (a JVM of up
/// to 1 GiB) runs beside the shared one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Freezes the broker with SIGSTOP until dropped.
struct Frozen<'a>(&'a PrivateBroker);

impl Frozen<'_> {
    fn broker(broker: &PrivateBroker) -> Frozen<'_> {
        assert!(broker.signal(libc::SIGSTOP), "the private broker must run");
        Frozen(broker)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        self.0.signal(libc::SIGCONT);
    }
}

fn window_count_job(prefix: &str) -> JobDir {
    let job = job::job_dir(prefix);
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.window_count(2, 200, WINDOW_MS as u64, "[restarts]\nmax = 20\nbackoff_max_ms = 2000\n");
    job
}

/// Reads the job's output until complete, restarting the job if it exited because a commit
/// hung past its bound (the documented way out of a librdkafka hang); then stops it and
/// compares the committed output with the reference. Returns how many such exits happened.
fn finish_exactly(job: &JobDir, mut child: Child, input: &[clicks::Input], log: &Path) -> usize {
    let expected = clicks::window_counts(input, WINDOW_MS);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut hung = 0;
    while !tail.until_while(expected.len(), Duration::from_secs(1), &mut child) {
        assert!(Instant::now() < deadline, "output incomplete ({} of {}); log:\n{}", tail.records.len(), expected.len(), job::read_log(log));
        if let Some(status) = child.try_wait().expect("waiting for weir") {
            assert_eq!(status.code(), Some(EXIT_COMMIT_HUNG), "weir exited with {status}; log:\n{}", job::read_log(log));
            hung += 1;
            child = job::start(&job.path(), log, &[LOG_SEALS]);
        }
    }
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "log:\n{}", job::read_log(log));
    let actual = clicks::as_multiset(&support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted));
    assert!(actual == expected, "{}", clicks::difference(&expected, &actual));
    hung
}

#[test]
fn a_job_killed_while_the_broker_stalls_its_first_commit_starts_again_exactly() {
    let _alone = one_at_a_time();
    let broker = PrivateBroker::start();
    let job = window_count_job("first-commit-stall");
    let mut clicks = Clicks::new(13, PARTITIONS, 200);
    let mut input = clicks.take(5_000);
    input.extend(clicks.flush());
    support::produce(&job.input, &input);

    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[LOG_SEALS]);
    job::wait_for_more(&log, "recovered; running", 0, Duration::from_secs(60));
    {
        // Checkpoint 1 is sealed locally, then its commit stalls on the frozen broker.
        let _frozen = Frozen::broker(&broker);
        job::wait_for_more(&log, "committing it in Kafka checkpoint=1", 0, Duration::from_secs(30));
        job::kill(&mut child);
    }
    // Recovery finds no committed checkpoint but a sealed checkpoint 1 in the store.
    let child = job::start(&job.path(), &log, &[LOG_SEALS]);
    let hung = finish_exactly(&job, child, &input, &log);
    assert_eq!(hung, 0, "no commit should hang once the broker runs again; log:\n{}", job::read_log(&log));
}

#[test]
fn a_job_recovers_when_the_broker_is_killed_during_a_commit() {
    let _alone = one_at_a_time();
    let broker = PrivateBroker::start();
    let job = window_count_job("broker-crash");
    let mut clicks = Clicks::new(5, PARTITIONS, 200);
    let mut input = clicks.take(10_000);
    support::produce(&job.input, &input);

    let log = job.dir.path().join("weir.log");
    let child = job::start(&job.path(), &log, &[LOG_SEALS]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(1, Duration::from_secs(60)), "no output before the broker crash");

    {
        // A checkpoint seals and its commit meets the frozen broker (it may be one already
        // committing when the broker froze); then the broker dies.
        let _frozen = Frozen::broker(&broker);
        let deadline = Instant::now() + Duration::from_secs(30);
        while job::count_in_log(&log, "checkpoint sealed") <= job::count_in_log(&log, "checkpoint committed") {
            assert!(Instant::now() < deadline, "no commit in flight within 30 s of the freeze:\n{}", job::read_log(&log));
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(broker.signal(libc::SIGKILL), "the broker died before it was killed");
    }
    let dead = Instant::now();
    while broker.pid().is_some() {
        assert!(dead.elapsed() < Duration::from_secs(30), "the killed broker did not exit within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    broker.run("start");
    eprintln!("the broker was down for {:?}", dead.elapsed());

    let more = clicks.take(10_000);
    support::produce(&job.input, &more);
    input.extend(more);
    let flush = clicks.flush();
    support::produce(&job.input, &flush);
    input.extend(flush);

    let hung = finish_exactly(&job, child, &input, &log);
    let restarts = job::count_in_log(&log, "restarting from the last committed checkpoint");
    eprintln!("after the broker crash: {restarts} in-process restarts, {hung} exits on a hung commit");
}

/// A sink on another cluster than the sources: exactly-once commits the input offsets in
/// the sink's transactions, on the sink's cluster, where a restart (reading them on the
/// sources' cluster) would not find them and start over. The job refuses to start,
/// naming both clusters, and writes nothing.
#[test]
fn an_exactly_once_sink_on_another_cluster_than_its_sources_is_refused() {
    let _alone = one_at_a_time();
    let shared = support::brokers();
    let job = job::job_dir("other-cluster");
    support::create_topic(&job.input, PARTITIONS);
    support::produce(&job.input, &Clicks::new(17, PARTITIONS, 20).take(200));
    let _broker = PrivateBroker::start();
    support::create_topic(&job.output, PARTITIONS);
    job.window_count(1, 200, WINDOW_MS as u64, "");
    let text = std::fs::read_to_string(job.path()).unwrap();
    let text = text.replacen(&format!("brokers = \"{}\"", support::brokers()), &format!("brokers = \"{shared}\""), 1);
    std::fs::write(job.path(), text).unwrap();

    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let status = job::wait(&mut child, Duration::from_secs(60)).unwrap_or_else(|| {
        job::kill(&mut child);
        panic!("weir ran with its sink on another cluster:\n{}", job::read_log(&log))
    });
    let text = job::read_log(&log);
    assert!(!status.success(), "{text}");
    assert!(text.contains("are Kafka cluster") && text.contains("the sources' are cluster"), "unclear error:\n{text}");
    assert!(support::read_to_end(&job.output, PARTITIONS, Isolation::ReadUncommitted).is_empty(), "it wrote output");
}
