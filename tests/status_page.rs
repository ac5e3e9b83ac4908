//! Seeing a running job, against the real broker and real components: `/api/v1/job`
//! says what the test knows (the graph, checkpoints committed in order, lag down to 0
//! once drained, rates, a restart with the plugin's message, dead letters), the Grafana
//! dashboard names only series a running job serves, the page renders in a real
//! browser (Debian's chromium, headless), a long restore shows how far it is, and
//! `weir status` prints the same facts or a clear error where no job answers.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::clicks;
use support::job::{self, JobDir};
use support::{Isolation, Tail};

use crate::engine_failures::{PARTITIONS, WINDOW_MS};
/// Where the browser test leaves its screenshots, for the CI log.
const SCREENSHOTS: &str = "target/screenshots";

/// A window-count job over `records` clicks already produced (on the partitions and
/// windows of this module's constants), and its running process.
fn running_window_count(prefix: &str, records: usize) -> (JobDir, Vec<clicks::Input>, PathBuf, std::process::Child) {
    let (job, input) = crate::engine_failures::window_count_job(prefix, records);
    let log = job.dir.path().join("weir.log");
    let child = job::start(&job.path(), &log, &[]);
    (job, input, log, child)
}

fn assert_exact(job: &JobDir, input: &[clicks::Input]) {
    let expected = clicks::window_counts(input, WINDOW_MS);
    let actual = clicks::as_multiset(&support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted));
    assert!(actual == expected, "{}", clicks::difference(&expected, &actual));
}

fn u64_of(value: &Value) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("not a count: {value}"))
}

/// Every subtask's `records_in`, summed over the job's operators.
fn records_in(status: &Value) -> u64 {
    status["graph"]["operators"].as_array().into_iter().flatten().flat_map(|op| op["subtasks"].as_array().cloned().unwrap_or_default()).map(|s| u64_of(&s["records_in"])).sum()
}

fn partitions(status: &Value) -> Vec<Value> {
    status["graph"]["sources"][0]["partitions"].as_array().cloned().unwrap_or_default()
}

fn drained(status: &Value, records: usize) -> bool {
    let partitions = partitions(status);
    partitions.len() == PARTITIONS as usize && partitions.iter().all(|p| p["lag"] == 0) && records_in(status) == records as u64
}

