//! The `operator` world as Rust, generated from `wit/` at build time, and the
//! conversions between the host's [`Batch`] and the wire batch. Nothing outside
//! `operator` sees a generated type.

use crate::batch::{Batch, BatchError, Entry, Header};

wasmtime::component::bindgen!({
    path: "../wit",
    world: "weir:operator/operator",
    // Batches go in by reference: the host lowers its own buffers into the guest
    // without first copying them into owned wire structs.
    ownership: Borrowing { duplicate_if_necessary: true },
});

pub(super) use self::weir::operator::log;
pub(super) use self::weir::operator::types;

/// Reusable space for lowering batches: the entries' wire form, kept across
/// calls so a steady stream of batches allocates nothing here.
#[derive(Default)]
pub(super) struct WireScratch {
    entries: Vec<types::Entry>,
}

impl WireScratch {
    /// Calls `f` with `batch` in wire form. Keys and values are not copied: the
    /// wire batch borrows the host's data buffer.
    pub(super) fn with_wire<R>(
        &mut self,
        batch: &Batch,
        f: impl FnOnce(types::BatchParam<'_>) -> R,
    ) -> R {
        let (data, entries, headers) = batch.parts();
        self.entries.clear();
        self.entries.extend(entries.iter().map(|e| types::Entry {
            has_key: e.has_key,
            key_offset: e.key_offset,
            key_len: e.key_len,
            value_offset: e.value_offset,
            value_len: e.value_len,
            timestamp: e.timestamp,
        }));
        let headers: Vec<types::HeaderParam<'_>> = headers
            .iter()
            .map(|h| types::HeaderParam {
                entry: h.entry,
                name: &h.name,
                value: &h.value,
            })
            .collect();
        f(types::BatchParam {
            data,
            entries: &self.entries,
            headers: &headers,
        })
    }
}

/// Takes ownership of a batch a guest returned; its data buffer moves, not copies.
pub(super) fn from_wire(batch: types::BatchResult) -> Result<Batch, BatchError> {
    let entries = batch
        .entries
        .into_iter()
        .map(|e| Entry {
            has_key: e.has_key,
            key_offset: e.key_offset,
            key_len: e.key_len,
            value_offset: e.value_offset,
            value_len: e.value_len,
            timestamp: e.timestamp,
        })
        .collect();
    let headers = batch
        .headers
        .into_iter()
        .map(|h| Header {
            entry: h.entry,
            name: h.name,
            value: h.value,
        })
        .collect();
    Batch::from_parts(batch.data, entries, headers)
}
