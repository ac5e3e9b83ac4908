//! What a plugin may touch: the per-Store host state and the one linker every
//! plugin is instantiated against. WASI is granted with nothing behind it (no
//! files, sockets, environment; clocks frozen, timers already elapsed), memory is
//! capped per Store, and the guest's log and stdio go to `tracing`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use wasmtime::component::{HasSelf, Linker, Resource, ResourceTable};
use wasmtime::{Engine, ResourceLimiter, StoreContextMut};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{DynPollable, OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use super::bindings::{Operator, log, types};

/// The WASI clock interface whose timers are replaced (see [`linker`]). Must
/// name the version wasmtime-wasi defines, or shadowing would add a new
/// instance instead of replacing; `linker` checks that it exists.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Longest log message or output line forwarded; the rest is cut.
const MAX_LINE_BYTES: usize = 4096;

/// How much of a guest's latest output is kept to explain a trap (a Rust panic
/// message lands there).
const OUTPUT_TAIL_BYTES: usize = 2048;

/// Most host-side WASI resources (streams, pollables) one instance may hold at
/// once: they live in host memory, outside the linear-memory cap. A plugin needs
/// a handful; the bound stops one from filling the host until its deadline.
const MAX_HOST_RESOURCES: usize = 4096;

/// Most tables and elements a guest may create: generous for any real plugin.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// The data of one operator instance's `Store`.
pub(super) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryCap,
    output: GuestOutput,
    label: Arc<str>,
}

