//! The key-by shuffle's hash: which operator subtask owns a key. It must be the same
//! on every run and every machine, because keyed state is checkpointed per subtask.

/// FNV-1a, 64-bit: stable by definition, unlike `std`'s randomly seeded hasher.
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    key.iter()
        .fold(OFFSET_BASIS, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME))
}

/// The subtask of `parallelism` that owns `key`; records without a key go to subtask 0.
pub(crate) fn subtask_for(key: Option<&[u8]>, parallelism: usize) -> usize {
    debug_assert!(parallelism > 0);
    key.map_or(0, |key| (key_hash(key) % parallelism as u64) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_fixed_across_runs() {
        // Published FNV-1a test vectors: a change here would move keyed state.
        assert_eq!(key_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(key_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(key_hash(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn keys_spread_over_subtasks() {
        let mut seen = [0usize; 4];
        for i in 0..1000 {
            seen[subtask_for(Some(format!("user-{i}").as_bytes()), 4)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 150), "uneven spread: {seen:?}");
    }
}
