//! The process-wide Wasm runtime: one wasmtime `Engine` configured for
//! synchronous, interruptible calls, the epoch ticker that drives every
//! operator's CPU deadline, the shared linker and the compiled-code cache.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{Config, Engine, OptLevel};

use super::cache::{CacheError, CompiledCache};
use super::linear::{HugePages, Restoring};
use super::sandbox::{self, HostState};

/// How the runtime is set up; [`RuntimeConfig::default`] suits production.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Where compiled plugins are kept across restarts; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    /// Most bytes the cache directory may hold before old entries are removed.
    pub cache_max_bytes: u64,
    /// How often the epoch advances: the granularity of every call deadline.
    pub epoch_tick: Duration,
    /// Write `/tmp/perf-<pid>.map` so that `perf report` names the functions of
    /// plugins (compiled code is otherwise anonymous memory to it); by default when
    /// `$WEIR_PERF_MAP` is `1`.
    pub perf_map: bool,
}

impl RuntimeConfig {
    /// `$WEIR_CACHE_DIR` if set (empty disables the cache), else
    /// `$XDG_CACHE_HOME/weir/compiled`, else `~/.cache/weir/compiled`.
    pub fn default_cache_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("WEIR_CACHE_DIR") {
            return (!dir.is_empty()).then(|| PathBuf::from(dir));
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
        Some(base.join("weir").join("compiled"))
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: Self::default_cache_dir(),
            cache_max_bytes: 2 << 30,
            epoch_tick: Duration::from_millis(10),
            perf_map: std::env::var_os("WEIR_PERF_MAP").is_some_and(|value| value == "1"),
        }
    }
}

/// The runtime could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("the epoch tick must be between 1 ms and 1 s, got {0:?}")]
    EpochTick(Duration),
    #[error("cannot configure the WebAssembly engine: {0:#}")]
    Engine(wasmtime::Error),
    #[error("cannot start the epoch ticker thread: {0}")]
    Ticker(std::io::Error),
    #[error("{0}")]
    Cache(#[from] CacheError),
}

/// One per process; cheap to clone. Plugins and instances keep it alive, so the
/// ticker runs as long as any operator may be called.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    /// Where every memory of the engine comes from.
    pages: Arc<HugePages>,
    linker: Linker<HostState>,
    cache: Option<CompiledCache>,
    epoch_tick: Duration,
    ticker: Option<Ticker>,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        if config.epoch_tick < Duration::from_millis(1)
            || config.epoch_tick > Duration::from_secs(1)
        {
            return Err(RuntimeError::EpochTick(config.epoch_tick));
        }
        let cache = match config.cache_dir {
            Some(dir) => CompiledCache::open(dir, config.cache_max_bytes)?,
            None => None,
        };
        let mut wasm = Config::new();
        // Concurrency support makes every synchronous component call markedly
        // slower; operators are called synchronously from dedicated threads.
        wasm.concurrency_support(false);
        wasm.epoch_interruption(true);
        wasm.cranelift_opt_level(OptLevel::Speed);
        wasm.parallel_compilation(true);
        // Linear memories in transparent huge pages (`linear.rs`): a keyed window's table
        // of 10 M keys cost 12 % less CPU a record (before its keys moved into its
        // slots). Their initial image is then copied in rather than mapped copy-on-write,
        // which only a large guest notices (a Python component's 13 MiB: instantiation
        // 0.9 -> 4.8 ms, about 20 MiB more RSS). While a restore runs they grow in small
        // pages, which a restore fills faster.
        let pages = Arc::new(HugePages::default());
        wasm.with_host_memory(Arc::clone(&pages) as Arc<dyn wasmtime::MemoryCreator>);
        wasm.memory_init_cow(false);
        if config.perf_map {
            wasm.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&wasm).map_err(RuntimeError::Engine)?;
        let linker = sandbox::linker(&engine).map_err(RuntimeError::Engine)?;
        let ticker =
            Ticker::start(engine.clone(), config.epoch_tick).map_err(RuntimeError::Ticker)?;
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                pages,
                linker,
                cache,
                epoch_tick: config.epoch_tick,
                ticker: Some(ticker),
            }),
        })
    }

    /// Marks a restore under way until the guard returned drops: meanwhile, memories
    /// grow in small pages (`linear.rs`).
    pub fn restoring(&self) -> Restoring {
        self.inner.pages.restoring()
    }

    /// Where compiled plugins are cached, if anywhere.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.inner.cache.as_ref().map(CompiledCache::dir)
    }

    pub(super) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(super) fn linker(&self) -> &Linker<HostState> {
        &self.inner.linker
    }

    pub(super) fn cache(&self) -> Option<&CompiledCache> {
        self.inner.cache.as_ref()
    }

    /// Epoch ticks that make up `timeout` (at least one).
    pub(super) fn deadline_ticks(&self, timeout: Duration) -> u64 {
        let ticks = timeout
            .as_nanos()
            .div_ceil(self.inner.epoch_tick.as_nanos());
        u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(ticker) = self.ticker.take() {
            ticker.stop();
        }
    }
}

/// Advances the engine's epoch every tick; a Store whose deadline (in ticks)
/// passes traps at its next loop header or function entry.
struct Ticker {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Ticker {
    fn start(engine: Engine, tick: Duration) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("weir-epoch".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(tick) {
                    engine.increment_epoch();
                }
            })?;
        Ok(Self { stop, thread })
    }

    fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_and_rejects_a_silly_tick() {
        let config = RuntimeConfig {
            cache_dir: None,
            ..RuntimeConfig::default()
        };
        let runtime = Runtime::new(config.clone()).expect("runtime starts");
        assert_eq!(runtime.deadline_ticks(Duration::from_millis(200)), 20);
        assert_eq!(runtime.deadline_ticks(Duration::from_micros(1)), 1);
        let silly = RuntimeConfig {
            epoch_tick: Duration::from_secs(5),
            ..config
        };
        assert!(matches!(
            Runtime::new(silly),
            Err(RuntimeError::EpochTick(_))
        ));
    }
}
