//! The HTTP side of `--metrics-addr` (by default 127.0.0.1:9464, or a free port when
//! another job holds it), on axum: `GET /` the status page, `GET /api/v1/job` its JSON,
//! `GET /metrics` Prometheus text. Read-only, GET only; bound to loopback or every
//! interface, only for requests that name this machine (DNS rebinding); a bounded number
//! of connections, each closed when idle or open too long, and of requests at once, each
//! answered within a deadline.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::prometheus_text;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;

use super::Status;

/// Requests answered at once; more wait for a slot (a page refreshes every 2 s).
const MAX_REQUESTS: usize = 16;
/// Connections open at once; more wait to be accepted. No number of clients can take
/// the file descriptors the job needs for its store and Kafka.
const MAX_CONNECTIONS: usize = 64;
/// A connection that reads or writes nothing for this long while a request is answered
/// is closed (a client that reads no answer).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// However busy, a connection takes no further request this long after it was accepted
/// (it closes once its answer is out): a client that holds one open by reading pipelined
/// answers slowly gives its slot back (a page opens a new one when it next refreshes).
const MAX_LIFETIME: Duration = Duration::from_secs(60);
/// A request's head must arrive whole within this, however slowly it trickles; hyper
/// starts it anew for each request, so an idle keep-alive connection closes after it too.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline for answering one request, waiting for a slot included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

const PAGE: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/app.js");
const STYLE: &str = include_str!("page/style.css");
/// Where the page's first state goes, so that it renders before its first refresh.
const INITIAL_STATE: &str = "<!-- initial state -->";
/// Scripts and styles from this origin only; the page's state is a JSON data block.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
     img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// A bound endpoint, not yet serving: lets the caller learn the port of `:0`.
pub struct Server {
    listener: TcpListener,
    status: Arc<Status>,
}

#[derive(Clone)]
struct Shared {
    status: Arc<Status>,
    /// This machine's host name, which a request may name besides its IP or `localhost`.
    host_name: Option<Arc<str>>,
    slots: Arc<Semaphore>,
    /// Bound to a loopback or unspecified address, where a page of another site can
    /// reach it under a name of its own: a request must name this machine.
    loopback: bool,
}

impl Server {
    /// Binds `addr`; failure names the address and what to do.
    pub async fn bind(addr: SocketAddr, status: Arc<Status>) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot serve metrics and the status page on {addr}: {e}; pass another --metrics-addr or stop the process that holds it"),
            )
        })?;
        Ok(Server { listener, status })
    }

    /// Binds `preferred`, a default the user did not choose; when it cannot be had (another
    /// job on this host holds it), a free port on the same interface, with a warning
    /// naming both and how to choose. `None` only when no port at all can be bound: a
    /// default address never stops a job from starting.
    pub async fn bind_default(preferred: SocketAddr, status: Arc<Status>) -> Option<Self> {
        let error = match Self::bind(preferred, Arc::clone(&status)).await {
            Ok(server) => return Some(server),
            Err(error) => error,
        };
        let fallback = SocketAddr::new(preferred.ip(), 0);
        match Self::bind(fallback, status).await {
            Ok(server) => {
                let at = server.local_addr().map_or_else(|_| fallback.to_string(), |a| a.to_string());
                tracing::warn!(
                    "the default address {preferred} is unavailable ({}); serving metrics and the status page on {at} \
                     instead; pass --metrics-addr to choose one",
                    error.kind()
                );
                Some(server)
            }
            Err(fallback_error) => {
                tracing::warn!("metrics and the status page not served: {error}; {fallback_error}");
                None
            }
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Answers until the task is dropped; returns only if the bound address is gone.
    pub async fn run(self) -> io::Result<()> {
        self.run_within(MAX_CONNECTIONS, IDLE_TIMEOUT, MAX_LIFETIME).await
    }

    async fn run_within(self, connections: usize, idle: Duration, lifetime: Duration) -> io::Result<()> {
        // An unspecified address (0.0.0.0, [::]) takes loopback connections too.
        let ip = self.listener.local_addr()?.ip();
        let loopback = ip.is_loopback() || ip.is_unspecified();
        let slots = Arc::new(Semaphore::new(MAX_REQUESTS));
        let shared = Shared { status: self.status, host_name: host_name(), slots, loopback };
        let service = TowerToHyperService::new(router(shared));
        let listener = Bounded { listener: self.listener, slots: Arc::new(Semaphore::new(connections)), idle, lifetime };
        loop {
            let (connection, peer) = listener.accept().await;
            let service = service.clone();
            tokio::spawn(async move {
                let served = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .serve_connection(TokioIo::new(connection), service)
                    .await;
                if let Err(error) = served {
                    tracing::debug!(%peer, "a status connection ended: {error}");
                }
            });
        }
    }
}

fn router(shared: Shared) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/api/v1/job", get(job))
        .route("/metrics", get(metrics))
        .fallback(|| async { (StatusCode::NOT_FOUND, "weir serves /, /api/v1/job and /metrics\n") })
        .layer(axum::middleware::from_fn_with_state(shared.clone(), bounded))
        .with_state(shared)
}

