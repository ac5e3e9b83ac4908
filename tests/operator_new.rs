//! `weir new`: the skeleton of every language, written into `plugins/` of this checkout,
//! builds with `scripts/build-plugins NAME` as it stands, passes `weir check` with a
//! record and a snapshot round, and comes with a job file that loads and names the
//! component the build made. Each plugin and what its build left are removed again.

use crate::operator_common as common;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The weir checkout the tests run in.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

/// A plugin `weir new` wrote: removed, with its component and its trace in Cargo.lock,
/// however the test ends.
struct Skeleton {
    name: String,
    lock: Vec<u8>,
}

impl Drop for Skeleton {
    fn drop(&mut self) {
        let root = root();
        let _ = std::fs::remove_dir_all(root.join("plugins").join(&self.name));
        let _ = std::fs::remove_file(root.join("target/plugins").join(format!("{}.wasm", self.name)));
        let _ = std::fs::write(root.join("Cargo.lock"), &self.lock);
    }
}

fn run(command: &mut Command) -> Output {
    command.output().unwrap_or_else(|e| panic!("running {command:?}: {e}"))
}

fn assert_ok(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// One skeleton at a time: a cargo run that loads the workspace while another test
/// removes its Rust skeleton (a member) would fail to find it.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn skeleton_builds_and_passes_check(language: &str) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let name = format!("new-{language}-{}", std::process::id());
    let root = root();
    let _skeleton = Skeleton { name: name.clone(), lock: std::fs::read(root.join("Cargo.lock")).expect("Cargo.lock") };
    let wrote = run(support::job::weir().args(["new", language, &name]).current_dir(root.join("plugins")));
    assert_ok(&format!("weir new {language}"), &wrote);
    let again = run(support::job::weir().args(["new", language, &name]).current_dir(&root));
    assert!(!again.status.success(), "weir new wrote over an existing plugin");

    let built = run(Command::new("bash").arg("scripts/build-plugins").arg(&name).current_dir(&root));
    assert_ok(&format!("scripts/build-plugins {name}"), &built);
    let component = common::plugins_dir().join(format!("{name}.wasm"));
    let checked = run(support::job::weir()
        .arg("check")
        .arg(&component)
        .args(["--record", "k=hello@1", "--record", "k=again@2"])
        .env("WEIR_CACHE_DIR", common::cache_dir())
        .env("RUST_LOG", "error"));
    let report = assert_ok(&format!("weir check of the {language} skeleton"), &checked);
    assert!(report.contains("process (2 record(s) in, 2 out)"), "the skeleton does not pass its records on:\n{report}");
    assert!(report.contains("can run as a weir operator"), "{report}");

    let job = weir::job::load(&root.join("plugins").join(&name).join("job.toml"))
        .unwrap_or_else(|e| panic!("the skeleton's job file does not load: {e}"));
    assert_eq!(job.name, name);
    let plugin = job.operators[0].plugin.canonicalize().expect("the job names the built component");
    assert_eq!(plugin, component.canonicalize().unwrap(), "the job file names another component");
}

#[test]
fn a_rust_skeleton_builds_and_passes_check() {
    skeleton_builds_and_passes_check("rust");
}

#[test]
fn a_python_skeleton_builds_and_passes_check() {
    skeleton_builds_and_passes_check("python");
}

#[test]
fn a_javascript_skeleton_builds_and_passes_check() {
    skeleton_builds_and_passes_check("js");
}

#[test]
fn a_c_skeleton_builds_and_passes_check() {
    skeleton_builds_and_passes_check("c");
}

#[test]
fn a_go_skeleton_builds_and_passes_check() {
    skeleton_builds_and_passes_check("go");
}

#[test]
fn a_bad_name_or_a_directory_outside_a_checkout_is_refused() {
    let bad = run(support::job::weir().args(["new", "rust", "Bad_Name"]).current_dir(root()));
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot name a plugin"), "{bad:?}");
    let outside = tempfile::tempdir().expect("a scratch dir");
    let lost = run(support::job::weir().args(["new", "c", "op"]).current_dir(outside.path()));
    assert!(!lost.status.success());
    assert!(String::from_utf8_lossy(&lost.stderr).contains("not inside a weir checkout"), "{lost:?}");
}
