//! A broker of a test's own, for the tests that freeze, kill and restart one: the other
//! tests run at the same time against the shared broker, which must stay up. It is
//! started by `scripts/kafka/kafka` on free ports in a temporary directory and stopped
//! when dropped; while it lives, `support::brokers()` on the owning thread names it.

use std::cell::RefCell;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

thread_local! {
    /// The private broker this thread's test runs against, if any.
    static PRIVATE: RefCell<Option<String>> = const { RefCell::new(None) };
}

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
        let broker = PrivateBroker {
            port: free_port(),
            controller_port: free_port(),
            data: tempfile::tempdir().expect("a directory for the private broker"),
        };
        broker.run("start");
        PRIVATE.with(|private| *private.borrow_mut() = Some(format!("127.0.0.1:{}", broker.port)));
        broker
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

/// A port nothing listens on now (the broker binds it a few seconds later).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("a bound address").port()
}
