//! How `weir run` fails, against the real broker: a held store, a takeover that fences
//! the old instance, poison records, and bad input. Each failure is a clear error and a
//! non-zero exit, and the committed output stays exact. Then the operational limits a
//! running job must not hit: a lag gauge that freezes, a second job on the same host,
//! an input partition that never receives a record.

use crate::support;

use std::time::{Duration, Instant};

use support::clicks::{self, Clicks};
use support::job::{self, JobDir};
use support::{Isolation, Tail};

pub(crate) const PARTITIONS: i32 = 2;
pub(crate) const WINDOW_MS: i64 = 1000;

fn log_of(job: &JobDir, name: &str) -> std::path::PathBuf {
    job.dir.path().join(name)
}

/// Starts the job, which must refuse to start: exits within a minute, unsuccessfully;
/// returns its log (`name` in the job's directory).
fn refused_start(job: &JobDir, name: &str) -> String {
    let log = log_of(job, name);
    let mut child = job::start(&job.path(), &log, &[]);
    let status = job::wait(&mut child, Duration::from_secs(60)).expect("weir must refuse to start");
    assert!(!status.success(), "weir exited with {status}:\n{}", job::read_log(&log));
    job::read_log(&log)
}

/// A window-count job (parallelism 2, 200 ms checkpoints) over `records` clicks on
/// `PARTITIONS` partitions, produced before it starts.
pub(crate) fn window_count_job(prefix: &str, records: usize) -> (JobDir, Vec<clicks::Input>) {
    let job = job::job_dir(prefix);
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.window_count(2, 200, WINDOW_MS as u64, "");
    let mut clicks = Clicks::new(3, PARTITIONS, 100);
    let mut input = clicks.take(records);
    input.extend(clicks.flush());
    support::produce(&job.input, &input);
    (job, input)
}

fn assert_exact(job: &JobDir, input: &[clicks::Input]) {
    let expected = clicks::window_counts(input, WINDOW_MS);
    let actual = clicks::as_multiset(&support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted));
    assert!(actual == expected, "{}", clicks::difference(&expected, &actual));
}

