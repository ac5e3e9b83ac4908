//! Where a guest's stdout, stderr and log messages go: each line to `tracing`
//! with the operator's label, its control characters escaped, cut at 4 KiB and
//! rate-limited per instance label across restarts (what is dropped is counted and
//! summarised), and the latest bytes into a short tail that explains a trap (a Rust
//! panic message lands there). Writes never block; one past what `check-write` allowed traps.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

use crate::metrics::PluginLogMetrics;

/// Longest log message or output line forwarded; the rest is cut.
const MAX_LINE_BYTES: usize = 4096;

/// How much of a guest's latest output is kept to explain a trap.
const TAIL_BYTES: usize = 2048;

/// The log rate limit lets this many seconds of its rate through at once, and
/// summarises what it dropped at most once per this many seconds.
const BURST_SECS: u32 = 10;

/// How much of a guest's log and stdio reaches the host log, per instance label: a
/// token bucket of lines and one of bytes, each holding [`BURST_SECS`] of its
/// rate. What does not fit is dropped, counted and summarised in one line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogLimits {
    pub lines_per_sec: u32,
    pub bytes_per_sec: u64,
}

impl Default for LogLimits {
    fn default() -> Self {
        Self {
            lines_per_sec: 100,
            bytes_per_sec: 64 << 10,
        }
    }
}

/// The rate limit of one operator instance's output; clones share it.
#[derive(Clone)]
pub(super) struct LogGate {
    shared: Arc<Mutex<Gate>>,
}

struct Gate {
    label: Arc<str>,
    limits: LogLimits,
    lines: f64,
    bytes: f64,
    refilled: Instant,
    summarised: Instant,
    /// Dropped since the last summary line.
    pending: (u64, u64),
    /// Dropped since the gate was made.
    total: (u64, u64),
    metrics: Option<PluginLogMetrics>,
}

impl LogGate {
    pub(super) fn new(label: Arc<str>, limits: LogLimits) -> Self {
        let gate = Gate {
            label,
            limits,
            lines: f64::from(limits.lines_per_sec) * f64::from(BURST_SECS),
            bytes: limits.bytes_per_sec as f64 * f64::from(BURST_SECS),
            refilled: Instant::now(),
            summarised: Instant::now(),
            pending: (0, 0),
            total: (0, 0),
            metrics: None,
        };
        Self {
            shared: Arc::new(Mutex::new(gate)),
        }
    }

    pub(super) fn label(&self) -> Arc<str> {
        self.lock().label.clone()
    }

    pub(super) fn count_drops(&self, metrics: PluginLogMetrics) {
        self.lock().metrics = Some(metrics);
    }

    /// Logs what was dropped since the last summary, if anything was.
    pub(super) fn summarise(&self) {
        self.lock().summarise();
    }

    /// Lines and bytes dropped so far.
    pub(super) fn dropped(&self) -> (u64, u64) {
        self.lock().total
    }

