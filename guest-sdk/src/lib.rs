//! Write weir stream operators in Rust.
//!
//! A weir operator is a WebAssembly component exporting the `weir:operator` world.
//! This crate reduces that to one trait, [`Operator`], and one macro,
//! [`export_operator!`]: records arrive as zero-copy [`Record`] views of a packed
//! batch, output goes through an [`Emitter`], and the operator's [`Operator::State`]
//! is keyed: a checkpoint takes only the keys it changed, each entry encoded through
//! serde with a format version ([`state`]). [`window`] has keyed event-time windows
//! (tumbling, sliding, session) fired by watermarks; [`state::Keyed`] keeps a value
//! per key, [`state::KeyedMap`] a map per key checkpointed entry by entry, and
//! [`state::Timers`] per-key event-time timers that fire through
//! [`Operator::on_timer`]; a tuple of states is a state.
//!
//! The glue to the component model is compiled only for `wasm32`; natively the same
//! operator runs through a [`Runner`], which is how tests and benchmarks call it.
//!
//! # Example
//!
//! A plugin crate is a `cdylib` (for the component) and an `rlib` (for native use),
//! built with `cargo build --release --target wasm32-wasip2`:
//!
//! ```
//! use weir_guest::state::StateImage;
//! use weir_guest::window::TumblingWindows;
//! use weir_guest::{Config, Emitter, Error, Operator, Record, Records, Runner};
//!
//! /// Sums the byte length of values per key in tumbling windows.
//! pub struct BytesPerWindow;
//!
//! impl Operator for BytesPerWindow {
//!     type State = TumblingWindows<u64>;
//!
//!     fn init(config: &Config) -> Result<(Self, Self::State), Error> {
//!         config.deny_unknown(&["window_ms"])?;
//!         let window_ms = config.require("window_ms", "a positive integer of milliseconds")?;
//!         Ok((BytesPerWindow, TumblingWindows::new(window_ms)?))
//!     }
//!
//!     fn process(&mut self, windows: &mut Self::State, records: Records<'_>, _: &mut Emitter) -> Result<(), Error> {
//!         for record in records {
//!             if let Some(total) = windows.accumulator(record.key.unwrap_or(b""), record.timestamp) {
//!                 *total += record.value.len() as u64;
//!             }
//!         }
//!         Ok(())
//!     }
//!
//!     fn on_watermark(&mut self, windows: &mut Self::State, watermark: i64, out: &mut Emitter) -> Result<(), Error> {
//!         windows.fire(watermark, |window, key, total| {
//!             out.emit(Some(key), total.to_string().as_bytes(), window.end - 1);
//!         });
//!         Ok(())
//!     }
//! }
//!
//! // In Wasm this exports the component's functions; natively it expands to nothing.
//! weir_guest::export_operator!(BytesPerWindow);
//!
//! // The same logic, driven natively: a checkpoint takes the changed keys...
//! let mut runner = Runner::<BytesPerWindow>::init(Config::from_pairs([("window_ms", "1000")]))?;
//! runner.process_records(&[Record::new(Some(b"k"), b"abc", 5), Record::new(Some(b"k"), b"de", 999)])?;
//! let mut checkpoint = StateImage::default();
//! checkpoint.apply(&runner.changes()?)?;
//!
//! // ...and a fresh instance restores them.
//! let mut restored = Runner::<BytesPerWindow>::init(Config::from_pairs([("window_ms", "1000")]))?;
//! restored.restore_image(&checkpoint, i64::MIN)?;
//! let out = restored.on_watermark_records(1000)?;
//! assert_eq!((out[0].value.as_slice(), out[0].timestamp), (&b"5"[..], 999));
//! # Ok::<(), Error>(())
//! ```

#![deny(missing_docs)]

mod bytes;
mod config;
mod emit;
mod error;
mod key;
pub mod join;
pub mod json;
pub mod log;
mod operator;
pub mod packed;
mod ports;
mod record;
mod runner;
pub mod snapshot;
pub mod state;
pub mod window;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod glue;

/// The README's Rust examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

pub use config::Config;
pub use emit::{Emitted, Emitter, ValueWriter};
pub use error::Error;
pub use operator::{EntryOf, Operator};
pub use ports::{Input, MAX_OUTPUTS, Output};
pub use record::{Record, RecordIter, Records, sort_headers};
pub use runner::{OwnedRecord, Runner, unpack, unpack_emitted};

/// Exports an [`Operator`] as the plugin's component: `weir_guest::export_operator!(MyOp);`
/// once, at the plugin crate's root.
///
/// Compiling for `wasm32` it implements the exports of world `weir:operator/operator`
/// by forwarding them to a [`Runner`] of the operator; on other targets it expands
/// to nothing, so the crate also builds as an ordinary native library.
#[macro_export]
macro_rules! export_operator {
    ($operator:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            type __WeirOperatorExport = $crate::glue::Export<$operator>;
            $crate::glue::bindings::__export_operator_world!(
                __WeirOperatorExport with_types_in $crate::glue::bindings
            );
        };
    };
}
