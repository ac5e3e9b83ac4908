//! The job's metrics, served in Prometheus text format on `--metrics-addr` at `GET /metrics`
//! (by default 127.0.0.1:9464, or a free port when another job holds it).
//! Tasks resolve their handles once (`Metrics::operator`) and then only touch atomics, so
//! counting costs the hot path one relaxed increment per batch; the registry and the encoder
//! are `prometheus-client`'s, the HTTP responder a small bounded one on the tokio runtime.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter as PromCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as PromGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Scrapes served at once; more wait for a slot (Prometheus scrapes one at a time).
const MAX_CONNECTIONS: usize = 8;
/// A request head longer than this is refused: `GET /metrics` needs a few hundred bytes.
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Deadline for reading a request and writing its response.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperatorLabels {
    operator: String,
    subtask: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    topic: String,
    partition: i32,
}

/// A monotonically increasing count. Clones share the value.
#[derive(Clone, Debug, Default)]
pub struct Counter(PromCounter);

impl Counter {
    pub fn inc(&self) {
        self.0.inc();
    }
    pub fn inc_by(&self, n: u64) {
        self.0.inc_by(n);
    }
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// A value that goes up and down. Clones share the value.
#[derive(Clone, Debug, Default)]
pub struct Gauge(PromGauge);

impl Gauge {
    pub fn set(&self, v: i64) {
        self.0.set(v);
    }
    pub fn get(&self) -> i64 {
        self.0.get()
    }
}

/// One operator subtask's counters (sources and sinks use them too, named as they like).
#[derive(Clone, Debug)]
pub struct OperatorMetrics {
    pub records_in: Counter,
    pub records_out: Counter,
}

/// What the log rate limit of one operator subtask's plugin dropped.
#[derive(Clone, Debug, Default)]
pub struct PluginLogMetrics {
    pub dropped_lines: Counter,
    pub dropped_bytes: Counter,
}

/// The checkpoint coordinator's series.
#[derive(Clone, Debug)]
pub struct CheckpointMetrics {
    duration: Histogram,
    size_bytes: Gauge,
    last_committed: Gauge,
    state_changes: Gauge,
    state_change_bytes: Gauge,
    restore_entries: Gauge,
    restore_millis: Gauge,
}

impl CheckpointMetrics {
    /// Records checkpoint `n`, committed `duration` after its barrier was injected, with
    /// `size_bytes` of snapshots in the store.
    pub fn committed(&self, n: u64, duration: Duration, size_bytes: u64) {
        self.duration.observe(duration.as_secs_f64());
        self.size_bytes
            .set(i64::try_from(size_bytes).unwrap_or(i64::MAX));
        self.last_committed
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Records the keyed state changes of the checkpoint being committed.
    pub fn state_changes(&self, entries: u64, bytes: u64) {
        self.state_changes.set(i64::try_from(entries).unwrap_or(i64::MAX));
        self.state_change_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Records a restore of keyed state: `entries` restored in `duration`.
    pub fn restored(&self, entries: u64, duration: Duration) {
        self.restore_entries.set(i64::try_from(entries).unwrap_or(i64::MAX));
        self.restore_millis.set(i64::try_from(duration.as_millis()).unwrap_or(i64::MAX));
    }
}

struct Families {
    records_in: Family<OperatorLabels, PromCounter>,
    records_out: Family<OperatorLabels, PromCounter>,
    consumer_lag: Family<PartitionLabels, PromGauge>,
    plugin_log_dropped_lines: Family<OperatorLabels, PromCounter>,
    plugin_log_dropped_bytes: Family<OperatorLabels, PromCounter>,
}

/// The job's metrics registry. Cheap to clone; every clone updates the same series.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    families: Arc<Families>,
    checkpoint: CheckpointMetrics,
    restarts: Counter,
    dead_letter_records: Counter,
    group: GroupMetrics,
}

/// A scaled-out process's share of its job: what the group assigned it.
#[derive(Clone, Debug, Default)]
pub struct GroupMetrics {
    /// Input partitions this process owns now.
    pub owned_partitions: Gauge,
    /// Changes of this process's partitions.
    pub rebalances: Counter,
    /// How long the last rebalance took, from the change to running again.
    pub rebalance_millis: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("weir");
        let families = Families {
            records_in: Family::default(),
            records_out: Family::default(),
            consumer_lag: Family::default(),
            plugin_log_dropped_lines: Family::default(),
            plugin_log_dropped_bytes: Family::default(),
        };
        // Counters get their `_total` suffix from the encoder.
        registry.register(
            "records_in",
            "Records received by an operator subtask",
            families.records_in.clone(),
        );
        registry.register(
            "records_out",
            "Records emitted by an operator subtask",
            families.records_out.clone(),
        );
        // 5 ms .. ~80 s: a checkpoint spans barrier alignment, snapshots and the commit.
        let duration = Histogram::new(exponential_buckets(0.005, 2.0, 15));
        registry.register(
            "checkpoint_duration_seconds",
            "Time from injecting a checkpoint's barrier to committing its transaction",
            duration.clone(),
        );
        let checkpoint = CheckpointMetrics {
            duration,
            size_bytes: Gauge::default(),
            last_committed: Gauge::default(),
            state_changes: Gauge::default(),
            state_change_bytes: Gauge::default(),
            restore_entries: Gauge::default(),
            restore_millis: Gauge::default(),
        };
        for (name, help, gauge) in [
            ("checkpoint_state_changes", "Keyed state entries changed or removed by the last committed checkpoint", &checkpoint.state_changes),
            ("checkpoint_state_change_bytes", "Bytes of keys and values of those changes", &checkpoint.state_change_bytes),
            ("restore_entries", "Keyed state entries restored by the last recovery", &checkpoint.restore_entries),
            ("restore_duration_milliseconds", "How long the last recovery took to restore keyed state", &checkpoint.restore_millis),
        ] {
            registry.register(name, help, gauge.0.clone());
        }
        registry.register(
            "checkpoint_size_bytes",
            "Snapshot bytes of the last committed checkpoint",
            checkpoint.size_bytes.0.clone(),
        );
        registry.register(
            "last_committed_checkpoint",
            "Id of the last checkpoint whose Kafka transaction committed",
            checkpoint.last_committed.0.clone(),
        );
        let restarts = Counter::default();
        registry.register(
            "restarts",
            "In-process restarts of the job from its last committed checkpoint",
            restarts.0.clone(),
        );
        registry.register(
            "consumer_lag",
            "Records between the source's position and the partition's high watermark",
            families.consumer_lag.clone(),
        );
        registry.register(
            "plugin_log_dropped_lines",
            "Lines of plugin log and stdio output dropped by the per-instance rate limit",
            families.plugin_log_dropped_lines.clone(),
        );
        registry.register(
            "plugin_log_dropped_bytes",
            "Bytes of plugin log and stdio output dropped by the per-instance rate limit",
            families.plugin_log_dropped_bytes.clone(),
        );
        let dead_letter_records = Counter::default();
        registry.register(
            "dead_letter_records",
            "Poison records written to the dead-letter topic",
            dead_letter_records.0.clone(),
        );
        let group = GroupMetrics::default();
        registry.register("owned_partitions", "Input partitions this process owns: all of them for a single process, the group's share with scale_out", group.owned_partitions.0.clone());
        registry.register("rebalances", "Changes of the input partitions this process owns (scale_out)", group.rebalances.0.clone());
        registry.register(
            "rebalance_duration_milliseconds",
            "How long the last change of this process's partitions took, until it ran again (scale_out)",
            group.rebalance_millis.0.clone(),
        );
        Metrics {
            registry: Arc::new(registry),
            families: Arc::new(families),
            checkpoint,
            restarts,
            dead_letter_records,
            group,
        }
    }