#[test]
fn the_api_says_the_graph_checkpoints_lag_and_rates_of_a_running_job() {
    let (job, input, log, mut child) = running_window_count("status-api", 20_000);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until_while(clicks::window_counts(&input, WINDOW_MS).len(), Duration::from_secs(120), &mut child), "{}", job::read_log(&log));
    let status = job::status_until(&log, Duration::from_secs(30), |s| drained(s, input.len())).expect("the job answers /api/v1/job");
    assert!(drained(&status, input.len()), "lag never reached 0 with every record counted in:\n{status:#}");

    assert_eq!((status["api_version"].as_u64(), status["name"].as_str()), (Some(1), Some(job.name.as_str())));
    assert_eq!((status["phase"].as_str(), status["delivery"].as_str()), (Some("running"), Some("exactly-once")));
    let graph = &status["graph"];
    assert_eq!(graph["sources"][0]["topic"].as_str(), Some(job.input.as_str()));
    assert_eq!(graph["sinks"][0]["topic"].as_str(), Some(job.output.as_str()));
    let count = &graph["operators"][0];
    assert_eq!((count["name"].as_str(), count["parallelism"].as_u64(), count["key_by"].as_bool()), (Some("count"), Some(2), Some(true)));
    assert!(count["plugin"].as_str().is_some_and(|p| p.ends_with("window-count.wasm")), "{count}");
    assert!(count["world"].as_str().is_some_and(|w| w.starts_with("weir:operator@")), "{count}");
    assert_eq!(count["subtasks"].as_array().map(Vec::len), Some(2), "{count}");
    let edges: Vec<(&str, &str)> = graph["edges"].as_array().unwrap().iter().map(|e| (e["from"].as_str().unwrap(), e["to"].as_str().unwrap())).collect();
    assert_eq!(edges, [("source", "count"), ("count", "sink")]);
    let max_event_time = input.iter().map(|click| click.3).max().unwrap();
    for subtask in count["subtasks"].as_array().unwrap() {
        let watermark = subtask["watermark_ms"].as_i64().unwrap_or_else(|| panic!("no watermark: {subtask}"));
        assert!(watermark <= max_event_time, "a watermark past every event time: {subtask}");
    }
    for partition in partitions(&status) {
        assert!(partition["watermark_ms"].as_i64().is_some_and(|w| w <= max_event_time), "{partition}");
    }
    assert_eq!((status["restarts"]["count"].as_u64(), status["dead_letters"].as_u64()), (Some(0), Some(0)));

    // Checkpoints: committed, in order, the last one the one named last committed; later ones follow.
    let recent = status["checkpoints"]["recent"].as_array().unwrap();
    let ids: Vec<u64> = recent.iter().map(|c| u64_of(&c["id"])).collect();
    assert!(!ids.is_empty() && ids.windows(2).all(|w| w[0] < w[1]), "checkpoint ids out of order: {ids:?}");
    assert!(recent.iter().all(|c| c["committed"] == true && c["error"].is_null()), "{recent:?}");
    let last = status["checkpoints"]["last_committed"].as_u64();
    assert_eq!(last, ids.last().copied());
    let later = job::status_until(&log, Duration::from_secs(30), |s| s["checkpoints"]["last_committed"].as_u64() > last).expect("the job answers");
    assert!(later["checkpoints"]["last_committed"].as_u64() > last, "no checkpoint committed after {last:?}");

    // Rates over the last 10 s: the drained job reads nothing now, so they come down to 0.
    let quiet = job::status_until(&log, Duration::from_secs(30), |s| {
        s["graph"]["operators"][0]["subtasks"].as_array().is_some_and(|subtasks| subtasks.iter().all(|t| t["records_in_per_s"] == 0.0))
    });
    assert!(quiet.is_some_and(|s| s["graph"]["operators"][0]["records_in_per_s"] == 0.0), "rates of a drained job did not reach 0");

    dashboard_names_only_served_series(&log);
    weir_status_prints_the_same_facts(&log, &job);
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
    assert_exact(&job, &input);
}

/// Every series `docs/grafana/weir.json` queries is on the running job's `/metrics`.
fn dashboard_names_only_served_series(log: &Path) {
    let dashboard = std::fs::read_to_string(repo().join("docs/grafana/weir.json")).expect("docs/grafana/weir.json");
    let parsed: Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    let exprs: Vec<String> = parsed["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .map(|target| target["expr"].as_str().expect("a query").to_owned())
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    let metrics = job::scrape_metrics(log);
    let mut names: Vec<&str> = exprs.iter().flat_map(|expr| series_names(expr)).collect();
    names.sort_unstable();
    names.dedup();
    for name in &names {
        let served = metrics.lines().any(|line| line.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')));
        assert!(served, "the dashboard queries `{name}`, which the job does not serve:\n{metrics}");
    }
    assert!(names.len() >= 15, "{names:?}");
}

/// The `weir_…` names in a PromQL expression.
fn series_names(expr: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("weir_") {
        let end = rest[at..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(rest.len(), |n| at + n);
        names.push(&rest[at..end]);
        rest = &rest[end..];
    }
    names
}

fn weir_status_prints_the_same_facts(log: &Path, job: &JobDir) {
    let addr = job::status_address(log).expect("the job logged its address");
    let output = job::weir().args(["status", &addr]).output().expect("running weir status");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}{}", String::from_utf8_lossy(&output.stderr));
    for needle in [format!("job {}: running", job.name), "last committed checkpoint".into(), format!("topic {}", job.input), "count (".into(), "subtask 1:".into(), format!("-> topic {}", job.output)] {
        assert!(text.contains(&needle), "`weir status` lacks `{needle}`:\n{text}");
    }
}

#[test]
fn weir_status_where_no_job_answers_is_a_clear_error() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let output = job::weir().args(["status", &free.to_string()]).output().expect("running weir status");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("no job answers at {free}")) && stderr.contains("--metrics-addr"), "{stderr}");
    let output = job::weir().args(["status", "not-an-address"]).output().expect("running weir status");
    assert!(!output.status.success());
}

