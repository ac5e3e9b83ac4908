//! The component glue, compiled for wasm32 only: wit-bindgen's bindings of world
//! `operator` of `weir:operator@0.3.0` (`wit/0.3`) and exports that forward each call
//! to the instance's [`Runner`].
//!
//! [`export_operator!`](crate::export_operator) instantiates it for one operator type.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;

use crate::config::Config;
use crate::error::Error;
use crate::log::Level;
use crate::operator::Operator;
use crate::packed::{Batch, Emitted, StateChunk};
use crate::runner::Runner;

pub mod bindings {
    wit_bindgen::generate!({
        world: "operator",
        path: "../wit/0.3",
        // Lift batches straight into the SDK's own types: no copy between two
        // identical sets of structs.
        with: { "weir:operator/types@0.3.0": crate::packed },
        pub_export_macro: true,
        export_macro_name: "__export_operator_world",
    });
}

thread_local! {
    /// The instance's one operator. A component instance runs one thread, so this is
    /// a plain global; `Any` because the operator type is the plugin's, not ours.
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Implements the world's exports for operator `O`.
pub struct Export<O>(PhantomData<O>);

impl<O: Operator> bindings::Guest for Export<O> {
    fn init(
        config: Vec<(String, String)>,
        inputs: Vec<String>,
        outputs: Vec<String>,
    ) -> Result<(), String> {
        INSTANCE.with_borrow_mut(|slot| {
            if slot.is_some() {
                return Err("init was called twice on one instance; the host must \
                            instantiate the plugin again instead"
                    .to_owned());
            }
            let config = Config::new(config)
                .with_inputs(inputs)
                .with_outputs(outputs);
            *slot = Some(Box::new(Runner::<O>::init(config)?));
            Ok(())
        })
    }

    fn process(input: u32, batch: Batch) -> Result<Emitted, String> {
        with_runner::<O, _>(|runner| runner.process_from(input, &batch))
    }

    fn on_watermark(watermark: i64) -> Result<Emitted, String> {
        with_runner::<O, _>(|runner| runner.on_watermark_emitted(watermark))
    }

    fn snapshot(max_bytes: u32) -> Result<StateChunk, String> {
        with_runner::<O, _>(|runner| runner.snapshot(max_bytes))
    }

    fn restore(chunk: StateChunk) -> Result<(), String> {
        with_runner::<O, _>(|runner| runner.restore(&chunk))
    }

    fn restored(watermark: i64) -> Result<(), String> {
        with_runner::<O, _>(|runner| runner.restored(watermark))
    }
}

fn with_runner<O: Operator, T>(
    call: impl FnOnce(&mut Runner<O>) -> Result<T, Error>,
) -> Result<T, String> {
    INSTANCE.with_borrow_mut(|slot| {
        let runner = slot
            .as_mut()
            .and_then(|instance| instance.downcast_mut::<Runner<O>>())
            .ok_or("the operator is not initialised: the host must call init first")?;
        call(runner).map_err(String::from)
    })
}

pub(crate) fn log(level: Level, message: &str) {
    use bindings::weir::operator::log;
    let level = match level {
        Level::Trace => log::Level::Trace,
        Level::Debug => log::Level::Debug,
        Level::Info => log::Level::Info,
        Level::Warn => log::Level::Warn,
        Level::Error => log::Level::Error,
    };
    log::log(level, message);
}
