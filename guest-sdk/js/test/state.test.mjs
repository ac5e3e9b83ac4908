// The SDK's state protocol through its exports, as the host drives it: changed keys
// once per round in chunks within max-bytes, removals without values, refused
// restores, and a restore every few batches giving the same output as none.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { KeyedState, MAX_ENTRY_BYTES, Operator, exportOperator } from 'weir-operator';
import { apply, batch, chunk, hex, records, restoreImage, round } from './support.mjs';

/** A running count per key that forgets a key on the value "reset"; `pad` grows the state. */
class Count extends Operator {
  static plugin = 'count';

  constructor(config) {
    super(config);
    this.pad = config.int('pad', { fallback: 0, min: 0 });
    this.state = new KeyedState();
  }

  process(list) {
    for (const r of list) {
      if (r.valueText() === 'reset') {
        this.state.delete(r.key);
        continue;
      }
      const n = (this.state.get(r.key)?.n ?? 0) + 1;
      this.state.set(r.key, { n, pad: 'x'.repeat(this.pad) });
      this.emit(r.key, `${r.keyText()}=${n}`, r.timestamp);
    }
  }
}

const start = (config = []) => {
  const exports = exportOperator(Count);
  exports.init(config);
  return exports;
};

test('config: unknown and malformed keys are refused by name', () => {
  assert.throws(() => exportOperator(Count).init([['bogus', '1']]), /^count: operator config has unknown key `bogus`; count knows: `pad`$/);
  assert.throws(() => exportOperator(Count).init([['pad', '-1']]), /`pad` = "-1" is out of range/);
  assert.throws(() => exportOperator(Count).init([['pad', 'x']]), /`pad` = "x" is out of range/);
  const twice = start();
  assert.throws(() => twice.init([]), /init was called twice/);
  assert.throws(() => exportOperator(Count).process(batch([])), /not initialised/);
});

test('a round hands over each changed key once, within max-bytes, then only new changes', () => {
  const op = start([['pad', '10']]);
  const keys = Array.from({ length: 50 }, (_, i) => `k${i}`);
  op.process(batch(keys.map((k, i) => [k, 'v', i])));
  op.process(batch(keys.map((k, i) => [k, 'v', i])));
  op.process(batch([[null, 'v', 1], ['k3', 'reset', 2]]));
  const chunks = round(op, 100);
  assert.ok(chunks.length > 5, `${chunks.length} chunks`);
  const seen = new Set();
  for (const { data, entries } of chunks) {
    const counted = entries.reduce((n, e) => n + e.keyLen + e.valueLen, 0);
    assert.ok(counted <= 100 || entries.length === 1, `${counted} bytes in ${entries.length} entries`);
    assert.ok(data.length <= Math.max(100, counted));
    for (const e of entries) {
      const key = hex(data.subarray(e.keyOffset, e.keyOffset + e.keyLen));
      assert.ok(!seen.has(key), 'a key once per round');
      seen.add(key);
      if (e.removed) assert.deepEqual([e.valueOffset, e.valueLen], [0, 0], 'a removal carries no value');
      else assert.deepEqual([...data.subarray(e.valueOffset, e.valueOffset + 2)], [0x01, 0x01], 'layout and version');
    }
  }
  assert.equal(seen.size, 51, 'fifty keys and the empty key');
  assert.equal(round(op, 100).length, 0, 'nothing changed since');
  op.process(batch([['k7', 'v', 9]]));
  const next = round(op, 1 << 22);
  assert.equal(next.length, 1);
  assert.equal(next[0].entries.length, 1);
});

test('an entry bigger than max-bytes comes alone, and one over the changelog limit is refused', () => {
  const op = start([['pad', '5000']]);
  op.process(batch([['a', 'v', 1], ['b', 'v', 2]]));
  assert.deepEqual(round(op, 100).map((c) => c.entries.length), [1, 1]);
  const huge = start([['pad', String(MAX_ENTRY_BYTES)]]);
  huge.process(batch([['a', 'v', 1]]));
  assert.throws(() => huge.snapshot(4 << 20), /count: the state of key "a" is \d+ bytes with its key, over the 998995 bytes/);
});

