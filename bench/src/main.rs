//! `weir-bench`: the benchmark's programs. `gen` loads the seeded input, `copy` is the
//! transactional copier (the physical limit), `measure` runs one system under the
//! harness and appends its figures to a results file, `latency` does the same for
//! visibility latency in one phase, `report` and `chart` turn results into
//! docs/benchmarks.md's tables and chart. `bench/run` drives them all; `join-gen` and
//! `join-check` serve `bench/join`.

mod chart;
mod copier;
mod data;
mod failover;
mod generate;
mod group;
mod join;
mod latency;
mod measure;
mod procs;
mod reference;
mod report;
mod topics;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "weir-bench", about = "weir's benchmark programs")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Args, Clone, Copy)]
struct WorkloadArgs {
    /// Data records (plus one flush record per partition).
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
    #[arg(long, default_value_t = 100_000)]
    keys: u32,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Each record in its key's partition (Kafka's default partitioner): input
    /// co-partitioned by key, as a scaled-out job needs.
    #[arg(long)]
    keyed: bool,
}

impl WorkloadArgs {
    fn workload(self) -> data::Workload {
        data::Workload { records: self.records, keys: self.keys, partitions: self.partitions, seed: self.seed, keyed: self.keyed }
    }
}

#[derive(Args)]
struct LatencyArgs {
    #[arg(long)]
    system: String,
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    #[arg(long)]
    input: String,
    #[arg(long)]
    output: String,
    #[arg(long, default_value_t = 50_000)]
    rate: u64,
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    #[arg(long, default_value_t = 15)]
    warmup_s: u64,
    /// Only recorded with the figures.
    #[arg(long)]
    checkpoint_ms: u64,
    /// The job's window size (the expected output depends on it).
    #[arg(long, default_value_t = 1000)]
    window_ms: i64,
    /// Event time minus wall-clock time, ms: where window ends fall between checkpoints.
    #[arg(long, default_value_t = 0)]
    offset_ms: i64,
    /// Which phase of several this is (recorded with the figures; also seeds the input).
    #[arg(long, default_value_t = 0)]
    run: u32,
    #[arg(long)]
    log: PathBuf,
    #[arg(long)]
    results: PathBuf,
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the input topic and load it with the seeded workload.
    Gen {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        #[arg(long)]
        topic: String,
        #[command(flatten)]
        workload: WorkloadArgs,
        /// Append the generator's figures (JSON) here.
        #[arg(long)]
        results: Option<PathBuf>,
        /// Leave out the flush records, so windows stay open (the state benchmark).
        #[arg(long)]
        no_flush: bool,
        /// Produce at this many records per second (default: as fast as the broker takes them).
        #[arg(long)]
        rate: Option<u32>,
    },
    /// Copy input to output in transactions committed every --commit-ms (runs until killed).
    Copy {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        #[arg(long)]
        input: String,
        #[arg(long)]
        output: String,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        /// Consumer group and transactional.id.
        #[arg(long)]
        name: String,
        #[arg(long, default_value_t = 1000)]
        commit_ms: u64,
    },
    /// Run a system's command until its whole output is visible; measure and check it.
    Measure {
        #[arg(long)]
        system: String,
        #[arg(long, value_enum)]
        kind: reference::Kind,
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        #[arg(long)]
        input: String,
        #[arg(long)]
        output: String,
        /// The system's consumer group (copy: completion = its offsets at the input's end).
        #[arg(long, default_value = "")]
        group: String,
        #[command(flatten)]
        workload: WorkloadArgs,
        #[arg(long, default_value_t = 1800)]
        timeout_s: u64,
        #[arg(long)]
        log: PathBuf,
        /// Append the figures (JSON) here.
        #[arg(long)]
        results: PathBuf,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Time how fast a consumer group moves a stopped member's partitions to the others.
    GroupFailover {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        /// Created with --partitions (deleted after).
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 12)]
        partitions: i32,
        #[arg(long, default_value_t = 3)]
        members: usize,
        #[arg(long, default_value_t = 5)]
        events: usize,
        #[arg(long, value_enum)]
        protocol: group::Protocol,
        #[arg(long, value_enum)]
        stop: group::Stop,
        /// The classic protocol's session.timeout.ms (the consumer protocol's is the broker's).
        #[arg(long, default_value_t = 45_000)]
        session_ms: u64,
    },
    /// Run a scaled-out weir job's command `--processes` times on keyed input arriving
    /// at `--rate`; SIGKILL one process `--kills` times and time until its partitions'
    /// output resumes; check the whole output exactly. Prints one JSON line.
    ScaleFailover {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        #[arg(long)]
        input: String,
        #[arg(long)]
        output: String,
        #[arg(long, default_value_t = 12)]
        partitions: i32,
        #[arg(long, default_value_t = 3)]
        processes: usize,
        #[arg(long, default_value_t = 10)]
        kills: usize,
        #[arg(long, default_value_t = 5000)]
        rate: u64,
        /// Where the processes' logs go.
        #[arg(long)]
        logs: PathBuf,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// One member of `group-failover` (prints its assignment as it changes).
    GroupMember {
        #[arg(long)]
        brokers: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        group: String,
        #[arg(long, value_enum)]
        protocol: group::Protocol,
        #[arg(long)]
        session_ms: u64,
    },
    /// Write the results as a section of a Markdown file (replacing the previous one).
    Report {
        #[arg(long)]
        results: PathBuf,
        #[arg(long)]
        markdown: PathBuf,
        /// Free text under the table (machine, sizes).
        #[arg(long, default_value = "")]
        context: String,
    },
    /// Start a system, produce at a fixed rate with event time = now + an offset, report
    /// the p50/p99 time from a window's closing records to its result being visible, and
    /// check the whole output exactly.
    Latency(LatencyArgs),
    /// Draw the throughput figures of a results file as an SVG chart.
    Chart {
        #[arg(long)]
        results: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// Create a topic (an output for a job run by hand).
    CreateTopic {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
    },
    /// Delete topics the run created.
    DeleteTopics {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        topics: Vec<String>,
    },
    /// Create the enrichment join's compacted users topic and its clicks topic and load
    /// them, the users first (`bench/join`).
    JoinGen {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        #[arg(long)]
        users_topic: String,
        #[arg(long)]
        clicks_topic: String,
        #[command(flatten)]
        sizes: join::Sizes,
    },
    /// Wait until a join's committed output holds one record per click (`--await`), or
    /// compare all of it with the reference and print the verdict as `name=value` pairs.
    JoinCheck {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        #[arg(long)]
        output: String,
        #[command(flatten)]
        sizes: join::Sizes,
        /// Only wait for the record count, up to --timeout-s (exits 1 at the timeout).
        #[arg(long = "await")]
        wait: bool,
        #[arg(long, default_value_t = 300)]
        timeout_s: u64,
    },
    /// Wait until a consumer group has committed every partition of a topic to its end
    /// (a job that writes no output has drained its input then); exits 1 at the timeout.
    WaitDrained {
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        #[arg(long)]
        group: String,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::GroupFailover { brokers, topic, partitions, members, events, protocol, stop, session_ms } => {
            topics::create(&brokers, &topic, partitions)?;
            let run = group::Failover { brokers: &brokers, topic: &topic, partitions, members, events, protocol, stop, session_ms };
            let outcome = group::failover(&run);
            topics::delete(&brokers, &[topic])?;
            outcome
        }
        Cmd::ScaleFailover { brokers, input, output, partitions, processes, kills, rate, logs, command } => {
            let spec = failover::Spec {
                brokers: &brokers,
                input: &input,
                output: &output,
                partitions,
                processes,
                kills,
                rate,
                command: &command,
                logs: &logs,
            };
            failover::run(&spec)
        }
        Cmd::GroupMember { brokers, topic, group, protocol, session_ms } => group::member(&brokers, &topic, &group, protocol, session_ms),
        Cmd::Gen { brokers, topic, workload, results, no_flush, rate } => {
            let r = generate::run(&brokers, &topic, &workload.workload(), !no_flush, rate)?;
            let rate = r.records as f64 / r.seconds;
            eprintln!(
                "weir-bench gen: {} records in {:.2} s: {:.0} records/s, {:.1} MB/s",
                r.records,
                r.seconds,
                rate,
                r.bytes as f64 / r.seconds / 1e6
            );
            if let Some(path) = results {
                let line = serde_json::json!({"system": "generator", "records": r.records, "seconds": r.seconds, "records_per_s": rate, "correct": true});
                report::append(&path, &line)?;
            }
            Ok(())
        }
        Cmd::Copy { brokers, input, output, partitions, name, commit_ms } => copier::Copier {
            brokers: &brokers,
            input: &input,
            output: &output,
            partitions,
            name: &name,
            commit_every: Duration::from_millis(commit_ms),
        }
        .run(),
        Cmd::Measure { system, kind, brokers, input, output, group, workload, timeout_s, log, results, command } => {
            let outcome = measure::run(&measure::Spec {
                system: &system,
                kind,
                brokers: &brokers,
                input: &input,
                output: &output,
                group: &group,
                workload: workload.workload(),
                timeout: Duration::from_secs(timeout_s),
                log: &log,
                command: &command,
            })?;
            eprintln!(
                "weir-bench: {system}: {:.2} s, {:.0} records/s, {:.1} CPU s ({:.0} records/CPU-s), peak RSS {:.0} MiB, {}",
                outcome.seconds,
                outcome.records_per_s,
                outcome.cpu_s,
                outcome.records_per_cpu_s,
                outcome.peak_rss_mib,
                verdict(outcome.correct, &outcome.diff, &outcome.note),
            );
            record(&results, &outcome, outcome.correct)
        }
        Cmd::Latency(args) => latency(args),
        Cmd::Chart { results, out } => chart::write(&results, &out),
        Cmd::Report { results, markdown, context } => report::write(&results, &markdown, &context),
        Cmd::CreateTopic { brokers, topic, partitions } => {
            topics::create(&brokers, &topic, partitions).with_context(|| format!("creating {topic}"))
        }
        Cmd::DeleteTopics { brokers, topics } => topics::delete(&brokers, &topics).context("deleting topics"),
        Cmd::JoinGen { brokers, users_topic, clicks_topic, sizes } => join::generate(&brokers, &users_topic, &clicks_topic, sizes),
        Cmd::JoinCheck { brokers, output, sizes, wait, timeout_s } => {
            join::check(&brokers, &output, sizes, !wait, Duration::from_secs(timeout_s))
        }
        Cmd::WaitDrained { brokers, group, topic, partitions, timeout_s } => {
            topics::wait_drained(&brokers, &group, &topic, partitions, Duration::from_secs(timeout_s))
        }
    }
}

/// One latency run: figures appended to the results file; exits 3 if the output is wrong.
fn latency(args: LatencyArgs) -> anyhow::Result<()> {
    let LatencyArgs { system, brokers, input, output, rate, seconds, warmup_s, checkpoint_ms, window_ms, offset_ms, run, log, results, command } = args;
    let workload = data::Workload { records: rate * seconds, keys: 100_000, partitions: 4, seed: 7 + u64::from(run), keyed: false };
    let outcome = latency::run(&latency::Spec {
        system: &system,
        brokers: &brokers,
        input: &input,
        output: &output,
        workload,
        rate,
        warmup: Duration::from_secs(warmup_s),
        checkpoint_ms,
        window_ms,
        offset_ms,
        run,
        log: &log,
        command: &command,
    })?;
    let ms = |v: Option<i64>| v.map_or_else(|| "–".to_owned(), |v| v.to_string());
    eprintln!(
        "weir-bench: latency {system} at {checkpoint_ms} ms checkpoints, run {run} (offset {offset_ms} ms): {:.0} records/s, {} results, p50 {} / p99 {} / max {} ms, {}",
        outcome.achieved_rate,
        outcome.samples,
        ms(outcome.p50_ms),
        ms(outcome.p99_ms),
        ms(outcome.max_ms),
        verdict(outcome.correct, &outcome.diff, &outcome.note),
    );
    record(&results, &outcome, outcome.correct)
}

/// "output correct|WRONG (counts)[: note]", for a run's log line.
fn verdict(correct: bool, diff: &reference::Diff, note: &str) -> String {
    format!(
        "output {} ({} expected, {} seen, {} missing, {} unexpected){}",
        if correct { "correct" } else { "WRONG" },
        diff.expected,
        diff.observed,
        diff.missing,
        diff.unexpected,
        if note.is_empty() { String::new() } else { format!(": {note}") },
    )
}

/// Appends a run's figures to the results file; a wrong output exits with status 3.
fn record(results: &std::path::Path, outcome: &impl serde::Serialize, correct: bool) -> anyhow::Result<()> {
    report::append(results, &serde_json::to_value(outcome)?)?;
    if correct { Ok(()) } else { std::process::exit(3) }
}
