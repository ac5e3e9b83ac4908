//! The enrichment-join benchmark's input and its check (`bench/join`): a compacted
//! `users` table (key = user id, value = a JSON profile) and a stream of clicks keyed by
//! user id, both on Kafka's default partitioner; then the whole committed output of a
//! join compared exactly with the reference computed here from the same seeds.
//!
//! The clicks' users are drawn from `users * 11 / 10` ids, so about one click in eleven
//! has no profile and comes out `"matched": false`. The reference is the output of
//! `plugins/enrich` with its default config: the click's fields, the profile's, then
//! `matched`, in name order, compact (`bench/flink`'s `Enrich` writes the same bytes).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::data::{self, Workload};
use crate::{generate, measure, reference, topics};

/// Both topics' partitions.
const PARTITIONS: i32 = 4;
/// How long a check waits for the output to be complete.
const READ_DEADLINE: Duration = Duration::from_secs(900);

const COUNTRIES: [&str; 12] = ["de", "fr", "uk", "us", "es", "it", "nl", "pl", "se", "br", "in", "jp"];
const PLANS: [&str; 3] = ["free", "plus", "pro"];

/// The sizes and seed of one run.
#[derive(clap::Args, Clone, Copy, Debug)]
pub(crate) struct Sizes {
    /// Clicks, keyed by user id.
    #[arg(long, default_value_t = 10_000_000)]
    clicks: u64,
    /// Users in the table; the clicks' users are drawn from 1.1 times as many ids.
    #[arg(long, default_value_t = 1_000_000)]
    users: u32,
    /// Seeds the clicks and the profiles alike.
    #[arg(long, default_value_t = 11)]
    seed: u64,
}

impl Sizes {
    /// The clicks, keyed (each in its user's partition), without flush records.
    fn clicks(self) -> Workload {
        let ids = self.users.checked_add(self.users / 10).expect("fewer than 3.9 G users");
        Workload { records: self.clicks, keys: ids, partitions: PARTITIONS, seed: self.seed, keyed: true }
    }

    fn has_profile(self, user: u32) -> bool {
        user < self.users
    }
}

/// A profile's fields, derived from the user id and the seed alone.
struct Profile {
    country: &'static str,
    plan: &'static str,
}

fn profile(sizes: Sizes, user: u32) -> Profile {
    let h = mix(sizes.seed ^ u64::from(user).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    // Skewed: the first countries are the most common (a square of a uniform draw).
    let u = (h >> 11) as f64 / (1u64 << 53) as f64;
    let country = COUNTRIES[((u * u) * COUNTRIES.len() as f64) as usize];
    Profile { country, plan: PLANS[(h % PLANS.len() as u64) as usize] }
}

fn profile_json(user: u32, p: &Profile) -> String {
    format!("{{\"country\":\"{}\",\"name\":\"User {user}\",\"plan\":\"{}\"}}", p.country, p.plan)
}

/// splitmix64's finalizer: stable across platforms and releases.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Creates both topics (users compacted) and loads them: the users first, then the clicks.
pub(crate) fn generate(brokers: &str, users_topic: &str, clicks_topic: &str, sizes: Sizes) -> anyhow::Result<()> {
    create_compacted(brokers, users_topic)?;
    let started = Instant::now();
    produce_users(brokers, users_topic, sizes)?;
    eprintln!("weir-bench join-gen: {} users into {users_topic} in {:.1} s", sizes.users, started.elapsed().as_secs_f64());
    let r = generate::run(brokers, clicks_topic, &sizes.clicks(), false, None)?;
    eprintln!("weir-bench join-gen: {} clicks into {clicks_topic} in {:.1} s", r.records, r.seconds);
    Ok(())
}

fn create_compacted(brokers: &str, topic: &str) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", brokers).create().with_context(|| format!("connecting to {brokers}"))?;
    let new = [NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1)).set("cleanup.policy", "compact")];
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = runtime
        .block_on(admin.create_topics(&new, &AdminOptions::new().operation_timeout(Some(topics::WAIT))))
        .with_context(|| format!("creating topic {topic} on {brokers}; is the broker up (scripts/kafka/kafka start)?"))?;
    for result in results {
        result.map_err(|(topic, code)| anyhow::anyhow!("creating topic {topic}: {code}"))?;
    }
    Ok(())
}

