//! A tuple of states is a state: `(KeyedMap<..>, Timers)` keeps both under the same
//! routing keys. Each part's entries are kept apart by the part's index, in the state
//! key (so two parts never hand over the same key) and in the entry, as the variant of
//! [`Part2`] or [`Part3`] (so an entry decodes before its key is read).

use serde::{Deserialize, Serialize};

use super::{Changes, Drained, KeyedState, Timers};
use crate::error::Error;

/// One checkpointed entry of a 2-tuple of states: which part it belongs to, and that
/// part's entry. What [`Operator::upgrade_state`](crate::Operator::upgrade_state) returns
/// for such a state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Part2<A, B> {
    /// An entry of the tuple's first part.
    First(A),
    /// An entry of the tuple's second part.
    Second(B),
}

/// One checkpointed entry of a 3-tuple of states; see [`Part2`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Part3<A, B, C> {
    /// An entry of the tuple's first part.
    First(A),
    /// An entry of the tuple's second part.
    Second(B),
    /// An entry of the tuple's third part.
    Third(C),
}

/// The error for an entry whose key names another part than its body.
fn mismatch(key: &[u8], path: &[u8]) -> Error {
    Error::new(format!(
        "the checkpoint holds an entry under key b\"{}\" whose part ({}) is not the part its \
         value was written for; restore only state written by this plugin",
        key.escape_ascii(),
        path.first()
            .map_or("none".to_owned(), |part| part.to_string())
    ))
}

/// Drains `part` as part `index` of a tuple.
fn drain_part<S: KeyedState>(
    part: &mut S,
    index: u8,
    changes: &mut Changes,
) -> Result<Drained, Error> {
    changes.enter(index);
    let drained = part.drain_changes(changes);
    changes.leave();
    drained
}

macro_rules! tuple_state {
    ($part:ident; $($index:tt $name:ident $variant:ident),+) => {
        /// Each part drains in turn, its entries tagged with its index; a part that
        /// fills the chunk is drained again next call (a part already drained hands
        /// over nothing then).
        impl<$($name: KeyedState),+> KeyedState for ($($name,)+) {
            type Entry = $part<$($name::Entry),+>;
            const SUB_KEYS: bool = true;

            fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
                $(
                    if drain_part(&mut self.$index, $index, changes)? == Drained::More {
                        return Ok(Drained::More);
                    }
                )+
                Ok(Drained::All)
            }

            fn restore_entry(&mut self, key: &[u8], entry: Self::Entry) -> Result<(), Error> {
                self.restore_under(key, &[], entry)
            }

            fn restore_under(&mut self, key: &[u8], path: &[u8], entry: Self::Entry) -> Result<(), Error> {
                let Some((&index, sub)) = path.split_first() else {
                    return Err(mismatch(key, path));
                };
                match entry {
                    $(
                        // A part keyed by routing key alone gets `sub` empty.
                        $part::$variant(entry) if index == $index => {
                            self.$index.restore_under(key, sub, entry)
                        }
                    )+
                    _ => Err(mismatch(key, path)),
                }
            }

            fn restored(&mut self, watermark: i64) -> Result<(), Error> {
                $(self.$index.restored(watermark)?;)+
                Ok(())
            }

            /// The first part's timers that has any.
            fn timers(&mut self) -> Option<&mut Timers> {
                $(
                    if let Some(timers) = self.$index.timers() {
                        return Some(timers);
                    }
                )+
                None
            }
        }
    };
}

tuple_state!(Part2; 0 A First, 1 B Second);
tuple_state!(Part3; 0 A First, 1 B Second, 2 C Third);