test('restores refuse removals, repeats, foreign entries and other versions', () => {
  const op = start();
  op.process(batch([['k', 'v', 1]]));
  const [good] = round(op, 4096);
  const entry = good.data.slice(good.entries[0].valueOffset, good.entries[0].valueOffset + good.entries[0].valueLen);
  for (const [bad, message] of [
    [chunk([['k', null]]), /cannot restore key "k": a restore never holds removals/],
    [chunk([['k', entry], ['k', entry]]), /"k": it was restored already/],
    [chunk([['k', Uint8Array.of(0x01, 0x02, 0x31)]]), /state version 2, but this plugin reads version 1/],
    [chunk([['k', Uint8Array.of(0x02, 0x01, 0x7b, 0x7d)]]), /holds tumbling windows, but this operator keeps a KeyedState value/],
    [chunk([['k', Uint8Array.of(0x7b, 0x7d)]]), /was not written by this SDK/],
    [chunk([['k', Uint8Array.of(0x01, 0x01, 0x7b)]]), /"k": its value does not decode/],
    [{ data: new Uint8Array(2), entries: [{ keyOffset: 0, keyLen: 1, valueOffset: 1, valueLen: 9, removed: false }] }, /outside its chunk's 2 bytes/],
  ]) {
    assert.throws(() => start().restore(bad), (e) => typeof e === 'string' && e.startsWith('count: ') && message.test(e), String(message));
  }
  const restored = start();
  restored.restore(chunk([['k', entry]]));
  restored.restored(5n);
  assert.equal(round(restored, 4096).length, 0, 'restored entries are not changes');
  assert.deepEqual(records(restored.process(batch([['k', 'v', 6]]))), [['k', 'k=2', 6]]);
});

test('a stateless operator snapshots nothing and refuses state', () => {
  class Pass extends Operator {
    process(list) {
      for (const r of list) this.forward(r);
    }
  }
  const op = exportOperator(Pass);
  op.init([]);
  assert.equal(round(op, 10).length, 0);
  assert.throws(() => op.restore(chunk([['k', 'v']])), /^Pass: this operator keeps no state/);
  class Two extends Operator {
    constructor(config) {
      super(config);
      this.a = new KeyedState();
      this.b = new KeyedState();
    }
  }
  assert.throws(() => exportOperator(Two).init([]), /^Two: the operator holds 2 state objects \(a, b\); an operator keeps one/);
  const input = batch([['k', 'v', 3], [null, 'w', 4]]);
  input.headers.push({ entry: 1, name: 'h', value: Uint8Array.of(1) });
  const out = op.process(input);
  assert.deepEqual(records(out), [['k', 'v', 3], [null, 'w', 4]]);
  assert.deepEqual(out.headers, [{ entry: 1, name: 'h', value: Uint8Array.of(1) }]);
});

test('restoring into a fresh instance every few batches changes no output', () => {
  const input = [];
  let seed = 7;
  const next = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 1);
  for (let b = 0; b < 40; b++) {
    input.push(Array.from({ length: 1 + (next() % 20) }, (_, i) => [next() % 9 === 0 ? null : `u${next() % 12}`, next() % 11 === 0 ? 'reset' : 'v', b * 100 + i]));
  }
  const straight = start();
  const expected = input.flatMap((list) => records(straight.process(batch(list))));

  let op = start();
  const image = new Map();
  const actual = [];
  input.forEach((list, b) => {
    actual.push(...records(op.process(batch(list))));
    apply(image, round(op, 64));
    if (b % 3 === 2) {
      op = start();
      restoreImage(op, image, b * 100);
    }
  });
  assert.deepEqual(actual, expected);
});

test('an error of the operator names the plugin and the call', () => {
  class Broken extends Operator {
    process() {
      null.x;
    }
  }
  const op = exportOperator(Broken);
  op.init([]);
  assert.throws(() => op.process(batch([['k', 'v', 1]])), /^Broken: process threw TypeError: /);
  const total = new KeyedState();
  assert.throws(() => total.set('k', 1), /a state key must be a record's key/);
  assert.throws(() => new KeyedState({ version: 256 }), /state version must be an integer from 1 to 255/);
});

/** Emits a tombstone for the value "delete"; forwards every other record. */
class Deleter extends Operator {
  static plugin = 'deleter';

  process(list) {
    for (const r of list) {
      if (r.valueText() === 'delete') this.emit(r.key, null, r.timestamp);
      else this.forward(r);
    }
  }
}

test('tombstones: handed as a null value, emitted and forwarded at value offset NO_VALUE', () => {
  const exports = exportOperator(Deleter);
  exports.init([]);
  const input = batch([['a', '', 1], ['b', 'delete', 2], ['c', 'kept', 3]]);
  // The host marks a tombstone so for an operator with `tombstones = true`.
  input.entries.push({ hasKey: true, keyOffset: 0, keyLen: 1, valueOffset: 0xffffffff, valueLen: 0, timestamp: 4n });
  const out = exports.process(input);
  const shown = out.entries.map((e) => [e.valueOffset === 0xffffffff ? null : e.valueLen, Number(e.timestamp)]);
  assert.deepEqual(shown, [[0, 1], [null, 2], [4, 3], [null, 4]]);
  assert.deepEqual(out.entries.map((e) => e.valueLen), [0, 0, 4, 0]);
});
