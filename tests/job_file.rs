//! The job file: a full file parses into what it says, and every mistake a user can make is an
//! error naming the file, the key (with its line where toml knows it) and what to do.

use std::collections::BTreeMap;
use std::path::Path;

use weir::job::{self, Delivery, Job, JobErrorKind, Start};

/// A complete job file: every key of the format, optional ones included.
const FULL: &str = r#"name = "clicks-per-user"
parallelism = 2
checkpoint_interval_ms = 1000
state_dir = "state/clicks"

[source]
brokers = "127.0.0.1:9092"
topic = "clicks"
start = "latest"
max_out_of_orderness_ms = 250
idle_timeout_ms = 30000

[source.kafka]
"fetch.min.bytes" = 1
"client.rack" = "r1"

[[operators]]
name = "parse"
plugin = "plugins/parse.wasm"

[[operators]]
name = "count"
plugin = "plugins/window-count.wasm"
key_by = true
memory_limit_mb = 128
call_timeout_ms = 500

[operators.config]
window_ms = 10000
emit_empty = false
ratio = 0.5
label = "per-user"

[sink]
brokers = "127.0.0.1:9092"
topic = "counts"
delivery = "exactly-once"
dead_letter_topic = "clicks-dlq"

[sink.kafka]
"linger.ms" = "5"
"transaction.timeout.ms" = 30000

[restarts]
max = 3
window_ms = 60000
backoff_initial_ms = 100
backoff_max_ms = 5000
"#;

/// The smallest valid job file: required keys only.
const MINIMAL: &str = r#"name = "minimal"
parallelism = 1
checkpoint_interval_ms = 1000
state_dir = "/var/lib/weir/minimal"

[source]
brokers = "127.0.0.1:9092"
topic = "clicks"

[[operators]]
name = "count"
plugin = "plugins/window-count.wasm"

[sink]
brokers = "127.0.0.1:9092"
topic = "counts"
"#;

/// A directory holding the plugins the job files above name.
fn job_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    std::fs::create_dir(dir.path().join("plugins")).unwrap();
    for plugin in ["parse.wasm", "window-count.wasm"] {
        std::fs::write(dir.path().join("plugins").join(plugin), b"\0asm").unwrap();
    }
    dir
}

fn parse(text: &str) -> Result<Job, job::JobError> {
    let dir = job_dir();
    job::parse(text, dir.path())
}

/// The error message for `text`, which must not parse.
fn error_of(text: &str) -> String {
    match parse(text) {
        Ok(job) => panic!("expected an error, parsed {job:#?}"),
        Err(error) => error.to_string(),
    }
}

/// `text` with the line `old` replaced by `new` (which may be several lines or empty).
fn edit(text: &str, old: &str, new: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == old)
        .unwrap_or_else(|| panic!("no line `{old}`"));
    let mut out: Vec<&str> = lines[..at].to_vec();
    if !new.is_empty() {
        out.extend(new.lines());
    }
    out.extend(&lines[at + 1..]);
    out.join("\n") + "\n"
}

/// The 1-based line of the first line equal to `line` in `text`.
fn line_of(text: &str, line: &str) -> usize {
    text.lines()
        .position(|l| l == line)
        .expect("the line is in the text")
        + 1
}

fn assert_contains(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "`{part}` not in:\n{message}");
    }
}

