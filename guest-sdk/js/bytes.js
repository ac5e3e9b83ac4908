// Conversions between bytes and strings. A state key is held as a "binary string" (one
// char per byte, so any bytes are a Map key and compare in byte order); text is UTF-8.

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** Keys longer than this are converted in pieces (`apply` has an argument limit). */
const PIECE = 8192;

/**
 * The bytes as UTF-8 text (invalid sequences become U+FFFD); `null` is "".
 * @param {Uint8Array | null} bytes
 * @returns {string}
 */
export function text(bytes) {
  return bytes === null || bytes.length === 0 ? '' : decoder.decode(bytes);
}

/**
 * The UTF-8 bytes of `value`.
 * @param {string} value
 * @returns {Uint8Array}
 */
export function utf8(value) {
  return encoder.encode(value);
}

/**
 * One char per byte: a Map key that keeps every byte and sorts in byte order.
 * @param {Uint8Array} bytes
 * @returns {string}
 */
export function binaryString(bytes) {
  const n = bytes.length;
  if (n <= PIECE) return String.fromCharCode.apply(null, bytes);
  let out = '';
  for (let at = 0; at < n; at += PIECE) {
    out += String.fromCharCode.apply(null, bytes.subarray(at, at + PIECE));
  }
  return out;
}

/**
 * The bytes of a binary string.
 * @param {string} id
 * @returns {Uint8Array}
 */
export function binaryBytes(id) {
  const out = new Uint8Array(id.length);
  for (let i = 0; i < id.length; i++) out[i] = id.charCodeAt(i);
  return out;
}

/**
 * A key for a message: its text in JSON quotes, cut after 40 characters.
 * @param {string} id a binary string
 */
export function describeKey(id) {
  const shown = text(binaryBytes(id.length > 40 ? id.slice(0, 40) : id));
  return JSON.stringify(shown) + (id.length > 40 ? '…' : '');
}

/**
 * A growable byte buffer that packs parts back to back, as batches and state chunks do.
 */
export class Packer {
  /** @param {number} capacity initial bytes */
  constructor(capacity) {
    this.data = new Uint8Array(Math.max(capacity, 256));
    this.length = 0;
  }

  /** Room for `more` bytes at the end. */
  reserve(more) {
    const need = this.length + more;
    if (need <= this.data.length) return;
    const grown = new Uint8Array(Math.max(this.data.length * 2, need));
    grown.set(this.data.subarray(0, this.length));
    this.data = grown;
  }

  /**
   * Appends `bytes`; returns their offset.
   * @param {Uint8Array} bytes
   */
  push(bytes) {
    const offset = this.length;
    this.reserve(bytes.length);
    this.data.set(bytes, offset);
    this.length += bytes.length;
    return offset;
  }

  /** The packed bytes (a view, not a copy). */
  bytes() {
    return this.data.subarray(0, this.length);
  }
}
