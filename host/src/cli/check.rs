//! `weir check <plugin.wasm>`: proves a plugin can run here before a job uses it.
//! It loads and validates the component, instantiates it under the limits it
//! would get, runs `init` with the given config and inputs and outputs, and then
//! every other export once: on the records given (keyed, with event times, on one
//! input), after restoring a saved snapshot if asked, and saving the state it ends
//! with if asked, so that an author can try a keyed operator's main path and its
//! restore without Kafka.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use weir::batch::Batch;
use weir::job;
use weir::operator::{
    Emitted, Limits, LoadLimits, LogLimits, OperatorInstance, Plugin, PluginInfo, Ports, Runtime,
    RuntimeConfig, Tombstones, World,
};
use weir::chunk::{RestoreChunks, StateChanges};

use super::snapshot_file::{self, Image};

/// Output records printed of `process` (all its batches) and of `on-watermark`; the
/// rest are counted.
const PRINTED_RECORDS: usize = 20;
/// Bytes of an emitted key or value printed.
const PRINTED_BYTES: usize = 200;

#[derive(Args)]
pub(super) struct CheckArgs {
    /// The plugin: a WebAssembly component exporting the weir:operator world (none with
    /// --job: the job file names it).
    #[arg(required_unless_present = "job", conflicts_with = "job")]
    plugin: Option<PathBuf>,
    /// Check operator --operator of this job file as the job would run it: its plugin,
    /// limits, config, inputs and outputs, tombstones and key_by (an operator whose
    /// input is not routed by key may keep no state), instead of the flags that give them.
    #[arg(long, value_name = "FILE", requires = "operator", conflicts_with_all = JOB_GIVES)]
    job: Option<PathBuf>,
    /// The operator of --job to check, by name.
    #[arg(long, value_name = "NAME", requires = "job")]
    operator: Option<String>,
    /// Linear memory cap of each instance, in MiB.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=u64::from(job::MAX_MEMORY_LIMIT_MB)))]
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
    /// A config entry for `init` (`key=value`, repeatable), as the job file's
    /// `[operators.config]` would give it: `init` gets the entries sorted by key, each
    /// key once.
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_config_entry)]
    config: Vec<(String, String)>,
    /// Hand records without a value (a --records-file line without `value`) to the
    /// plugin as tombstones (value offset 0xFFFFFFFF), as the job file's
    /// `tombstones = true` does; without it, with an empty value.
    #[arg(long)]
    tombstones: bool,
    /// The names of the operator's inputs, in the job file's order, as `init` gets them
    /// (a weir:operator@0.3 plugin; a 0.2 plugin has exactly one): in the graph form its
    /// `inputs`; in a chain, the operator before it, or `source` for the first.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',', default_value = "source")]
    inputs: Vec<String>,
    /// The names of the operator's outputs, in the job file's order, as `init` gets
    /// them; what each receives is counted.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',', default_value = "out")]
    outputs: Vec<String>,
    /// The input (one of --inputs) the records arrive on; default: the first.
    #[arg(long, value_name = "NAME")]
    input: Option<String>,
    /// A record for the `process` call (repeatable): `VALUE` (no key) or
    /// `KEY=VALUE` (split at the first `=`), either optionally ending in `@TIMESTAMP`
    /// (epoch ms; default: the record's position, 0, 1, ...). A keyless value holding
    /// `=`, or a value ending in `@` and digits, goes in --records-file. Without
    /// records, an empty batch is processed.
    #[arg(long = "record", value_name = "[KEY=]VALUE[@TS]", value_parser = parse_record)]
    records: Vec<InputRecord>,
    /// A file of records for the `process` call, after the --record ones: one JSON
    /// object per line, `{"key": "u1", "value": {"amount": 3}, "timestamp": 1000}`
    /// (`key` optional; a `value` that is not a string is passed as compact JSON; a
    /// line without `value` is a record without one, a tombstone).
    #[arg(long, value_name = "FILE")]
    records_file: Option<PathBuf>,
    /// Event time to advance to after the records (epoch ms); default: the end of
    /// time, which completes every window.
    #[arg(long, value_name = "TS", allow_negative_numbers = true)]
    watermark: Option<i64>,
    /// Restore this snapshot (written by --save-snapshot) into the instance first,
    /// as a restart from a checkpoint would.
    #[arg(long, value_name = "FILE")]
    restore: Option<PathBuf>,
    /// Write the state the instance ends with (the restored state plus the
    /// snapshot round's changes) and --watermark to this file, for a later
    /// --restore. Needs --watermark: at the default, the end of time, every window
    /// completes and any later record would be late.
    #[arg(long, value_name = "FILE", requires = "watermark")]
    save_snapshot: Option<PathBuf>,
    /// Stop after validation and instantiation: do not call `init` or any export
    /// (for a plugin whose config is not at hand).
    #[arg(long, conflicts_with_all = ["config", "records", "records_file", "restore", "save_snapshot", "watermark", "input"])]
    no_init: bool,
}

