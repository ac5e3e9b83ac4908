//! The librdkafka properties of weir's Kafka clients. Each client (`source`, `sink`)
//! keeps ONE list of what weir forces, with the reason, and one of the defaults a job
//! may change; the same lists build the client and make the job file refuse a forced
//! key, so no property the user sets is ever dropped without a word.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

/// A property weir sets on a client whatever `[source.kafka]`/`[sink.kafka]` say.
#[derive(Debug)]
pub struct Forced {
    pub key: &'static str,
    pub value: Value,
    /// Why weir owns it: shown to a user who sets it.
    pub why: &'static str,
}

/// Where a forced property's value comes from.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    Fixed(&'static str),
    /// The job's brokers (`bootstrap.servers` and its alias).
    Brokers,
    /// The job's name (`group.id`).
    JobName,
    /// The job's name when the client is transactional; removed otherwise.
    TransactionalId,
}

/// A property weir sets before the user's own, so the job file may change it.
#[derive(Debug)]
pub struct Tunable {
    pub key: &'static str,
    pub value: &'static str,
}

/// What forced values are made of for one client.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub brokers: &'a str,
    pub job: &'a str,
    pub transactional: bool,
}

/// The client's configuration: `tunables`, then the user's properties, then `forced`,
/// which therefore always win (a job file that sets one is refused before this).
pub fn client_config(
    forced: &[Forced],
    tunables: &[Tunable],
    user: &BTreeMap<String, String>,
    context: Context<'_>,
) -> ClientConfig {
    let mut config = ClientConfig::new();
    for tunable in tunables {
        config.set(tunable.key, tunable.value);
    }
    for (key, value) in user {
        config.set(key, value);
    }
    for property in forced {
        match property.value {
            Value::Fixed(value) => config.set(property.key, value),
            Value::Brokers => config.set(property.key, context.brokers),
            Value::JobName => config.set(property.key, context.job),
            Value::TransactionalId if context.transactional => config.set(property.key, context.job),
            Value::TransactionalId => config.remove(property.key),
        };
    }
    config
}

/// The forced property named `key`, if weir owns it. librdkafka takes a topic property
/// under `topic.` too (a name it does not know globally loses the prefix), so
/// `topic.auto.offset.reset` is `auto.offset.reset`.
pub fn forced<'a>(list: &'a [Forced], key: &str) -> Option<&'a Forced> {
    let named = |key: &str| list.iter().find(|property| property.key == key);
    named(key).or_else(|| key.strip_prefix("topic.").and_then(named))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORCED: &[Forced] = &[
        Forced { key: "bootstrap.servers", value: Value::Brokers, why: "" },
        Forced { key: "acks", value: Value::Fixed("all"), why: "" },
        Forced { key: "transactional.id", value: Value::TransactionalId, why: "" },
    ];
    const TUNABLES: &[Tunable] = &[Tunable { key: "linger.ms", value: "5" }, Tunable { key: "batch.size", value: "1000" }];

    #[test]
    fn tunables_yield_to_the_user_and_the_user_to_forced_properties() {
        let user: BTreeMap<String, String> =
            [("linger.ms", "50"), ("acks", "1"), ("transactional.id", "mine")].map(|(k, v)| (k.into(), v.into())).into();
        let context = Context { brokers: "b:1", job: "job", transactional: true };
        let config = client_config(FORCED, TUNABLES, &user, context);
        assert_eq!(config.get("linger.ms"), Some("50"));
        assert_eq!(config.get("batch.size"), Some("1000"));
        assert_eq!(config.get("acks"), Some("all"));
        assert_eq!(config.get("bootstrap.servers"), Some("b:1"));
        assert_eq!(config.get("transactional.id"), Some("job"));

        let context = Context { transactional: false, ..context };
        let config = client_config(FORCED, TUNABLES, &user, context);
        assert_eq!(config.get("transactional.id"), None);
    }

    #[test]
    fn a_forced_topic_property_is_forced_under_its_topic_prefix_too() {
        assert_eq!(forced(FORCED, "topic.acks").map(|f| f.key), Some("acks"));
        assert_eq!(forced(FORCED, "acks").map(|f| f.key), Some("acks"));
        assert!(forced(FORCED, "topic.linger.ms").is_none());
    }
}
