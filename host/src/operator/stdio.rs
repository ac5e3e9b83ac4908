//! Where a guest's stdout and stderr go: each line to `tracing` with the
//! operator's label, and the latest bytes into a short tail that explains a trap
//! (a Rust panic message lands there). Writes always succeed and never block.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Longest log message or output line forwarded; the rest is cut.
const MAX_LINE_BYTES: usize = 4096;

/// How much of a guest's latest output is kept to explain a trap.
const TAIL_BYTES: usize = 2048;

/// Both streams of one instance; clones share the buffers.
#[derive(Clone)]
pub(super) struct GuestOutput {
    label: Arc<str>,
    shared: Arc<Mutex<Buffers>>,
}

#[derive(Default)]
struct Buffers {
    stdout_line: Vec<u8>,
    stderr_line: Vec<u8>,
    tail: VecDeque<u8>,
}

#[derive(Clone, Copy)]
enum Kind {
    Stdout,
    Stderr,
}

impl GuestOutput {
    pub(super) fn new(label: Arc<str>) -> Self {
        Self {
            label,
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
        (!lines.is_empty()).then(|| lines.join(" "))
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
        tail.extend(bytes);
        let excess = tail.len().saturating_sub(TAIL_BYTES);
        tail.drain(..excess);
        let line = match kind {
            Kind::Stdout => stdout_line,
            Kind::Stderr => stderr_line,
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

    fn emit(&self, kind: Kind, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let operator = &*self.label;
        match kind {
            Kind::Stdout => {
                tracing::info!(target: "weir::plugin", operator, stream = "stdout", "{text}")
            }
            Kind::Stderr => {
                tracing::warn!(target: "weir::plugin", operator, stream = "stderr", "{text}")
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_latest_lines_without_the_backtrace_hint() {
        let output = GuestOutput::new("t".into());
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
        let output = GuestOutput::new("t".into());
        for _ in 0..100 {
            output.write(Kind::Stdout, &[b'x'; 1000]);
        }
        assert_eq!(output.lock().tail.len(), TAIL_BYTES);
        assert!(output.lock().stdout_line.len() <= MAX_LINE_BYTES);
    }

    #[test]
    fn cut_respects_char_boundaries() {
        let long = "é".repeat(MAX_LINE_BYTES);
        let cut = cut(&long);
        assert!(cut.len() <= MAX_LINE_BYTES && cut.len() >= MAX_LINE_BYTES - 1);
        assert_eq!(super::cut("short"), "short");
    }
}