/// The consumer lag each input partition's gauge shows, from a metrics scrape.
fn consumer_lag(metrics: &str, topic: &str) -> std::collections::BTreeMap<i32, i64> {
    let prefix = format!("weir_consumer_lag{{topic=\"{topic}\",partition=\"");
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (partition, value) = rest.split_once("\"} ")?;
            Some((partition.parse().ok()?, value.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn consumer_lag_reads_zero_once_the_input_is_drained() {
    let (job, input) = window_count_job("lag", 20_000);
    let log = log_of(&job, "weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    // A committed checkpoint means every source has its partitions: each has a lag
    // series from then on, whenever the once-a-second refresh comes.
    job::wait_for_log(&log, "checkpoint committed", Duration::from_secs(60));
    let first = job::scrape_metrics(&log);
    let lag = consumer_lag(&first, &job.input);
    assert_eq!(lag.len(), PARTITIONS as usize, "a lag series per assigned partition, at once: {lag:?}\n{first}");
    let owned = format!("weir_owned_partitions {PARTITIONS}\n");
    assert!(first.contains(&owned), "a single process owns every input partition:\n{first}");
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(clicks::window_counts(&input, WINDOW_MS).len(), Duration::from_secs(120)), "{}", job::read_log(&log));

    // Everything is read: the gauge must come down to 0 without another record arriving.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lag = consumer_lag(&job::scrape_metrics(&log), &job.input);
    while !(lag.len() == PARTITIONS as usize && lag.values().all(|&l| l == 0)) {
        assert!(Instant::now() < deadline, "consumer lag of a drained input still reads {lag:?}");
        std::thread::sleep(Duration::from_millis(200));
        lag = consumer_lag(&job::scrape_metrics(&log), &job.input);
    }
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
    assert_exact(&job, &input);
}

#[test]
fn two_jobs_on_one_host_both_start_with_the_default_metrics_address() {
    let (first, first_input) = window_count_job("two-a", 2_000);
    let (second, second_input) = window_count_job("two-b", 2_000);
    let first_log = log_of(&first, "weir.log");
    let second_log = log_of(&second, "weir.log");
    let mut a = job::start_with_default_metrics(&first.path(), &first_log);
    job::wait_for_log(&first_log, "metrics at http://", Duration::from_secs(60));
    let mut b = job::start_with_default_metrics(&second.path(), &second_log);
    job::wait_for_log(&second_log, "metrics at http://", Duration::from_secs(60));

    // Whichever job got 127.0.0.1:9464 (or another process has it), the second did not:
    // it says so, names the address and how to choose one, and serves elsewhere.
    job::wait_for_log(&second_log, "default address 127.0.0.1:9464 is unavailable", Duration::from_secs(5));
    job::wait_for_log(&second_log, "--metrics-addr", Duration::from_secs(5));
    for (job, input, log, child) in [(&first, &first_input, &first_log, &mut a), (&second, &second_input, &second_log, &mut b)] {
        let mut tail = Tail::new(&job.output, PARTITIONS);
        assert!(tail.until_while(clicks::window_counts(input, WINDOW_MS).len(), Duration::from_secs(120), child), "{}", job::read_log(log));
        assert!(job::scrape_metrics(log).contains("weir_last_committed_checkpoint"), "no metrics served:\n{}", job::read_log(log));
    }
    assert!(job::terminate(&mut a, Duration::from_secs(60)).success(), "{}", job::read_log(&first_log));
    assert!(job::terminate(&mut b, Duration::from_secs(60)).success(), "{}", job::read_log(&second_log));
    assert_exact(&first, &first_input);
    assert_exact(&second, &second_input);
}

#[test]
fn a_partition_that_never_receives_a_record_stops_holding_the_watermark() {
    // Four input partitions, records in 0 and 1 only; three source tasks own {0, 3},
    // {1} and {2}: one task has an idle partition, another has nothing but one.
    const INPUT_PARTITIONS: i32 = 4;
    let job = job::job_dir("idle");
    support::create_topic(&job.input, INPUT_PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    let plugin = support::plugin("window-count");
    let body = format!(
        "[source]\nbrokers = \"{brokers}\"\ntopic = \"{input}\"\nidle_timeout_ms = 500\n\
         [[operators]]\nname = \"count\"\nplugin = \"{plugin}\"\nkey_by = true\n\
         [operators.config]\nwindow_ms = \"{WINDOW_MS}\"\n\
         [sink]\nbrokers = \"{brokers}\"\ntopic = \"{output}\"\n",
        brokers = support::brokers(),
        input = job.input,
        output = job.output,
        plugin = plugin.display(),
    );
    job.write(3, 200, &body);
    let mut clicks = Clicks::new(5, 2, 100);
    let mut input = clicks.take(5_000);
    input.extend(clicks.flush());
    support::produce(&job.input, &input);

    let log = log_of(&job, "weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    let expected = clicks::window_counts(&input, WINDOW_MS).len();
    let complete = tail.until_while(expected, Duration::from_secs(60), &mut child);
    assert!(complete, "{} of {expected} windows fired; log:\n{}", tail.records.len(), job::read_log(&log));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
    let text = job::read_log(&log);
    for partition in [2, 3] {
        let named = format!("partition={partition}");
        let idle = text.lines().any(|line| line.contains("partition idle") && line.contains(&named));
        assert!(idle, "partition {partition} was never logged idle:\n{text}");
    }
    assert_exact(&job, &input);
}

#[test]
fn a_second_instance_on_a_held_state_dir_refuses_to_start() {
    let (job, input) = window_count_job("held", 2_000);
    let first_log = log_of(&job, "first.log");
    let mut first = job::start(&job.path(), &first_log, &[]);
    job::wait_for_log(&first_log, "checkpoint committed", Duration::from_secs(60));

    let second_log = log_of(&job, "second.log");
    let mut second = job::start(&job.path(), &second_log, &[]);
    let status = job::wait(&mut second, Duration::from_secs(30)).expect("the second instance must exit");
    assert!(!status.success());
    let text = job::read_log(&second_log);
    assert!(text.contains("in use by another weir process"), "unclear error:\n{text}");
    assert!(text.contains(&job.state_dir().display().to_string()), "the error must name the state_dir:\n{text}");

    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(clicks::window_counts(&input, WINDOW_MS).len(), Duration::from_secs(120)));
    assert!(job::terminate(&mut first, Duration::from_secs(60)).success());
    assert_exact(&job, &input);
}

#[test]
fn a_takeover_fences_the_old_instance_and_the_output_stays_exact() {
    let (job, input) = window_count_job("takeover", 30_000);
    let old_log = log_of(&job, "old.log");
    let mut old = job::start(&job.path(), &old_log, &[]);
    job::wait_for_log(&old_log, "checkpoint committed", Duration::from_secs(60));

    // Freeze the old instance and copy its store: a crash-consistent copy, as a
    // failover to another machine would have.
    // SAFETY: signals to a child we own.
    unsafe { libc::kill(old.id() as i32, libc::SIGSTOP) };
    let copy = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(job.state_dir())
        .arg(copy.path().join("state"))
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(job.path()).unwrap();
    let new_job = copy.path().join("job.toml");
    std::fs::write(&new_job, text).unwrap();

    let new_log = log_of(&job, "new.log");
    let mut new = job::start(&new_job, &new_log, &[]);
    job::wait_for_log(&new_log, "recovered; running", Duration::from_secs(60));
    // SAFETY: kill(2) on a child this test started; no memory is involved.
    unsafe { libc::kill(old.id() as i32, libc::SIGCONT) };

    let status = job::wait(&mut old, Duration::from_secs(90)).expect("the fenced instance must stop");
    assert!(!status.success(), "the fenced instance exited with {status}");
    let text = job::read_log(&old_log);
    assert!(text.contains("took over and fenced this one"), "unclear error:\n{text}");

    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(clicks::window_counts(&input, WINDOW_MS).len(), Duration::from_secs(120)), "{}", job::read_log(&new_log));
    assert!(job::terminate(&mut new, Duration::from_secs(60)).success());
    assert_exact(&job, &input);
}

/// Runs the window-count job until its whole output is committed, then stops it.
fn finish_window_count(job: &JobDir, input: &[clicks::Input], log_name: &str) {
    let log = log_of(job, log_name);
    let mut child = job::start(&job.path(), &log, &[]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(clicks::window_counts(input, WINDOW_MS).len(), Duration::from_secs(120)), "{}", job::read_log(&log));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
}

/// A pass-through job with the plugin that panics on values starting with `poison`;
/// each poison value is distinct, so a lost one cannot hide behind a duplicated one.
pub(crate) fn poison_job(prefix: &str, dead_letter: bool) -> (JobDir, Vec<clicks::Input>, String) {
    let job = job::job_dir(prefix);
    let dlq = support::unique_name(&format!("{prefix}-dlq"));
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    support::create_topic(&dlq, 1);
    let sink_extra = if dead_letter { format!("dead_letter_topic = \"{dlq}\"") } else { String::new() };
    let plugin = support::plugin("bad-trap");
    job.one_operator(2, 200, ("passthrough", &plugin, false), "", &sink_extra);
    let input: Vec<clicks::Input> = (0..2_000)
        .map(|i| {
            let value = if i % 500 == 250 { format!("poison-{i}") } else { format!("record-{i}") };
            ((i % PARTITIONS as usize) as i32, format!("k{i}").into_bytes(), value.into_bytes(), 1_000 + i as i64)
        })
        .collect();
    support::produce(&job.input, &input);
    (job, input, dlq)
}

/// Runs a pass-through job of operator `(name, plugin)` with `config` until 100
/// ordinary records are committed, then has `trigger` write the input record that makes
/// it emit one the sink cannot write: the job must stop at once (a restart would meet the
/// record again) without a restart, the records before committed and nothing of the
/// checkpoint that held it. `output` configures the output topic. Returns the job's log
/// and its output topic.
fn refused_record_stops_the_job(
    prefix: &str,
    output: &[(&str, &str)],
    (name, plugin, config): (&str, &str, &str),
    trigger: impl FnOnce(&str),
) -> (String, String) {
    let job = job::job_dir(prefix);
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic_with(&job.output, PARTITIONS, output);
    job.one_operator(2, 200, (name, &support::plugin(plugin), false), config, "");
    let (input, log, mut child, _) = hundred_committed(&job);
    trigger(&job.input);
    let status = job::wait(&mut child, Duration::from_secs(60)).unwrap_or_else(|| {
        job::kill(&mut child);
        panic!("weir went on after the record was refused:\n{}", job::read_log(&log))
    });
    let text = job::read_log(&log);
    assert!(!status.success(), "{text}");
    assert_eq!(text.matches("attempt failed").count(), 0, "a restart cannot cure it:\n{text}");
    let committed = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted);
    assert!(committed.iter().all(|(_, _, value)| value.len() < 1_000), "a refused record was committed");
    assert_eq!(committed.len(), input.len(), "the records before it are committed, the checkpoint holding it is not");
    (text, job.output.clone())
}

/// Starts `job` over 100 ordinary records and waits until they are committed, for a
/// test of one odd record after them. Returns the records, the log, the running process
/// and a reader of the output that has read them.
fn hundred_committed(job: &JobDir) -> (Vec<clicks::Input>, std::path::PathBuf, std::process::Child, Tail) {
    let input: Vec<clicks::Input> =
        (0..100).map(|i| (i % PARTITIONS, format!("k{i}").into_bytes(), format!("record-{i}").into_bytes(), 1_000)).collect();
    support::produce(&job.input, &input);
    let log = log_of(job, "weir.log");
    let child = job::start(&job.path(), &log, &[]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(input.len(), Duration::from_secs(60)), "{}", job::read_log(&log));
    (input, log, child, tail)
}

/// Has the bad-output plugin emit one record of the size its config says.
fn amplify(input: &str) {
    support::produce(input, &[(0, b"k".to_vec(), b"amplify".to_vec(), 2_000)]);
}

/// An operator that emits a record larger than the producer takes (2 MB against
/// librdkafka's 1 MB): the job says how big the record was, for which topic, and what
/// to change.
#[test]
fn a_record_larger_than_the_producer_takes_stops_the_job_saying_so() {
    let config = "[operators.config]\nbytes = \"2000000\"\ncopies = \"1\"\n";
    let (text, topic) = refused_record_stops_the_job("record-too-large", &[], ("big", "bad-output", config), amplify);
    let refused = format!("a record for topic `{topic}` with 2000000 bytes of key, value and headers");
    assert!(text.contains(&refused) && text.contains("message.max.bytes"), "unclear error:\n{text}");
}

/// The same with a record the producer takes but the broker refuses: the output topic's
/// max.message.bytes (200 kB) is below the 500 kB record. The job names the topic and
/// what to raise.
#[test]
fn a_record_larger_than_its_topic_takes_stops_the_job_saying_so() {
    let config = "[operators.config]\nbytes = \"500000\"\ncopies = \"1\"\n";
    let topic_limit = [("max.message.bytes", "200000")];
    let (text, topic) = refused_record_stops_the_job("record-refused", &topic_limit, ("big", "bad-output", config), amplify);
    let refused = format!("the broker refused records for topic `{topic}` as too large (one of them: 500000 bytes");
    assert!(text.contains(&refused) && text.contains("max.message.bytes=N"), "unclear error:\n{text}");
}

/// A record a topic never takes (no key, for a compacted topic): the job names the
/// topic and what to change.
#[test]
fn a_record_its_topic_refuses_stops_the_job_saying_why() {
    let compacted = [("cleanup.policy", "compact")];
    let keyless = |input: &str| support::produce_keyless(input, 0, b"no key");
    let (text, topic) = refused_record_stops_the_job("record-invalid", &compacted, ("passthrough", "bad-trap", ""), keyless);
    let refused = format!("the broker refused a record for topic `{topic}`");
    assert!(text.contains(&refused) && text.contains("only records with a key"), "unclear error:\n{text}");
}

/// A hundred records over `partitions` partitions, numbered from `from`.
fn numbered(partitions: i32, from: usize) -> Vec<clicks::Input> {
    (from..from + 100).map(|i| (i as i32 % partitions, format!("k{i}").into_bytes(), format!("r{i}").into_bytes(), 1_000)).collect()
}

/// Waits until `input` has arrived, stops the job and checks that the committed output
/// is `input`, each record once.
fn finish_exactly(job: &JobDir, mut child: std::process::Child, tail: &mut Tail, input: &[clicks::Input], log: &std::path::Path) {
    let arrived = tail.until(input.len(), Duration::from_secs(60));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(log));
    assert!(arrived, "the records did not all arrive:\n{}", job::read_log(log));
    let mut expected: Vec<(Vec<u8>, Vec<u8>)> = input.iter().map(|(_, key, value, _)| (key.clone(), value.clone())).collect();
    let mut actual: Vec<(Vec<u8>, Vec<u8>)> = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted)
        .into_iter()
        .map(|(_, key, value)| (key.unwrap(), value))
        .collect();
    expected.sort();
    actual.sort();
    assert!(actual == expected, "{} of {} records committed:\n{}", actual.len(), expected.len(), job::read_log(log));
}

