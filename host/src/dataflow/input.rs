//! One number per input partition across all of a job's sources. The engine, its
//! checkpoints and its record origins know an input partition by `input_id(source,
//! partition)`: the partition itself for the first source, so a job of one source
//! keeps the checkpoints and offsets it always had, and above `MAX_PARTITIONS` per
//! later source. Only where weir talks to Kafka is it split into topic and partition.

use super::TaskFailure;

/// Partitions a source topic may have: the id keeps its source above them.
pub(crate) const MAX_PARTITIONS: i32 = 1 << 20;

/// Refuses a source topic whose partitions (`listed`, in order) reach `MAX_PARTITIONS`:
/// checked wherever partitions are listed, at recovery and when looking for added ones.
pub(crate) fn within_max_partitions(topic: &str, listed: &[i32]) -> Result<(), TaskFailure> {
    match listed.last() {
        Some(&last) if last >= MAX_PARTITIONS => Err(TaskFailure::Incompatible(format!(
            "topic `{topic}` has partition {last}; weir reads topics of at most {MAX_PARTITIONS} partitions"
        ))),
        _ => Ok(()),
    }
}

/// The id of `partition` of the job's source number `source`.
pub(crate) fn input_id(source: usize, partition: i32) -> i32 {
    debug_assert!((0..MAX_PARTITIONS).contains(&partition), "partition {partition} checked when listed");
    let source = i32::try_from(source).expect("a job has few sources");
    source * MAX_PARTITIONS + partition
}

/// Kafka's number of the partition input id `id` names.
pub(crate) fn kafka_partition(id: i32) -> i32 {
    id % MAX_PARTITIONS
}

/// The job's input topics in source order: what an id stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InputTopics(Vec<String>);

impl InputTopics {
    pub(crate) fn new(topics: Vec<String>) -> InputTopics {
        InputTopics(topics)
    }

    /// The source number, topic and partition of input partition `id`.
    pub(crate) fn resolve(&self, id: i32) -> (usize, &str, i32) {
        let source = usize::try_from(id / MAX_PARTITIONS).expect("input ids are not negative");
        (source, &self.0[source], id % MAX_PARTITIONS)
    }

    /// Every input topic, for messages: `a`, or `a, b`.
    pub(crate) fn names(&self) -> String {
        self.0.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_source_keeps_its_partition_numbers() {
        let topics = InputTopics::new(vec!["clicks".into(), "users".into()]);
        assert_eq!(input_id(0, 7), 7);
        assert_eq!(topics.resolve(input_id(0, 7)), (0, "clicks", 7));
        assert_eq!(topics.resolve(input_id(1, 0)), (1, "users", 0));
        assert_eq!(topics.resolve(input_id(1, MAX_PARTITIONS - 1)), (1, "users", MAX_PARTITIONS - 1));
    }
}
