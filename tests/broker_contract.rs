//! What weir's exactly-once protocol (DESIGN.md §2) relies on the broker for, proved
//! against the real Kafka broker: transactions hide aborted records from read_committed
//! readers, offsets with checkpoint metadata commit atomically with the output, and a
//! second producer with the same transactional.id fences the first.

use crate::support;

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use support::{Isolation, WAIT};

fn send(producer: &rdkafka::producer::BaseProducer, topic: &str, key: &str, value: &str) {
    producer
        .send(BaseRecord::to(topic).key(key).payload(value).partition(0))
        .map_err(|(e, _)| e)
        .expect("send");
}

fn values(records: &[support::Read]) -> Vec<String> {
    records
        .iter()
        .map(|(_, _, v)| String::from_utf8(v.clone()).expect("utf-8 value"))
        .collect()
}

#[test]
fn read_committed_sees_only_committed_transactions() {
    let topic = support::unique_name("contract-visibility");
    support::create_topic(&topic, 1);
    let producer = support::transactional_producer(&support::unique_name("txn"));

    producer.begin_transaction().unwrap();
    send(&producer, &topic, "k", "committed-1");
    send(&producer, &topic, "k", "committed-2");
    producer.commit_transaction(WAIT).unwrap();

    producer.begin_transaction().unwrap();
    send(&producer, &topic, "k", "aborted-1");
    producer.flush(WAIT).unwrap();
    producer.abort_transaction(WAIT).unwrap();

    producer.begin_transaction().unwrap();
    send(&producer, &topic, "k", "committed-3");
    producer.commit_transaction(WAIT).unwrap();

    let committed = support::read_to_end(&topic, 1, Isolation::ReadCommitted);
    assert_eq!(values(&committed), ["committed-1", "committed-2", "committed-3"]);

    let everything = support::read_to_end(&topic, 1, Isolation::ReadUncommitted);
    assert_eq!(
        values(&everything),
        ["committed-1", "committed-2", "aborted-1", "committed-3"]
    );
}

/// The consumer group whose committed offsets name weir's checkpoints.
fn group_consumer(group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", support::brokers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("group consumer")
}

fn offsets_with_metadata(topic: &str, offset: i64, metadata: &str) -> TopicPartitionList {
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(topic, 0, Offset::Offset(offset))
        .unwrap();
    offsets
        .find_partition(topic, 0)
        .expect("partition just added")
        .set_metadata(metadata);
    offsets
}

/// (offset, metadata) committed for partition 0 of `topic`, read by a fresh consumer.
fn committed(group: &str, topic: &str) -> (Offset, String) {
    let mut query = TopicPartitionList::new();
    query.add_partition(topic, 0);
    let answer = group_consumer(group)
        .committed_offsets(query, WAIT)
        .expect("committed offsets");
    let element = answer.find_partition(topic, 0).expect("partition in answer");
    (element.offset(), element.metadata().to_string())
}

#[test]
fn offsets_sent_in_a_transaction_commit_or_abort_with_it() {
    let topic = support::unique_name("contract-offsets");
    support::create_topic(&topic, 1);
    let group = support::unique_name("job");
    let group_metadata = group_consumer(&group).group_metadata().expect("group metadata");
    let producer = support::transactional_producer(&support::unique_name("txn"));

    producer.begin_transaction().unwrap();
    send(&producer, &topic, "k", "epoch-1");
    producer
        .send_offsets_to_transaction(&offsets_with_metadata(&topic, 7, "weir:ckpt=1"), &group_metadata, WAIT)
        .unwrap();
    producer.commit_transaction(WAIT).unwrap();
    assert_eq!(
        committed(&group, &topic),
        (Offset::Offset(7), "weir:ckpt=1".to_string())
    );

    producer.begin_transaction().unwrap();
    send(&producer, &topic, "k", "epoch-2");
    producer
        .send_offsets_to_transaction(&offsets_with_metadata(&topic, 9, "weir:ckpt=2"), &group_metadata, WAIT)
        .unwrap();
    producer.flush(WAIT).unwrap();
    producer.abort_transaction(WAIT).unwrap();
    assert_eq!(
        committed(&group, &topic),
        (Offset::Offset(7), "weir:ckpt=1".to_string()),
        "offsets sent inside an aborted transaction must not be committed"
    );
}

