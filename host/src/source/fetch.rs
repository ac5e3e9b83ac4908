//! Batched reads from librdkafka. `BaseConsumer::poll` returns one message per call,
//! each behind a locked queue pop, two clock reads and a reference-counted event;
//! `rd_kafka_consume_batch_queue` takes up to a batch under one wait. The rdkafka crate
//! does not wrap it, so this module does, and keeps the unsafe code to the queue
//! handle and the message views.
//!
//! The assigned partitions' fetch queues are forwarded to a queue of the Fetcher's own.
//! The consumer's queue then carries only errors and logs, which `BaseConsumer::poll`
//! turns into errors and log lines as before: the batch call would log and drop them.

use std::borrow::Cow;
use std::ffi::{CStr, CString, c_void};
use std::ptr::{NonNull, null, null_mut};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// A consumer and a queue that receives the records of the given partitions, read a
/// batch at a time.
pub(crate) struct Fetcher {
    /// The Fetcher's own queue; released in `drop`, before the consumer is.
    queue: NonNull<rd::rd_kafka_queue_t>,
    /// Messages of the last fetch (never null), owned until the next fetch or `drop`.
    messages: Vec<*mut rd::rd_kafka_message_t>,
    /// How many of `messages` the caller has used; the rest come first next time.
    used: usize,
    topic: CString,
    consumer: BaseConsumer,
}

// SAFETY: librdkafka queues and messages may be used from any thread; a Fetcher is
// only ever used by one thread at a time (it is moved into its source task).
unsafe impl Send for Fetcher {}

impl Fetcher {
    /// Takes the records of `partitions` of `topic` off the consumer's queue. Call it
    /// before assigning them, so that none reaches the consumer's queue first.
    pub(crate) fn new(consumer: BaseConsumer, topic: &str, partitions: impl IntoIterator<Item = i32>) -> Result<Fetcher, String> {
        let client = consumer.client().native_ptr();
        let topic = CString::new(topic).map_err(|_| format!("topic name {topic:?} holds a NUL byte"))?;
        // SAFETY: the client pointer is valid while `consumer` lives, which the Fetcher
        // guarantees by owning it; the queue is released in drop.
        let queue = NonNull::new(unsafe { rd::rd_kafka_queue_new(client) }).ok_or("librdkafka created no queue")?;
        let fetcher = Fetcher { queue, messages: Vec::new(), used: 0, topic, consumer };
        for partition in partitions {
            fetcher.forward(partition)?;
        }
        Ok(fetcher)
    }

    /// Takes the records of `partition` too (one added to the topic while the task
    /// runs): call it before assigning the partition.
    pub(crate) fn forward(&self, partition: i32) -> Result<(), String> {
        let client = self.consumer.client().native_ptr();
        // SAFETY: valid client and topic; the partition's handle is released at once,
        // its forwarding stays with the partition.
        unsafe {
            let fetched = rd::rd_kafka_queue_get_partition(client, self.topic.as_ptr(), partition);
            let fetched = NonNull::new(fetched)
                .ok_or_else(|| format!("librdkafka has no queue for partition {partition} of {:?}", self.topic))?;
            rd::rd_kafka_queue_forward(fetched.as_ptr(), self.queue.as_ptr());
            rd::rd_kafka_queue_destroy(fetched.as_ptr());
        }
        Ok(())
    }

    pub(crate) fn consumer(&self) -> &BaseConsumer {
        &self.consumer
    }

    /// Messages fetched that the caller has not used yet.
    pub(crate) fn pending(&self) -> usize {
        self.messages.len() - self.used
    }

