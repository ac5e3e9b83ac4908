//! Results: one JSON object per line (appended by `gen`, `measure` and `latency`), turned
//! into the generated section of docs/benchmarks.md (throughput, targets, latency). Only
//! this section is replaced; other sections of the file are kept as they are.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

const START: &str = "<!-- weir-bench:start -->";
const END: &str = "<!-- weir-bench:end -->";

pub(crate) fn append(path: &Path, line: &Value) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{line}").with_context(|| format!("writing {}", path.display()))
}

fn label(system: &str) -> &str {
    match system {
        "generator" => "generator (idempotent producer, no transactions)",
        "copier" => "transactional copier (physical limit, no processing)",
        "weir-pass" => "weir pass-through (stateless), exactly-once",
        "weir" => "weir window-count, exactly-once",
        "weir-100ms" => "weir window-count, exactly-once, checkpoints every 100 ms",
        "weir-alo" => "weir window-count, at-least-once",
        "weir-c" => "weir c-window-count (C), exactly-once",
        "weir-go" => "weir go-window-count (Go), exactly-once",
        "weir-js-total" => "weir js-total (JavaScript SDK) running total, keyed input, exactly-once",
        "weir-js-total-raw" => "weir running total in JavaScript by hand, keyed input, exactly-once",
        "weir-py-total" => "weir py-total (Python, weir_sdk) running total, keyed input, exactly-once",
        "weir-py-total-raw" => "weir running total in Python by hand, keyed input, exactly-once",
        "flink" => "Flink 2.2.1 window count, exactly-once",
        other => other,
    }
}

pub(crate) fn write(results: &Path, markdown: &Path, context: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(results).with_context(|| format!("reading {}", results.display()))?;
    let rows: Vec<Value> = text.lines().filter(|l| !l.trim().is_empty()).map(serde_json::from_str).collect::<Result<_, _>>()?;
    let mut s = format!("{START}\n");
    throughput(&mut s, &rows, context);
    targets(&mut s, &rows);
    latency(&mut s, &rows);
    s.push_str(&format!("\n![throughput](benchmarks-throughput.svg)\n{END}\n"));

    let old = std::fs::read_to_string(markdown).unwrap_or_else(|_| "# Benchmarks\n".into());
    let new = match (old.find(START), old.find(END)) {
        (Some(a), Some(b)) if b > a => format!("{}{}{}", &old[..a], s, old[b + END.len()..].trim_start_matches('\n')),
        _ => format!("{}\n\n{s}", old.trim_end()),
    };
    std::fs::write(markdown, new).with_context(|| format!("writing {}", markdown.display()))?;
    eprintln!("weir-bench: wrote the results section of {}", markdown.display());
    Ok(())
}

fn num(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

fn correct(v: &Value) -> bool {
    v.get("correct").and_then(Value::as_bool) == Some(true)
}

fn throughput(s: &mut String, rows: &[Value], context: &str) {
    s.push_str("## Throughput: weir vs Flink vs the transactional copier\n\n");
    s.push_str("Produced by `bench/run`. Same broker, same input topic (4 partitions, 100 k keys, ~100-byte JSON values; \
        each record's partition is drawn independently of its key, and partition p's event time runs p × 250 ms \
        behind partition 0's), checkpoints / transactions every 1 s, parallelism 2. *Drain* is from process start \
        until the complete, correct output is visible to a read_committed consumer (start-up included). CPU is \
        user+sys of the system's process tree; RSS is its peak.\n\n");
    if !context.is_empty() {
        s.push_str(context);
        s.push_str("\n\n");
    }
    s.push_str("| system | records | drain s | records/s | CPU s | records/CPU-s | peak RSS MiB | output |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---|\n");
    for r in rows.iter().filter(|r| r["kind"] != "latency") {
        let system = r["system"].as_str().unwrap_or("?");
        let records = r["records"].as_u64().unwrap_or(0);
        let cell = |k: &str, digits: usize| num(r, k).map(|x| format!("{x:.digits$}")).unwrap_or_else(|| "–".into());
        let output = if system == "generator" {
            "–".to_string()
        } else if correct(r) {
            "correct (exact multiset)".to_string()
        } else {
            format!("**WRONG** ({}): figures do not count", r["diff"])
        };
        s.push_str(&format!(
            "| {} | {records} | {} | {} | {} | {} | {} | {output} |\n",
            label(system),
            cell("seconds", 1),
            cell("records_per_s", 0),
            cell("cpu_s", 1),
            cell("records_per_cpu_s", 0),
            cell("peak_rss_mib", 0),
        ));
    }
}

fn targets(s: &mut String, rows: &[Value]) {
    let find = |name: &str| rows.iter().rev().find(|r| r["system"] == name && r["kind"] != "latency" && correct(r));
    s.push_str("\nAgainst the targets:\n\n");
    let ratio = |a: Option<&Value>, b: Option<&Value>, k: &str| match (a.and_then(|a| num(a, k)), b.and_then(|b| num(b, k))) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    };
    let (weir, flink, copier, pass) = (find("weir"), find("flink"), find("copier"), find("weir-pass"));
    let line = |what: &str, value: Option<f64>, target: &str, met: Option<bool>| {
        let v = value.map(|v| format!("{v:.2}")).unwrap_or_else(|| "not measured".into());
        let m = match met {
            Some(true) => "met",
            Some(false) => "**not met**",
            None => "–",
        };
        format!("- {what}: {v} (target {target}): {m}\n")
    };
    let r = ratio(weir, flink, "records_per_s");
    s.push_str(&line("weir / Flink records/s", r, "≥ 3", r.map(|r| r >= 3.0)));
    let r = ratio(weir, flink, "peak_rss_mib");
    s.push_str(&line("weir / Flink peak RSS", r, "≤ 0.20", r.map(|r| r <= 0.2)));
    let r = ratio(pass, copier, "records_per_s");
    s.push_str(&line("weir pass-through / copier records/s", r, "≥ 0.80", r.map(|r| r >= 0.8)));
    let r = ratio(weir, copier, "records_per_s");
    s.push_str(&line("weir window-count / copier records/s", r, "≥ 0.80", r.map(|r| r >= 0.8)));
    let r = ratio(find("weir-100ms"), weir, "records_per_s");
    s.push_str(&line("weir records/s, 100 ms / 1 s checkpoints", r, "≥ 0.85", r.map(|r| r >= 0.85)));
    let p99 = latency_runs(rows, "weir", 100).iter().filter_map(|r| num(r, "p99_ms")).reduce(f64::max);
    s.push_str(&line("weir p99 visibility at 100 ms checkpoints, worst phase, ms", p99, "≤ 200", p99.map(|p| p <= 200.0)));
    let r = ratio(weir, flink, "records_per_cpu_s");
    s.push_str(&line("weir / Flink records per CPU-second", r, "none", None));
}

