//! Per-record CPU cost of the `window-count` operator as a Wasm component run by
//! the host runtime, against the same crate compiled natively and driven by the
//! guest SDK's `Runner`, on identical input, side by side, at several batch sizes.
//!
//! Run: `bash scripts/build-plugins && cargo bench --bench wasm_vs_native`
//! (`WEIR_BENCH_RECORDS` sets the input size, `WEIR_PLUGINS_DIR` where plugins are,
//! `WEIR_BENCH_BATCH_SIZES=256` runs only the sizes listed, `WEIR_BENCH_PERF_MAP=1`
//! lets `perf report` name the Wasm functions).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir::batch::Batch;
use weir::operator::{Limits, OperatorInstance, Plugin, Runtime, RuntimeConfig};
use weir_guest::{Config, Record, Runner, packed};
use window_count::WindowCount;

const BATCH_SIZES: [usize; 4] = [1, 64, 256, 1024];
/// Distinct keys: with one record per millisecond and 1 s windows, each window
/// counts ~10 records per key, so output is a tenth of the input.
const KEYS: usize = 100;
const WINDOW_MS: &str = "1000";
/// A watermark follows every this many records, whatever the batch size, as the
/// engine's periodic watermarks would.
const WATERMARK_EVERY: usize = 4096;
/// Each measurement is the best of this many runs: the machine is shared.
const RUNS: usize = 5;

struct Input {
    keys: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
    timestamps: Vec<i64>,
}