    /// The high watermark of `partition` as of the consumer's last fetch response for
    /// it: a local read, no broker request. `None` before the first response.
    pub(crate) fn cached_high_watermark(&self, partition: i32) -> Option<i64> {
        let (mut low, mut high) = (-1, -1);
        // SAFETY: the client lives as long as `self.consumer`; valid topic and out-pointers.
        let code = unsafe {
            rd::rd_kafka_get_watermark_offsets(
                self.consumer.client().native_ptr(),
                self.topic.as_ptr(),
                partition,
                &mut low,
                &mut high,
            )
        };
        (code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
    }

    /// Messages to read, oldest first: those of the last fetch the caller has not
    /// `use`d, else up to `max` new ones, which are those the consumer holds now or,
    /// when it holds none, the first to arrive within `wait` and whatever came with it.
    pub(crate) fn fetch(&mut self, wait: Duration, max: usize) -> &[Fetched] {
        if self.used == self.messages.len() {
            self.release();
            // librdkafka's batch call waits until the batch is full, so waiting is done
            // for one message only: a trickle of records is never held back.
            self.take(Duration::ZERO, max);
            if self.messages.is_empty() && max > 0 && self.take(wait, 1) {
                self.take(Duration::ZERO, max - 1);
            }
        }
        let unused = &self.messages[self.used..];
        // SAFETY: `Fetched` is a transparent wrapper around a non-null message pointer.
        unsafe { std::slice::from_raw_parts(unused.as_ptr().cast::<Fetched>(), unused.len()) }
    }

    /// Marks the first `count` messages `fetch` returned as read: they are released at
    /// the next fetch that needs new ones. Views of them must not be kept past it.
    pub(crate) fn mark_used(&mut self, count: usize) {
        self.used = (self.used + count).min(self.messages.len());
    }

    /// Appends up to `max` messages, waiting at most `wait` for them; true if any came.
    fn take(&mut self, wait: Duration, max: usize) -> bool {
        let held = self.messages.len();
        self.messages.reserve(max);
        let wait_ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: the buffer has room for `max` more pointers and librdkafka writes at
        // most that many, each a valid message; only those `count` are made visible.
        unsafe {
            let free = self.messages.as_mut_ptr().add(held);
            let count = rd::rd_kafka_consume_batch_queue(self.queue.as_ptr(), wait_ms, free, max);
            self.messages.set_len(held + usize::try_from(count).unwrap_or(0).min(max));
        }
        self.messages.len() > held
    }

    fn release(&mut self) {
        self.used = 0;
        for message in self.messages.drain(..) {
            // SAFETY: each message came from consume_batch_queue and is destroyed once.
            unsafe { rd::rd_kafka_message_destroy(message) };
        }
    }
}

impl Drop for Fetcher {
    fn drop(&mut self) {
        self.release();
        // SAFETY: the reference taken in `new`, released once, while the consumer lives.
        unsafe { rd::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}

/// A view of one fetched message, valid until the Fetcher's next `fetch`.
#[repr(transparent)]
pub(crate) struct Fetched(NonNull<rd::rd_kafka_message_t>);

impl Fetched {
    fn raw(&self) -> &rd::rd_kafka_message_t {
        // SAFETY: the message lives until the Fetcher releases it, which needs `&mut`
        // on the Fetcher while this view borrows it.
        unsafe { self.0.as_ref() }
    }

    /// The error librdkafka reports in place of a message (e.g. an offset reset).
    pub(crate) fn error(&self) -> Option<KafkaError> {
        let raw = self.raw();
        if raw.err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return None;
        }
        Some(KafkaError::MessageConsumption(RDKafkaErrorCode::from(raw.err)))
    }

    /// What librdkafka says about the error, for the log and the job's error.
    pub(crate) fn error_detail(&self) -> String {
        // SAFETY: rd_kafka_message_errstr returns a NUL-terminated string owned by the message.
        let text = unsafe { rd::rd_kafka_message_errstr(self.0.as_ptr()) };
        if text.is_null() {
            return String::new();
        }
        // SAFETY: checked non-null above; it lives as long as the message.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }

    pub(crate) fn partition(&self) -> i32 {
        self.raw().partition
    }

    pub(crate) fn offset(&self) -> i64 {
        self.raw().offset
    }

    /// The record's timestamp in milliseconds, if it has one.
    pub(crate) fn timestamp(&self) -> Option<i64> {
        let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a valid message and a valid out-pointer.
        let millis = unsafe { rd::rd_kafka_message_timestamp(self.0.as_ptr(), &mut kind) };
        (kind != rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE && millis >= 0).then_some(millis)
    }

    pub(crate) fn key(&self) -> Option<&[u8]> {
        let raw = self.raw();
        bytes(raw.key.cast_const(), raw.key_len)
    }

    /// The record's value; `None` for a tombstone (a null value).
    pub(crate) fn payload(&self) -> Option<&[u8]> {
        let raw = self.raw();
        bytes(raw.payload.cast_const(), raw.len)
    }

    /// The record's headers, in order; a header without a value reads as empty, a
    /// name that is not UTF-8 with U+FFFD in place of its bad bytes.
    pub(crate) fn headers(&self) -> Vec<(Cow<'_, str>, &[u8])> {
        let mut list: *mut rd::rd_kafka_headers_t = null_mut();
        // SAFETY: a valid message; on success `list` points at headers owned by it.
        let found = unsafe { rd::rd_kafka_message_headers(self.0.as_ptr(), &mut list) };
        if found != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || list.is_null() {
            return Vec::new();
        }
        let mut headers = Vec::new();
        for index in 0.. {
            let (mut name, mut value, mut size) = (null(), null::<c_void>(), 0usize);
            // SAFETY: `list` is valid while the message lives; out-pointers are valid.
            let got = unsafe { rd::rd_kafka_header_get_all(list, index, &mut name, &mut value, &mut size) };
            if got != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                break;
            }
            // SAFETY: header names are NUL-terminated strings owned by the message.
            let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
            headers.push((name, bytes(value, size).unwrap_or_default()));
        }
        headers
    }
}

/// `len` bytes at `data`, borrowed for as long as the message they belong to.
fn bytes<'a>(data: *const c_void, len: usize) -> Option<&'a [u8]> {
    if data.is_null() {
        return None;
    }
    // SAFETY: librdkafka guarantees `len` readable bytes at a non-null `data`,
    // owned by the message, which outlives every view the caller hands out.
    Some(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
}
