//! Appending a few bytes without a call into the host. On wasm32 with bulk memory, a
//! copy of a length known only at run time compiles to `memory.copy`, which wasmtime
//! runs as a call out of the guest's code, while most keys and values a snapshot round
//! or a call's output appends are a few bytes long. Up to 32 bytes, [`append`] moves
//! two overlapping words of a fixed size instead, which compile to loads and stores;
//! [`padded`] does the same into a 16-byte array.

/// The longest copy done by words; a longer one is worth its call.
const WORD_COPY_BYTES: usize = 32;

/// Appends `bytes` to `out`.
#[inline]
pub(crate) fn append(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    if n > WORD_COPY_BYTES {
        out.extend_from_slice(bytes);
        return;
    }
    out.reserve(n);
    let len = out.len();
    // SAFETY: `reserve` left room for `n` bytes past `len`, in an allocation apart from
    // `bytes` while `out` is borrowed mutably; after the copy all `n` are written.
    unsafe {
        copy_short(bytes.as_ptr(), out.as_mut_ptr().add(len), n);
        out.set_len(len + n);
    }
}

/// `bytes` zero-padded to 16, if they are no longer.
#[inline]
pub(crate) fn padded(bytes: &[u8]) -> Option<[u8; 16]> {
    let n = bytes.len();
    if n > 16 {
        return None;
    }
    let mut out = [0u8; 16];
    // SAFETY: `n` bytes are readable from `bytes` and writable to `out`, apart.
    unsafe { copy_short(bytes.as_ptr(), out.as_mut_ptr(), n) };
    Some(out)
}

/// Copies `n` bytes, at most [`WORD_COPY_BYTES`], from `from` to `to` by words.
///
/// # Safety
/// `from` is readable and `to` writable for `n` bytes, and the two do not overlap.
#[inline(always)]
unsafe fn copy_short(from: *const u8, to: *mut u8, n: usize) {
    debug_assert!(n <= WORD_COPY_BYTES);
    // SAFETY: each move reads within the `n` bytes at `from` and writes within those
    // at `to`; the two moves of a pair may overlap each other, writing the same bytes
    // twice.
    unsafe {
        match n {
            16..=WORD_COPY_BYTES => pair::<u128>(from, to, n),
            8..16 => pair::<u64>(from, to, n),
            4..8 => pair::<u32>(from, to, n),
            1..4 => {
                *to = *from;
                *to.add(n / 2) = *from.add(n / 2);
                *to.add(n - 1) = *from.add(n - 1);
            }
            _ => {}
        }
    }
}

/// Moves the first and the last `size_of::<W>()` of `n` bytes from `from` to `to`.
///
/// # Safety
/// `size_of::<W>() <= n <= 2 * size_of::<W>()`; `from` is readable and `to` writable
/// for `n` bytes.
#[inline(always)]
unsafe fn pair<W: Copy>(from: *const u8, to: *mut u8, n: usize) {
    let tail = n - size_of::<W>();
    // SAFETY: both words lie within the `n` bytes the caller vouches for.
    unsafe {
        to.cast::<W>().write_unaligned(from.cast::<W>().read_unaligned());
        to.add(tail).cast::<W>().write_unaligned(from.add(tail).cast::<W>().read_unaligned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_appends_exactly_its_bytes() {
        let source: Vec<u8> = (1..=80).collect();
        for n in 0..=source.len() {
            let mut out = vec![0xee; 3];
            out.shrink_to_fit();
            append(&mut out, &source[..n]);
            assert_eq!(out.len(), 3 + n, "{n} bytes");
            assert_eq!(&out[..3], &[0xee; 3], "{n} bytes: what was there stays");
            assert_eq!(&out[3..], &source[..n], "{n} bytes");
        }
    }

    #[test]
    fn up_to_sixteen_bytes_are_padded_with_zeros() {
        let source: Vec<u8> = (1..=17).collect();
        for n in 0..=16 {
            let padded = padded(&source[..n]).expect("fits");
            assert_eq!(&padded[..n], &source[..n], "{n} bytes");
            assert!(padded[n..].iter().all(|&b| b == 0), "{n} bytes: zeros after");
        }
        assert_eq!(padded(&source), None);
    }
}