impl Input {
    fn generate(records: usize) -> Self {
        // A fixed xorshift sequence: the same input on every run and both sides.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut input = Input {
            keys: Vec::new(),
            values: Vec::new(),
            timestamps: Vec::new(),
        };
        for i in 0..records {
            let r = next();
            input
                .keys
                .push(format!("user-{:04}", r as usize % KEYS).into_bytes());
            input
                .values
                .push(format!(r#"{{"page":"/p/{}","ms":{}}}"#, r % 977, r % 5000).into_bytes());
            // Mostly in order, a little jitter, as from a real partition.
            input.timestamps.push(i as i64 + (r % 50) as i64);
        }
        input
    }

    fn len(&self) -> usize {
        self.timestamps.len()
    }

    fn host_batches(&self, size: usize) -> Vec<Batch> {
        (0..self.len())
            .step_by(size)
            .map(|start| {
                let mut batch = Batch::with_capacity(size, size * 48);
                for i in start..(start + size).min(self.len()) {
                    batch.push(
                        Some(&self.keys[i]),
                        &self.values[i],
                        self.timestamps[i],
                        &[],
                    );
                }
                batch
            })
            .collect()
    }

    fn packed_batches(&self, size: usize) -> Vec<packed::Batch> {
        (0..self.len())
            .step_by(size)
            .map(|start| {
                let records: Vec<Record<'_>> = (start..(start + size).min(self.len()))
                    .map(|i| Record::new(Some(&self.keys[i]), &self.values[i], self.timestamps[i]))
                    .collect();
                packed::Batch::pack(&records)
            })
            .collect()
    }
}

/// Where a watermark goes: after the batch that crosses each WATERMARK_EVERY
/// records, at the batch's smallest plausible event time minus the jitter.
fn watermarks(input: &Input, size: usize) -> Vec<Option<i64>> {
    let batches = input.len().div_ceil(size);
    let mut since = 0;
    (0..batches)
        .map(|b| {
            let end = ((b + 1) * size).min(input.len());
            since += end - b * size;
            if since >= WATERMARK_EVERY || end == input.len() {
                since = 0;
                Some(if end == input.len() {
                    i64::MAX / 2
                } else {
                    input.timestamps[end - 1] - 100
                })
            } else {
                None
            }
        })
        .collect()
}

/// CPU time of the calling thread: unlike wall time, it does not count the time
/// the thread waits for a core, so other work on a shared machine skews it less.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec to write into; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Outcome of one pass: CPU time and a digest of the output, to prove both
/// sides did the same work.
struct Pass {
    time: Duration,
    records_out: usize,
    bytes_out: usize,
}

fn wasm_pass(plugin: &Plugin, batches: &[Batch], marks: &[Option<i64>]) -> Pass {
    let config = vec![("window_ms".to_owned(), WINDOW_MS.to_owned())];
    let mut instance =
        OperatorInstance::new(plugin, Limits::default(), config, "bench".into()).expect("init");
    let (mut records_out, mut bytes_out) = (0, 0);
    let started = thread_cpu_time();
    for (batch, mark) in batches.iter().zip(marks) {
        let out = instance.process(black_box(batch)).expect("process");
        records_out += out.len();
        bytes_out += out.data_len();
        if let Some(watermark) = mark {
            let out = instance.on_watermark(*watermark).expect("on_watermark");
            records_out += out.len();
            bytes_out += out.data_len();
        }
    }
    Pass {
        time: thread_cpu_time() - started,
        records_out,
        bytes_out,
    }
}

fn native_pass(batches: &[packed::Batch], marks: &[Option<i64>]) -> Pass {
    let mut runner =
        Runner::<WindowCount>::init(Config::from_pairs([("window_ms", WINDOW_MS)])).expect("init");
    let (mut records_out, mut bytes_out) = (0, 0);
    let started = thread_cpu_time();
    for (batch, mark) in batches.iter().zip(marks) {
        let out = runner.process(black_box(batch)).expect("process");
        records_out += out.len();
        bytes_out += out.data.len();
        if let Some(watermark) = mark {
            let out = runner.on_watermark(*watermark).expect("on_watermark");
            records_out += out.len();
            bytes_out += out.data.len();
        }
    }
    Pass {
        time: thread_cpu_time() - started,
        records_out,
        bytes_out,
    }
}

fn best(mut pass: impl FnMut() -> Pass) -> Pass {
    let mut best = pass();
    for _ in 1..RUNS {
        let next = pass();
        assert_eq!(
            (next.records_out, next.bytes_out),
            (best.records_out, best.bytes_out)
        );
        if next.time < best.time {
            best = next;
        }
    }
    best
}

fn main() {
    let records: usize = std::env::var("WEIR_BENCH_RECORDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000);
    let plugins = std::env::var_os("WEIR_PLUGINS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("host/ has a parent")
                .join("target/plugins")
        });
    let path = plugins.join("window-count.wasm");
    assert!(
        path.is_file(),
        "{} is missing: run `bash scripts/build-plugins` first",
        path.display()
    );

    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-compiled-cache")),
        // For `perf record`: names the plugin's compiled functions.
        perf_map: std::env::var_os("WEIR_BENCH_PERF_MAP").is_some(),
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let plugin = Plugin::load(&runtime, &path).unwrap_or_else(|err| panic!("{err}"));
    let input = Input::generate(records);

    println!(
        "window-count, {records} records, {KEYS} keys, {WINDOW_MS} ms windows, watermark every {WATERMARK_EVERY} records; best of {RUNS}"
    );
    println!(
        "{:>6} | {:>14} | {:>14} | {:>10} | {:>11}",
        "batch", "wasm ns/rec", "native ns/rec", "wasm/native", "records out"
    );
    println!(
        "{:->6}-+-{:->14}-+-{:->14}-+-{:->10}-+-{:->11}",
        "", "", "", "", ""
    );
    // `WEIR_BENCH_BATCH_SIZES=256` narrows a run down, e.g. under a profiler.
    let sizes: Vec<usize> = match std::env::var("WEIR_BENCH_BATCH_SIZES") {
        Ok(list) => list
            .split(',')
            .map(|s| s.trim().parse().expect("batch sizes are integers"))
            .collect(),
        Err(_) => BATCH_SIZES.to_vec(),
    };
    for size in sizes {
        let marks = watermarks(&input, size);
        let host = input.host_batches(size);
        let packed = input.packed_batches(size);
        let wasm = best(|| wasm_pass(&plugin, &host, &marks));
        let native = best(|| native_pass(&packed, &marks));
        assert_eq!(
            (wasm.records_out, wasm.bytes_out),
            (native.records_out, native.bytes_out),
            "wasm and native must emit the same output"
        );
        let per = |pass: &Pass| pass.time.as_nanos() as f64 / records as f64;
        println!(
            "{:>6} | {:>14.1} | {:>14.1} | {:>9.2}x | {:>11}",
            size,
            per(&wasm),
            per(&native),
            per(&wasm) / per(&native),
            wasm.records_out
        );
    }
}