#[test]
fn full_file_parses_into_what_it_says() {
    let dir = job_dir();
    let path = dir.path().join("clicks.toml");
    std::fs::write(&path, FULL).unwrap();
    let job = job::load(&path).expect("the full job file is valid");
    let base = std::path::absolute(dir.path()).unwrap();

    assert_eq!(job.name, "clicks-per-user");
    assert_eq!(job.parallelism, 2);
    assert_eq!(job.checkpoint_interval_ms, 1000);
    assert_eq!(job.checkpoint_interval(), std::time::Duration::from_secs(1));
    assert_eq!(job.state_dir, base.join("state/clicks"));

    assert_eq!(job.sources[0].brokers, "127.0.0.1:9092");
    assert_eq!(job.sources[0].topic, "clicks");
    assert_eq!(job.sources[0].start, Start::Latest);
    assert_eq!(job.sources[0].max_out_of_orderness_ms, 250);
    assert_eq!(job.sources[0].idle_timeout(), Some(std::time::Duration::from_secs(30)));
    let source_kafka: BTreeMap<String, String> = [("client.rack", "r1"), ("fetch.min.bytes", "1")]
        .map(|(k, v)| (k.into(), v.into()))
        .into();
    assert_eq!(job.sources[0].kafka, source_kafka);

    let names: Vec<&str> = job.operators.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["parse", "count"]);
    let parse = &job.operators[0];
    assert_eq!(parse.plugin, base.join("plugins/parse.wasm"));
    assert!(!parse.key_by);
    assert_eq!(parse.memory_limit_mb, 64);
    assert_eq!(parse.call_timeout_ms, 1000);
    assert!(parse.config.is_empty());
    let count = &job.operators[1];
    assert_eq!(count.plugin, base.join("plugins/window-count.wasm"));
    assert!(count.key_by);
    assert_eq!(count.memory_limit_mb, 128);
    assert_eq!(count.memory_limit_bytes(), 128 << 20);
    assert_eq!(count.call_timeout_ms, 500);
    let config: BTreeMap<String, String> = [
        ("emit_empty", "false"),
        ("label", "per-user"),
        ("ratio", "0.5"),
        ("window_ms", "10000"),
    ]
    .map(|(k, v)| (k.into(), v.into()))
    .into();
    assert_eq!(count.config, config);

    assert_eq!(job.producer.brokers, "127.0.0.1:9092");
    assert_eq!(job.sinks[0].topic, "counts");
    assert_eq!(job.producer.delivery, Delivery::ExactlyOnce);
    assert_eq!(job.producer.dead_letter_topic.as_deref(), Some("clicks-dlq"));
    assert_eq!(job.producer.kafka["linger.ms"], "5");
    assert_eq!(job.producer.kafka["transaction.timeout.ms"], "30000");

    assert_eq!(job.restarts.max, 3);
    assert_eq!(job.restarts.window_ms, 60_000);
    assert_eq!(job.restarts.backoff_initial_ms, 100);
    assert_eq!(job.restarts.backoff_max_ms, 5000);
}

#[test]
fn minimal_file_gets_the_documented_defaults() {
    let job = parse(MINIMAL).expect("the minimal job file is valid");
    assert_eq!(job.state_dir, Path::new("/var/lib/weir/minimal"));
    assert_eq!(job.sources[0].start, Start::Earliest);
    assert_eq!(job.sources[0].max_out_of_orderness_ms, 0);
    assert_eq!(job.sources[0].idle_timeout_ms, None, "no partition is ever idle unless asked");
    assert!(job.sources[0].kafka.is_empty());
    let op = &job.operators[0];
    assert!(!op.key_by);
    assert_eq!((op.memory_limit_mb, op.call_timeout_ms), (64, 1000));
    assert!(op.config.is_empty());
    assert_eq!(job.producer.delivery, Delivery::ExactlyOnce);
    assert_eq!(job.producer.dead_letter_topic, None);
    assert!(job.producer.kafka.is_empty());
    assert_eq!(job.restarts, job::Restarts::default());
    assert!(!job.scale_out, "one process unless asked");
    assert_eq!(
        (
            job.restarts.max,
            job.restarts.window_ms,
            job.restarts.backoff_initial_ms,
            job.restarts.backoff_max_ms
        ),
        (5, 600_000, 500, 30_000)
    );
}

#[test]
fn at_least_once_delivery_is_accepted() {
    let text = edit(
        FULL,
        r#"delivery = "exactly-once""#,
        r#"delivery = "at-least-once""#,
    );
    assert_eq!(parse(&text).unwrap().producer.delivery, Delivery::AtLeastOnce);
}

