//! Hashing and comparing keys on the per-record path and in snapshot rounds, a word at
//! a time: in Wasm, slice comparison calls wasi-libc's byte-wise `memcmp` and general
//! hashers emulate a 64x64->128 multiply. The seed is fixed: no entropy is asked of the
//! host.

const SEED: u64 = 0x243f_6a88_85a3_08d3;
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// A 64-bit hash of `key` whose high and low bits both vary, as hashbrown needs.
#[inline]
pub(crate) fn hash(key: &[u8]) -> u64 {
    let mut hash = SEED ^ (key.len() as u64).wrapping_mul(MULTIPLIER);
    let mut words = key.chunks_exact(8);
    for word in &mut words {
        hash = mix(hash ^ u64::from_le_bytes(word.try_into().expect("8-byte chunk")));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        hash = mix(hash ^ u64::from_le_bytes(last));
    }
    // Final avalanche (from SplitMix64), so that low bits depend on every byte.
    hash ^= hash >> 31;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^ (hash >> 29)
}

#[inline]
fn mix(value: u64) -> u64 {
    value.wrapping_mul(MULTIPLIER).rotate_left(29)
}

/// `a == b`, comparing eight bytes at a time.
#[inline]
pub(crate) fn equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut a_words = a.chunks_exact(8);
    let mut b_words = b.chunks_exact(8);
    for (x, y) in (&mut a_words).zip(&mut b_words) {
        if u64::from_le_bytes(x.try_into().expect("8-byte chunk"))
            != u64::from_le_bytes(y.try_into().expect("8-byte chunk"))
        {
            return false;
        }
    }
    a_words
        .remainder()
        .iter()
        .zip(b_words.remainder())
        .all(|(x, y)| x == y)
}

/// A key's first sixteen bytes as a big-endian integer, zero-padded: ordered as the keys
/// are, except that keys alike in their first sixteen bytes and keys that differ only by
/// trailing zero bytes tie ([`compare`] breaks it). Sixteen: keys of a kind share their
/// first bytes (`user-000123`), and a sort whose prefixes tie reads both keys whole.
/// Copied in pieces of fixed width: a copy of a length known only at run time is a call
/// to `memcpy`.
#[inline]
pub(crate) fn prefix(key: &[u8]) -> u128 {
    if let Some(head) = key.first_chunk::<16>() {
        return u128::from_be_bytes(*head);
    }
    let mut head = [0u8; 16];
    let mut at = 0;
    for width in [8, 4, 2, 1] {
        if key.len() - at >= width {
            head[at..at + width].copy_from_slice(&key[at..at + width]);
            at += width;
        }
    }
    u128::from_be_bytes(head)
}

/// Lexicographic byte order, as `a.cmp(b)`, comparing eight bytes at a time.
#[inline]
pub(crate) fn compare(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let mut a_words = a.chunks_exact(8);
    let mut b_words = b.chunks_exact(8);
    for (x, y) in (&mut a_words).zip(&mut b_words) {
        // Big-endian: the first differing byte decides, as in byte order.
        let x = u64::from_be_bytes(x.try_into().expect("8-byte chunk"));
        let y = u64::from_be_bytes(y.try_into().expect("8-byte chunk"));
        if x != y {
            return x.cmp(&y);
        }
    }
    // Fewer than eight bytes left in the shorter key: a loop, not a memcmp call.
    let done = a.len().min(b.len()) / 8 * 8;
    for (x, y) in a[done..].iter().zip(&b[done..]) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys alike in length, in their first eight or sixteen bytes, or in both.
    const KEYS: [&[u8]; 16] = [
        b"",
        b"a",
        b"a\0",
        b"ab",
        b"b",
        b"abcdefgh",
        b"abcdefgi",
        b"abcdefghi",
        b"abcdefghj",
        b"abcdefgh\0",
        b"\xffabcdefg",
        b"abcdefghij",
        b"abcdefghijklmnop",
        b"abcdefghijklmnoq",
        b"abcdefghijklmnop\0",
        b"abcdefghijklmnopq",
    ];

    #[test]
    fn equal_and_compare_agree_with_slices_and_prefix_with_their_order() {
        for a in KEYS {
            for b in KEYS {
                assert_eq!(equal(a, b), a == b, "{a:?} {b:?}");
                assert_eq!(compare(a, b), a.cmp(b), "{a:?} {b:?}");
                let (pa, pb) = (prefix(a), prefix(b));
                assert!(pa == pb || pa.cmp(&pb) == a.cmp(b), "{a:?} {b:?}");
            }
        }
        assert_eq!(prefix(b"abcdefghijklmnop"), prefix(b"abcdefghijklmnop\xff"), "only sixteen bytes count");
        assert_ne!(prefix(b"abcdefgh"), prefix(b"abcdefgh\xff"));
    }

    #[test]
    fn prefix_holds_every_byte_of_a_short_key_in_place() {
        let bytes: Vec<u8> = (1..=20).collect();
        for len in 0..=bytes.len() {
            let mut head = [0; 16];
            head[..len.min(16)].copy_from_slice(&bytes[..len.min(16)]);
            assert_eq!(prefix(&bytes[..len]), u128::from_be_bytes(head), "a key of {len} bytes");
        }
    }

    #[test]
    fn hash_spreads_similar_keys_over_low_and_high_bits() {
        let hashes: Vec<u64> = (0..4096)
            .map(|i| hash(format!("user-{i}").as_bytes()))
            .collect();
        let mut low = hashes.iter().map(|h| h & 0xfff).collect::<Vec<_>>();
        let mut high = hashes.iter().map(|h| h >> 57).collect::<Vec<_>>();
        low.sort_unstable();
        low.dedup();
        high.sort_unstable();
        high.dedup();
        // 4096 keys into 4096 buckets: a good hash fills about 63% of them.
        assert!(low.len() > 2400, "{} distinct low 12-bit values", low.len());
        assert_eq!(high.len(), 128, "every 7-bit tag is used");
        assert_ne!(hash(b""), hash(b"\0"), "the length is part of the hash");
    }
}