/// One row per user, each in the partition the Java client's default partitioner picks.
fn produce_users(brokers: &str, topic: &str, sizes: Sizes) -> anyhow::Result<()> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "10")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "500000")
        .create()
        .with_context(|| format!("creating a producer on {brokers}"))?;
    for user in 0..sizes.users {
        let (key, value) = (data::key(user), profile_json(user, &profile(sizes, user)));
        let mut record = BaseRecord::to(topic).key(key.as_str()).payload(value.as_str());
        let deadline = Instant::now() + topics::WAIT;
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) if Instant::now() < deadline => {
                    record = back;
                    producer.poll(Duration::from_millis(5));
                }
                Err((e, _)) => bail!("producing user {key} to {topic}: {e}"),
            }
        }
        if user % 1024 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(topics::WAIT).with_context(|| format!("flushing the last users to {topic}"))
}

/// The expected output: its sorted digests, the matched clicks, and matched clicks per country.
struct Expected {
    digests: Vec<u128>,
    matched: u64,
    countries: BTreeMap<String, u64>,
}

fn expected(sizes: Sizes) -> Expected {
    let mut out = Expected { digests: Vec::with_capacity(sizes.clicks as usize), matched: 0, countries: BTreeMap::new() };
    for rec in sizes.clicks().records() {
        if sizes.has_profile(rec.key) {
            out.matched += 1;
            *out.countries.entry(profile(sizes, rec.key).country.to_owned()).or_default() += 1;
        }
        out.digests.push(reference::digest(data::key(rec.key).as_bytes(), enriched(sizes, &rec).as_bytes()));
    }
    out.digests.sort_unstable();
    out
}

/// The value `plugins/enrich` writes for a click.
fn enriched(sizes: Sizes, rec: &data::Rec) -> String {
    let page = format!("\"page\":\"/products/{:05}\"", rec.page);
    let tail = format!("\"session\":\"{:016x}\",\"ts\":{},\"user\":\"{}\"", rec.session, rec.ts, data::key(rec.key));
    if !sizes.has_profile(rec.key) {
        return format!("{{\"action\":\"click\",\"matched\":false,{page},{tail}}}");
    }
    let p = profile(sizes, rec.key);
    format!(
        "{{\"action\":\"click\",\"country\":\"{}\",\"matched\":true,\"name\":\"User {}\",{page},\"plan\":\"{}\",{tail}}}",
        p.country, rec.key, p.plan
    )
}

/// The fields of an output record the check counts.
#[derive(serde::Deserialize)]
struct Enriched {
    matched: Option<bool>,
    country: Option<String>,
}

/// What a committed output held.
#[derive(Default)]
struct Observed {
    digests: Vec<u128>,
    matched: u64,
    /// Records whose value is not a JSON object with a boolean `matched`.
    malformed: u64,
    countries: BTreeMap<String, u64>,
}

/// Waits until the committed output of `topic` holds `sizes.clicks` records (the job is
/// still running), or with `full`, reads it all and prints the verdict as one line of
/// `name=value` pairs: `verdict=correct|WRONG`, the exact comparison and the counts.
pub(crate) fn check(brokers: &str, topic: &str, sizes: Sizes, full: bool, timeout: Duration) -> anyhow::Result<()> {
    if !full {
        return await_count(brokers, topic, sizes.clicks, timeout);
    }
    let want = expected(sizes);
    let seen = read(brokers, topic)?;
    let diff = reference::compare(&want.digests, &seen.digests);
    let differ = want.countries.keys().chain(seen.countries.keys()).filter(|c| want.countries.get(*c) != seen.countries.get(*c));
    let countries_differ: std::collections::BTreeSet<&String> = differ.collect();
    let correct = diff.exact() && seen.matched == want.matched && countries_differ.is_empty() && seen.malformed == 0;
    let sample: Vec<String> =
        countries_differ.iter().take(3).map(|c| format!("{c}:{}/{}", seen.countries.get(*c).unwrap_or(&0), want.countries.get(*c).unwrap_or(&0))).collect();
    println!(
        "verdict={} records={} expected={} missing={} unexpected={} matched={} matched_expected={} unmatched={} malformed={} countries={} countries_differ={} differ_sample={}",
        if correct { "correct" } else { "WRONG" },
        diff.observed,
        diff.expected,
        diff.missing,
        diff.unexpected,
        seen.matched,
        want.matched,
        diff.observed as u64 - seen.matched - seen.malformed,
        seen.malformed,
        want.countries.len(),
        countries_differ.len(),
        if sample.is_empty() { "-".to_owned() } else { sample.join(",") },
    );
    Ok(())
}

