// The class a plugin author extends: configuration in the constructor, records in
// `process`, event time in `onWatermark`, output through `emit`. Whatever must survive
// a restart lives in one state object among its fields, which the SDK checkpoints and
// restores key by key.

import { NO_VALUE, encoder, toEventTime } from './batch.js';

/** Where the glue puts the current call's Output. */
export const OUTPUT = Symbol('weir-operator output');

/**
 * A stream operator. Subclass it, read the config in the constructor, and keep state
 * in one field holding a KeyedState, TumblingWindows or SessionWindows (a checkpoint
 * holds one entry per record key, so an operator keeps one state object). Throw a
 * WeirError for anything the job's owner should fix; the host reports it with the
 * plugin's name.
 */
export class Operator {
  /**
   * The plugin's name in error messages; the class name unless a subclass sets it.
   * @type {string | undefined}
   */
  static plugin = undefined;

  /** @param {import('./config.js').Config} _config */
  constructor(_config) {}

  /**
   * Consumes a batch in arrival order and emits what it produces now.
   * @param {import('./batch.js').Record[]} _records
   */
  process(_records) {}

  /**
   * Event time has reached `watermark` (epoch ms): no record with a smaller timestamp
   * follows. Emits what this completes, e.g. windows (`state.fire(watermark)`).
   * @param {number} _watermark
   */
  onWatermark(_watermark) {}

  /**
   * A restore has ended: the state holds the checkpoint's entries and the instance had
   * reached event time `watermark`. Rebuild anything derived from the state here.
   * @param {number} _watermark
   */
  restored(_watermark) {}

  /**
   * Emits one record (from `process` or `onWatermark`).
   * @param {Uint8Array | null} key null for no key
   * @param {Uint8Array | string | null} value bytes, or text (written as UTF-8); null
   *   for a tombstone, which a compacted output topic takes as the key's deletion
   * @param {number | bigint} timestamp event time, epoch milliseconds
   * @param {import('./batch.js').Header[]} [headers]
   */
  emit(key, value, timestamp, headers) {
    // The per-record path: one function, no helpers (a call costs in an interpreter).
    const out = this[OUTPUT];
    const keyLen = key === null ? 0 : key.length;
    // A UTF-16 unit takes at most 3 UTF-8 bytes.
    const room = keyLen + (value === null ? 0 : typeof value === 'string' ? value.length * 3 : value.length);
    let data = out.data;
    if (out.length + room > data.length) {
      const grown = new Uint8Array(Math.max(data.length * 2, out.length + room));
      grown.set(data.subarray(0, out.length));
      out.data = data = grown;
    }
    const keyOffset = key === null ? 0 : out.length;
    if (key !== null) data.set(key, keyOffset);
    const end = out.length + keyLen;
    let valueOffset = end;
    let valueLen = 0;
    if (value === null) {
      valueOffset = NO_VALUE;
    } else if (typeof value === 'string') {
      valueLen = encoder.encodeInto(value, data.subarray(end)).written;
    } else {
      data.set(value, end);
      valueLen = value.length;
    }
    out.length = end + valueLen;
    if (timestamp !== out.lastTimestamp) {
      out.lastEventTime = toEventTime(timestamp);
      out.lastTimestamp = timestamp;
    }
    out.entries.push({ hasKey: key !== null, keyOffset, keyLen, valueOffset, valueLen, timestamp: out.lastEventTime });
    if (headers !== undefined && headers.length > 0) {
      const entry = out.entries.length - 1;
      for (const [name, bytes] of headers) out.headers.push({ entry, name, value: bytes });
    }
  }

  /**
   * Emits `record` unchanged, headers included.
   * @param {import('./batch.js').Record} record
   */
  forward(record) {
    this.emit(record.key, record.value, record.timestamp, record.headers);
  }
}
