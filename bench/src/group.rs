//! How fast Kafka's group protocols move a member's partitions to the others: the
//! ground that several weir processes sharing one job stand on. `group-failover` runs
//! `--members` processes of `group-member` in one consumer group on one topic, waits
//! until every partition has exactly one owner, then, `--events` times, stops one
//! member (SIGKILL: it stops answering; or SIGTERM: it leaves) and times how long
//! until the others own all its partitions, and starts it again.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// The group protocol a member speaks.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Protocol {
    /// The classic protocol with the cooperative-sticky assignor.
    Classic,
    /// KIP-848's consumer protocol: the broker assigns, members heartbeat.
    Consumer,
}

/// How a member is stopped.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Stop {
    /// SIGKILL: the group notices when its session times out.
    Kill,
    /// SIGTERM: it leaves the group as it closes.
    Term,
}

/// Runs one member until killed: prints each change of its assignment as a line of
/// partition numbers (empty: none).
pub(crate) fn member(brokers: &str, topic: &str, group: &str, protocol: Protocol, session_ms: u64) -> anyhow::Result<()> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers).set("group.id", group).set("enable.auto.commit", "false");
    match protocol {
        Protocol::Classic => {
            config
                .set("partition.assignment.strategy", "cooperative-sticky")
                .set("session.timeout.ms", session_ms.to_string())
                .set("heartbeat.interval.ms", (session_ms / 3).to_string());
        }
        Protocol::Consumer => {
            config.set("group.protocol", "consumer");
        }
    }
    let consumer: BaseConsumer = config.create().context("creating the member's consumer")?;
    consumer.subscribe(&[topic]).context("subscribing")?;
    leave_on_sigterm();
    let mut last: Option<BTreeSet<i32>> = None;
    let mut stdout = std::io::stdout();
    while !TERMINATED.load(Ordering::Relaxed) {
        if let Some(Err(error)) = consumer.poll(Duration::from_millis(20)) {
            eprintln!("group-member: {error}");
        }
        let owned: BTreeSet<i32> = consumer.assignment()?.elements().iter().map(|e| e.partition()).collect();
        if last.as_ref() != Some(&owned) {
            let line: Vec<String> = owned.iter().map(i32::to_string).collect();
            writeln!(stdout, "{}", line.join(","))?;
            stdout.flush()?;
            last = Some(owned);
        }
    }
    // Leaving: close() sends the leave (classic) or the final heartbeat (consumer).
    drop(consumer);
    Ok(())
}

/// Set by SIGTERM: the member then leaves the group as it closes.
static TERMINATED: AtomicBool = AtomicBool::new(false);

fn leave_on_sigterm() {
    extern "C" fn on_term(_: libc::c_int) {
        TERMINATED.store(true, Ordering::Relaxed);
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
    }
}

/// The options of one `group-failover` run.
pub(crate) struct Failover<'a> {
    pub(crate) brokers: &'a str,
    pub(crate) topic: &'a str,
    pub(crate) partitions: i32,
    pub(crate) members: usize,
    pub(crate) events: usize,
    pub(crate) protocol: Protocol,
    pub(crate) stop: Stop,
    pub(crate) session_ms: u64,
}

/// Each member's latest assignment, by member index.
type Owners = Arc<Mutex<BTreeMap<usize, BTreeSet<i32>>>>;

pub(crate) fn failover(run: &Failover<'_>) -> anyhow::Result<()> {
    let group = format!("{}-group", run.topic);
    let owners: Owners = Arc::default();
    let mut children: Vec<Child> = Vec::new();
    for index in 0..run.members {
        children.push(spawn(run, &group, index, &owners)?);
    }
    let all: BTreeSet<i32> = (0..run.partitions).collect();
    let settle = Duration::from_secs(120);
    wait_until(&owners, settle, |owners| owned_once(owners, &all) && owners.values().all(|p| !p.is_empty()))
        .context("the group never assigned every partition to one member")?;

    let mut times = Vec::new();
    for event in 0..run.events {
        let index = event % run.members;
        let victim = &mut children[index];
        let stopped = Instant::now();
        let signal = match run.stop {
            Stop::Kill => libc::SIGKILL,
            Stop::Term => libc::SIGTERM,
        };
        // SAFETY: kill(2) on a child this process spawned and has not reaped.
        unsafe {
            libc::kill(victim.id() as libc::pid_t, signal);
        }
        let _ = victim.wait();
        owners.lock().unwrap().remove(&index);
        wait_until(&owners, settle, |owners| owned_once(owners, &all))
            .with_context(|| format!("event {event}: the others never took member {index}'s partitions"))?;
        let took = stopped.elapsed();
        eprintln!("group-failover: event {event}: member {index}'s partitions moved in {} ms", took.as_millis());
        times.push(took);
        children[index] = spawn(run, &group, index, &owners)?;
        wait_until(&owners, settle, |owners| {
            owned_once(owners, &all) && owners.get(&index).is_some_and(|p| !p.is_empty())
        })
        .with_context(|| format!("event {event}: member {index} never got partitions back"))?;
    }
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    times.sort();
    let ms = |d: &Duration| d.as_millis();
    println!(
        "{{\"protocol\":\"{:?}\",\"stop\":\"{:?}\",\"session_ms\":{},\"members\":{},\"partitions\":{},\"events\":{},\"p50_ms\":{},\"max_ms\":{},\"all_ms\":{:?}}}",
        run.protocol,
        run.stop,
        run.session_ms,
        run.members,
        run.partitions,
        times.len(),
        times.get(times.len() / 2).map_or(0, ms),
        times.last().map_or(0, ms),
        times.iter().map(ms).collect::<Vec<_>>()
    );
    Ok(())
}

fn spawn(run: &Failover<'_>, group: &str, index: usize, owners: &Owners) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding weir-bench")?;
    let mut child = Command::new(exe)
        .args(["group-member", "--brokers", run.brokers, "--topic", run.topic, "--group", group])
        .args(["--protocol", &format!("{:?}", run.protocol).to_lowercase()])
        .args(["--session-ms", &run.session_ms.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting a group member")?;
    let stdout = child.stdout.take().expect("piped");
    let owners = owners.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let owned = line.split(',').filter(|p| !p.is_empty()).filter_map(|p| p.parse().ok()).collect();
            owners.lock().unwrap().insert(index, owned);
        }
    });
    Ok(child)
}

/// Every partition of `all` has exactly one owner.
fn owned_once(owners: &BTreeMap<usize, BTreeSet<i32>>, all: &BTreeSet<i32>) -> bool {
    let count: usize = owners.values().map(BTreeSet::len).sum();
    let union: BTreeSet<i32> = owners.values().flatten().copied().collect();
    count == all.len() && &union == all
}

fn wait_until(owners: &Owners, within: Duration, done: impl Fn(&BTreeMap<usize, BTreeSet<i32>>) -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while !done(&owners.lock().unwrap()) {
        if Instant::now() > deadline {
            bail!("not within {within:?}: {:?}", owners.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}
