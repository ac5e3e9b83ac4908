//! Joins orders with their payments: one record per (order, payment) pair of the same
//! order id whose payment came at most `bound_ms` of event time after the order (and
//! at most `early_ms` before it). An interval join on the SDK's `join::IntervalJoin`.
//!
//! Inputs (the operator's `inputs` in the job file): `orders` and `payments`, both
//! streams keyed by order id. An order at `to` and a payment at `tp` pair when
//! `to - early_ms <= tp <= to + bound_ms`; each pair is emitted once, when the second of
//! its two records arrives, whichever that is. Each side is kept until the watermark
//! shows that no record to come can pair with it. A record older than the watermark is
//! late: it pairs with nothing.
//!
//! Outputs: the first gets each pair, keyed by order id, at the later of the two times,
//! its value `{"order_id":"<key>","order":<order>,"payment":<payment>,
//! "order_time":<ms>,"payment_time":<ms>}` (compact; a value that is JSON is embedded as
//! is, any other as a JSON string). An output named `late`, if present, gets late
//! records unchanged (otherwise they are dropped, and counted).
//!
//! Config (`[operators.config]`): `bound_ms` (required: how long after its order a
//! payment still pairs, a non-negative integer of milliseconds), `early_ms` (optional,
//! default 0: how long before its order a payment still pairs, for clocks that
//! disagree).

use weir_guest::join::{IntervalJoin, Match};
use weir_guest::{Config, Emitter, Error, Input, Operator, Output, Record, Records};

/// Per order id, the orders and the payments still buffered, each as the JSON text
/// the output embeds.
pub type State = IntervalJoin<Vec<u8>, Vec<u8>>;

/// Largest accepted `bound_ms` and `early_ms` (about 31 years), far from i64 overflow.
const MAX_BOUND_MS: i64 = 1 << 40;

/// The operator: which input is which, and where late records go.
#[derive(Debug)]
pub struct OrderPayments {
    payments: Input,
    late: Option<Output>,
    /// Late records dropped for want of a `late` output (not checkpointed).
    dropped_late: u64,
}

impl OrderPayments {
    /// Late records this instance dropped for want of a `late` output.
    pub fn dropped_late(&self) -> u64 {
        self.dropped_late
    }
}

fn bound(config: &Config, key: &str, default: Option<i64>) -> Result<i64, Error> {
    let expected = "a non-negative integer of milliseconds, e.g. 600000";
    let value = match default {
        None => config.require(key, expected)?,
        Some(default) => config.parse(key, expected)?.unwrap_or(default),
    };
    if !(0..=MAX_BOUND_MS).contains(&value) {
        return Err(Error::new(format!(
            "operator config `{key}` = {value} is out of range: expected {expected}, at most \
             {MAX_BOUND_MS}"
        )));
    }
    Ok(value)
}

/// The JSON text to embed for `value`: itself if it is JSON, else a JSON string of it.
fn json_of(value: &[u8]) -> Vec<u8> {
    if serde_json::from_slice::<serde::de::IgnoredAny>(value).is_ok() {
        return value.to_vec();
    }
    let mut text = Vec::with_capacity(value.len() + 2);
    serde_json::to_writer(&mut text, &String::from_utf8_lossy(value)).expect("a string serializes");
    text
}

/// Emits one pair.
fn emit(out: &mut Emitter, pair: Match<'_, Vec<u8>, Vec<u8>>) {
    out.emit_with(Some(pair.key), pair.time(), |value| {
        value.extend(br#"{"order_id":"#);
        value.json_string(pair.key);
        value.extend(br#","order":"#);
        value.extend(pair.left);
        value.extend(br#","payment":"#);
        value.extend(pair.right);
        value.extend(br#","order_time":"#);
        value.integer(pair.left_time);
        value.extend(br#","payment_time":"#);
        value.integer(pair.right_time);
        value.extend(b"}");
    });
}

impl OrderPayments {
    fn late(&mut self, record: &Record<'_>, out: &mut Emitter) {
        match self.late {
            Some(late) => out.forward_to(late, record),
            None => {
                if self.dropped_late == 0 {
                    weir_guest::warn!(
                        "interval-join drops late records and has no `late` output; the first at \
                         timestamp {}",
                        record.timestamp
                    );
                }
                self.dropped_late += 1;
            }
        }
    }
}

impl Operator for OrderPayments {
    type State = State;

    fn init(config: &Config) -> Result<(Self, State), Error> {
        config.deny_unknown(&["bound_ms", "early_ms"])?;
        config.input("orders")?;
        let payments = config.input("payments")?;
        config.deny_unknown_inputs(&["orders", "payments"])?;
        let bound_ms = bound(config, "bound_ms", None)?;
        let early_ms = bound(config, "early_ms", Some(0))?;
        let late = config.find_output("late");
        if late == Some(Output::FIRST) {
            return Err(Error::new(format!(
                "the first output gets the pairs, but it is named `late`, the output for late \
                 records; its outputs are {:?}: put another output first",
                config.outputs()
            )));
        }
        let operator = OrderPayments {
            payments,
            late,
            dropped_late: 0,
        };
        Ok((operator, IntervalJoin::new(-early_ms, bound_ms)?))
    }

    fn process(
        &mut self,
        join: &mut State,
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        let payments = records.input() == self.payments;
        for record in records {
            let key = record.key.unwrap_or_default();
            let value = json_of(record.value);
            let joined = if payments {
                join.right(key, record.timestamp, value, |pair| emit(out, pair))?
            } else {
                join.left(key, record.timestamp, value, |pair| emit(out, pair))?
            };
            if !joined {
                self.late(&record, out);
            }
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        join: &mut State,
        watermark: i64,
        _: &mut Emitter,
    ) -> Result<(), Error> {
        join.evict(watermark);
        Ok(())
    }
}

weir_guest::export_operator!(OrderPayments);
