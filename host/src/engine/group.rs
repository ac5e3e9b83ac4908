//! A process of a scaled-out job (DESIGN.md §7): it joins the job's consumer group
//! (cooperative-sticky) and runs the input partitions the group assigns it as one
//! recovery unit, an attempt at a time. Every change of its partitions ends the running
//! attempt with a final checkpoint (inside the revocation, before the partitions go)
//! and starts another over the new set, which fences their earlier owners, reads their
//! committed offsets and rebuilds their key groups from the changelog. The group's
//! generation fences a process that lost its partitions without noticing: its commit
//! carries a stale one and fails.
//!
//! The group consumer only holds the membership: its partitions stay paused, the
//! attempt's source tasks read them.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::{ClientContext, TopicPartitionList};

use crate::dataflow::TaskFailure;
use crate::metrics::history::Phase;
use crate::job::Job;
use crate::sink::Member;
use crate::source;

use super::coordinator::Outcome;
use super::restart::RestartBudget;
use super::{Engine, Records, Stopped, graph, recover};

/// How long one poll of the group consumer waits for an event.
const POLL: Duration = Duration::from_millis(50);
/// Group settings weir chooses unless `[source.kafka]` sets them. The session timeout
/// is the least a broker accepts by default (`group.min.session.timeout.ms`): it bounds
/// how soon the partitions of a process that died move to the others. The others learn
/// of a rebalance at their next heartbeat.
const MEMBERSHIP_DEFAULTS: [(&str, &str); 3] = [
    ("partition.assignment.strategy", "cooperative-sticky"),
    ("session.timeout.ms", "6000"),
    ("heartbeat.interval.ms", "500"),
];
/// How long a fenced process waits for the group to say what it owns now before it
/// starts again with what it believes it owns.
const FENCED_WAIT: Duration = Duration::from_secs(15);

/// Runs this process's share of the job until a stop is requested (then says how it
/// ended, having left the group) or it fails in a way a restart cannot cure.
pub(super) fn run(engine: &Engine) -> Result<Stopped, TaskFailure> {
    let job = &engine.job;
    recover::check_source(job)?;
    let consumer = Arc::new(join(job)?);
    let member: Member = {
        let consumer = Arc::clone(&consumer);
        Arc::new(move || {
            let metadata = consumer.group_metadata()?;
            // Read after the metadata: a member id reset or replaced since the attempt
            // began is seen, even if the metadata was taken just before.
            let id = member_id(&consumer).filter(|id| !id.is_empty())?;
            Some((metadata, id))
        })
    };
    tracing::info!(job = %job.name, topic = %job.sources[0].topic, "joined the job's consumer group; waiting for partitions");
    let result = std::thread::scope(|scope| Shares::new(engine, &consumer, member).run(scope));
    // Dropping the last handle closes the consumer, which leaves the group.
    drop(consumer);
    result
}

/// The running loop's state: which attempt runs over which partitions.
struct Shares<'a> {
    engine: &'a Engine,
    consumer: &'a BaseConsumer<MemberContext>,
    member: Member,
    records: Records,
    restarts: RestartBudget,
    /// No attempt starts before this (a restart's backoff).
    not_before: Instant,
    /// Fenced: wait until the group changes this process's partitions (or `FENCED_WAIT`).
    fenced_at: Option<(Instant, u64)>,
    /// The partitions of the last attempt that ran, for the rebalance log.
    last_owned: Vec<i32>,
    /// When this process's partitions last changed, until an attempt runs again.
    changed_at: Option<Instant>,
}

/// An attempt in flight.
struct Running<'scope> {
    handle: ScopedJoinHandle<'scope, Result<Outcome, TaskFailure>>,
    owned: Vec<i32>,
    control: Arc<AttemptControl>,
    /// The group consumer's count of rebalances when it started.
    rebalances: u64,
}

impl<'a> Shares<'a> {
    fn new(engine: &'a Engine, consumer: &'a BaseConsumer<MemberContext>, member: Member) -> Self {
        Shares {
            engine,
            consumer,
            member,
            records: Records::default(),
            restarts: RestartBudget::new(&engine.job.restarts),
            not_before: Instant::now(),
            fenced_at: None,
            last_owned: Vec::new(),
            changed_at: Some(Instant::now()),
        }
    }

