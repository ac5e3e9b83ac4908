//! Operators of both worlds on real components: a weir:operator@0.3 plugin
//! (`bad-ports`) gets its inputs' and outputs' names and the input of each batch, and
//! routes records to outputs, which the host splits and checks as they cross; a 0.2
//! plugin (`bad-output`, built against `wit/operator.wit`) runs unchanged as an
//! operator with one input and one output, and is refused any other shape.

use crate::operator_common as common;

use std::path::Path;
use std::process::Output;

use common::{batch, cache_dir, config, load, plugin_path, records, tight_limits};
use weir::batch::Batch;
use weir::operator::{
    Emitted, OperatorError, OperatorInstance, OutputsError, PluginError, Ports, World,
};

fn ports(inputs: &[&str], outputs: &[&str]) -> Ports {
    let names = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
    Ports {
        inputs: names(inputs),
        outputs: names(outputs),
    }
}

/// `bad-ports` reading `clicks` and `views`, writing `hits` and `misses`.
fn two_by_two(entries: &[(&str, &str)]) -> OperatorInstance {
    OperatorInstance::with_ports(
        &load("bad-ports"),
        tight_limits(),
        config(entries),
        ports(&["clicks", "views"], &["hits", "misses"]),
        "ports[0]".into(),
    )
    .unwrap_or_else(|err| panic!("{err}"))
}

fn values(batch: &Batch) -> Vec<String> {
    records(batch).into_iter().map(|(_, value, _)| value).collect()
}

fn outputs_of(emitted: &Emitted) -> Vec<usize> {
    (0..emitted.len()).map(|i| emitted.output_of(i)).collect()
}

fn assert_names_plugin(err: &impl std::fmt::Display, plugin: &str) {
    let path = plugin_path(plugin).display().to_string();
    assert!(err.to_string().contains(&path), "the message must name {path}: {err}");
}

#[test]
fn each_plugin_reports_the_world_it_targets() {
    let info = load("bad-ports").info().clone();
    assert_eq!(info.world, World::V0_3);
    assert_eq!(info.world.to_string(), "weir:operator@0.3.0");
    assert_eq!(info.version.as_ref(), Some(World::V0_3.version()));
    let info = load("bad-output").info().clone();
    assert_eq!(info.world, World::V0_2);
    assert_eq!(info.world.to_string(), "weir:operator@0.2.0");
    assert_eq!(info.version.as_ref(), Some(World::V0_2.version()));
}

#[test]
fn a_0_3_plugin_gets_the_names_and_the_input_of_each_batch() {
    let mut op = two_by_two(&[]);
    let emitted = op
        .process_input(1, &batch(&[(None, "a", 1), (None, "b", 2)]))
        .unwrap();
    assert_eq!(values(emitted.batch()), ["1:views:a", "1:views:b"]);
    let emitted = op.process_input(0, &batch(&[(None, "c", 3)])).unwrap();
    assert_eq!(values(emitted.batch()), ["0:clicks:c"]);
    // The old call is input 0.
    assert_eq!(values(&op.process(&batch(&[(None, "d", 4)])).unwrap()), ["0:clicks:d"]);

    // One record per output, each to its own, named as init was told.
    let fired = op.on_watermark_emitted(50).unwrap();
    assert_eq!(values(fired.batch()), ["50:hits", "50:misses"]);
    assert_eq!(outputs_of(&fired), [0, 1]);
    assert_eq!(values(&op.on_watermark(60).unwrap()), ["60:hits", "60:misses"]);
}

#[test]
fn emitted_records_split_by_output_in_order() {
    let mut op = two_by_two(&[]);
    let input = batch(&[
        (Some("1"), "a", 1),
        (Some("0"), "b", 2),
        (None, "c", 3),
        (Some("1"), "d", 4),
    ]);
    let emitted = op.process_input(0, &input).unwrap();
    assert_eq!(outputs_of(&emitted), [1, 0, 0, 1]);
    let split = emitted.into_outputs(2);
    assert_eq!(split.len(), 2);
    assert_eq!(
        records(&split[0]),
        [
            (Some("0".into()), "0:clicks:b".into(), 2),
            (None, "0:clicks:c".into(), 3)
        ]
    );
    assert_eq!(
        records(&split[1]),
        [
            (Some("1".into()), "0:clicks:a".into(), 1),
            (Some("1".into()), "0:clicks:d".into(), 4)
        ]
    );
    // Every output's records, in the guest's order, for a single-output caller.
    assert_eq!(
        values(&op.process(&input).unwrap()),
        ["0:clicks:a", "0:clicks:b", "0:clicks:c", "0:clicks:d"]
    );
}

#[test]
fn an_empty_outputs_list_sends_every_record_to_the_first_output() {
    let mut op = two_by_two(&[("mode", "implicit")]);
    let emitted = op
        .process_input(1, &batch(&[(None, "a", 1), (Some("0"), "b", 2)]))
        .unwrap();
    assert_eq!(outputs_of(&emitted), [0, 0]);
    let split = emitted.into_outputs(2);
    assert_eq!(values(&split[0]), ["1:views:a", "1:views:b"]);
    assert!(split[1].is_empty());
}

