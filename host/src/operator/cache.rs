//! Compiled plugins on disk, so that a restart does not recompile: a Python or JS
//! component takes seconds to compile and milliseconds to map back in. Entries
//! are keyed by the plugin's bytes and the engine's settings; the directory has
//! a size cap, oldest entries go first. Entries are native code, so the directory
//! and each entry must belong to the user running weir and be writable by no one
//! else: an untrusted directory is refused, an untrusted entry ignored.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Extension of cache entries; anything else in the directory is left alone.
const EXTENSION: &str = "cwasm";

pub(super) struct CompiledCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// Why a cache directory is not used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(
        "refusing the compiled-code cache {}: {reason}; its files are loaded as native code, so \
         it must belong to you and be writable by no one else: `chmod go-w` it, point \
         WEIR_CACHE_DIR at a directory of your own, or set WEIR_CACHE_DIR= (empty) to run \
         without a cache",
        dir.display()
    )]
    Untrusted { dir: PathBuf, reason: String },
}

impl CompiledCache {
    /// The cache in `dir`, created (mode 0700) if missing. `None`, with a warning,
    /// if it cannot be created: the cache is an optimisation.
    pub(super) fn open(dir: PathBuf, max_bytes: u64) -> Result<Option<Self>, CacheError> {
        if let Err(err) = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
        {
            tracing::warn!(dir = %dir.display(), "cannot create the compiled-code cache, compiling every time: {err}");
            return Ok(None);
        }
        let meta = fs::metadata(&dir).map_err(|err| CacheError::Untrusted {
            dir: dir.clone(),
            reason: err.to_string(),
        })?;
        if let Some(reason) = untrusted(&meta, true) {
            return Err(CacheError::Untrusted { dir, reason });
        }
        Ok(Some(Self { dir, max_bytes }))
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry name for `wasm` compiled by `engine`: a digest of both, so a
    /// changed plugin, wasmtime version or engine setting misses the cache.
    pub(super) fn key(engine: &Engine, wasm: &[u8]) -> String {
        let mut digest = DigestHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut digest);
        digest.0.update(wasm);
        let hash = digest.0.finalize();
        hash.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The cached component for `key`, if there is a usable one. A corrupt or
    /// stale entry is removed and reported as a miss.
    pub(super) fn load(&self, engine: &Engine, key: &str) -> Option<Component> {
        let path = self.entry(key);
        let meta = fs::symlink_metadata(&path).ok()?;
        if let Some(reason) = untrusted(&meta, false) {
            tracing::warn!(entry = %path.display(), "ignoring a compiled-code cache entry, compiling instead: {reason}");
            return None;
        }
        // SAFETY: entries are written only by `store` below, from `Component::serialize`
        // with an engine of the same configuration (the key covers it); the
        // directory and the entry belong to the user running weir and nobody else
        // can write them (checked above and in `open`). wasmtime re-checks the
        // header and the engine compatibility before using the code.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => {
                // Recently used entries survive pruning.
                let _ = fs::File::options()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(SystemTime::now()));
                Some(component)
            }
            Err(err) => {
                tracing::warn!(entry = %path.display(), "dropping an unusable compiled-code cache entry: {err:#}");
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Writes `component` under `key`. The cache is an optimisation: failures
    /// are logged and otherwise ignored.
    pub(super) fn store(&self, key: &str, component: &Component) {
        if let Err(err) = self.try_store(key, component) {
            tracing::warn!(
                dir = %self.dir.display(),
                "cannot cache compiled plugin code, the next start will compile again: {err:#}"
            );
        }
    }

    fn try_store(&self, key: &str, component: &Component) -> anyhow::Result<()> {
        let bytes = component.serialize()?;
        // Write then rename, so a concurrent reader never maps a partial file.
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let unique = WRITES.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .dir
            .join(format!(".{key}.{}.{unique}.tmp", std::process::id()));
        let mut file = fs::File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&bytes)?;
        drop(file);
        let renamed = fs::rename(&tmp, self.entry(key));
        if renamed.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        renamed?;
        self.prune()
    }

    /// Removes least recently used entries until the directory fits its cap.
    fn prune(&self) -> anyhow::Result<()> {
        let mut entries = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let path = entry.path();
            if path.extension().is_some_and(|e| e == EXTENSION) {
                let meta = entry.metadata()?;
                entries.push((
                    meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    meta.len(),
                    path,
                ));
            }
        }
        let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            tracing::debug!(entry = %path.display(), "pruning the compiled-code cache");
            fs::remove_file(&path)?;
            total -= len;
        }
        Ok(())
    }

    fn entry(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.{EXTENSION}"))
    }
}

/// Why a cache directory (`dir`) or entry with metadata `meta` cannot be
/// trusted with native code, if it cannot: another owner, a wrong file type, or
/// write permission for group or others.
fn untrusted(meta: &fs::Metadata, dir: bool) -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Some(format!("it belongs to uid {}, not to uid {me} running weir", meta.uid()));
    }
    let kind_ok = if dir { meta.is_dir() } else { meta.file_type().is_file() };
    if !kind_ok {
        let want = if dir { "a directory" } else { "a regular file" };
        return Some(format!("it is not {want}"));
    }
    let mode = meta.mode() & 0o7777;
    (mode & 0o022 != 0).then(|| format!("group or others may write it (mode {mode:o})"))
}

/// Feeds `Hash` output into a digest, so the engine's compatibility hash (only
/// exposed as `impl Hash`) lands in the same stable SHA-256 as the plugin bytes.
struct DigestHasher(Sha256);

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        unreachable!("only the digest is read")
    }
}