/// Each request waits for one of [`MAX_REQUESTS`] slots and is answered within
/// [`REQUEST_TIMEOUT`]; every answer says it is not to be framed or sniffed.
async fn bounded(State(shared): State<Shared>, request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut response = if shared.loopback && !names_this_host(&request, shared.host_name.as_deref()) {
        // A page of another site whose name was pointed at this machine (DNS rebinding)
        // must not read the job's status, whose messages may quote records.
        let refusal = "weir answers requests for its IP address, localhost or this machine's host name only\n";
        (StatusCode::MISDIRECTED_REQUEST, refusal).into_response()
    } else {
        let answer = async {
            let _slot = shared.slots.acquire().await.expect("never closed");
            next.run(request).await
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
            Ok(response) => response,
            Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "busy: try again\n").into_response(),
        }
    };
    let headers = response.headers_mut();
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    response
}

/// Whether the request's Host is an IP address, `localhost` or `host_name` (with any
/// port, and a name with a trailing dot), or absent.
fn names_this_host(request: &axum::extract::Request, host_name: Option<&str>) -> bool {
    let Some(host) = request.headers().get(header::HOST) else { return true };
    let Ok(host) = host.to_str() else { return false };
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok()
        || host_name.is_some_and(|ours| name.eq_ignore_ascii_case(ours))
}

/// This machine's host name (`gethostname`), if it has one.
fn host_name() -> Option<Arc<str>> {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is writable for its length; gethostname writes at most that.
    let failed = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } != 0;
    let end = buffer.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&buffer[..end]).ok()?;
    (!failed && !name.is_empty()).then(|| name.into())
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

async fn page(State(shared): State<Shared>) -> Response {
    let state = data_block(&shared.status.job());
    let body = PAGE.replacen(INITIAL_STATE, &state, 1);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], body).into_response()
}

/// The job's JSON as a data block in the page: `<` escaped, so that no string in it
/// (a failure's message quoting a record) can close the element.
fn data_block(job: &super::api::JobStatus) -> String {
    let json = serde_json::to_string(job).expect("the status serializes");
    format!(r#"<script id="initial" type="application/json">{}</script>"#, json.replace('<', "\\u003c"))
}

async fn job(State(shared): State<Shared>) -> Response {
    let json = serde_json::to_string(&shared.status.job()).expect("the status serializes");
    ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], json).into_response()
}

async fn metrics(State(shared): State<Shared>) -> Response {
    let text = shared.status.metrics().render();
    ([(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)], text).into_response()
}

/// The listener, at most [`MAX_CONNECTIONS`] connections open at once.
struct Bounded {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    idle: Duration,
    lifetime: Duration,
}

