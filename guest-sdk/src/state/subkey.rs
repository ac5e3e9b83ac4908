//! State keys for entries kept under a routing key: a [`KeyedMap`](super::KeyedMap)'s
//! entries, timers, the parts of a tuple. The host puts a state key in the key group of
//! murmur2 of the whole key, so such a key is made to hash exactly as its routing key:
//! four leading bytes are solved for, and the entry lands in its key's group for every
//! group count, with no change to the host or the WIT.
//!
//! Layout: `fix (4) ‖ LEB128 length of the routing key ‖ routing key ‖ path`. The path
//! is what the state types put there (a tuple's part index, a map's encoded entry key).

use crate::error::Error;

const SEED: u32 = 0x9747_b28c;
const M: u32 = 0x5bd1_e995;
/// `M`'s inverse modulo 2^32 (Newton's iteration; `M` is odd).
const M_INVERSE: u32 = {
    let mut inverse = M;
    let mut step = 0;
    while step < 5 {
        inverse = inverse.wrapping_mul(2u32.wrapping_sub(M.wrapping_mul(inverse)));
        step += 1;
    }
    inverse
};
const FIX_BYTES: usize = 4;

/// Appends the state key of `path` under routing key `key` to `out` (cleared first).
pub(crate) fn derive(out: &mut Vec<u8>, key: &[u8], path: &[&[u8]]) {
    out.clear();
    out.extend_from_slice(&[0; FIX_BYTES]);
    let mut length = key.len();
    loop {
        let byte = (length & 0x7f) as u8;
        length >>= 7;
        if length == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(key);
    for part in path {
        out.extend_from_slice(part);
    }
    let fix = solve(out, before_final(key));
    out[..FIX_BYTES].copy_from_slice(&fix.to_le_bytes());
}

/// The routing key and the path of a state key `derive` made.
pub(crate) fn split(state_key: &[u8]) -> Result<(&[u8], &[u8]), Error> {
    let malformed = || {
        Error::new(format!(
            "state key b\"{}\" is not one weir-guest writes for entries under a key; restore \
             only state written by this plugin",
            state_key.escape_ascii()
        ))
    };
    let mut length = 0u64;
    let mut at = FIX_BYTES;
    for shift in (0..35).step_by(7) {
        let byte = *state_key.get(at).ok_or_else(malformed)?;
        at += 1;
        length |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            let end = usize::try_from(length)
                .ok()
                .and_then(|length| at.checked_add(length));
            let key = end
                .and_then(|end| state_key.get(at..end))
                .ok_or_else(malformed)?;
            return Ok((key, &state_key[at + key.len()..]));
        }
    }
    Err(malformed())
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), as the host computes
/// a key's group.
#[cfg(test)]
pub(crate) fn murmur2(data: &[u8]) -> u32 {
    finish(before_final(data))
}

/// murmur2's state before its final avalanche, which is a bijection: two keys with the
/// same state here have the same hash.
fn before_final(data: &[u8]) -> u32 {
    let mut h = SEED ^ data.len() as u32;
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        h = h.wrapping_mul(M) ^ mix(word(block));
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        h = (h ^ word(tail)).wrapping_mul(M);
    }
    h
}

#[cfg(test)]
fn finish(mut h: u32) -> u32 {
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// The first block of `data` (whose current value is ignored) that gives `data` the
/// state `target` before the final avalanche: every later step is undone from the
/// target back to the first block, whose mixing is then inverted.
fn solve(data: &[u8], target: u32) -> u32 {
    debug_assert!(data.len() >= FIX_BYTES);
    let count = data.len() / 4;
    let rest = &data[count * 4..];
    let mut h = target;
    if !rest.is_empty() {
        h = h.wrapping_mul(M_INVERSE) ^ word(rest);
    }
    for index in (1..count).rev() {
        h = (h ^ mix(word(&data[index * 4..][..4]))).wrapping_mul(M_INVERSE);
    }
    let start = (SEED ^ data.len() as u32).wrapping_mul(M);
    unmix(h ^ start)
}

/// Up to four bytes, little-endian, as murmur2 reads a block or the tail.
fn word(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word[..bytes.len()].copy_from_slice(bytes);
    u32::from_le_bytes(word)
}

fn mix(k: u32) -> u32 {
    let k = k.wrapping_mul(M);
    (k ^ (k >> 24)).wrapping_mul(M)
}

/// The inverse of `mix`: `x ^ (x >> 24)` undoes itself, since 24 ≥ 16.
fn unmix(y: u32) -> u32 {
    let x = y.wrapping_mul(M_INVERSE);
    (x ^ (x >> 24)).wrapping_mul(M_INVERSE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Values from the Java client's own partitioner tests.
        assert_eq!(murmur2(b"21") as i32, -973932308);
        assert_eq!(murmur2(b"foobar") as i32, -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string") as i32, -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string") as i32, -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") as i32,
            -58897971
        );
        assert_eq!(M.wrapping_mul(M_INVERSE), 1);
    }

    #[test]
    fn a_derived_key_hashes_as_its_routing_key_and_splits_back() {
        let mut out = Vec::new();
        let long = vec![b'k'; 300];
        let keys: [&[u8]; 6] = [b"", b"a", b"user-17", b"abcd", b"\xff\x00\x01", &long];
        for key in keys {
            for path in [
                &b""[..],
                b"\x00",
                b"\x01\x03id",
                b"a longer path of some bytes",
            ] {
                for split_at in 0..=path.len().min(3) {
                    let parts = [&path[..split_at], &path[split_at..]];
                    derive(&mut out, key, &parts);
                    assert_eq!(murmur2(&out), murmur2(key), "{key:?} {path:?}");
                    assert_eq!(split(&out).unwrap(), (key, path));
                }
            }
        }
    }

    #[test]
    fn malformed_keys_are_refused() {
        for bad in [
            &b""[..],
            b"abcd",
            b"abcd\x05xy",
            b"abcd\xff\xff\xff\xff\xff\xff",
        ] {
            let error = split(bad).unwrap_err();
            assert!(
                error.message().contains("is not one weir-guest writes"),
                "{error}"
            );
        }
    }
}
