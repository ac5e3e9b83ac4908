// Keyed event-time windows fired by watermarks, as state: each is a Store whose entry
// for a key holds all its open windows, and which notes the keys it changes (a new
// record, a fired window), so a checkpoint writes only those. Fired windows come by
// end, then key bytes, so output is the same across snapshot and restore.

import { WeirError } from './errors.js';
import { binaryBytes, describeKey, text } from './bytes.js';
import { Layout, Store, encodeJson } from './state.js';

/** @typedef {{ start: number, end: number }} Window `[start, end)` in epoch milliseconds */

/** Before the first watermark nothing is late. */
const NO_WATERMARK = -Infinity;

function positiveMs(value, what) {
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new WeirError(`${what} must be a positive whole number of milliseconds, got ${value}`);
  }
  return value;
}

function mergeFunction(merge, what) {
  if (typeof merge !== 'function') {
    throw new WeirError(`${what} needs a merge(accumulator, value) function: it folds a value into a window's accumulator`);
  }
  return merge;
}

function parseEntry(id, body, what) {
  try {
    return JSON.parse(text(body));
  } catch (e) {
    throw new WeirError(`cannot restore key ${describeKey(id)}: its ${what} entry is not JSON (${e.message})`);
  }
}

/**
 * One accumulator per key and tumbling window: a record at `ts` belongs to
 * `[ts - ts mod size, +size)`, aligned to epoch 0. `add` puts a value into its key's
 * window: the first value is the accumulator, each later one is folded in as
 * `merge(accumulator, value)`. A record whose window has fired is late: dropped and
 * counted. Accumulators are JSON values.
 * @template A
 */
export class TumblingWindows extends Store {
  /**
   * @param {number} sizeMs
   * @param {(accumulator: A, value: A) => A} merge
   * @param {{ version?: number }} [options] the state version (1 to 255) of the accumulators' shape
   */
  constructor(sizeMs, merge, { version = 1 } = {}) {
    super(Layout.tumbling, version);
    this.sizeMs = positiveMs(sizeMs, 'a tumbling window size');
    this.merge = mergeFunction(merge, 'TumblingWindows');
    /** @type {Map<string, Map<number, A>>} per key: accumulator by window start */
    this.keyWindows = new Map();
    /** @type {Map<number, Set<string>>} per open window start: its keys */
    this.panes = new Map();
    this.watermark = NO_WATERMARK;
    this.lateRecords = 0;
  }

  /** @param {number} timestamp @returns {Window} */
  windowOf(timestamp) {
    const start = timestamp - (((timestamp % this.sizeMs) + this.sizeMs) % this.sizeMs);
    return { start, end: start + this.sizeMs };
  }

  /**
   * Adds `value` to `key`'s window of `timestamp`. Returns false, changing nothing,
   * when that window has fired (a late record).
   * @param {Uint8Array | null} key
   * @param {number} timestamp
   * @param {A} value
   */
  add(key, timestamp, value) {
    const { start, end } = this.windowOf(timestamp);
    if (end <= this.watermark) {
      this.lateRecords++;
      return false;
    }
    const id = this.id(key);
    let windows = this.keyWindows.get(id);
    if (windows === undefined) this.keyWindows.set(id, (windows = new Map()));
    const accumulator = windows.get(start);
    windows.set(start, accumulator === undefined ? value : this.merge(accumulator, value));
    let pane = this.panes.get(start);
    if (pane === undefined) this.panes.set(start, (pane = new Set()));
    pane.add(id);
    this.changed.add(id);
    return true;
  }

  /**
   * `key`'s accumulator in the window of `timestamp`, if open.
   * @param {Uint8Array | null} key
   * @param {number} timestamp
   * @returns {A | undefined}
   */
  get(key, timestamp) {
    return this.keyWindows.get(this.id(key))?.get(this.windowOf(timestamp).start);
  }