/// The flags whose values --job takes from the job file instead.
const JOB_GIVES: [&str; 12] = [
    "memory_limit_mb",
    "call_timeout_ms",
    "max_output_records",
    "max_output_mb",
    "log_lines_per_sec",
    "log_kib_per_sec",
    "max_plugin_mb",
    "compile_timeout_ms",
    "config",
    "tombstones",
    "inputs",
    "outputs",
];

/// What is checked: a plugin, and what a job hands its operator.
struct Subject {
    plugin: PathBuf,
    load: LoadLimits,
    limits: Limits,
    config: Vec<(String, String)>,
    ports: Ports,
    /// The operator's name if its input is not routed by key: it may keep no state.
    unkeyed: Option<String>,
    /// What to give to get past a failing `init`.
    init_help: &'static str,
}

impl Subject {
    fn from_flags(args: &CheckArgs) -> anyhow::Result<Subject> {
        job::check_input_names(&args.inputs).map_err(|problem| anyhow::anyhow!("--inputs: {problem}"))?;
        job::check_output_names(&args.outputs).map_err(|problem| anyhow::anyhow!("--outputs: {problem}"))?;
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
            tombstones: if args.tombstones { Tombstones::Marked } else { Tombstones::AsEmpty },
        };
        Ok(Subject {
            plugin: args.plugin.clone().expect("clap requires the plugin without --job"),
            load: LoadLimits {
                max_bytes: args.max_plugin_mb << 20,
                compile_timeout: Duration::from_millis(args.compile_timeout_ms),
            },
            limits,
            config: job_config(&args.config)?,
            ports: Ports {
                inputs: args.inputs.clone(),
                outputs: args.outputs.clone(),
            },
            unkeyed: None,
            init_help: "with --config key=value, --inputs and --outputs, or skip init with --no-init",
        })
    }

    /// Operator `name` of the job file at `path`, as the job would run it.
    fn from_job(path: &Path, name: &str) -> anyhow::Result<Subject> {
        let job = job::load(path)?;
        let Some(spec) = job.operators.iter().find(|spec| spec.name == name) else {
            let names: Vec<&str> = job.operators.iter().map(|spec| spec.name.as_str()).collect();
            anyhow::bail!("job file {} has no operator `{name}`; its operators: {}", path.display(), names.join(", "));
        };
        Ok(Subject {
            plugin: spec.plugin.clone(),
            load: spec.load_limits(),
            limits: spec.limits(),
            config: spec.init_config(),
            ports: spec.ports(),
            unkeyed: (!spec.key_by).then(|| spec.name.clone()),
            init_help: "as the job file gives it, or skip init with --no-init",
        })
    }
}

/// One record for `process`.
#[derive(Clone, Debug, PartialEq)]
struct InputRecord {
    key: Option<Vec<u8>>,
    /// `None`: a tombstone.
    value: Option<Vec<u8>>,
    timestamp: Option<i64>,
}

pub(super) fn run(args: CheckArgs) -> anyhow::Result<()> {
    let subject = match (&args.job, &args.operator) {
        (Some(path), Some(name)) => Subject::from_job(path, name)?,
        _ => Subject::from_flags(&args)?,
    };
    let (limits, ports) = (subject.limits, &subject.ports);
    let input = input_index(ports, args.input.as_deref())?;
    let runtime =
        Runtime::new(RuntimeConfig::default()).context("cannot start the WebAssembly runtime")?;
    let plugin = Plugin::load_with(&runtime, &subject.plugin, subject.load)?;
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
        call_every_export(&args, &subject, &plugin, input)?;
    }
    println!("ok: {} can run as a weir operator", plugin.path().display());
    Ok(())
}

/// The index of input `name` of `ports` (the first if `None`).
fn input_index(ports: &Ports, name: Option<&str>) -> anyhow::Result<u32> {
    let Some(name) = name else { return Ok(0) };
    let index = ports.inputs.iter().position(|input| input == name).with_context(|| {
        format!(
            "--input {name} is not one of the inputs ({}); name one of --inputs",
            ports.inputs.join(", ")
        )
    })?;
    Ok(u32::try_from(index).expect("an operator has fewer than 2^32 inputs"))
}