impl Bounded {
    /// The next connection, once one of the slots is free. A failed accept (a peer that
    /// reset, a network error of a pending connection, too many open files for a moment)
    /// is retried after a pause: the page and metrics never stop for one.
    async fn accept(&self) -> (Connection, SocketAddr) {
        let slot = Arc::clone(&self.slots).acquire_owned().await.expect("never closed");
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    let idle = Box::pin(tokio::time::sleep(self.idle));
                    let lifetime = Box::pin(tokio::time::sleep(self.lifetime));
                    return (Connection { stream, idle, limit: self.idle, lifetime, _slot: slot }, peer);
                }
                Err(error) => {
                    let pause = if is_of_a_peer(&error) { Duration::from_millis(50) } else { Duration::from_secs(1) };
                    tracing::debug!("accepting a status connection failed, retrying in {pause:?}: {error}");
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

/// An accept error that belongs to the one connection, not to the listener.
fn is_of_a_peer(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    )
}

/// An accepted connection: holds its slot until it closes, fails once it has read and
/// written nothing for its idle limit ([`IDLE_TIMEOUT`]), and reads as ended once open
/// for its lifetime ([`MAX_LIFETIME`]), so that hyper closes it after the answer it is
/// writing.
struct Connection {
    stream: TcpStream,
    idle: Pin<Box<Sleep>>,
    limit: Duration,
    lifetime: Pin<Box<Sleep>>,
    _slot: OwnedSemaphorePermit,
}

impl Connection {
    /// `polled`'s result, pushing the idle deadline back when it is ready; a timeout
    /// error once the deadline passed while it was pending.
    fn within<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                let limit = self.limit;
                self.idle.as_mut().reset(Instant::now() + limit);
                Poll::Ready(result)
            }
            Poll::Pending if self.idle.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the connection was idle too long")))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// A write's result as [`Connection::within`] says, and a timeout error for a write
    /// that waits for the client past the lifetime: a client that reads its answers
    /// slowly, however steadily, holds its slot no longer.
    fn writing<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if polled.is_pending() && self.lifetime.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the connection was open too long")));
        }
        self.within(cx, polled)
    }
}