  /**
   * Every window with `end <= watermark`, as [window, key, accumulator] by window end,
   * then key bytes; they are forgotten, and later records for them are late.
   * @param {number} watermark
   * @returns {[Window, Uint8Array, A][]}
   */
  fire(watermark) {
    this.watermark = Math.max(this.watermark, watermark);
    const fired = [];
    const due = [...this.panes.keys()].filter((start) => start + this.sizeMs <= watermark).sort((a, b) => a - b);
    for (const start of due) {
      const ids = [...this.panes.get(start)].sort();
      this.panes.delete(start);
      const window = { start, end: start + this.sizeMs };
      for (const id of ids) {
        const windows = this.keyWindows.get(id);
        const accumulator = windows.get(start);
        windows.delete(start);
        if (windows.size === 0) this.keyWindows.delete(id);
        this.changed.add(id);
        fired.push([window, binaryBytes(id), accumulator]);
      }
    }
    return fired;
  }

  /** The number of (window, key) accumulators still open. */
  get open() {
    let n = 0;
    for (const pane of this.panes.values()) n += pane.size;
    return n;
  }

  body(id) {
    const windows = this.keyWindows.get(id);
    if (windows === undefined) return null;
    const list = [...windows].sort((a, b) => a[0] - b[0]);
    return encodeJson({ size: this.sizeMs, windows: list }, 'a window accumulator');
  }

  holds(id) {
    return this.keyWindows.has(id);
  }

  canRead(version) {
    return version === this.version;
  }

  restoreBody(id, body) {
    const entry = parseEntry(id, body, 'tumbling windows');
    if (entry?.size !== this.sizeMs || !Array.isArray(entry.windows)) {
      throw new WeirError(
        `cannot restore key ${describeKey(id)}: its windows are ${entry?.size} ms long, but this operator's are ${this.sizeMs} ms; restore a checkpoint taken with the same window size`,
      );
    }
    const windows = new Map();
    for (const [start, accumulator] of entry.windows) {
      windows.set(start, accumulator);
      let pane = this.panes.get(start);
      if (pane === undefined) this.panes.set(start, (pane = new Set()));
      pane.add(id);
    }
    if (windows.size > 0) this.keyWindows.set(id, windows);
  }

  restoredAt(watermark) {
    this.watermark = Math.max(this.watermark, watermark);
  }
}

/**
 * One accumulator per key and session: a record at `ts` opens `[ts, ts + gap)`, and
 * sessions of a key that overlap or touch merge. `add` puts a value into its session:
 * the first value is the accumulator, later values and merged sessions' accumulators
 * are folded in with `merge(earlier, later)`.
 * A session fires when the watermark reaches its end. A record that would open a
 * session already complete, merging with none, is late: dropped and counted.
 * @template A
 */
export class SessionWindows extends Store {
  /**
   * @param {number} gapMs
   * @param {(earlier: A, later: A) => A} merge
   * @param {{ version?: number }} [options] the state version (1 to 255) of the accumulators' shape
   */
  constructor(gapMs, merge, { version = 1 } = {}) {
    super(Layout.session, version);
    this.gapMs = positiveMs(gapMs, 'a session gap');
    this.merge = mergeFunction(merge, 'SessionWindows');
    /** @type {Map<string, { sessions: { start: number, end: number, accumulator: A }[], timer: number }>} */
    this.keySessions = new Map();
    /** (time, key) wake-ups; one is stale once its time is not its key's timer */
    this.timers = new MinHeap();
    this.watermark = NO_WATERMARK;
    this.lateRecords = 0;
  }

  /**
   * Adds `value` at `timestamp` to `key`'s session, opening or merging sessions as
   * needed. Returns false, changing nothing, for a late record.
   * @param {Uint8Array | null} key
   * @param {number} timestamp
   * @param {A} value
   */
  add(key, timestamp, value) {
    const start = timestamp;
    const end = timestamp + this.gapMs;
    const id = this.id(key);
    const state = this.keySessions.get(id);
    if (state === undefined) {
      if (end <= this.watermark) return this.late();
      this.keySessions.set(id, { sessions: [{ start, end, accumulator: value }], timer: end });
      this.timers.push(end, id);
      this.changed.add(id);
      return true;
    }
    const list = state.sessions;
    let first = 0;
    while (first < list.length && list[first].end < start) first++;
    let last = first;
    while (last < list.length && list[last].start <= end) last++;
    if (first === last) {
      if (end <= this.watermark) return this.late();
      list.splice(first, 0, { start, end, accumulator: value });
      if (end < state.timer) {
        state.timer = end;
        this.timers.push(end, id);
      }
    } else {
      // The record bridges sessions first..last-1: fold them into the first. Ends only
      // grow, so the key's timer stays early enough.
      const target = list[first];
      for (const later of list.splice(first + 1, last - first - 1)) {
        target.end = Math.max(target.end, later.end);
        target.accumulator = this.merge(target.accumulator, later.accumulator);
      }
      target.start = Math.min(target.start, start);
      target.end = Math.max(target.end, end);
      target.accumulator = this.merge(target.accumulator, value);
    }
    this.changed.add(id);
    return true;
  }

