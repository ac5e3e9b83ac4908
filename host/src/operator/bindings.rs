//! Both `operator` worlds as Rust (0.2 from `wit/`, 0.3 from `wit/0.3/`), generated at
//! build time, and the conversions between the host's [`Batch`] and state entries and
//! the wire ones, shared by both worlds: their records are the same, and wasmtime
//! checks a type by its structure. Nothing outside `operator` sees a generated type.

use std::mem::MaybeUninit;

use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext, LowerContext,
};
use wasmtime::component::{ComponentType, Func, Instance, Lift, Lower, TypedFunc};
use wasmtime::{AsContextMut, Store};

use super::error::OutputsError;
use super::instance::Tombstones;
use super::ports::Emitted;
use super::sandbox::HostState;
use crate::batch::{Batch, BatchError, Entry, Header, OutputBound};
use crate::chunk::{ChunkError, StateChunk, StateEntry};

/// `weir:operator@0.2.0`: one input, one output.
pub(super) mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "weir:operator/operator",
        // Batches go in by reference: the host lowers its own buffers into the guest
        // without first copying them into owned wire structs.
        ownership: Borrowing { duplicate_if_necessary: true },
    });
}

/// `weir:operator@0.3.0`: named inputs and outputs.
pub(super) mod v0_3 {
    wasmtime::component::bindgen!({
        path: "../wit/0.3",
        world: "weir:operator/operator",
        ownership: Borrowing { duplicate_if_necessary: true },
    });
}

/// The 0.2 types, which the wire types below delegate to; they check against 0.3's
/// records as well, which are the same.
pub(super) use self::v0_2::weir::operator::types;

/// The 0.2 `process` export, called with [`WireBatch`] instead of the generated
/// `BatchParam` so that entries lower in one pass (see [`WireEntry`]).
#[derive(Clone, Copy)]
pub(super) struct ProcessFunc(Func);

type ProcessParams<'a> = (WireBatch<'a>,);
type ProcessResults = (Result<WireBatchResult, String>,);

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
    ) -> wasmtime::Result<Result<WireBatchResult, String>> {
        // SAFETY: `new` type-checked this function with the same parameter and
        // result types; only the borrow's lifetime differs, which the check ignores.
        let typed =
            unsafe { TypedFunc::<ProcessParams<'_>, ProcessResults>::new_unchecked(self.0) };
        Ok(typed.call(store, (batch,))?.0)
    }
}

/// The 0.3 `process` export: the input's index and a [`WireBatch`] in, a
/// [`WireEmitted`] out, lowered and lifted as the 0.2 one is.
#[derive(Clone, Copy)]
pub(super) struct ProcessInputFunc(Func);

type ProcessInputParams<'a> = (u32, WireBatch<'a>);
type EmittedResults = (Result<WireEmitted, String>,);

impl ProcessInputFunc {
    /// Looks `process` up in a fresh instance, checking its type against the wire types.
    pub(super) fn new(store: &mut Store<HostState>, instance: &Instance) -> wasmtime::Result<Self> {
        let typed = instance
            .get_typed_func::<ProcessInputParams<'static>, EmittedResults>(store, "process")?;
        Ok(Self(*typed.func()))
    }

    pub(super) fn call(
        self,
        store: impl AsContextMut<Data = HostState>,
        input: u32,
        batch: WireBatch<'_>,
    ) -> wasmtime::Result<Result<WireEmitted, String>> {
        // SAFETY: as in `ProcessFunc::call`: `new` checked these very types.
        let typed =
            unsafe { TypedFunc::<ProcessInputParams<'_>, EmittedResults>::new_unchecked(self.0) };
        Ok(typed.call(store, (input, batch))?.0)
    }
}

/// The `on-watermark` export, whose records lift as `process`'s do: a
/// [`WireBatchResult`] (0.2) or a [`WireEmitted`] (0.3).
pub(super) struct WatermarkFunc<R: Lift + 'static>(TypedFunc<(i64,), (Result<R, String>,)>);

// Not derived: that would ask `R: Copy`, which a handle to the function needs not.
impl<R: Lift + 'static> Clone for WatermarkFunc<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R: Lift + 'static> Copy for WatermarkFunc<R> {}

impl<R: Lift + 'static> WatermarkFunc<R> {
    /// Looks `on-watermark` up in a fresh instance, checking its type against `R`.
    pub(super) fn new(store: &mut Store<HostState>, instance: &Instance) -> wasmtime::Result<Self> {
        Ok(Self(instance.get_typed_func(store, "on-watermark")?))
    }

