//! `weir check <plugin.wasm>`: proves a plugin can run here before a job uses it.
//! It loads and validates the component, instantiates it under the limits it
//! would get, runs `init` with the given config and then every other export once.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use weir::batch::Batch;
use weir::operator::{
    self, Limits, LoadLimits, LogLimits, OperatorInstance, Plugin, PluginInfo, Runtime,
    RuntimeConfig,
};
use weir::state::StateChunk;

/// The data bytes asked for per `snapshot` call.
const CHECK_CHUNK_BYTES: u32 = 4 << 20;

#[derive(Args)]
pub(super) struct CheckArgs {
    /// The plugin: a WebAssembly component exporting the weir:operator world.
    plugin: PathBuf,
    /// Linear memory cap of each instance, in MiB.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65536))]
    memory_limit_mb: u64,
    /// CPU deadline of each call, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    call_timeout_ms: u64,
    /// Most records one call may return.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..=100_000_000))]
    max_output_records: u32,
    /// Most MiB of keys, values and headers one call may return, counted per
    /// record; default: --memory-limit-mb.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=4095))]
    max_output_mb: Option<u64>,
    /// Plugin log and stdio lines per second passed to the host log (bursts of 10 s).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    log_lines_per_sec: u32,
    /// Plugin log and stdio KiB per second passed to the host log (bursts of 10 s).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    log_kib_per_sec: u64,
    /// Largest plugin file accepted, in MiB.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_plugin_mb: u64,
    /// How long compiling the plugin may take, in milliseconds.
    #[arg(
        long,
        default_value_t = weir::operator::DEFAULT_COMPILE_TIMEOUT.as_millis() as u64,
        value_parser = clap::value_parser!(u64).range(100..=3_600_000)
    )]
    compile_timeout_ms: u64,
    /// A config entry for `init` (`key=value`, repeatable), as the job file would give.
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_config_entry)]
    config: Vec<(String, String)>,
    /// A record value (repeatable) for the `process` call; without any, an empty
    /// batch is processed.
    #[arg(long = "record", value_name = "VALUE")]
    records: Vec<String>,
    /// Stop after validation and instantiation: do not call `init` or any export
    /// (for a plugin whose config is not at hand).
    #[arg(long, conflicts_with_all = ["config", "records"])]
    no_init: bool,
}

pub(super) fn run(args: CheckArgs) -> anyhow::Result<()> {
    let limits = Limits {
        memory_bytes: usize::try_from(args.memory_limit_mb << 20)
            .context("--memory-limit-mb is too large for this machine")?,
        call_timeout: Duration::from_millis(args.call_timeout_ms),
        max_output_records: args.max_output_records as usize,
        max_output_bytes: args.max_output_mb.unwrap_or(args.memory_limit_mb) << 20,
        log: LogLimits {
            lines_per_sec: args.log_lines_per_sec,
            bytes_per_sec: args.log_kib_per_sec << 10,
        },
    };
    let load = LoadLimits {
        max_bytes: args.max_plugin_mb << 20,
        compile_timeout: Duration::from_millis(args.compile_timeout_ms),
    };
    let runtime =
        Runtime::new(RuntimeConfig::default()).context("cannot start the WebAssembly runtime")?;
    let plugin = Plugin::load_with(&runtime, &args.plugin, load)?;
    print_info(plugin.info(), &runtime, limits);
    let probe = plugin.probe(limits, "check")?;
    println!(
        "instance: instantiated in {:.1} ms, {} of linear memory at start",
        probe.instantiate_time.as_secs_f64() * 1e3,
        mib(probe.memory_bytes)
    );

    if args.no_init {
        println!("calls:    not run (--no-init)");
    } else {
        let entries = args.config.len();
        let start = || {
            OperatorInstance::new(&plugin, limits, args.config.clone(), "check".into()).map_err(
                |err| {
                    anyhow::anyhow!("{err} (with --config key=value, or skip init with --no-init)")
                },
            )
        };
        let mut instance = start()?;
        println!(
            "init:     ok with {entries} config entr{}",
            if entries == 1 { "y" } else { "ies" }
        );
        let changes = exercise(&mut instance, &args.records)?;
        // `restore` expects a freshly initialised instance, as after a restart, and takes
        // only present keys: what a checkpoint holds once the round's removals are applied.
        let mut kept = StateChunk::default();
        for (key, value) in changes.iter() {
            if let Some(value) = value {
                kept.push(key, Some(value));
            }
        }
        let mut fresh = start()?;
        fresh.restore(&kept)?;
        fresh.restored(i64::MAX)?;
        println!("restore:  ok into a fresh instance ({} entries)", kept.len());
    }
    println!("ok: {} can run as a weir operator", plugin.path().display());
    Ok(())
}