#[test]
fn a_second_producer_with_the_same_id_fences_the_first() {
    let topic = support::unique_name("contract-fencing");
    support::create_topic(&topic, 1);
    let transactional_id = support::unique_name("txn");
    let zombie = support::transactional_producer(&transactional_id);

    zombie.begin_transaction().unwrap();
    send(&zombie, &topic, "k", "from-the-zombie");
    zombie.flush(WAIT).unwrap();

    let successor = support::transactional_producer(&transactional_id);

    let fenced = zombie
        .commit_transaction(WAIT)
        .expect_err("the fenced producer's commit must fail");
    let code = match &fenced {
        KafkaError::Transaction(e) => e.code(),
        other => panic!("expected a transaction error, got {other:?}"),
    };
    assert!(
        matches!(
            code,
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        ),
        "expected a fencing error, got {code:?} ({fenced})"
    );

    successor.begin_transaction().unwrap();
    send(&successor, &topic, "k", "from-the-successor");
    successor.commit_transaction(WAIT).unwrap();

    let visible = support::read_to_end(&topic, 1, Isolation::ReadCommitted);
    assert_eq!(values(&visible), ["from-the-successor"]);
    let all = support::read_to_end(&topic, 1, Isolation::ReadUncommitted);
    assert_eq!(values(&all), ["from-the-zombie", "from-the-successor"]);
}

#[test]
fn a_topic_with_only_an_aborted_transaction_reads_as_empty() {
    // Guards the reader itself: a topic with only an aborted transaction reads as empty
    // under read_committed, so an assertion on committed output can fail.
    let topic = support::unique_name("contract-empty");
    support::create_topic(&topic, 1);
    let producer = support::transactional_producer(&support::unique_name("txn"));
    producer.begin_transaction().unwrap();
    send(&producer, &topic, "k", "never-visible");
    producer.flush(Duration::from_secs(10)).unwrap();
    producer.abort_transaction(WAIT).unwrap();
    assert!(support::read_to_end(&topic, 1, Isolation::ReadCommitted).is_empty());
    assert_eq!(support::read_to_end(&topic, 1, Isolation::ReadUncommitted).len(), 1);
}

#[test]
fn the_end_listed_after_a_commit_comes_before_the_next_transaction() {
    // weir records where each changelog partition ends after a checkpoint's commit and
    // replays from there on recovery: the end must lie past the committed records and
    // at or before the first record of the next transaction.
    let topic = support::unique_name("contract-ends");
    support::create_topic(&topic, 1);
    let producer = support::transactional_producer(&support::unique_name("txn"));
    producer.begin_transaction().unwrap();
    send(&producer, &topic, "k", "first");
    send(&producer, &topic, "k", "second");
    producer.commit_transaction(WAIT).unwrap();

    let lister: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", support::brokers())
        .set("isolation.level", "read_uncommitted")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&topic, 0, Offset::End).unwrap();
    let found = lister.offsets_for_times(list, WAIT).unwrap();
    let Offset::Offset(end) = found.elements()[0].offset() else {
        panic!("no end offset: {found:?}")
    };
    assert!(
        end >= 2,
        "the end {end} is not past the two committed records"
    );

    producer.begin_transaction().unwrap();
    send(&producer, &topic, "k", "third");
    producer.commit_transaction(WAIT).unwrap();

    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", support::brokers())
        .set("group.id", support::unique_name("contract-ends-reader"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut from = TopicPartitionList::new();
    from.add_partition_offset(&topic, 0, Offset::Offset(end))
        .unwrap();
    reader.assign(&from).unwrap();
    let mut read = Vec::new();
    loop {
        match reader.poll(WAIT) {
            Some(Ok(message)) => read.push(
                String::from_utf8(rdkafka::Message::payload(&message).unwrap().to_vec()).unwrap(),
            ),
            Some(Err(KafkaError::PartitionEOF(_))) => break,
            Some(Err(error)) => panic!("reading from {end}: {error}"),
            None => panic!("nothing read from {end} within {WAIT:?}"),
        }
    }
    assert_eq!(read, ["third"]);
}
