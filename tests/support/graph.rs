//! What the tests of graph jobs share: topics that know their partition count, and the
//! random SIGKILLs every graph job is put through.

use std::path::Path;
use std::time::{Duration, Instant};

use super::job::{self, JobDir};

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

/// SIGKILLs fresh runs of the job at random moments up to 2.5 s after spawn; before a
/// random half of the restarts the state_dir is deleted.
pub fn kill_at_random_moments(job: &JobDir, log: &Path, kills: usize, seed: u64) {
    let mut state = seed;
    for _ in 0..kills {
        if super::next_random(&mut state).is_multiple_of(2) && job.state_dir().exists() {
            std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
        }
        let delay = Duration::from_millis(super::next_random(&mut state) % 2500);
        let mut child = job::start(&job.path(), log, &[]);
        let started = Instant::now();
        if let Some(status) = job::wait(&mut child, delay) {
            panic!("weir exited by itself with {status} after {:?}; log:\n{}", started.elapsed(), job::read_log(log));
        }
        job::kill(&mut child);
    }
}