impl HostState {
    pub(super) fn new(label: Arc<str>, memory_bytes: usize) -> Self {
        let output = GuestOutput {
            label: label.clone(),
            shared: Arc::default(),
        };
        let wasi = WasiCtx::builder()
            .stdout(output.stream(OutputKind::Stdout))
            .stderr(output.stream(OutputKind::Stderr))
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_HOST_RESOURCES);
        Self {
            wasi,
            table,
            memory: MemoryCap::new(memory_bytes),
            output,
            label,
        }
    }

    pub(super) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.memory
    }

    /// Forgets what the previous call left behind, so an error describes this call.
    pub(super) fn begin_call(&mut self) {
        self.memory.denied = None;
        self.output
            .shared
            .lock()
            .expect("guest output lock")
            .tail
            .clear();
    }

    /// The size a memory growth was refused at during this call, if one was.
    pub(super) fn memory_denied(&self) -> Option<usize> {
        self.memory.denied
    }

    /// Bytes of linear memory the guest holds now.
    pub(super) fn memory_in_use(&self) -> usize {
        self.memory.in_use
    }

    /// The last lines the guest wrote during this call, joined, if it wrote any.
    pub(super) fn output_tail(&self) -> Option<String> {
        let shared = self.output.shared.lock().expect("guest output lock");
        let (a, b) = shared.tail.as_slices();
        let text = String::from_utf8_lossy(&[a, b].concat()).into_owned();
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            // Rust's panic hook adds this hint; it cannot be acted on in a sandbox.
            .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE=1`"))
            .collect();
        (!lines.is_empty()).then(|| lines.join(" "))
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The `types` interface has no functions; the generated linker still asks for it.
impl types::Host for HostState {}

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) {
        let message = cut(&message);
        let operator = &*self.label;
        match level {
            log::Level::Trace => tracing::trace!(target: "weir::plugin", operator, "{message}"),
            log::Level::Debug => tracing::debug!(target: "weir::plugin", operator, "{message}"),
            log::Level::Info => tracing::info!(target: "weir::plugin", operator, "{message}"),
            log::Level::Warn => tracing::warn!(target: "weir::plugin", operator, "{message}"),
            log::Level::Error => tracing::error!(target: "weir::plugin", operator, "{message}"),
        }
    }
}

/// The linker every plugin is instantiated against: the world's `log` import
/// and WASI 0.2, with timers that never block (see [`ready_now`]).
pub(super) fn linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    Operator::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;

    // A WASI sleep blocks the calling thread in the host, where the epoch deadline
    // cannot interrupt it. With the clock frozen, every timer has already elapsed.
    // Defining a timer without shadowing must fail: that proves MONOTONIC_CLOCK
    // names the instance wasmtime-wasi defined, rather than a new one no plugin imports.
    let redefined = linker
        .instance(MONOTONIC_CLOCK)?
        .func_wrap("subscribe-duration", |_, (_,): (u64,)| Ok(()));
    if redefined.is_ok() {
        wasmtime::bail!(
            "wasmtime-wasi does not define `{MONOTONIC_CLOCK}`: update MONOTONIC_CLOCK to its version"
        );
    }
    linker.allow_shadowing(true);
    let mut clocks = linker.instance(MONOTONIC_CLOCK)?;
    clocks.func_wrap("subscribe-duration", |store, (_,): (u64,)| {
        Ok((ready_now(store)?,))
    })?;
    clocks.func_wrap("subscribe-instant", |store, (_,): (u64,)| {
        Ok((ready_now(store)?,))
    })?;
    linker.allow_shadowing(false);
    Ok(linker)
}

/// A pollable that is always ready: the timer a frozen clock hands out.
struct Elapsed;

#[wasmtime_wasi::async_trait]
impl Pollable for Elapsed {
    async fn ready(&mut self) {}
}

fn ready_now(mut store: StoreContextMut<'_, HostState>) -> wasmtime::Result<Resource<DynPollable>> {
    let table = &mut store.data_mut().table;
    let elapsed = table.push(Elapsed)?;
    wasmtime_wasi::p2::subscribe(table, elapsed)
}

/// The wall clock reads the epoch and the monotonic clock 0, forever: a plugin
/// gets event time from records, never from the machine, so replays match.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }

    fn now(&self) -> u64 {
        0
    }
}

/// Caps the total linear memory of a Store (all its core memories together:
/// a component may hold several) and remembers a refusal, so that the trap
/// which usually follows can be reported as what it is.
struct MemoryCap {
    limit: usize,
    in_use: usize,
    denied: Option<usize>,
}

impl MemoryCap {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            in_use: 0,
            denied: None,
        }
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.in_use - current.min(self.in_use) + desired;
        if total > self.limit {
            self.denied = Some(total);
            return Ok(false);
        }
        self.in_use = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Where a guest's stdout and stderr go: each complete line to `tracing`, and
/// the latest bytes into a tail kept for error messages.
#[derive(Clone)]
struct GuestOutput {
    label: Arc<str>,
    shared: Arc<Mutex<OutputBuffers>>,
}

#[derive(Default)]
struct OutputBuffers {
    stdout_line: Vec<u8>,
    stderr_line: Vec<u8>,
    tail: VecDeque<u8>,
}

#[derive(Clone, Copy)]
enum OutputKind {
    Stdout,
    Stderr,
}

impl GuestOutput {
    fn stream(&self, kind: OutputKind) -> GuestStream {
        GuestStream {
            output: self.clone(),
            kind,
        }
    }

    fn write(&self, kind: OutputKind, bytes: &[u8]) {
        let mut shared = self.shared.lock().expect("guest output lock");
        let OutputBuffers {
            stdout_line,
            stderr_line,
            tail,
        } = &mut *shared;
        tail.extend(bytes);
        let excess = tail.len().saturating_sub(OUTPUT_TAIL_BYTES);
        tail.drain(..excess);
        let line = match kind {
            OutputKind::Stdout => stdout_line,
            OutputKind::Stderr => stderr_line,
        };
        for &byte in bytes {
            if byte == b'\n' || line.len() >= MAX_LINE_BYTES {
                self.emit(kind, line);
                line.clear();
            }
            if byte != b'\n' {
                line.push(byte);
            }
        }
    }

    fn emit(&self, kind: OutputKind, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let operator = &*self.label;
        match kind {
            OutputKind::Stdout => {
                tracing::info!(target: "weir::plugin", operator, stream = "stdout", "{text}")
            }
            OutputKind::Stderr => {
                tracing::warn!(target: "weir::plugin", operator, stream = "stderr", "{text}")
            }
        }
    }
}

struct GuestStream {
    output: GuestOutput,
    kind: OutputKind,
}

impl IsTerminal for GuestStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(GuestStream {
            output: self.output.clone(),
            kind: self.kind,
        })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(GuestStream {
            output: self.output.clone(),
            kind: self.kind,
        })
    }
}

impl OutputStream for GuestStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.output.write(self.kind, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(MAX_LINE_BYTES)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestStream {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.output.write(self.kind, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// At most [`MAX_LINE_BYTES`] of `text`, cut on a character boundary.
fn cut(text: &str) -> &str {
    if text.len() <= MAX_LINE_BYTES {
        return text;
    }
    let mut end = MAX_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_cap_counts_all_memories_and_remembers_refusals() {
        let mut cap = MemoryCap::new(100);
        assert!(cap.memory_growing(0, 60, None).unwrap());
        assert!(cap.memory_growing(0, 30, None).unwrap());
        assert!(!cap.memory_growing(30, 50, None).unwrap());
        assert_eq!(cap.denied, Some(110));
        assert!(cap.memory_growing(60, 70, None).unwrap());
        assert_eq!(cap.in_use, 100);
    }

    #[test]
    fn output_tail_keeps_the_latest_lines_without_the_backtrace_hint() {
        let mut state = HostState::new("t".into(), 1 << 20);
        state.output.write(
            OutputKind::Stderr,
            b"thread '<unnamed>' panicked at src/lib.rs:3:5:\npoison record\n",
        );
        state.output.write(
            OutputKind::Stderr,
            b"note: run with `RUST_BACKTRACE=1` environment variable\n",
        );
        assert_eq!(
            state.output_tail().as_deref(),
            Some("thread '<unnamed>' panicked at src/lib.rs:3:5: poison record")
        );
        state.begin_call();
        assert_eq!(state.output_tail(), None);
    }
}