/// Records as `common::batch` takes them.
type Records<'a> = Vec<(Option<&'a str>, &'a str, i64)>;

#[test]
fn malformed_outputs_lists_are_refused_naming_the_plugin() {
    let cases: [(&str, Records<'_>, OutputsError); 4] = [
        ("short", vec![(None, "a", 1), (None, "b", 2)], OutputsError::Length { records: 2, outputs: 1 }),
        ("long", vec![(None, "a", 1)], OutputsError::Length { records: 1, outputs: 2 }),
        ("extra", vec![], OutputsError::Length { records: 0, outputs: 1 }),
        (
            "exact",
            vec![(Some("1"), "a", 1), (Some("2"), "b", 2)],
            OutputsError::OutOfRange { index: 1, output: 2, count: 2 },
        ),
    ];
    for (mode, input, expected) in cases {
        let mut op = two_by_two(&[("mode", mode)]);
        let err = op.process_input(0, &batch(&input)).unwrap_err();
        let OperatorError::InvalidOutputs { problem, .. } = &err else {
            panic!("{mode}: {err:?}")
        };
        assert_eq!(*problem, expected, "{mode}");
        assert!(!err.is_trap(), "the guest did not crash: {err}");
        assert_names_plugin(&err, "bad-ports");
        assert!(err.to_string().contains("malformed outputs"), "{err}");
        // The old call checks the same.
        assert!(matches!(op.process(&batch(&input)), Err(OperatorError::InvalidOutputs { .. })), "{mode}");
    }
    // An index past the outputs from on-watermark: one output, two records fired.
    let mut op = OperatorInstance::with_ports(
        &load("bad-ports"),
        tight_limits(),
        vec![],
        ports(&["in"], &["out"]),
        "ports[0]".into(),
    )
    .unwrap();
    assert_eq!(values(&op.on_watermark(1).unwrap()), ["1:out"]);
    let mut op = two_by_two(&[("mode", "long")]);
    let err = op.on_watermark_emitted(1).unwrap_err();
    assert!(
        matches!(err, OperatorError::InvalidOutputs { problem: OutputsError::Length { records: 2, outputs: 3 }, .. }),
        "{err:?}"
    );
}

#[test]
fn a_crashed_0_3_instance_is_started_again_with_the_same_ports() {
    let mut op = two_by_two(&[]);
    let err = op.process_input(1, &batch(&[(None, "panic", 1)])).unwrap_err();
    assert!(err.is_trap(), "{err:?}");
    assert!(err.to_string().contains("bad-ports: panic record on input 1"), "{err}");
    let emitted = op.process_input(1, &batch(&[(Some("1"), "after", 2)])).unwrap();
    assert_eq!(values(emitted.batch()), ["1:views:after"]);
    assert_eq!(outputs_of(&emitted), [1]);
    assert_eq!(values(&op.on_watermark(5).unwrap()), ["5:hits", "5:misses"]);
}

#[test]
fn a_0_3_plugin_may_refuse_the_ports_it_is_given() {
    let err = OperatorInstance::with_ports(
        &load("bad-ports"),
        tight_limits(),
        config(&[("inputs", "2")]),
        Ports::single(),
        "ports[0]".into(),
    )
    .err()
    .expect("init refuses one input");
    assert!(matches!(err, OperatorError::Init { .. }), "{err:?}");
    assert!(err.to_string().contains("bad-ports: needs 2 input(s), got 1 (in)"), "{err}");
    assert_names_plugin(&err, "bad-ports");
}

#[test]
fn a_0_2_plugin_runs_as_one_input_and_one_output() {
    let plugin = load("bad-output");
    let input = batch(&[(Some("k"), "a", 1), (None, "b", 2)]);
    let mut old = OperatorInstance::new(&plugin, tight_limits(), vec![], "output[0]".into()).unwrap();
    let mut named = OperatorInstance::with_ports(
        &plugin,
        tight_limits(),
        vec![],
        ports(&["orders"], &["enriched"]),
        "output[1]".into(),
    )
    .unwrap();
    assert_eq!(named.world(), World::V0_2);
    let emitted = named.process_input(0, &input).unwrap();
    assert_eq!(outputs_of(&emitted), [0, 0]);
    assert_eq!(records(emitted.batch()), records(&old.process(&input).unwrap()));
    let split = emitted.into_outputs(1);
    assert_eq!(records(&split[0]), records(&input));
    assert!(named.on_watermark_emitted(10).unwrap().is_empty());
    // Its outputs are still checked as they cross.
    let err = named.process_input(0, &batch(&[(None, "timestamp:-1", 1)])).unwrap_err();
    assert!(matches!(err, OperatorError::InvalidOutput { .. }), "{err:?}");
}

#[test]
fn a_0_2_plugin_given_several_inputs_or_outputs_is_refused_naming_it() {
    let plugin = load("bad-output");
    for shape in [ports(&["a", "b"], &["out"]), ports(&["in"], &["x", "y"])] {
        let err = OperatorInstance::with_ports(&plugin, tight_limits(), vec![], shape.clone(), "output[0]".into())
            .err()
            .expect("a 0.2 plugin has one input and one output");
        assert!(matches!(err, OperatorError::Init { .. }), "{err:?}");
        assert_names_plugin(&err, "bad-output");
        let message = err.to_string();
        assert!(message.contains("weir:operator@0.2.0") && message.contains("weir:operator@0.3.0"), "{message}");
        assert!(message.contains(&shape.inputs.join(", ")), "{message}");
    }
}

#[test]
fn ports_no_operator_can_have_are_refused() {
    for (shape, says) in [
        (ports(&[], &["out"]), "at least one input"),
        (ports(&["a", "a"], &["out"]), "`a` is there twice"),
    ] {
        let err = OperatorInstance::with_ports(&load("bad-ports"), tight_limits(), vec![], shape, "ports[0]".into())
            .err()
            .expect("refused");
        assert!(err.to_string().contains(says), "{err}");
        assert_names_plugin(&err, "bad-ports");
    }
}

#[test]
fn an_example_plugin_runs_the_same_through_either_call() {
    // window-count, whichever world it is built against today.
    let plugin = load("window-count");
    let start = |label: &str| {
        OperatorInstance::with_ports(&plugin, tight_limits(), config(&[("window_ms", "1000")]), Ports::single(), label.into())
            .unwrap_or_else(|err| panic!("{err}"))
    };
    let (mut old, mut new) = (start("wc[0]"), start("wc[1]"));
    let input = batch(&[(Some("u1"), "x", 10), (Some("u2"), "y", 20), (Some("u1"), "z", 1500)]);
    assert_eq!(records(&old.process(&input).unwrap()), records(new.process_input(0, &input).unwrap().batch()));
    let fired = new.on_watermark_emitted(i64::MAX).unwrap();
    assert!(!fired.is_empty());
    assert!(outputs_of(&fired).iter().all(|&o| o == 0));
    assert_eq!(records(&old.on_watermark(i64::MAX).unwrap()), records(fired.batch()));
}

#[test]
fn a_version_this_host_does_not_speak_is_refused_naming_those_it_does() {
    let path = plugin_path("bad-newer-major");
    let err = weir::operator::Plugin::load(common::runtime(), &path).err().expect("refused");
    assert!(matches!(err, PluginError::IncompatibleVersion { .. }), "{err:?}");
    assert!(
        err.to_string().contains("it speaks weir:operator@0.2.0 and weir:operator@0.3.0"),
        "{err}"
    );
}

fn check(plugin: &Path, args: &[&str]) -> Output {
    crate::support::job::weir()
        .arg("check")
        .arg(plugin)
        .args(args)
        .env("WEIR_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "error")
        .output()
        .expect("run weir check")
}

#[test]
fn weir_check_drives_a_0_3_plugin_with_its_ports_and_counts_each_output() {
    let out = check(
        &plugin_path("bad-ports"),
        &[
            "--inputs", "clicks,views", "--outputs", "hits,misses", "--input", "views",
            "--record", "1=a@5", "--record", "b@6", "--watermark", "100",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "world:    weir:operator@0.3.0 (named inputs and outputs)",
        "init:     ok with 0 config entries, inputs clicks, views, outputs hits, misses",
        r#"process emitted: key "1" value "1:views:a" @5 to misses"#,
        r#"process emitted: key (none) value "1:views:b" @6 to hits"#,
        r#"on-watermark emitted: key (none) value "100:misses" @0 to misses"#,
        "input:    views (2 record(s))",
        "outputs:  hits 2 (process 1, on-watermark 1); misses 2 (process 1, on-watermark 1)",
    ] {
        assert!(stdout.contains(line), "missing `{line}`:\n{stdout}");
    }
}

#[test]
fn weir_check_judges_outputs_and_ports_as_a_job_does() {
    let bad_ports = plugin_path("bad-ports");
    let fails = |plugin: &Path, args: &[&str], says: &str| {
        let out = check(plugin, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].contains(&plugin.display().to_string()), "{}", errors[0]);
        assert!(errors[0].contains(says), "must say `{says}`: {}", errors[0]);
    };
    fails(&bad_ports, &["--outputs", "x,y", "--record", "2=a"], "record 0 goes to output 2");
    fails(&bad_ports, &["--config", "mode=short", "--record", "a", "--record", "b"], "lists 1 output(s) for 2 record(s)");
    fails(&plugin_path("bad-output"), &["--inputs", "a,b"], "has 2 inputs (a, b)");
    // A default run of a 0.2 plugin names its world.
    let out = check(&plugin_path("bad-output"), &["--record", "x"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("world:    weir:operator@0.2.0 (one input, one output)"), "{stdout}");
    assert!(stdout.contains("outputs:  out 1 (process 1, on-watermark 0)"), "{stdout}");
}
