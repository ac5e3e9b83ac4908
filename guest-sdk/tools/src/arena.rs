//! Room for the WASI adapter in a Go module.
//!
//! The preview 1 adapter keeps its state and a 64 KiB stack in the main module's
//! memory, allocated on its first call through the module's `cabi_realloc`, or with
//! `memory.grow`. Neither works for a module built by the standard Go toolchain: its
//! runtime makes WASI calls on its system stack, where calling back into Go's
//! `cabi_realloc` aborts (`badsystemstack`), and it treats all memory past its data
//! as its own heap, so a page grown by someone else is later handed out twice.
//!
//! So a Go module reserves the room itself: a global byte array that starts with
//! [`MARKER`] (see plugins/go-window-count/abi.go). The array lies in the module's
//! data, below the heap, and Go never writes it. This module finds it and adds a
//! `cabi_realloc_adapter` export that hands out its bytes, which the adapter then
//! uses instead of `cabi_realloc`.

use anyhow::{Context, Result, bail};
use wasm_encoder::{Encode, Instruction, ValType};
use wasmparser::{DataKind, Operator, Parser, Payload};

/// What a reserved array starts with (the zeros after it are in no data segment: Go's
/// linker leaves them out).
pub(crate) const MARKER: &[u8] = b"weir-guest adapter arena, 256 KiB";
/// Its size, marker included.
const ARENA_BYTES: u32 = 256 << 10;

/// Where the reserved array lies in linear memory, if the module has one. Refuses an
/// array that other data overlaps: one shorter than [`ARENA_BYTES`].
fn find_arena(module: &[u8]) -> Result<Option<u32>> {
    // (address, length) of every active segment with a constant address
    let mut segments = Vec::new();
    let mut arena = None;
    for payload in Parser::new(0).parse_all(module) {
        let Payload::DataSection(reader) = payload? else { continue };
        for data in reader {
            let data = data?;
            let DataKind::Active { offset_expr, .. } = data.kind else { continue };
            let Ok(Operator::I32Const { value }) = offset_expr.get_operators_reader().read() else {
                continue;
            };
            let address = value as u32 as u64;
            segments.push((address, data.data.len() as u64));
            if let Some(at) = data.data.windows(MARKER.len()).position(|w| w == MARKER) {
                if arena.is_some() {
                    bail!("the module holds the adapter arena's marker twice");
                }
                arena = Some(address + at as u64);
            }
        }
    }
    let Some(start) = arena else { return Ok(None) };
    let end = start + u64::from(ARENA_BYTES);
    if let Some((address, _)) = segments.iter().find(|(address, len)| *address > start && *address < end && *len > 0) {
        bail!(
            "data at {address:#x} lies inside the adapter arena [{start:#x}, {end:#x}): the array \
             that starts with the marker must be {ARENA_BYTES} bytes"
        );
    }
    u32::try_from(end).context("the adapter arena ends beyond 4 GiB")?;
    Ok(Some(start as u32))
}

/// Adds `cabi_realloc_adapter` (a bump allocator over the reserved array) to a module
/// that reserves one; returns the module unchanged otherwise.
pub(crate) fn add_adapter_realloc(module: Vec<u8>) -> Result<Vec<u8>> {
    let Some(arena) = find_arena(&module)? else { return Ok(module) };
    let start = (arena + MARKER.len() as u32).next_multiple_of(16);
    let end = arena + ARENA_BYTES;

    let mut sections = Sections::read(&module)?;
    let type_index = sections.types;
    sections.append(TYPE, realloc_type())?;
    let global_index = sections.imported_globals + sections.count(GLOBAL)?;
    sections.append(GLOBAL, bump_global(start))?;
    let function_index = sections.imported_functions + sections.count(FUNCTION)?;
    sections.append(FUNCTION, leb(type_index))?;
    sections.append(CODE, realloc_body(global_index, end))?;
    let mut export = Vec::new();
    "cabi_realloc_adapter".encode(&mut export);
    export.push(0x00); // a function
    export.extend(leb(function_index));
    sections.append(EXPORT, export)?;
    Ok(sections.write())
}

const TYPE: u8 = 1;
const FUNCTION: u8 = 3;
const GLOBAL: u8 = 6;
const EXPORT: u8 = 7;
const CODE: u8 = 10;

fn leb(value: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    value.encode(&mut bytes);
    bytes
}

/// `(func (param i32 i32 i32 i32) (result i32))`
fn realloc_type() -> Vec<u8> {
    let mut bytes = vec![0x60, 4];
    bytes.extend([0x7f; 4]);
    bytes.extend([1, 0x7f]);
    bytes
}