/// Partitions added to the input between runs are read from their start, even with
/// `start = "latest"` (which holds only for a job's first run): their records all came
/// after the job's, and skipping them lost them.
#[test]
fn partitions_added_between_runs_are_read_from_their_start() {
    let job = job::job_dir("added-partitions");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.one_operator(1, 200, ("passthrough", &support::plugin("bad-trap"), false), "", "");
    let text = std::fs::read_to_string(job.path()).unwrap();
    let topic = format!("topic = \"{}\"", job.input);
    std::fs::write(job.path(), text.replacen(&topic, &format!("{topic}\nstart = \"latest\""), 1)).unwrap();

    let log = log_of(&job, "weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_log(&log, "recovered; running", Duration::from_secs(60));
    let mut input = numbered(PARTITIONS, 0);
    support::produce(&job.input, &input);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(input.len(), Duration::from_secs(60)), "{}", job::read_log(&log));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));

    support::add_partitions(&job.input, 2 * PARTITIONS as usize);
    let added = numbered(2 * PARTITIONS, 100);
    support::produce(&job.input, &added);
    input.extend(added);
    let child = job::start(&job.path(), &log, &[]);
    finish_exactly(&job, child, &mut tail, &input, &log);
}

/// Partitions added to the input while a job of one process runs are read without a
/// restart, from their start, each by the source task a restart would give it (three
/// tasks over two partitions: the third had none). Killed the moment it takes them,
/// the job reads them from their start again; killed once what it read of them is
/// committed, it resumes them where its checkpoint left them. Every record once.
#[test]
fn partitions_added_while_running_are_read_without_a_restart() {
    let job = job::job_dir("discovered-partitions");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.one_operator(3, 200, ("passthrough", &support::plugin("bad-trap"), false), "", "");
    let (mut input, log, mut child, mut tail) = hundred_committed(&job);
    let taken = "a partition added to the topic: read from there";
    let produce = |partitions: i32, from: usize, input: &mut Vec<clicks::Input>| {
        let records = numbered(partitions, from);
        support::produce(&job.input, &records);
        input.extend(records);
    };

    support::add_partitions(&job.input, PARTITIONS as usize + 2);
    produce(PARTITIONS + 2, 100, &mut input);
    // Tasks look every 10 s.
    job::wait_for_log(&log, taken, Duration::from_secs(30));
    job::kill(&mut child);
    let mut child = job::start(&job.path(), &log, &[]);
    assert!(tail.until(input.len(), Duration::from_secs(60)), "{}", job::read_log(&log));

    let before = job::count_in_log(&log, taken);
    support::add_partitions(&job.input, PARTITIONS as usize + 3);
    produce(PARTITIONS + 3, 200, &mut input);
    assert!(tail.until(input.len(), Duration::from_secs(60)), "{}", job::read_log(&log));
    assert_eq!(job::count_in_log(&log, taken), before + 1, "{}", job::read_log(&log));
    job::kill(&mut child);
    produce(PARTITIONS + 3, 300, &mut input);
    let child = job::start(&job.path(), &log, &[]);
    finish_exactly(&job, child, &mut tail, &input, &log);
    let text = job::read_log(&log);
    assert_eq!(text.matches("attempt failed").count(), 0, "{text}");
}

/// An operator's output reaches the next operator in batches of the size a source
/// reads: one input record that becomes 30 MB of records upstream is not handed whole
/// to a downstream operator whose memory is 16 MiB (which then ran out of memory, was
/// blamed for it and restarted).
#[test]
fn a_large_output_is_handed_to_the_next_operator_in_batches_it_can_hold() {
    let job = job::job_dir("recut");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    let downstream = format!(
        "[operators.config]\nbytes = \"100000\"\ncopies = \"300\"\n\n[[operators]]\nname = \"down\"\n\
         plugin = \"{}\"\nmemory_limit_mb = 16\n",
        support::plugin("bad-trap").display()
    );
    job.one_operator(2, 200, ("big", &support::plugin("bad-output"), false), &downstream, "");
    let (input, log, mut child, mut tail) = hundred_committed(&job);
    support::produce(&job.input, &[(0, b"k".to_vec(), b"amplify".to_vec(), 2_000)]);
    assert!(tail.until(input.len() + 300, Duration::from_secs(60)), "{}", job::read_log(&log));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
    let text = job::read_log(&log);
    assert_eq!(text.matches("attempt failed").count(), 0, "the downstream operator failed:\n{text}");
    let committed = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted);
    assert_eq!(committed.len(), input.len() + 300, "lost or duplicated records");
    assert_eq!(committed.iter().filter(|(_, _, value)| value.len() == 100_000).count(), 300);
}