    fn run<'scope>(mut self, scope: &'scope std::thread::Scope<'scope, '_>) -> Result<Stopped, TaskFailure>
    where
        'a: 'scope,
    {
        let context = self.consumer.context();
        let mut running: Option<Running<'scope>> = None;
        loop {
            if let Some(Err(error)) = self.consumer.poll(POLL) {
                tracing::warn!("the job's consumer group: {error}");
            }
            let owned = self.owned();
            if self.engine.options.stop.load(Ordering::Relaxed) || owned.is_err() {
                let mut stopped = Stopped::Committed;
                if let Some(attempt) = running.take() {
                    attempt.control.stop.store(true, Ordering::Relaxed);
                    let outcome = outcome_of(attempt.handle);
                    stopped = last_outcome(outcome, attempt.control.abandon.load(Ordering::Relaxed))?;
                }
                return owned.map(|_| stopped);
            }
            let owned = owned?;
            self.engine.options.metrics.group().owned_partitions.set(owned.len() as i64);
            self.engine.options.metrics.history().membership(member_id(self.consumer), &owned);
            if let Some(attempt) = running.take_if(|attempt| attempt.handle.is_finished()) {
                self.ended(attempt)?;
            }
            if let Some(attempt) = &running
                && attempt.owned != owned
            {
                // Gained partitions (a loss stops the attempt inside the revocation).
                attempt.control.stop.store(true, Ordering::Relaxed);
            }
            if owned != self.last_owned && self.changed_at.is_none() {
                self.changed_at = Some(Instant::now());
            }
            if running.is_none() && !owned.is_empty() && self.may_start(context.rebalances()) {
                running = Some(self.start(scope, owned));
            }
        }
    }

    /// The partitions the group assigned this process, in order.
    fn owned(&self) -> Result<Vec<i32>, TaskFailure> {
        let assignment = self
            .consumer
            .assignment()
            .map_err(|e| TaskFailure::Kafka(format!("reading this process's partitions of the job's consumer group: {e}")))?;
        let owned: BTreeSet<i32> = assignment.elements().iter().map(|element| element.partition()).collect();
        Ok(owned.into_iter().collect())
    }

    fn may_start(&mut self, rebalances: u64) -> bool {
        if let Some((since, seen)) = self.fenced_at {
            if rebalances == seen && since.elapsed() < FENCED_WAIT {
                return false;
            }
            self.fenced_at = None;
        }
        Instant::now() >= self.not_before
    }

    fn start<'scope>(&mut self, scope: &'scope std::thread::Scope<'scope, '_>, owned: Vec<i32>) -> Running<'scope>
    where
        'a: 'scope,
    {
        let (gained, lost) = difference(&self.last_owned, &owned);
        if !gained.is_empty() || !lost.is_empty() {
            self.engine.options.metrics.group().rebalances.inc();
            self.engine.options.metrics.history().rebalanced(&owned, &gained, &lost);
            for (source, &partition) in self.engine.job.sources.iter().flat_map(|s| lost.iter().map(move |p| (s, p))) {
                self.engine.options.metrics.forget_partition(&source.topic, partition);
            }
            tracing::info!(partitions = ?owned, ?gained, ?lost, "this process's partitions changed; restoring them");
        }
        self.last_owned.clone_from(&owned);
        let control = Arc::new(AttemptControl::default());
        *self.consumer.context().running.lock().expect("attempt lock") = Some((owned.clone(), Arc::clone(&control)));
        let (engine, member, records) = (self.engine, Arc::clone(&self.member), self.records.clone());
        let changed_at = self.changed_at.take();
        let attempt_control = Arc::clone(&control);
        let attempt_owned = owned.clone();
        let handle = scope.spawn(move || {
            // Ended however the attempt ends, a panic included: a revocation waits for it.
            let _ended = Ended(&attempt_control);
            attempt(engine, &attempt_owned, member, &attempt_control, &records, changed_at)
        });
        Running { handle, owned, control, rebalances: self.consumer.context().rebalances() }
    }

    /// What follows an attempt's end: another at once when it stopped for a change of
    /// partitions; after a backoff when it failed; nothing more when no restart cures it.
    fn ended(&mut self, attempt: Running<'_>) -> Result<(), TaskFailure> {
        *self.consumer.context().running.lock().expect("attempt lock") = None;
        let failure = match outcome_of(attempt.handle) {
            Ok(Outcome::Stopped) => return Ok(()),
            Err(TaskFailure::Stopped) if attempt.control.abandon.load(Ordering::Relaxed) => return Ok(()),
            Err(failure) => failure,
        };
        let rebalanced = self.consumer.context().rebalances() != attempt.rebalances;
        match &failure {
            // The group has moved on since the attempt began, and this process has heard
            // of it: what it owns now is known, start over it at once.
            TaskFailure::Fenced(_) | TaskFailure::LeftGroup(_) if rebalanced => {
                tracing::info!("{failure}; starting again over the partitions the group gives this process now");
                return Ok(());
            }
            TaskFailure::Fenced(_) | TaskFailure::LeftGroup(_) => {
                tracing::warn!("{failure}; waiting for the group to say which partitions are this process's now");
                self.fenced_at = Some((Instant::now(), self.consumer.context().rebalances()));
                return Ok(());
            }
            _ if failure.is_fatal() => return Err(failure),
            _ if rebalanced => {
                tracing::info!("the attempt ended while the group rebalanced ({failure}); starting again over the new partitions");
                return Ok(());
            }
            TaskFailure::Operator { origins, .. } => self.records.suspects.extend(origins.iter().copied()),
            TaskFailure::Poisoned { origin, .. } => {
                tracing::warn!("{failure}");
                self.engine.options.metrics.restarted(&failure, Duration::ZERO, false);
                self.records.poisoned.insert(*origin);
                return Ok(());
            }
            _ => {}
        }
        let Some(backoff) = self.restarts.next_backoff() else {
            tracing::error!("{}; giving up", self.restarts.describe_budget());
            return Err(failure);
        };
        self.engine.options.metrics.restarted(&failure, backoff, true);
        tracing::warn!("attempt failed: {failure}; restarting from the last committed checkpoint in {backoff:?}");
        self.not_before = Instant::now() + backoff;
        Ok(())
    }
}