/// `(global (mut i32) (i32.const start))`: the next free byte of the arena.
fn bump_global(start: u32) -> Vec<u8> {
    let mut bytes = vec![0x7f, 0x01];
    Instruction::I32Const(start as i32).encode(&mut bytes);
    Instruction::End.encode(&mut bytes);
    bytes
}

/// `cabi_realloc_adapter(old, old_size, align, new_size)`: the next `new_size` bytes
/// at `align`, with the old allocation's first bytes copied in; traps when the arena
/// is spent.
fn realloc_body(bump: u32, end: u32) -> Vec<u8> {
    let (old, old_size, align, new_size, at) = (0, 1, 2, 3, 4);
    let mut function = wasm_encoder::Function::new([(1, ValType::I32)]);
    let code = [
        // at = (bump + align - 1) & -align
        Instruction::GlobalGet(bump),
        Instruction::LocalGet(align),
        Instruction::I32Add,
        Instruction::I32Const(1),
        Instruction::I32Sub,
        Instruction::I32Const(0),
        Instruction::LocalGet(align),
        Instruction::I32Sub,
        Instruction::I32And,
        Instruction::LocalSet(at),
        // if at + new_size > end (or wraps): trap
        Instruction::LocalGet(at),
        Instruction::LocalGet(new_size),
        Instruction::I32Add,
        Instruction::GlobalSet(bump),
        Instruction::GlobalGet(bump),
        Instruction::I32Const(end as i32),
        Instruction::I32GtU,
        Instruction::GlobalGet(bump),
        Instruction::LocalGet(at),
        Instruction::I32LtU,
        Instruction::I32Or,
        Instruction::If(wasm_encoder::BlockType::Empty),
        Instruction::Unreachable,
        Instruction::End,
        // if old != 0: copy min(old_size, new_size) bytes
        Instruction::LocalGet(old),
        Instruction::If(wasm_encoder::BlockType::Empty),
        Instruction::LocalGet(at),
        Instruction::LocalGet(old),
        Instruction::LocalGet(old_size),
        Instruction::LocalGet(new_size),
        Instruction::LocalGet(old_size),
        Instruction::LocalGet(new_size),
        Instruction::I32LtU,
        Instruction::Select,
        Instruction::MemoryCopy { src_mem: 0, dst_mem: 0 },
        Instruction::End,
        Instruction::LocalGet(at),
        Instruction::End,
    ];
    for instruction in &code {
        function.instruction(instruction);
    }
    let mut bytes = Vec::new();
    function.encode(&mut bytes);
    bytes
}

/// A module's sections as byte ranges, with items to append to vector sections.
struct Sections {
    /// (id, range of the section's contents in the module)
    ranges: Vec<(u8, std::ops::Range<usize>)>,
    /// (id, items appended)
    appended: Vec<(u8, Vec<Vec<u8>>)>,
    imported_functions: u32,
    imported_globals: u32,
    /// Types defined (a section entry is a recursion group of one or more).
    types: u32,
    module: Vec<u8>,
}

impl Sections {
    fn read(module: &[u8]) -> Result<Self> {
        let mut ranges = Vec::new();
        let (mut imported_functions, mut imported_globals, mut types) = (0, 0, 0);
        for payload in Parser::new(0).parse_all(module) {
            let payload = payload?;
            if let Payload::ImportSection(reader) = &payload {
                for import in reader.clone().into_imports() {
                    match import?.ty {
                        wasmparser::TypeRef::Func(_) => imported_functions += 1,
                        wasmparser::TypeRef::Global(_) => imported_globals += 1,
                        _ => {}
                    }
                }
            }
            if let Payload::TypeSection(reader) = &payload {
                for group in reader.clone() {
                    types += group?.types().len() as u32;
                }
            }
            if let Some((id, range)) = payload.as_section() {
                ranges.push((id, range.start as usize..range.end as usize));
            }
        }
        Ok(Self {
            ranges,
            appended: Vec::new(),
            imported_functions,
            imported_globals,
            types,
            module: module.to_vec(),
        })
    }

    fn contents(&self, id: u8) -> Result<&[u8]> {
        let (_, range) = self
            .ranges
            .iter()
            .find(|(section, _)| *section == id)
            .with_context(|| format!("the module has no section {id}, which a Go module has"))?;
        Ok(&self.module[range.clone()])
    }

    /// How many items section `id` holds before anything is appended.
    fn count(&self, id: u8) -> Result<u32> {
        let mut reader = wasmparser::BinaryReader::new(self.contents(id)?, 0);
        Ok(reader.read_var_u32()?)
    }