#[test]
fn poison_records_go_to_the_dead_letter_topic_and_the_rest_is_exact() {
    let (job, input, dlq) = poison_job("poison-dlq", true);
    let log = log_of(&job, "weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let good: Vec<_> = input.iter().filter(|r| !r.2.starts_with(b"poison")).collect();
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(good.len(), Duration::from_secs(120)), "{}", job::read_log(&log));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
    // Each restart names its cause (the trap), never only the channels it closed.
    let text = job::read_log(&log);
    let restarts: Vec<&str> = text.lines().filter(|line| line.contains("attempt failed")).collect();
    assert!(!restarts.is_empty(), "the poison records must have failed attempts:\n{text}");
    for line in restarts {
        assert!(line.contains("trapped"), "a restart that does not name the trap:\n{line}\n{text}");
    }

    let committed = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted);
    let mut actual: Vec<(Vec<u8>, Vec<u8>)> = committed.into_iter().map(|(_, k, v)| (k.unwrap(), v)).collect();
    let mut expected: Vec<(Vec<u8>, Vec<u8>)> = good.iter().map(|r| (r.1.clone(), r.2.clone())).collect();
    actual.sort();
    expected.sort();
    assert_eq!(actual.len(), expected.len(), "lost or duplicated pass-through records");
    assert!(actual == expected);

    // Each poison record exactly once, as it was, with where it came from in its headers.
    let mut letters: Vec<(Vec<u8>, Vec<u8>, String)> = support::read_to_end_with_headers(&dlq, 1, Isolation::ReadCommitted)
        .into_iter()
        .map(|(_, key, value, headers)| {
            let header = |name: &str| {
                let found = headers.iter().find(|(k, _)| k == name);
                String::from_utf8(found.unwrap_or_else(|| panic!("a dead letter lacks header {name}")).1.clone()).unwrap()
            };
            assert!(!header("weir.error").is_empty(), "the dead letter's error header is empty");
            let origin = format!("{}/{}@{}", header("weir.source.topic"), header("weir.source.partition"), header("weir.source.offset"));
            (key.unwrap(), value, origin)
        })
        .collect();
    let mut poison: Vec<(Vec<u8>, Vec<u8>, String)> = input
        .iter()
        .enumerate()
        .filter(|(_, r)| r.2.starts_with(b"poison"))
        .map(|(i, r)| (r.1.clone(), r.2.clone(), format!("{}/{}@{}", job.input, r.0, i / PARTITIONS as usize)))
        .collect();
    letters.sort();
    poison.sort();
    assert_eq!(letters, poison, "the dead-letter topic must hold each poison record once, with its origin");
}

#[test]
fn a_poison_record_without_a_dead_letter_topic_stops_the_job_naming_it() {
    let (job, input, _) = poison_job("poison-stop", false);
    let log = log_of(&job, "weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let status = job::wait(&mut child, Duration::from_secs(120)).expect("the job must stop by itself");
    assert!(!status.success());
    let text = job::read_log(&log);
    let first = input.iter().position(|r| r.2.starts_with(b"poison")).unwrap();
    let (partition, offset) = (input[first].0, first / PARTITIONS as usize);
    let named = format!("{}/{partition}@{offset}", job.input);
    assert!(text.contains(&named), "the error must name {named}:\n{text}");
    assert!(text.contains("dead_letter_topic"), "the error must say how to keep going:\n{text}");
}

#[test]
fn bad_job_files_and_plugins_fail_with_errors_that_name_them() {
    let job = job::job_dir("bad");
    let cases: [(&str, &str); 3] = [
        ("[source]\nbrokers = \"x\"\ntopic = \"t\"\nspeed = 3\n", "speed"),
        ("[source]\nbrokers = \"x\"\n", "topic"),
        (
            "[source]\nbrokers = \"x\"\ntopic = \"t\"\n[[operators]]\nname = \"a\"\nplugin = \"missing.wasm\"\n[sink]\nbrokers = \"x\"\ntopic = \"o\"\n",
            "missing.wasm",
        ),
    ];
    for (body, named) in cases {
        job.write(1, 100, body);
        let output = job::weir().arg("run").arg(job.path()).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "accepted:\n{body}");
        assert!(stderr.contains(named), "error for\n{body}\ndoes not name `{named}`:\n{stderr}");
        assert!(stderr.contains("job.toml"), "error does not name the file:\n{stderr}");
    }
}

/// A job that cannot run fails before it creates anything: a bad operator config is
/// found by the plugin's `init` before the changelog topic exists.
#[test]
fn a_bad_operator_config_is_refused_before_any_topic_is_created() {
    let job = job::job_dir("bad-config");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.window_count(2, 200, 0, "");
    let log = log_of(&job, "weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let status = job::wait(&mut child, Duration::from_secs(60)).expect("weir exits");
    let text = job::read_log(&log);
    assert!(!status.success(), "a window of 0 ms was accepted:\n{text}");
    assert!(text.contains("window_ms") && text.contains("count"), "the error names neither the key nor the operator:\n{text}");
    let changelog = format!("{}-changelog", job.name);
    assert!(!support::topic_exists(&changelog), "the changelog `{changelog}` was created for a job that cannot run");
}

/// A job whose operators keep no state (no `key_by`) has no changelog topic, and its
/// output stays exact across a kill and a lost state_dir.
#[test]
fn a_stateless_job_creates_no_changelog_and_survives_a_lost_state_dir() {
    let job = job::job_dir("stateless");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.one_operator(2, 100, ("passthrough", &support::plugin("bad-trap"), false), "", "");
    let input: Vec<clicks::Input> = (0..20_000)
        .map(|i| ((i % PARTITIONS as usize) as i32, format!("k{i}").into_bytes(), format!("record-{i}").into_bytes(), 1_000 + i as i64))
        .collect();
    support::produce(&job.input, &input);
    let log = log_of(&job, "weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_more(&log, "checkpoint committed", 2, Duration::from_secs(60));
    job::kill(&mut child);
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    let mut child = job::start(&job.path(), &log, &[]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(input.len(), Duration::from_secs(120)), "{}", job::read_log(&log));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
    let mut expected: Vec<Vec<u8>> = input.iter().map(|record| record.2.clone()).collect();
    let mut actual: Vec<Vec<u8>> = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted).into_iter().map(|r| r.2).collect();
    expected.sort();
    actual.sort();
    assert!(actual == expected, "{} records committed for {} input records:\n{}", actual.len(), expected.len(), job::read_log(&log));
    let changelog = format!("{}-changelog", job.name);
    assert!(!support::topic_exists(&changelog), "a stateless job created the changelog `{changelog}`");
}

/// A sink or dead-letter topic that does not exist is refused by name; the broker is
/// never left to create it with one partition.
#[test]
fn a_missing_sink_or_dead_letter_topic_is_refused_by_name() {
    for missing_dlq in [false, true] {
        let job = job::job_dir("no-sink");
        support::create_topic(&job.input, PARTITIONS);
        let dlq = support::unique_name("no-sink-dlq");
        let sink_extra = format!("dead_letter_topic = \"{dlq}\"");
        if missing_dlq {
            support::create_topic(&job.output, PARTITIONS);
        }
        job.window_count(1, 200, WINDOW_MS as u64, &sink_extra);
        let log = log_of(&job, "weir.log");
        let mut child = job::start(&job.path(), &log, &[]);
        let status = job::wait(&mut child, Duration::from_secs(60)).expect("weir exits");
        let text = job::read_log(&log);
        let (key, topic) = if missing_dlq { ("dead_letter_topic", &dlq) } else { ("sink topic", &job.output) };
        assert!(!status.success(), "ran without its {key}:\n{text}");
        assert!(text.contains(key) && text.contains(topic.as_str()) && text.contains("does not exist"), "unclear error:\n{text}");
        assert!(!support::topic_exists(topic), "the broker created `{topic}`");
    }
}

#[test]
fn an_unreachable_broker_is_a_clear_error_within_seconds() {
    let job = job::job_dir("unreachable");
    let plugin = support::plugin("window-count");
    job.write(
        1,
        100,
        &format!(
            "[source]\nbrokers = \"127.0.0.1:1\"\ntopic = \"t\"\n[[operators]]\nname = \"c\"\nplugin = \"{}\"\n[operators.config]\nwindow_ms = \"1000\"\n[sink]\nbrokers = \"127.0.0.1:1\"\ntopic = \"o\"\n",
            plugin.display()
        ),
    );
    let started = Instant::now();
    let output = job::weir().arg("run").arg(job.path()).args(["--metrics-addr", "127.0.0.1:0"]).output().unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(stderr.contains("127.0.0.1:1") && stderr.contains("cannot reach Kafka"), "unclear error:\n{stderr}");
}

#[test]
fn a_corrupt_checkpoint_is_a_clear_error_and_commits_nothing() {
    let (job, input) = window_count_job("corrupt", 3_000);
    finish_window_count(&job, &input, "first.log");
    let before = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadUncommitted).len();

    {
        let db = rocksdb::DB::open_default(job.state_dir()).expect("opening the store directly");
        type Entry = (Box<[u8]>, Box<[u8]>);
        let entries: Vec<Entry> = db
            .iterator(rocksdb::IteratorMode::Start)
            .map(Result::unwrap)
            .filter(|(key, _)| key.ends_with(b"op/0/0"))
            .collect();
        assert!(!entries.is_empty(), "no snapshot entry of op/0/0 in the store");
        for (key, value) in entries {
            let mut value = value.to_vec();
            let last = value.len() - 1;
            value[last] ^= 0xff;
            db.put(key, value).unwrap();
        }
    }

    let text = refused_start(&job, "second.log");
    assert!(text.contains("corrupt") && text.contains("op/0/0"), "unclear error:\n{text}");
    let after = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadUncommitted).len();
    assert_eq!(before, after, "a refused start must write nothing");
}

