//! CPU cost of one checkpoint's snapshot round per changed key: the `window-count`
//! component as a job runs it, its round checked and ordered by the host
//! (`OperatorInstance::snapshot_round`). Two shapes of change, each measured after the
//! same records went in:
//! - `grown`: every key counted once in a window still open (a state that grows, as
//!   `bench/state` drains), so each key's entry is handed over;
//! - `fired`: the window then fired, so each key's removal is handed over (the
//!   checkpoint after a firing, as in `bench/run` at 100 ms checkpoints).
//!
//! Beside them, the firing itself (`on_watermark`: each key's count emitted in key
//! order).
//!
//! Run: `bash scripts/build-plugins window-count && cargo bench --bench snapshot_round`.
//! `WEIR_BENCH_KEYS` sets the changed keys (default 400000); `WEIR_BENCH_PLUGINS`
//! lists window-count builds to compare side by side (comma-separated paths; default
//! target/plugins/window-count.wasm); `WEIR_BENCH_PERF_MAP=1` lets `perf report` name
//! the Wasm functions.

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir::batch::Batch;
use weir::operator::{Limits, OperatorInstance, Plugin, Runtime, RuntimeConfig};

/// Each figure is the best of this many runs: the machine is shared.
const RUNS: usize = 5;
const BATCH: usize = 1024;
const WINDOW_MS: i64 = 3_600_000;

/// CPU time of the calling thread, which does not count time spent waiting for a core.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec to write into; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// `keys` distinct keys, one record each, all in the first window.
fn batches(keys: usize) -> Vec<Batch> {
    (0..keys)
        .step_by(BATCH)
        .map(|start| {
            let mut batch = Batch::with_capacity(BATCH, BATCH * 16);
            for i in start..(start + BATCH).min(keys) {
                batch.push(Some(format!("key-{i:08}").as_bytes()), b"v", (i % 1000) as i64, &[]);
            }
            batch
        })
        .collect()
}

/// CPU time of a round or a firing, and the entries or records it held.
type Timed = (Duration, usize);

/// One instance fed `input`, its records' round taken (`grown`) or, after the window
/// fired, the round of their removals (`fired`); that round timed, and the firing.
fn round(plugin: &Plugin, input: &[Batch], fired: bool) -> (Timed, Timed) {
    let config = vec![("window_ms".to_owned(), WINDOW_MS.to_string())];
    // A shared machine may hold a call past the default deadline; the figures are CPU time.
    let limits = Limits { memory_bytes: 1 << 30, call_timeout: Duration::from_secs(60), ..Limits::default() };
    let mut instance = OperatorInstance::new(plugin, limits, config, "bench".into()).expect("init");
    for batch in input {
        instance.process(batch).expect("process");
    }
    let mut firing = (Duration::ZERO, 0);
    if fired {
        instance.snapshot_round(0, |_| Ok(0)).expect("round");
        let started = thread_cpu_time();
        let output = instance.on_watermark(WINDOW_MS).expect("fire");
        firing = (thread_cpu_time() - started, output.len());
    }
    let started = thread_cpu_time();
    let changes = instance.snapshot_round(0, |key| Ok(u32::from(key[key.len() - 1]))).expect("round");
    ((thread_cpu_time() - started, changes.size().0 as usize), firing)
}

/// The quickest of `RUNS` runs, each figure on its own.
fn best(mut run: impl FnMut() -> (Timed, Timed)) -> (Timed, Timed) {
    let runs: Vec<(Timed, Timed)> = (0..RUNS).map(|_| run()).collect();
    let round = runs.iter().map(|run| run.0).min().expect("at least one run");
    let firing = runs.iter().map(|run| run.1).min().expect("at least one run");
    (round, firing)
}

fn main() {
    let keys: usize = std::env::var("WEIR_BENCH_KEYS").ok().and_then(|n| n.parse().ok()).unwrap_or(400_000);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent");
    let plugins: Vec<PathBuf> = match std::env::var("WEIR_BENCH_PLUGINS") {
        Ok(list) => list.split(',').map(PathBuf::from).collect(),
        Err(_) => vec![root.join("target/plugins/window-count.wasm")],
    };
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-compiled-cache")),
        // For `perf record`: names the plugin's compiled functions.
        perf_map: std::env::var_os("WEIR_BENCH_PERF_MAP").is_some(),
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let input = batches(keys);
    println!("window-count, one snapshot round of {keys} changed keys (one record each); best of {RUNS}");
    println!("{:<40} | {:>12} | {:>12} | {:>12}", "plugin", "grown ns/key", "fired ns/key", "fire ns/key");
    println!("{:-<40}-+-{:->12}-+-{:->12}-+-{:->12}", "", "", "", "");
    for path in plugins {
        assert!(path.is_file(), "{} is missing: run `bash scripts/build-plugins window-count` first", path.display());
        let plugin = Plugin::load(&runtime, &path).unwrap_or_else(|err| panic!("{err}"));
        let ((grown, entries), _) = best(|| round(&plugin, &input, false));
        assert_eq!(entries, keys, "a round hands over each changed key once");
        let ((fired, entries), (firing, emitted)) = best(|| round(&plugin, &input, true));
        assert_eq!(entries, keys, "a round after the firing hands over each key's removal");
        assert_eq!(emitted, keys, "the firing emits each key's count");
        let per = |time: Duration| time.as_nanos() as f64 / keys as f64;
        let shown = path.display().to_string();
        println!("{shown:<40} | {:>12.1} | {:>12.1} | {:>12.1}", per(grown), per(fired), per(firing));
    }
}
