//! Where an operator's linear memory lives: one anonymous mapping per memory, reserved
//! whole up front as wasmtime asks (so growth never moves it) and advised for
//! transparent huge pages. An operator's keyed windows are hash tables of hundreds of MiB
//! read at random; in 4 KiB pages nearly every lookup also misses the TLB.
//!
//! A fresh huge page can cost far more to touch first than small pages do: on a virtual
//! machine that hands free memory back to its host, a GiB took 0.15-11.8 s to touch in
//! huge pages against 0.4-0.5 s in small ones, and a restore that fills a GiB of tables
//! at once waited seconds on it. So while a restore runs ([`Restoring`]) memories grow in
//! small pages; when the last restore ends they are advised, so that what grows from then
//! on is in huge pages (and the kernel may gather the restored pages in the background).

use std::io;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use wasmtime::{LinearMemory, MemoryCreator, MemoryType};

/// The reservation of a memory wasmtime leaves the size of to us: the most a 32-bit
/// memory can address. A larger one refuses growth past it (memory.grow returns -1).
const DEFAULT_RESERVATION: usize = 4 << 30;

/// Makes every linear memory of the engine a [`HugeMemory`].
#[derive(Default)]
pub(super) struct HugePages {
    advice: Arc<Mutex<Advice>>,
}

/// Which memories wait for the restores under way to end before they are advised.
#[derive(Default)]
struct Advice {
    /// Restores under way in the engine's process.
    restores: usize,
    /// `(base, reservation)` of each memory made or grown while one ran.
    waiting: Vec<(usize, usize)>,
}

impl HugePages {
    /// Marks a restore under way until the guard returned drops.
    pub(super) fn restoring(&self) -> Restoring {
        lock(&self.advice).restores += 1;
        Restoring { advice: Arc::clone(&self.advice) }
    }
}

/// While one lives, memories not advised for huge pages yet grow in small pages: a
/// restore fills its tables faster in them. The last to drop advises those memories.
pub struct Restoring {
    advice: Arc<Mutex<Advice>>,
}

impl Drop for Restoring {
    fn drop(&mut self) {
        let mut advice = lock(&self.advice);
        advice.restores -= 1;
        if advice.restores == 0 {
            // Each is still mapped: a memory leaves the list, under this lock, before
            // it is unmapped.
            for (base, reservation) in advice.waiting.drain(..) {
                advise(base as *mut u8, reservation);
            }
        }
    }
}

fn lock(advice: &Mutex<Advice>) -> MutexGuard<'_, Advice> {
    advice.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Advises `len` bytes from `base`, a range of a live mapping, for huge pages. Advice
/// only: without transparent huge pages (or with them set to `never`) the memory works
/// in small pages.
fn advise(base: *mut u8, len: usize) {
    // SAFETY: madvise changes no contents; the caller's range is mapped.
    unsafe { libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE) };
}

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
        HugeMemory::new(minimum, reservation, guard_size_in_bytes, Arc::clone(&self.advice))
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
    /// Whether this memory advised its reservation for huge pages itself: it waits while
    /// a restore runs, and one advised by the restore's end advises once more at its
    /// next growth (the advice is the same).
    advised: bool,
    advice: Arc<Mutex<Advice>>,
}

// SAFETY: the mapping is owned by this value alone, like a `Vec`'s buffer.
unsafe impl Send for HugeMemory {}
// SAFETY: `&self` methods read plain fields; wasmtime serializes access to the bytes.
unsafe impl Sync for HugeMemory {}

