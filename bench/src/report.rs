//! Results: one JSON object per line (appended by `gen` and `measure`), turned into the
//! "Throughput" section of docs/benchmarks.md. Only this section is replaced; other
//! sections of the file are kept as they are.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

const START: &str = "<!-- weir-bench:start -->";
const END: &str = "<!-- weir-bench:end -->";

pub fn append(path: &Path, line: &Value) -> anyhow::Result<()> {
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
        "flink" => "Flink 2.2.1 window count, exactly-once",
        other => other,
    }
}

pub fn write(results: &Path, markdown: &Path, context: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(results).with_context(|| format!("reading {}", results.display()))?;
    let rows: Vec<Value> = text.lines().filter(|l| !l.trim().is_empty()).map(serde_json::from_str).collect::<Result<_, _>>()?;
    let f = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
    let ok = |v: &Value| v.get("correct").and_then(Value::as_bool) == Some(true);
    let find = |name: &str| rows.iter().rev().find(|r| r["system"] == name && ok(r));

    let mut s = String::new();
    s.push_str(&format!("{START}\n## Throughput: weir vs Flink vs the transactional copier\n\n"));
    s.push_str("Produced by `bench/run`. Same broker, same input topic (4 partitions, 100 k keys, ~100-byte JSON values), \
        checkpoints / transactions every 1 s, parallelism 2. *Drain* is from process start until the complete, \
        correct output is visible to a read_committed consumer (start-up included). CPU is user+sys of the \
        system's process tree; RSS is its peak.\n\n");
    if !context.is_empty() {
        s.push_str(context);
        s.push_str("\n\n");
    }
    s.push_str("| system | records | drain s | records/s | CPU s | records/CPU-s | peak RSS MiB | output |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---|\n");
    for r in rows.iter().filter(|r| r["kind"] != "latency") {
        let system = r["system"].as_str().unwrap_or("?");
        let records = r["records"].as_u64().unwrap_or(0);
        let cell = |k: &str, digits: usize| f(r, k).map(|x| format!("{x:.digits$}")).unwrap_or_else(|| "–".into());
        let output = if system == "generator" {
            "–".to_string()
        } else if ok(r) {
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
    s.push_str("\nAgainst the targets:\n\n");
    let ratio = |a: Option<&Value>, b: Option<&Value>, k: &str| match (a.and_then(|a| f(a, k)), b.and_then(|b| f(b, k))) {
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
    let p99 = rows.iter().rev().find(|r| r["kind"] == "latency" && r["system"] == "weir" && r["checkpoint_ms"] == 100).and_then(|r| f(r, "p99_ms"));
    s.push_str(&line("weir p99 visibility at 100 ms checkpoints, ms", p99, "≤ 200", p99.map(|p| p <= 200.0)));
    let r = ratio(weir, flink, "records_per_cpu_s");
    s.push_str(&line("weir / Flink records per CPU-second", r, "none", None));
    let latency: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "latency").collect();
    if !latency.is_empty() {
        s.push_str("\n### Visibility latency\n\nThe same window count with 1 s windows (so that a run has many windows), input produced at a fixed rate \
            with event time = the wall-clock time of production. Latency of a result = when it is visible to a read_committed \
            consumer − its window's end, i.e. the time from producing the record that closes the window (advances the \
            watermark past its end) to the window's result being visible. Every result record is a sample; windows that \
            ended in the first 3 s are skipped.\n\n");
        s.push_str("| system | checkpoint interval | input records/s (target / achieved) | results | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|---:|\n");
        for r in latency {
            let n = |k: &str| f(r, k).map(|x| format!("{x:.0}")).unwrap_or_else(|| "–".into());
            s.push_str(&format!(
                "| {} | {} ms | {} / {} | {} | {} | {} | {} |\n",
                r["system"].as_str().unwrap_or("?"), n("checkpoint_ms"), n("rate"), n("achieved_rate"), n("samples"), n("p50_ms"), n("p99_ms"), n("max_ms")
            ));
        }
    }
    s.push_str(&format!("\n![throughput](benchmarks-throughput.png)\n{END}\n"));

    let old = std::fs::read_to_string(markdown).unwrap_or_else(|_| "# Benchmarks\n".into());
    let new = match (old.find(START), old.find(END)) {
        (Some(a), Some(b)) if b > a => format!("{}{}{}", &old[..a], s, old[b + END.len()..].trim_start_matches('\n')),
        _ => format!("{}\n{}", old.trim_end(), format!("\n{s}")),
    };
    std::fs::write(markdown, new).with_context(|| format!("writing {}", markdown.display()))?;
    eprintln!("weir-bench: wrote the results section of {}", markdown.display());
    Ok(())
}