    pub(super) fn call(
        self,
        store: impl AsContextMut<Data = HostState>,
        watermark: i64,
    ) -> wasmtime::Result<Result<R, String>> {
        Ok(self.0.call(store, (watermark,))?.0)
    }
}

/// The `snapshot` export, whose chunk lifts as a [`WireStateChunk`]: sized up before
/// anything is copied out of the guest.
#[derive(Clone, Copy)]
pub(super) struct SnapshotFunc(TypedFunc<(u32,), (Result<WireStateChunk, String>,)>);

impl SnapshotFunc {
    /// Looks `snapshot` up in a fresh instance, checking its type against the WIT's.
    pub(super) fn new(store: &mut Store<HostState>, instance: &Instance) -> wasmtime::Result<Self> {
        Ok(Self(instance.get_typed_func(store, "snapshot")?))
    }

    pub(super) fn call(
        self,
        store: impl AsContextMut<Data = HostState>,
        max_bytes: u32,
    ) -> wasmtime::Result<Result<WireStateChunk, String>> {
        Ok(self.0.call(store, (max_bytes,))?.0)
    }
}

/// The WIT `state-chunk` as `snapshot` returns it: its parts, or why a chunk of its
/// lengths cannot be valid, found before either list was copied (a hostile guest's
/// 32 MiB of data stays in its own memory).
pub(super) struct WireStateChunk(Result<(Vec<u8>, Vec<StateEntry>), ChunkError>);

impl WireStateChunk {
    /// The chunk, checked against `max_bytes` (`StateChunk::from_parts`).
    pub(super) fn into_chunk(self, max_bytes: u32) -> Result<StateChunk, ChunkError> {
        let (data, entries) = self.0?;
        StateChunk::from_parts(data, entries, max_bytes)
    }
}

/// Canonical ABI layout of `state-entry` (four u32 and a bool, aligned to 4) and of
/// `state-chunk` (two lists, each a pointer and a length).
const STATE_ENTRY_SIZE: usize = 20;
const STATE_CHUNK_SIZE: usize = 16;
const _: () = assert!(<types::StateEntry as ComponentType>::SIZE32 == STATE_ENTRY_SIZE);
const _: () = assert!(<types::StateEntry as ComponentType>::ALIGN32 == 4);
const _: () = assert!(<types::StateChunkResult as ComponentType>::SIZE32 == STATE_CHUNK_SIZE);

// SAFETY: every item delegates to the derived implementation of the generated record.
unsafe impl ComponentType for WireStateChunk {
    type Lower = <types::StateChunkResult as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <types::StateChunkResult as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <types::StateChunkResult as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: the flat form delegates to the derived implementation; the memory form reads
// the layout asserted above, and every list it reads is bounds-checked against the
// guest's memory and charged to the hostcall fuel, as wasmtime's own lists are.
unsafe impl Lift for WireStateChunk {
    fn linear_lift_from_flat(
        cx: &mut LiftContext<'_>,
        ty: InterfaceType,
        src: &Self::Lower,
    ) -> wasmtime::Result<Self> {
        // A `result<state-chunk, string>` never comes flat (five values, one allowed):
        // this path only exists for the trait, and checks the sizes after the copy.
        let chunk = types::StateChunkResult::linear_lift_from_flat(cx, ty, src)?;
        let entries = chunk.entries.iter().map(StateEntry::from).collect();
        Ok(WireStateChunk(
            StateChunk::check_size(chunk.data.len(), chunk.entries.len())
                .map(|()| (chunk.data, entries)),
        ))
    }

