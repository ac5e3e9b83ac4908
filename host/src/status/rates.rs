//! Records per second of each operator subtask over the last 10 s, from its counters
//! sampled once a second on the control runtime: the record path only counts.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::metrics::Metrics;

/// The window a rate is taken over.
const WINDOW: Duration = Duration::from_secs(10);
/// How often the counters are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

type Counts = BTreeMap<(String, u32), (u64, u64)>;

/// Samples of every subtask's records in and out, newest last, spanning [`WINDOW`].
#[derive(Default)]
pub struct Rates {
    samples: Mutex<VecDeque<(Instant, Counts)>>,
}

impl Rates {
    /// Takes a sample now and drops those the window no longer needs.
    pub fn sample(&self, metrics: &Metrics) {
        let counts = metrics.subtasks().into_iter().map(|s| ((s.operator, s.subtask), (s.records_in, s.records_out))).collect();
        self.add(Instant::now(), counts);
    }

    fn add(&self, at: Instant, counts: Counts) {
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples.push_back((at, counts));
        // Keep the newest sample at least WINDOW older than this one.
        while samples.len() > 2 && samples.get(1).is_some_and(|(older, _)| at.duration_since(*older) >= WINDOW) {
            samples.pop_front();
        }
    }

    /// Per subtask, records in and out per second between the oldest sample and the newest.
    pub fn per_second(&self) -> BTreeMap<(String, u32), (f64, f64)> {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        let (Some((first, before)), Some((last, now))) = (samples.front(), samples.back()) else { return BTreeMap::new() };
        let seconds = last.duration_since(*first).as_secs_f64();
        if seconds <= 0.0 {
            return BTreeMap::new();
        }
        let rate = |new: u64, old: u64| new.saturating_sub(old) as f64 / seconds;
        now.iter()
            .map(|(subtask, &(records_in, records_out))| {
                let (old_in, old_out) = before.get(subtask).copied().unwrap_or((0, 0));
                (subtask.clone(), (rate(records_in, old_in), rate(records_out, old_out)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(records_in: u64, records_out: u64) -> Counts {
        BTreeMap::from([(("count".to_owned(), 0), (records_in, records_out))])
    }

    #[test]
    fn a_rate_spans_the_window_and_no_more() {
        let rates = Rates::default();
        let start = Instant::now();
        assert!(rates.per_second().is_empty());
        // 100 records in a second for 30 s, then 1000 a second for 10 s.
        for second in 0..=40u64 {
            let total = if second <= 30 { second * 100 } else { 3000 + (second - 30) * 1000 };
            rates.add(start + Duration::from_secs(second), counts(total, total / 10));
        }
        let (records_in, records_out) = rates.per_second()[&("count".to_owned(), 0)];
        assert!((records_in - 1000.0).abs() < 1e-9, "{records_in}");
        assert!((records_out - 100.0).abs() < 1e-9, "{records_out}");
        assert!(rates.samples.lock().unwrap().len() <= 12);
    }
}