    /// The counters of one operator subtask. Call once per task, then count through the handles.
    pub fn operator(&self, operator: &str, subtask: u32) -> OperatorMetrics {
        let labels = OperatorLabels {
            operator: operator.to_owned(),
            subtask,
        };
        OperatorMetrics {
            records_in: Counter(self.families.records_in.get_or_create_owned(&labels)),
            records_out: Counter(self.families.records_out.get_or_create_owned(&labels)),
        }
    }

    /// The log-drop counters of one operator subtask's plugin.
    pub fn plugin_log(&self, operator: &str, subtask: u32) -> PluginLogMetrics {
        let labels = OperatorLabels {
            operator: operator.to_owned(),
            subtask,
        };
        let families = &self.families;
        PluginLogMetrics {
            dropped_lines: Counter(families.plugin_log_dropped_lines.get_or_create_owned(&labels)),
            dropped_bytes: Counter(families.plugin_log_dropped_bytes.get_or_create_owned(&labels)),
        }
    }

    /// The lag gauge of one input partition.
    pub fn consumer_lag(&self, topic: &str, partition: i32) -> Gauge {
        let labels = PartitionLabels {
            topic: topic.to_owned(),
            partition,
        };
        Gauge(self.families.consumer_lag.get_or_create_owned(&labels))
    }