/// The correct latency runs of one system at one checkpoint interval.
fn latency_runs<'a>(rows: &'a [Value], system: &str, checkpoint_ms: u64) -> Vec<&'a Value> {
    rows.iter().filter(|r| r["kind"] == "latency" && r["system"] == system && r["checkpoint_ms"] == checkpoint_ms && correct(r)).collect()
}

/// "min / median / max" of `k` over `runs`.
fn spread(runs: &[&Value], k: &str) -> String {
    let mut v: Vec<f64> = runs.iter().filter_map(|r| num(r, k)).collect();
    if v.is_empty() {
        return "–".into();
    }
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 };
    format!("{:.0} / {median:.0} / {:.0}", v[0], v[v.len() - 1])
}

fn latency(s: &mut String, rows: &[Value]) {
    let all: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "latency").collect();
    if all.is_empty() {
        return;
    }
    s.push_str("\n### Visibility latency over several phases\n\nThe same window count with 1 s windows (so that a run has many windows), \
        input produced at a fixed rate with event time = the wall-clock time of production + the run's offset. Latency of a \
        result = when it is visible to a read_committed consumer − its window's end (on the same shifted clock), i.e. the \
        time from producing the records that close the window to the window's result being visible. Where a window ends \
        relative to the checkpoints decides how long its result waits for a commit, and that phase is fixed within a run; \
        so each setting is run several times, run k of n with an offset drawn from [k, k + 1) × window / n, each with a \
        fresh process, and the table gives the spread over runs. Both systems run each phase back to back. Every \
        result is a sample, except windows that ended in the first 3 s of production or were closed only by the final \
        flush records. Every run's whole output is checked exactly against the counts of the records it produced; a \
        **WRONG** run does not count.\n\n");
    s.push_str("| system | checkpoint interval | runs correct | p50 ms min / median / max | p99 ms min / median / max | worst max ms |\n|---|---:|---:|---:|---:|---:|\n");
    let mut settings: Vec<(String, u64)> =
        all.iter().map(|r| (r["system"].as_str().unwrap_or("?").to_owned(), r["checkpoint_ms"].as_u64().unwrap_or(0))).collect();
    settings.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    settings.dedup();
    for (system, ms) in settings {
        let runs = latency_runs(rows, &system, ms);
        let total = all.iter().filter(|r| r["system"] == system.as_str() && r["checkpoint_ms"] == ms).count();
        let worst = runs.iter().filter_map(|r| num(r, "max_ms")).reduce(f64::max).map_or("–".into(), |v| format!("{v:.0}"));
        s.push_str(&format!("| {system} | {ms} ms | {} of {total} | {} | {} | {worst} |\n", runs.len(), spread(&runs, "p50_ms"), spread(&runs, "p99_ms")));
    }
    s.push_str("\nEach run:\n\n| system | checkpoint interval | run | offset ms | input records/s (target / achieved) | results | p50 ms | p99 ms | max ms | output |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for r in all {
        let n = |k: &str| num(r, k).map(|x| format!("{x:.0}")).unwrap_or_else(|| "–".into());
        let output = if correct(r) { "correct (exact multiset)".to_string() } else { format!("**WRONG** ({}{}): figures do not count", r["diff"], note(r)) };
        s.push_str(&format!(
            "| {} | {} ms | {} | {} | {} / {} | {} | {} | {} | {} | {output} |\n",
            r["system"].as_str().unwrap_or("?"), n("checkpoint_ms"), n("run"), n("offset_ms"), n("rate"), n("achieved_rate"), n("samples"), n("p50_ms"), n("p99_ms"), n("max_ms")
        ));
    }
}

fn note(r: &Value) -> String {
    match r["note"].as_str() {
        Some(n) if !n.is_empty() => format!("; {n}"),
        _ => String::new(),
    }
}
