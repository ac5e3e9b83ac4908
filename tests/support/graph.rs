//! What the tests of graph jobs share: topics that know their partition count.

use std::time::{Duration, Instant};

use super::job::JobDir;

/// A topic of a test and its partition count.
#[derive(Clone)]
pub struct Topic {
    pub name: String,
    pub partitions: i32,
}

impl Topic {
    pub fn new(job: &JobDir, role: &str, partitions: i32) -> Topic {
        Topic::with(job, role, partitions, &[])
    }

    /// A compacted topic, as a table source must be.
    pub fn table(job: &JobDir, role: &str, partitions: i32) -> Topic {
        Topic::with(job, role, partitions, &[("cleanup.policy", "compact")])
    }

    /// A topic named after the job and `role`, listed by the broker when this returns.
    pub fn with(job: &JobDir, role: &str, partitions: i32, configs: &[(&str, &str)]) -> Topic {
        let topic = Topic { name: super::unique_name(&format!("{}-{role}", job.name)), partitions };
        super::create_topic_with(&topic.name, partitions, configs);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !super::topic_exists(&topic.name) {
            assert!(Instant::now() < deadline, "topic {} not listed 30 s after its creation", topic.name);
            std::thread::sleep(Duration::from_millis(50));
        }
        topic
    }
}
