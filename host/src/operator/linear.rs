//! Where an operator's linear memory lives: one anonymous mapping per memory, reserved
//! whole up front as wasmtime asks (so growth never moves it) and advised for
//! transparent huge pages. An operator's keyed windows are hash tables of hundreds of MiB
//! read at random; in 4 KiB pages nearly every lookup also misses the TLB.

use std::io;
use std::ptr::NonNull;

use wasmtime::{LinearMemory, MemoryCreator, MemoryType};

/// The reservation of a memory wasmtime leaves the size of to us: the most a 32-bit
/// memory can address. A larger one refuses growth past it (memory.grow returns -1).
const DEFAULT_RESERVATION: usize = 4 << 30;

/// Makes every linear memory of the engine a [`HugeMemory`].
pub(super) struct HugePages;

// SAFETY: each memory is a fresh zeroed mapping of the reservation wasmtime asks for
// plus its guard, inaccessible past the memory's size, and never moves (see below).
unsafe impl MemoryCreator for HugePages {
    fn new_memory(
        &self,
        _ty: MemoryType,
        minimum: usize,
        maximum: Option<usize>,
        reserved_size_in_bytes: Option<usize>,
        guard_size_in_bytes: usize,
    ) -> Result<Box<dyn LinearMemory>, String> {
        let reservation = reserved_size_in_bytes
            .unwrap_or_else(|| maximum.unwrap_or(DEFAULT_RESERVATION).min(DEFAULT_RESERVATION))
            .max(minimum);
        HugeMemory::new(minimum, reservation, guard_size_in_bytes)
            .map(|memory| Box::new(memory) as Box<dyn LinearMemory>)
            .map_err(|err| format!("reserving {reservation} bytes of linear memory: {err}"))
    }
}

/// A linear memory: `reservation + guard` bytes mapped inaccessible, of which the first
/// `size` (rounded up to whole host pages) are readable and writable.
struct HugeMemory {
    base: NonNull<u8>,
    size: usize,
    /// Bytes made accessible: `size` rounded up to the host page.
    accessible: usize,
    reservation: usize,
    mapped: usize,
}

// SAFETY: the mapping is owned by this value alone, like a `Vec`'s buffer.
unsafe impl Send for HugeMemory {}
// SAFETY: `&self` methods read plain fields; wasmtime serializes access to the bytes.
unsafe impl Sync for HugeMemory {}

impl HugeMemory {
    fn new(size: usize, reservation: usize, guard: usize) -> io::Result<Self> {
        let mapped = reservation
            .checked_add(guard)
            .ok_or_else(|| io::Error::other("reservation plus guard overflows"))?;
        // SAFETY: a new private anonymous mapping; nothing else refers to its range.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut memory = Self {
            base: NonNull::new(base.cast()).expect("mmap returns no null mapping"),
            size: 0,
            accessible: 0,
            reservation,
            mapped,
        };
        // Advice only: without transparent huge pages (or with them set to `never`) the
        // memory works in small pages, as before.
        // SAFETY: the range is this mapping.
        unsafe { libc::madvise(base, reservation, libc::MADV_HUGEPAGE) };
        memory.grow_to(size).map_err(io::Error::other)?;
        Ok(memory)
    }
}

// SAFETY: `as_ptr` is page-aligned and stays put; `size` bytes from it are accessible and
// the guard after the reservation is never made so.
unsafe impl LinearMemory for HugeMemory {
    fn byte_size(&self) -> usize {
        self.size
    }

    fn byte_capacity(&self) -> usize {
        self.reservation
    }

    fn grow_to(&mut self, new_size: usize) -> wasmtime::Result<()> {
        if new_size > self.reservation {
            wasmtime::bail!("{new_size} bytes exceed the memory's reservation of {}", self.reservation);
        }
        let accessible = new_size.next_multiple_of(page_size()).min(self.reservation);
        if accessible > self.accessible {
            // SAFETY: within the mapping, past what is accessible already.
            let done = unsafe {
                libc::mprotect(
                    self.base.as_ptr().add(self.accessible).cast(),
                    accessible - self.accessible,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if done != 0 {
                return Err(io::Error::last_os_error().into());
            }
            self.accessible = accessible;
        }
        self.size = self.size.max(new_size);
        Ok(())
    }

    fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }
}

impl Drop for HugeMemory {
    fn drop(&mut self) {
        // SAFETY: the whole mapping made in `new`; wasmtime holds no pointer into it now.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.mapped) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use wasmtime::{Config, Engine, Instance, Module, Store};

    /// `(module (memory 1) (func (export "peek") (param i32) (result i32) local.get 0
    /// i32.load) (func (export "grow") (param i32) (result i32) local.get 0 memory.grow))`
    const PEEK_AND_GROW: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
        0x01, 0x06, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f, // type 0: (i32) -> i32
        0x03, 0x03, 0x02, 0x00, 0x00, // two functions of type 0
        0x05, 0x03, 0x01, 0x00, 0x01, // one memory of one page
        0x07, 0x0f, 0x02, 0x04, b'p', b'e', b'e', b'k', 0x00, 0x00, 0x04, b'g', b'r', b'o', b'w', 0x00,
        0x01, // exports
        0x0a, 0x10, 0x02, 0x07, 0x00, 0x20, 0x00, 0x28, 0x02, 0x00, 0x0b, 0x06, 0x00, 0x20, 0x00,
        0x40, 0x00, 0x0b, // code
    ];

    #[test]
    fn wasm_grows_its_memory_in_place_and_traps_past_it() {
        let mut config = Config::new();
        config.with_host_memory(Arc::new(HugePages)).memory_init_cow(false);
        let engine = Engine::new(&config).unwrap();
        let module = Module::new(&engine, PEEK_AND_GROW).unwrap();
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let peek = instance.get_typed_func::<i32, i32>(&mut store, "peek").unwrap();
        let grow = instance.get_typed_func::<i32, i32>(&mut store, "grow").unwrap();

        assert_eq!(peek.call(&mut store, 65532).unwrap(), 0);
        assert!(peek.call(&mut store, 65533).is_err(), "a load across the end traps");
        assert_eq!(grow.call(&mut store, 40).unwrap(), 1, "growth returns the old size in pages");
        assert_eq!(peek.call(&mut store, 40 * 65536).unwrap(), 0);
        assert!(peek.call(&mut store, 41 * 65536).is_err());
        assert!(peek.call(&mut store, -16).is_err(), "an address near 4 GiB hits the guard");
    }

    #[test]
    fn a_memory_grows_in_place_and_refuses_past_its_reservation() {
        let mut memory = HugeMemory::new(65536, 1 << 24, 1 << 16).unwrap();
        let base = memory.as_ptr();
        // SAFETY: within the accessible size.
        unsafe { base.add(65535).write(7) };
        memory.grow_to(3 << 20).unwrap();
        assert_eq!(memory.as_ptr(), base);
        assert_eq!(memory.byte_size(), 3 << 20);
        // SAFETY: within the grown size; fresh pages read as zero.
        unsafe {
            assert_eq!(base.add(65535).read(), 7);
            assert_eq!(base.add((3 << 20) - 1).read(), 0);
        }
        assert!(memory.grow_to((1 << 24) + 65536).is_err());
        assert_eq!(memory.byte_size(), 3 << 20);
    }
}