fn consumer_at_start(brokers: &str, topic: &str, purpose: &str) -> anyhow::Result<BaseConsumer> {
    let consumer = topics::consumer(brokers, &format!("weir-bench-{purpose}-{topic}"))?;
    let mut list = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        list.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&list).with_context(|| format!("assigning {topic}"))?;
    Ok(consumer)
}

fn await_count(brokers: &str, topic: &str, want: u64, timeout: Duration) -> anyhow::Result<()> {
    let consumer = consumer_at_start(brokers, topic, "await")?;
    let (deadline, mut seen, mut errors) = (Instant::now() + timeout, 0u64, 0u32);
    while seen < want {
        if Instant::now() > deadline {
            bail!("{seen} of {want} records committed on {topic} after {timeout:?}");
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => seen += 1,
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => measure::transient(&mut errors, &e, topic)?,
        }
    }
    Ok(())
}

/// Every committed record of `topic`: reads until each partition reports its end and
/// nothing more arrives for a second.
fn read(brokers: &str, topic: &str) -> anyhow::Result<Observed> {
    let consumer = consumer_at_start(brokers, topic, "check")?;
    let mut at_end = [false; PARTITIONS as usize];
    let mut out = Observed::default();
    let (deadline, mut quiet_since, mut errors) = (Instant::now() + READ_DEADLINE, Instant::now(), 0u32);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                at_end[m.partition() as usize] = false;
                let value = m.payload().unwrap_or_default();
                out.digests.push(reference::digest(m.key().unwrap_or_default(), value));
                match serde_json::from_slice::<Enriched>(value) {
                    Ok(Enriched { matched: Some(true), country }) => {
                        out.matched += 1;
                        *out.countries.entry(country.unwrap_or_default()).or_default() += 1;
                    }
                    Ok(Enriched { matched: Some(false), .. }) => {}
                    Ok(Enriched { matched: None, .. }) | Err(_) => out.malformed += 1,
                }
                quiet_since = Instant::now();
            }
            Some(Err(KafkaError::PartitionEOF(p))) => at_end[p as usize] = true,
            Some(Err(e)) => measure::transient(&mut errors, &e, topic)?,
            None => {}
        }
        if at_end.iter().all(|&e| e) && quiet_since.elapsed() > Duration::from_secs(1) {
            out.digests.sort_unstable();
            return Ok(out);
        }
    }
    bail!("reading {topic} did not reach its end within {READ_DEADLINE:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUICK: Sizes = Sizes { clicks: 200_000, users: 20_000, seed: 11 };

    #[test]
    fn about_one_click_in_eleven_has_no_profile_and_every_country_occurs() {
        let want = expected(QUICK);
        let unmatched = QUICK.clicks - want.matched;
        assert!((15_000..21_000).contains(&unmatched), "{unmatched} unmatched clicks");
        assert_eq!(want.countries.len(), COUNTRIES.len());
        assert_eq!(want.countries.values().sum::<u64>(), want.matched);
    }

    #[test]
    fn the_reference_is_what_enrich_writes() {
        // plugins/enrich: the click's fields and the profile's, then `matched`, in name order.
        let json = |s: &str| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(s).unwrap();
        for user in [7, QUICK.users - 1, QUICK.users, QUICK.users + 1] {
            let rec = data::Rec { partition: 0, key: user, ts: 1_700_000_000_123, page: 3, session: 5 };
            let mut fields = json(&data::value(&rec));
            let matched = QUICK.has_profile(user);
            if matched {
                fields.extend(json(&profile_json(user, &profile(QUICK, user))));
            }
            fields.insert("matched".into(), matched.into());
            assert_eq!(enriched(QUICK, &rec), serde_json::to_string(&fields).unwrap());
        }
    }
}
