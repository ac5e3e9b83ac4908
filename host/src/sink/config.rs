//! The sink producer's librdkafka properties: what weir forces for transactional,
//! lossless writes, and the defaults a job may change in `[sink.kafka]`.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

use crate::kafka_config::{self, Context, Forced, Tunable, Value};

/// Set on the job's producer; `[sink.kafka]` may not set them.
pub const FORCED: &[Forced] = &[
    Forced { key: "bootstrap.servers", value: Value::Brokers, why: "weir sets it from [sink] brokers" },
    Forced {
        key: "metadata.broker.list",
        value: Value::Brokers,
        why: "it is an alias of bootstrap.servers, which weir sets from [sink] brokers",
    },
    Forced {
        key: "transactional.id",
        value: Value::TransactionalId,
        why: "weir sets it to the job's name in exactly-once mode, which fences zombie instances, \
              and leaves it unset in at-least-once mode",
    },
    Forced {
        key: "enable.idempotence",
        value: Value::Fixed("true"),
        why: "weir sets it: transactions and ordered retries need it",
    },
    Forced {
        key: "acks",
        value: Value::Fixed("all"),
        why: "weir sets acks=all, without which a committed record can be lost",
    },
    Forced {
        key: "allow.auto.create.topics",
        value: Value::Fixed("false"),
        why: "weir creates no topic behind the job's back: an output topic deleted while the job runs must \
              stop it, not come back with the broker's default partition count",
    },
    Forced {
        key: "request.required.acks",
        value: Value::Fixed("all"),
        why: "it is an alias of acks; weir sets acks=all, without which a committed record can be lost",
    },
];

/// Set before `[sink.kafka]`, which may change them.
pub const TUNABLES: &[Tunable] = &[
    // Keyed output lands where the Java client's default partitioner puts it.
    Tunable { key: "partitioner", value: "murmur2_random" },
    Tunable { key: "linger.ms", value: "5" },
    // Only failures matter (they are counted); a report per delivered record cost a
    // sixth of a pass-through job's CPU.
    Tunable { key: "delivery.report.only.error", value: "true" },
];

/// librdkafka's `transaction.timeout.ms` when `[sink.kafka]` does not set it.
pub const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 60_000;

/// The producer's transaction timeout: `extra`'s, else librdkafka's default (a job
/// file's value is checked to be a number when it is read).
pub(crate) fn transaction_timeout(extra: &BTreeMap<String, String>) -> std::time::Duration {
    let ms = extra.get("transaction.timeout.ms").and_then(|v| v.trim().parse().ok());
    std::time::Duration::from_millis(ms.unwrap_or(DEFAULT_TRANSACTION_TIMEOUT_MS))
}

/// The producer's configuration for the job named `job`.
pub fn client_config(job: &str, brokers: &str, transactional: bool, extra: &BTreeMap<String, String>) -> ClientConfig {
    let context = Context { brokers, job, transactional };
    kafka_config::client_config(FORCED, TUNABLES, extra, context)
}