    pub fn checkpoint(&self) -> CheckpointMetrics {
        self.checkpoint.clone()
    }

    pub fn restarts(&self) -> Counter {
        self.restarts.clone()
    }

    pub fn group(&self) -> GroupMetrics {
        self.group.clone()
    }

    pub fn dead_letter_records(&self) -> Counter {
        self.dead_letter_records.clone()
    }

    /// Every series in Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// A bound `/metrics` endpoint, not yet serving: lets the caller learn the port of `:0`.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
    metrics: Metrics,
}

impl MetricsServer {
    /// Binds `addr`; failure names the address and what to do.
    pub async fn bind(addr: SocketAddr, metrics: Metrics) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot serve metrics on {addr}: {e}; pass another --metrics-addr or stop \
                     the process that holds it"
                ),
            )
        })?;
        Ok(MetricsServer { listener, metrics })
    }

    /// Binds `preferred`, a default the user did not choose; when it cannot be had (another
    /// job on this host holds it), a free port on the same interface, with a warning
    /// naming both and how to choose. `None` only when no port at all can be bound: a
    /// default address never stops a job from starting.
    pub async fn bind_default(preferred: SocketAddr, metrics: Metrics) -> Option<Self> {
        let error = match Self::bind(preferred, metrics.clone()).await {
            Ok(server) => return Some(server),
            Err(error) => error,
        };
        let fallback = SocketAddr::new(preferred.ip(), 0);
        match Self::bind(fallback, metrics).await {
            Ok(server) => {
                let at = server.local_addr().map_or_else(|_| fallback.to_string(), |a| a.to_string());
                tracing::warn!(
                    "metrics: the default address {preferred} is unavailable ({}); serving on {at} \
                     instead; pass --metrics-addr to choose one",
                    error.kind()
                );
                Some(server)
            }
            Err(fallback_error) => {
                tracing::warn!("metrics not served: {error}; {fallback_error}");
                None
            }
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Answers scrapes until the task is dropped; returns only if accepting fails for good.
    pub async fn run(self) -> io::Result<()> {
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        loop {
            let permit = Arc::clone(&slots)
                .acquire_owned()
                .await
                .expect("never closed");
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                // Per-connection failures (a peer that reset, too many open files for a moment)
                // must not end the endpoint.
                Err(e) if is_transient(&e) => {
                    tracing::debug!(error = %e, "accepting a metrics connection failed");
                    continue;
                }
                Err(e) => return Err(e),
            };
            let metrics = self.metrics.clone();
            tokio::spawn(async move {
                let _permit = permit;
                match tokio::time::timeout(IO_TIMEOUT, respond(stream, &metrics)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics request failed"),
                    Err(_) => tracing::debug!(%peer, "metrics request timed out"),
                }
            });
        }
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    ) || e
        .raw_os_error()
        .is_some_and(|code| code == 23 || code == 24) // ENFILE, EMFILE
}