/// What the attempt a stop ended leaves the process with. One the group moved on from
/// while it committed its final checkpoint (fenced, or its membership gone) ends the
/// process as cleanly as a commit: what it had not committed is read again by whoever
/// owns its partitions now, from their last committed checkpoint. So does any end of
/// an attempt that had lost its partitions (`abandoned`): after a pause its clients
/// may find every broker connection gone before the stop is through.
fn last_outcome(outcome: Result<Outcome, TaskFailure>, abandoned: bool) -> Result<Stopped, TaskFailure> {
    match outcome {
        Ok(_) => Ok(Stopped::Committed),
        Err(TaskFailure::Stopped) if abandoned => Ok(Stopped::Handed),
        Err(failure) if abandoned => {
            tracing::warn!("{failure}; this process had lost its partitions: stopping without a final checkpoint");
            Ok(Stopped::Handed)
        }
        Err(failure @ (TaskFailure::Fenced(_) | TaskFailure::LeftGroup(_))) => {
            tracing::warn!("{failure}; stopping without a final checkpoint: its partitions go on from the last committed one");
            Ok(Stopped::Handed)
        }
        Err(failure) => Err(failure),
    }
}

/// An attempt's outcome; a panic of its thread (the coordinator's) is a failure.
fn outcome_of(handle: ScopedJoinHandle<'_, Result<Outcome, TaskFailure>>) -> Result<Outcome, TaskFailure> {
    handle.join().unwrap_or_else(|payload| {
        let message = graph::panic_message(payload.as_ref());
        Err(TaskFailure::Panicked { task: "the checkpoint coordinator".to_string(), message })
    })
}

/// One attempt over the partitions `owned`.
fn attempt(
    engine: &Engine,
    owned: &[i32],
    member: Member,
    control: &AttemptControl,
    records: &Records,
    changed_at: Option<Instant>,
) -> Result<Outcome, TaskFailure> {
    let job = &engine.job;
    let metrics = &engine.options.metrics;
    let abandoned = || control.abandon.load(Ordering::Relaxed);
    metrics.history().phase(Phase::Recovering);
    engine.with_store(|store| {
        let recovered = recover::recover_shard(job, &engine.plugins, store, metrics, owned, member, &abandoned)?;
        if let Some(changed_at) = changed_at {
            metrics.group().rebalance_millis.set(changed_at.elapsed().as_millis() as i64);
            metrics.history().rebalance_took(changed_at.elapsed());
        }
        graph::execute(engine, store, recovered, records, &control.stop, Some(&control.abandon))
    })
}

/// The consumer's member id in the group (empty while it is none).
fn member_id(consumer: &BaseConsumer<MemberContext>) -> Option<String> {
    let client = consumer.client().native_ptr();
    // SAFETY: the client pointer is valid while `consumer` lives; librdkafka returns a
    // string of its own allocation (or null), freed here with its allocator.
    unsafe {
        let id = rdkafka::bindings::rd_kafka_memberid(client);
        if id.is_null() {
            return None;
        }
        let text = std::ffi::CStr::from_ptr(id).to_string_lossy().into_owned();
        rdkafka::bindings::rd_kafka_mem_free(client, id.cast());
        Some(text)
    }
}

