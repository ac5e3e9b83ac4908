//! The broker goes away and comes back while a job runs: weir recovers by itself and
//! the committed output is still exact. Its own test binary, because it restarts the
//! broker every other test uses (cargo runs test binaries one at a time).

mod support;

use std::time::Duration;

use support::clicks::{self, Clicks};
use support::job;
use support::{Isolation, Tail};

const PARTITIONS: i32 = 2;
const WINDOW_MS: i64 = 1000;

fn broker(command: &str) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka/kafka");
    let status = std::process::Command::new("bash").arg(script).arg(command).status().expect("running scripts/kafka/kafka");
    assert!(status.success(), "scripts/kafka/kafka {command} failed");
}

#[test]
fn a_job_recovers_by_itself_when_the_broker_restarts() {
    let job = job::job_dir("broker-restart");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.window_count(2, 200, WINDOW_MS as u64, "[restarts]\nmax = 20\nbackoff_max_ms = 2000\n");
    let mut clicks = Clicks::new(5, PARTITIONS, 200);
    let mut input = clicks.take(10_000);
    support::produce(&job.input, &input);

    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(1, Duration::from_secs(60)), "no output before the restart");

    broker("stop");
    broker("start");

    let more = clicks.take(10_000);
    support::produce(&job.input, &more);
    input.extend(more);
    let flush = clicks.flush();
    support::produce(&job.input, &flush);
    input.extend(flush);

    let expected = clicks::window_counts(&input, WINDOW_MS);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    let complete = tail.until_while(expected.len(), Duration::from_secs(180), &mut child);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(complete, "output incomplete after the broker restart; log:\n{}", text());
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "log:\n{}", text());
    let actual = clicks::as_multiset(&support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted));
    assert!(actual == expected, "{}", clicks::difference(&expected, &actual));
}
