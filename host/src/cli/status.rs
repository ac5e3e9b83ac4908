//! `weir status [ADDR]`: what a running job's status page shows, in the terminal, from
//! its `/api/v1/job` (for a server without a browser). One GET with a deadline; an
//! address where no job answers is a clear error.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};

use super::printable;
use clap::Args;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use weir::status::api::{JobStatus, OperatorNode, SourceNode};

/// How long the job may take to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// An answer longer than this is not a job's status.
const MAX_ANSWER_BYTES: usize = 16 << 20;

#[derive(Args)]
pub(super) struct StatusArgs {
    /// Where the job serves its status: its `--metrics-addr`, as its log line
    /// `status page at http://ADDR/` says.
    #[arg(default_value_t = super::run::DEFAULT_METRICS_ADDR)]
    addr: SocketAddr,
}

pub(super) fn run(args: StatusArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start a runtime")?;
    let body = runtime
        .block_on(async { tokio::time::timeout(TIMEOUT, fetch(args.addr)).await })
        .map_err(|_| anyhow::anyhow!("the job at {} did not answer within {} s", args.addr, TIMEOUT.as_secs()))??;
    let job: JobStatus = serde_json::from_slice(&body)
        .with_context(|| format!("{} answered /api/v1/job with something other than a weir job's status", args.addr))?;
    print!("{}", printable(&render(&job)));
    Ok(())
}

async fn fetch(addr: SocketAddr) -> anyhow::Result<Bytes> {
    let stream = tokio::net::TcpStream::connect(addr).await.with_context(|| {
        format!(
            "no job answers at {addr}: is it running? Pass the address its log names in `status page at http://ADDR/` \
             (its --metrics-addr)"
        )
    })?;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.with_context(|| format!("talking HTTP to {addr}"))?;
    tokio::spawn(connection);
    let request = hyper::Request::get("/api/v1/job").header(hyper::header::HOST, addr.to_string()).body(Empty::<Bytes>::new())?;
    let response = sender.send_request(request).await.with_context(|| format!("asking {addr} for /api/v1/job"))?;
    match response.status() {
        status if status.is_success() => {}
        hyper::StatusCode::SERVICE_UNAVAILABLE => bail!("the job at {addr} is too busy to answer now: try again"),
        hyper::StatusCode::NOT_FOUND => bail!("{addr} has no /api/v1/job: it is not a weir job, or one older than this weir"),
        status => bail!("{addr} answered /api/v1/job with {status}"),
    }
    let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES).collect().await;
    Ok(body.map_err(|e| anyhow::anyhow!("reading the answer of {addr}: {e}"))?.to_bytes())
}

/// The status as lines of text.
fn render(job: &JobStatus) -> String {
    let mut out = String::new();
    let up = Duration::from_millis(job.now_ms.saturating_sub(job.started_at_ms));
    let _ = writeln!(
        out,
        "job {}: {}, {}, checkpoints every {} ms, up {}",
        job.name,
        serde_json::to_value(job.phase).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
        job.delivery,
        job.checkpoint_interval_ms,
        human_duration(up)
    );
    render_checkpoints(job, &mut out);
    if let Some(progress) = &job.progress {
        let of = progress.total.map_or(String::new(), |total| format!(" of {total}"));
        let eta = progress.eta_ms.map_or(String::new(), |ms| format!(", about {} left", human_duration(Duration::from_millis(ms))));
        let _ = writeln!(out, "{}: {}{of} {}, {} entries, {} bytes{eta}", progress.what, progress.done, progress.unit, progress.entries, progress.bytes);
    }
    let _ = writeln!(out, "sources");
    job.graph.sources.iter().for_each(|source| render_source(source, job.now_ms, &mut out));
    let _ = writeln!(out, "operators");
    job.graph.operators.iter().for_each(|operator| render_operator(operator, job.now_ms, &mut out));
    let _ = writeln!(out, "sinks");
    for sink in &job.graph.sinks {
        let _ = writeln!(out, "  {} -> topic {} (from {})", sink.name, sink.topic, sink.from.join(", "));
    }
    let _ = writeln!(out, "restarts: {}; dead letters: {}", job.restarts.count, job.dead_letters);
    for restart in job.restarts.recent.iter().rev().take(5) {
        let _ = writeln!(out, "  {} ago: {}", ago(job.now_ms, restart.at_ms), restart.cause);
    }
    if let Some(group) = &job.group {
        let _ = writeln!(
            out,
            "group member {}: partitions {:?}, {} rebalances",
            group.member_id.as_deref().unwrap_or("(none yet)"),
            group.owned_partitions,
            group.rebalances
        );
    }
    out
}