    fn linear_lift_from_memory(
        cx: &mut LiftContext<'_>,
        _ty: InterfaceType,
        bytes: &[u8],
    ) -> wasmtime::Result<Self> {
        let u32_at =
            |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let (data_at, data_len, entries_at, entries_len) =
            (u32_at(0), u32_at(4), u32_at(8), u32_at(12));
        if let Err(refused) = StateChunk::check_size(data_len, entries_len) {
            return Ok(WireStateChunk(Err(refused)));
        }
        if !entries_at.is_multiple_of(4) {
            wasmtime::bail!("list pointer is not aligned");
        }
        let memory = cx.memory();
        let list = |at: usize, len: usize| {
            memory
                .get(at..)
                .and_then(|tail| tail.get(..len))
                .ok_or_else(|| wasmtime::format_err!("list pointer/length out of bounds of memory"))
        };
        let data = list(data_at, data_len)?;
        let entries = list(entries_at, entries_len * STATE_ENTRY_SIZE)?;
        cx.consume_fuel_array(data_len, 1)?;
        cx.consume_fuel_array(entries_len, size_of::<StateEntry>())?;
        let (entries, rest) = entries.as_chunks::<STATE_ENTRY_SIZE>();
        debug_assert!(rest.is_empty());
        Ok(WireStateChunk(Ok((
            data.to_vec(),
            entries.iter().map(decode_state_entry).collect(),
        ))))
    }
}

/// One `state-entry` in the canonical ABI: u32s at 0, 4, 8 and 12, the bool at 16 (any
/// non-zero byte is `true`, as the canonical ABI lifts a bool).
fn decode_state_entry(bytes: &[u8; STATE_ENTRY_SIZE]) -> StateEntry {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    StateEntry {
        key_offset: u32_at(0),
        key_len: u32_at(4),
        value_offset: u32_at(8),
        value_len: u32_at(12),
        removed: bytes[16] != 0,
    }
}

impl From<&types::StateEntry> for StateEntry {
    fn from(e: &types::StateEntry) -> StateEntry {
        StateEntry {
            key_offset: e.key_offset,
            key_len: e.key_len,
            value_offset: e.value_offset,
            value_len: e.value_len,
            removed: e.removed,
        }
    }
}

/// A state entry as either world's generated `state-entry`, for `restore`.
macro_rules! state_entry_to_guest {
    ($($world:ident),*) => {$(
        impl From<&StateEntry> for $world::weir::operator::types::StateEntry {
            fn from(e: &StateEntry) -> Self {
                Self {
                    key_offset: e.key_offset,
                    key_len: e.key_len,
                    value_offset: e.value_offset,
                    value_len: e.value_len,
                    removed: e.removed,
                }
            }
        }
    )*};
}
state_entry_to_guest!(v0_2, v0_3);

/// The WIT `batch` as the host lowers it: borrowed from a [`Batch`].
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct WireBatch<'a> {
    data: &'a [u8],
    entries: &'a [WireEntry],
    headers: &'a [types::HeaderParam<'a>],
}

/// The WIT `batch` as the host lifts it from `process`: entries straight into
/// the host's own [`Entry`] (see [`WireEntry`]), data as one buffer.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(super) struct WireBatchResult {
    data: Vec<u8>,
    entries: Vec<WireEntry>,
    headers: Vec<types::HeaderResult>,
}

/// The WIT `emitted` (0.3) as the host lifts it: the records as a
/// [`WireBatchResult`], and the output of each.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(super) struct WireEmitted {
    batch: WireBatchResult,
    outputs: Vec<u8>,
}

impl From<WireBatchResult> for WireEmitted {
    /// A 0.2 output: every record to the first output.
    fn from(batch: WireBatchResult) -> Self {
        WireEmitted {
            batch,
            outputs: Vec::new(),
        }
    }
}

