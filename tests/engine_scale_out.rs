//! Several processes of one job (`scale_out = true`) through the job's consumer group, on
//! the real broker: processes SIGKILLed at random and restarted, one joining and one
//! leaving, one paused past its session timeout and resumed; the committed output equals
//! the reference exactly every time. Input that is not co-partitioned by key is refused.

use crate::support;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, Producer};
use support::clicks::{self, Clicks};
use support::job::{self, JobDir};
use support::{Isolation, Tail};

const PARTITIONS: i32 = 8;
const OUTPUT_PARTITIONS: i32 = 4;
const WINDOW_MS: i64 = 1000;
/// Longer than the group's session timeout (6 s): the group has moved a paused process's
/// partitions by then.
const PAUSE: Duration = Duration::from_secs(10);
/// What a process logs when it runs a set of partitions.
const RUNNING: &str = "restored this process's partitions; running";

/// A window-count job with `scale_out = true` on an input of `PARTITIONS` partitions.
fn scale_out_job(prefix: &str) -> JobDir {
    let job = job::job_dir(prefix);
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, OUTPUT_PARTITIONS);
    job.window_count(1, 200, WINDOW_MS as u64, "");
    let text = std::fs::read_to_string(job.path()).expect("reading the job file");
    let top = format!("key_groups = {}\n", job::KEY_GROUPS);
    assert!(text.contains(&top), "the job file sets key_groups at the top");
    std::fs::write(job.path(), text.replace(&top, &format!("{top}scale_out = true\n"))).expect("writing the job file");
    job
}

/// One `weir run` of the job, with a log of its own (kept across its restarts).
struct Process {
    child: Child,
    log: PathBuf,
}

impl Process {
    fn start(job: &JobDir, index: usize) -> Process {
        let log = job.dir.path().join(format!("weir-{index}.log"));
        Process { child: job::start(&job.path(), &log, &[]), log }
    }

    fn restart(&mut self, job: &JobDir) {
        self.child = job::start(&job.path(), &self.log, &[]);
    }

