//! A plugin file turned into something instances can be stamped from: read,
//! recognised (component, not core module or garbage), compiled or fetched from
//! the cache, checked against the world, and pre-instantiated once.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use semver::Version;
use wasmtime::component::Component;

use super::contract::{self, Surface, World};
use super::exports::OperatorPre;
use super::error::PluginError;
use super::runtime::Runtime;
use super::stdio::{LogGate, LogLimits};

/// How long compiling a plugin may take unless the job says otherwise. Generous on
/// purpose: a Python or JavaScript component takes 12–27 s on a loaded 2-core machine;
/// the bound is there to stop a compile bomb, not a slow machine.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(120);

/// What loading one plugin file may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadLimits {
    /// Largest file accepted; a Python component is ~20 MB.
    pub max_bytes: u64,
    /// How long compiling it may take; a Python component takes 4–27 s here.
    pub compile_timeout: Duration,
}

impl Default for LoadLimits {
    fn default() -> Self {
        Self {
            max_bytes: 128 << 20,
            compile_timeout: DEFAULT_COMPILE_TIMEOUT,
        }
    }
}

/// The 8-byte preamble of a Wasm binary: magic, then version and layer.
const MAGIC: &[u8; 4] = b"\0asm";
const CORE_MODULE: [u8; 4] = [1, 0, 0, 0];
const COMPONENT_LAYER: [u8; 2] = [1, 0];
const COMPONENT_VERSION: u16 = 0xd;

/// A loaded, validated plugin. Cheap to clone and shareable across threads:
/// every operator instance of it is stamped from the same pre-instantiation.
#[derive(Clone)]
pub struct Plugin {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: Runtime,
    pre: OperatorPre,
    info: PluginInfo,
    /// The log rate limit of each instance label stamped from it.
    logs: Mutex<HashMap<String, LogGate>>,
}

/// What `weir check` and the job log say about a plugin.
#[derive(Clone, Debug)]
pub struct PluginInfo {
    pub path: PathBuf,
    pub size_bytes: u64,
    /// Always [`contract::PACKAGE`]: anything else fails to load.
    pub package: &'static str,
    /// The world it runs as: 0.2 (one input, one output) or 0.3 (named inputs and
    /// outputs); its `Display` is `weir:operator@0.3.0`.
    pub world: World,
    /// The `weir:operator` version the plugin was built against, read from its
    /// imports; `None` when it imports no `weir:operator` interface.
    pub version: Option<Version>,
    pub exports: Vec<String>,
    pub imports: Vec<String>,
    pub compiled: Compiled,
}

/// How the plugin's machine code was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compiled {
    /// Compiled now, taking this long (and stored in the cache if there is one).
    Fresh(Duration),
    /// Mapped from the compiled-code cache, taking this long.
    Cached(Duration),
}

impl fmt::Display for Compiled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compiled::Fresh(t) => write!(f, "compiled in {:.1} ms", t.as_secs_f64() * 1e3),
            Compiled::Cached(t) => write!(
                f,
                "loaded from the compiled-code cache in {:.1} ms",
                t.as_secs_f64() * 1e3
            ),
        }
    }
}

impl Plugin {
    /// Loads the component at `path` under [`LoadLimits::default`].
    pub fn load(runtime: &Runtime, path: &Path) -> Result<Plugin, PluginError> {
        Self::load_with(runtime, path, LoadLimits::default())
    }

    /// Loads the component at `path`, checks it can run as an operator here and
    /// pre-instantiates it.
    pub fn load_with(
        runtime: &Runtime,
        path: &Path,
        limits: LoadLimits,
    ) -> Result<Plugin, PluginError> {
        let wasm = read(path, limits.max_bytes)?;
        let size = wasm.len() as u64;
        recognise(path, &wasm)?;

        let (component, compiled) = compile(runtime, path, wasm, limits.compile_timeout)?;
        let Surface {
            world,
            version,
            imports,
            exports,
        } = contract::check(path, runtime.engine(), &component)?;
        let instance_pre = runtime
            .linker()
            .instantiate_pre(&component)
            .map_err(|err| PluginError::Link {
                path: path.to_owned(),
                detail: format!("{err:#}"),
            })?;
        let pre = OperatorPre::new(world, instance_pre).map_err(|err| PluginError::WrongSignature {
            path: path.to_owned(),
            host: world.version().clone(),
            detail: format!("{err:#}"),
        })?;
        let info = PluginInfo {
            path: path.to_owned(),
            size_bytes: size,
            package: contract::PACKAGE,
            world,
            version,
            exports,
            imports,
            compiled,
        };
        tracing::info!(plugin = %path.display(), "plugin loaded ({world}), {compiled}");
        Ok(Plugin {
            inner: Arc::new(Inner {
                runtime: runtime.clone(),
                pre,
                info,
                logs: Mutex::default(),
            }),
        })
    }

    pub fn info(&self) -> &PluginInfo {
        &self.inner.info
    }

    pub fn path(&self) -> &Path {
        &self.inner.info.path
    }

    /// Marks a restore under way in the plugin's runtime until the guard drops:
    /// [`Runtime::restoring`].
    pub fn restoring(&self) -> super::Restoring {
        self.inner.runtime.restoring()
    }

    pub(super) fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    pub(super) fn pre(&self) -> &OperatorPre {
        &self.inner.pre
    }

    /// The log rate limit of the instances labelled `label`, one for as long as the
    /// plugin is loaded: an operator whose attempts fail one after another does not
    /// get a fresh budget with each (nor with each crash within one).
    pub(super) fn log_gate(&self, label: &str, limits: LogLimits) -> LogGate {
        let mut logs = self.inner.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        logs.entry(label.to_owned()).or_insert_with(|| LogGate::new(label.into(), limits)).clone()
    }
}