/// Reads one request head and answers it; every response closes the connection.
async fn respond(mut stream: TcpStream, metrics: &Metrics) -> io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        if head.len() >= MAX_REQUEST_BYTES {
            return reply(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            )
            .await;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = metrics.render();
            reply(&mut stream, "200 OK", prometheus_text::CONTENT_TYPE, &body).await
        }
        ("GET", _) => {
            reply(
                &mut stream,
                "404 Not Found",
                "text/plain",
                "weir serves only /metrics\n",
            )
            .await
        }
        _ => {
            reply(
                &mut stream,
                "405 Method Not Allowed",
                "text/plain",
                "use GET /metrics\n",
            )
            .await
        }
    }
}

async fn reply(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fetches `path` over a real TCP connection, as Prometheus would.
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr)
            .await
            .expect("connect to the metrics endpoint");
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: */*\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send the request");
        let mut response = String::new();
        tokio::time::timeout(
            Duration::from_secs(10),
            stream.read_to_string(&mut response),
        )
        .await
        .expect("response within 10 s")
        .expect("read the response");
        response
    }

    #[tokio::test]
    async fn scrape_over_tcp_shows_every_series() {
        let metrics = Metrics::new();
        let count = metrics.operator("count", 1);
        // Handles are used from plain threads on the hot path.
        let worker = {
            let count = count.clone();
            std::thread::spawn(move || {
                count.records_in.inc_by(41);
                count.records_in.inc();
                count.records_out.inc_by(7);
            })
        };
        worker.join().expect("worker thread");
        // A second resolution of the same labels shares the series.
        metrics.operator("count", 1).records_in.inc_by(8);
        metrics
            .checkpoint()
            .committed(12, Duration::from_millis(30), 4096);
        metrics.restarts().inc();
        metrics.consumer_lag("clicks", 3).set(250);
        metrics.dead_letter_records().inc_by(2);

        let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), metrics.clone())
            .await
            .expect("bind an ephemeral port");
        let addr = server.local_addr().unwrap();
        let serving = tokio::spawn(server.run());

        let response = get(addr, "/metrics").await;
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert!(head.contains("text/plain; version=0.0.4"), "{head}");
        for line in [
            r#"weir_records_in_total{operator="count",subtask="1"} 50"#,
            r#"weir_records_out_total{operator="count",subtask="1"} 7"#,
            "weir_checkpoint_duration_seconds_count 1",
            "weir_checkpoint_size_bytes 4096",
            "weir_last_committed_checkpoint 12",
            "weir_restarts_total 1",
            r#"weir_consumer_lag{topic="clicks",partition="3"} 250"#,
            "weir_dead_letter_records_total 2",
        ] {
            assert!(
                body.lines().any(|l| l == line),
                "missing `{line}` in:\n{body}"
            );
        }

        let missing = get(addr, "/").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        serving.abort();
    }

    #[tokio::test]
    async fn a_busy_default_address_falls_back_to_a_free_port() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let busy = taken.local_addr().unwrap();
        let server = MetricsServer::bind_default(busy, Metrics::new())
            .await
            .expect("a free port instead");
        let addr = server.local_addr().unwrap();
        assert_eq!(addr.ip(), busy.ip());
        assert_ne!(addr.port(), busy.port());
        let serving = tokio::spawn(server.run());
        assert!(get(addr, "/metrics").await.starts_with("HTTP/1.1 200 OK"));
        serving.abort();
    }

    #[tokio::test]
    async fn bind_failure_names_the_address() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let Err(error) = MetricsServer::bind(addr, Metrics::new()).await else {
            panic!("the port is taken");
        };
        let message = error.to_string();
        assert!(message.contains(&addr.to_string()), "{message}");
        assert!(message.contains("--metrics-addr"), "{message}");
    }
}