fn print_info(info: &PluginInfo, runtime: &Runtime, limits: Limits) {
    let host = operator::host_version();
    let version = match &info.version {
        Some(v) => format!(
            "{}@{v} (this host speaks @{host}: compatible)",
            info.package
        ),
        None => format!(
            "{} (unversioned: it imports no {} interface; its exports match @{host})",
            info.package, info.package
        ),
    };
    println!(
        "plugin:   {} ({})",
        info.path.display(),
        mib(info.size_bytes as usize)
    );
    println!("package:  {version}");
    println!("exports:  {}", info.exports.join(", "));
    println!("imports:  {}", summarise_imports(&info.imports));
    println!(
        "sandbox:  no filesystem, network or environment; clocks frozen; log and stdio to the host log"
    );
    println!(
        "limits:   memory and tables {}, call timeout {} ms, output per call {} records / {}",
        mib(limits.memory_bytes),
        limits.call_timeout.as_millis(),
        limits.max_output_records,
        mib(usize::try_from(limits.max_output_bytes).unwrap_or(usize::MAX))
    );
    match runtime.cache_dir() {
        Some(dir) => println!("code:     {} (cache: {})", info.compiled, dir.display()),
        None => println!(
            "code:     {} (no cache: WEIR_CACHE_DIR is empty)",
            info.compiled
        ),
    }
}

/// Calls `process`, `on-watermark` and one `snapshot` round, in the order a job
/// would, so that a plugin that loops, exhausts memory or traps fails here.
/// Returns the round's state changes.
fn exercise(instance: &mut OperatorInstance, records: &[String]) -> anyhow::Result<StateChunk> {
    let mut batch = Batch::new();
    for (timestamp, value) in (0..).zip(records) {
        batch.push(None, value.as_bytes(), timestamp, &[]);
    }
    let processed = instance.process(&batch)?;
    let fired = instance.on_watermark(i64::MAX)?;
    let mut changes = StateChunk::default();
    loop {
        let chunk = instance.snapshot(CHECK_CHUNK_BYTES)?;
        if chunk.is_empty() {
            break;
        }
        for (key, value) in chunk.iter() {
            changes.push(key, value);
        }
    }
    println!(
        "calls:    process ({} record(s) in, {} out), on-watermark ({} out), snapshot ({} changed keys, \
         {} bytes): ok",
        batch.len(),
        processed.len(),
        fired.len(),
        changes.len(),
        changes.data_len()
    );
    Ok(changes)
}

fn parse_config_entry(entry: &str) -> Result<(String, String), String> {
    let (key, value) = entry
        .split_once('=')
        .ok_or_else(|| format!("`{entry}` is not `key=value`"))?;
    if key.is_empty() {
        return Err(format!("`{entry}` has an empty key"));
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// The weir imports by name, the WASI ones as a count per package: a Python
/// component imports some thirty WASI interfaces.
fn summarise_imports(imports: &[String]) -> String {
    let (wasi, weir): (Vec<&String>, Vec<&String>) =
        imports.iter().partition(|name| name.starts_with("wasi:"));
    let mut packages: Vec<&str> = wasi
        .iter()
        .filter_map(|name| name.split('/').next())
        .collect();
    packages.sort_unstable();
    packages.dedup();
    let mut parts: Vec<String> = weir.iter().map(|name| name.to_string()).collect();
    if !wasi.is_empty() {
        parts.push(format!(
            "{} WASI interfaces ({})",
            wasi.len(),
            packages.join(", ")
        ));
    }
    if parts.is_empty() {
        "nothing".to_owned()
    } else {
        parts.join(", ")
    }
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}
