//! The memory cap of one operator instance: the total linear memory of its Store
//! (all core memories together: a component may hold several), with a record of
//! the refused growth so that the trap which usually follows is reported as what
//! it is.

use wasmtime::ResourceLimiter;

/// Most elements any one table of a guest may grow to: generous for any plugin.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

pub(super) struct MemoryCap {
    limit: usize,
    in_use: usize,
    denied: Option<usize>,
}

impl MemoryCap {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            limit,
            in_use: 0,
            denied: None,
        }
    }

    /// Bytes of linear memory the guest holds now.
    pub(super) fn in_use(&self) -> usize {
        self.in_use
    }

    /// The total a growth was refused at since [`MemoryCap::forget_denial`], if any.
    pub(super) fn denied(&self) -> Option<usize> {
        self.denied
    }

    pub(super) fn forget_denial(&mut self) {
        self.denied = None;
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
        let total = self.in_use - current.min(self.in_use) + desired;
        if total > self.limit {
            self.denied = Some(total);
            return Ok(false);
        }
        self.in_use = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
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
        assert_eq!(cap.in_use(), 100);
        cap.forget_denial();
        assert_eq!(cap.denied(), None);
    }
}
