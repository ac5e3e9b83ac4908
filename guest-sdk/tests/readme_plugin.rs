//! A stranger's first plugin: this crate's README example, put at `plugins/<name>` with
//! the README's Cargo.toml, builds with every command the README gives, and
//! `scripts/build-plugins <name>` finds it by its Cargo.toml. Catches a workspace that
//! lists its plugins one by one and a build script that knows a fixed list.

use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The new plugin's name. Fixed, so whatever a killed run leaves the next run replaces.
const NAME: &str = "readme-example-check";
/// What cargo makes of it: the package name with `_` for `-`.
const LIB: &str = "readme_example_check";
/// With the dependencies in the shared build cache a build takes seconds; cold, minutes.
const DEADLINE: Duration = Duration::from_secs(900);
/// The first bytes of a WebAssembly component (a core module has version 1, layer 0).
const COMPONENT_MAGIC: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

#[test]
fn the_readme_example_builds_as_a_new_plugin_with_each_documented_command() {
    let repo = repo();
    let readme =
        fs::read_to_string(repo.join("guest-sdk/README.md")).expect("read guest-sdk/README.md");
    let prose = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let says = |text: &str| {
        assert!(
            prose.contains(text),
            "guest-sdk/README.md no longer says {text}"
        )
    };
    let plugin = NewPlugin::create(&repo, &readme);
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo.join("target"), PathBuf::from);
    let wasm = ["build", "--release", "--target", "wasm32-wasip2"];

    says("`scripts/build-plugins my-op`");
    run("bash", &["scripts/build-plugins", NAME], &repo);
    assert_component(&plugin.component);

    says("`cargo build --release --target wasm32-wasip2 -p my-op`");
    let built = target
        .join("wasm32-wasip2/release")
        .join(format!("{LIB}.wasm"));
    fs::remove_file(&built).ok();
    run("cargo", &[&wasm[..], &["-p", NAME]].concat(), &repo);
    assert_component(&built);

    says("`cargo build --release --target wasm32-wasip2` in `plugins/my-op`");
    fs::remove_file(&built).ok();
    run("cargo", &wasm, &plugin.dir);
    assert_component(&built);

    let (built_unknown, listing) =
        output_of("bash", &["scripts/build-plugins", "no-such-plugin"], &repo);
    assert!(!built_unknown, "an unknown plugin name builds:\n{listing}");
    for known in [
        NAME,
        "window-count",
        "py-total",
        "js-enrich",
        "c-window-count",
        "bad-tables",
    ] {
        assert!(
            listing.contains(known),
            "the error does not list {known}:\n{listing}"
        );
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("guest-sdk/ has a parent")
        .to_owned()
}

/// `plugins/NAME` made of the README's two code blocks; removed on drop, a failed test
/// included, with the component it built and the lock file entry cargo gave it.
struct NewPlugin {
    dir: PathBuf,
    lock: PathBuf,
    lock_before: Vec<u8>,
    component: PathBuf,
}

impl NewPlugin {
    fn create(repo: &Path, readme: &str) -> Self {
        let manifest = code_block(readme, "toml");
        assert!(
            manifest.contains("name = \"my-op\""),
            "the README's Cargo.toml names no my-op:\n{manifest}"
        );
        let lock = repo.join("Cargo.lock");
        let plugin = Self {
            dir: repo.join("plugins").join(NAME),
            lock_before: fs::read(&lock).expect("read Cargo.lock"),
            lock,
            component: repo.join("target/plugins").join(format!("{NAME}.wasm")),
        };
        fs::remove_dir_all(&plugin.dir).ok();
        fs::create_dir_all(plugin.dir.join("src")).expect("create the plugin's directory");
        fs::write(
            plugin.dir.join("Cargo.toml"),
            manifest.replace("my-op", NAME),
        )
        .expect("write Cargo.toml");
        fs::write(plugin.dir.join("src/lib.rs"), code_block(readme, "rust"))
            .expect("write src/lib.rs");
        plugin
    }
}

impl Drop for NewPlugin {
    fn drop(&mut self) {
        fs::remove_dir_all(&self.dir).ok();
        fs::remove_file(&self.component).ok();
        fs::write(&self.lock, &self.lock_before).ok();
    }
}

/// The body of the first block of `lang` code in `markdown`.
fn code_block<'a>(markdown: &'a str, lang: &str) -> &'a str {
    let open = format!("```{lang}\n");
    let start = markdown
        .find(&open)
        .unwrap_or_else(|| panic!("guest-sdk/README.md has no {open:?} block"))
        + open.len();
    let len = markdown[start..]
        .find("```")
        .expect("the README's code block ends");
    &markdown[start..start + len]
}

/// Runs `program args` in `dir`; fails the test with its output unless it succeeds.
#[track_caller]
fn run(program: &str, args: &[&str], dir: &Path) {
    let (success, output) = output_of(program, args, dir);
    assert!(
        success,
        "`{program} {}` in {} failed (without the wasm32-wasip2 target: run scripts/setup-guest-toolchains):\n{output}",
        args.join(" "),
        dir.display()
    );
}

/// Whether `program args` in `dir` succeeded within the deadline, and its output
/// (stdout and stderr as they came). Past the deadline its whole process group is killed.
fn output_of(program: &str, args: &[&str], dir: &Path) -> (bool, String) {
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{NAME}.log"));
    let file = File::create(&log).expect("create the command's log");
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdout(file.try_clone().expect("share the log"))
        .stderr(file)
        .process_group(0)
        .spawn()
        .unwrap_or_else(|err| panic!("start {program}: {err}"));
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the command") {
            break status;
        }
        if Instant::now() >= deadline {
            Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status()
                .ok();
            child.wait().ok();
            let output = fs::read_to_string(&log).unwrap_or_default();
            panic!(
                "`{program} {}` did not finish within {DEADLINE:?}:\n{output}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status.success(),
        fs::read_to_string(&log).unwrap_or_default(),
    )
}

#[track_caller]
fn assert_component(path: &Path) {
    let bytes =
        fs::read(path).unwrap_or_else(|err| panic!("{} was not built: {err}", path.display()));
    assert!(
        bytes.starts_with(&COMPONENT_MAGIC),
        "{} is not a WebAssembly component",
        path.display()
    );
}