fn render_checkpoints(job: &JobStatus, out: &mut String) {
    let recent = &job.checkpoints.recent;
    let Some(last) = recent.iter().rev().find(|c| c.committed) else {
        let _ = writeln!(out, "no checkpoint committed yet");
        return;
    };
    let mut durations: Vec<u64> = recent.iter().filter(|c| c.committed).map(|c| c.duration_ms).collect();
    durations.sort_unstable();
    let failed = recent.iter().filter(|c| !c.committed).count();
    let _ = writeln!(
        out,
        "last committed checkpoint {} ({} ms, {} ago); last {}: p50 {} ms, max {} ms, {failed} failed",
        last.id,
        last.duration_ms,
        ago(job.now_ms, last.started_at_ms.saturating_add(last.duration_ms)),
        recent.len(),
        durations[durations.len() / 2],
        durations[durations.len() - 1]
    );
    if let Some(failure) = recent.iter().rev().find(|c| !c.committed) {
        let _ = writeln!(out, "  checkpoint {} failed: {}", failure.id, failure.error.as_deref().unwrap_or("?"));
    }
}

fn render_source(source: &SourceNode, now_ms: u64, out: &mut String) {
    let lag = source.partitions.iter().fold(0i64, |sum, p| sum.saturating_add(p.lag));
    let kind = if source.table { "table" } else { "stream" };
    let _ = writeln!(out, "  {} ({kind}, topic {}): {} partitions, lag {lag}", source.name, source.topic, source.partitions.len());
    for partition in &source.partitions {
        let _ = writeln!(out, "    partition {}: lag {}, watermark {}", partition.partition, partition.lag, watermark(partition.watermark_ms, now_ms));
    }
}

fn render_operator(operator: &OperatorNode, now_ms: u64, out: &mut String) {
    let keyed = if operator.key_by { ", by key" } else { "" };
    let _ = writeln!(
        out,
        "  {} ({}, {}, parallelism {}{keyed}) <- {}",
        operator.name,
        operator.plugin,
        operator.world,
        operator.parallelism,
        operator.inputs.join(", ")
    );
    for subtask in &operator.subtasks {
        let _ = writeln!(
            out,
            "    subtask {}: in {} ({}/s), out {} ({}/s), watermark {}",
            subtask.subtask,
            subtask.records_in,
            rate(subtask.records_in_per_s),
            subtask.records_out,
            rate(subtask.records_out_per_s),
            watermark(subtask.watermark_ms, now_ms)
        );
    }
}

fn rate(per_second: Option<f64>) -> String {
    per_second.map_or_else(|| "-".to_owned(), |r| format!("{r:.0}"))
}

/// A watermark as its distance behind now.
fn watermark(millis: Option<i64>, now_ms: u64) -> String {
    match millis {
        None => "none yet".to_owned(),
        Some(ms) => format!("{ms} ({} behind now)", human_duration(Duration::from_millis((now_ms as i64).saturating_sub(ms).max(0) as u64))),
    }
}

fn ago(now_ms: u64, at_ms: u64) -> String {
    human_duration(Duration::from_millis(now_ms.saturating_sub(at_ms)))
}

fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{} ms", d.as_millis()),
        1..60 => format!("{s} s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}
