// Keyed state and its checkpoints. Every state type (KeyedState, the windows) is a
// Store: it notes the keys it changes, encodes one key's whole state as an entry and
// takes entries back. `Snapshots` cuts a round of changed keys into chunks within
// every limit of wit/operator.wit; `restoreChunk` checks what a restore hands over.

import { WeirError } from './errors.js';
import { Packer, binaryBytes, binaryString, describeKey, text, utf8 } from './bytes.js';

/** A key and its value together at most this (one changelog record, wit/operator.wit). */
export const MAX_ENTRY_BYTES = 998_995;
/**
 * Entries per snapshot chunk at most: a call's work stays far within the host's call
 * deadline (an interpreter encodes some 40 k small entries a second).
 */
const MAX_CHUNK_ENTRIES = 2048;

/**
 * The first byte of every entry: which SDK layout wrote it. A new layout takes a new
 * byte, so an entry is never read as another kind. The second byte is the state version.
 */
export const Layout = Object.freeze({ keyed: 0x01, tumbling: 0x02, session: 0x03 });
const LAYOUT_NAMES = { 1: 'a KeyedState value', 2: 'tumbling windows', 3: 'session windows' };

/** What every state type shares: change tracking and the entry header. */
export class Store {
  /**
   * @param {number} layout one of `Layout`
   * @param {number} version the state version, 1 to 255
   */
  constructor(layout, version) {
    if (!Number.isInteger(version) || version < 1 || version > 255) {
      throw new WeirError(`a state version must be an integer from 1 to 255, got ${version}`);
    }
    this.layout = layout;
    this.version = version;
    /** Keys (binary strings) changed since the last snapshot round. */
    this.changed = new Set();
    this.lastKey = undefined;
    this.lastId = '';
  }

  /**
   * The binary-string id of a record key (null: the empty key). The last key converted
   * is remembered, so a `get` and a `set` of one record's key convert it once: a key's
   * bytes must not change once it was used as a key (a record's never do).
   * @param {Uint8Array | null} key
   */
  id(key) {
    if (key === this.lastKey) return this.lastId;
    let id;
    if (key === null) id = '';
    // Not `instanceof`: the bindings make their arrays in another realm.
    else if (!ArrayBuffer.isView(key)) {
      throw new WeirError(`a state key must be a record's key (a Uint8Array, or null for none), got ${typeof key}`);
    } else id = key.length <= 8192 ? String.fromCharCode.apply(null, key) : binaryString(key);
    this.lastKey = key;
    this.lastId = id;
    return id;
  }

  /** The keys changed since the last call; tracking starts afresh. */
  takeChanges() {
    const keys = [...this.changed];
    this.changed.clear();
    return keys;
  }

  // Each store implements:
  // body(id): the key's whole state as bytes, or null when it holds none (a removal);
  // holds(id): whether the key has state; restoreBody(id, body, version): adds a
  // checkpointed entry; restoredAt(watermark): ends a restore.
}

/** JSON in UTF-8: the default encoding of values and accumulators. */
export function encodeJson(value, what) {
  const json = JSON.stringify(value);
  if (json === undefined) {
    throw new WeirError(`${what} is ${typeof value}, which JSON cannot hold; keep JSON values or give the state an encode option`);
  }
  return utf8(json);
}

/**
 * Keyed state: one value per record key, a Map whose keys are record keys
 * (`Uint8Array`, or `null` for a record without one). Every `set` and `delete` marks
 * the key changed, and a checkpoint writes only changed keys: after changing an object
 * value in place, `set` it again. Values are JSON unless `encode`/`decode` say otherwise.
 * @template V
 */
export class KeyedState extends Store {
  /**
   * @param {object} [options]
   * @param {number} [options.version] the state version, 1 to 255 (default 1): bump it when
   *   the shape of a value changes; entries of another version are refused (or `upgrade`d)
   * @param {(value: V) => Uint8Array} [options.encode]
   * @param {(bytes: Uint8Array) => V} [options.decode]
   * @param {(version: number, bytes: Uint8Array) => V} [options.upgrade] reads an entry of an older version
   */
  constructor({ version = 1, encode, decode, upgrade } = {}) {
    super(Layout.keyed, version);
    /** @type {Map<string, V>} */
    this.map = new Map();
    this.encode = encode ?? ((value) => encodeJson(value, 'a KeyedState value'));
    this.decode = decode ?? ((bytes) => JSON.parse(text(bytes)));
    this.upgrade = upgrade;
  }

  /** @param {Uint8Array | null} key @returns {V | undefined} */
  get(key) {
    return this.map.get(key === this.lastKey ? this.lastId : this.id(key));
  }

  /** @param {Uint8Array | null} key */
  has(key) {
    return this.map.has(this.id(key));
  }

  /** @param {Uint8Array | null} key @param {V} value */
  set(key, value) {
    if (value === undefined) throw new WeirError('KeyedState.set was given undefined; use delete(key) to remove a key');
    const id = key === this.lastKey ? this.lastId : this.id(key);
    this.map.set(id, value);
    this.changed.add(id);
    return this;
  }

  /** @param {Uint8Array | null} key @returns {boolean} whether the key had a value */
  delete(key) {
    const id = this.id(key);
    if (!this.map.delete(id)) return false;
    this.changed.add(id);
    return true;
  }

  get size() {
    return this.map.size;
  }

  /** @returns {IterableIterator<[Uint8Array, V]>} */
  *entries() {
    for (const [id, value] of this.map) yield [binaryBytes(id), value];
  }

  *keys() {
    for (const id of this.map.keys()) yield binaryBytes(id);
  }

