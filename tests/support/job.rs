//! Runs the `weir` binary on a job in a temporary directory, the way a user would,
//! and gives the tests what they need to kill, restart and stop it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The key groups of every test job.
pub const KEY_GROUPS: u32 = 32;
/// The partitions of a test job's changelog, as weir creates it for an input of 1, 2 or
/// 4 partitions: several key groups in each.
pub const CHANGELOG_PARTITIONS: u32 = 4;

pub struct JobDir {
    pub dir: tempfile::TempDir,
    pub name: String,
    pub input: String,
    pub output: String,
}

impl JobDir {
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("job.toml")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Writes the job file: `body` is everything after the top-level keys. Jobs keep
    /// state in `KEY_GROUPS` key groups, not the default 128: fewer groups restore
    /// faster, and the suite runs hundreds of restores.
    pub fn write(&self, parallelism: u32, checkpoint_interval_ms: u64, body: &str) {
        let text = format!(
            "name = \"{name}\"\nparallelism = {parallelism}\ncheckpoint_interval_ms = {checkpoint_interval_ms}\nstate_dir = \"state\"\n\
             key_groups = {KEY_GROUPS}\n{body}",
            name = self.name
        );
        std::fs::write(self.path(), text).expect("writing the job file");
    }

    /// Sets the job file's key groups to `count` (a job an older weir ran with them).
    pub fn set_key_groups(&self, count: u32) {
        let text = std::fs::read_to_string(self.path()).expect("reading the job file");
        let text = text.replace(&format!("key_groups = {KEY_GROUPS}\n"), &format!("key_groups = {count}\n"));
        std::fs::write(self.path(), text).expect("writing the job file");
    }

    /// A window-count job from `input` to `output`.
    pub fn window_count(&self, parallelism: u32, checkpoint_interval_ms: u64, window_ms: u64, sink_extra: &str) {
        self.window_count_in("window-count", parallelism, checkpoint_interval_ms, window_ms, sink_extra);
    }

    /// A window-count job with `plugin`, one of window-count's ports to other languages.
    pub fn window_count_in(&self, plugin: &str, parallelism: u32, checkpoint_interval_ms: u64, window_ms: u64, sink_extra: &str) {
        let config = format!("[operators.config]\nwindow_ms = \"{window_ms}\"\n");
        let plugin = super::plugin(plugin);
        self.one_operator(parallelism, checkpoint_interval_ms, ("count", &plugin, true), &config, sink_extra);
    }

    /// A job of one operator `(name, plugin, key_by)` from `input` to `output`;
    /// `operator_extra` and `sink_extra` are TOML lines added to those tables.
    pub fn one_operator(
        &self,
        parallelism: u32,
        checkpoint_interval_ms: u64,
        (name, plugin, key_by): (&str, &Path, bool),
        operator_extra: &str,
        sink_extra: &str,
    ) {
        self.write(
            parallelism,
            checkpoint_interval_ms,
            &format!(
                r#"
[source]
brokers = "{brokers}"
topic = "{input}"

[[operators]]
name = "{name}"
plugin = "{plugin}"
key_by = {key_by}
{operator_extra}
[sink]
brokers = "{brokers}"
topic = "{output}"
{sink_extra}
"#,
                brokers = super::brokers(),
                input = self.input,
                output = self.output,
                plugin = plugin.display(),
            ),
        );
    }
}

pub fn job_dir(prefix: &str) -> JobDir {
    JobDir {
        dir: tempfile::tempdir().expect("temp dir"),
        name: super::unique_name(prefix),
        input: super::unique_name(&format!("{prefix}-in")),
        output: super::unique_name(&format!("{prefix}-out")),
    }
}

/// The `weir` binary under test: `$WEIR_BIN` (scripts/test names its own build, an
/// installed one may be named too), else the one cargo built with this test binary.
pub fn binary() -> PathBuf {
    std::env::var_os("WEIR_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_weir")), PathBuf::from)
}

/// A command running the `weir` binary under test.
pub fn weir() -> Command {
    Command::new(binary())
}

