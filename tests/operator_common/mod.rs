//! Shared by the `operator_*` integration tests: where the example plugins are,
//! a runtime whose compiled-code cache persists between test runs, and small
//! builders for batches. A missing plugin fails the test; it never skips.


use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use std::collections::BTreeMap;

use weir::batch::Batch;
use weir::operator::{Limits, OperatorInstance, Plugin, Runtime, RuntimeConfig};
use weir::chunk::StateChunk;

/// `$WEIR_PLUGINS_DIR`, else `<repo>/target/plugins`.
pub fn plugins_dir() -> PathBuf {
    match std::env::var_os("WEIR_PLUGINS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("host/ has a parent")
            .join("target/plugins"),
    }
}

/// The path of example plugin `name`, which must exist.
pub fn plugin_path(name: &str) -> PathBuf {
    let path = plugins_dir().join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "plugin {} is missing: run `bash scripts/build-plugins` first (or set WEIR_PLUGINS_DIR)",
        path.display()
    );
    path
}

/// One runtime per test binary, caching compiled code under `target/tmp` so that
/// only the first run pays for compiling the Python and JS components.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let config = RuntimeConfig {
            cache_dir: Some(cache_dir()),
            ..RuntimeConfig::default()
        };
        Runtime::new(config).expect("runtime starts")
    })
}

pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-compiled-cache")
}

pub fn load(name: &str) -> Plugin {
    let path = plugin_path(name);
    Plugin::load(runtime(), &path).unwrap_or_else(|err| panic!("{name} loads: {err}"))
}

/// Limits tight enough that a runaway plugin is stopped quickly.
pub fn tight_limits() -> Limits {
    Limits {
        memory_bytes: 32 << 20,
        call_timeout: Duration::from_millis(200),
        ..Limits::default()
    }
}

pub fn config(entries: &[(&str, &str)]) -> Vec<(String, String)> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A batch of `(key, value, timestamp)` records without headers.
pub fn batch(records: &[(Option<&str>, &str, i64)]) -> Batch {
    let mut batch = Batch::new();
    for (key, value, timestamp) in records {
        batch.push(key.map(str::as_bytes), value.as_bytes(), *timestamp, &[]);
    }
    batch
}

/// The records of `batch` as text, for readable assertions.
pub fn records(batch: &Batch) -> Vec<(Option<String>, String, i64)> {
    batch
        .iter()
        .map(|r| {
            (
                r.key.map(|k| String::from_utf8_lossy(k).into_owned()),
                String::from_utf8_lossy(r.value).into_owned(),
                r.timestamp,
            )
        })
        .collect()
}

/// A scratch file under `target/tmp` for tests that write their own bad plugins.
pub fn scratch_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-operator-tests");
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write scratch file");
    path
}

/// A checkpoint's keyed state as the host keeps it: each key's latest entry.
pub type Image = BTreeMap<Vec<u8>, Vec<u8>>;

/// One whole snapshot round: every key changed since the last, in small chunks.
pub fn changes(instance: &mut OperatorInstance) -> StateChunk {
    let mut all = StateChunk::default();
    loop {
        let chunk = instance.snapshot(4096).unwrap_or_else(|err| panic!("{err}"));
        if chunk.is_empty() {
            return all;
        }
        for (key, value) in chunk.iter() {
            all.push(key, value);
        }
    }
}

/// Applies a round of changes to the image of a checkpoint.
pub fn apply(image: &mut Image, changes: &StateChunk) {
    for (key, value) in changes.iter() {
        match value {
            Some(value) => image.insert(key.to_vec(), value.to_vec()),
            None => image.remove(key),
        };
    }
}

/// Restores `image` into a fresh instance, in chunks of a few entries, and ends the
/// restore at `watermark`.
pub fn restore(instance: &mut OperatorInstance, image: &Image, watermark: i64) {
    let entries: Vec<_> = image.iter().collect();
    for part in entries.chunks(3) {
        let mut chunk = StateChunk::default();
        for (key, value) in part {
            chunk.push(key, Some(value));
        }
        instance.restore(&chunk).unwrap_or_else(|err| panic!("{err}"));
    }
    instance.restored(watermark).unwrap_or_else(|err| panic!("{err}"));
}

/// One snapshot round: the chunks before the empty one that ends it, each checked
/// against `max_bytes` (only a chunk of a single entry may exceed it).
pub fn round(op: &mut OperatorInstance, max_bytes: u32) -> Vec<StateChunk> {
    let mut chunks = Vec::new();
    loop {
        let chunk = op.snapshot(max_bytes).unwrap_or_else(|err| panic!("{err}"));
        if chunk.is_empty() {
            return chunks;
        }
        assert!(
            chunk.data_len() <= max_bytes as usize || chunk.len() == 1,
            "a chunk of {} entries holds {} bytes, over max-bytes {max_bytes}",
            chunk.len(),
            chunk.data_len()
        );
        chunks.push(chunk);
    }
}
