//! `weir run <job.toml>`: loads and checks the job file and its plugins, opens the
//! checkpoint store, serves metrics, and runs the engine until a signal asks it to
//! stop (it then commits a final checkpoint and exits 0) or it fails for good.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use clap::Args;
use weir::checkpoint::state_dir::StateDir;
use weir::engine::{Engine, Options, Stopped};
use weir::metrics::Metrics;
use weir::operator::{Plugin, Runtime, RuntimeConfig};
use weir::status::Status;
use weir::status::server::Server;

#[derive(Args)]
pub(super) struct RunArgs {
    /// The job file (TOML); see the README for its keys.
    job: PathBuf,
    /// Where to serve the status page (`GET /`), its JSON (`GET /api/v1/job`) and
    /// Prometheus metrics (`GET /metrics`), all read-only; port 0 picks a free one. An
    /// address given here that cannot be bound is an error; by default weir serves on
    /// 127.0.0.1:9464 or, when another job holds it, a free port (the log says which).
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
}

/// Where metrics and the status page are served unless `--metrics-addr` says otherwise.
pub(super) const DEFAULT_METRICS_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9464);

pub(super) fn run(args: RunArgs) -> anyhow::Result<()> {
    let job = weir::job::load(&args.job)?;
    let stop = Arc::new(AtomicBool::new(false));
    let control = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("weir-control")
        .enable_all()
        .build()
        .context("cannot start the control runtime")?;
    // Before anything slow (plugins compile, recovery reads Kafka): a stop asked for
    // meanwhile is honoured at the first checkpoint, not by the signal's default action.
    let signals = control.block_on(async { StopSignals::listen() });
    control.spawn(stop_on_signal(signals, Arc::clone(&stop)));
    let runtime =
        Runtime::new(RuntimeConfig::default()).context("cannot start the WebAssembly runtime")?;
    let plugins = job
        .operators
        .iter()
        .map(|op| {
            Plugin::load_with(&runtime, &op.plugin, op.load_limits())
                .with_context(|| format!("operator `{}` of job `{}`", op.name, job.name))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let state_dir = StateDir::claim(&job.state_dir, &job.name, job.scale_out)?;

    let metrics = Metrics::new();
    let status = Arc::new(Status::new(&job, &plugins, metrics.clone()));
    control.spawn(sample_rates(Arc::clone(&status)));
    let server = match args.metrics_addr {
        Some(addr) => Some(control.block_on(Server::bind(addr, Arc::clone(&status)))?),
        None => control.block_on(Server::bind_default(DEFAULT_METRICS_ADDR, status)),
    };
    if let Some(server) = server {
        let at = server.local_addr()?;
        tracing::info!("status page at http://{at}/ (its JSON at /api/v1/job; metrics at http://{at}/metrics)");
        control.spawn(async move {
            if let Err(e) = server.run().await {
                tracing::error!("the status page and metrics endpoint stopped: {e}");
            }
        });
    }

    let engine = Engine::new(job, plugins, state_dir, Options { stop, metrics });
    match engine.run()? {
        Stopped::Committed => tracing::info!("stopped after committing a final checkpoint"),
        Stopped::Handed => tracing::info!("stopped; the processes that own its partitions now go on from their last committed checkpoint"),
    }
    Ok(())
}

/// Samples the operators' counters once a second for their rates.
async fn sample_rates(status: Arc<Status>) {
    let mut every = tokio::time::interval(weir::status::SAMPLE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        status.rates().sample(status.metrics());
    }
}

/// SIGTERM and SIGINT, listened for.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Replaces both signals' default action; `None` if they cannot be listened for.
    /// Needs a runtime's context.
    fn listen() -> Option<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(term), Ok(int)) => Some(StopSignals { term, int }),
            _ => {
                tracing::error!("cannot listen for SIGTERM/SIGINT; stop the job with SIGKILL if needed");
                None
            }
        }
    }
}

/// The first SIGTERM or SIGINT asks for a final checkpoint; a second one exits at once
/// (safe: recovery rolls back to the last committed checkpoint).
async fn stop_on_signal(signals: Option<StopSignals>, stop: Arc<AtomicBool>) {
    let Some(StopSignals { mut term, mut int }) = signals else { return };
    for round in 0.. {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        if round > 0 {
            tracing::warn!("second stop signal: exiting without a final checkpoint");
            std::process::exit(130);
        }
        tracing::info!("stop requested: committing a final checkpoint");
        stop.store(true, Ordering::Relaxed);
    }
}