/// `init`, then (after restoring `--restore`, if given) every other export once, as a
/// job would; saves the state it ends with to `--save-snapshot`, if given.
fn call_every_export(
    args: &CheckArgs,
    subject: &Subject,
    plugin: &Plugin,
    input: u32,
) -> anyhow::Result<()> {
    let (limits, ports) = (subject.limits, &subject.ports);
    let entries = subject.config.len();
    let start = || {
        OperatorInstance::with_ports(plugin, limits, subject.config.clone(), ports.clone(), "check".into())
            .map_err(|err| anyhow::anyhow!("{err} ({})", subject.init_help))
    };
    let mut records = args.records.clone();
    if let Some(path) = &args.records_file {
        records.extend(read_records_file(path)?);
    }
    // An instance that restores is made and filled as in a job's restore: its memory
    // grows in small pages until the restore ends (`Plugin::restoring`).
    let restoring = args.restore.is_some().then(|| plugin.restoring());
    let mut instance = start()?;
    println!(
        "init:     ok with {entries} config entr{}, inputs {}, outputs {}",
        if entries == 1 { "y" } else { "ies" },
        ports.inputs.join(", "),
        ports.outputs.join(", ")
    );
    let mut image = Image::new();
    let mut watermark = i64::MIN;
    if let Some(path) = &args.restore {
        (image, watermark) = snapshot_file::load(path)?;
        restore(&mut instance, &image, watermark)?;
        println!(
            "restore:  {} entries at watermark {watermark} from {}: ok",
            image.len(),
            path.display()
        );
    }
    drop(restoring);
    let to = args.watermark.unwrap_or(i64::MAX).max(watermark);
    let changes = exercise(&mut instance, (input, subject.unkeyed.as_deref()), &records, to)?;
    // What a checkpoint holds after this round: the restored state with the
    // round's changes applied (removals delete).
    for (_, key, value) in changes.entries() {
        match value {
            Some(value) => image.insert(key.to_vec(), value.to_vec()),
            None => image.remove(key),
        };
    }
    // A restart from that checkpoint: a freshly initialised instance restores it.
    let restoring = plugin.restoring();
    let mut fresh = start()?;
    restore(&mut fresh, &image, to)?;
    drop(restoring);
    println!("restore:  ok into a fresh instance ({} entries)", image.len());
    if let Some(path) = &args.save_snapshot {
        snapshot_file::save(path, &subject.plugin, to, &image)?;
        println!("saved:    {} entries at watermark {to} to {}", image.len(), path.display());
    }
    Ok(())
}

