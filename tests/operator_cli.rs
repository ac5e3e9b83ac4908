//! `weir check` on the built binary: every example plugin passes (with its
//! config and a sample record), every bad one fails non-zero with one error
//! paragraph that names the file.

use crate::operator_common as common;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

use common::{cache_dir, plugin_path, scratch_file};

fn check(plugin: &Path, args: &[&str]) -> Output {
    weir_check(std::iter::once(plugin.as_os_str()).chain(args.iter().map(OsStr::new)))
}

/// `weir check` with `args`.
fn weir_check<'a>(args: impl IntoIterator<Item = &'a OsStr>) -> Output {
    crate::support::job::weir()
        .arg("check")
        .args(args)
        // Share the tests' compiled-code cache; keep stderr to the error itself.
        .env("WEIR_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "error")
        .output()
        .expect("run weir check")
}

/// Passes; returns what it printed.
fn assert_passes(name: &str, args: &[&str]) -> String {
    let path = plugin_path(name);
    let out = check(&path, args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "weir check {name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let speaks = ["0.2.0", "0.3.0"].iter().any(|v| stdout.contains(&format!("package:  weir:operator@{v}")) && stdout.contains(&format!("world:    weir:operator@{v}")));
    assert!(speaks, "{stdout}");
    assert!(
        stdout.contains(&format!(
            "ok: {} can run as a weir operator",
            path.display()
        )),
        "{stdout}"
    );
    stdout.into_owned()
}

/// Fails non-zero with exactly one `error:` line, which names the file and
/// contains `expected`.
fn assert_fails(path: &Path, args: &[&str], expected: &str) {
    let out = check(path, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "weir check {} must fail:\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout)
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error paragraph expected:\n{stderr}");
    assert!(
        errors[0].contains(&path.display().to_string()),
        "the error must name the file: {}",
        errors[0]
    );
    assert!(
        errors[0].contains(expected),
        "the error must say `{expected}`: {}",
        errors[0]
    );
}

#[test]
fn every_example_plugin_passes() {
    assert_passes(
        "window-count",
        &["--config", "window_ms=1000", "--record", "x"],
    );
    assert_passes(
        "session-sum",
        &[
            "--config",
            "field=amount",
            "--config",
            "gap_ms=500",
            "--record",
            r#"{"amount":3}"#,
        ],
    );
    assert_passes(
        "py-filter",
        &[
            "--config",
            "field=kind",
            "--config",
            "equals=click",
            "--record",
            r#"{"kind":"click"}"#,
        ],
    );
    for port in ["c-window-count", "go-window-count"] {
        assert_passes(port, &["--config", "window_ms=1000", "--record", "k=x@5"]);
    }
    assert_passes(
        "js-enrich",
        &[
            "--config",
            r#"set={"region":"eu"}"#,
            "--record",
            r#"{"a":1}"#,
        ],
    );
}

#[test]
fn keyed_records_run_and_a_saved_snapshot_restores_in_every_window_count() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = |name: &str| dir.path().join(format!("{name}.json")).display().to_string();
    for name in ["window-count", "c-window-count", "go-window-count"] {
        let saved = snapshot(name);
        let first = assert_passes(
            name,
            &[
                "--config", "window_ms=1000",
                "--record", "a=x@100", "--record", "b=y@200", "--record", "a=z@1500",
                "--watermark", "1000", "--save-snapshot", &saved,
            ],
        );
        for line in [
            r#"on-watermark emitted: key "a" value "{\"key\":\"a\",\"window_start\":0,\"window_end\":1000,\"count\":1}" @999"#,
            r#"on-watermark emitted: key "b" value "{\"key\":\"b\",\"window_start\":0,\"window_end\":1000,\"count\":1}" @999"#,
            "saved:    1 entries at watermark 1000",
        ] {
            assert!(first.contains(line), "{name}: no `{line}` in\n{first}");
        }
        // The restored window [1000, 2000) holds a's record at 1500: one more makes 2.
        let second = assert_passes(
            name,
            &["--config", "window_ms=1000", "--restore", &saved, "--record", "a=w@1600"],
        );
        for line in [
            "restore:  1 entries at watermark 1000",
            r#"on-watermark emitted: key "a" value "{\"key\":\"a\",\"window_start\":1000,\"window_end\":2000,\"count\":2}" @1999"#,
        ] {
            assert!(second.contains(line), "{name}: no `{line}` in\n{second}");
        }
    }
    // Another plugin's state is refused by the plugin, naming what it expected.
    assert_fails(
        &plugin_path("c-window-count"),
        &["--config", "window_ms=1000", "--restore", &snapshot("window-count")],
        "restore returned an error: c-window-count",
    );

    // A records file: keyed JSON values, an object passed as compact JSON.
    let records = dir.path().join("records.jsonl");
    std::fs::write(
        &records,
        "{\"key\":\"u1\",\"value\":{\"amount\":5},\"timestamp\":10}\n\n{\"key\":\"u1\",\"value\":\"{\\\"amount\\\":2}\"}\n",
    )
    .unwrap();
    let totals = assert_passes(
        "py-total",
        &["--config", "field=amount", "--records-file", records.to_str().unwrap()],
    );
    assert!(totals.contains(r#"process emitted: key "u1" value "{\"key\":\"u1\",\"total\":7}" @1"#), "{totals}");

    // Files that are not what they should be: an error naming the file and the line (a
    // line without `value` is a tombstone; one with a field check does not know is not).
    std::fs::write(&records, "{\"key\":\"u1\",\"valu\":1}\n").unwrap();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "not json").unwrap();
    for (args, expected) in [
        (["--records-file", records.to_str().unwrap()], "line 1 of the records file"),
        (["--restore", broken.to_str().unwrap()], "broken.json is not a snapshot"),
    ] {
        let mut all = vec!["--config", "field=amount"];
        all.extend(args);
        let out = check(&plugin_path("py-total"), &all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{stderr}");
    }
}

#[test]
fn validation_alone_needs_no_config() {
    assert_passes("window-count", &["--no-init"]);
}

#[test]
fn every_bad_plugin_fails_naming_the_file() {
    assert_fails(
        &plugin_path("bad-trap"),
        &["--record", "poison"],
        "trapped in process",
    );
    assert_fails(
        &plugin_path("bad-loop"),
        &["--call-timeout-ms", "200"],
        "did not return within its 200 ms deadline",
    );
    assert_fails(
        &plugin_path("bad-memory"),
        &["--memory-limit-mb", "32"],
        "over its limit of 33554432 bytes",
    );
    assert_fails(&plugin_path("bad-file"), &[], "cannot open /etc/passwd");
    assert_fails(
        &plugin_path("bad-socket"),
        &[],
        "cannot connect to 127.0.0.1:9",
    );
    assert_fails(
        &plugin_path("bad-other-world"),
        &[],
        "does not export the weir:operator/operator world",
    );
    assert_fails(&plugin_path("bad-newer-major"), &[], "weir:operator@1.0.0");
}

#[test]
fn files_that_are_not_components_fail_naming_the_file() {
    assert_fails(
        &scratch_file("cli-core-module.wasm", b"\0asm\x01\0\0\0"),
        &[],
        "cargo build --target wasm32-wasip2",
    );
    assert_fails(
        &scratch_file("cli-not-wasm.wasm", b"GIF89a"),
        &[],
        "is not a WebAssembly file",
    );
    let whole = std::fs::read(plugin_path("session-sum")).expect("read session-sum");
    assert_fails(
        &scratch_file("cli-truncated.wasm", &whole[..whole.len() / 3]),
        &[],
        "is truncated",
    );
    assert_fails(
        Path::new("/nonexistent/plugin.wasm"),
        &[],
        "cannot read plugin",
    );
}

#[test]
fn a_config_init_rejects_fails_with_its_message() {
    assert_fails(
        &plugin_path("window-count"),
        &["--config", "window_ms=-5"],
        "`window_ms` = -5 is out of range",
    );
}

#[test]
fn hostile_outputs_and_tables_fail_naming_the_file_and_the_bound() {
    assert_fails(
        &plugin_path("bad-output"),
        &["--record", "amplify"],
        "more than 67108864 bytes of keys, values and headers, the limit per call",
    );
    assert_fails(
        &plugin_path("bad-output"),
        &["--record", "timestamp:-9223372036854775808"],
        "has timestamp -9223372036854775808",
    );
    assert_fails(
        &plugin_path("bad-tables"),
        &["--no-init"],
        "bytes of memory and tables, over the limit of 67108864 bytes",
    );
}

/// A records-file line without `value` is a tombstone: handed marked with
/// --tombstones, as a job's `tombstones = true` hands it, and as an empty value without.
#[test]
fn check_hands_tombstones_as_a_job_does() {
    let records = scratch_file("tombstones.jsonl", b"{\"key\": \"gone\"}\n{\"key\": \"row\", \"value\": {\"kind\": \"a\"}}\n");
    let args = |tombstones: bool| {
        let mut args = vec!["--config", "field=kind", "--config", "equals=a", "--records-file", records.to_str().unwrap()];
        args.extend(tombstones.then_some("--tombstones"));
        args
    };
    let marked = assert_passes("py-filter", &args(true));
    assert!(marked.contains("process emitted: key \"gone\" value (none: a tombstone)"), "{marked}");
    assert!(marked.contains("process (2 record(s) in, 2 out)"), "{marked}");
    let unmarked = assert_passes("py-filter", &args(false));
    assert!(unmarked.contains("process (2 record(s) in, 1 out)") && !unmarked.contains("tombstone"), "{unmarked}");
}

/// `--job` checks an operator of a job file with what the job gives it: its limits and
/// config, and key_by (an operator not routed by key may keep no state, as in the job).
#[test]
fn check_takes_an_operator_from_a_job_file() {
    let plugin = plugin_path("window-count");
    let job = format!(
        "name = \"check-job\"\nparallelism = 2\ncheckpoint_interval_ms = 1000\nstate_dir = \"state\"\n\
         [source]\nbrokers = \"127.0.0.1:9092\"\ntopic = \"in\"\n\
         [[operators]]\nname = \"count\"\nplugin = \"{plugin}\"\nkey_by = true\nmemory_limit_mb = 48\ncall_timeout_ms = 750\n\
         [operators.config]\nwindow_ms = \"1000\"\n\
         [[operators]]\nname = \"unkeyed\"\nplugin = \"{plugin}\"\n[operators.config]\nwindow_ms = \"1000\"\n\
         [sink]\nbrokers = \"127.0.0.1:9092\"\ntopic = \"out\"\n",
        plugin = plugin.display()
    );
    let job = scratch_file("check-job.toml", job.as_bytes());
    let job = job.to_str().unwrap();
    let check = |args: &[&str]| {
        let out = weir_check(["--job", job].iter().chain(args).map(OsStr::new));
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    let (ok, counted) = check(&["--operator", "count", "--record", "k=x@5"]);
    assert!(ok, "{counted}");
    assert!(counted.contains("limits:   memory and tables 48.0 MiB, call timeout 750 ms"), "{counted}");
    assert!(counted.contains("init:     ok with 1 config entry"), "{counted}");
    let (ok, unkeyed) = check(&["--operator", "unkeyed", "--record", "k=x@5"]);
    assert!(!ok && unkeyed.contains("its input is not routed by key") && unkeyed.contains("key_by = true for operator `unkeyed`"), "{unkeyed}");
    let (ok, missing) = check(&["--operator", "nope"]);
    assert!(!ok && missing.contains("has no operator `nope`; its operators: count, unkeyed"), "{missing}");
    let (ok, both) = check(&["--operator", "count", "--config", "window_ms=5"]);
    assert!(!ok && both.contains("cannot be used with"), "{both}");
}

#[test]
fn files_too_large_or_too_slow_to_compile_fail_naming_the_bound() {
    assert_fails(
        &plugin_path("py-filter"),
        &["--max-plugin-mb", "1"],
        "over the 1048576-byte limit for a plugin",
    );
    assert_fails(Path::new("/dev/zero"), &[], "is not a regular file");
    let out = crate::support::job::weir()
        .args(["check", "--compile-timeout-ms", "100"])
        .arg(plugin_path("py-filter"))
        .env("WEIR_CACHE_DIR", "")
        .env("RUST_LOG", "error")
        .output()
        .expect("run weir check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("did not compile within 100 ms"), "{stderr}");
}

#[test]
fn a_log_flood_is_cut_rate_limited_and_summarised() {
    // 10,000 lines of 4 KB to stdout and as many log messages, and one 40 MB line:
    // unbounded, that was 80 MB of host log and 10,000 more lines for the long one.
    let out = crate::support::job::weir()
        .arg("check")
        .arg(plugin_path("bad-output"))
        .args(["--record", "flood", "--call-timeout-ms", "20000"])
        .env("WEIR_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "info")
        .output()
        .expect("run weir check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}",
        &stderr[stderr.len().saturating_sub(2000)..]
    );
    // Default: bursts of 1,000 lines and 640 KiB.
    assert!(out.stderr.len() < 1 << 20, "{} bytes of host log", out.stderr.len());
    let summaries: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("of plugin output over the log rate limit"))
        .collect();
    assert_eq!(summaries.len(), 1, "one summary line: {summaries:?}");
    assert!(summaries[0].contains("log_lines_per_sec"), "{}", summaries[0]);
}

/// The most resident memory `weir check` may reach on a hostile snapshot round: the
/// round's cap (twice the 64 MiB memory limit), the guest and the runtime; each mode
/// stays under 60 MiB. Before the round was checked, `alias:100000` reached 4.1 GiB
/// in 10 s and panicked, and `endless` 4.7 GiB in 100 s without an error.
const CHECK_RSS_BYTES: u64 = 256 << 20;

/// How `weir check` ended, what it wrote to stderr, and its peak resident memory as GNU
/// time reports it. Not from this test's own `wait4`: the kernel carries the high-water
/// mark of the spawning process across `exec`, so a check spawned by the busy test binary
/// read 280 MiB where it used 35. Killed, with its process group, after two minutes.
fn check_measured(plugin: &Path, args: &[&str]) -> (Option<i32>, String, u64) {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().expect("a scratch dir");
    let stderr_path = dir.path().join("stderr");
    let peak_path = dir.path().join("peak-kib");
    let stderr = std::fs::File::create(&stderr_path).expect("a stderr file");
    let mut child = Command::new("/usr/bin/time")
        .args(["--quiet", "--format", "%M", "--output"])
        .arg(&peak_path)
        .arg(crate::support::job::binary())
        .arg("check")
        .arg(plugin)
        .args(args)
        .env("WEIR_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .expect("run weir check under /usr/bin/time (scripts/setup installs Debian's `time`)");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for weir check") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: kill(2) on the process group this test started.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
            panic!("weir check {} {args:?} ran for over two minutes", plugin.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let peak = std::fs::read_to_string(&peak_path).unwrap_or_default();
    let kib: u64 = peak.trim().parse().unwrap_or_else(|_| panic!("/usr/bin/time wrote no peak memory: {peak:?}"));
    (status.code(), text, kib * 1024)
}

#[test]
fn hostile_state_fails_check_as_it_fails_a_job_in_bounded_memory() {
    let plugin = plugin_path("bad-output");
    let roomy: &[&str] = &["--memory-limit-mb", "320", "--call-timeout-ms", "20000"];
    for (mode, extra, expected) in [
        ("alias:100000", &[][..], "counted per entry (entries that share bytes count each time)"),
        ("endless", &[], "one round of changes holds more than 134217728 bytes (counting 128 bytes per entry)"),
        ("removal-value", &[], "is a removal with a value (value-offset 4294967040"),
        ("padded:32", &[], "holds 33554432 data bytes in 0 entries"),
        ("twice", &[], "key b\"k1\" comes twice in one round"),
        ("big:1", &[], "more than a changelog record may hold (998995 bytes"),
        ("big:130", roomy, "refused before it was copied"),
    ] {
        let state = format!("state={mode}");
        let mut args = vec!["--config", &state, "--record", "k1=v", "--record", "k1=w"];
        args.extend(extra);
        let started = std::time::Instant::now();
        let (code, stderr, rss) = check_measured(&plugin, &args);
        eprintln!("weir check, state {mode}: exit {code:?} in {:?}, peak RSS {} MiB", started.elapsed(), rss >> 20);
        assert_eq!(code, Some(1), "{mode}: an error, not a panic:\n{stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|line| line.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "{mode}: one error paragraph expected:\n{stderr}");
        assert!(errors[0].contains(&plugin.display().to_string()), "{mode}: the error must name the file: {}", errors[0]);
        assert!(errors[0].contains("snapshot returned malformed state changes"), "{mode}: {}", errors[0]);
        assert!(errors[0].contains(expected), "{mode}: the error must say `{expected}`: {}", errors[0]);
        let bound = if extra.is_empty() { CHECK_RSS_BYTES } else { CHECK_RSS_BYTES + (320 << 20) };
        assert!(rss < bound, "{mode}: weir check reached {} MiB", rss >> 20);
    }
}

#[test]
fn a_round_a_job_restores_restores_in_check_at_the_same_chunk_size() {
    // 1,024 keys of 100 KiB: a job restores them in chunks of 4 MiB into 64 MiB of
    // memory; in one chunk of 1,024 entries, 100 MiB, they would not fit.
    let out = assert_passes("bad-output", &["--config", "state=many:1024:100", "--call-timeout-ms", "10000"]);
    assert!(out.contains("snapshot (1024 changed keys, 104868864 bytes): ok"), "{out}");
    assert!(out.contains("restore:  ok into a fresh instance (1024 entries)"), "{out}");
}

/// `weir check` hands records to `process` in the batches a job would (at most 1 024
/// records and 1 MiB, passed by one record): 24 records of 900 kB, 21 MB together, pass a
/// plugin whose memory is 16 MiB, as they do in a job, though they fit in no one call.
#[test]
fn check_hands_records_over_in_the_batches_a_job_would() {
    let value = "v".repeat(900_000);
    let lines: String = (0..24).map(|i| format!("{{\"key\": \"k{i}\", \"value\": \"{value}\"}}\n")).collect();
    let records = scratch_file("check-batches.jsonl", lines.as_bytes());
    let stdout = assert_passes("bad-trap", &["--memory-limit-mb", "16", "--records-file", records.to_str().unwrap()]);
    assert!(stdout.contains("process (24 record(s) in, 24 out)"), "{stdout}");
}