/// Whatever listens at the address answers `weir status`: an answer that is no job's
/// status is refused, and the terminal sees none of its control characters, though the
/// parse error quotes it.
#[test]
fn weir_status_prints_a_hostile_answer_without_its_escapes() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request);
        let body = r#"{"phase":"\u001b]0;owned\u0007\u001b[2J\u202e"}"#;
        let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        stream.write_all(answer.as_bytes()).unwrap();
    });
    let output = job::weir().args(["status", &addr.to_string()]).output().expect("running weir status");
    server.join().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("something other than a weir job's status"), "{stderr}");
    assert!(stderr.contains("\\u{1b}]0;owned"), "the answer's escape is not shown as text: {stderr}");
    assert!(!stderr.contains(['\u{1b}', '\u{7}', '\u{202e}']), "a control character reached the terminal: {stderr:?}");
}

#[test]
fn a_restart_shows_with_the_plugins_message_and_dead_letters_are_counted() {
    let (job, input, _) = crate::engine_failures::poison_job("status-poison", true);
    let poison = input.iter().filter(|r| r.2.starts_with(b"poison")).count() as u64;
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until_while(input.len() - poison as usize, Duration::from_secs(120), &mut child), "{}", job::read_log(&log));

    let status = job::status_until(&log, Duration::from_secs(30), |s| s["dead_letters"].as_u64() == Some(poison)).expect("the job answers");
    assert_eq!(status["dead_letters"].as_u64(), Some(poison), "{status:#}");
    let causes: Vec<&str> = status["restarts"]["recent"].as_array().unwrap().iter().map(|r| r["cause"].as_str().unwrap()).collect();
    let trap = causes.iter().find(|cause| cause.contains("poison record")).unwrap_or_else(|| panic!("no restart names the trap: {causes:?}"));
    assert!(trap.contains("passthrough") && trap.contains("bad-trap"), "the cause names neither the operator nor the plugin: {trap}");
    assert!(status["restarts"]["count"].as_u64() >= Some(1), "{status:#}");
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
}

/// A restore from the changelog alone, slowed down (`WEIR_FAULT=slow-restore`) so that
/// it lasts seconds on a small state: the API shows it while it runs, the log says how
/// far it is with an estimate of the time left, and the output stays exact.
#[test]
fn a_long_restore_shows_its_progress_in_the_log_and_the_api() {
    let (job, input, log, mut child) = running_window_count("status-restore", 20_000);
    job::wait_for_more(&log, "checkpoint committed", 5, Duration::from_secs(60));
    job::kill(&mut child);
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    let log = job.dir.path().join("weir-restore.log");
    let mut child = job::start(&job.path(), &log, &[("WEIR_FAULT", "slow-restore:700")]);

    // The estimate comes once the readers know where their partitions end.
    let estimated = |s: &Value| s["progress"]["total"].as_u64().is_some_and(|total| total > 0);
    let during = job::status_until(&log, Duration::from_secs(60), estimated).expect("the job answers while it restores");
    let progress = &during["progress"];
    assert!(progress["what"].as_str().is_some_and(|w| w.contains("restoring keyed state from the changelog")), "{during:#}");
    assert_eq!((during["phase"].as_str(), progress["unit"].as_str()), (Some("recovering"), Some("offsets")), "{during:#}");
    assert!(progress["total"].as_u64().is_some_and(|total| total > 0), "no estimate of the work: {during:#}");
    let advanced = job::status_until(&log, Duration::from_secs(60), |s| s["progress"]["done"].as_u64().is_some_and(|done| done > 0));
    assert!(advanced.is_some_and(|s| s["phase"] == "recovering"), "the restore's progress never advanced while it ran");
    job::wait_for_log(&log, "eta_s=", Duration::from_secs(60));
    let line = job::read_log(&log).lines().find(|l| l.contains("eta_s=")).unwrap_or_default().to_owned();
    for field in ["restoring keyed state from the changelog", "done=", "total=", "entries=", "bytes="] {
        assert!(line.contains(field), "the progress line lacks `{field}`: {line}");
    }

    let mut tail = Tail::new(&job.output, PARTITIONS);
    assert!(tail.until_while(clicks::window_counts(&input, WINDOW_MS).len(), Duration::from_secs(180), &mut child), "{}", job::read_log(&log));
    let after = job::status_until(&log, Duration::from_secs(30), |s| s["progress"].is_null() && s["phase"] == "running").expect("the job answers");
    assert!(after["progress"].is_null(), "the restore still shows after it ended: {after:#}");
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
    assert_exact(&job, &input);
}

