//! The throughput chart of docs/benchmarks.md: records/s, records per CPU-second and peak
//! RSS of each system, side by side, drawn from a results file as SVG (text stays text,
//! so no font or image library is needed). Wrong outputs are left out.

use std::path::Path;

use anyhow::{Context, bail};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;

/// The systems drawn, in order, with their short labels.
const SYSTEMS: [(&str, &str); 6] = [
    ("copier", "copier (limit)"),
    ("weir-pass", "weir pass-through"),
    ("weir", "weir"),
    ("weir-100ms", "weir 100 ms ckpt"),
    ("weir-alo", "weir at-least-once"),
    ("flink", "Flink"),
];
const PANELS: [(&str, &str); 3] =
    [("records_per_s", "records/s (drain)"), ("records_per_cpu_s", "records per CPU-second"), ("peak_rss_mib", "peak RSS (MiB)")];

struct Bar {
    label: &'static str,
    color: RGBColor,
    values: [f64; 3],
}

pub(crate) fn write(results: &Path, out: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(results).with_context(|| format!("reading {}", results.display()))?;
    let rows: Vec<Value> = text.lines().filter(|l| !l.trim().is_empty()).map(serde_json::from_str).collect::<Result<_, _>>()?;
    let bars = bars(&rows);
    if bars.is_empty() {
        bail!("{} holds no correct throughput result to chart", results.display());
    }
    let records = rows.iter().find_map(|r| r["records"].as_u64()).unwrap_or(0);
    draw(&bars, records, out).map_err(|e| anyhow::anyhow!("drawing {}: {e}", out.display()))?;
    eprintln!("weir-bench: drew {}", out.display());
    Ok(())
}

/// The last correct throughput result of each system.
fn bars(rows: &[Value]) -> Vec<Bar> {
    let correct = |r: &&Value| r["kind"] != "latency" && r["correct"].as_bool() == Some(true);
    SYSTEMS
        .iter()
        .filter_map(|&(system, label)| {
            let row = rows.iter().rev().filter(correct).find(|r| r["system"] == system)?;
            let values = PANELS.map(|(k, _)| row[k].as_f64().unwrap_or(0.0));
            let color = match system {
                "copier" => RGBColor(0x88, 0x88, 0x88),
                "flink" => RGBColor(0xd9, 0x5f, 0x02),
                _ => RGBColor(0x1b, 0x9e, 0x77),
            };
            Some(Bar { label, color, values })
        })
        .collect()
}

fn draw(bars: &[Bar], records: u64, out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(out, (1350, 380)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!("copy / pass-through and 10 s window count per key, {records} records, parallelism 2, checkpoints every 1 s");
    let root = root.titled(&title, ("sans-serif", 18))?;
    for (i, area) in root.split_evenly((1, PANELS.len())).iter().enumerate() {
        panel(area, PANELS[i].1, bars, i)?;
    }
    root.present()?;
    Ok(())
}

/// One horizontal bar per system, the first at the top, labelled on the left.
fn panel(area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>, title: &str, bars: &[Bar], i: usize) -> Result<(), Box<dyn std::error::Error>> {
    let top = bars.iter().map(|b| b.values[i]).fold(0.0, f64::max).max(1.0) * 1.2;
    // The segmented range 0..n has n + 1 slots; 0..n - 1 has one per bar.
    let row = |n: usize| bars.len() - 1 - n;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 15))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(130)
        .build_cartesian_2d(0.0..top, (0..bars.len() - 1).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(WHITE)
        .x_labels(4)
        .y_labels(bars.len())
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(n) => bars.get(row(*n)).map_or(String::new(), |b| b.label.to_owned()),
            _ => String::new(),
        })
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(n, b)| {
        let mut bar = Rectangle::new([(0.0, SegmentValue::Exact(row(n))), (b.values[i], SegmentValue::Exact(row(n) + 1))], b.color.filled());
        bar.set_margin(6, 6, 0, 0);
        bar
    }))?;
    chart.draw_series(bars.iter().enumerate().map(|(n, b)| {
        let style = TextStyle::from(("sans-serif", 11).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        Text::new(format!("{:.0}", b.values[i]), (b.values[i] + top * 0.01, SegmentValue::CenterOf(row(n))), style)
    }))?;
    Ok(())
}