    /// Appends `item` to vector section `id`.
    fn append(&mut self, id: u8, item: Vec<u8>) -> Result<()> {
        self.count(id)?; // the section exists
        match self.appended.iter_mut().find(|(section, _)| *section == id) {
            Some((_, items)) => items.push(item),
            None => self.appended.push((id, vec![item])),
        }
        Ok(())
    }

    fn write(&self) -> Vec<u8> {
        let module = &self.module;
        let mut out = module[..8].to_vec();
        for (id, range) in &self.ranges {
            let contents = &module[range.clone()];
            let section = match self.appended.iter().find(|(section, _)| section == id) {
                None => contents.to_vec(),
                Some((_, items)) => {
                    let mut reader = wasmparser::BinaryReader::new(contents, 0);
                    let count = reader.read_var_u32().expect("counted before");
                    let mut section = leb(count + items.len() as u32);
                    section.extend(&contents[reader.current_position()..]);
                    items.iter().for_each(|item| section.extend(item));
                    section
                }
            };
            out.push(*id);
            out.extend(leb(section.len() as u32));
            out.extend(section);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{
        CodeSection, ConstExpr, DataSection, ExportKind, ExportSection, Function, FunctionSection,
        GlobalSection, GlobalType, MemorySection, MemoryType, Module, TypeSection,
    };

    /// A module with one function, one global and, if `marker`, the reserved array at
    /// 4096; `intruder`: other data 1000 bytes into it.
    fn module(marker: bool, intruder: bool) -> Vec<u8> {
        let mut module = Module::new();
        let mut types = TypeSection::new();
        types.ty().function([], [ValType::I32]);
        module.section(&types);
        let mut functions = FunctionSection::new();
        functions.function(0);
        module.section(&functions);
        let mut memories = MemorySection::new();
        memories.memory(MemoryType { minimum: 8, maximum: None, memory64: false, shared: false, page_size_log2: None });
        module.section(&memories);
        let mut globals = GlobalSection::new();
        globals.global(GlobalType { val_type: ValType::I32, mutable: true, shared: false }, &ConstExpr::i32_const(0));
        module.section(&globals);
        let mut exports = ExportSection::new();
        exports.export("memory", ExportKind::Memory, 0);
        exports.export("answer", ExportKind::Func, 0);
        module.section(&exports);
        let mut code = CodeSection::new();
        let mut answer = Function::new([]);
        answer.instruction(&Instruction::I32Const(42));
        answer.instruction(&Instruction::End);
        code.function(&answer);
        module.section(&code);
        let mut data = DataSection::new();
        let mut bytes = b"go data before it ".to_vec();
        if marker {
            bytes.extend(MARKER);
        }
        data.active(0, &ConstExpr::i32_const(4096 - 18), bytes);
        if intruder {
            data.active(0, &ConstExpr::i32_const(4096 + 1000), b"other".to_vec());
        }
        module.section(&data);
        module.finish()
    }

    #[test]
    fn a_reserved_array_gets_a_valid_adapter_realloc_and_others_stay_as_they_are() {
        let plain = module(false, false);
        assert_eq!(add_adapter_realloc(plain.clone()).unwrap(), plain);
        let short = add_adapter_realloc(module(true, true)).unwrap_err().to_string();
        assert!(short.contains("inside the adapter arena"), "{short}");

        let grown = add_adapter_realloc(module(true, false)).unwrap();
        wasmparser::Validator::new().validate_all(&grown).expect("the result validates");
        let mut exports = Vec::new();
        let mut bump_start = None;
        for payload in Parser::new(0).parse_all(&grown) {
            match payload.unwrap() {
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export.unwrap();
                        exports.push((export.name.to_owned(), export.index));
                    }
                }
                Payload::GlobalSection(reader) => {
                    let last = reader.into_iter().last().unwrap().unwrap();
                    if let Ok(Operator::I32Const { value }) = last.init_expr.get_operators_reader().read() {
                        bump_start = Some(value);
                    }
                }
                _ => {}
            }
        }
        assert_eq!(
            exports,
            [("memory".to_owned(), 0), ("answer".to_owned(), 0), ("cabi_realloc_adapter".to_owned(), 1)]
        );
        // The array starts at 4096 (after the segment's 18 other bytes); the first byte
        // handed out is past the marker, 16-aligned.
        assert_eq!(bump_start, Some(4096 + MARKER.len().next_multiple_of(16) as i32));
    }
}