#[test]
fn the_status_page_renders_in_a_real_browser() {
    let (job, input, log, mut child) = running_window_count("status-page", 5_000);
    let status = job::status_until(&log, Duration::from_secs(60), |s| drained(s, input.len()) && s["checkpoints"]["last_committed"].as_u64() > Some(2))
        .expect("the job answers");
    assert!(drained(&status, input.len()), "{status:#}");
    let addr = job::status_address(&log).unwrap();
    let url = format!("http://{addr}/");

    let dom = chromium(&["--dump-dom", &url]);
    // The graph's boxes, a checkpoint's bar label, the partitions' lag.
    for needle in ["<text x=\"8\" y=\"18\" class=\"name\">count</text>", "<text x=\"8\" y=\"18\" class=\"name\">source</text>", "class=\"badge running\""] {
        assert!(dom.contains(needle), "the rendered page lacks `{needle}`:\n{dom}");
    }
    // The chart's last bar is labelled with its checkpoint's id: one committed by now.
    let label = dom.split("data-last=\"\">#").nth(1).and_then(|rest| rest.split('<').next()).and_then(|id| id.parse::<u64>().ok());
    let committed = status["checkpoints"]["last_committed"].as_u64();
    assert!(label.is_some() && label >= committed, "the chart's last checkpoint is {label:?}, {committed:?} was committed:\n{dom}");
    assert_eq!(dom.matches("<td class=\"num lag\">0</td>").count(), PARTITIONS as usize, "a lag of 0 per partition:\n{dom}");
    assert!(dom.contains(&format!(">{}<", job.input)), "the input topic is not shown:\n{dom}");

    std::fs::create_dir_all(repo().join(SCREENSHOTS)).expect("the screenshot directory");
    for (name, size) in [("status-page.png", "1280,1400"), ("status-page-phone.png", "390,1600")] {
        let path = repo().join(SCREENSHOTS).join(name);
        let _ = std::fs::remove_file(&path);
        chromium(&[&format!("--screenshot={}", path.display()), &format!("--window-size={size}"), &url]);
        let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        assert!(bytes > 10_000, "no screenshot at {} ({bytes} bytes)", path.display());
        println!("status page screenshot: {}", path.display());
    }
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "{}", job::read_log(&log));
    assert_exact(&job, &input);
}

/// Runs headless chromium (installed by scripts/setup) with `args`; its stdout. The
/// page's script runs to its first render before the DOM is dumped.
fn chromium(args: &[&str]) -> String {
    let profile = tempfile::tempdir().expect("a browser profile directory");
    let output = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars", "--virtual-time-budget=5000"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .output()
        .expect("chromium is missing: run scripts/setup (it installs Debian's chromium)");
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository").to_path_buf()
}
