//! The memory cap of one operator instance: the total linear memory and table
//! space of its Store (all core memories and tables together: a component may
//! hold several), a bound on how many instances, memories and tables it creates,
//! and a record of the refused growth so that the trap which usually follows is
//! reported as what it is.

use wasmtime::ResourceLimiter;

/// Host bytes counted per table element: the largest element wasmtime stores (a
/// continuation reference is two words; a funcref, one). Over-counting funcref
/// tables is harmless: real plugins hold a few thousand elements.
const TABLE_ELEMENT_BYTES: usize = 16;

/// Core instances, memories and tables one Store may create. A componentize-py
/// component, the largest seen, creates about a dozen instances and a few
/// memories and tables; the defaults are 10,000 each.
const MAX_INSTANCES: usize = 100;
const MAX_MEMORIES: usize = 16;
const MAX_TABLES: usize = 100;

pub(super) struct MemoryCap {
    limit: usize,
    /// Linear memory plus table space, in bytes.
    in_use: usize,
    memory: usize,
    denied: Option<usize>,
    /// Linear memory granted since [`MemoryCap::begin_call`].
    grown: usize,
}

impl MemoryCap {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            limit,
            in_use: 0,
            memory: 0,
            denied: None,
            grown: 0,
        }
    }

    /// Bytes of linear memory the guest holds now.
    pub(super) fn memory_in_use(&self) -> usize {
        self.memory
    }

    /// Grows the total by `current` → `desired` bytes of one memory or table, if
    /// it stays within the limit; remembers the total a refusal was at.
    fn grow(&mut self, current: usize, desired: usize) -> bool {
        let total = (self.in_use - current.min(self.in_use)).saturating_add(desired);
        if total > self.limit {
            self.denied = Some(total);
            return false;
        }
        self.in_use = total;
        true
    }

    /// The total a growth was refused at since [`MemoryCap::begin_call`], if any.
    pub(super) fn denied(&self) -> Option<usize> {
        self.denied
    }

    /// Bytes of linear memory granted since [`MemoryCap::begin_call`].
    pub(super) fn grown(&self) -> usize {
        self.grown
    }

    /// Forgets the previous call's refusal and growth.
    pub(super) fn begin_call(&mut self) {
        self.denied = None;
        self.grown = 0;
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // wasmtime asks with `current == 0` when it creates a memory.
        let granted = self.grow(current, desired);
        if granted {
            self.memory = self.memory - current.min(self.memory) + desired;
            self.grown = self.grown.saturating_add(desired.saturating_sub(current));
        }
        Ok(granted)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Likewise `current == 0` when it creates a table. Elements live in host
        // memory, outside any linear memory: without this, tables escape the cap.
        Ok(self.grow(
            current.saturating_mul(TABLE_ELEMENT_BYTES),
            desired.saturating_mul(TABLE_ELEMENT_BYTES),
        ))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_all_memories_and_remembers_refusals() {
        let mut cap = MemoryCap::new(100);
        assert!(cap.memory_growing(0, 60, None).unwrap());
        assert!(cap.memory_growing(0, 30, None).unwrap());
        assert!(!cap.memory_growing(30, 50, None).unwrap());
        assert_eq!(cap.denied(), Some(110));
        assert!(cap.memory_growing(60, 70, None).unwrap());
        assert_eq!(cap.memory_in_use(), 100);
        assert_eq!(cap.grown(), 100, "what was granted, not what was refused");
        cap.begin_call();
        assert_eq!((cap.denied(), cap.grown()), (None, 0));
        assert!(cap.memory_growing(70, 60, None).unwrap());
        assert_eq!(cap.grown(), 0, "a shrink earns nothing");
    }

    #[test]
    fn tables_count_against_the_same_cap() {
        let mut cap = MemoryCap::new(1 << 20);
        assert!(cap.memory_growing(0, 512 << 10, None).unwrap());
        // 2^15 elements of 16 bytes: exactly the other half.
        assert!(cap.table_growing(0, 1 << 15, None).unwrap());
        assert!(!cap.table_growing(0, 1, None).unwrap());
        assert_eq!(cap.denied(), Some((1 << 20) + TABLE_ELEMENT_BYTES));
        assert!(!cap.table_growing(1 << 15, usize::MAX, None).unwrap());
        assert_eq!(cap.memory_in_use(), 512 << 10, "tables are not linear memory");
        assert_eq!(cap.grown(), 512 << 10, "nor is their growth");
    }
}
