// The weir:operator@0.2 exports for an Operator subclass: one instance per component
// instance, records and state in and out of their packed shapes, and every exception
// turned into the `err` string the host reports.

import { Config } from './config.js';
import { Output, readBatch } from './batch.js';
import { WeirError } from './errors.js';
import { OUTPUT } from './operator.js';
import { Snapshots, Store, restoreChunk } from './state.js';

/**
 * The world's exports for `OperatorClass`. A plugin's entry module ends with
 * `export const { init, process, onWatermark, snapshot, restore, restored } = exportOperator(MyOperator);`
 * @param {typeof import('./operator.js').Operator} OperatorClass
 */
export function exportOperator(OperatorClass) {
  const plugin = OperatorClass.plugin ?? OperatorClass.name;
  /** @type {import('./operator.js').Operator | null} */
  let op = null;
  /** @type {Store | null} */
  let store = null;
  /** @type {Snapshots | null} */
  let snapshots = null;

  function ready() {
    if (op === null) throw new WeirError('the operator is not initialised: the host must call init first');
    return op;
  }

  /** Runs a call; any exception leaves as a message naming the plugin. */
  function guard(call, body) {
    try {
      return body();
    } catch (e) {
      throw describe(plugin, call, e);
    }
  }

  return {
    init: (config) =>
      guard('init', () => {
        if (op !== null) {
          throw new WeirError('init was called twice on one instance; the host must instantiate the plugin again instead');
        }
        const settings = new Config(config);
        const instance = new OperatorClass(settings);
        settings.denyUnknown(plugin);
        const state = findState(instance);
        store = state;
        snapshots = new Snapshots(state, plugin);
        op = instance;
      }),
    process: (batch) =>
      guard('process', () => {
        const instance = ready();
        const out = (instance[OUTPUT] = new Output(batch.data.length + 32 * batch.entries.length));
        instance.process(readBatch(batch));
        instance[OUTPUT] = null;
        return out.finish();
      }),
    onWatermark: (watermark) =>
      guard('on-watermark', () => {
        const instance = ready();
        const out = (instance[OUTPUT] = new Output(4096));
        instance.onWatermark(Number(watermark));
        instance[OUTPUT] = null;
        return out.finish();
      }),
    snapshot: (maxBytes) =>
      guard('snapshot', () => {
        ready();
        return snapshots.next(maxBytes);
      }),
    restore: (chunk) =>
      guard('restore', () => {
        ready();
        restoreChunk(store, chunk);
      }),
    restored: (watermark) =>
      guard('restored', () => {
        const instance = ready();
        store?.restoredAt(Number(watermark));
        instance.restored(Number(watermark));
      }),
  };
}

/** The one state object among the operator's fields, or null for a stateless one. */
function findState(instance) {
  const found = Object.entries(instance).filter(([, value]) => value instanceof Store);
  if (found.length > 1) {
    const names = found.map(([name]) => name).join(', ');
    throw new WeirError(
      `the operator holds ${found.length} state objects (${names}); an operator keeps one, since a checkpoint holds one entry per key: put what a key needs in one value (an object or an array)`,
    );
  }
  return found.length === 0 ? null : found[0][1];
}

/** The `err` string: the plugin, then the author's message, or what went wrong where. */
function describe(plugin, call, error) {
  if (error instanceof WeirError) return `${plugin}: ${error.message}`;
  if (typeof error === 'string') return `${plugin}: ${error}`;
  if (error instanceof Error) {
    const at = (error.stack ?? '').split('\n').find((line) => line.trim() !== '');
    return `${plugin}: ${call} threw ${error.name}: ${error.message}${at ? ` (at ${at.trim()})` : ''}`;
  }
  return `${plugin}: ${call} threw ${String(error)}`;
}
