//! A misbehaving plugin gets a specific error naming its file, within the
//! configured deadline, and the host keeps working: the same OperatorInstance,
//! now running a fresh guest, answers the next call.

use crate::operator_common as common;
use crate::support;

use std::time::{Duration, Instant};

use common::{batch, config, load, plugin_path, records, tight_limits};
use weir::operator::{Call, Limits, LogLimits, OperatorError, OperatorInstance};

/// A 200 ms deadline must stop a call well within this, re-instantiation included.
const PROMPT: Duration = Duration::from_secs(2);

fn instance(plugin: &str, limits: Limits) -> OperatorInstance {
    OperatorInstance::new(&load(plugin), limits, vec![], format!("{plugin}[0]"))
        .unwrap_or_else(|err| panic!("{err}"))
}

fn assert_names_plugin(err: &OperatorError, plugin: &str) {
    let path = plugin_path(plugin).display().to_string();
    assert!(
        err.to_string().contains(&path),
        "the message must name {path}: {err}"
    );
}

#[test]
fn a_trap_is_reported_with_the_panic_message_and_the_instance_recovers() {
    let mut op = instance("bad-trap", tight_limits());
    let passed = op.process(&batch(&[(Some("k"), "fine", 1)])).unwrap();
    assert_eq!(records(&passed), [(Some("k".into()), "fine".into(), 1)]);

    let err = op
        .process(&batch(&[
            (Some("k"), "a", 1),
            (Some("k"), "poison", 7),
            (Some("k"), "b", 9),
        ]))
        .unwrap_err();
    let OperatorError::Trap {
        call, guest_output, ..
    } = &err
    else {
        panic!("expected a trap: {err:?}")
    };
    assert_eq!(*call, Call::Process);
    assert!(
        err.is_trap(),
        "a trap is what poison-record detection keys on"
    );
    let said = guest_output.as_deref().unwrap_or_default();
    assert!(
        said.contains("bad-trap: poison record at timestamp 7"),
        "the panic message must be kept: {err}"
    );
    assert_names_plugin(&err, "bad-trap");

    let after = op
        .process(&batch(&[(None, "after", 2)]))
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(records(&after), [(None, "after".into(), 2)]);
}