/// Partitions in `now` and not in `before`, and the other way round.
fn difference(before: &[i32], now: &[i32]) -> (Vec<i32>, Vec<i32>) {
    let gained = now.iter().filter(|p| !before.contains(p)).copied().collect();
    let lost = before.iter().filter(|p| !now.contains(p)).copied().collect();
    (gained, lost)
}

/// Joins the job's consumer group on its first source's topic: the group assigns its
/// partitions, and a process owns the same partition numbers of every source
/// (`recover::recover_shard` checks that they have as many).
fn join(job: &Job) -> Result<BaseConsumer<MemberContext>, TaskFailure> {
    let mut config = source::config::client_config(&job.sources[0].brokers, &job.name, job.source_kafka());
    for (key, value) in MEMBERSHIP_DEFAULTS {
        if !job.source_kafka().contains_key(key) {
            config.set(key, value);
        }
    }
    // Its partitions are paused as they are assigned and never read; `error`, which the
    // sources need, would only report that a new partition has no committed offset, and
    // read_committed would hold each assignment back until the offsets of a transaction
    // in flight resolve.
    config.set("auto.offset.reset", "latest").set("isolation.level", "read_uncommitted");
    let consumer: BaseConsumer<MemberContext> = config
        .create_with_context(MemberContext::default())
        .map_err(|e| TaskFailure::Kafka(format!("creating the consumer of the job's group on {}: {e}", job.sources[0].brokers)))?;
    consumer
        .subscribe(&[&job.sources[0].topic])
        .map_err(|e| TaskFailure::Kafka(format!("joining the job's consumer group on topic `{}`: {e}", job.sources[0].topic)))?;
    Ok(consumer)
}

/// Says that the attempt ended when dropped.
struct Ended<'a>(&'a AttemptControl);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// How the loop and a revocation stop an attempt and learn that it ended.
#[derive(Default)]
struct AttemptControl {
    /// Ends it after a final checkpoint.
    stop: Arc<AtomicBool>,
    /// Ends it without another checkpoint.
    abandon: Arc<AtomicBool>,
    ended: Mutex<bool>,
    ended_signal: Condvar,
}

impl AttemptControl {
    fn end(&self) {
        *self.ended.lock().expect("attempt end lock") = true;
        self.ended_signal.notify_all();
    }

    /// Asks for a final checkpoint and waits until the attempt has ended.
    fn stop_and_wait(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wait();
    }

    fn wait(&self) {
        let ended = self.ended.lock().expect("attempt end lock");
        drop(self.ended_signal.wait_while(ended, |ended| !*ended).expect("attempt end lock"));
    }
}

/// The group consumer's callbacks: a revocation of partitions the running attempt owns
/// waits for the attempt's final checkpoint, so nothing of them is pending when they
/// go; assigned partitions are paused (the attempt's sources read them).
#[derive(Default)]
struct MemberContext {
    /// The running attempt's partitions and control.
    running: Mutex<Option<(Vec<i32>, Arc<AttemptControl>)>>,
    rebalances: AtomicU64,
}

impl MemberContext {
    fn rebalances(&self) -> u64 {
        self.rebalances.load(Ordering::Relaxed)
    }
}

impl ClientContext for MemberContext {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!("the job's consumer group: {error}: {reason}");
    }
}

impl ConsumerContext for MemberContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        self.rebalances.fetch_add(1, Ordering::Relaxed);
        let Rebalance::Revoke(revoked) = rebalance else { return };
        let running = self.running.lock().expect("attempt lock").clone();
        let Some((owned, control)) = running else { return };
        let revoked: Vec<i32> = revoked.elements().iter().map(|element| element.partition()).collect();
        if !revoked.iter().any(|partition| owned.contains(partition)) {
            return;
        }
        if consumer.assignment_lost() {
            // Others own them already. The attempt ends without another checkpoint before
            // this returns: once librdkafka rejoins, a commit would carry the new
            // membership and the broker would take it for partitions now others'.
            tracing::warn!(?revoked, "this process lost its partitions (its group session ended); stopping without a final checkpoint");
            control.abandon.store(true, Ordering::Relaxed);
            control.wait();
            return;
        }
        tracing::info!(?revoked, "the group revokes partitions of this process: committing a final checkpoint of them");
        control.stop_and_wait();
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(assigned) => {
                let mut list = TopicPartitionList::new();
                for element in assigned.elements() {
                    list.add_partition(element.topic(), element.partition());
                }
                if let Err(error) = consumer.pause(&list) {
                    tracing::warn!("pausing the group consumer's partitions (the sources read them): {error}");
                }
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(error) => tracing::warn!("the job's consumer group failed to rebalance: {error}"),
        }
    }
}
