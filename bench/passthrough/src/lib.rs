//! The benchmark's stateless operator: emits every record unchanged (key, value, event
//! time). Against the transactional copier it measures what weir's data path costs
//! beyond Kafka's own transactions. Build: `cargo build --release --target wasm32-wasip2
//! -p bench-passthrough` (bench/run does).

use weir_guest::{Config, Emitter, Error, Operator, Records};

#[derive(Debug)]
pub struct Passthrough;

impl Operator for Passthrough {
    type State = ();

    fn init(config: &Config) -> Result<(Self, Self::State), Error> {
        config.deny_unknown(&[])?;
        Ok((Self, ()))
    }

    fn process(&mut self, _state: &mut (), records: Records<'_>, out: &mut Emitter) -> Result<(), Error> {
        for record in records {
            out.emit(record.key, record.value, record.timestamp);
        }
        Ok(())
    }

    fn on_watermark(&mut self, _state: &mut (), _watermark: i64, _out: &mut Emitter) -> Result<(), Error> {
        Ok(())
    }
}

weir_guest::export_operator!(Passthrough);