impl AsyncRead for Connection {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.lifetime.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ok(())); // read as the end: no further request
        }
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        this.within(cx, polled)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.writing(cx, polled)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.writing(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_flush(cx);
        this.writing(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::metrics::Metrics;
    use crate::metrics::history::CheckpointEntry;

    const JOB: &str = r#"name = "clicks-per-user"
parallelism = 2
checkpoint_interval_ms = 1000
state_dir = "state"

[source]
brokers = "127.0.0.1:9092"
topic = "clicks"

[[operators]]
name = "count"
plugin = "count.wasm"
key_by = true

[sink]
brokers = "127.0.0.1:9092"
topic = "counts"
"#;

    fn status(metrics: Metrics) -> Arc<Status> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("count.wasm"), b"\0asm").expect("a plugin file");
        let job = crate::job::parse(JOB, dir.path()).expect("the job parses");
        let plugins = vec![("count.wasm".to_owned(), "weir:operator@0.3.0".to_owned())];
        Arc::new(Status::described(&job, plugins, metrics))
    }

    /// `method path` over a real TCP connection; the whole response.
    async fn request(addr: SocketAddr, method: &str, path: &str) -> String {
        request_for(addr, &addr.to_string(), method, path).await
    }

    /// `method path` naming `host` in its Host header.
    async fn request_for(addr: SocketAddr, host: &str, method: &str, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.expect("connect to the status address");
        let request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("send the request");
        let mut response = String::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut response))
            .await
            .expect("response within 10 s")
            .expect("read the response");
        response
    }

    async fn serving(metrics: Metrics) -> SocketAddr {
        let server = Server::bind("127.0.0.1:0".parse().unwrap(), status(metrics)).await.expect("bind an ephemeral port");
        let addr = server.local_addr().unwrap();
        tokio::spawn(server.run());
        addr
    }

    #[tokio::test]
    async fn metrics_show_every_series() {
        let metrics = Metrics::new();
        let count = metrics.operator("count", 1);
        // Handles are used from plain threads on the hot path.
        let worker = {
            let count = count.clone();
            std::thread::spawn(move || {
                count.records_in.inc_by(41);
                count.records_in.inc();
                count.records_out.inc_by(7);
                count.watermark.set(1_700_000_000_000);
            })
        };
        worker.join().expect("worker thread");
        // A second resolution of the same labels shares the series.
        metrics.operator("count", 1).records_in.inc_by(8);
        metrics.checkpoint().committed(12, Duration::from_millis(30), 4096);
        metrics.restarts().inc();
        metrics.partition("clicks", 3).lag.set(250);
        metrics.partition("clicks", 3).watermark.set(5);
        metrics.dead_letter_records().inc_by(2);
        let addr = serving(metrics).await;

        let response = request(addr, "GET", "/metrics").await;
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert!(head.contains("text/plain; version=0.0.4"), "{head}");
        for line in [
            r#"weir_records_in_total{operator="count",subtask="1"} 50"#,
            r#"weir_records_out_total{operator="count",subtask="1"} 7"#,
            r#"weir_watermark_milliseconds{operator="count",subtask="1"} 1700000000000"#,
            "weir_checkpoint_duration_seconds_count 1",
            "weir_checkpoint_size_bytes 4096",
            "weir_last_committed_checkpoint 12",
            "weir_restarts_total 1",
            r#"weir_consumer_lag{topic="clicks",partition="3"} 250"#,
            r#"weir_partition_watermark_milliseconds{topic="clicks",partition="3"} 5"#,
            "weir_dead_letter_records_total 2",
        ] {
            assert!(body.lines().any(|l| l == line), "missing `{line}` in:\n{body}");
        }
    }

    #[tokio::test]
    async fn the_api_and_the_page_say_what_the_metrics_and_history_say() {
        let metrics = Metrics::new();
        metrics.operator("count", 0).records_in.inc_by(3);
        metrics.partition("clicks", 0).lag.set(9);
        metrics.checkpoint().committed(4, Duration::from_millis(20), 0);
        metrics.history().committed(CheckpointEntry::began(4, Duration::from_millis(20)));
        metrics.history().restarted(&"operator `count` trapped: </script><script>alert(1)</script>", Duration::ZERO);
        let addr = serving(metrics).await;

        let response = request(addr, "GET", "/api/v1/job").await;
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
        assert!(head.starts_with("HTTP/1.1 200 OK") && head.contains("application/json"), "{head}");
        let job: crate::status::api::JobStatus = serde_json::from_str(body).expect("the API's JSON");
        assert_eq!((job.api_version, job.name.as_str(), job.checkpoints.last_committed), (1, "clicks-per-user", Some(4)));
        assert_eq!(job.graph.operators[0].subtasks[0].records_in, 3);
        assert_eq!(job.graph.sources[0].partitions[0].lag, 9);
        let edges: Vec<(&str, &str)> = job.graph.edges.iter().map(|e| (e.from.as_str(), e.to.as_str())).collect();
        assert_eq!(edges, [("source", "count"), ("count", "sink")]);

        let page = request(addr, "GET", "/").await;
        assert!(page.starts_with("HTTP/1.1 200 OK") && page.contains("text/html"), "{page}");
        assert!(page.contains(r#"<script id="initial" type="application/json">"#), "{page}");
        // A message quoting markup cannot end the data block.
        assert!(!page.contains("</script><script>alert"), "{page}");
        assert!(page.contains("content-security-policy"), "{page}");
        for (path, kind) in [("/app.js", "text/javascript"), ("/style.css", "text/css")] {
            let asset = request(addr, "GET", path).await;
            assert!(asset.starts_with("HTTP/1.1 200 OK") && asset.contains(kind), "{asset}");
        }
        assert!(request(addr, "GET", "/nothing").await.starts_with("HTTP/1.1 404"));
        assert!(request(addr, "POST", "/api/v1/job").await.starts_with("HTTP/1.1 405"));
    }

    #[tokio::test]
    async fn connections_are_bounded_and_silent_ones_closed() {
        let server = Server::bind("127.0.0.1:0".parse().unwrap(), status(Metrics::new())).await.unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(server.run_within(2, Duration::from_secs(2), MAX_LIFETIME));
        // Two clients take every slot and never send a request: a third waits.
        let mut silent = [TcpStream::connect(addr).await.unwrap(), TcpStream::connect(addr).await.unwrap()];
        let waiting = tokio::time::timeout(Duration::from_millis(500), request(addr, "GET", "/metrics")).await;
        assert!(waiting.is_err(), "a third connection was served while two held every slot: {waiting:?}");
        // Once they are closed for idling, it is answered.
        let answered = tokio::time::timeout(Duration::from_secs(10), request(addr, "GET", "/metrics")).await;
        assert!(answered.expect("answered once the idle ones were closed").starts_with("HTTP/1.1 200 OK"));
        for stream in &mut silent {
            let mut rest = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
            assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "an idle connection stayed open: {read:?}");
        }
    }

    /// A client that keeps its connection busy (a request every 100 ms, answers read as
    /// they come) is still closed at the connection's lifetime.
    #[tokio::test]
    async fn a_busy_connection_is_closed_at_its_lifetime() {
        let server = Server::bind("127.0.0.1:0".parse().unwrap(), status(Metrics::new())).await.unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(server.run_within(2, Duration::from_secs(5), Duration::from_secs(1)));
        let (mut read, mut write) = TcpStream::connect(addr).await.unwrap().into_split();
        let started = std::time::Instant::now();
        tokio::spawn(async move {
            let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n");
            while write.write_all(request.as_bytes()).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let mut answers = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(4), read.read_to_end(&mut answers)).await;
        assert!(read.is_ok(), "a busy connection stayed open past its lifetime");
        assert!(started.elapsed() >= Duration::from_millis(900), "closed after {:?}", started.elapsed());
        assert!(String::from_utf8_lossy(&answers).matches("HTTP/1.1 200 OK").count() >= 5, "answered until then");
    }

    #[tokio::test]
    async fn a_loopback_server_answers_only_requests_for_its_ip_localhost_or_host_name() {
        let addr = serving(Metrics::new()).await;
        let ours = host_name().map(|name| format!("{name}:9464"));
        let names = ["localhost", "localhost.:9464", "127.0.0.1:9464", "[::1]:9464"];
        for host in names.into_iter().chain(ours.as_deref()) {
            let answer = request_for(addr, host, "GET", "/api/v1/job").await;
            assert!(answer.starts_with("HTTP/1.1 200 OK"), "Host {host}: {answer}");
        }
        for host in ["attacker.example", "attacker.example:9464", "127.0.0.1.attacker.example"] {
            let answer = request_for(addr, host, "GET", "/api/v1/job").await;
            assert!(answer.starts_with("HTTP/1.1 421"), "Host {host}: {answer}");
        }
    }

    #[tokio::test]
    async fn a_busy_default_address_falls_back_to_a_free_port() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let busy = taken.local_addr().unwrap();
        let server = Server::bind_default(busy, status(Metrics::new())).await.expect("a free port instead");
        let addr = server.local_addr().unwrap();
        assert_eq!(addr.ip(), busy.ip());
        assert_ne!(addr.port(), busy.port());
        tokio::spawn(server.run());
        assert!(request(addr, "GET", "/metrics").await.starts_with("HTTP/1.1 200 OK"));
    }

    #[tokio::test]
    async fn bind_failure_names_the_address() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let Err(error) = Server::bind(addr, status(Metrics::new())).await else {
            panic!("the port is taken");
        };
        let message = error.to_string();
        assert!(message.contains(&addr.to_string()), "{message}");
        assert!(message.contains("--metrics-addr"), "{message}");
    }
}