/// The host's own [`Entry`] as a WIT `entry`, so a batch's entries cross without
/// an intermediate copy. A list lowers in one pass over guest memory and each
/// entry lifts from its 32 bytes directly: the derived code fetches the memory
/// and computes the layout again for every field of every entry, which cost more
/// per record than the rest of the call together.
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

// SAFETY: as for `Lower`: the flat form delegates to the derived implementation,
// and `decode_entry` reads the same layout `encode_entry` writes.
unsafe impl Lift for WireEntry {
    fn linear_lift_from_flat(
        cx: &mut LiftContext<'_>,
        ty: InterfaceType,
        src: &Self::Lower,
    ) -> wasmtime::Result<Self> {
        let e = types::Entry::linear_lift_from_flat(cx, ty, src)?;
        Ok(WireEntry(Entry {
            has_key: e.has_key,
            key_offset: e.key_offset,
            key_len: e.key_len,
            value_offset: e.value_offset,
            value_len: e.value_len,
            timestamp: e.timestamp,
        }))
    }

    fn linear_lift_from_memory(
        _cx: &mut LiftContext<'_>,
        _ty: InterfaceType,
        bytes: &[u8],
    ) -> wasmtime::Result<Self> {
        let bytes: &[u8; ENTRY_SIZE] = bytes.try_into()?;
        Ok(WireEntry(decode_entry(bytes)))
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

/// The inverse of [`encode_entry`]; any non-zero byte is `true`, as the
/// canonical ABI lifts a bool.
fn decode_entry(bytes: &[u8; ENTRY_SIZE]) -> Entry {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    Entry {
        has_key: bytes[0] != 0,
        key_offset: u32_at(4),
        key_len: u32_at(8),
        value_offset: u32_at(12),
        value_len: u32_at(16),
        timestamp: i64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes")),
    }
}

/// Calls `f` with `batch` in wire form, its records without a value as `tombstones`
/// says. Nothing is copied but the (rare) headers' references, and the entries of a
/// batch with tombstones to be handed as empty values: the wire batch borrows the
/// host's buffers.
pub(super) fn with_wire<R>(batch: &Batch, tombstones: Tombstones, f: impl FnOnce(WireBatch<'_>) -> R) -> R {
    let (data, entries, headers) = batch.parts();
    let valued: Vec<Entry>;
    let entries = match tombstones {
        Tombstones::AsEmpty if batch.tombstones() > 0 => {
            valued = entries.iter().map(|entry| entry.valued()).collect();
            &valued
        }
        _ => entries,
    };
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

/// Takes ownership of what a guest emitted; its buffers move, not copy. The batch is
/// checked against `bound`, and the `outputs` list against `outputs`, the number of
/// the operator's outputs.
pub(super) fn emitted_from_wire(
    wire: WireEmitted,
    bound: OutputBound,
    outputs: usize,
) -> Result<Emitted, Refused> {
    let batch = wire.batch;
    // Same layout (`repr(transparent)`): collects in place, no allocation.
    let entries = batch
        .entries
        .into_iter()
        .map(|WireEntry(entry)| entry)
        .collect();
    let batch = Batch::from_parts(batch.data, entries, headers_from_wire(batch.headers), bound)
        .map_err(Refused::Batch)?;
    Emitted::new(batch, wire.outputs, outputs).map_err(Refused::Outputs)
}

/// Why the host refuses what a guest emitted.
pub(super) enum Refused {
    Batch(BatchError),
    Outputs(OutputsError),
}

fn headers_from_wire(headers: Vec<types::HeaderResult>) -> Vec<Header> {
    headers
        .into_iter()
        .map(|h| Header {
            entry: h.entry,
            name: h.name,
            value: h.value,
        })
        .collect()
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
        assert_eq!(decode_entry(&bytes), entry);
        assert_eq!(bytes[..4], [1, 0, 0, 0]);
        assert_eq!(bytes[4..8], [4, 3, 2, 1]);
        assert_eq!(bytes[8..20], [5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0]);
        assert_eq!(bytes[20..24], [0; 4]);
        assert_eq!(bytes[24..], (-2i64).to_le_bytes());
    }
}