fn print_info(info: &PluginInfo, runtime: &Runtime, limits: Limits) {
    let speaks: Vec<String> = World::ALL.iter().map(World::to_string).collect();
    let speaks = speaks.join(" and ");
    let version = match &info.version {
        Some(v) => format!("{}@{v} (this host speaks {speaks}: compatible)", info.package),
        None => format!(
            "{} (unversioned: it imports no {} interface; its exports match {})",
            info.package, info.package, info.world
        ),
    };
    let shape = if info.world.has_ports() {
        "named inputs and outputs"
    } else {
        "one input, one output"
    };
    println!(
        "plugin:   {} ({})",
        info.path.display(),
        mib(info.size_bytes as usize)
    );
    println!("package:  {version}");
    println!("world:    {} ({shape})", info.world);
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

/// Restores `image` into a fresh instance in the chunks a restart would hand it.
fn restore(instance: &mut OperatorInstance, image: &Image, watermark: i64) -> anyhow::Result<()> {
    let mut chunks = RestoreChunks::default();
    for (key, value) in image {
        if let Some(full) = chunks.push(key, value) {
            instance.restore(&full)?;
        }
    }
    if let Some(last) = chunks.finish() {
        instance.restore(&last)?;
    }
    instance.restored(watermark)?;
    Ok(())
}

/// Calls `process` (on input `input`, in batches a job would hand it: `piece_ends`),
/// `on-watermark` (to `watermark`) and one `snapshot` round, in the order a job would,
/// so that a plugin that loops, exhausts memory or traps fails here, and its outputs and
/// state are checked as a job checks them (the instance owns every key group, as one
/// subtask does; `unkeyed`, an operator whose input is not routed by key, may keep no
/// state); prints what the calls emit, and how much reached each output. Returns the
/// round's state changes.
fn exercise(
    instance: &mut OperatorInstance,
    (input, unkeyed): (u32, Option<&str>),
    records: &[InputRecord],
    watermark: i64,
) -> anyhow::Result<StateChanges> {
    let mut batch = Batch::new();
    for (position, record) in (0..).zip(records) {
        let timestamp = record.timestamp.unwrap_or(position);
        batch.push_maybe_valued(record.key.as_deref(), record.value.as_deref(), timestamp, &[]);
    }
    let outputs = instance.ports().outputs.clone();
    let per_output = |emitted: Emitted| -> Vec<usize> {
        emitted.into_outputs(outputs.len()).iter().map(Batch::len).collect()
    };
    let (mut processed, mut processed_len, mut shown) = (vec![0; outputs.len()], 0, 0);
    // Without records, one empty batch.
    let ends = Some(batch.piece_ends()).filter(|ends| !ends.is_empty()).unwrap_or_else(|| vec![0]);
    let mut start = 0;
    for end in ends {
        let emitted = instance.process_input(input, &batch.copy_of(start..end))?;
        shown += print_records("process", &emitted, &outputs, PRINTED_RECORDS - shown);
        processed_len += emitted.len();
        processed.iter_mut().zip(per_output(emitted)).for_each(|(sum, n)| *sum += n);
        start = end;
    }
    print_more("process", processed_len - shown);
    let fired = instance.on_watermark_emitted(watermark)?;
    let shown = print_records("on-watermark", &fired, &outputs, PRINTED_RECORDS);
    print_more("on-watermark", fired.len() - shown);
    let changes = instance.snapshot_round(0, |key| match unkeyed {
        Some(operator) => Err(job::unkeyed_state(operator, key)),
        None => Ok(0),
    })?;
    let (keys, bytes) = changes.size();
    println!(
        "calls:    process ({} record(s) in, {} out), on-watermark ({} out), snapshot ({} \
         changed keys, {} bytes): ok",
        batch.len(),
        processed_len,
        fired.len(),
        keys,
        bytes
    );
    let fired = per_output(fired);
    let counts: Vec<String> = (0..outputs.len())
        .map(|o| {
            format!(
                "{} {} (process {}, on-watermark {})",
                outputs[o],
                processed[o] + fired[o],
                processed[o],
                fired[o]
            )
        })
        .collect();
    println!("input:    {} ({} record(s))", instance.ports().inputs[input as usize], batch.len());
    println!("outputs:  {}", counts.join("; "));
    Ok(changes)
}

/// Prints the first `room` records a call emitted, one line each, naming the output of
/// each when there are several; returns how many it printed.
fn print_records(call: &str, emitted: &Emitted, outputs: &[String], room: usize) -> usize {
    for (index, record) in emitted.batch().iter().enumerate().take(room) {
        let key = record.key.map_or_else(|| "(none)".to_owned(), shown);
        let to = if outputs.len() > 1 {
            format!(" to {}", outputs[emitted.output_of(index)])
        } else {
            String::new()
        };
        let value = if record.is_tombstone() { "(none: a tombstone)".to_owned() } else { shown(record.value) };
        println!("  {call} emitted: key {key} value {value} @{}{to}", record.timestamp);
    }
    emitted.len().min(room)
}

/// A key or value as a quoted string, its first `PRINTED_BYTES` only, and its length
/// when it is longer.
fn shown(bytes: &[u8]) -> String {
    match bytes.len() > PRINTED_BYTES {
        true => format!("{:?}... ({} bytes)", String::from_utf8_lossy(&bytes[..PRINTED_BYTES]), bytes.len()),
        false => format!("{:?}", String::from_utf8_lossy(bytes)),
    }
}

fn print_more(call: &str, more: usize) {
    if more > 0 {
        println!("  {call} emitted {more} more");
    }
}

/// `[KEY=]VALUE[@TS]`.
fn parse_record(spec: &str) -> Result<InputRecord, String> {
    let (rest, timestamp) = match spec.rsplit_once('@') {
        Some((rest, ts)) if ts.parse::<i64>().is_ok() => (rest, ts.parse().ok()),
        _ => (spec, None),
    };
    let (key, value) = match rest.split_once('=') {
        Some((key, value)) => (Some(key.as_bytes().to_vec()), value),
        None => (None, rest),
    };
    Ok(InputRecord {
        key,
        value: Some(value.as_bytes().to_vec()),
        timestamp,
    })
}

/// One line of a --records-file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordLine {
    key: Option<String>,
    /// `None` where the line has no `value`; a JSON `null` is the value `null`.
    #[serde(default, deserialize_with = "present")]
    value: Option<serde_json::Value>,
    timestamp: Option<i64>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    <serde_json::Value as serde::Deserialize>::deserialize(d).map(Some)
}

