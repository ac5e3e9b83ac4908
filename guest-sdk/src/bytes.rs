//! Appending a few bytes without a call into the host. On wasm32 with bulk memory, a
//! copy of a length known only at run time compiles to `memory.copy`, which wasmtime
//! runs as a call out of the guest's code, while most keys and values a snapshot round
//! or a call's output appends are a few bytes long. Up to 32 bytes, [`append`] moves
//! two overlapping words of a fixed size instead, which compile to loads and stores.

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
    let (from, to) = (bytes.as_ptr(), out.as_mut_ptr());
    // SAFETY: `reserve` left room for `n` bytes past `len`. Each move reads within
    // `bytes` and writes within `len..len + n` of `out`, two allocations that cannot
    // overlap while `out` is borrowed mutably; the two moves of a pair may overlap each
    // other, writing the same bytes twice. After them all `n` bytes are written.
    unsafe {
        let to = to.add(len);
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
        out.set_len(len + n);
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
}
