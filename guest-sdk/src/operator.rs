//! The trait a plugin author implements: the operator's whole contract with the host.
//!
//! Configuration lives in the operator value, everything that must survive a restart
//! in its [`Operator::State`], which the SDK snapshots and restores through serde.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::Config;
use crate::emit::Emitter;
use crate::error::Error;
use crate::record::Records;

/// A stream operator.
///
/// The host calls [`init`](Operator::init) once per instance, then
/// [`process`](Operator::process) for each batch and
/// [`on_watermark`](Operator::on_watermark) as event time advances. At a checkpoint
/// the SDK snapshots the state; after a failure it restores the last committed one
/// into a freshly initialised instance. Keep every piece of data that affects future
/// output in `State`, or a restart will change the results.
///
/// A panic traps the instance: the host drops it, restores the last checkpoint and
/// retries, then treats the record as poison. Return an [`Error`] instead for
/// anything the job's owner should fix.
pub trait Operator: Sized + 'static {
    /// Everything that must survive a restart. Use `()` for a stateless operator.
    type State: Serialize + DeserializeOwned + 'static;

    /// The version of `State`'s serialized shape. Bump it when the shape changes; a
    /// snapshot of another version goes through [`Operator::upgrade_state`].
    const STATE_VERSION: u16 = 1;

    /// Reads the configuration and returns the operator with its initial state.
    fn init(config: &Config) -> Result<(Self, Self::State), Error>;

    /// Consumes a batch in arrival order and emits what it produces now.
    fn process(
        &mut self,
        state: &mut Self::State,
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error>;

    /// Event time has reached `watermark` (epoch ms): no record with a smaller
    /// timestamp follows. Emits what this completes, e.g. windows. Does nothing by
    /// default.
    fn on_watermark(
        &mut self,
        state: &mut Self::State,
        watermark: i64,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        let _ = (state, watermark, out);
        Ok(())
    }

    /// Checks a restored state against this instance's configuration, e.g. that a
    /// window size did not change. Accepts everything by default.
    fn check_restored(&self, state: &Self::State) -> Result<(), Error> {
        let _ = state;
        Ok(())
    }

    /// Converts a snapshot `body` of state version `version` (not
    /// [`STATE_VERSION`](Operator::STATE_VERSION)); decode it with
    /// [`snapshot::decode_body`](crate::snapshot::decode_body). Refuses by default.
    fn upgrade_state(version: u16, body: &[u8]) -> Result<Self::State, Error> {
        let _ = body;
        Err(Error::new(format!(
            "snapshot holds state version {version} but this plugin reads version {}; restore \
             it with the plugin build that took it, or implement Operator::upgrade_state",
            Self::STATE_VERSION
        )))
    }
}
