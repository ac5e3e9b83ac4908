//! The graph plugins through the real broker: `enrich` (a stream–table join), `router`
//! (one input to several outputs) and `interval-join` (two streams), each SIGKILLed at
//! random moments with its state_dir deleted before half the restarts. Every sink's
//! committed output equals a reference the test computes from what it produced, and a
//! join given one input where it needs two is refused before anything is created.

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use support::clicks::{self, FLUSH_MS, Input, START_MS};
use support::graph::Topic;
use support::job::{self, JobDir, StateDir};
use support::{Isolation, Tail};

/// Each (key, value) with how many times it must be committed.
type Multiset = BTreeMap<(Vec<u8>, Vec<u8>), usize>;

/// How long the committed output may take to reach its reference after the last start.
const COMPLETE_WITHIN: Duration = Duration::from_secs(120);
/// How long a producer waits for the committed output to show what it waits for.
const EVIDENCE_WITHIN: Duration = Duration::from_secs(120);



/// What a start logs when it restores keyed state without the state_dir.
const REBUILT: &str = "rebuilding keyed state from the whole changelog";

/// The start after the kills. When no restart so far has rebuilt keyed state from the
/// changelog (every kill after a lost state_dir may have come before recovery was
/// done), the state_dir is deleted first, so that every run covers a rebuild; and a
/// rebuild needs a committed checkpoint, which a run killed before its first never left.
fn start_rebuilding(job: &JobDir, log: &Path) -> Child {
    if !job::read_log(log).contains(REBUILT) {
        if job::count_in_log(log, "checkpoint committed") == 0 {
            let mut child = job::start(&job.path(), log, &[]);
            job::wait_for_log(log, "checkpoint committed", EVIDENCE_WITHIN);
            job::kill(&mut child);
        }
        if job.state_dir().exists() {
            std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
        }
    }
    job::start(&job.path(), log, &[])
}

/// Waits until each sink holds at least its count of committed records.
fn await_counts(sinks: &[(&Topic, usize)], child: &mut Child, log: &Path) {
    for &(topic, want) in sinks {
        let mut tail = Tail::new(&topic.name, topic.partitions);
        let complete = tail.until_while(want, COMPLETE_WITHIN, child);
        assert!(complete, "{}: {} of {want} records; log:\n{}", topic.name, tail.records.len(), job::read_log(log));
    }
}

/// Stops the job with SIGTERM: what the sinks hold afterwards is all it ever commits.
fn stop(child: &mut Child, log: &Path) {
    let status = job::terminate(child, Duration::from_secs(60));
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{}", job::read_log(log));
}

/// `await_counts`, then `stop`.
fn await_and_stop(sinks: &[(&Topic, usize)], child: &mut Child, log: &Path) {
    await_counts(sinks, child, log);
    stop(child, log);
}

/// `await_and_stop`, then every sink's whole committed output compared with its
/// reference: nothing lost, nothing duplicated, nothing else.
fn finish_and_compare(sinks: &[(&Topic, &Multiset)], child: &mut Child, log: &Path) {
    let counts: Vec<(&Topic, usize)> = sinks.iter().map(|&(topic, expected)| (topic, expected.values().sum())).collect();
    await_and_stop(&counts, child, log);
    for &(topic, expected) in sinks {
        assert_exact(topic, &committed(topic), expected);
    }
}

fn assert_exact(topic: &Topic, actual: &Multiset, expected: &Multiset) {
    assert!(actual == expected, "{}: {}", topic.name, clicks::difference(expected, actual));
}

/// The whole committed output of `topic`.
fn committed(topic: &Topic) -> Multiset {
    clicks::as_multiset(&support::read_to_end(&topic.name, topic.partitions, Isolation::ReadCommitted))
}

/// Keyed records over a topic's partitions, event time non-decreasing in each, so that
/// none is ever behind the watermark (the least, over partitions, of the greatest event
/// time read): whether a record is late would depend on timing.
struct Stream {
    random: u64,
    clocks: Vec<i64>,
}

impl Stream {
    fn new(seed: u64, partitions: i32) -> Stream {
        Stream { random: seed.max(1), clocks: vec![START_MS; partitions as usize] }
    }

    fn next(&mut self) -> u64 {
        support::next_random(&mut self.random)
    }

    /// One record of `key` in the partition the Java client picks for it, a little
    /// later in event time than the partition's last.
    fn record(&mut self, key: &str, value: String) -> Input {
        let partition = clicks::java_partition(key.as_bytes(), self.clocks.len() as i32);
        self.clocks[partition as usize] += (self.next() % 40) as i64;
        (partition, key.as_bytes().to_vec(), value.into_bytes(), self.clocks[partition as usize])
    }

    /// One record per partition far in the future: the watermark passes every window.
    fn flush(&self) -> Vec<Input> {
        let partitions = self.clocks.len() as i32;
        (0..partitions)
            .map(|partition| {
                let key = (0..).map(|i| format!("flush-{i}")).find(|key| clicks::java_partition(key.as_bytes(), partitions) == partition);
                (partition, key.expect("some key lands in every partition").into_bytes(), b"{}".to_vec(), FLUSH_MS)
            })
            .collect()
    }
}

mod enrich {
    //! `enrich` joining clicks with the `users` table and keying each enriched click by
    //! its user's country (`key_field`), then `window-count` counting them per country
    //! and window: a click without a profile has no country and counts under the empty
    //! key.