/// The file's bytes, if it is a regular file of at most `max_bytes`: the size is
/// checked before reading, and the read stops past it in case the file grows.
fn read(path: &Path, max_bytes: u64) -> Result<Vec<u8>, PluginError> {
    let read_err = |cause| PluginError::Read {
        path: path.to_owned(),
        cause,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(PluginError::NotAFile {
            path: path.to_owned(),
        });
    }
    let too_large = |size| PluginError::TooLarge {
        path: path.to_owned(),
        size,
        max: max_bytes,
    };
    if meta.len() > max_bytes {
        return Err(too_large(meta.len()));
    }
    let mut wasm = Vec::with_capacity(meta.len() as usize);
    file.take(max_bytes + 1)
        .read_to_end(&mut wasm)
        .map_err(read_err)?;
    if wasm.len() as u64 > max_bytes {
        return Err(too_large(wasm.len() as u64));
    }
    Ok(wasm)
}

/// Tells a component from a core module or something that is not Wasm at all,
/// by the preamble alone, so those get their own message instead of a parse error.
fn recognise(path: &Path, wasm: &[u8]) -> Result<(), PluginError> {
    if wasm.len() < 4 || &wasm[..4] != MAGIC {
        return Err(PluginError::NotWasm {
            path: path.to_owned(),
        });
    }
    let Some(preamble) = wasm.get(4..8) else {
        return Err(PluginError::Truncated {
            path: path.to_owned(),
            detail: "the file ends inside the 8-byte header".into(),
        });
    };
    if preamble == CORE_MODULE {
        return Err(PluginError::CoreModule {
            path: path.to_owned(),
        });
    }
    let version = u16::from_le_bytes([preamble[0], preamble[1]]);
    let layer = u16::from_le_bytes([preamble[2], preamble[3]]);
    if preamble[2..] != COMPONENT_LAYER || version != COMPONENT_VERSION {
        return Err(PluginError::UnknownEncoding {
            path: path.to_owned(),
            version,
            layer,
        });
    }
    check_sections_fit(wasm).map_err(|detail| PluginError::Truncated {
        path: path.to_owned(),
        detail,
    })
}

/// Walks the top-level sections (an id byte, a LEB128 length, the body): a file
/// cut short shows as a section running past its end, which the parser would
/// otherwise report as some unrelated-looking range error.
fn check_sections_fit(wasm: &[u8]) -> Result<(), String> {
    let mut pos = 8;
    while pos < wasm.len() {
        let start = pos;
        pos += 1;
        let mut len: u64 = 0;
        for shift in (0..35).step_by(7) {
            let Some(&byte) = wasm.get(pos) else {
                return Err(format!(
                    "the file ends inside the header of the section at byte {start}"
                ));
            };
            pos += 1;
            len |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        let end = pos as u64 + len;
        if end > wasm.len() as u64 {
            return Err(format!(
                "the section at byte {start} needs {len} bytes up to byte {end}, but the file ends at byte {}",
                wasm.len()
            ));
        }
        pos = end as usize;
    }
    Ok(())
}

fn compile(
    runtime: &Runtime,
    path: &Path,
    wasm: Vec<u8>,
    timeout: Duration,
) -> Result<(Component, Compiled), PluginError> {
    let started = Instant::now();
    let key = runtime.cache().map(|cache| {
        (
            cache,
            super::cache::CompiledCache::key(runtime.engine(), &wasm),
        )
    });
    if let Some((cache, key)) = &key
        && let Some(component) = cache.load(runtime.engine(), key)
    {
        return Ok((component, Compiled::Cached(started.elapsed())));
    }
    let component = compile_within(runtime, path, wasm, timeout)?;
    let compiled = Compiled::Fresh(started.elapsed());
    if let Some((cache, key)) = &key {
        cache.store(key, &component);
    }
    Ok((component, compiled))
}

/// Compiles on a thread of its own and waits at most `timeout`. Cranelift cannot
/// be interrupted: past the deadline the thread is left to finish and its result
/// dropped, and the caller fails to start (a job or `weir check` then exits).
fn compile_within(
    runtime: &Runtime,
    path: &Path,
    wasm: Vec<u8>,
    timeout: Duration,
) -> Result<Component, PluginError> {
    let (done, result) = mpsc::sync_channel(1);
    let engine = runtime.engine().clone();
    std::thread::Builder::new()
        .name("weir-compile".into())
        .spawn(move || {
            let _ = done.send(Component::from_binary(&engine, &wasm));
        })
        .map_err(|cause| PluginError::Read {
            path: path.to_owned(),
            cause,
        })?;
    let compiled = match result.recv_timeout(timeout) {
        Ok(compiled) => compiled,
        Err(RecvTimeoutError::Timeout) => {
            return Err(PluginError::CompileTimeout {
                path: path.to_owned(),
                timeout,
            });
        }
        Err(RecvTimeoutError::Disconnected) => {
            return Err(PluginError::Invalid {
                path: path.to_owned(),
                detail: "the compiler stopped without a result".into(),
            });
        }
    };
    compiled.map_err(|err| {
        let detail = format!("{err:#}");
        // Truncation inside a nested section is only visible to the parser.
        if detail.contains("unexpected end") {
            PluginError::Truncated {
                path: path.to_owned(),
                detail,
            }
        } else {
            PluginError::Invalid {
                path: path.to_owned(),
                detail,
            }
        }
    })
}
