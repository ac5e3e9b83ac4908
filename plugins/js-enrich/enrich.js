// js-enrich: reshapes JSON record values. Each value that is a JSON object gets
// its fields renamed (`rename`), fields set (`set`) and the record's event time
// added as an ISO-8601 string (`event_time_field`); other values pass unchanged.
// Stateless: implements weir:operator@0.2 with empty snapshots and refuses to
// restore state entries. Errors are thrown as strings, which the bindings return
// as `err`.
import { log } from 'weir:operator/log@0.2.0';

const KNOWN_KEYS = ['rename', 'set', 'event_time_field'];

/** The configuration, set once by `init`. */
let settings = null;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function init(config) {
  if (settings !== null) {
    throw 'init was called twice on one instance; the host must instantiate the plugin again instead';
  }
  const raw = new Map(config);
  for (const key of raw.keys()) {
    if (!KNOWN_KEYS.includes(key)) {
      throw `operator config has unknown key \`${key}\`; this operator knows: ${KNOWN_KEYS.join(', ')}`;
    }
  }
  const parsed = {
    rename: parseRename(raw.get('rename')),
    set: parseSet(raw.get('set')),
    eventTimeField: raw.get('event_time_field') || null,
  };
  if (parsed.rename.size === 0 && parsed.set === null && parsed.eventTimeField === null) {
    throw 'operator config sets none of `rename`, `set`, `event_time_field`: js-enrich would change nothing';
  }
  settings = parsed;
  log('info', `js-enrich: renaming ${parsed.rename.size} field(s), setting ${parsed.set ? Object.keys(parsed.set).length : 0}`);
}

/** `rename` = "old:new,old2:new2" */
function parseRename(text) {
  const renames = new Map();
  if (text === undefined || text.trim() === '') return renames;
  for (const pair of text.split(',')) {
    const parts = pair.split(':').map((part) => part.trim());
    if (parts.length !== 2 || parts[0] === '' || parts[1] === '') {
      throw `operator config \`rename\` = ${JSON.stringify(text)} is not valid: expected old:new pairs separated by commas, e.g. "uid:user_id,ts:time"`;
    }
    renames.set(parts[0], parts[1]);
  }
  return renames;
}

/** `set` = a JSON object whose fields are written into every value. */
function parseSet(text) {
  if (text === undefined) return null;
  let fields;
  try {
    fields = JSON.parse(text);
  } catch (e) {
    throw `operator config \`set\` is not valid JSON (${e.message}): expected an object, e.g. {"region":"eu"}`;
  }
  if (fields === null || typeof fields !== 'object' || Array.isArray(fields)) {
    throw `operator config \`set\` = ${text} is not valid: expected a JSON object, e.g. {"region":"eu"}`;
  }
  return fields;
}

export function process(batch) {
  if (settings === null) throw 'the operator is not initialised: the host must call init first';
  const out = new BatchBuilder(batch.data.length + batch.entries.length * 32);
  const { data, entries, headers } = batch;
  let nextHeader = 0;
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i];
    const key = entry.hasKey ? data.subarray(entry.keyOffset, entry.keyOffset + entry.keyLen) : null;
    const value = data.subarray(entry.valueOffset, entry.valueOffset + entry.valueLen);
    const index = out.push(key, enrich(value, entry.timestamp), entry.timestamp);
    // Headers come ordered by record; carry this record's along.
    while (nextHeader < headers.length && headers[nextHeader].entry === i) {
      const header = headers[nextHeader++];
      out.headers.push({ entry: index, name: header.name, value: header.value });
    }
  }
  return out.finish();
}

/** The enriched value's bytes, or the value itself if it is not a JSON object. */
function enrich(value, timestamp) {
  let object;
  try {
    object = JSON.parse(decoder.decode(value));
  } catch {
    return value;
  }
  if (object === null || typeof object !== 'object' || Array.isArray(object)) return value;
  // Rebuilt rather than edited, so a renamed field keeps its position.
  const result = {};
  for (const [name, field] of Object.entries(object)) {
    result[settings.rename.get(name) ?? name] = field;
  }
  if (settings.set !== null) Object.assign(result, settings.set);
  if (settings.eventTimeField !== null) {
    const time = new Date(Number(timestamp));
    if (!Number.isNaN(time.getTime())) result[settings.eventTimeField] = time.toISOString();
  }
  return encoder.encode(JSON.stringify(result));
}

export function onWatermark(_watermark) {
  return { data: new Uint8Array(0), entries: [], headers: [] };
}

/** Nothing ever changes: every round is one empty chunk. */
export function snapshot(_maxBytes) {
  return { data: new Uint8Array(0), entries: [] };
}

export function restore(chunk) {
  if (chunk.entries.length !== 0) {
    throw `js-enrich is stateless and takes empty snapshots, but was given ${chunk.entries.length} state entries (${chunk.data.length} bytes): restore a snapshot of this plugin`;
  }
}

export function restored(_watermark) {}

/** Packs output records back to back into one buffer. */
class BatchBuilder {
  constructor(capacity) {
    this.data = new Uint8Array(Math.max(capacity, 64));
    this.length = 0;
    this.entries = [];
    this.headers = [];
  }

  append(bytes) {
    if (this.length + bytes.length > this.data.length) {
      const grown = new Uint8Array(Math.max(this.data.length * 2, this.length + bytes.length));
      grown.set(this.data.subarray(0, this.length));
      this.data = grown;
    }
    const offset = this.length;
    this.data.set(bytes, offset);
    this.length += bytes.length;
    return offset;
  }

  push(key, value, timestamp) {
    const keyOffset = key === null ? 0 : this.append(key);
    const valueOffset = this.append(value);
    this.entries.push({
      hasKey: key !== null,
      keyOffset,
      keyLen: key === null ? 0 : key.length,
      valueOffset,
      valueLen: value.length,
      timestamp,
    });
    return this.entries.length - 1;
  }

  finish() {
    return { data: this.data.subarray(0, this.length), entries: this.entries, headers: this.headers };
  }
}