    use super::*;

    pub(super) const CLICK_PARTITIONS: i32 = 4;
    pub(super) const USER_PARTITIONS: i32 = 2;
    const COUNTRIES: [&str; 5] = ["uk", "fr", "de", "us", "jp"];
    const WINDOW_MS: i64 = 1000;

    /// Profile `n` of `user`, as the table holds it; `tier` is a field enrich must not copy.
    fn profile(user: &str, n: usize) -> Vec<u8> {
        format!(r#"{{"country":"{}","name":"Name {user}","tier":"gold"}}"#, COUNTRIES[n % COUNTRIES.len()]).into_bytes()
    }

    /// The table rows of `users`, each with its profile number.
    pub(super) fn rows(users: &[(String, usize)]) -> Vec<Input> {
        let row = |(user, n): &(String, usize)| {
            (clicks::java_partition(user.as_bytes(), USER_PARTITIONS), user.clone().into_bytes(), profile(user, *n), START_MS)
        };
        users.iter().map(row).collect()
    }

    /// What becomes of a click.
    #[derive(Clone, Copy, Debug)]
    pub(super) enum Fate {
        /// Profile `n` of its user is certainly in the table when it is processed.
        Matched(usize),
        /// Its user has no profile.
        Unmatched,
        /// Profile `n` was produced but not yet seen applied: matched or not.
        Either(usize),
        /// Not a JSON object: to the `invalid` output, unchanged.
        Invalid,
    }

    pub(super) struct Click {
        pub(super) record: Input,
        pub(super) fate: Fate,
        user: String,
        /// The click's JSON fields, in name order, without the braces.
        fields: String,
    }

    impl Click {
        /// A click of `user` numbered `seq`, next in `stream`.
        pub(super) fn new(stream: &mut Stream, user: &str, seq: u64, fate: Fate) -> Click {
            let page = stream.next() % 100;
            let fields = format!(r#""page":"/p/{page}","seq":{seq},"user":"{user}""#);
            let value = match fate {
                Fate::Invalid => format!("not json {seq}"),
                _ => format!("{{{fields}}}"),
            };
            Click { record: stream.record(user, value), fate, user: user.to_owned(), fields }
        }

        /// The flush records of `stream` as clicks of users without a profile.
        pub(super) fn flush(stream: &Stream) -> Vec<Click> {
            let click = |record: Input| Click { user: String::new(), fields: String::new(), fate: Fate::Unmatched, record };
            stream.flush().into_iter().map(click).collect()
        }

        /// The enriched value with profile `n` found, or none: the click's fields, the
        /// profile's `name` and `country` under the prefix, and the marker, in name order.
        fn enriched(&self, profile: Option<usize>) -> Vec<u8> {
            let (user, fields) = (&self.user, &self.fields);
            let value = match profile {
                Some(n) => format!(
                    r#"{{"matched":true,{fields},"user_country":"{}","user_name":"Name {user}"}}"#,
                    COUNTRIES[n % COUNTRIES.len()]
                ),
                None if fields.is_empty() => r#"{"matched":false}"#.to_owned(),
                None => format!(r#"{{"matched":false,{fields}}}"#),
            };
            value.into_bytes()
        }

        /// The key and value enriched carries for this click, matched (with profile
        /// `n`) or not: keyed by the profile's country, else by the empty key.
        fn outcome(&self, profile: Option<usize>) -> (Vec<u8>, Vec<u8>) {
            let key = profile.map_or("", |n| COUNTRIES[n % COUNTRIES.len()]);
            (key.as_bytes().to_vec(), self.enriched(profile))
        }
    }

    /// The records of `clicks`, to produce.
    pub(super) fn records(clicks: &[Click]) -> Vec<Input> {
        clicks.iter().map(|click| click.record.clone()).collect()
    }

    /// How many records the sinks enriched and invalid must end up with.
    fn counts(clicks: &[Click]) -> [usize; 2] {
        let invalid = clicks.iter().filter(|c| matches!(c.fate, Fate::Invalid)).count();
        [clicks.len() - invalid, invalid]
    }

    /// The references of the sinks enriched, invalid and counts. A click whose fate is
    /// `Either` is taken as `enriched` committed it (matched if that holds the matched
    /// outcome); the comparison still finds it lost or twice.
    fn references(clicks: &[Click], enriched: &Multiset) -> [Multiset; 3] {
        let (mut matched, mut invalid, mut keyed) = (Multiset::new(), Multiset::new(), Vec::new());
        for click in clicks {
            let outcome = match click.fate {
                Fate::Matched(n) => click.outcome(Some(n)),
                Fate::Unmatched => click.outcome(None),
                Fate::Either(n) if enriched.contains_key(&click.outcome(Some(n))) => click.outcome(Some(n)),
                Fate::Either(_) => click.outcome(None),
                Fate::Invalid => {
                    *invalid.entry((click.record.1.clone(), click.record.2.clone())).or_default() += 1;
                    continue;
                }
            };
            let (partition, _, _, time) = click.record;
            keyed.push((partition, outcome.0.clone(), outcome.1.clone(), time));
            *matched.entry(outcome).or_default() += 1;
        }
        [matched, invalid, clicks::window_counts(&keyed, WINDOW_MS)]
    }

    /// How many probes (clicks that could go either way) `enriched` holds matched, and
    /// how many unmatched.
    pub(super) fn probes(clicks: &[Click], enriched: &Multiset) -> (usize, usize) {
        let probes = clicks.iter().filter_map(|click| match click.fate {
            Fate::Either(n) => Some(enriched.contains_key(&click.outcome(Some(n)))),
            _ => None,
        });
        probes.fold((0, 0), |(yes, no), matched| if matched { (yes + 1, no) } else { (yes, no + 1) })
    }

    /// The user of a click committed to enriched, if it found its user's profile.
    pub(super) fn matched_user(value: &[u8]) -> Option<String> {
        let click: serde_json::Value = serde_json::from_slice(value).expect("enriched clicks are JSON");
        let user = click["user"].as_str().filter(|_| click["matched"] == true)?;
        Some(user.to_owned())
    }

    /// The job: clicks enriched from the users table to `enriched` (values that are not
    /// objects to `invalid`), the enriched clicks counted per country and window to `counts`.
    pub(super) fn write_job(job: &JobDir, [clicks, users, enriched, invalid, counts]: [&Topic; 5]) {
        job.write(
            2,
            100,
            &format!(
                r#"
[[sources]]
name = "clicks"
brokers = "{brokers}"
topic = "{clicks}"

[[sources]]
name = "users"
brokers = "{brokers}"
topic = "{users}"
table = true

[[operators]]
name = "enrich"
plugin = "{enrich}"
key_by = true
inputs = ["clicks", "users"]
outputs = ["enriched", "invalid"]
[operators.config]
fields = "name,country"
prefix = "user_"
key_field = "user_country"

[[operators]]
name = "count"
plugin = "{count}"
key_by = true
inputs = ["enrich/enriched"]
[operators.config]
window_ms = "{WINDOW_MS}"

[[sinks]]
name = "enriched"
topic = "{enriched}"
from = ["enrich/enriched"]

[[sinks]]
name = "invalid"
topic = "{invalid}"
from = ["enrich/invalid"]

[[sinks]]
name = "counts"
topic = "{counts}"
from = ["count"]

[producer]
brokers = "{brokers}"
"#,
                brokers = support::brokers(),
                clicks = clicks.name,
                users = users.name,
                enrich = support::plugin("enrich").display(),
                count = support::plugin("window-count").display(),
                enriched = enriched.name,
                invalid = invalid.name,
                counts = counts.name,
            ),
        );
    }

    /// The topics of an enrich job: clicks, users, enriched, invalid, counts.
    pub(super) fn topics(job: &JobDir) -> [Topic; 5] {
        [
            Topic::new(job, "clicks", CLICK_PARTITIONS),
            Topic::table(job, "users", USER_PARTITIONS),
            Topic::new(job, "enriched", 4),
            Topic::new(job, "invalid", 2),
            Topic::new(job, "counts", 2),
        ]
    }

    /// Once enriched and invalid hold their counts, the count reference follows from
    /// what enriched committed; once counts holds it too, stops the job and compares
    /// each sink with its reference. Returns what enriched committed.
    pub(super) fn finish(topics: &[Topic; 5], produced: &[Click], child: &mut Child, log: &Path) -> Multiset {
        let [_, _, enriched, invalid, counts] = topics;
        let [n_enriched, n_invalid] = self::counts(produced);
        await_counts(&[(enriched, n_enriched), (invalid, n_invalid)], child, log);
        let [_, _, expected_counts] = references(produced, &committed(enriched));
        await_counts(&[(counts, expected_counts.len())], child, log);
        stop(child, log);
        let actual = [committed(enriched), committed(invalid), committed(counts)];
        let expected = references(produced, &actual[0]);
        for ((topic, actual), expected) in [enriched, invalid, counts].into_iter().zip(&actual).zip(&expected) {
            assert_exact(topic, actual, expected);
        }
        actual.into_iter().next().expect("three sinks")
    }
}

/// The users table is read to its end at the job's first start, before any click: with
/// every profile produced before the start and clicks already waiting, not one click
/// comes out unmatched; the enriched clicks are counted per country exactly.
#[test]
fn enrich_reads_the_whole_table_before_the_first_click() {
    use enrich::{Click, Fate};
    let job = job::job_dir("enrich-boot");
    let topics = enrich::topics(&job);
    enrich::write_job(&job, [&topics[0], &topics[1], &topics[2], &topics[3], &topics[4]]);
    let users: Vec<(String, usize)> = (0..2_000).map(|n| (format!("user-{n}"), n)).collect();
    support::produce(&topics[1].name, &enrich::rows(&users));
    let mut stream = Stream::new(support::crash_seed(), enrich::CLICK_PARTITIONS);
    let mut click = |seq: u64| {
        let (user, n) = &users[stream.next() as usize % users.len()];
        Click::new(&mut stream, user, seq, Fate::Matched(*n))
    };
    let mut produced: Vec<Click> = (0..5_000).map(&mut click).collect();
    support::produce(&topics[0].name, &enrich::records(&produced));

    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let mut later: Vec<Click> = (5_000..8_000).map(&mut click).collect();
    later.extend(Click::flush(&stream));
    support::produce(&topics[0].name, &enrich::records(&later));
    produced.extend(later);
    let enriched = enrich::finish(&topics, &produced, &mut child, &log);
    let matched = enriched.keys().filter(|(_, value)| enrich::matched_user(value).is_some()).count();
    assert_eq!(matched, 8_000, "of 8,000 clicks whose profiles were all in the table before the start, {matched} matched");
}

/// Produces clicks to the enrich job while it is killed: clicks of users in the table
/// from the start, of users never in it, values that are not objects, and rounds of new
/// users. A new user's profile is produced during the run, and until the committed
/// output shows one of the user's clicks matched, the user's clicks ("probes") may come
/// out either way; from then on the profile is in every state the job can restore, so
/// the user's later clicks must come out matched.
mod during_kills {
    use super::enrich::{Click, Fate};
    use super::*;

    pub(super) const OLD_USERS: usize = 300;
    const CHUNKS: usize = 12;
    const CHUNK: usize = 1_000;
    const ROUNDS: usize = 6;
    const ROUND_USERS: usize = 20;
    /// Clicks of each new user once its profile is seen applied.
    const CLICKS_AFTER: usize = 3;

    /// Where the producer stands with the new users.
    struct Rounds {
        started: usize,
        /// The users of the round under way, with their profile numbers.
        current: Vec<(String, usize)>,
        /// Those of them the committed output has shown no matched click of yet.
        pending: BTreeSet<String>,
    }

    pub(super) struct Producer {
        pub(super) clicks: Topic,
        pub(super) users: Topic,
        pub(super) enriched: Topic,
    }

    impl Producer {
        /// Everything produced to the clicks topic, the flush records last.
        pub(super) fn run(self, seed: u64) -> Vec<Click> {
            let mut stream = Stream::new(seed, self.clicks.partitions);
            let mut tail = Tail::new(&self.enriched.name, self.enriched.partitions);
            let (mut seen, mut all) = (0, Vec::new());
            let mut rounds = Rounds { started: 0, current: Vec::new(), pending: BTreeSet::new() };
            let deadline = Instant::now() + EVIDENCE_WITHIN;
            let mut chunk = 0;
            // Until the last round's users have had their clicks after the evidence.
            while chunk < CHUNKS || rounds.started < ROUNDS || !rounds.current.is_empty() {
                assert!(Instant::now() < deadline, "{EVIDENCE_WITHIN:?} on, no matched click of {:?} is committed", rounds.pending);
                let mut batch = Vec::new();
                if chunk < CHUNKS {
                    batch.extend((all.len()..all.len() + CHUNK).map(|seq| self.old_click(&mut stream, seq)));
                    chunk += 1;
                }
                let profiles = self.next_round(&mut stream, &mut rounds, &mut batch, all.len());
                support::produce(&self.clicks.name, &enrich::records(&batch));
                // After the round's first probes: they are likely read before the profiles.
                if !profiles.is_empty() {
                    support::produce(&self.users.name, &profiles);
                }
                all.extend(batch);
                tail.until(usize::MAX, Duration::from_millis(300)); // reads for 300 ms: the pacing
                for user in tail.records[seen..].iter().filter_map(|(_, _, value)| enrich::matched_user(value)) {
                    rounds.pending.remove(&user);
                }
                seen = tail.records.len();
            }
            let flush = Click::flush(&stream);
            support::produce(&self.clicks.name, &enrich::records(&flush));
            all.extend(flush);
            all
        }

        /// A click of a user in the table from the start (most), of a user never in
        /// it, or a value that is not a JSON object.
        fn old_click(&self, stream: &mut Stream, seq: usize) -> Click {
            let pick = stream.next() % 100;
            let n = stream.next() as usize % OLD_USERS;
            match pick {
                0..=2 => Click::new(stream, &format!("ghost-{}", n % 20), seq as u64, Fate::Unmatched),
                3..=4 => Click::new(stream, &format!("user-{n}"), seq as u64, Fate::Invalid),
                _ => Click::new(stream, &format!("user-{n}"), seq as u64, Fate::Matched(n)),
            }
        }

        /// Once every user of the round under way has been seen matched: their clicks
        /// that must match, and the next round started. Then a probe per user not yet
        /// seen matched. Returns the table rows of a round started, to produce after
        /// the batch.
        fn next_round(&self, stream: &mut Stream, rounds: &mut Rounds, batch: &mut Vec<Click>, first_seq: usize) -> Vec<Input> {
            let seq = |batch: &Vec<Click>| (first_seq + batch.len()) as u64;
            let mut profiles = Vec::new();
            if rounds.pending.is_empty() {
                for (user, n) in std::mem::take(&mut rounds.current) {
                    for _ in 0..CLICKS_AFTER {
                        batch.push(Click::new(stream, &user, seq(batch), Fate::Matched(n)));
                    }
                }
                if rounds.started < ROUNDS {
                    let first = OLD_USERS + rounds.started * ROUND_USERS;
                    rounds.current = (first..first + ROUND_USERS).map(|n| (format!("new-{n}"), n)).collect();
                    rounds.pending = rounds.current.iter().map(|(user, _)| user.clone()).collect();
                    rounds.started += 1;
                    profiles = enrich::rows(&rounds.current);
                }
            }
            for (user, n) in &rounds.current {
                if rounds.pending.contains(user) {
                    batch.push(Click::new(stream, user, seq(batch), Fate::Either(*n)));
                }
            }
            profiles
        }
    }
}

/// Under random SIGKILLs and lost state_dirs, with profiles of new users produced during
/// the run: every sink's committed output is exactly its reference (the count per
/// country included), every click of a user in the table matched, of a user not in it
/// unmatched, every click of a new user after one was seen matched also matched.
#[test]
fn enrich_commits_each_reference_under_sigkill_with_the_table_growing() {
    use enrich::Click;
    let job = job::job_dir("enrich-kill");
    let topics = enrich::topics(&job);
    enrich::write_job(&job, [&topics[0], &topics[1], &topics[2], &topics[3], &topics[4]]);
    let old: Vec<(String, usize)> = (0..during_kills::OLD_USERS).map(|n| (format!("user-{n}"), n)).collect();
    support::produce(&topics[1].name, &enrich::rows(&old));
    let seed = support::crash_seed();
    let producer = during_kills::Producer { clicks: topics[0].clone(), users: topics[1].clone(), enriched: topics[2].clone() };
    let producing = std::thread::spawn(move || producer.run(seed));
    let log = job.dir.path().join("weir.log");
    job::kill_at_random_moments(&job, &log, 8, seed, StateDir::Lost);

    // The producer waits on committed output: the job runs again before it is joined.
    let mut child = start_rebuilding(&job, &log);
    let produced: Vec<Click> = producing.join().expect("the click producer");
    let enriched = enrich::finish(&topics, &produced, &mut child, &log);
    let text = job::read_log(&log);
    assert!(text.contains(REBUILT), "no restart rebuilt its state:\n{text}");
    let (matched, unmatched) = enrich::probes(&produced, &enriched);
    eprintln!("enrich: {} clicks exact after 8 kills; of the probes {matched} matched, {unmatched} not", produced.len());
}

/// A weir:operator@0.3 join given one input where it needs two is refused at start, its
/// error naming the operator and the missing input, before any topic is created.
#[test]
fn enrich_with_one_input_is_refused_naming_the_missing_one() {
    let job = job::job_dir("enrich-one-input");
    let (clicks, enriched) = (Topic::new(&job, "clicks", 2), Topic::new(&job, "enriched", 2));
    job.write(
        2,
        100,
        &format!(
            r#"
[[sources]]
name = "clicks"
brokers = "{brokers}"
topic = "{clicks}"

[[operators]]
name = "enrich"
plugin = "{plugin}"
key_by = true
inputs = ["clicks"]

[[sinks]]
name = "enriched"
topic = "{enriched}"
from = ["enrich"]

[producer]
brokers = "{brokers}"
"#,
            brokers = support::brokers(),
            clicks = clicks.name,
            plugin = support::plugin("enrich").display(),
            enriched = enriched.name,
        ),
    );
    let log = job.dir.path().join("weir.log");
    let started = Instant::now();
    let mut child = job::start(&job.path(), &log, &[]);
    let status = job::wait(&mut child, Duration::from_secs(30)).unwrap_or_else(|| {
        job::kill(&mut child);
        panic!("weir still ran 30 s after its start:\n{}", job::read_log(&log))
    });
    let text = job::read_log(&log);
    assert!(!status.success(), "enrich ran with the one input `clicks`:\n{text}");
    assert!(
        text.contains("operator `enrich") && text.contains("needs an input named `users`"),
        "the error names neither the operator nor its missing input `users`:\n{text}"
    );
    let changelog = format!("{}-changelog", job.name);
    assert!(!support::topic_exists(&changelog), "the changelog `{changelog}` was created for a job that cannot run");
    eprintln!("enrich with one input: refused in {:?}", started.elapsed());
}

mod routing {
    //! `router` splitting one source by a JSON field into outputs, with the default
    //! output, the `invalid` one and the `late` one. A record is late when its event time
    //! is behind the watermark its router subtask has seen; that is deterministic only
    //! for a record older than event time the committed output already shows read in
    //! every partition, so late records are produced only once the copy sink shows such
    //! records committed, and are older than every other record.

    use super::*;

    pub(super) const PARTITIONS: i32 = 2;
    pub(super) const OUTPUTS: [&str; 5] = ["eu", "us", "other", "late", "invalid"];
    const CHUNKS: usize = 12;
    const CHUNK: usize = 1_500;
    const LATE_PER_CHUNK: usize = 6;

    /// A record and the output it must reach.
    pub(super) type Routed = (Input, &'static str);

    /// A record that is never late, its value picked to reach each output by every rule.
    fn on_time(stream: &mut Stream, seq: u64) -> Routed {
        let (value, output) = match stream.next() % 100 {
            0..=39 => (format!(r#"{{"region":"eu","seq":{seq}}}"#), "eu"),
            40..=69 => (format!(r#"{{"region":"us","seq":{seq}}}"#), "us"),
            70..=71 => (format!(r#"{{"nested":{{"region":"eu"}},"region":"us","seq":{seq}}}"#), "us"),
            72..=75 => (format!(r#"{{"region":"asia","seq":{seq}}}"#), "other"),
            76..=77 => (format!(r#"{{"seq":{seq}}}"#), "other"),
            78..=79 => (format!(r#"{{"region":null,"seq":{seq}}}"#), "other"),
            // `late` and `invalid` are never routed to by value.
            80..=81 => (format!(r#"{{"region":"late","seq":{seq}}}"#), "other"),
            82..=83 => (format!(r#"{{"region":"invalid","seq":{seq}}}"#), "other"),
            84..=85 => (format!(r#"{{"region":42,"seq":{seq}}}"#), "other"),
            86..=87 => (format!(r#"{{"region":["eu"],"seq":{seq}}}"#), "other"),
            88..=91 => (format!("not json {seq}"), "invalid"),
            92..=93 => (format!("[{seq}]"), "invalid"),
            94..=95 => (format!(r#"{{"region":"eu","seq":{seq}"#), "invalid"),
            _ => (format!(r#"{{"region":"eu","seq":{seq}}} and more"#), "invalid"),
        };
        (stream.record(&format!("k-{}", seq % 50), value), output)
    }

    /// `n` records that are never late, numbered from `first`.
    pub(super) fn on_time_records(stream: &mut Stream, first: usize, n: usize) -> Vec<Routed> {
        (first..first + n).map(|seq| on_time(stream, seq as u64)).collect()
    }

    /// A record older than any other, valid or not, in partition `seq` mod the
    /// partitions: to `late` whatever its value.
    fn late(seq: u64) -> Routed {
        let value = match seq % 3 {
            0 => format!("late and not json {seq}"),
            _ => format!(r#"{{"region":"eu","seq":{seq}}}"#),
        };
        let partition = (seq % PARTITIONS as u64) as i32;
        ((partition, format!("k-{}", seq % 50).into_bytes(), value.into_bytes(), START_MS - 1_000 - seq as i64), "late")
    }

    /// `n` late records, numbered from `first`, spread over the partitions.
    pub(super) fn late_records(first: usize, n: usize) -> Vec<Routed> {
        (first..first + n).map(|seq| late(seq as u64)).collect()
    }

    pub(super) fn produce(topic: &Topic, records: &[Routed]) {
        support::produce(&topic.name, &records.iter().map(|(record, _)| record.clone()).collect::<Vec<_>>());
    }

    /// Produces paced chunks of records that are never late while the job is killed,
    /// and after each chunk but the first, once `copy` shows the first chunk's records
    /// of both partitions committed, a few late records. Returns every record.
    pub(super) fn produce_paced(orders: Topic, copy: Topic, seed: u64) -> std::thread::JoinHandle<Vec<Routed>> {
        std::thread::spawn(move || {
            let mut stream = Stream::new(seed, PARTITIONS);
            let mut all = Vec::new();
            for chunk in 0..CHUNKS {
                let mut batch = on_time_records(&mut stream, all.len(), CHUNK);
                if chunk == 1 {
                    await_marks(&copy, &all);
                }
                if chunk > 0 {
                    batch.extend(late_records(all.len() + CHUNK, LATE_PER_CHUNK));
                }
                produce(&orders, &batch);
                all.extend(batch);
                std::thread::sleep(Duration::from_millis(300)); // pacing, not synchronisation
            }
            all
        })
    }

    /// Reads `copy` until it holds a record of `marks` in each partition of the input:
    /// from then on, every router subtask has seen event time past theirs, and every
    /// checkpoint it restores from holds a watermark past theirs.
    pub(super) fn await_marks(copy: &Topic, marks: &[Routed]) {
        let partition_of: HashMap<&[u8], i32> = marks.iter().map(|((partition, _, value, _), _)| (value.as_slice(), *partition)).collect();
        let mut tail = Tail::new(&copy.name, copy.partitions);
        let deadline = Instant::now() + EVIDENCE_WITHIN;
        loop {
            let seen: BTreeSet<i32> = tail.records.iter().filter_map(|(_, _, value)| partition_of.get(value.as_slice()).copied()).collect();
            if seen.len() == PARTITIONS as usize {
                return;
            }
            assert!(Instant::now() < deadline, "{EVIDENCE_WITHIN:?} on, the copy holds marks of partitions {seen:?} only");
            tail.until(tail.records.len() + 1, Duration::from_millis(100));
        }
    }

    /// The reference of each sink: the outputs' in `OUTPUTS` order, then the copy's.
    pub(super) fn references(produced: &[Routed]) -> Vec<Multiset> {
        let mut expected = vec![Multiset::new(); OUTPUTS.len() + 1];
        for ((_, key, value, _), output) in produced {
            let at = OUTPUTS.iter().position(|name| name == output).expect("one of the outputs");
            for sink in [at, OUTPUTS.len()] {
                *expected[sink].entry((key.clone(), value.clone())).or_default() += 1;
            }
        }
        expected
    }

    /// The topics of a router job: the input, one per output, the copy.
    pub(super) fn topics(job: &JobDir) -> (Topic, [Topic; 5], Topic) {
        (Topic::new(job, "orders", PARTITIONS), OUTPUTS.map(|name| Topic::new(job, name, 2)), Topic::new(job, "copy", 2))
    }

    /// Stops the job once the copy holds every input record (each record's routed copy
    /// is committed in the same transaction), then compares each sink with its reference.
    pub(super) fn finish(outputs: &[Topic; 5], copy: &Topic, produced: &[Routed], child: &mut Child, log: &Path) {
        await_and_stop(&[(copy, produced.len())], child, log);
        let expected = references(produced);
        for (topic, expected) in outputs.iter().chain([copy]).zip(&expected) {
            assert_exact(topic, &committed(topic), expected);
        }
        let counts: Vec<String> = OUTPUTS.iter().zip(&expected).map(|(name, e)| format!("{name} {}", e.values().sum::<usize>())).collect();
        eprintln!("router: {} records exact: {}", produced.len(), counts.join(", "));
    }

    /// The job: `router` to one sink per output, and every input record to `copy`.
    pub(super) fn write_job(job: &JobDir, orders: &Topic, outputs: &[Topic; 5], copy: &Topic) {
        let sinks: String = OUTPUTS
            .iter()
            .zip(outputs)
            .map(|(name, topic)| format!("[[sinks]]\nname = \"{name}\"\ntopic = \"{}\"\nfrom = [\"router/{name}\"]\n\n", topic.name))
            .collect();
        job.write(
            2,
            100,
            &format!(
                r#"
[[sources]]
name = "orders"
brokers = "{brokers}"
topic = "{orders}"

[[operators]]
name = "router"
plugin = "{plugin}"
inputs = ["orders"]
outputs = {outputs:?}
[operators.config]
field = "region"
default = "other"

{sinks}[[sinks]]
name = "copy"
topic = "{copy}"
from = ["orders"]

[producer]
brokers = "{brokers}"
"#,
                brokers = support::brokers(),
                orders = orders.name,
                plugin = support::plugin("router").display(),
                outputs = OUTPUTS,
                copy = copy.name,
            ),
        );
    }
}

/// `router` under random SIGKILLs and lost state_dirs: each output's sink holds exactly
/// the records routed to it (by value, to the default output, invalid JSON to `invalid`,
/// records behind the committed watermark to `late`), and a second sink reading the
/// source directly holds exactly the input.
#[test]
fn router_commits_each_output_exactly_under_sigkill() {
    let job = job::job_dir("router-kill");
    let (orders, outputs, copy) = routing::topics(&job);
    routing::write_job(&job, &orders, &outputs, &copy);
    let seed = support::crash_seed();
    let producing = routing::produce_paced(orders.clone(), copy.clone(), seed);
    let log = job.dir.path().join("weir.log");
    job::kill_at_random_moments(&job, &log, 8, seed, StateDir::Lost);

    // The producer waits on committed output: the job runs again before it is joined.
    let mut child = job::start(&job.path(), &log, &[]);
    let produced = producing.join().expect("the order producer");
    routing::finish(&outputs, &copy, &produced, &mut child, &log);
}

/// A record behind the watermark of the last committed checkpoint is late after a
/// restart too, also when the state_dir was lost: the router job keeps no keyed state,
/// so nothing else tells the restarted job how far event time had come.
#[test]
fn router_sends_records_behind_the_committed_watermark_to_late_after_a_lost_state_dir() {
    let job = job::job_dir("router-lost");
    let (orders, outputs, copy) = routing::topics(&job);
    routing::write_job(&job, &orders, &outputs, &copy);
    let mut stream = Stream::new(support::crash_seed(), routing::PARTITIONS);
    let mut produced = routing::on_time_records(&mut stream, 0, 2_000);
    routing::produce(&orders, &produced);
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let mut tail = Tail::new(&copy.name, copy.partitions);
    assert!(tail.until_while(produced.len(), COMPLETE_WITHIN, &mut child), "{}", job::read_log(&log));
    job::kill(&mut child);
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");

    let late = routing::late_records(produced.len(), 30);
    routing::produce(&orders, &late);
    produced.extend(late);
    let mut child = job::start(&job.path(), &log, &[]);
    routing::finish(&outputs, &copy, &produced, &mut child, &log);
}

mod payments {
    //! `interval-join` pairing orders with payments. Which pairs match is a function of
    //! event times alone when no record is ever late: each partition of both topics
    //! holds non-decreasing event times (the events are produced in event-time order), so
    //! the watermark, the least over both inputs' partitions, never passes a record
    //! still to come, and no order or payment is evicted while a record that pairs with
    //! it can still arrive.

    use super::*;

    pub(super) const ORDER_PARTITIONS: i32 = 3;
    pub(super) const PAYMENT_PARTITIONS: i32 = 2;
    const BOUND_MS: i64 = 2_000;
    const EARLY_MS: i64 = 200;
    const ORDERS: usize = 15_000;
    const CHUNKS: usize = 12;

    /// An order or a payment, by order id.
    #[derive(Clone)]
    pub(super) struct Event {
        pub(super) order: bool,
        pub(super) id: String,
        pub(super) time: i64,
        /// Its JSON value: `{"amount":n}` or `{"paid":n}`, unique.
        pub(super) value: String,
    }

    impl Event {
        fn record(&self) -> Input {
            let partitions = if self.order { ORDER_PARTITIONS } else { PAYMENT_PARTITIONS };
            (clicks::java_partition(self.id.as_bytes(), partitions), self.id.clone().into_bytes(), self.value.clone().into_bytes(), self.time)
        }
    }

    /// Orders about 3.5 ms of event time apart, one in twenty under the id of a recent
    /// one; each with up to two payments within its bound (its edges included), some
    /// with one just outside it, either side. In event-time order.
    pub(super) fn events(seed: u64) -> Vec<Event> {
        let mut random = seed.max(1);
        let mut next = || support::next_random(&mut random);
        let (mut events, mut time, mut paid) = (Vec::new(), START_MS, 0);
        for n in 0..ORDERS {
            time += (next() % 8) as i64;
            let id = match next() % 20 {
                0 if n > 20 => format!("o-{}", n - 1 - (next() % 20) as usize),
                _ => format!("o-{n}"),
            };
            events.push(Event { order: true, id: id.clone(), time, value: format!(r#"{{"amount":{n}}}"#) });
            let within = |r: u64| time - EARLY_MS + (r % (EARLY_MS + BOUND_MS + 1) as u64) as i64;
            let mut times = match next() % 10 {
                0 => vec![],
                1..=6 => vec![within(next())],
                7..=8 => vec![within(next()), within(next())],
                _ if next() % 2 == 0 => vec![time + BOUND_MS + 1 + (next() % 500) as i64],
                _ => vec![time - EARLY_MS - 1 - (next() % 500) as i64],
            };
            if next() % 50 == 0 {
                times.extend([time - EARLY_MS, time + BOUND_MS]);
            }
            for payment_time in times {
                events.push(Event { order: false, id: id.clone(), time: payment_time, value: format!(r#"{{"paid":{paid}}}"#) });
                paid += 1;
            }
        }
        events.sort_by_key(|event| event.time);
        events
    }

    /// Every (order, payment) pair of an order id with the payment at most `EARLY_MS`
    /// before the order and at most `BOUND_MS` after it, as interval-join emits it.
    pub(super) fn pairs(events: &[Event]) -> Multiset {
        let mut by_id: BTreeMap<&str, (Vec<&Event>, Vec<&Event>)> = BTreeMap::new();
        for event in events {
            let (orders, payments) = by_id.entry(&event.id).or_default();
            if event.order { orders.push(event) } else { payments.push(event) }
        }
        let mut pairs = Multiset::new();
        for (id, (orders, payments)) in by_id {
            for order in &orders {
                for payment in payments.iter().filter(|p| order.time - EARLY_MS <= p.time && p.time <= order.time + BOUND_MS) {
                    let value = format!(
                        r#"{{"order_id":"{id}","order":{},"payment":{},"order_time":{},"payment_time":{}}}"#,
                        order.value, payment.value, order.time, payment.time
                    );
                    *pairs.entry((id.as_bytes().to_vec(), value.into_bytes())).or_default() += 1;
                }
            }
        }
        pairs
    }

    /// Produces `events` in paced chunks, each chunk's orders and payments to their topics.
    pub(super) fn produce(orders: Topic, payments: Topic, events: Vec<Event>) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            for chunk in events.chunks(events.len().div_ceil(CHUNKS)) {
                let side = |order: bool| chunk.iter().filter(|e| e.order == order).map(Event::record).collect::<Vec<_>>();
                support::produce(&orders.name, &side(true));
                support::produce(&payments.name, &side(false));
                std::thread::sleep(Duration::from_millis(300)); // pacing, not synchronisation
            }
        })
    }

    /// The job: orders joined with payments to `pairs`, late records to `late`.
    pub(super) fn write_job(job: &JobDir, [orders, payments, pairs, late]: [&Topic; 4]) {
        job.write(
            2,
            100,
            &format!(
                r#"
[[sources]]
name = "orders"
brokers = "{brokers}"
topic = "{orders}"

[[sources]]
name = "payments"
brokers = "{brokers}"
topic = "{payments}"

[[operators]]
name = "paid"
plugin = "{plugin}"
key_by = true
inputs = ["orders", "payments"]
outputs = ["pairs", "late"]
[operators.config]
bound_ms = "{BOUND_MS}"
early_ms = "{EARLY_MS}"

[[sinks]]
name = "pairs"
topic = "{pairs}"
from = ["paid/pairs"]

[[sinks]]
name = "late"
topic = "{late}"
from = ["paid/late"]

[producer]
brokers = "{brokers}"
"#,
                brokers = support::brokers(),
                orders = orders.name,
                payments = payments.name,
                plugin = support::plugin("interval-join").display(),
                pairs = pairs.name,
                late = late.name,
            ),
        );
    }
}

/// `interval-join` under random SIGKILLs and lost state_dirs: every (order, payment)
/// pair within the bound is committed exactly once, none outside it, and no record is
/// late, though orders and payments arrive on two topics in any interleaving.
#[test]
fn interval_join_commits_every_pair_once_under_sigkill() {
    let job = job::job_dir("join-kill");
    let orders = Topic::new(&job, "orders", payments::ORDER_PARTITIONS);
    let payments_topic = Topic::new(&job, "payments", payments::PAYMENT_PARTITIONS);
    let (pairs, late) = (Topic::new(&job, "pairs", 4), Topic::new(&job, "late", 2));
    payments::write_job(&job, [&orders, &payments_topic, &pairs, &late]);
    let seed = support::crash_seed();
    let events = payments::events(seed);
    let expected = payments::pairs(&events);
    let producing = payments::produce(orders.clone(), payments_topic.clone(), events.clone());
    let log = job.dir.path().join("weir.log");
    job::kill_at_random_moments(&job, &log, 8, seed, StateDir::Lost);
    producing.join().expect("the order and payment producer");

    let mut child = start_rebuilding(&job, &log);
    finish_and_compare(&[(&pairs, &expected), (&late, &Multiset::new())], &mut child, &log);
    let text = job::read_log(&log);
    assert!(text.contains(REBUILT), "no restart rebuilt its state:\n{text}");
    let orders = events.iter().filter(|e| e.order).count();
    eprintln!("interval-join: {orders} orders, {} payments, {} pairs exact after 8 kills", events.len() - orders, expected.len());
}