/// A table file of the store damaged in its data (a block's checksum no longer
/// matches) opens, and fails when read: the job stops, saying the store is damaged and
/// what to do (it said to check that the disk was not full; a read that met such damage
/// while the job ran was retried until the restart budget ended).
#[test]
fn a_store_damaged_inside_a_table_file_stops_the_job_saying_so() {
    let job = job::job_dir("damaged-sst");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.window_count(2, 200, 600_000, "");
    let input = Clicks::new(11, PARTITIONS, 5_000).take(20_000);
    support::produce(&job.input, &input);
    let first = log_of(&job, "first.log");
    let mut child = job::start(&job.path(), &first, &[]);
    job::wait_for_committed_state(&first, Duration::from_secs(60));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&first));

    let tables: Vec<std::path::PathBuf> = std::fs::read_dir(job.state_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "sst"))
        .collect();
    assert!(!tables.is_empty(), "no table file in the store");
    for table in &tables {
        let mut bytes = std::fs::read(table).unwrap();
        // Data blocks come first; the index and footer at the end stay whole.
        let third = bytes.len() / 3;
        for byte in &mut bytes[64..third] {
            *byte ^= 0x5a;
        }
        std::fs::write(table, bytes).unwrap();
    }
    let before = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadUncommitted).len();
    let text = refused_start(&job, "second.log");
    assert!(text.contains("found the store damaged") && text.contains("delete the state_dir") && text.contains(&*job.state_dir().to_string_lossy()), "unclear error:\n{text}");
    assert_eq!(text.matches("attempt failed").count(), 0, "a restart cannot cure it:\n{text}");
    let after = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadUncommitted).len();
    assert_eq!(before, after, "a refused start must write nothing");
}

#[test]
fn a_lost_state_dir_and_changelog_is_a_clear_error_and_commits_nothing() {
    let (job, input) = window_count_job("lost-store", 2_000);
    finish_window_count(&job, &input, "first.log");

    std::fs::remove_dir_all(job.state_dir()).unwrap();
    support::delete_topic(&format!("{}-changelog", job.name));
    let text = refused_start(&job, "second.log");
    assert!(text.contains("changelog topic") && text.contains("does not exist") && text.contains("state is lost"), "unclear error:\n{text}");
    assert_exact(&job, &input);
}

/// A job file that sets no key groups takes its input's default (128 here), but the
/// job's checkpoints were taken with 32: with the state_dir lost, the state is rebuilt
/// from the changelog by the count its checkpoint record names, and the job goes on,
/// exact. A job file that names yet another count is refused with the count to set.
#[test]
fn a_lost_state_dir_is_rebuilt_with_the_key_groups_the_changelog_recorded() {
    let job = job::job_dir("lost-store-groups");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.window_count(2, 200, WINDOW_MS as u64, "");
    let mut clicks = Clicks::new(5, PARTITIONS, 100);
    let mut input = clicks.take(3_000);
    support::produce(&job.input, &input);
    let first = log_of(&job, "first.log");
    let mut child = job::start(&job.path(), &first, &[]);
    job::wait_for_more(&first, "checkpoint committed", 0, Duration::from_secs(60));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&first));
    assert!(job::read_log(&first).contains("key_groups=32"), "{}", job::read_log(&first));

    job.set_key_groups(64);
    std::fs::remove_dir_all(job.state_dir()).unwrap();
    let text = refused_start(&job, "refused.log");
    assert!(text.contains("key_groups = 64") && text.contains("set key_groups = 32"), "unclear error:\n{text}");

    let unset = std::fs::read_to_string(job.path()).unwrap().replace("key_groups = 64\n", "");
    std::fs::write(job.path(), unset).unwrap();
    let rest: Vec<clicks::Input> = clicks.take(2_000).into_iter().chain(clicks.flush()).collect();
    support::produce(&job.input, &rest);
    input.extend(rest);
    std::fs::remove_dir_all(job.state_dir()).ok();
    finish_window_count(&job, &input, "second.log");
    let text = job::read_log(&log_of(&job, "second.log"));
    assert!(text.contains("key_groups=32"), "the job must go on with the recorded key groups:\n{text}");
    assert_exact(&job, &input);
}