  values() {
    return this.map.values();
  }

  [Symbol.iterator]() {
    return this.entries();
  }

  body(id) {
    if (!this.map.has(id)) return null;
    return this.encode(this.map.get(id));
  }

  holds(id) {
    return this.map.has(id);
  }

  restoreBody(id, body, version) {
    let value;
    try {
      value = version === this.version ? this.decode(body) : this.upgrade(version, body);
    } catch (e) {
      throw new WeirError(`cannot restore key ${describeKey(id)}: its value does not decode (${e?.message ?? e})`);
    }
    if (value === undefined) throw new WeirError(`cannot restore key ${describeKey(id)}: its value decoded to undefined`);
    this.map.set(id, value);
  }

  canRead(version) {
    return version === this.version || this.upgrade !== undefined;
  }

  restoredAt(_watermark) {}
}

/** Cuts each snapshot round into chunks: `next` is `snapshot(max-bytes)`. */
export class Snapshots {
  /** @param {Store | null} store @param {string} plugin for messages */
  constructor(store, plugin) {
    this.store = store;
    this.plugin = plugin;
    /** @type {string[] | null} the round's keys, or null between rounds */
    this.round = null;
    this.at = 0;
  }

  /**
   * The next chunk of the round; an empty chunk ends it. A chunk holds entries up to
   * `maxBytes` of keys and values (and at most MAX_CHUNK_ENTRIES), or one entry that is
   * bigger alone.
   * @param {number} maxBytes
   */
  next(maxBytes) {
    if (this.store === null) return { data: new Uint8Array(0), entries: [] };
    if (this.round === null) {
      this.round = this.store.takeChanges();
      this.at = 0;
    }
    const { store, round } = this;
    const packer = new Packer(Math.min(maxBytes, 1 << 16));
    const entries = [];
    while (this.at < round.length) {
      const id = round[this.at];
      const body = store.body(id);
      const size = id.length + (body === null ? 0 : body.length + 2);
      if (size > MAX_ENTRY_BYTES) {
        throw new WeirError(
          `the state of key ${describeKey(id)} is ${size} bytes with its key, over the ${MAX_ENTRY_BYTES} bytes one state entry may hold (one changelog record); keep less state per key`,
        );
      }
      if (entries.length > 0 && (packer.length + size > maxBytes || entries.length === MAX_CHUNK_ENTRIES)) break;
      entries.push(packEntry(packer, id, store, body));
      this.at++;
    }
    if (entries.length === 0) this.round = null;
    return { data: packer.bytes(), entries };
  }
}

/** Appends one entry: the key, then (unless a removal) layout, version and body. */
function packEntry(packer, id, store, body) {
  const keyOffset = packer.length;
  packer.reserve(id.length);
  for (let i = 0; i < id.length; i++) packer.data[keyOffset + i] = id.charCodeAt(i);
  packer.length += id.length;
  if (body === null) {
    return { keyOffset, keyLen: id.length, valueOffset: 0, valueLen: 0, removed: true };
  }
  const valueOffset = packer.push(Uint8Array.of(store.layout, store.version));
  packer.push(body);
  return { keyOffset, keyLen: id.length, valueOffset, valueLen: body.length + 2, removed: false };
}

/**
 * Adds a restore chunk's entries to `store`, refusing anything a checkpoint of this
 * plugin cannot hold.
 * @param {Store | null} store
 * @param {{ data: Uint8Array, entries: any[] }} chunk
 */
export function restoreChunk(store, chunk) {
  const { data, entries } = chunk;
  if (store === null) {
    if (entries.length === 0) return;
    throw new WeirError(
      `this operator keeps no state (none of its fields holds a KeyedState or windows), but was given ${entries.length} state entries (${data.length} bytes): restore a checkpoint of this plugin`,
    );
  }
  for (const e of entries) {
    if (e.keyOffset + e.keyLen > data.length || e.valueOffset + e.valueLen > data.length) {
      throw new WeirError(`a state entry lies outside its chunk's ${data.length} bytes of data`);
    }
    const id = binaryString(data.subarray(e.keyOffset, e.keyOffset + e.keyLen));
    if (e.removed) throw new WeirError(`cannot restore key ${describeKey(id)}: a restore never holds removals`);
    if (store.holds(id)) {
      throw new WeirError(`cannot restore key ${describeKey(id)}: it was restored already, or the instance is not fresh`);
    }
    const value = data.subarray(e.valueOffset, e.valueOffset + e.valueLen);
    store.restoreBody(id, value.subarray(2), checkHeader(store, id, value));
  }
}

/** The entry's state version, once its layout is the store's and its version readable. */
function checkHeader(store, id, value) {
  const key = describeKey(id);
  if (value.length < 2 || LAYOUT_NAMES[value[0]] === undefined) {
    const start = [...value.subarray(0, 8)].map((b) => b.toString(16).padStart(2, '0')).join(' ');
    throw new WeirError(
      `cannot restore key ${key}: its entry (starting ${start || 'empty'}) was not written by this SDK; restore a checkpoint of this plugin`,
    );
  }
  if (value[0] !== store.layout) {
    throw new WeirError(
      `cannot restore key ${key}: its entry holds ${LAYOUT_NAMES[value[0]]}, but this operator keeps ${LAYOUT_NAMES[store.layout]}; restore a checkpoint of this plugin`,
    );
  }
  const version = value[1];
  if (!store.canRead(version)) {
    throw new WeirError(
      `cannot restore key ${key}: it holds state version ${version}, but this plugin reads version ${store.version}; restore it with the plugin build that wrote it, or give the state an upgrade(version, bytes) option`,
    );
  }
  return version;
}
