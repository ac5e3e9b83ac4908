//! The source consumer's librdkafka properties: what weir forces for exactly-once
//! reading, and the defaults a job may change in `[source.kafka]`.

use std::collections::BTreeMap;

use rdkafka::consumer::BaseConsumer;

use crate::kafka_config::{self, Context, Forced, Tunable, Value};

/// Set on every consumer of the job's input; `[source.kafka]` may not set them.
pub const FORCED: &[Forced] = &[
    Forced { key: "bootstrap.servers", value: Value::Brokers, why: "weir sets it from [source] brokers" },
    Forced {
        key: "metadata.broker.list",
        value: Value::Brokers,
        why: "it is an alias of bootstrap.servers, which weir sets from [source] brokers",
    },
    Forced {
        key: "group.id",
        value: Value::JobName,
        why: "weir sets it to the job's name, whose committed offsets name its last checkpoint",
    },
    Forced {
        key: "enable.auto.commit",
        value: Value::Fixed("false"),
        why: "weir commits offsets only inside its checkpoint transactions",
    },
    Forced {
        key: "enable.auto.offset.store",
        value: Value::Fixed("false"),
        why: "weir commits offsets only inside its checkpoint transactions",
    },
    Forced {
        key: "isolation.level",
        value: Value::Fixed("read_committed"),
        why: "exactly-once needs read_committed, so records of aborted transactions are never read",
    },
    Forced {
        key: "auto.offset.reset",
        value: Value::Fixed("error"),
        why: "weir sets it to `error`: a checkpointed offset the broker no longer has (retention, a \
              recreated topic) must stop the job, never skip records; where a job without a \
              checkpoint starts is [source] start",
    },
    Forced {
        key: "enable.partition.eof",
        value: Value::Fixed("false"),
        why: "weir reads partitions without end, and would take an end-of-partition event for a read error",
    },
];

/// Set before `[source.kafka]`, which may change them.
pub const TUNABLES: &[Tunable] = &[
    // How long librdkafka waits before fetching a partition again once its read-ahead
    // is full. Its default (1 s) starves a source that drains the read-ahead in a
    // fraction of that: the window-count job read 10 M records at 0.40 M/s with it,
    // 1.1 M/s with 10 ms.
    Tunable { key: "fetch.queue.backoff.ms", value: "10" },
];

/// A consumer for the job's input: committed data only, offsets never auto-committed.
/// Read-ahead keeps librdkafka's bound (64 MiB per consumer): an 8 MiB bound cost a
/// third of the window-count job's throughput at 10 M records for no RSS gain.
pub fn consumer(brokers: &str, group: &str, extra: &BTreeMap<String, String>) -> rdkafka::error::KafkaResult<BaseConsumer> {
    client_config(brokers, group, extra).create()
}

/// The configuration `consumer` creates its client from.
pub fn client_config(brokers: &str, group: &str, extra: &BTreeMap<String, String>) -> rdkafka::ClientConfig {
    let context = Context { brokers, job: group, transactional: false };
    kafka_config::client_config(FORCED, TUNABLES, extra, context)
}
