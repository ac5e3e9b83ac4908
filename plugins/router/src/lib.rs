//! Routes each record of its one input to the output named by the value of a top-level
//! field of its JSON value: `{"region":"eu"}` goes to the output `eu`. Records pass
//! unchanged (key, value, timestamp, headers).
//!
//! Outputs (the operator's `outputs` in the job file, any names):
//! - one per value to route, named by the value: a string's text, any other JSON value
//!   in compact JSON (`42`, `true`);
//! - the default output, for a record whose field is missing, `null`, or names no
//!   output: the output named by config `default`, else the one named `default`; with
//!   neither, such records are dropped;
//! - `late`, if present: records older than the watermark, whatever their value;
//! - `invalid`, if present: values that are not one JSON object (else dropped).
//!
//! The names `late` and `invalid` are never routed to by value. Dropped records are
//! counted, and the first of each kind logged. Stateless.
//!
//! Config (`[operators.config]`): `field` (required, the top-level JSON field), `default`
//! (optional, the name of an output; it must exist).

use std::collections::HashMap;

use serde_json::Value;
use weir_guest::json::top_level_field;
use weir_guest::{Config, Emitter, Error, Operator, Output, Record, Records};

/// The outputs that value routing never picks.
const RESERVED: [&str; 2] = ["late", "invalid"];

/// The operator: its configuration and the watermark it has seen.
#[derive(Debug)]
pub struct Router {
    field: String,
    /// Each output routed to by value, by its name.
    routes: HashMap<String, Output>,
    default: Option<Output>,
    late: Option<Output>,
    invalid: Option<Output>,
    /// The last watermark: a record older is late.
    watermark: i64,
    /// Records dropped since this instance started: no output for their value, and
    /// values that are not JSON objects (not checkpointed).
    dropped: Dropped,
}

/// Counts of the records dropped, by why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// No output for the field's value, and no default output.
    pub unrouted: u64,
    /// Not one JSON object, and no `invalid` output.
    pub invalid: u64,
}

impl Router {
    /// The records this instance dropped.
    pub fn dropped(&self) -> Dropped {
        self.dropped
    }

    /// Where `record` goes: `None` to drop it.
    fn route(&mut self, record: &Record<'_>) -> Option<Output> {
        if let Some(late) = self.late.filter(|_| record.timestamp < self.watermark) {
            return Some(late);
        }
        let value = match top_level_field(record.value, &self.field) {
            Ok(value) => value,
            Err(error) => {
                if self.invalid.is_none() {
                    if self.dropped.invalid == 0 {
                        weir_guest::warn!(
                            "router drops values that are not JSON objects and has no `invalid` \
                             output; the first, at timestamp {}: {error}",
                            record.timestamp
                        );
                    }
                    self.dropped.invalid += 1;
                }
                return self.invalid;
            }
        };
        let routed = match &value {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) => self.routes.get(name.as_str()),
            Some(other) => self.routes.get(other.to_string().as_str()),
        };
        let output = routed.copied().or(self.default);
        if output.is_none() {
            if self.dropped.unrouted == 0 {
                weir_guest::warn!(
                    "router drops records whose `{}` names no output, having no default output; \
                     the first has {}",
                    self.field,
                    value.map_or("no such field".to_owned(), |v| v.to_string())
                );
            }
            self.dropped.unrouted += 1;
        }
        output
    }
}

impl Operator for Router {
    type State = ();

    fn init(config: &Config) -> Result<(Self, ()), Error> {
        config.deny_unknown(&["field", "default"])?;
        let field: String = config.require("field", "the top-level JSON field to route by")?;
        if field.is_empty() {
            return Err(Error::new(
                "operator config `field` is empty: name the top-level JSON field to route by",
            ));
        }
        let default = match config.get("default") {
            Some(name) => Some(
                config
                    .output(name)
                    .map_err(|e| e.context(format!("operator config `default` = {name:?}")))?,
            ),
            None => config.find_output("default"),
        };
        let routes = config
            .output_ports()
            .filter(|(_, name)| !RESERVED.contains(name))
            .map(|(output, name)| (name.to_owned(), output))
            .collect();
        let router = Router {
            field,
            routes,
            default,
            late: config.find_output("late"),
            invalid: config.find_output("invalid"),
            watermark: i64::MIN,
            dropped: Dropped::default(),
        };
        Ok((router, ()))
    }

    fn process(
        &mut self,
        _: &mut (),
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            if let Some(output) = self.route(&record) {
                out.forward_to(output, &record);
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, _: &mut (), watermark: i64, _: &mut Emitter) -> Result<(), Error> {
        self.watermark = self.watermark.max(watermark);
        Ok(())
    }

    fn restored(&mut self, _: &mut (), watermark: i64) -> Result<(), Error> {
        self.watermark = self.watermark.max(watermark);
        Ok(())
    }
}

weir_guest::export_operator!(Router);