/// A job stopped once, its store flushed at checkpoint k, then SIGKILLed: its later
/// folds, unlogged, are lost, and the prunes of older checkpoints, logged, may remove
/// k's entry (pruned by hand here, so that it always is). The job file then drops its
/// key groups, so the input's default (128) is tried first: its replay of the
/// changelog's tail fails, then its replay of the whole changelog, which empties the
/// store first. The replay by the recorded 32 must then read the whole changelog too,
/// not the tail alone. Its windows stay open through the kills, so state lost anywhere
/// shows in the output, which is exact.
#[test]
fn a_store_behind_its_checkpoint_is_caught_up_by_the_recorded_key_groups() {
    const LONG_WINDOW_MS: i64 = 600_000;
    let job = job::job_dir("behind-groups");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.window_count(2, 200, LONG_WINDOW_MS as u64, "");
    let mut clicks = Clicks::new(9, PARTITIONS, 100);
    let mut input = clicks.take(3_000);
    support::produce(&job.input, &input);
    let first = log_of(&job, "first.log");
    let mut child = job::start(&job.path(), &first, &[]);
    job::wait_for_committed_state(&first, Duration::from_secs(60));
    // Records of three keys: the changelog partitions they write move the store's
    // positions past the first state of every other key there, which only a replay of
    // the whole changelog reads again.
    let few: Vec<clicks::Input> = clicks.take(1_000).into_iter().filter(|record| [&b"user-0"[..], b"user-1", b"user-2"].contains(&&record.1[..])).collect();
    let committed = job::committed_states(&job::read_log(&first));
    support::produce(&job.input, &few);
    input.extend(few);
    job::wait_until_more_committed_state(&first, committed, Duration::from_secs(60));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&first));
    let second = log_of(&job, "second.log");
    let mut child = job::start(&job.path(), &second, &[]);
    job::wait_for_more(&second, "checkpoint committed", 2, Duration::from_secs(60));
    job::kill(&mut child);
    let store = weir::checkpoint::store::CheckpointStore::open(&job.state_dir(), &job.name).expect("the state_dir opens");
    store.prune_before(u64::MAX).expect("pruning the store's checkpoints");
    drop(store);

    let unset = std::fs::read_to_string(job.path()).unwrap().replace(&format!("key_groups = {}\n", job::KEY_GROUPS), "");
    std::fs::write(job.path(), unset).unwrap();
    let rest: Vec<clicks::Input> = clicks.take(2_000).into_iter().chain(clicks.flush()).collect();
    support::produce(&job.input, &rest);
    input.extend(rest);
    let expected = clicks::window_counts(&input, LONG_WINDOW_MS);
    let third = log_of(&job, "third.log");
    let mut child = job::start(&job.path(), &third, &[]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    let complete = tail.until_while(expected.len(), Duration::from_secs(180), &mut child);
    assert!(complete, "output incomplete ({} of {}):\n{}", tail.records.len(), expected.len(), job::read_log(&third));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&third));
    let text = job::read_log(&third);
    assert!(text.contains("replaying by them") && text.contains("key_groups=32"), "no replay by the recorded key groups:\n{text}");
    let actual = clicks::as_multiset(&support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted));
    assert!(actual == expected, "{}\n{text}", clicks::difference(&expected, &actual));
}

#[test]
fn foreign_records_in_the_changelog_are_a_clear_error() {
    let (job, input) = window_count_job("foreign-changelog", 1_000);
    finish_window_count(&job, &input, "first.log");
    let changelog = format!("{}-changelog", job.name);
    support::produce(&changelog, &[(3, b"a key".to_vec(), b"a value".to_vec(), 1)]);

    std::fs::remove_dir_all(job.state_dir()).unwrap();
    let text = refused_start(&job, "second.log");
    assert!(text.contains("holds a record weir did not write") && text.contains("partition 3"), "unclear error:\n{text}");
    assert_exact(&job, &input);
}

/// Starts a fresh window-count job whose changelog topic was created beforehand, with
/// `partitions` and the broker's default configuration; weir must refuse to start.
/// Returns its log.
fn start_on_a_changelog_made_beforehand(prefix: &str, partitions: i32) -> String {
    let job = job::job_dir(prefix);
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    support::create_topic(&format!("{}-changelog", job.name), partitions);
    job.window_count(2, 200, WINDOW_MS as u64, "");
    refused_start(&job, "weir.log")
}

#[test]
fn a_changelog_with_the_wrong_partition_count_is_refused() {
    let partitions = job::KEY_GROUPS + 1;
    let text = start_on_a_changelog_made_beforehand("changelog-partitions", partitions as i32);
    let expected = format!("has {partitions} partitions but the job has {} key groups", job::KEY_GROUPS);
    assert!(text.contains(&expected), "unclear error:\n{text}");
}

#[test]
fn records_deleted_past_the_checkpoint_stop_the_job_instead_of_being_skipped() {
    let (job, input) = window_count_job("retention", 2_000);
    finish_window_count(&job, &input, "first.log");

    // More input arrives and is deleted before the job reads it.
    let later: Vec<clicks::Input> = (0..100).map(|i| (0, b"late".to_vec(), b"{}".to_vec(), clicks::FLUSH_MS + i)).collect();
    support::produce(&job.input, &later);
    let end = input.iter().filter(|r| r.0 == 0).count() as i64 + later.len() as i64;
    support::delete_records(&job.input, 0, end - 10);

    let second = log_of(&job, "second.log");
    let mut child = job::start(&job.path(), &second, &[]);
    let status = job::wait(&mut child, Duration::from_secs(60)).expect("weir must stop by itself");
    assert!(!status.success());
    let text = job::read_log(&second);
    assert!(text.contains("no longer on") && text.contains(&job.input), "unclear error:\n{text}");
    assert_exact(&job, &input);
}

#[test]
#[cfg_attr(not(feature = "fault-injection"), ignore = "needs WEIR_FAULT: build with --features fault-injection, as scripts/test does")]
fn a_panicking_task_fails_the_attempt_at_once_and_names_the_task() {
    let (job, input) = window_count_job("panic", 2_000);
    job.window_count(2, 200, WINDOW_MS as u64, "[restarts]\nmax = 1\nbackoff_initial_ms = 100\n");
    let log = log_of(&job, "weir.log");
    let started = Instant::now();
    // Every attempt panics at its first checkpoint; the checkpoint timeout is 60 s, so an
    // exit within 30 s shows each panic ended its attempt at once.
    let mut child = job::start(&job.path(), &log, &[("WEIR_FAULT", "panic-in-operator:1")]);
    let status = job::wait(&mut child, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("a panicking task must fail the job within 30 s; log:\n{}", job::read_log(&log)));
    assert!(!status.success(), "{}", job::read_log(&log));
    let text = job::read_log(&log);
    assert!(text.contains("restarting from the last committed checkpoint"), "the first panic must restart the job:\n{text}");
    let plugin = support::plugin("window-count");
    let named = "operator `count` subtask";
    assert!(text.contains(named) && text.contains(&plugin.display().to_string()), "the failure must name the task and plugin:\n{text}");
    assert!(text.contains("panicked: WEIR_FAULT: panicking at PanicInOperator of checkpoint 1"), "the panic message must be kept:\n{text}");
    eprintln!("a panicking task stopped the job after {:?}", started.elapsed());

    // Nothing was committed, and a run without the fault still produces the exact output.
    assert!(support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted).is_empty());
    finish_window_count(&job, &input, "after.log");
    assert_exact(&job, &input);
}

/// Runs bad-output with config `state = "<mode>"` until the job stops by itself;
/// returns its log. Nothing may be committed.
fn run_bad_state(prefix: &str, mode: &str, key_by: bool) -> String {
    let job = job::job_dir(prefix);
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    let plugin = support::plugin("bad-output");
    let config = format!("[operators.config]\nstate = \"{mode}\"\n");
    job.one_operator(2, 100, ("bad", &plugin, key_by), &config, "");
    let input: Vec<clicks::Input> =
        (0..100).map(|i| ((i % PARTITIONS as usize) as i32, format!("k{i}").into_bytes(), b"v".to_vec(), 1_000 + i as i64)).collect();
    support::produce(&job.input, &input);
    let log = log_of(&job, "weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let status = job::wait(&mut child, Duration::from_secs(60)).expect("the job must stop by itself");
    let text = job::read_log(&log);
    assert!(!status.success(), "{text}");
    let committed = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted);
    assert!(committed.is_empty(), "{} records committed by a job whose state was refused", committed.len());
    text
}

