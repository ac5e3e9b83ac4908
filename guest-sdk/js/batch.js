// Packed batches (weir:operator@0.2 `batch`) in and out. A record's key and value are
// views into the batch's one data buffer, not copies; emitted records are packed back
// to back into one growing buffer, the shape the host lifts in one copy.

import { WeirError } from './errors.js';

const decoder = new TextDecoder();
export const encoder = new TextEncoder();

/** @typedef {[string, Uint8Array]} Header a header's name and value */

/** @type {Header[]} */
const NO_HEADERS = Object.freeze([]);

/** The value offset of a record without a value (its value length is 0): a tombstone. */
export const NO_VALUE = 0xffffffff;

/**
 * One input record. `key` and `value` are views into the batch: copy them to keep them
 * past the call. `value` is null for a record without a value (a tombstone), handed so
 * only to an operator whose job file sets `tombstones = true` (to others it is empty).
 */
export class Record {
  /**
   * @param {Uint8Array | null} key null for a record without a key
   * @param {Uint8Array | null} value null for a tombstone
   * @param {number} timestamp event time, epoch milliseconds
   * @param {Header[]} headers
   */
  constructor(key, value, timestamp, headers) {
    this.key = key;
    this.value = value;
    this.timestamp = timestamp;
    this.headers = headers;
  }

  /** The key as UTF-8 text ("" without a key; invalid UTF-8 becomes U+FFFD). */
  keyText() {
    return this.key === null ? '' : decoder.decode(this.key);
  }

  /** The value as UTF-8 text ("" for a tombstone). */
  valueText() {
    return this.value === null ? '' : decoder.decode(this.value);
  }

  /** The value parsed as JSON, or `undefined` when it is not JSON. */
  json() {
    try {
      return JSON.parse(decoder.decode(this.value));
    } catch {
      return undefined;
    }
  }
}

const RECORD = Record.prototype;

/**
 * The records of a packed batch, in order.
 * @param {{ data: Uint8Array, entries: any[], headers: any[] }} batch
 * @returns {Record[]}
 */
export function readBatch(batch) {
  const { data, entries } = batch;
  const n = entries.length;
  const perRecord = batch.headers.length === 0 ? null : groupHeaders(batch.headers, n);
  const records = new Array(n);
  for (let i = 0; i < n; i++) {
    const e = entries[i];
    const key = e.hasKey ? data.subarray(e.keyOffset, e.keyOffset + e.keyLen) : null;
    const value = e.valueOffset === NO_VALUE && e.valueLen === 0 ? null : data.subarray(e.valueOffset, e.valueOffset + e.valueLen);
    // A literal, not `new Record(...)`: no constructor call per record.
    records[i] = { __proto__: RECORD, key, value, timestamp: Number(e.timestamp), headers: perRecord === null ? NO_HEADERS : perRecord[i] };
  }
  return records;
}

/** Headers by record index; they come ordered by record. */
function groupHeaders(headers, n) {
  const perRecord = new Array(n).fill(NO_HEADERS);
  for (const h of headers) {
    if (h.entry >= n) continue;
    if (perRecord[h.entry] === NO_HEADERS) perRecord[h.entry] = [];
    perRecord[h.entry].push([h.name, h.value]);
  }
  return perRecord;
}

/**
 * The records one call emits, packed back to back into one buffer that grows by
 * doubling; `Operator.emit` writes into it (on the per-record path, so in one function).
 */
export class Output {
  /** @param {number} capacity initial bytes */
  constructor(capacity) {
    this.data = new Uint8Array(Math.max(capacity, 256));
    this.length = 0;
    /** @type {any[]} */
    this.entries = [];
    /** @type {any[]} */
    this.headers = [];
    // The last timestamp converted to the bindings' bigint, and that bigint.
    this.lastTimestamp = NaN;
    this.lastEventTime = 0n;
  }

  /** The packed batch for the host. */
  finish() {
    return { data: this.data.subarray(0, this.length), entries: this.entries, headers: this.headers };
  }
}

/** A timestamp as the bindings want it (s64: a bigint), refused unless a whole number. */
export function toEventTime(timestamp) {
  if (typeof timestamp === 'bigint') return timestamp;
  if (Number.isSafeInteger(timestamp)) return BigInt(timestamp);
  throw new WeirError(`an emitted record's timestamp must be a whole number of epoch milliseconds, got ${timestamp}`);
}
