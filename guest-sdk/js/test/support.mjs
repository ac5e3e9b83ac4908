// Packed batches and chunks as the bindings hand them over, and a driver for exports.
const encoder = new TextEncoder();
const bytes = (v) => (v === null ? null : typeof v === 'string' ? encoder.encode(v) : v);

/** [key|null, value, ts] triples → a packed batch. */
export function batch(records) {
  const parts = [];
  const entries = [];
  let at = 0;
  for (const [key, value, ts] of records) {
    const k = bytes(key);
    const v = bytes(value);
    const keyOffset = k === null ? 0 : at;
    if (k !== null) {
      parts.push(k);
      at += k.length;
    }
    parts.push(v);
    entries.push({ hasKey: k !== null, keyOffset, keyLen: k === null ? 0 : k.length, valueOffset: at, valueLen: v.length, timestamp: BigInt(ts) });
    at += v.length;
  }
  const data = new Uint8Array(at);
  let offset = 0;
  for (const p of parts) {
    data.set(p, offset);
    offset += p.length;
  }
  return { data, entries, headers: [] };
}

const decoder = new TextDecoder();
/** A batch's records as [key|null, value, ts] text triples. */
export function records(out) {
  return out.entries.map((e) => [
    e.hasKey ? decoder.decode(out.data.subarray(e.keyOffset, e.keyOffset + e.keyLen)) : null,
    decoder.decode(out.data.subarray(e.valueOffset, e.valueOffset + e.valueLen)),
    Number(e.timestamp),
  ]);
}

/** One snapshot round: its chunks until the empty one. */
export function round(exports, maxBytes) {
  const chunks = [];
  for (let i = 0; i < 100000; i++) {
    const chunk = exports.snapshot(maxBytes);
    if (chunk.entries.length === 0) return chunks;
    chunks.push(chunk);
  }
  throw new Error('a round that never ends');
}

/** Hex of bytes, a Map key for a checkpoint image. */
export const hex = (b) => Buffer.from(b).toString('hex');

/** Applies a round's chunks to an image (hex key → value bytes). */
export function apply(image, chunks) {
  for (const { data, entries } of chunks) {
    for (const e of entries) {
      const key = hex(data.subarray(e.keyOffset, e.keyOffset + e.keyLen));
      if (e.removed) image.delete(key);
      else image.set(key, data.slice(e.valueOffset, e.valueOffset + e.valueLen));
    }
  }
}

/** A restore chunk of an image's entries (or of [keyBytes, valueBytes|null] pairs). */
export function chunk(pairs) {
  const parts = [];
  const entries = [];
  let at = 0;
  for (const [k, v] of pairs) {
    const key = bytes(k);
    parts.push(key);
    const keyOffset = at;
    at += key.length;
    if (v === null) {
      entries.push({ keyOffset, keyLen: key.length, valueOffset: 0, valueLen: 0, removed: true });
      continue;
    }
    const value = bytes(v);
    parts.push(value);
    entries.push({ keyOffset, keyLen: key.length, valueOffset: at, valueLen: value.length, removed: false });
    at += value.length;
  }
  const data = new Uint8Array(at);
  let offset = 0;
  for (const p of parts) {
    data.set(p, offset);
    offset += p.length;
  }
  return { data, entries };
}

/** Restores an image into fresh exports, a few entries per chunk. */
export function restoreImage(exports, image, watermark) {
  const pairs = [...image].map(([k, v]) => [Buffer.from(k, 'hex'), v]);
  for (let i = 0; i < pairs.length; i += 3) exports.restore(chunk(pairs.slice(i, i + 3)));
  exports.restored(BigInt(watermark));
}