/// Starts `weir run` on the job file, serving metrics on a free port; its output goes to `log`.
pub fn start(job: &Path, log: &Path, env: &[(&str, &str)]) -> Child {
    let mut command = run_command(job, log);
    command.args(["--metrics-addr", "127.0.0.1:0"]).envs(env.iter().copied());
    command.spawn().expect("starting weir")
}

/// Starts `weir run` on the job file as a user would, with the default metrics address.
pub fn start_with_default_metrics(job: &Path, log: &Path) -> Child {
    run_command(job, log).spawn().expect("starting weir")
}

fn run_command(job: &Path, log: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
    let mut command = weir();
    // SAFETY: prctl(2) is async-signal-safe and touches no memory of the parent. The job dies
    // with the test thread that started it, so a failed assertion never leaves it running.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
        .arg("run")
        .arg(job)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    command
}

/// GET /metrics from the address the job last logged; empty if it cannot be reached. A
/// response cut short (a loaded machine) is asked for again, a few times.
pub fn scrape_metrics(log: &Path) -> String {
    let mut body = String::new();
    for _ in 0..3 {
        body = scrape_once(log);
        if complete(&body) {
            break;
        }
    }
    body
}

/// A response holds as many body bytes as its Content-Length says.
fn complete(response: &str) -> bool {
    let Some((head, body)) = response.split_once("\r\n\r\n") else { return false };
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse::<usize>().ok()).flatten()
    });
    length == Some(body.len())
}

fn scrape_once(log: &Path) -> String {
    status_address(log).map(|addr| get_once(&addr, "/metrics")).unwrap_or_default()
}

/// The address the job last logged for its status page and metrics.
pub fn status_address(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let at = text.rfind("metrics at http://")?;
    Some(text[at + "metrics at http://".len()..].split('/').next().unwrap_or_default().to_string())
}

/// GET `path` from `addr`: the whole response, head and body; empty if it cannot be reached.
pub fn get_once(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else { return String::new() };
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
    if write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").is_err() {
        return String::new();
    }
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body
}

