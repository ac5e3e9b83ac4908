//! A broker of a test's own, for the tests that freeze, kill and restart one: the other
//! tests run at the same time against the shared broker, which must stay up. It is
//! started by `scripts/kafka/kafka` on free ports in a temporary directory and stopped
//! when dropped; while it lives, `support::brokers()` on the owning thread (only: a
//! thread the test spawns sees the shared broker) names it. A run killed before the
//! drop leaves it running: `scripts/test` stops every broker whose directory carries
//! its run id (`WEIR_TEST_RUN`) when it exits.

use std::cell::RefCell;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

thread_local! {
    /// The private broker this thread's test runs against, if any.
    static PRIVATE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// How many times a start is tried, each on new ports: a port found free can be taken
/// by another process before the broker binds it.
const START_ATTEMPTS: usize = 3;
/// Where the data directories of private brokers begin, so a wrapper can find them.
pub const DATA_PREFIX: &str = "weir-private-broker-";

/// The private broker of this thread's test, if it has one.
pub(super) fn private() -> Option<String> {
    PRIVATE.with(|private| private.borrow().clone())
}

pub struct PrivateBroker {
    port: u16,
    controller_port: u16,
    data: tempfile::TempDir,
}

impl PrivateBroker {
    /// Starts a broker and points this thread's `support::brokers()` at it.
    pub fn start() -> PrivateBroker {
        for attempt in 1..=START_ATTEMPTS {
            let (port, controller_port) = free_ports();
            let prefix = format!("{DATA_PREFIX}{}-", std::env::var("WEIR_TEST_RUN").unwrap_or_default());
            let data = tempfile::Builder::new().prefix(&prefix).tempdir().expect("a directory for the private broker");
            let broker = PrivateBroker { port, controller_port, data };
            if broker.script("start").status().is_ok_and(|status| status.success()) {
                PRIVATE.with(|private| *private.borrow_mut() = Some(format!("127.0.0.1:{port}")));
                return broker;
            }
            eprintln!("private broker on ports {port}/{controller_port} did not start (attempt {attempt} of {START_ATTEMPTS})");
        }
        panic!("no private broker started in {START_ATTEMPTS} attempts; see the scripts/kafka/kafka output above");
    }

    /// Runs `scripts/kafka/kafka <command>` on this broker; panics if it fails.
    pub fn run(&self, command: &str) {
        let status = self.script(command).status().expect("running scripts/kafka/kafka");
        assert!(status.success(), "scripts/kafka/kafka {command} failed for the broker in {}", self.data.path().display());
    }

    /// The broker's JVM, if it runs.
    pub fn pid(&self) -> Option<i32> {
        let output = self.script("pid").output().ok()?;
        String::from_utf8_lossy(&output.stdout).trim().parse().ok()
    }

    /// Sends `signal` to the broker's JVM; false if it does not run.
    pub fn signal(&self, signal: i32) -> bool {
        let Some(pid) = self.pid() else { return false };
        // SAFETY: kill(2) with a pid read from this broker's pid file; no memory is involved.
        unsafe { libc::kill(pid, signal) == 0 }
    }

    fn script(&self, command: &str) -> Command {
        let mut script = Command::new("bash");
        script
            .arg(script_path())
            .arg(command)
            .env("WEIR_KAFKA_PORT", self.port.to_string())
            .env("WEIR_KAFKA_CONTROLLER_PORT", self.controller_port.to_string())
            .env("WEIR_KAFKA_DATA", self.data.path());
        script
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        PRIVATE.with(|private| *private.borrow_mut() = None);
        self.signal(libc::SIGCONT);
        let _ = self.script("stop").status();
    }
}

fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka/kafka")
}

/// Two distinct ports nothing listens on now (the broker binds them seconds later).
fn free_ports() -> (u16, u16) {
    let bind = || TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    let (first, second) = (bind(), bind());
    let port = |listener: &TcpListener| listener.local_addr().expect("a bound address").port();
    (port(&first), port(&second))
}
