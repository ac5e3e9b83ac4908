//! A misbehaving plugin gets a specific error naming its file, within the
//! configured deadline, and the host keeps working: the same OperatorInstance,
//! now running a fresh guest, answers the next call.

#[path = "operator_common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{batch, config, load, plugin_path, records, tight_limits};
use weir::operator::{Call, Limits, OperatorError, OperatorInstance};

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
    // window-count refuses a snapshot taken with another window size: a guest `Err`.
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
    let snapshot = new("100").snapshot().unwrap();
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
    op.snapshot().unwrap_or_else(|err| panic!("{err}"));
    // And a second runaway call is stopped just the same.
    let started = Instant::now();
    assert!(matches!(
        op.process(&batch(&[])),
        Err(OperatorError::DeadlineExceeded { .. })
    ));
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
    op.snapshot().unwrap_or_else(|err| panic!("{err}"));
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
    let started = Instant::now();
    let err = OperatorInstance::new(
        &load("bad-socket"),
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