    /// Whether a line of `len` bytes may be logged now; if not, it is counted as
    /// dropped. A line let through after drops is preceded by a summary of them,
    /// at most once per [`BURST_SECS`]; the last summary comes when the instance goes
    /// ([`LogGate::summarise`]).
    fn admit(&self, len: usize) -> bool {
        self.lock().admit(len)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gate> {
        // A panic while holding it can only come from `tracing`; the counts stay usable.
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Gate {
    fn admit(&mut self, len: usize) -> bool {
        let now = Instant::now();
        let elapsed = now.duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        let burst = f64::from(BURST_SECS);
        let max_lines = f64::from(self.limits.lines_per_sec) * burst;
        let max_bytes = self.limits.bytes_per_sec as f64 * burst;
        self.lines = (self.lines + elapsed * f64::from(self.limits.lines_per_sec)).min(max_lines);
        self.bytes = (self.bytes + elapsed * self.limits.bytes_per_sec as f64).min(max_bytes);
        if self.lines < 1.0 || self.bytes < len as f64 {
            let len = len as u64;
            self.pending = (self.pending.0 + 1, self.pending.1 + len);
            self.total = (self.total.0 + 1, self.total.1 + len);
            if let Some(metrics) = &self.metrics {
                metrics.dropped_lines.inc();
                metrics.dropped_bytes.inc_by(len);
            }
            return false;
        }
        self.lines -= 1.0;
        self.bytes -= len as f64;
        if now.duration_since(self.summarised).as_secs() >= u64::from(BURST_SECS) {
            self.summarise();
        }
        true
    }

    /// Logs what was dropped since the last summary, if anything was.
    fn summarise(&mut self) {
        let (lines, bytes) = std::mem::take(&mut self.pending);
        if lines == 0 {
            return;
        }
        self.summarised = Instant::now();
        let LogLimits {
            lines_per_sec,
            bytes_per_sec,
        } = self.limits;
        tracing::warn!(
            target: "weir::plugin",
            operator = &*self.label,
            "dropped {lines} line(s), {bytes} bytes, of plugin output over the log rate limit of \
             {lines_per_sec} lines and {bytes_per_sec} bytes per second (bursts of {BURST_SECS} s); \
             raise log_lines_per_sec / log_kib_per_sec of the operator to keep more"
        );
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.summarise();
    }
}

/// Both streams of one instance, and its `log` import; clones share the buffers.
#[derive(Clone)]
pub(super) struct GuestOutput {
    gate: LogGate,
    label: Arc<str>,
    shared: Arc<Mutex<Buffers>>,
}

#[derive(Default)]
struct Buffers {
    stdout_line: Line,
    stderr_line: Line,
    tail: VecDeque<u8>,
}

/// A line being gathered: its first [`MAX_LINE_BYTES`] and the count of the rest.
#[derive(Default)]
struct Line {
    kept: Vec<u8>,
    cut: u64,
}

#[derive(Clone, Copy)]
enum Kind {
    Stdout,
    Stderr,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Stdout => "stdout",
            Kind::Stderr => "stderr",
        }
    }
}

impl GuestOutput {
    pub(super) fn new(gate: LogGate) -> Self {
        Self {
            label: gate.label(),
            gate,
            shared: Arc::default(),
        }
    }

    pub(super) fn stdout(&self) -> impl StdoutStream + 'static {
        GuestStream {
            output: self.clone(),
            kind: Kind::Stdout,
        }
    }