  late() {
    this.lateRecords++;
    return false;
  }

  /**
   * Every session with `end <= watermark`, as [window, key, accumulator] by end, then
   * key bytes, then start; they are forgotten.
   * @param {number} watermark
   * @returns {[Window, Uint8Array, A][]}
   */
  fire(watermark) {
    this.watermark = Math.max(this.watermark, watermark);
    const fired = [];
    while (this.timers.size > 0 && this.timers.peekTime() <= watermark) {
      const [time, id] = this.timers.pop();
      const state = this.keySessions.get(id);
      if (state === undefined || state.timer !== time) continue;
      let due = 0;
      while (due < state.sessions.length && state.sessions[due].end <= watermark) due++;
      for (const session of state.sessions.splice(0, due)) fired.push([session, id]);
      if (due > 0) this.changed.add(id);
      if (state.sessions.length === 0) {
        this.keySessions.delete(id);
      } else {
        state.timer = state.sessions[0].end;
        this.timers.push(state.timer, id);
      }
    }
    fired.sort(([a, x], [b, y]) => a.end - b.end || (x < y ? -1 : x > y ? 1 : 0) || a.start - b.start);
    return fired.map(([s, id]) => [{ start: s.start, end: s.end }, binaryBytes(id), s.accumulator]);
  }

  /** The number of sessions still open, over all keys. */
  get open() {
    let n = 0;
    for (const state of this.keySessions.values()) n += state.sessions.length;
    return n;
  }

  body(id) {
    const state = this.keySessions.get(id);
    if (state === undefined) return null;
    const sessions = state.sessions.map((s) => [s.start, s.end, s.accumulator]);
    return encodeJson({ gap: this.gapMs, sessions }, 'a session accumulator');
  }

  holds(id) {
    return this.keySessions.has(id);
  }

  canRead(version) {
    return version === this.version;
  }

  restoreBody(id, body) {
    const entry = parseEntry(id, body, 'session windows');
    if (entry?.gap !== this.gapMs || !Array.isArray(entry.sessions)) {
      throw new WeirError(
        `cannot restore key ${describeKey(id)}: its sessions have a gap of ${entry?.gap} ms, but this operator's is ${this.gapMs} ms; restore a checkpoint taken with the same gap`,
      );
    }
    const sessions = entry.sessions.map(([start, end, accumulator]) => ({ start, end, accumulator }));
    if (sessions.length === 0) return;
    this.keySessions.set(id, { sessions, timer: sessions[0].end });
    this.timers.push(sessions[0].end, id);
  }

  restoredAt(watermark) {
    this.watermark = Math.max(this.watermark, watermark);
  }
}

/** A binary min-heap of (time, key). */
class MinHeap {
  constructor() {
    /** @type {number[]} */
    this.times = [];
    /** @type {string[]} */
    this.ids = [];
  }

  get size() {
    return this.times.length;
  }

  peekTime() {
    return this.times[0];
  }

  push(time, id) {
    const { times, ids } = this;
    let i = times.length;
    times.push(time);
    ids.push(id);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (times[parent] <= time) break;
      times[i] = times[parent];
      ids[i] = ids[parent];
      i = parent;
    }
    times[i] = time;
    ids[i] = id;
  }

  /** @returns {[number, string]} */
  pop() {
    const { times, ids } = this;
    const top = [times[0], ids[0]];
    const time = times.pop();
    const id = ids.pop();
    const n = times.length;
    if (n > 0) {
      let i = 0;
      for (;;) {
        let child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && times[child + 1] < times[child]) child++;
        if (times[child] >= time) break;
        times[i] = times[child];
        ids[i] = ids[child];
        i = child;
      }
      times[i] = time;
      ids[i] = id;
    }
    return top;
  }
}