#[test]
fn a_guest_error_is_not_a_trap() {
    // window-count refuses state written with another window size: a guest `Err`.
    let plugin = load("window-count");
    let new = |window: &str| {
        OperatorInstance::new(
            &plugin,
            Limits::default(),
            config(&[("window_ms", window)]),
            "wc".into(),
        )
        .unwrap()
    };
    let mut first = new("100");
    first.process(&batch(&[(Some("k"), "x", 5)])).unwrap();
    let snapshot = common::changes(&mut first);
    let mut other = new("200");
    let err = other.restore(&snapshot).unwrap_err();
    assert!(
        matches!(
            err,
            OperatorError::Guest {
                call: Call::Restore,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_trap());
    assert!(err.to_string().contains("100 ms windows"), "{err}");
    other
        .process(&batch(&[(Some("k"), "x", 5)]))
        .expect("state intact after a guest error");
}

#[test]
fn an_endless_loop_is_stopped_by_the_deadline() {
    let mut op = instance("bad-loop", tight_limits());
    let started = Instant::now();
    let err = op.process(&batch(&[(None, "x", 1)])).unwrap_err();
    let waited = started.elapsed();
    let OperatorError::DeadlineExceeded { timeout, call, .. } = &err else {
        panic!("expected a deadline: {err:?}")
    };
    assert_eq!(
        (*timeout, *call),
        (Duration::from_millis(200), Call::Process)
    );
    assert!(err.is_trap());
    assert!(
        waited >= Duration::from_millis(150) && waited < PROMPT,
        "stopped after {waited:?}"
    );
    assert_names_plugin(&err, "bad-loop");

    // Its other exports work: the fresh instance answers.
    assert_eq!(op.on_watermark(10).unwrap().len(), 0);
    op.snapshot(1 << 20).unwrap_or_else(|err| panic!("{err}"));
    // And a second runaway call is stopped just the same.
    let started = Instant::now();
    assert!(matches!(
        op.process(&batch(&[])),
        Err(OperatorError::DeadlineExceeded { .. })
    ));
    assert!(started.elapsed() < PROMPT);
}

#[test]
fn a_call_earns_a_grace_bounded_by_the_memory_it_holds_and_grows() {
    // 16 MiB touched, then an endless loop: the deadline is put off by the grace
    // for that growth (the kernel zeroes fresh pages inside the call) and for what
    // the guest held, not forever.
    let limits = tight_limits();
    let (per_mib_grown, per_mib_held) = (Duration::from_millis(32), Duration::from_millis(8));
    let most = (per_mib_grown + per_mib_held) * u32::try_from(limits.memory_bytes >> 20).unwrap();
    let mut op = instance("bad-loop", limits);
    let held = u32::try_from(op.memory_in_use() >> 20).unwrap();
    let started = Instant::now();
    let err = op.process(&batch(&[(None, "grow 16", 1)])).unwrap_err();
    let waited = started.elapsed();
    let OperatorError::DeadlineExceeded { timeout, grace, .. } = &err else {
        panic!("expected a deadline: {err:?}")
    };
    assert!(
        *grace >= per_mib_grown * 16 + per_mib_held * held && *grace <= most,
        "16 MiB grown and {held} MiB held earn at least {:?}, and never more than the memory limit allows: {grace:?}",
        per_mib_grown * 16 + per_mib_held * held
    );
    assert!(
        waited >= *timeout + *grace - Duration::from_millis(50) && waited < PROMPT + most,
        "stopped after {waited:?}, deadline {timeout:?} and grace {grace:?}"
    );
    assert!(
        err.to_string().contains(&format!("(and {} ms more for the memory it held and grew)", grace.as_millis())),
        "{err}"
    );
    // A call that grows nothing earns only what its fresh instance holds: the next
    // runaway stops near its deadline.
    let held = u32::try_from(op.memory_in_use() >> 20).unwrap();
    let started = Instant::now();
    let err = op.process(&batch(&[(None, "x", 1)])).unwrap_err();
    assert!(
        matches!(err, OperatorError::DeadlineExceeded { grace, .. } if grace <= per_mib_held * (held + 1)),
        "{held} MiB held: {err:?}"
    );
    assert!(started.elapsed() < PROMPT);
}

#[test]
fn unbounded_memory_growth_hits_the_cap() {
    let limits = tight_limits();
    let mut op = instance("bad-memory", limits);
    let started = Instant::now();
    let err = op.process(&batch(&[(None, "x", 1)])).unwrap_err();
    let OperatorError::MemoryLimitExceeded {
        limit_bytes,
        requested_bytes,
        ..
    } = &err
    else {
        panic!("expected the memory cap: {err:?}")
    };
    assert_eq!(*limit_bytes, limits.memory_bytes);
    assert!(*requested_bytes > limits.memory_bytes);
    assert!(err.is_trap());
    assert!(started.elapsed() < PROMPT, "took {:?}", started.elapsed());
    assert_names_plugin(&err, "bad-memory");

    assert!(
        op.memory_in_use() < limits.memory_bytes / 2,
        "the fresh instance starts small"
    );
    op.snapshot(1 << 20).unwrap_or_else(|err| panic!("{err}"));
}

#[test]
fn no_file_is_reachable() {
    let err = OperatorInstance::new(
        &load("bad-file"),
        tight_limits(),
        vec![],
        "bad-file[0]".into(),
    )
    .err()
    .expect("init must fail: the sandbox grants no filesystem");
    assert!(matches!(err, OperatorError::Init { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("bad-file: cannot open /etc/passwd"),
        "{err}"
    );
    assert_names_plugin(&err, "bad-file");
    // The host is unaffected.
    instance("bad-trap", tight_limits())
        .process(&batch(&[(None, "x", 1)]))
        .unwrap();
}

#[test]
fn no_socket_can_connect() {
    let plugin = load("bad-socket");
    let started = Instant::now();
    let err = OperatorInstance::new(
        &plugin,
        tight_limits(),
        vec![],
        "bad-socket[0]".into(),
    )
    .err()
    .expect("init must fail: the sandbox grants no network");
    assert!(matches!(err, OperatorError::Init { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("bad-socket: cannot connect to 127.0.0.1:9"),
        "{err}"
    );
    assert_names_plugin(&err, "bad-socket");
    assert!(started.elapsed() < PROMPT);
    instance("bad-trap", tight_limits())
        .process(&batch(&[(None, "x", 1)]))
        .unwrap();
}

#[test]
fn initial_memory_over_the_cap_is_refused_at_instantiation() {
    // py-filter starts with ~12 MiB of linear memory.
    let limits = Limits {
        memory_bytes: 4 << 20,
        ..tight_limits()
    };
    let plugin = load("py-filter");
    let err = OperatorInstance::new(
        &plugin,
        limits,
        config(&[("field", "a"), ("equals", "b")]),
        "py".into(),
    )
    .err()
    .expect("a 4 MiB cap is too small for a Python component");
    assert!(matches!(err, OperatorError::Instantiate { .. }), "{err:?}");
    assert!(err.to_string().contains("raise the memory limit"), "{err}");
    assert_names_plugin(&err, "py-filter");
}

fn bad_output(limits: Limits, cfg: &[(&str, &str)]) -> OperatorInstance {
    OperatorInstance::new(&load("bad-output"), limits, config(cfg), "bad-output[0]".into())
        .unwrap_or_else(|err| panic!("{err}"))
}

#[test]
fn records_sharing_bytes_are_counted_once_each_and_an_oversize_output_is_refused() {
    // 300 records sharing one 16 MiB value: 4.7 GiB once copied out, as routing does.
    let mut op = bad_output(Limits::default(), &[]);
    let err = op.process(&batch(&[(None, "amplify", 1)])).unwrap_err();
    let OperatorError::OutputTooLarge { call, problem, .. } = &err else {
        panic!("expected the output bound: {err:?}")
    };
    assert_eq!(*call, Call::Process);
    assert!(
        matches!(problem, weir::batch::BatchError::TooManyBytes { max } if *max == 64 << 20),
        "{problem:?}"
    );
    assert_names_plugin(&err, "bad-output");
    assert!(err.to_string().contains("max_output_mb"), "{err}");
    // The guest did not crash: the same instance passes the next batch.
    let after = op.process(&batch(&[(Some("k"), "fine", 3)])).unwrap();
    assert_eq!(records(&after), [(Some("k".into()), "fine".into(), 3)]);

    let few = Limits {
        max_output_records: 10,
        ..Limits::default()
    };
    let mut op = bad_output(few, &[("bytes", "16")]);
    let err = op.process(&batch(&[(None, "amplify", 1)])).unwrap_err();
    assert!(err.to_string().contains("300 records, over the limit of 10"), "{err}");

    // Within the bounds the same output passes: the bound is what refuses it.
    let mut op = bad_output(Limits::default(), &[("copies", "3"), ("bytes", "1024")]);
    let out = op.process(&batch(&[(None, "amplify", 1)])).unwrap();
    assert_eq!(out.len(), 3);
    assert!(out.iter().all(|r| r.value.len() == 1024));
}

#[test]
fn timestamps_kafka_refuses_are_the_plugins_error_naming_the_value() {
    let mut op = bad_output(tight_limits(), &[]);
    for timestamp in [i64::MIN, -1, i64::MAX] {
        let value = format!("timestamp:{timestamp}");
        let err = op
            .process(&batch(&[(None, "fine", 1), (None, &value, 2)]))
            .unwrap_err();
        assert!(
            matches!(
                &err,
                OperatorError::InvalidOutput {
                    problem: weir::batch::BatchError::Timestamp { index: 1, timestamp: t },
                    ..
                } if *t == timestamp
            ),
            "{err:?}"
        );
        assert_names_plugin(&err, "bad-output");
        assert!(err.to_string().contains(&timestamp.to_string()), "{err}");
    }
    let ok = op.process(&batch(&[(None, "timestamp:0", 2)])).unwrap();
    assert_eq!(records(&ok)[0].2, 0);
}

#[test]
fn tables_count_against_the_memory_cap() {
    // 100 funcref tables of 2^20 elements: 1.6 GiB of host memory as counted.
    let plugin = load("bad-tables");
    let started = Instant::now();
    let err = OperatorInstance::new(
        &plugin,
        Limits::default(),
        vec![],
        "bad-tables[0]".into(),
    )
    .err()
    .expect("a 64 MiB cap must refuse 100 tables of 2^20 elements");
    assert!(matches!(err, OperatorError::Instantiate { .. }), "{err:?}");
    assert!(
        err.to_string().contains("memory and tables") && err.to_string().contains("raise the memory limit"),
        "{err}"
    );
    assert_names_plugin(&err, "bad-tables");
    assert!(started.elapsed() < PROMPT, "took {:?}", started.elapsed());
    // Four such tables (64 MiB) fit a 128 MiB cap; the bomb's hundred never does.
    let roomy = Limits {
        memory_bytes: 128 << 20,
        ..Limits::default()
    };
    let err = OperatorInstance::new(&load("bad-tables"), roomy, vec![], "t".into())
        .err()
        .expect("still refused");
    assert!(err.to_string().contains("over the limit of 134217728 bytes"), "{err}");
}

#[test]
fn an_output_over_128_mib_fits_when_the_memory_limit_allows_it() {
    // wasmtime's default allows 128 MiB from guest to host per call; the host
    // budget follows the memory limit instead.
    let limits = Limits {
        memory_bytes: 320 << 20,
        max_output_bytes: 200 << 20,
        call_timeout: Duration::from_secs(20),
        ..Limits::default()
    };
    let bytes = (130u32 << 20).to_string();
    let mut op = bad_output(limits, &[("copies", "1"), ("bytes", &bytes)]);
    let output = op.process(&batch(&[(None, "amplify", 1)])).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(output.iter().map(|record| record.value.len()).sum::<usize>(), 130 << 20);
}

#[test]
fn malformed_state_changes_are_refused_with_what_is_wrong() {
    let mut op = bad_output(Limits::default(), &[("state", "outside")]);
    let err = op.snapshot(1 << 20).unwrap_err();
    assert!(matches!(err, OperatorError::InvalidState { .. }), "{err:?}");
    assert!(err.to_string().contains("snapshot returned malformed state changes"), "{err}");
    assert!(err.to_string().contains("points at bytes"), "{err}");
    assert_names_plugin(&err, "bad-output");
}

/// The error of one snapshot round of bad-output in `mode`, checked as a job and
/// `weir check` check it; it must name the plugin and say `expected`.
fn refused_round(limits: Limits, mode: &str, expected: &str) -> OperatorError {
    let mut op = bad_output(limits, &[("state", mode)]);
    op.process(&batch(&[(Some("k1"), "v", 1), (Some("k1"), "v", 2)])).unwrap_or_else(|err| panic!("{err}"));
    let started = Instant::now();
    let err = op.snapshot_round(0, |_| Ok(0)).expect_err(mode);
    assert!(matches!(err, OperatorError::InvalidState { .. }), "{mode}: {err:?}");
    assert!(err.to_string().contains(expected), "{mode}: the error must say `{expected}`: {err}");
    assert_names_plugin(&err, "bad-output");
    assert!(started.elapsed() < Duration::from_secs(30), "{mode}: took {:?}", started.elapsed());
    // Refused without a crash: the same guest answers.
    assert_eq!(op.on_watermark(10).unwrap_or_else(|err| panic!("{err}")).len(), 0);
    err
}

#[test]
fn hostile_state_chunks_are_refused_before_the_host_holds_them() {
    // A removal carrying a value, even one past the end of any memory.
    refused_round(Limits::default(), "removal-value", "is a removal with a value (value-offset 4294967040");
    // 32 MiB of data and no entries against max-bytes of 4 MiB: it would end the round.
    let err = refused_round(Limits::default(), "padded:32", "holds 33554432 data bytes in 0 entries");
    assert!(err.to_string().contains("refused before it was copied"), "{err}");
    // 100,000 keys aliasing one 4 MiB value: 400 GiB once each entry is copied out.
    refused_round(Limits::default(), "alias:100000", "counted per entry (entries that share bytes count each time)");
    // One entry bigger than any chunk: it stays in the guest (320 MiB of memory).
    let roomy = Limits { memory_bytes: 320 << 20, call_timeout: Duration::from_secs(20), ..Limits::default() };
    let err = refused_round(roomy, "big:130", "holds 136314883 data bytes in 1 entries");
    assert!(err.to_string().contains("refused before it was copied"), "{err}");
}

#[test]
fn a_round_is_held_to_the_limits_a_job_keeps() {
    refused_round(Limits::default(), "big:1", "is 1048579 bytes, more than a changelog record may hold (998995 bytes");
    refused_round(Limits::default(), "twice", "key b\"k1\" comes twice in one round");
    // A round that never ends stops at twice the memory limit: 16 MiB for 8.
    let small = Limits { memory_bytes: 8 << 20, ..Limits::default() };
    refused_round(small, "endless", "one round of changes holds more than 16777216 bytes (counting 128 bytes per entry)");
}

#[test]
fn a_round_and_restore_within_the_limits_pass_at_the_chunk_size_a_job_uses() {
    // 1,024 keys of 100 KiB: 100 MiB in a round, within twice 64 MiB, and restored
    // into 64 MiB in chunks of 4 MiB (in one chunk, it would not fit).
    let limits = Limits { call_timeout: Duration::from_secs(10), ..Limits::default() };
    let mut op = bad_output(limits, &[("state", "many:1024:100")]);
    let changes = op.snapshot_round(0, |_| Ok(0)).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(changes.size(), (1024, 1024 * (11 + (100 << 10))));
    let mut fresh = bad_output(limits, &[("state", "many:1024:100")]);
    let mut chunks = weir::chunk::RestoreChunks::default();
    let mut restored = 0;
    for (_, key, value) in changes.entries() {
        if let Some(full) = chunks.push(key, value.expect("no removal")) {
            assert!(full.data_len() <= weir::chunk::CHUNK_BYTES as usize);
            restored += full.len();
            fresh.restore(&full).unwrap_or_else(|err| panic!("{err}"));
        }
    }
    let last = chunks.finish().expect("a last chunk");
    fresh.restore(&last).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(restored + last.len(), 1024);
}

/// A log rate of 10 lines a second (bursts of 100), and time for a flood of lines.
fn ten_lines_a_second() -> Limits {
    Limits {
        log: LogLimits {
            lines_per_sec: 10,
            bytes_per_sec: 1 << 20,
        },
        call_timeout: Duration::from_secs(10),
        ..Limits::default()
    }
}

#[test]
fn plugin_output_over_the_log_rate_is_dropped_and_counted() {
    let limits = ten_lines_a_second();
    let metrics = weir::metrics::Metrics::new();
    let mut op = bad_output(limits, &[("lines", "500")]);
    op.count_log_drops(metrics.plugin_log("bad-output", 0));
    op.process(&batch(&[(None, "flood", 1)])).unwrap_or_else(|err| panic!("{err}"));
    // 500 stdout lines, 500 log messages and the long line, against a burst of
    // 100 lines and a refill of 10 a second while the call runs.
    let (lines, bytes) = op.log_dropped();
    assert!((850..=901).contains(&lines), "dropped {lines} lines");
    assert!(bytes >= 850 * 4095, "dropped {bytes} bytes");
    let text = metrics.render();
    let series = format!(
        "weir_plugin_log_dropped_lines_total{{operator=\"bad-output\",subtask=\"0\"}} {lines}"
    );
    assert!(text.contains(&series), "{series} missing from:\n{text}");
}

/// The next instance of a label (its subtask's next attempt) takes up the budget its
/// predecessor left, so a plugin that floods the log and fails every attempt is held to
/// the rate; another subtask's budget is its own.
#[test]
fn a_restarted_instance_gets_what_is_left_of_its_log_budget() {
    let limits = ten_lines_a_second();
    let plugin = load("bad-output");
    let flood = |label: &str| {
        let mut op = OperatorInstance::new(&plugin, limits, config(&[("lines", "500")]), label.into())
            .unwrap_or_else(|err| panic!("{err}"));
        op.process(&batch(&[(None, "flood", 1)])).unwrap_or_else(|err| panic!("{err}"));
        op.log_dropped().0
    };
    let first = flood("bad-output[0]");
    assert!((850..=901).contains(&first), "dropped {first} lines");
    // The gate's count runs on: 1 001 more lines against a refill of 10 a second.
    let both = flood("bad-output[0]");
    let second = both.saturating_sub(first);
    assert!(second >= 900, "the second instance dropped {second} of 1001 lines");
    let other = flood("bad-output[1]");
    assert!((850..=901).contains(&other), "another subtask dropped {other} lines");
}

/// Reads `path` for an assertion message.
fn read_log(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn a_job_dead_letters_the_records_whose_output_the_host_refuses() {
    const PARTITIONS: i32 = 2;
    let job = support::job::job_dir("refused-output");
    let dlq = support::unique_name("refused-output-dlq");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    support::create_topic(&dlq, 1);
    let plugin = plugin_path("bad-output");
    let sink_extra = format!("dead_letter_topic = \"{dlq}\"\n[restarts]\nmax = 20");
    job.one_operator(2, 200, ("emit", &plugin, true), "", &sink_extra);
    let refused = [
        "amplify".to_string(),
        format!("timestamp:{}", i64::MIN),
        "timestamp:-1".to_string(),
        format!("timestamp:{}", i64::MAX),
    ];
    let input: Vec<support::clicks::Input> = (0..400)
        .map(|i| {
            let value = match i % 100 {
                50 => refused[i / 100].clone(),
                _ => format!("record-{i}"),
            };
            ((i % 2) as i32, format!("k{i}").into_bytes(), value.into_bytes(), 1_000 + i as i64)
        })
        .collect();
    support::produce(&job.input, &input);

    let log = job.dir.path().join("weir.log");
    let mut child = support::job::start(&job.path(), &log, &[]);
    let good: Vec<_> = input.iter().filter(|r| r.2.starts_with(b"record-")).collect();
    let mut tail = support::Tail::new(&job.output, PARTITIONS);
    assert!(tail.until(good.len(), Duration::from_secs(120)), "{}", read_log(&log));
    let status = support::job::terminate(&mut child, Duration::from_secs(60));
    assert!(status.success(), "{}", read_log(&log));

    let committed = support::read_to_end(&job.output, PARTITIONS, support::Isolation::ReadCommitted);
    let mut actual: Vec<(Vec<u8>, Vec<u8>)> =
        committed.into_iter().map(|(_, k, v)| (k.unwrap_or_default(), v)).collect();
    let mut expected: Vec<(Vec<u8>, Vec<u8>)> = good.iter().map(|r| (r.1.clone(), r.2.clone())).collect();
    actual.sort();
    expected.sort();
    assert!(actual == expected, "the output must be exactly the accepted records");

    let letters = support::read_to_end(&dlq, 1, support::Isolation::ReadCommitted);
    let mut lettered: Vec<String> =
        letters.iter().map(|(_, _, v)| String::from_utf8_lossy(v).into_owned()).collect();
    let mut want = refused.to_vec();
    lettered.sort();
    want.sort();
    assert_eq!(lettered, want, "each refused record exactly once in the dead-letter topic");
    let text = read_log(&log);
    assert!(text.contains("max_output_mb") && text.contains("bad-output.wasm"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
}
