//! The README's demo, end to end on the local broker: produces a click stream, runs
//! the window-count job exactly-once with the `weir` binary, waits for every window
//! to be committed, prints the per-window counts, checks them against a reference
//! computed here, and stops the job with SIGTERM (a final checkpoint, exit 0).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const PARTITIONS: i32 = 4;
const USERS: u64 = 20;
const RECORDS: usize = 200_000;
const WINDOW_MS: i64 = 10_000;
const START_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const WAIT: Duration = Duration::from_secs(120);

fn main() -> anyhow::Result<()> {
    let brokers = std::env::var("WEIR_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let run = format!("demo-{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs());
    let (input, output) = (format!("{run}-clicks"), format!("{run}-counts"));
    let dir = root.join("target/demo").join(&run);
    std::fs::create_dir_all(&dir)?;

    create_topics(&brokers, &[&input, &output])?;
    let clicks = clicks();
    let started = Instant::now();
    produce(&brokers, &input, &clicks)?;
    println!("produced {} clicks of {USERS} users to {input} ({PARTITIONS} partitions) in {:.1}s", clicks.len(), started.elapsed().as_secs_f64());

    let job = write_job(&dir, &run, &brokers, &input, &output, &root.join("target/plugins/window-count.wasm"))?;
    println!("running: weir run {}", job.display());
    let log = dir.join("weir.log");
    let mut weir = start_weir(&root, &job, &log)?;
    let expected = reference(&clicks);
    let started = Instant::now();
    let committed = read_committed(&brokers, &output, expected.len(), WAIT);
    let elapsed = started.elapsed();
    let status = status_line(&log);
    stop(&mut weir)?;
    let committed = committed?;

    print_counts(&committed);
    let actual: BTreeMap<String, u64> = committed.iter().map(|(_, v)| (v.clone(), 1)).collect();
    println!();
    println!("{} clicks in, {} window counts committed (read_committed) in {:.1}s", clicks.len(), committed.len(), elapsed.as_secs_f64());
    if let Some(line) = status {
        println!("{line}");
    }
    println!("job log: {}", log.display());
    if committed.len() != expected.len() || actual != expected {
        bail!("the committed counts differ from the reference computed by the demo");
    }
    println!("every count matches the reference: nothing lost, nothing duplicated");
    Ok(())
}

/// Clicks with event times non-decreasing per partition, then one far-future record
/// per partition so the watermark closes every window.
fn clicks() -> Vec<(i32, String, i64)> {
    let mut state = 42u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut clocks = [START_MS; PARTITIONS as usize];
    let mut clicks: Vec<(i32, String, i64)> = (0..RECORDS)
        .map(|_| {
            let partition = (next() % PARTITIONS as u64) as usize;
            clocks[partition] += (next() % 20) as i64;
            (partition as i32, format!("user-{:02}", next() % USERS), clocks[partition])
        })
        .collect();
    let flush = START_MS + 1_000 * WINDOW_MS;
    clicks.extend((0..PARTITIONS).map(|p| (p, "flush".to_string(), flush)));
    clicks
}

fn reference(clicks: &[(i32, String, i64)]) -> BTreeMap<String, u64> {
    let last = clicks.iter().filter(|c| c.1 != "flush").map(|c| c.2).max().unwrap_or(0);
    let mut counts: BTreeMap<(String, i64), u64> = BTreeMap::new();
    for (_, user, ts) in clicks.iter().filter(|c| c.2 <= last) {
        *counts.entry((user.clone(), ts - ts.rem_euclid(WINDOW_MS))).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((user, start), n)| {
            (format!("{{\"key\":\"{user}\",\"window_start\":{start},\"window_end\":{},\"count\":{n}}}", start + WINDOW_MS), 1)
        })
        .collect()
}

fn create_topics(brokers: &str, names: &[&str]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create()?;
    let topics: Vec<NewTopic> = names.iter().map(|n| NewTopic::new(n, PARTITIONS, TopicReplication::Fixed(1))).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = runtime
        .block_on(admin.create_topics(&topics, &AdminOptions::new().operation_timeout(Some(WAIT))))
        .with_context(|| format!("creating topics on {brokers}; is the broker up (scripts/kafka/kafka start)?"))?;
    for result in results {
        result.map_err(|(topic, code)| anyhow::anyhow!("creating topic {topic}: {code}"))?;
    }
    Ok(())
}

fn produce(brokers: &str, topic: &str, clicks: &[(i32, String, i64)]) -> anyhow::Result<()> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .create()?;
    for (i, (partition, user, ts)) in clicks.iter().enumerate() {
        let value = format!("{{\"user\":\"{user}\",\"page\":\"/products/{}\"}}", i % 50);
        let mut record = BaseRecord::to(topic).partition(*partition).key(user.as_str()).payload(value.as_str()).timestamp(*ts);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => bail!("producing to {topic}: {e}"),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(WAIT)?;
    Ok(())
}

fn write_job(dir: &Path, name: &str, brokers: &str, input: &str, output: &str, plugin: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("job.toml");
    let text = format!(
        r#"name = "{name}"
parallelism = 2
checkpoint_interval_ms = 1000
state_dir = "state"

[source]
brokers = "{brokers}"
topic = "{input}"
start = "earliest"

[[operators]]
name = "count"
plugin = "{plugin}"
key_by = true
[operators.config]
window_ms = "{WINDOW_MS}"

[sink]
brokers = "{brokers}"
topic = "{output}"
delivery = "exactly-once"
"#,
        plugin = plugin.display()
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

fn start_weir(root: &Path, job: &Path, log: &Path) -> anyhow::Result<Child> {
    let log = std::fs::File::create(log)?;
    Command::new(root.join("target/release/weir"))
        .arg("run")
        .arg(job)
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting target/release/weir (build it with cargo build --release)")
}

fn read_committed(brokers: &str, topic: &str, expected: usize, within: Duration) -> anyhow::Result<Vec<(String, String)>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("{topic}-reader"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
    }
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + within;
    let mut records = Vec::new();
    while records.len() < expected {
        if Instant::now() > deadline {
            bail!("only {} of {expected} window counts were committed within {within:?}", records.len());
        }
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message?;
            let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
            let value = String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned();
            records.push((key, value));
            if records.len() % 500 == 0 {
                print!("\r{} window counts committed", records.len());
                std::io::stdout().flush().ok();
            }
        }
    }
    println!("\r{} window counts committed", records.len());
    Ok(records)
}

fn print_counts(committed: &[(String, String)]) {
    let mut by_window: BTreeMap<i64, Vec<(String, u64)>> = BTreeMap::new();
    for (_, value) in committed {
        let parsed: serde_json::Value = serde_json::from_str(value).unwrap_or_default();
        let start = parsed["window_start"].as_i64().unwrap_or_default();
        let key = parsed["key"].as_str().unwrap_or_default().to_string();
        by_window.entry(start).or_default().push((key, parsed["count"].as_u64().unwrap_or_default()));
    }
    println!("\nclicks per user per 10 s window (first 5 windows of {}):", by_window.len());
    for (start, mut counts) in by_window.into_iter().take(5) {
        counts.sort();
        let line: Vec<String> = counts.iter().take(8).map(|(k, n)| format!("{k}={n}")).collect();
        println!("  window_start={start}: {} ...", line.join(" "));
    }
}

/// Where the job served its status page, from its log line `status page at http://ADDR/ (…)`.
fn status_line(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let at = text.find("status page at ")?;
    let url = text[at + "status page at ".len()..].split_whitespace().next()?.to_string();
    Some(format!("the status page was served at {url} (its JSON at {url}api/v1/job, metrics at {url}metrics) while the job ran"))
}

fn stop(weir: &mut Child) -> anyhow::Result<()> {
    // SAFETY: kill(2) on a child we own.
    unsafe {
        libc::kill(weir.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = weir.try_wait()? {
            if !status.success() {
                bail!("weir exited with {status} after SIGTERM");
            }
            println!("weir stopped after committing a final checkpoint (exit 0)");
            return Ok(());
        }
        if Instant::now() > deadline {
            weir.kill()?;
            bail!("weir did not stop within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
