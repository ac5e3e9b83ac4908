//! Keyed state past the plugin boundary (DESIGN.md §5): the changelog topic that records
//! every checkpoint's changes (`changelog`: prepared, written, read back), its packed
//! records (`packed`), what it holds of each key group (`ledger`), and the store's keyed
//! half, its local cache (`cache`). What crosses the boundary is `crate::chunk`'s, below.

mod cache;
pub(crate) mod changelog;
mod ledger;
pub mod packed;

pub use cache::{Change, FoldDurability, StateBase};
pub(crate) use ledger::MAX_SEGMENT_SEQ;
