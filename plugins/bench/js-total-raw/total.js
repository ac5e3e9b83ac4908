// bench-js-total-raw: plugins/js-total written by hand against weir:operator@0.2, with
// no SDK: the same output and state entries, for bench/run to measure what the SDK
// costs. Not an example to copy: plugins/js-total is the same operator in 30 lines.
import { log } from 'weir:operator/log@0.2.0';

const PLUGIN = 'bench-js-total-raw';
const MAX_ENTRY_BYTES = 998_995;
const decoder = new TextDecoder();
const encoder = new TextEncoder();

let field = null;
/** key as a binary string (one char per byte) → total */
const totals = new Map();
/** keys changed since the last snapshot round */
let changed = new Set();
/** the round's keys and how far it got, or null between rounds */
let round = null;
let roundAt = 0;

const fail = (message) => {
  throw `${PLUGIN}: ${message}`;
};

export function init(config) {
  if (field !== null) fail('init was called twice on one instance');
  for (const [key, value] of config) {
    if (key !== 'field') fail(`operator config has unknown key \`${key}\`; ${PLUGIN} knows: \`field\``);
    field = value;
  }
  if (field === null || field === '') fail('operator config `field` is missing or empty');
  log('info', `${PLUGIN}: totalling field ${field} per key`);
}

export function process(batch) {
  if (field === null) fail('the operator is not initialised: the host must call init first');
  const { data, entries } = batch;
  let out = new Uint8Array(data.length + 64 * entries.length + 256);
  let length = 0;
  const outEntries = [];
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    let document;
    try {
      document = JSON.parse(decoder.decode(data.subarray(e.valueOffset, e.valueOffset + e.valueLen)));
    } catch {
      continue;
    }
    if (typeof document !== 'object' || document === null || Array.isArray(document)) continue;
    const amount = document[field];
    if (typeof amount !== 'number') continue;
    const keyBytes = data.subarray(e.keyOffset, e.keyOffset + e.keyLen);
    const id = String.fromCharCode.apply(null, keyBytes);
    const total = (totals.get(id) ?? 0) + amount;
    if (!Number.isFinite(total)) continue;
    totals.set(id, total);
    changed.add(id);
    const value = JSON.stringify({ key: e.keyLen === 0 ? '' : decoder.decode(keyBytes), total });
    if (length + e.keyLen + value.length * 3 > out.length) {
      const grown = new Uint8Array(out.length * 2 + e.keyLen + value.length * 3);
      grown.set(out.subarray(0, length));
      out = grown;
    }
    const keyOffset = e.hasKey ? length : 0;
    out.set(keyBytes, length);
    length += e.keyLen;
    const { written } = encoder.encodeInto(value, out.subarray(length));
    outEntries.push({ hasKey: e.hasKey, keyOffset, keyLen: e.keyLen, valueOffset: length, valueLen: written, timestamp: e.timestamp });
    length += written;
  }
  return { data: out.subarray(0, length), entries: outEntries, headers: [] };
}

export function onWatermark(_watermark) {
  return { data: new Uint8Array(0), entries: [], headers: [] };
}

/** The changed keys in chunks of at most maxBytes; entries as the SDK writes them (0x01 0x01 JSON). */
export function snapshot(maxBytes) {
  if (round === null) {
    round = [...changed];
    changed = new Set();
    roundAt = 0;
  }
  const parts = [];
  const entries = [];
  let length = 0;
  while (roundAt < round.length) {
    const id = round[roundAt];
    const body = encoder.encode(JSON.stringify(totals.get(id)));
    const size = id.length + 2 + body.length;
    if (size > MAX_ENTRY_BYTES) fail(`the state of one key is ${size} bytes, over ${MAX_ENTRY_BYTES}`);
    if (entries.length > 0 && length + size > maxBytes) break;
    const key = new Uint8Array(id.length);
    for (let i = 0; i < id.length; i++) key[i] = id.charCodeAt(i);
    parts.push(key, Uint8Array.of(0x01, 0x01), body);
    entries.push({ keyOffset: length, keyLen: key.length, valueOffset: length + key.length, valueLen: body.length + 2, removed: false });
    length += size;
    roundAt++;
  }
  if (entries.length === 0) round = null;
  const data = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    data.set(part, at);
    at += part.length;
  }
  return { data, entries };
}

export function restore(chunk) {
  const { data, entries } = chunk;
  for (const e of entries) {
    if (e.keyOffset + e.keyLen > data.length || e.valueOffset + e.valueLen > data.length) fail('a state entry lies outside its chunk');
    const id = String.fromCharCode.apply(null, data.subarray(e.keyOffset, e.keyOffset + e.keyLen));
    if (e.removed) fail('a restore never holds removals');
    if (totals.has(id)) fail('a key was restored twice');
    const value = data.subarray(e.valueOffset, e.valueOffset + e.valueLen);
    if (value[0] !== 0x01 || value[1] !== 0x01) fail('a state entry is not a version 1 total');
    const total = JSON.parse(decoder.decode(value.subarray(2)));
    if (typeof total !== 'number') fail('a state entry is not a version 1 total');
    totals.set(id, total);
  }
}

export function restored(_watermark) {}