    pub(super) fn stderr(&self) -> impl StdoutStream + 'static {
        GuestStream {
            output: self.clone(),
            kind: Kind::Stderr,
        }
    }

    pub(super) fn label(&self) -> &str {
        &self.label
    }

    /// Forgets the tail, so that the next error shows only what follows.
    pub(super) fn clear_tail(&self) {
        self.lock().tail.clear();
    }

    /// The lines of the tail, trimmed and joined, if the guest wrote any.
    pub(super) fn tail(&self) -> Option<String> {
        let text = {
            let shared = self.lock();
            let (a, b) = shared.tail.as_slices();
            String::from_utf8_lossy(&[a, b].concat()).into_owned()
        };
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            // Rust's panic hook adds this hint; it cannot be acted on in a sandbox.
            .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE=1`"))
            .collect();
        (!lines.is_empty()).then(|| escaped(&lines.join(" ")).into_owned())
    }

    /// A `weir:operator/log` message as it may be logged: cut (saying by how
    /// much), or `None` when the rate limit drops it.
    pub(super) fn admit_log(&self, message: &str) -> Option<String> {
        self.gate.admit(cut(message).len()).then(|| one_line(message))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buffers> {
        // A panic while holding it can only come from `tracing`; the buffers stay usable.
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self, kind: Kind, bytes: &[u8]) {
        let mut shared = self.lock();
        let Buffers {
            stdout_line,
            stderr_line,
            tail,
        } = &mut *shared;
        let keep = bytes.len().min(TAIL_BYTES);
        tail.extend(&bytes[bytes.len() - keep..]);
        let excess = tail.len().saturating_sub(TAIL_BYTES);
        tail.drain(..excess);
        let line = match kind {
            Kind::Stdout => stdout_line,
            Kind::Stderr => stderr_line,
        };
        for piece in bytes.split_inclusive(|&b| b == b'\n') {
            let (text, ended) = match piece.split_last() {
                Some((&b'\n', text)) => (text, true),
                _ => (piece, false),
            };
            let room = MAX_LINE_BYTES - line.kept.len();
            let taken = text.len().min(room);
            line.kept.extend_from_slice(&text[..taken]);
            line.cut += (text.len() - taken) as u64;
            if ended {
                self.emit(kind, line);
                *line = Line::default();
            }
        }
    }

    fn emit(&self, kind: Kind, line: &Line) {
        if line.cut == 0 && line.kept.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if !self.gate.admit(line.kept.len()) {
            return;
        }
        // A line ended by CRLF: its CR is no part of it.
        let kept = line.kept.strip_suffix(b"\r").unwrap_or(&line.kept);
        let (text, dropped) = shown(&String::from_utf8_lossy(kept));
        let note = CutNote(line.cut + dropped);
        let operator = &*self.label;
        match kind {
            Kind::Stdout => {
                tracing::info!(target: "weir::plugin", operator, stream = "stdout", "{text}{note}")
            }
            Kind::Stderr => {
                tracing::warn!(target: "weir::plugin", operator, stream = "stderr", "{text}{note}")
            }
        }
    }
}

/// Says how many bytes of a line were cut, if any.
struct CutNote(u64);

impl std::fmt::Display for CutNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => Ok(()),
            cut => write!(f, " [... {cut} more bytes cut]"),
        }
    }
}

/// Text a guest wrote as one line of the host's log: at most [`MAX_LINE_BYTES`] of it
/// (saying how many bytes were cut), its control characters escaped, so that it can
/// neither flood a line nor start one that reads as the host's.
pub(super) fn one_line(text: &str) -> String {
    let (line, dropped) = shown(text);
    format!("{line}{}", CutNote(dropped))
}

/// `text` escaped and cut to [`MAX_LINE_BYTES`], and how many bytes the cuts dropped.
fn shown(text: &str) -> (String, u64) {
    let kept = cut(text);
    let escaped = escaped(kept);
    let line = cut(&escaped);
    let dropped = (text.len() - kept.len()) + (escaped.len() - line.len());
    (line.to_owned(), dropped as u64)
}

/// `text` with its control characters but tabs escaped (a line break as `\n`).
fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match needs_escape(c) {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
    }
    out.into()
}

fn needs_escape(c: char) -> bool {
    c.is_control() && c != '\t'
}

/// At most [`MAX_LINE_BYTES`] of `text`, cut on a character boundary: for
/// anything a guest says (log lines, error messages), which it alone sizes.
pub(super) fn cut(text: &str) -> &str {
    if text.len() <= MAX_LINE_BYTES {
        return text;
    }
    let mut end = MAX_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One stream as WASI sees it.
struct GuestStream {
    output: GuestOutput,
    kind: Kind,
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
    /// As WASI has it, a write past what `check_write` allowed traps: taken whole, one
    /// write of a guest's whole memory would hold the host for as long as its lines take.
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        if bytes.len() > MAX_LINE_BYTES {
            return Err(StreamError::Trap(wasmtime::format_err!(
                "the plugin wrote {} bytes to {} at once, over the {MAX_LINE_BYTES} that check-write allowed",
                bytes.len(),
                self.kind.name()
            )));
        }
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
        let taken = &buf[..buf.len().min(MAX_LINE_BYTES)];
        self.output.write(self.kind, taken);
        Poll::Ready(Ok(taken.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(limits: LogLimits) -> GuestOutput {
        GuestOutput::new(LogGate::new("t".into(), limits))
    }

    #[test]
    fn a_write_past_what_check_write_allowed_traps() {
        let mut stream = GuestStream { output: output(LogLimits::default()), kind: Kind::Stdout };
        let allowed = stream.check_write().unwrap();
        assert!(stream.write(Bytes::from(vec![b'a'; allowed])).is_ok());
        match stream.write(Bytes::from(vec![b'a'; allowed + 1])) {
            Err(StreamError::Trap(error)) => assert!(error.to_string().contains("to stdout at once"), "{error}"),
            _ => panic!("a write past check-write's permit must trap"),
        }
    }

    #[test]
    fn the_tail_keeps_the_latest_lines_without_the_backtrace_hint() {
        let output = output(LogLimits::default());
        output.write(
            Kind::Stderr,
            b"thread '<unnamed>' panicked at src/lib.rs:3:5:\npoison record\n",
        );
        output.write(
            Kind::Stderr,
            b"note: run with `RUST_BACKTRACE=1` environment variable\n",
        );
        assert_eq!(
            output.tail().as_deref(),
            Some("thread '<unnamed>' panicked at src/lib.rs:3:5: poison record")
        );
        output.clear_tail();
        assert_eq!(output.tail(), None);
    }

    #[test]
    fn the_tail_is_bounded() {
        let output = output(LogLimits::default());
        for _ in 0..100 {
            output.write(Kind::Stdout, &[b'x'; 1000]);
        }
        assert_eq!(output.lock().tail.len(), TAIL_BYTES);
        assert!(output.lock().stdout_line.kept.len() <= MAX_LINE_BYTES);
    }

    #[test]
    fn a_long_line_is_one_line_cut_with_the_count() {
        let output = output(LogLimits::default());
        output.write(Kind::Stdout, &vec![b'x'; 40 << 20]);
        output.write(Kind::Stdout, b"yy\nnext");
        let gate = output.gate.lock();
        let burst = f64::from(LogLimits::default().lines_per_sec * BURST_SECS);
        assert_eq!(gate.lines, burst - 1.0, "one line logged");
        drop(gate);
        let line = &output.lock().stdout_line;
        assert_eq!((line.kept.as_slice(), line.cut), (&b"next"[..], 0));
    }

    #[test]
    fn the_rate_limit_drops_and_counts_the_excess() {
        let limits = LogLimits {
            lines_per_sec: 2,
            bytes_per_sec: 1 << 20,
        };
        let flooded = output(limits);
        for _ in 0..100 {
            flooded.write(Kind::Stderr, b"hello\n");
        }
        // A burst of 2 lines/s x 10 s passes; refill during the loop is at most a line or two.
        let (lines, bytes) = flooded.gate.dropped();
        assert!((78..=80).contains(&lines), "dropped {lines}");
        assert_eq!(bytes, lines * 5);
        let bytes_bound = output(LogLimits {
            lines_per_sec: 1000,
            bytes_per_sec: 100,
        });
        bytes_bound.write(Kind::Stdout, &[b'z'; 5000]);
        bytes_bound.write(Kind::Stdout, b"\n");
        assert_eq!(bytes_bound.gate.dropped(), (1, MAX_LINE_BYTES as u64));
    }

    #[test]
    fn a_guest_line_cannot_start_another() {
        let forged = "done\n2026-12-07T00:00:00Z  INFO weir: checkpoint committed\r\u{1b}[2J\tend";
        let line = one_line(forged);
        assert!(!line.contains('\n') && !line.contains('\r') && !line.contains('\u{1b}'), "{line}");
        assert!(line.starts_with("done\\n2026") && line.ends_with("\tend"), "{line}");
        let long = one_line(&"\n".repeat(2 * MAX_LINE_BYTES));
        let (line, note) = long.split_once(" [... ").expect("a cut note");
        assert_eq!(line.len(), MAX_LINE_BYTES, "escapes count against the cut");
        assert_eq!(note, format!("{} more bytes cut]", MAX_LINE_BYTES + MAX_LINE_BYTES));
    }

    #[test]
    fn cut_respects_char_boundaries() {
        let long = "é".repeat(MAX_LINE_BYTES);
        let cut = cut(&long);
        assert!(cut.len() <= MAX_LINE_BYTES && cut.len() >= MAX_LINE_BYTES - 1);
        assert_eq!(super::cut("short"), "short");
    }
}