/// The job's `/api/v1/job` from the address it last logged, parsed; `None` while it
/// cannot be reached or its answer is cut short.
pub fn status(log: &Path) -> Option<serde_json::Value> {
    let addr = status_address(log)?;
    let response = get_once(&addr, "/api/v1/job");
    if !complete(&response) {
        return None;
    }
    let (_, body) = response.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

/// Polls the job's status until `done` holds for it, for at most `within`; the last
/// status read, whatever it says.
pub fn status_until(log: &Path, within: Duration, done: impl Fn(&serde_json::Value) -> bool) -> Option<serde_json::Value> {
    let deadline = Instant::now() + within;
    let mut last = None;
    while Instant::now() < deadline {
        if let Some(status) = status(log) {
            if done(&status) {
                return Some(status);
            }
            last = Some(status);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    last
}

pub fn kill(child: &mut Child) {
    // SAFETY: kill(2) on a child we own.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    child.wait().expect("reaping weir");
}

pub fn terminate(child: &mut Child, within: Duration) -> ExitStatus {
    // SAFETY: kill(2) on a child we own.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    wait(child, within).unwrap_or_else(|| panic!("weir did not stop within {within:?} of SIGTERM"))
}

/// What random kills do to the job's state_dir.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum StateDir {
    Kept,
    /// Deleted before every fourth run and a random half of the others, which then
    /// rebuild it from the whole changelog.
    Lost,
}

/// SIGKILLs `kills` fresh runs of the job at random moments from 0 to 2.5 s after spawn,
/// so that kills land during start-up, recovery, processing and checkpoints alike. Every
/// fourth run's moment is counted from when it logs that it runs: however slow the
/// machine makes recovery, some kills land in a running job, and with `StateDir::Lost`
/// some of them after a rebuild. Returns how many kills landed while the job was running.
pub fn kill_at_random_moments(job: &JobDir, log: &Path, kills: usize, seed: u64, state_dir: StateDir) -> usize {
    let mut state = seed;
    let mut while_running = 0;
    for run in 0..kills {
        let once_running = run % 4 == 0;
        let lose = state_dir == StateDir::Lost && (once_running || super::next_random(&mut state).is_multiple_of(2));
        if lose && job.state_dir().exists() {
            std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
        }
        let delay = Duration::from_millis(super::next_random(&mut state) % 2500);
        let running_before = count_in_log(log, RUNNING);
        let mut child = start(&job.path(), log, &[]);
        if once_running {
            wait_running(&mut child, log, running_before);
        }
        let started = Instant::now();
        if let Some(status) = wait(&mut child, delay) {
            panic!("weir exited by itself with {status} after {:?}; log:\n{}", started.elapsed(), read_log(log));
        }
        kill(&mut child);
        if count_in_log(log, RUNNING) > running_before {
            while_running += 1;
        }
    }
    while_running
}

/// What a job logs once it has recovered and processes input.
const RUNNING: &str = "recovered; running";

/// Waits until the job has logged `RUNNING` more than `before` times (a rebuild from the
/// whole changelog may come first); fails at once, showing the log, if it exits.
fn wait_running(child: &mut Child, log: &Path, before: usize) {
    let awaited = format!("`{RUNNING}` logged");
    poll_log(log, &awaited, Duration::from_secs(180), Some(child), |text| text.matches(RUNNING).count() > before);
}

/// Waits for the child to exit, polling, for at most `within`.
pub fn wait(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("waiting for weir") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A job's log as it stands ("" if there is none yet).
pub fn read_log(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// How many times `needle` occurs in the log of a job (0 if there is no log yet).
pub fn count_in_log(log: &Path, needle: &str) -> usize {
    read_log(log).matches(needle).count()
}

/// Waits until `needle` is in the log, polling, for at most `within`; fails showing the
/// log otherwise.
pub fn wait_for_log(log: &Path, needle: &str, within: Duration) {
    wait_for_more(log, needle, 0, within);
}

/// Waits until `needle` occurs more than `before` times in the log, polling, for at most
/// `within`; fails showing the log otherwise.
pub fn wait_for_more(log: &Path, needle: &str, before: usize, within: Duration) {
    wait_until(log, &format!("`{needle}` logged"), within, |text| text.matches(needle).count() > before);
}

/// Waits until a checkpoint that wrote keyed state has committed: the state a kill after
/// it leaves is in the changelog, whenever the job's first records arrived.
pub fn wait_for_committed_state(log: &Path, within: Duration) {
    wait_until_more_committed_state(log, 0, within);
}

/// Waits until more than `before` checkpoints that wrote keyed state have committed.
pub fn wait_until_more_committed_state(log: &Path, before: usize, within: Duration) {
    let awaited = format!("checkpoint {} with state changes committed", before + 1);
    wait_until(log, &awaited, within, |text| committed_states(text) > before);
}

/// How many checkpoints that wrote keyed state a log says have committed.
pub fn committed_states(text: &str) -> usize {
    text.lines().filter(|line| committed_state(line)).count()
}

/// Whether a log line says a checkpoint that wrote keyed state has committed.
pub fn committed_state(line: &str) -> bool {
    line.contains("checkpoint committed") && !line.contains("state_changes=0")
}

/// Polls the log until `done` holds of it, for at most `within`; fails saying what was
/// awaited and showing the log otherwise.
fn wait_until(log: &Path, awaited: &str, within: Duration, done: impl Fn(&str) -> bool) {
    poll_log(log, awaited, within, None, done);
}

/// As `wait_until`, and with `child`, fails at once if it exits first.
fn poll_log(log: &Path, awaited: &str, within: Duration, mut child: Option<&mut Child>, done: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + within;
    loop {
        let text = read_log(log);
        if done(&text) {
            return;
        }
        if let Some(status) = child.as_mut().and_then(|child| child.try_wait().expect("waiting for weir")) {
            panic!("{awaited}: weir exited by itself with {status} first; log:\n{text}");
        }
        assert!(Instant::now() < deadline, "{awaited}: not within {within:?}:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
