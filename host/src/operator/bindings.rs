//! The `operator` world as Rust, generated from `wit/` at build time, and the
//! conversions between the host's [`Batch`] and the wire batch. Nothing outside
//! `operator` sees a generated type.

use std::mem::MaybeUninit;

use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext,
};
use wasmtime::component::{ComponentType, Func, Instance, Lower, TypedFunc};
use wasmtime::{AsContextMut, Store};

use super::sandbox::HostState;
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

/// The `process` export, called with [`WireBatch`] instead of the generated
/// `BatchParam` so that entries lower in one pass (see [`WireEntry`]).
#[derive(Clone, Copy)]
pub(super) struct ProcessFunc(Func);

type ProcessParams<'a> = (WireBatch<'a>,);
type ProcessResults = (Result<types::BatchResult, String>,);

impl ProcessFunc {
    /// Looks `process` up in a fresh instance, checking its type against [`WireBatch`].
    pub(super) fn new(store: &mut Store<HostState>, instance: &Instance) -> wasmtime::Result<Self> {
        let typed =
            instance.get_typed_func::<ProcessParams<'static>, ProcessResults>(store, "process")?;
        Ok(Self(*typed.func()))
    }

    pub(super) fn call(
        self,
        store: impl AsContextMut<Data = HostState>,
        batch: WireBatch<'_>,
    ) -> wasmtime::Result<Result<types::BatchResult, String>> {
        // SAFETY: `new` type-checked this function with the same parameter and
        // result types; only the borrow's lifetime differs, which the check ignores.
        let typed =
            unsafe { TypedFunc::<ProcessParams<'_>, ProcessResults>::new_unchecked(self.0) };
        Ok(typed.call(store, (batch,))?.0)
    }
}

/// The WIT `batch` as the host lowers it: borrowed from a [`Batch`].
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct WireBatch<'a> {
    data: &'a [u8],
    entries: &'a [WireEntry],
    headers: &'a [types::HeaderParam<'a>],
}

/// The host's own [`Entry`] lowered as a WIT `entry`, so a batch's entries go to
/// the guest without an intermediate copy, and a whole list in one pass over
/// guest memory: the derived lowering fetches the memory again for every field of
/// every entry, which cost more per record than the rest of the call together.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(super) struct WireEntry(Entry);

impl WireEntry {
    /// Views the host's entries as wire entries, without copying.
    fn slice(entries: &[Entry]) -> &[WireEntry] {
        // SAFETY: `WireEntry` is `repr(transparent)` over `Entry`: same layout,
        // and the lifetime is carried over.
        unsafe { std::slice::from_raw_parts(entries.as_ptr().cast::<WireEntry>(), entries.len()) }
    }

    fn generated(&self) -> types::Entry {
        let e = &self.0;
        types::Entry {
            has_key: e.has_key,
            key_offset: e.key_offset,
            key_len: e.key_len,
            value_offset: e.value_offset,
            value_len: e.value_len,
            timestamp: e.timestamp,
        }
    }
}

/// Canonical ABI layout of `entry`: bool, four u32 and an s64, aligned to 8.
const ENTRY_SIZE: usize = 32;
const _: () = assert!(<types::Entry as ComponentType>::SIZE32 == ENTRY_SIZE);
const _: () = assert!(<types::Entry as ComponentType>::ALIGN32 == 8);

// SAFETY: every item delegates to the derived implementation of the generated
// record, except `linear_store_list_to_memory`, which writes the same bytes.
unsafe impl ComponentType for WireEntry {
    type Lower = <types::Entry as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <types::Entry as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <types::Entry as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: see the `ComponentType` impl; the list store stays within the range the
// caller allocated (`items.len() * SIZE32` bytes at `offset`), which the slice
// indexing checks.
unsafe impl Lower for WireEntry {
    fn linear_lower_to_flat<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        dst: &mut MaybeUninit<Self::Lower>,
    ) -> wasmtime::Result<()> {
        self.generated().linear_lower_to_flat(cx, ty, dst)
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        self.generated().linear_lower_to_memory(cx, ty, offset)
    }

    fn linear_store_list_to_memory<T>(
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        offset: usize,
        items: &[Self],
    ) -> wasmtime::Result<()> {
        let memory = &mut cx.as_slice_mut()[offset..][..items.len() * ENTRY_SIZE];
        let (slots, rest) = memory.as_chunks_mut::<ENTRY_SIZE>();
        debug_assert!(rest.is_empty());
        for (slot, WireEntry(entry)) in slots.iter_mut().zip(items) {
            *slot = encode_entry(entry);
        }
        Ok(())
    }
}

/// One `entry` in the canonical ABI: little-endian fields at their aligned
/// offsets (bool at 0, u32s at 4, 8, 12, 16, s64 at 24), padding zeroed.
fn encode_entry(entry: &Entry) -> [u8; ENTRY_SIZE] {
    let mut bytes = [0u8; ENTRY_SIZE];
    bytes[0] = u8::from(entry.has_key);
    bytes[4..8].copy_from_slice(&entry.key_offset.to_le_bytes());
    bytes[8..12].copy_from_slice(&entry.key_len.to_le_bytes());
    bytes[12..16].copy_from_slice(&entry.value_offset.to_le_bytes());
    bytes[16..20].copy_from_slice(&entry.value_len.to_le_bytes());
    bytes[24..32].copy_from_slice(&entry.timestamp.to_le_bytes());
    bytes
}

/// Calls `f` with `batch` in wire form. Nothing is copied but the (rare)
/// headers' references: the wire batch borrows the host's buffers.
pub(super) fn with_wire<R>(batch: &Batch, f: impl FnOnce(WireBatch<'_>) -> R) -> R {
    let (data, entries, headers) = batch.parts();
    let headers: Vec<types::HeaderParam<'_>> = headers
        .iter()
        .map(|h| types::HeaderParam {
            entry: h.entry,
            name: &h.name,
            value: &h.value,
        })
        .collect();
    f(WireBatch {
        data,
        entries: WireEntry::slice(entries),
        headers: &headers,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_encode_to_the_canonical_layout() {
        let entry = Entry {
            has_key: true,
            key_offset: 0x0102_0304,
            key_len: 5,
            value_offset: 6,
            value_len: 7,
            timestamp: -2,
        };
        let bytes = encode_entry(&entry);
        assert_eq!(bytes[..4], [1, 0, 0, 0]);
        assert_eq!(bytes[4..8], [4, 3, 2, 1]);
        assert_eq!(bytes[8..20], [5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0]);
        assert_eq!(bytes[20..24], [0; 4]);
        assert_eq!(bytes[24..], (-2i64).to_le_bytes());
    }
}