fn read_records_file(path: &Path) -> anyhow::Result<Vec<InputRecord>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the records file {}", path.display()))?;
    let mut records = Vec::new();
    for (at, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        let line: RecordLine = serde_json::from_str(line).with_context(|| {
            format!(
                "line {} of the records file {} is not a record: expected \
                 {{\"key\": \"k\", \"value\": ..., \"timestamp\": 1000}} (key and timestamp optional)",
                at + 1,
                path.display()
            )
        })?;
        let value = line.value.map(|value| match value {
            serde_json::Value::String(text) => text.into_bytes(),
            other => other.to_string().into_bytes(),
        });
        records.push(InputRecord {
            key: line.key.map(String::into_bytes),
            value,
            timestamp: line.timestamp,
        });
    }
    Ok(records)
}

fn parse_config_entry(entry: &str) -> Result<(String, String), String> {
    let (key, value) = entry
        .split_once('=')
        .ok_or_else(|| format!("`{entry}` is not `key=value`"))?;
    Ok((key.to_owned(), value.to_owned()))
}

/// The --config entries as a job's `[operators.config]` hands them to `init`: sorted by
/// key, each key once, within the job file's limits on entries and value lengths.
fn job_config(entries: &[(String, String)]) -> anyhow::Result<Vec<(String, String)>> {
    let mut config = std::collections::BTreeMap::new();
    for (key, value) in entries {
        anyhow::ensure!(!config.contains_key(key), "--config `{key}` is given twice; a job file's table holds each key once");
        if let Some(problem) = job::map_entry_problem(config.len(), key, value) {
            anyhow::bail!("--config: {problem}, as in a job file");
        }
        config.insert(key.clone(), value.clone());
    }
    Ok(config.into_iter().collect())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_with_and_without_key_and_timestamp() {
        let record = |key: Option<&str>, value: &str, timestamp| InputRecord {
            key: key.map(|key| key.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            timestamp,
        };
        for (spec, expected) in [
            ("x", record(None, "x", None)),
            ("u1=x", record(Some("u1"), "x", None)),
            ("u1=x@1500", record(Some("u1"), "x", Some(1500))),
            ("x@-3", record(None, "x", Some(-3))),
            ("=v", record(Some(""), "v", None)),
            ("a=b=c", record(Some("a"), "b=c", None)),
            ("k={\"amount\":3}@10", record(Some("k"), "{\"amount\":3}", Some(10))),
            ("mail@example.com", record(None, "mail@example.com", None)),
        ] {
            assert_eq!(parse_record(spec).unwrap(), expected, "{spec}");
        }
    }

    #[test]
    fn a_records_file_line_without_a_value_is_a_tombstone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl");
        std::fs::write(&path, "{\"key\": \"k\"}\n{\"key\": \"k\", \"value\": null}\n{\"value\": \"\"}\n").unwrap();
        let values: Vec<Option<Vec<u8>>> = read_records_file(&path).unwrap().into_iter().map(|record| record.value).collect();
        assert_eq!(values, [None, Some(b"null".to_vec()), Some(Vec::new())]);
    }

    #[test]
    fn config_reaches_init_as_a_job_files_table_would_give_it() {
        let entries = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let sorted = job_config(&entries(&[("window_ms", "10"), ("", "empty key"), ("field", "n")])).unwrap();
        assert_eq!(sorted, entries(&[("", "empty key"), ("field", "n"), ("window_ms", "10")]));
        let twice = job_config(&entries(&[("a", "1"), ("a", "2")])).unwrap_err().to_string();
        assert!(twice.contains("`a` is given twice"), "{twice}");
        let long = "x".repeat(job::MAX_MAP_VALUE_BYTES + 1);
        let too_long = job_config(&entries(&[("a", &long)])).unwrap_err().to_string();
        assert!(too_long.contains(&format!("over the limit of {}", job::MAX_MAP_VALUE_BYTES)), "{too_long}");
        let many: Vec<(String, String)> = (0..=job::MAX_MAP_ENTRIES).map(|i| (i.to_string(), String::new())).collect();
        let too_many = job_config(&many).unwrap_err().to_string();
        assert!(too_many.contains(&format!("more than {} entries", job::MAX_MAP_ENTRIES)), "{too_many}");
        assert_eq!(parse_config_entry("=v").unwrap(), (String::new(), "v".to_string()));
    }
}