#[test]
fn state_from_an_operator_whose_input_is_not_keyed_stops_the_job() {
    let text = run_bad_state("state-unkeyed", "keys", false);
    assert!(text.contains("snapshot returned malformed state changes"), "{text}");
    assert!(text.contains("set key_by = true for operator `bad`"), "{text}");
}

#[test]
fn a_key_twice_in_one_round_stops_the_job() {
    let text = run_bad_state("state-twice", "twice", true);
    assert!(text.contains("comes twice in one round"), "{text}");
}

#[test]
fn a_state_key_of_another_subtask_stops_the_job() {
    // Both subtasks write key `k`; one of them does not own its key group.
    let text = run_bad_state("state-foreign", "foreign", true);
    assert!(text.contains("which subtask") && text.contains("does not own"), "{text}");
}

#[test]
fn state_changes_outside_their_chunk_stop_the_job() {
    let text = run_bad_state("state-outside", "outside", true);
    assert!(text.contains("points at bytes"), "{text}");
}

#[test]
fn malformed_state_chunks_stop_the_job_naming_the_plugin() {
    // The chunks `weir check` refuses, refused by a job through the same checks.
    let plugin = support::plugin("bad-output").display().to_string();
    for (prefix, mode, expected) in [
        ("state-removal", "removal-value", "is a removal with a value (value-offset 4294967040"),
        ("state-padded", "padded:32", "holds 33554432 data bytes in 0 entries"),
        ("state-alias", "alias:100000", "counted per entry (entries that share bytes count each time)"),
    ] {
        let text = run_bad_state(prefix, mode, true);
        let refused = text.lines().find(|line| line.contains("snapshot returned malformed state changes"));
        let refused = refused.unwrap_or_else(|| panic!("{mode}: no refusal in the log:\n{text}"));
        assert!(refused.contains(expected) && refused.contains(&plugin), "{mode}: {refused}");
    }
}

#[test]
fn a_changelog_the_broker_has_compacted_rebuilds_the_same_state() {
    // Aggressive compaction: segments roll every 100 ms and any dirt is worth cleaning.
    let job = job::job_dir("compacted");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    let changelog = format!("{}-changelog", job.name);
    let compaction = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "100"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("min.compaction.lag.ms", "0"),
        ("delete.retention.ms", "0"),
    ];
    support::create_topic_with(&changelog, job::CHANGELOG_PARTITIONS as i32, &compaction);
    job.window_count(2, 100, 60_000, "");
    // Few keys, many updates each: most changelog records are overwritten ones (a few keys
    // in each key group, whose segments hold them). No flush yet: the windows stay open,
    // so the state must survive the state_dir's loss.
    let mut clicks = Clicks::new(11, PARTITIONS, 200);
    let mut input = Vec::new();
    let first = log_of(&job, "first.log");
    let mut child = job::start(&job.path(), &first, &[]);
    for _ in 0..10 {
        let chunk = clicks.take(500);
        support::produce(&job.input, &chunk);
        input.extend(chunk);
        std::thread::sleep(Duration::from_millis(300)); // pacing: many checkpoints, many versions
    }
    job::wait_for_log(&first, "state_changes=", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&first));
    let written: usize = job::read_log(&first)
        .lines()
        .filter(|line| line.contains("checkpoint committed"))
        .filter_map(|line| line.split("state_changes=").nth(1)?.split_whitespace().next()?.parse::<usize>().ok())
        .sum();

    // Wait for the cleaner (it wakes every 15 s by default) to drop overwritten records.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut kept = usize::MAX;
    while Instant::now() < deadline {
        kept = support::read_to_end(&changelog, job::CHANGELOG_PARTITIONS as i32, Isolation::ReadCommitted).len();
        if kept * 2 < written {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(kept * 2 < written, "the changelog still holds {kept} of the {written} state records written");

    std::fs::remove_dir_all(job.state_dir()).unwrap();
    let flush = clicks.flush();
    support::produce(&job.input, &flush);
    input.extend(flush);
    let second = log_of(&job, "second.log");
    let mut child = job::start(&job.path(), &second, &[]);
    let expected = clicks::window_counts(&input, 60_000);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(expected.len(), Duration::from_secs(120)), "{}", job::read_log(&second));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&second));
    let text = job::read_log(&second);
    assert!(text.contains("replayed keyed state from the whole changelog"), "{text}");
    let actual = clicks::as_multiset(&support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted));
    assert!(actual == expected, "{}", clicks::difference(&expected, &actual));
    eprintln!("compacted changelog: {kept} of {written} state records left; rebuilt state exact");
}

#[test]
fn a_plugin_with_a_new_state_version_upgrades_the_checkpointed_state() {
    // upgrade-v1 counts per key in state version 1 (a u32); upgrade-v2 keeps version 2
    // (a struct of a u64) and reads version 1 through upgrade_state. Each emits every
    // record with its key's count so far, so the output of both runs together holds,
    // per key, exactly the counts 1..=n.
    let job = job::job_dir("upgrade");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    let records = |from: usize, to: usize| -> Vec<clicks::Input> {
        (from..to).map(|i| ((i % PARTITIONS as usize) as i32, format!("k{}", i % 37).into_bytes(), b"x".to_vec(), 1_000 + i as i64)).collect()
    };
    let (first, second) = (records(0, 1_500), records(1_500, 3_000));
    let run = |plugin: &str, input: &[clicks::Input], total: usize, log: &str| {
        job.one_operator(2, 100, ("count", &support::plugin(plugin), true), "", "");
        support::produce(&job.input, input);
        let log = log_of(&job, log);
        let mut child = job::start(&job.path(), &log, &[]);
        let mut tail = Tail::new(&job.output, PARTITIONS);
        assert!(tail.until(total, Duration::from_secs(120)), "{}", job::read_log(&log));
        assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
        job::read_log(&log)
    };
    run("upgrade-v1", &first, first.len(), "v1.log");
    let text = run("upgrade-v2", &second, first.len() + second.len(), "v2.log");
    assert!(text.contains("restored keyed state"), "{text}");

    let mut counts: std::collections::BTreeMap<Vec<u8>, Vec<u64>> = std::collections::BTreeMap::new();
    for (_, key, value) in support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted) {
        let count = String::from_utf8(value).unwrap().parse().unwrap();
        counts.entry(key.unwrap()).or_default().push(count);
    }
    assert_eq!(counts.len(), 37);
    for (key, mut seen) in counts {
        seen.sort_unstable();
        let n = seen.len() as u64;
        assert_eq!(seen, (1..=n).collect::<Vec<_>>(), "key {}", String::from_utf8_lossy(&key));
    }
}

#[test]
fn a_changelog_that_is_not_compacted_is_refused() {
    // Created with the broker's default cleanup.policy, delete: retention would drop state.
    let text = start_on_a_changelog_made_beforehand("changelog-policy", job::CHANGELOG_PARTITIONS as i32);
    assert!(text.contains("has cleanup.policy=delete") && text.contains("set cleanup.policy=compact"), "unclear error:\n{text}");
}

