//! The trait a plugin author implements: the operator's whole contract with the host.
//!
//! Configuration lives in the operator value, everything that must survive a restart
//! in its [`Operator::State`]: keyed state, which the SDK checkpoints key by key,
//! only the keys that changed, and restores through serde.

use crate::config::Config;
use crate::emit::Emitter;
use crate::error::Error;
use crate::record::Records;
use crate::state::KeyedState;

/// One key's stored state for operator `O`: what [`Operator::upgrade_state`] returns.
pub type EntryOf<O> = <<O as Operator>::State as KeyedState>::Entry;

/// A stream operator.
///
/// The host calls [`init`](Operator::init) once per instance, then
/// [`process`](Operator::process) for each batch and
/// [`on_watermark`](Operator::on_watermark) as event time advances (after
/// [`on_timer`](Operator::on_timer) for each timer it fires). At a checkpoint
/// the SDK hands the host the keys whose state changed; after a failure the host
/// restores the last committed state into a freshly initialised instance, each
/// subtask the keys it owns. Keep every piece of data that affects future output in
/// `State`, kept per record key, or a restart will change the results; what `self`
/// holds beyond the configuration (counters for logs, say) starts afresh.
///
/// A panic traps the instance: the host drops it, restores the last checkpoint and
/// retries, then treats the record as poison. Return an [`Error`] instead for
/// anything the job's owner should fix.
pub trait Operator: Sized + 'static {
    /// Everything that must survive a restart, per key: a window helper
    /// ([`TumblingWindows`](crate::window::TumblingWindows) and the others), a
    /// [`Keyed`](crate::state::Keyed) value, a [`KeyedMap`](crate::state::KeyedMap),
    /// [`Timers`](crate::state::Timers), a tuple of these, or `()` for a stateless
    /// operator.
    type State: KeyedState;

    /// The version of the serialized shape of one key's state. Bump it when the shape
    /// changes; an entry of another version goes through [`Operator::upgrade_state`].
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

    /// A timer of the state's [`Timers`](crate::state::Timers) fired: the watermark
    /// reached `time`, and the timer registered for `key` at `time` is gone. Called
    /// before [`on_watermark`](Operator::on_watermark), in order of time, then key
    /// bytes; it may register timers (those due already fire at the next watermark).
    /// Refuses by default: an operator that registers timers implements it.
    fn on_timer(
        &mut self,
        state: &mut Self::State,
        key: &[u8],
        time: i64,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        let _ = (state, out);
        Err(Error::new(format!(
            "a timer of key b\"{}\" at {time} fired, but this operator does not implement \
             Operator::on_timer; implement it, or register no timers",
            key.escape_ascii()
        )))
    }

    /// Ends a restore, once every entry is in: the instance had reached event time
    /// `watermark` when the checkpoint was taken. Rebuild here what `self` derives
    /// from the state (an index, a cache), and refuse a state that does not fit the
    /// configuration. By default it calls [`check_restored`](Operator::check_restored).
    fn restored(&mut self, state: &mut Self::State, watermark: i64) -> Result<(), Error> {
        let _ = watermark;
        self.check_restored(state)
    }

    /// Checks the restored state against this instance's configuration, from the
    /// default [`restored`](Operator::restored). Accepts everything by default; the
    /// window helpers already refuse entries of another window size or gap.
    fn check_restored(&self, state: &Self::State) -> Result<(), Error> {
        let _ = state;
        Ok(())
    }

    /// Converts one key's entry `body` of state version `version` (not
    /// [`STATE_VERSION`](Operator::STATE_VERSION)); decode it with
    /// [`snapshot::decode_body`](crate::snapshot::decode_body). Refuses by default.
    fn upgrade_state(version: u16, body: &[u8]) -> Result<EntryOf<Self>, Error> {
        let _ = body;
        Err(Error::new(format!(
            "the checkpoint holds state version {version} but this plugin reads version {}; \
             restore it with the plugin build that wrote it, or implement \
             Operator::upgrade_state",
            Self::STATE_VERSION
        )))
    }
}