    fn restart_with(&mut self, job: &JobDir, env: &[(&str, &str)]) {
        self.child = job::start(&job.path(), &self.log, env);
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on a child we own.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    fn log(&self) -> String {
        job::read_log(&self.log)
    }
}

fn logs(processes: &[Process]) -> String {
    processes.iter().enumerate().map(|(i, p)| format!("--- process {i} ---\n{}", p.log())).collect()
}

/// Waits until the output holds as many records as the reference, stops every process
/// with SIGTERM and compares the whole committed output with the reference.
fn stop_and_compare(job: &JobDir, processes: &mut [Process], input: &[clicks::Input]) {
    let expected = clicks::window_counts(input, WINDOW_MS);
    let mut tail = Tail::new(&job.output, OUTPUT_PARTITIONS);
    let complete = tail.until(expected.len(), Duration::from_secs(180));
    assert!(complete, "output incomplete after 180 s ({} of {}); logs:\n{}", tail.records.len(), expected.len(), logs(processes));
    for process in processes.iter_mut() {
        process.signal(libc::SIGTERM);
    }
    for process in processes.iter_mut() {
        let status = job::wait(&mut process.child, Duration::from_secs(60));
        assert!(status.is_some_and(|s| s.success()), "a process exited with {status:?} after SIGTERM; logs:\n{}", logs(processes));
    }
    let committed = support::read_to_end(&job.output, OUTPUT_PARTITIONS, Isolation::ReadCommitted);
    let actual = clicks::as_multiset(&committed);
    assert!(actual == expected, "{}\nlogs:\n{}", clicks::difference(&expected, &actual), logs(processes));
}

fn produce(job: &JobDir, chunks: usize) -> std::thread::JoinHandle<Vec<clicks::Input>> {
    clicks::produce_paced(&job.input, support::crash_seed(), PARTITIONS, chunks, true)
}

/// Waits until `process` has committed a checkpoint more than it had.
fn wait_for_commit(process: &Process) {
    job::wait_for_more(&process.log, "checkpoint committed", job::count_in_log(&process.log, "checkpoint committed"), Duration::from_secs(90));
}

#[test]
fn three_processes_killed_at_random_keep_the_output_exact() {
    let job = scale_out_job("so-kill");
    let mut random = support::crash_seed();
    let producer = produce(&job, 40);
    let mut processes: Vec<Process> = (0..3).map(|i| Process::start(&job, i)).collect();
    let mut kills = 0;
    while !producer.is_finished() {
        std::thread::sleep(Duration::from_millis(1000 + support::next_random(&mut random) % 3000));
        let victim = &mut processes[(support::next_random(&mut random) % 3) as usize];
        job::kill(&mut victim.child);
        victim.restart(&job);
        kills += 1;
    }
    let input = producer.join().expect("producer thread");
    assert!(kills >= 3, "only {kills} kills while the input arrived");
    stop_and_compare(&job, &mut processes, &input);
    let text = logs(&processes);
    assert!(text.contains("this process's partitions changed"), "no rebalance was logged:\n{text}");
}

/// What a scaled-out process's `/api/v1/job` says it is: its member id, the partitions
/// the group gave it, and the input partitions it shows; `None` until it answers.
fn shown_share(process: &Process) -> Option<(String, Vec<i64>, Vec<i64>)> {
    let status = job::status(&process.log)?;
    let group = &status["group"];
    let ids = |values: &serde_json::Value| values.as_array().map(|v| v.iter().filter_map(serde_json::Value::as_i64).collect::<Vec<i64>>());
    let shown = status["graph"]["sources"][0]["partitions"].as_array()?.iter().filter_map(|p| p["partition"].as_i64()).collect();
    Some((group["member_id"].as_str()?.to_owned(), ids(&group["owned_partitions"])?, shown))
}

#[test]
fn two_processes_show_shares_that_add_up_to_the_input() {
    let job = scale_out_job("so-status");
    let producer = produce(&job, 6);
    let mut processes: Vec<Process> = (0..2).map(|i| Process::start(&job, i)).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    let shares = loop {
        let shares: Vec<_> = processes.iter().map(shown_share).collect();
        if let [Some(a), Some(b)] = &shares[..] {
            let mut all: Vec<i64> = a.1.iter().chain(&b.1).copied().collect();
            all.sort_unstable();
            // Settled: the group's shares cover the input once, and each process shows its own.
            if a.0 != b.0 && all == (0..PARTITIONS as i64).collect::<Vec<_>>() && a.1 == a.2 && b.1 == b.2 && !a.1.is_empty() && !b.1.is_empty() {
                break shares;
            }
        }
        assert!(Instant::now() < deadline, "the processes' shares never added up to the input: {shares:?}\n{}", logs(&processes));
        std::thread::sleep(Duration::from_millis(250));
    };
    let input = producer.join().expect("producer thread");
    stop_and_compare(&job, &mut processes, &input);
    assert!(shares.iter().flatten().all(|share| !share.0.is_empty()), "{shares:?}");
}

/// A process killed while it writes a base of one of its key groups (its chunks sent,
/// its end not): the other takes the groups over from the bases and segments before,
/// and the output is exact. Twice, the second time with the state_dir gone too.
#[test]
fn a_process_killed_while_it_writes_a_base_keeps_the_output_exact() {
    let job = scale_out_job("so-base");
    // Input until both kills have fired: each waits for a base, which needs changes.
    let producer = clicks::produce_until(&job.input, support::crash_seed(), PARTITIONS, true);
    let mut processes: Vec<Process> = (0..2).map(|i| Process::start(&job, i)).collect();
    for round in 0..2 {
        let victim = &mut processes[round];
        job::kill(&mut victim.child);
        if round == 1 {
            let _ = std::fs::remove_dir_all(job.state_dir());
        }
        victim.restart_with(&job, &[("WEIR_FAULT", "in-base:1")]);
        let status = job::wait(&mut victim.child, Duration::from_secs(90));
        let killed = status.is_some_and(|status| status.signal() == Some(libc::SIGKILL));
        assert!(killed, "WEIR_FAULT=in-base:1 did not fire within 90 s ({status:?}); logs:\n{}", logs(&processes));
        processes[round].restart(&job);
    }
    let input = producer.finish();
    stop_and_compare(&job, &mut processes, &input);
    for process in &processes {
        // Once per kill at least: subtasks writing bases at once may each log it.
        assert!(process.log().contains("killing the process at InBase"), "logs:\n{}", logs(&processes));
    }
}

/// The shared state_dir of three running processes deleted twice while input arrives:
/// each opens its store anew and rebuilds its key groups from the changelog; none
/// exits, and the output is exact.
#[test]
fn a_shared_state_dir_deleted_under_three_processes_is_rebuilt_and_they_go_on() {
    let job = scale_out_job("so-vanish");
    let producer = produce(&job, 30);
    let mut processes: Vec<Process> = (0..3).map(|i| Process::start(&job, i)).collect();
    for _ in 0..2 {
        for process in &processes {
            wait_for_commit(process);
        }
        std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
        for process in &processes {
            wait_for_commit(process);
        }
    }
    let exited: Vec<_> = processes.iter_mut().filter_map(|process| job::wait(&mut process.child, Duration::ZERO)).collect();
    assert!(exited.is_empty(), "processes exited ({exited:?}); logs:\n{}", logs(&processes));
    let input = producer.join().expect("producer thread");
    stop_and_compare(&job, &mut processes, &input);
    let text = logs(&processes);
    assert!(text.contains("opened the checkpoint store anew"), "no store was opened anew:\n{text}");
}

/// Two processes stopped with SIGTERM together, at random moments of their start and of
/// the rebalance the second one's joining causes: each exits cleanly, whatever the group
/// did meanwhile, and the output of the rounds together is exact.
#[test]
fn processes_stopped_together_while_the_group_rebalances_exit_cleanly() {
    let job = scale_out_job("so-stop");
    let mut random = support::crash_seed();
    let mut clicks = Clicks::new(7, PARTITIONS, 300);
    let mut input = Vec::new();
    let mut processes: Vec<Process> = Vec::new();
    for round in 0..5 {
        let batch = clicks.take_keyed(1_000);
        support::produce(&job.input, &batch);
        input.extend(batch);
        for index in 0..2 {
            if round == 0 {
                processes.push(Process::start(&job, index));
            } else {
                processes[index].restart(&job);
            }
            std::thread::sleep(Duration::from_millis(support::next_random(&mut random) % 3_000));
        }
        std::thread::sleep(Duration::from_millis(support::next_random(&mut random) % 4_000));
        for process in &processes {
            process.signal(libc::SIGTERM);
        }
        for process in processes.iter_mut() {
            let status = job::wait(&mut process.child, Duration::from_secs(60));
            assert!(status.is_some_and(|s| s.success()), "round {round}: a process exited with {status:?} after SIGTERM; logs:\n{}", logs(&processes));
        }
    }
    input.extend(clicks.flush_keyed());
    support::produce(&job.input, &clicks.flush_keyed());
    for process in processes.iter_mut() {
        process.restart(&job);
    }
    stop_and_compare(&job, &mut processes, &input);
}

#[test]
fn a_process_joins_and_another_leaves_with_sigterm() {
    let job = scale_out_job("so-join");
    let producer = produce(&job, 40);
    let mut processes: Vec<Process> = (0..2).map(|i| Process::start(&job, i)).collect();
    for process in &processes {
        wait_for_commit(process);
    }
    processes.push(Process::start(&job, 2));
    wait_for_commit(&processes[2]);
    let leaving = processes.remove(0);
    let mut leaving = leaving;
    let status = job::terminate(&mut leaving.child, Duration::from_secs(60));
    assert!(status.success(), "the leaving process exited with {status}; log:\n{}", leaving.log());
    let text = leaving.log();
    assert!(text.contains("committing a final checkpoint"), "the leaving process did not commit its partitions:\n{text}");
    let input = producer.join().expect("producer thread");
    stop_and_compare(&job, &mut processes, &input);
    for process in &processes {
        let text = process.log();
        assert!(text.contains("this process's partitions changed"), "no rebalance logged:\n{text}");
        assert!(text.contains("gained"), "no partitions gained:\n{text}");
    }
    // A process that keeps partitions across a rebalance keeps their state in its
    // state_dir and replays only what follows it.
    let cached = logs(&processes).lines().any(|line| line.contains(RUNNING) && !line.contains("from_state_dir=0"));
    assert!(cached, "no restore used the state_dir:\n{}", logs(&processes));
}

/// Once both of `processes` have committed, pauses the first (SIGSTOP) until the second
/// has taken over everything, as it does once the paused one's session times out, and
/// at least `PAUSE`; returns when the pause began.
fn pause_until_taken_over(processes: &[Process]) -> Instant {
    for process in processes {
        wait_for_commit(process);
    }
    let runs_before = job::count_in_log(&processes[1].log, RUNNING);
    processes[0].signal(libc::SIGSTOP);
    let paused = Instant::now();
    job::wait_for_more(&processes[1].log, RUNNING, runs_before, Duration::from_secs(60));
    std::thread::sleep(PAUSE.saturating_sub(paused.elapsed()));
    paused
}

#[test]
fn a_paused_process_commits_nothing_after_the_group_moved_its_partitions() {
    let job = scale_out_job("so-zombie");
    let producer = produce(&job, 50);
    let mut processes: Vec<Process> = (0..2).map(|i| Process::start(&job, i)).collect();
    let paused = pause_until_taken_over(&processes);
    let resumed_at = processes[0].log().len();
    let pause = paused.elapsed();
    processes[0].signal(libc::SIGCONT);
    let input = producer.join().expect("producer thread");
    stop_and_compare(&job, &mut processes, &input);
    // Between its resumption and its next start over the group's partitions, the paused
    // process committed nothing of its own: the one commit it may report then is one the
    // pause froze in flight (its request reached the broker before, which finished it
    // before the takeover's fencing), and that one waited out the whole pause.
    let text = processes[0].log();
    let after = &text[resumed_at..];
    let until_rejoined = after.find(RUNNING).map_or(after, |end| &after[..end]);
    let commits: Vec<&str> = until_rejoined.lines().filter(|line| line.contains("checkpoint committed")).collect();
    let in_flight = |line: &str| commit_millis(line).is_some_and(|ms| ms + 1_000 >= pause.as_millis() as u64);
    assert!(
        commits.is_empty() || (commits.len() == 1 && in_flight(commits[0])),
        "the paused process committed a checkpoint after it lost its partitions (paused {pause:?}):\n{after}"
    );
}

/// A process paused until the group moved its partitions, then stopped with SIGTERM as
/// it resumes: its final checkpoint cannot be committed any more, and it exits cleanly
/// all the same; the other goes on, and the output is exact.
#[test]
fn a_process_stopped_as_it_resumes_after_losing_its_partitions_exits_cleanly() {
    let job = scale_out_job("so-late-stop");
    let producer = produce(&job, 30);
    let mut processes: Vec<Process> = (0..2).map(|i| Process::start(&job, i)).collect();
    pause_until_taken_over(&processes);
    processes[0].signal(libc::SIGTERM);
    processes[0].signal(libc::SIGCONT);
    let status = job::wait(&mut processes[0].child, Duration::from_secs(60));
    assert!(status.is_some_and(|s| s.success()), "the resumed process exited with {status:?} after SIGTERM; logs:\n{}", logs(&processes));
    let text = processes[0].log();
    assert!(text.contains("stopping without a final checkpoint"), "the resumed process did not lose its partitions:\n{text}");
    assert!(!text.contains("stopped after committing a final checkpoint"), "the resumed process says it committed:\n{text}");
    processes.remove(0);
    let input = producer.join().expect("producer thread");
    stop_and_compare(&job, &mut processes, &input);
}

/// The `commit_ms` of a "checkpoint committed" log line.
fn commit_millis(line: &str) -> Option<u64> {
    line.split_whitespace().find_map(|field| field.strip_prefix("commit_ms="))?.parse().ok()
}

#[test]
fn input_not_co_partitioned_by_key_is_refused_with_two_processes() {
    let job = scale_out_job("so-random");
    let mut clicks = Clicks::new(3, PARTITIONS, 300);
    support::produce(&job.input, &clicks.take(2_000));
    let mut processes: Vec<Process> = (0..2).map(|i| Process::start(&job, i)).collect();
    for process in &mut processes {
        let status = job::wait(&mut process.child, Duration::from_secs(90));
        let text = process.log();
        assert!(status.is_some_and(|s| !s.success()), "a process did not fail ({status:?}):\n{text}");
        assert!(text.contains("not co-partitioned by key"), "the error does not say why:\n{text}");
        assert!(text.contains(&job.input), "the error does not name the topic:\n{text}");
    }
    let committed = support::read_to_end(&job.output, OUTPUT_PARTITIONS, Isolation::ReadCommitted);
    assert!(committed.is_empty(), "output was committed from input that is not co-partitioned");
}

/// With a dead-letter topic, a record that is not co-partitioned is bad input like a
/// poison record: it goes there, the reason in its headers, and both processes go on
/// to commit exactly the output of the rest.
#[test]
fn input_not_co_partitioned_goes_to_the_dead_letter_topic_and_the_job_goes_on() {
    let job = scale_out_job("so-stray");
    let dlq = support::unique_name("so-stray-dlq");
    support::create_topic(&dlq, 1);
    let text = std::fs::read_to_string(job.path()).expect("reading the job file");
    std::fs::write(job.path(), text.replace("[sink]\n", &format!("[sink]\ndead_letter_topic = \"{dlq}\"\n"))).expect("writing the job file");
    let mut clicks = Clicks::new(5, PARTITIONS, 300);
    let mut input = clicks.take_keyed(3_000);
    input.extend(clicks.flush_keyed());
    // Each in a partition its key does not belong to, no later than any real record, so
    // that none of those is late behind it.
    let earliest = input.iter().map(|record| record.3).min().expect("input");
    let strays: Vec<clicks::Input> = input[..3]
        .iter()
        .map(|(partition, key, _, _)| ((partition + 1) % PARTITIONS, key.clone(), b"stray".to_vec(), earliest))
        .collect();
    support::produce(&job.input, &strays);
    support::produce(&job.input, &input);
    let mut processes: Vec<Process> = (0..2).map(|i| Process::start(&job, i)).collect();
    stop_and_compare(&job, &mut processes, &input);
    let letters = support::read_to_end_with_headers(&dlq, 1, Isolation::ReadCommitted);
    assert_eq!(letters.len(), strays.len(), "dead letters: {letters:?}\nlogs:\n{}", logs(&processes));
    for (_, key, value, headers) in &letters {
        assert_eq!(value, b"stray", "only the strays are dead letters: {key:?}");
        let error = headers.iter().find(|(name, _)| name == "weir.error").map(|(_, v)| String::from_utf8_lossy(v).into_owned());
        assert!(error.as_deref().is_some_and(|e| e.contains("not co-partitioned by key")), "no reason in the headers: {headers:?}");
    }
}

#[test]
fn a_single_process_job_scales_out_and_back_is_refused_by_name() {
    // Started as one process, killed mid-stream, continued by two processes of the same
    // job: the output is exact. Going back to one process is refused, naming the key.
    let job = scale_out_job("so-migrate");
    let scaled = std::fs::read_to_string(job.path()).expect("job file");
    let single = scaled.replace("scale_out = true\n", "");
    std::fs::write(job.path(), &single).expect("writing the job file");
    let producer = produce(&job, 30);
    let log = job.dir.path().join("single.log");
    let mut first = job::start(&job.path(), &log, &[]);
    for _ in 0..3 {
        job::wait_for_more(&log, "checkpoint committed", job::count_in_log(&log, "checkpoint committed"), Duration::from_secs(60));
    }
    job::kill(&mut first);

    std::fs::write(job.path(), &scaled).expect("writing the job file");
    let mut processes: Vec<Process> = (0..2).map(|i| Process::start(&job, i)).collect();
    let input = producer.join().expect("producer thread");
    stop_and_compare(&job, &mut processes, &input);

    std::fs::write(job.path(), &single).expect("writing the job file");
    let mut back = job::start(&job.path(), &log, &[]);
    let status = job::wait(&mut back, Duration::from_secs(60));
    let text = job::read_log(&log);
    assert!(status.is_some_and(|s| !s.success()), "one process started on a scaled-out job's offsets:\n{text}");
    assert!(text.contains("does not set scale_out = true"), "the refusal does not name the key:\n{text}");
}

#[test]
fn a_transaction_left_open_on_the_changelog_holds_the_restore_until_it_ends() {
    // A restore reads the changelog only once every transaction before its end has
    // ended: read before, it would stop where the open one begins and miss what was
    // committed after it.
    let job = scale_out_job("so-open");
    let (clicks, mut input) = run_until_a_commit(&job, 5, 2_000);

    let intruder = support::transactional_producer(&support::unique_name("so-intruder"));
    intruder.begin_transaction().expect("begin");
    let changelog = format!("{}-changelog", job.name);
    let record = BaseRecord::<[u8], [u8]>::to(&changelog).partition(0).key(b"k").payload(b"v");
    intruder.send(record).map_err(|(e, _)| e).expect("send");
    intruder.flush(Duration::from_secs(10)).expect("flush");

    let mut second = Process::start(&job, 1);
    std::thread::sleep(Duration::from_secs(5));
    assert!(!second.log().contains(RUNNING), "the restore did not wait for the open transaction:\n{}", second.log());
    intruder.abort_transaction(Duration::from_secs(10)).expect("abort");
    job::wait_for_log(&second.log, RUNNING, Duration::from_secs(30));
    input.extend(clicks.flush_keyed());
    support::produce(&job.input, &clicks.flush_keyed());
    stop_and_compare(&job, std::slice::from_mut(&mut second), &input);
}

/// Runs one process of the job over `records` keyed clicks (`seed`) until it has
/// committed a checkpoint, then stops it with SIGTERM; returns the clicks and the input.
fn run_until_a_commit(job: &JobDir, seed: u64, records: usize) -> (Clicks, Vec<clicks::Input>) {
    let mut clicks = Clicks::new(seed, PARTITIONS, 200);
    let input = clicks.take_keyed(records);
    support::produce(&job.input, &input);
    let mut first = Process::start(job, 0);
    wait_for_commit(&first);
    let status = job::terminate(&mut first.child, Duration::from_secs(60));
    assert!(status.success(), "the first run exited with {status}:\n{}", first.log());
    (clicks, input)
}

/// Starts another process of the job, which must refuse to run; returns its log.
fn refused_process(job: &JobDir) -> String {
    let mut second = Process::start(job, 1);
    let status = job::wait(&mut second.child, Duration::from_secs(90));
    let text = second.log();
    assert!(status.is_some_and(|s| !s.success()), "a process ran ({status:?}):\n{text}");
    text
}

/// A job file that drops the key_groups its checkpoints were taken with goes on with the
/// count its offsets recorded (the default for its input is another): two processes
/// take its state over, and the output is exact.
#[test]
fn a_job_file_that_drops_its_key_groups_goes_on_with_the_recorded_count() {
    let job = scale_out_job("so-dropped");
    let (mut clicks, mut input) = run_until_a_commit(&job, 8, 1_000);

    let text = std::fs::read_to_string(job.path()).expect("reading the job file");
    let dropped = text.replace(&format!("key_groups = {}\n", job::KEY_GROUPS), "");
    assert_ne!(dropped, text, "the job file set key_groups");
    std::fs::write(job.path(), dropped).expect("writing the job file");
    let more = clicks.take_keyed(1_000);
    support::produce(&job.input, &more);
    input.extend(more);
    input.extend(clicks.flush_keyed());
    support::produce(&job.input, &clicks.flush_keyed());
    let mut processes: Vec<Process> = (0..2).map(|i| Process::start(&job, i)).collect();
    stop_and_compare(&job, &mut processes, &input);
}

#[test]
fn partitions_added_to_the_input_are_refused_by_name() {
    let job = scale_out_job("so-grow");
    run_until_a_commit(&job, 6, 1_000);
    support::add_partitions(&job.input, 2 * PARTITIONS as usize);
    let text = refused_process(&job);
    assert!(text.contains("partitions were added"), "the refusal does not say why:\n{text}");
}

/// A scaled-out job's offsets record its key groups: a job file that names another
/// count is refused with the count to set, before any state is read.
#[test]
fn changed_key_groups_are_refused_by_name() {
    let job = scale_out_job("so-groups");
    run_until_a_commit(&job, 7, 1_000);
    job.set_key_groups(2 * job::KEY_GROUPS);
    let text = refused_process(&job);
    let named = format!("set key_groups = {}", job::KEY_GROUPS);
    assert!(text.contains(&named), "the refusal does not name the count to set:\n{text}");
}