#[test]
fn scale_out_is_accepted_with_exactly_once_only() {
    let text = edit(FULL, r#"state_dir = "state/clicks""#, "state_dir = \"state/clicks\"\nscale_out = true");
    assert!(parse(&text).unwrap().scale_out);
    let text = edit(&text, r#"delivery = "exactly-once""#, r#"delivery = "at-least-once""#);
    assert_contains(&error_of(&text), &["scale_out = true needs delivery = \"exactly-once\"", "run one process"]);
}

#[test]
fn unknown_keys_are_named_with_their_line() {
    let cases = [
        // (line after which the typo goes, the typo, the key named)
        ("parallelism = 2", "paralelism = 2", "paralelism"),
        (r#"topic = "clicks""#, "partitions = 3", "partitions"),
        (r#"plugin = "plugins/parse.wasm""#, "keyby = true", "keyby"),
        (
            r#"topic = "counts""#,
            "delivery_mode = \"exactly-once\"",
            "delivery_mode",
        ),
        ("max = 3", "jitter = true", "jitter"),
    ];
    for (after, typo, key) in cases {
        let text = edit(FULL, after, &format!("{after}\n{typo}"));
        let message = error_of(&text);
        let line = line_of(&text, typo);
        assert_contains(
            &message,
            &[
                "job file <job text>",
                &format!("unknown field `{key}`"),
                &format!("line {line}"),
            ],
        );
    }
}

#[test]
fn missing_required_keys_are_named() {
    let cases = [
        (r#"name = "minimal""#, "name"),
        ("parallelism = 1", "parallelism"),
        ("checkpoint_interval_ms = 1000", "checkpoint_interval_ms"),
        (r#"state_dir = "/var/lib/weir/minimal""#, "state_dir"),
        (r#"topic = "clicks""#, "topic"),
        (r#"name = "count""#, "name"),
        (r#"plugin = "plugins/window-count.wasm""#, "plugin"),
        (r#"topic = "counts""#, "topic"),
    ];
    for (line, key) in cases {
        let message = error_of(&edit(MINIMAL, line, ""));
        assert_contains(&message, &[&format!("missing field `{key}`")]);
    }
    // `brokers` of [source] and of [sink], told apart by the line toml points at.
    let first_brokers = r#"brokers = "127.0.0.1:9092""#;
    let message = error_of(&edit(MINIMAL, first_brokers, ""));
    assert_contains(&message, &["missing field `brokers`", "[source]"]);

    // Whole tables.
    let without_sink = MINIMAL.split("[sink]").next().unwrap();
    assert_contains(&error_of(without_sink), &["missing [sink]"]);
    let without_source = MINIMAL.replace(
        "[source]\nbrokers = \"127.0.0.1:9092\"\ntopic = \"clicks\"\n",
        "",
    );
    assert_contains(&error_of(&without_source), &["missing [source]"]);
    let without_operators = MINIMAL.replace(
        "[[operators]]\nname = \"count\"\nplugin = \"plugins/window-count.wasm\"\n",
        "",
    );
    assert_contains(
        &error_of(&without_operators),
        &["missing field `operators`"],
    );
}

#[test]
fn bad_enum_values_list_the_accepted_ones() {
    let text = edit(FULL, r#"start = "latest""#, r#"start = "newest""#);
    assert_contains(
        &error_of(&text),
        &[
            "unknown variant `newest`",
            "`earliest`",
            "`latest`",
            &format!("line {}", line_of(&text, r#"start = "newest""#)),
        ],
    );
    let text = edit(
        FULL,
        r#"delivery = "exactly-once""#,
        r#"delivery = "exactly-twice""#,
    );
    assert_contains(
        &error_of(&text),
        &[
            "unknown variant `exactly-twice`",
            "`exactly-once`",
            "`at-least-once`",
        ],
    );
}

#[test]
fn out_of_range_numbers_name_the_key_and_the_range() {
    let cases = [
        (
            "parallelism = 2",
            "parallelism = 0",
            "parallelism = 0 is out of range; use 1..=64",
        ),
        (
            "parallelism = 2",
            "parallelism = 65",
            "parallelism = 65 is out of range",
        ),
        (
            "checkpoint_interval_ms = 1000",
            "checkpoint_interval_ms = 5",
            "use 10..=600000",
        ),
        (
            "memory_limit_mb = 128",
            "memory_limit_mb = 0",
            "memory_limit_mb = 0 is out of range",
        ),
        (
            "call_timeout_ms = 500",
            "call_timeout_ms = 0",
            "call_timeout_ms = 0 is out of range",
        ),
        (
            "idle_timeout_ms = 30000",
            "idle_timeout_ms = 10",
            "idle_timeout_ms = 10 is out of range; use 100..=604800000",
        ),
    ];
    for (old, new, expected) in cases {
        let text = edit(FULL, old, new);
        assert_contains(
            &error_of(&text),
            &[expected, &format!("line {}", line_of(&text, new))],
        );
    }
    let text = edit(FULL, "parallelism = 2", "parallelism = -1");
    assert_contains(&error_of(&text), &["parallelism", "-1"]);
}

#[test]
fn names_are_checked() {
    let text = edit(FULL, r#"name = "clicks-per-user""#, r#"name = """#);
    assert_contains(&error_of(&text), &["job name is empty", "line 1"]);
    let text = edit(
        FULL,
        r#"name = "clicks-per-user""#,
        r#"name = "clicks per user""#,
    );
    assert_contains(
        &error_of(&text),
        &["job name `clicks per user` contains ' '", "letters, digits"],
    );
    let text = edit(FULL, r#"name = "count""#, r#"name = "count/1""#);
    assert_contains(&error_of(&text), &["operator name `count/1` contains '/'"]);
    let text = edit(FULL, r#"topic = "counts""#, r#"topic = "counts!""#);
    assert_contains(&error_of(&text), &["topic `counts!` contains '!'"]);
}

#[test]
fn duplicate_operator_names_are_refused() {
    let text = edit(FULL, r#"name = "count""#, r#"name = "parse""#);
    let error = parse(&text).expect_err("two operators named parse");
    assert!(
        matches!(&error.kind, JobErrorKind::DuplicateOperator { name } if name == "parse"),
        "{error:?}"
    );
    assert_contains(&error.to_string(), &["two operators are named `parse`"]);
}

#[test]
fn empty_operator_chain_is_refused() {
    let text = MINIMAL.replace(
        "[[operators]]\nname = \"count\"\nplugin = \"plugins/window-count.wasm\"\n",
        "",
    );
    // `operators = []` must be a top-level key, before any table.
    let state_dir = r#"state_dir = "/var/lib/weir/minimal""#;
    let text = edit(&text, state_dir, &format!("{state_dir}\noperators = []"));
    assert_contains(&error_of(&text), &["at least one [[operators]]"]);
}

#[test]
fn nonexistent_plugin_names_the_operator_and_the_resolved_path() {
    let dir = job_dir();
    let text = edit(
        FULL,
        r#"plugin = "plugins/window-count.wasm""#,
        r#"plugin = "plugins/missing.wasm""#,
    );
    let error = job::parse(&text, dir.path()).expect_err("the plugin does not exist");
    let resolved = std::path::absolute(dir.path())
        .unwrap()
        .join("plugins/missing.wasm");
    assert!(
        matches!(&error.kind, JobErrorKind::Plugin { operator, path, .. }
        if operator == "count" && *path == resolved),
        "{error:?}"
    );
    assert_contains(
        &error.to_string(),
        &[
            "operator `count`",
            &resolved.display().to_string(),
            "does not exist",
            "relative to the job file's directory",
        ],
    );

    let text = edit(
        FULL,
        r#"plugin = "plugins/window-count.wasm""#,
        r#"plugin = "plugins""#,
    );
    assert_contains(&error_of(&text), &["operator `count`", "is not a file"]);
}

#[test]
fn forced_kafka_properties_are_refused_with_their_line_and_the_reason() {
    let cases = [
        ("[source.kafka]", "isolation.level", "read_committed"),
        ("[source.kafka]", "enable.auto.commit", "inside its checkpoint transactions"),
        ("[source.kafka]", "group.id", "job's name"),
        ("[source.kafka]", "bootstrap.servers", "[source] brokers"),
        ("[source.kafka]", "auto.offset.reset", "never skip records"),
        ("[source.kafka]", "topic.auto.offset.reset", "never skip records"),
        ("[source.kafka]", "enable.partition.eof", "end-of-partition"),
        ("[sink.kafka]", "transactional.id", "fences zombie"),
        ("[sink.kafka]", "enable.idempotence", "weir sets it"),
        ("[sink.kafka]", "acks", "acks=all"),
        ("[sink.kafka]", "topic.acks", "acks=all"),
        ("[sink.kafka]", "allow.auto.create.topics", "behind the job's back"),
    ];
    for (table, key, why) in cases {
        let text = edit(FULL, table, &format!("{table}\n\"{key}\" = \"x\""));
        let line = line_of(&text, &format!("\"{key}\" = \"x\""));
        let message = error_of(&text);
        assert_contains(
            &message,
            &[&format!("{table} `{key}` cannot be set"), why, "remove it", &format!("line {line}")],
        );
    }
}

#[test]
fn every_property_weir_forces_is_refused_and_wins_in_the_built_client() {
    let user = |key: &str| -> BTreeMap<String, String> { [(key.to_string(), "x".to_string())].into() };
    for forced in weir::source::config::FORCED {
        let text = edit(FULL, "[source.kafka]", &format!("[source.kafka]\n\"{}\" = 1", forced.key));
        assert_contains(&error_of(&text), &[forced.key, forced.why]);
        let config = weir::source::config::client_config("b:9092", "job", &user(forced.key));
        assert_ne!(config.get(forced.key), Some("x"), "{} reached the consumer", forced.key);
    }
    for forced in weir::sink::config::FORCED {
        let text = edit(FULL, "[sink.kafka]", &format!("[sink.kafka]\n\"{}\" = 1", forced.key));
        assert_contains(&error_of(&text), &[forced.key, forced.why]);
        for transactional in [true, false] {
            let config = weir::sink::config::client_config("job", "b:9092", transactional, &user(forced.key));
            assert_ne!(config.get(forced.key), Some("x"), "{} reached the producer", forced.key);
        }
    }
}

#[test]
fn tunable_defaults_yield_to_the_job_file_in_the_built_clients() {
    use rdkafka::consumer::BaseConsumer;
    use rdkafka::producer::BaseProducer;

    let defaults = parse(MINIMAL).unwrap();
    let sink = |job: &Job| weir::sink::config::client_config(&job.name, &job.producer.brokers, true, &job.producer.kafka);
    let source = |job: &Job| weir::source::config::client_config(&job.sources[0].brokers, &job.name, &job.sources[0].kafka);
    let producer = sink(&defaults);
    assert_eq!(producer.get("linger.ms"), Some("5"));
    assert_eq!(producer.get("partitioner"), Some("murmur2_random"));
    assert_eq!(producer.get("delivery.report.only.error"), Some("true"));
    assert_eq!(source(&defaults).get("fetch.queue.backoff.ms"), Some("10"));

    let text = edit(
        FULL,
        "[sink.kafka]",
        "[sink.kafka]\n\"partitioner\" = \"consistent_random\"\n\"delivery.report.only.error\" = false",
    );
    let text = edit(&text, r#""linger.ms" = "5""#, r#""linger.ms" = 50"#);
    let text = edit(&text, "[source.kafka]", "[source.kafka]\n\"fetch.queue.backoff.ms\" = 100");
    let job = parse(&text).unwrap();
    let producer = sink(&job);
    assert_eq!(producer.get("linger.ms"), Some("50"));
    assert_eq!(producer.get("partitioner"), Some("consistent_random"));
    assert_eq!(producer.get("delivery.report.only.error"), Some("false"));
    assert_eq!(producer.get("transaction.timeout.ms"), Some("30000"));
    assert_eq!((producer.get("acks"), producer.get("transactional.id")), (Some("all"), Some("clicks-per-user")));
    assert_eq!(producer.get("allow.auto.create.topics"), Some("false"));
    let consumer = source(&job);
    assert_eq!(consumer.get("fetch.queue.backoff.ms"), Some("100"));
    assert_eq!(consumer.get("client.rack"), Some("r1"));
    assert_eq!(consumer.get("auto.offset.reset"), Some("error"));
    assert_eq!(consumer.get("enable.partition.eof"), Some("false"));

    // librdkafka accepts the result (creating a client reaches no broker).
    producer.create::<BaseProducer>().expect("the producer's configuration is valid");
    consumer.create::<BaseConsumer>().expect("the consumer's configuration is valid");
}

#[test]
fn dotted_kafka_property_without_quotes_says_to_quote_it() {
    let text = edit(
        FULL,
        "[source.kafka]",
        "[source.kafka]\nfetch.max.bytes = 1000",
    );
    assert_contains(
        &error_of(&text),
        &["must be quoted", "\"fetch.min.bytes\" = 1"],
    );
}

#[test]
fn checkpoint_interval_must_fit_in_the_transaction_timeout() {
    // 30000 ms timeout in FULL: an interval of 20 s leaves no room for the commit.
    let text = edit(
        FULL,
        "checkpoint_interval_ms = 1000",
        "checkpoint_interval_ms = 20000",
    );
    assert_contains(
        &error_of(&text),
        &[
            "checkpoint_interval_ms = 20000",
            "transaction.timeout.ms (30000)",
        ],
    );
    // Without the property, librdkafka's default of 60 s applies.
    let text = edit(
        MINIMAL,
        "checkpoint_interval_ms = 1000",
        "checkpoint_interval_ms = 45000",
    );
    assert_contains(&error_of(&text), &["(60000, librdkafka's default)"]);
    // At-least-once has no transactions.
    let text = edit(
        &text,
        r#"topic = "counts""#,
        "topic = \"counts\"\ndelivery = \"at-least-once\"",
    );
    assert_eq!(parse(&text).unwrap().checkpoint_interval_ms, 45000);
}

/// A call that outlives the transaction has the broker abort it, which fences the job.
#[test]
fn a_calls_deadline_must_fit_in_the_transaction_timeout() {
    let text = edit(FULL, "call_timeout_ms = 500", "call_timeout_ms = 20000");
    assert_contains(&error_of(&text), &["operator `count` has call_timeout_ms = 20000", "transaction.timeout.ms (30000)"]);
    let text = edit(&text, r#""transaction.timeout.ms" = 30000"#, r#""transaction.timeout.ms" = 40000"#);
    assert_eq!(parse(&text).unwrap().operators[1].call_timeout_ms, 20000);
}

#[test]
fn reading_back_the_source_topic_is_refused() {
    let text = edit(FULL, r#"topic = "counts""#, r#"topic = "clicks""#);
    assert_contains(
        &error_of(&text),
        &["[sink] topic is `clicks`", "read its own output"],
    );
    let text = edit(
        FULL,
        r#"dead_letter_topic = "clicks-dlq""#,
        r#"dead_letter_topic = "clicks""#,
    );
    assert_contains(&error_of(&text), &["dead_letter_topic is `clicks`"]);
}

#[test]
fn syntax_errors_and_unreadable_files_name_the_file() {
    let dir = job_dir();
    let path = dir.path().join("broken.toml");
    std::fs::write(&path, "name = \"x\"\nparallelism = \n").unwrap();
    let message = job::load(&path).expect_err("a syntax error").to_string();
    assert_contains(
        &message,
        &[&format!("job file {}", path.display()), "line 2"],
    );

    let missing = dir.path().join("absent.toml");
    let message = job::load(&missing).expect_err("no such file").to_string();
    assert_contains(
        &message,
        &[&format!("job file {}", missing.display()), "cannot read it"],
    );
}

/// A graph job: clicks enriched from a users table, then counted per country; a router
/// sends the enriched clicks to two topics and late ones to a third.
const GRAPH: &str = r#"name = "enrich"
parallelism = 2
checkpoint_interval_ms = 1000
state_dir = "state"

[[sources]]
name = "clicks"
brokers = "127.0.0.1:9092"
topic = "clicks"

[[sources]]
name = "users"
brokers = "127.0.0.1:9092"
topic = "users"
table = true

[[operators]]
name = "enrich"
plugin = "plugins/parse.wasm"
key_by = true
inputs = ["clicks", "users"]

[[operators]]
name = "route"
plugin = "plugins/parse.wasm"
inputs = ["enrich"]
outputs = ["eu", "us", "late"]

[[operators]]
name = "count"
plugin = "plugins/window-count.wasm"
key_by = true
inputs = ["route/eu", "route/us"]

[[sinks]]
name = "eu"
topic = "clicks-eu"
from = ["route"]

[[sinks]]
name = "us"
topic = "clicks-us"
from = ["route/us"]

[[sinks]]
name = "late"
topic = "clicks-late"
from = ["route/late"]

[[sinks]]
name = "counts"
topic = "counts"
from = ["count"]

[producer]
brokers = "127.0.0.1:9092"
dead_letter_topic = "dlq"
"#;

#[test]
fn a_graph_job_parses_into_its_sources_operators_and_sinks() {
    let job = parse(GRAPH).expect("the graph job is valid");
    let names = |items: Vec<&str>| items.into_iter().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(job.sources.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["clicks", "users"]);
    assert!(job.sources[1].table && !job.sources[0].table);
    assert_eq!(job.operators[0].inputs, names(vec!["clicks", "users"]));
    assert_eq!(job.operators[0].outputs, names(vec!["out"]));
    assert_eq!(job.operators[1].outputs, names(vec!["eu", "us", "late"]));
    assert_eq!(job.port("route/late"), Some(job::Port::Operator { stage: 1, output: 2 }));
    assert_eq!(job.port("route"), Some(job::Port::Operator { stage: 1, output: 0 }));
    assert_eq!(job.port("users"), Some(job::Port::Source(1)));
    assert_eq!(job.port("route/none"), None);
    let readers = job.readers_of(job::Port::Operator { stage: 1, output: 0 });
    assert_eq!(readers, [job::Input::Operator { stage: 2, input: 0 }, job::Input::Sink(0)]);
    assert_eq!(job.sinks.iter().map(|s| s.topic.as_str()).collect::<Vec<_>>(), ["clicks-eu", "clicks-us", "clicks-late", "counts"]);
    assert_eq!(job.producer.dead_letter_topic.as_deref(), Some("dlq"));
    assert_eq!(job.producer.delivery, Delivery::ExactlyOnce);
}

#[test]
fn a_chain_job_is_the_graph_of_its_chain() {
    let job = parse(FULL).expect("the full job file is valid");
    assert_eq!(job.sources.len(), 1);
    assert_eq!(job.sources[0].name, "source");
    assert_eq!(job.operators[0].inputs, ["source"]);
    assert_eq!(job.operators[1].inputs, [job.operators[0].name.clone()]);
    assert_eq!(job.sinks.len(), 1);
    assert_eq!(job.sinks[0].from, [job.operators.last().unwrap().name.clone()]);
}

#[test]
fn graph_errors_name_the_line_and_what_to_do() {
    let at = |line: &str| format!("line {}:", line_of(GRAPH, line));
    let cases: Vec<(String, Vec<String>)> = vec![
        // An unknown input, and an unknown output of a known operator.
        (GRAPH.replace(r#"inputs = ["clicks", "users"]"#, r#"inputs = ["clicks", "userz"]"#), vec!["`userz`, which is no source or operator".into()]),
        (GRAPH.replace(r#"from = ["route/late"]"#, r#"from = ["route/lat"]"#), vec!["operator `route` has no output `lat`".into()]),
        // A name used twice across sources, operators and sinks.
        (GRAPH.replace("name = \"counts\"", "name = \"enrich\""), vec!["two entries are named `enrich`".into()]),
        // A cycle: enrich reads count, which reads enrich through the router.
        (GRAPH.replace(r#"inputs = ["clicks", "users"]"#, r#"inputs = ["clicks", "users", "count"]"#), vec!["in a cycle".into(), "enrich".into()]),
        // An output nobody reads, and a source nobody reads.
        (GRAPH.replace(r#"from = ["route/late"]"#, r#"from = ["route/us"]"#), vec!["output `late` of operator `route` is read by no operator or sink".into()]),
        (GRAPH.replace(r#"inputs = ["clicks", "users"]"#, r#"inputs = ["clicks"]"#), vec!["source `users` is read by no operator or sink".into()]),
        // A table read by an operator that is not key_by.
        (GRAPH.replacen("key_by = true\ninputs = [\"clicks\", \"users\"]", "inputs = [\"clicks\", \"users\"]", 1), vec!["reads table `users` but is not key_by".into()]),
        // A sink writing a topic the job reads.
        (GRAPH.replace(r#"topic = "clicks-late""#, r#"topic = "users""#), vec!["`users`, a topic the job reads".into()]),
        // An operator without inputs.
        (GRAPH.replace(r#"inputs = ["enrich"]"#, ""), vec!["`route` has no inputs".into()]),
    ];
    for (text, parts) in &cases {
        let message = error_of(text);
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        assert_contains(&message, &parts);
    }
    // The line is the entry's: the operator with the unknown input, the duplicate sink.
    // The line is that of the entry at fault: the first [[operators]], here.
    let message = error_of(&cases[0].0);
    assert!(message.contains(&at("[[operators]]")), "{message}");

    let mixed = format!("{GRAPH}\n[sink]\nbrokers = \"127.0.0.1:9092\"\ntopic = \"x\"\n");
    assert_contains(&error_of(&mixed), &["mixes the chain form"]);
    let no_producer = GRAPH.replace("[producer]\nbrokers = \"127.0.0.1:9092\"\ndead_letter_topic = \"dlq\"\n", "");
    assert_contains(&error_of(&no_producer), &["needs a [producer] table"]);
    let chain_with_inputs = edit(MINIMAL, r#"plugin = "plugins/window-count.wasm""#, "plugin = \"plugins/window-count.wasm\"\ninputs = [\"x\"]");
    assert_contains(&error_of(&chain_with_inputs), &["belong to the graph form"]);
    let other_cluster = GRAPH.replacen("brokers = \"127.0.0.1:9092\"\ntopic = \"users\"", "brokers = \"10.0.0.1:9092\"\ntopic = \"users\"", 1);
    assert_contains(&error_of(&other_cluster), &["all sources are on one cluster"]);
    let latest_table = GRAPH.replace("table = true", "table = true\nstart = \"latest\"");
    assert_contains(&error_of(&latest_table), &["a table is read from its start"]);
    // Several sources scale out when co-partitioned, which only the brokers can tell.
    let scaled = GRAPH.replace("state_dir = \"state\"", "state_dir = \"state\"\nscale_out = true");
    assert!(parse(&scaled).expect("a graph may scale out").scale_out);
}