/// The last checkpoint `log` says committed.
fn last_committed(log: &std::path::Path) -> u64 {
    let text = job::read_log(log);
    let line = text.lines().rfind(|line| line.contains("checkpoint committed")).expect("a committed checkpoint");
    let at = line.find("checkpoint=").expect("checkpoint=") + "checkpoint=".len();
    line[at..].split(' ').next().unwrap().parse().expect("a checkpoint number")
}

/// A window-count job that stops (SIGTERM) with windows open: the state its state_dir
/// and changelog then hold. Returns its clicks, to go on with, and the input so far.
fn stop_with_open_windows(job: &JobDir, log: &std::path::Path) -> (Clicks, Vec<clicks::Input>) {
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    job.window_count(2, 200, WINDOW_MS as u64, "");
    let mut clicks = Clicks::new(5, PARTITIONS, 100);
    let input = clicks.take(3_000);
    support::produce(&job.input, &input);
    let mut child = job::start(&job.path(), log, &[]);
    job::wait_for_more(log, "checkpoint committed", 5, Duration::from_secs(60));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(log));
    (clicks, input)
}

/// Runs the job until one more checkpoint commits, then SIGKILLs it.
fn run_to_next_commit(job: &JobDir, log: &std::path::Path) {
    let before = job::count_in_log(log, "checkpoint committed");
    let mut child = job::start(&job.path(), log, &[]);
    job::wait_for_more(log, "checkpoint committed", before, Duration::from_secs(60));
    job::kill(&mut child);
}

/// A new machine after the reseed: the state_dir is deleted, the rest of the input
/// (windows completed by the flush) arrives, and the job's state comes from the
/// changelog alone; the committed output is exact.
fn finish_from_the_changelog_alone(job: &JobDir, log: &std::path::Path, (mut clicks, mut input): (Clicks, Vec<clicks::Input>)) {
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    let mut rest = clicks.take(2_000);
    rest.extend(clicks.flush());
    support::produce(&job.input, &rest);
    input.extend(rest);
    finish_window_count(job, &input, "last.log");
    assert_exact(job, &input);
    let last = job::read_log(&log_of(job, "last.log"));
    assert!(last.contains("rebuilding keyed state from the whole changelog"), "{last}");
    assert!(!job::read_log(log).contains("rebuilding keyed state"), "an earlier run rebuilt: the reseed was not tested");
}

#[test]
#[cfg_attr(not(feature = "fault-injection"), ignore = "needs WEIR_FAULT: build with --features fault-injection, as scripts/test does")]
fn a_deleted_changelog_is_written_again_from_the_state_dir() {
    use std::os::unix::process::ExitStatusExt;
    let job = job::job_dir("reseed-deleted");
    let log = log_of(&job, "weir.log");
    let so_far = stop_with_open_windows(&job, &log);
    support::delete_topic(&format!("{}-changelog", job.name));

    // The first reseed is killed before its last transaction commits.
    let fault = format!("during-reseed:{}", last_committed(&log));
    let mut child = job::start(&job.path(), &log, &[("WEIR_FAULT", fault.as_str())]);
    let status = job::wait(&mut child, Duration::from_secs(90)).expect("the fault fires");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{}", job::read_log(&log));
    // The next run writes it again, and commits it.
    run_to_next_commit(&job, &log);
    let text = job::read_log(&log);
    assert_eq!(job::count_in_log(&log, "lost the job's state"), 2, "{text}");
    assert!(text.contains("the topic did not exist") && text.contains("was interrupted"), "{text}");
    assert_eq!(job::count_in_log(&log, "wrote the state_dir's state into the changelog topic"), 1, "{text}");
    finish_from_the_changelog_alone(&job, &log, so_far);
}

#[test]
fn a_changelog_recreated_empty_is_written_again_from_the_state_dir() {
    let job = job::job_dir("reseed-recreated");
    let log = log_of(&job, "weir.log");
    let so_far = stop_with_open_windows(&job, &log);
    let changelog = format!("{}-changelog", job.name);
    support::delete_topic(&changelog);
    support::create_topic_with(&changelog, job::CHANGELOG_PARTITIONS as i32, &[("cleanup.policy", "compact")]);

    run_to_next_commit(&job, &log);
    let text = job::read_log(&log);
    assert!(text.contains("lost the job's state") && text.contains("it was recreated"), "{text}");
    // A healthy changelog is not written again.
    run_to_next_commit(&job, &log);
    assert_eq!(job::count_in_log(&log, "lost the job's state"), 1, "{}", job::read_log(&log));
    finish_from_the_changelog_alone(&job, &log, so_far);
}

/// A state_dir kept beside a changelog of eight partitions (what weir created before it
/// created four), whose topic is then deleted: weir creates it anew with today's count
/// and writes the state_dir's state into it by that count, so that the state then comes
/// back from the new changelog alone.
#[test]
fn a_deleted_changelog_of_eight_partitions_is_written_again_into_four() {
    let job = job::job_dir("reseed-eight");
    let changelog = format!("{}-changelog", job.name);
    support::create_topic_with(&changelog, 8, &[("cleanup.policy", "compact")]);
    let log = log_of(&job, "weir.log");
    let so_far = stop_with_open_windows(&job, &log);
    assert_eq!(support::partition_count(&changelog), 8, "the job took the changelog made beforehand as it was");
    support::delete_topic(&changelog);

    run_to_next_commit(&job, &log);
    let text = job::read_log(&log);
    assert!(text.contains("lost the job's state") && text.contains("the topic did not exist"), "{text}");
    assert_eq!(support::partition_count(&changelog), job::CHANGELOG_PARTITIONS as usize, "{text}");
    finish_from_the_changelog_alone(&job, &log, so_far);
}

/// Every line of `stderr` parsed as one JSON object; panics naming a line that is not.
fn json_lines(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}")))
        .collect()
}

/// `--log-format json`: a running job's log parses line by line, each line an object
/// with its time, level, target and fields (a committed checkpoint's number and
/// duration among them); a job that cannot start says why in a JSON line too.
#[test]
fn json_logs_parse_line_by_line() {
    let (job, input) = window_count_job("json-logs", 2_000);
    let log = log_of(&job, "weir.log");
    let stderr_log = std::fs::File::create(&log).expect("log file");
    let mut child = job::weir()
        .args(["--log-format", "json", "run"])
        .arg(job.path())
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stderr(stderr_log)
        .spawn()
        .expect("starting weir");
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(clicks::window_counts(&input, WINDOW_MS).len(), Duration::from_secs(120)), "{}", job::read_log(&log));
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
    let lines = json_lines(&job::read_log(&log));
    for line in &lines {
        for key in ["timestamp", "level", "target", "fields"] {
            assert!(line.get(key).is_some(), "no `{key}` in {line}");
        }
    }
    let committed = lines.iter().find(|line| line["fields"]["message"] == "checkpoint committed").expect("a committed checkpoint");
    assert!(committed["fields"]["checkpoint"].is_u64() && committed["fields"]["duration_ms"].is_u64(), "{committed}");

    let output = job::weir().args(["--log-format", "json", "run"]).arg(job.dir.path().join("missing.toml")).output().unwrap();
    assert!(!output.status.success());
    let lines = json_lines(&String::from_utf8_lossy(&output.stderr));
    let last = lines.last().expect("an error line");
    assert_eq!(last["level"], "ERROR", "{last}");
    assert!(last["fields"]["error"].as_str().is_some_and(|e| e.contains("missing.toml")), "{last}");
}