impl HugeMemory {
    fn new(size: usize, reservation: usize, guard: usize, advice: Arc<Mutex<Advice>>) -> io::Result<Self> {
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
            advised: false,
            advice,
        };
        memory.grow_to(size).map_err(io::Error::other)?;
        Ok(memory)
    }

    /// Advises the whole reservation for huge pages, or, while a restore runs, leaves
    /// that to its end.
    fn advise_huge_pages(&mut self) {
        if self.advised {
            return;
        }
        let mut advice = lock(&self.advice);
        let entry = (self.base.as_ptr() as usize, self.reservation);
        if advice.restores > 0 {
            if !advice.waiting.contains(&entry) {
                advice.waiting.push(entry);
            }
            return;
        }
        advise(self.base.as_ptr(), self.reservation);
        self.advised = true;
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
        self.advise_huge_pages();
        Ok(())
    }

    fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }
}

impl Drop for HugeMemory {
    fn drop(&mut self) {
        // Out of the waiting list first (one that advised itself never waits), so that
        // the end of a restore never advises an unmapped range.
        if !self.advised {
            let base = self.base.as_ptr() as usize;
            lock(&self.advice).waiting.retain(|&(waiting, _)| waiting != base);
        }
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
        config.with_host_memory(Arc::new(HugePages::default())).memory_init_cow(false);
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
        let mut memory = HugeMemory::new(65536, 1 << 24, 1 << 16, Arc::default()).unwrap();
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

    /// While a restore runs, a memory is not advised for huge pages, neither when made
    /// nor when it grows; the end of the last restore advises it, and a memory made after
    /// is advised at once. One dropped meanwhile is not touched.
    #[test]
    fn memories_grow_in_small_pages_while_a_restore_runs() {
        let thp = kernel_takes_huge_page_advice();
        let pages = HugePages::default();
        let memory = || HugeMemory::new(65536, 1 << 24, 0, Arc::clone(&pages.advice)).unwrap();
        let first = pages.restoring();
        let second = pages.restoring();
        let mut restored = memory();
        assert_eq!(advised_for_huge_pages(restored.as_ptr()), Some(false));
        restored.grow_to(2 << 20).unwrap();
        drop(memory());
        assert_eq!(lock(&pages.advice).waiting.len(), 1, "a memory dropped leaves the list");
        assert_eq!(advised_for_huge_pages(restored.as_ptr()), Some(false), "grown during the restores");
        drop(first);
        assert_eq!(advised_for_huge_pages(restored.as_ptr()), Some(false), "one restore still runs");
        drop(second);
        assert_eq!(advised_for_huge_pages(restored.as_ptr()), Some(thp), "the last restore ended");
        assert!(lock(&pages.advice).waiting.is_empty());
        restored.grow_to(4 << 20).unwrap();
        assert_eq!(advised_for_huge_pages(restored.as_ptr()), Some(thp));
        assert_eq!(advised_for_huge_pages(memory().as_ptr()), Some(thp), "made after the restores");
    }

    /// Whether this kernel takes huge-page advice (one built without transparent huge
    /// pages refuses it).
    fn kernel_takes_huge_page_advice() -> bool {
        const LEN: usize = 2 << 20;
        // SAFETY: a new private anonymous mapping, advised and unmapped here.
        unsafe {
            let scratch = libc::mmap(std::ptr::null_mut(), LEN, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            assert_ne!(scratch, libc::MAP_FAILED);
            let taken = libc::madvise(scratch, LEN, libc::MADV_HUGEPAGE) == 0;
            libc::munmap(scratch, LEN);
            taken
        }
    }

    /// Whether the mapping holding `address` is advised for huge pages (its `hg` flag in
    /// /proc/self/smaps); `None` if no mapping holds it.
    fn advised_for_huge_pages(address: *mut u8) -> Option<bool> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let address = address as usize;
        let mut holds = false;
        for line in smaps.lines() {
            let range = line.split_once(' ').and_then(|(range, _)| range.split_once('-'));
            let bounds = range.and_then(|(start, end)| Some((usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?)));
            if let Some((start, end)) = bounds {
                holds = (start..end).contains(&address);
            } else if holds && let Some(flags) = line.strip_prefix("VmFlags:") {
                return Some(flags.split_whitespace().any(|flag| flag == "hg"));
            }
        }
        None
    }
}
