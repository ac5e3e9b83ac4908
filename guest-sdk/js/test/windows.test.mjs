// Tumbling and session windows against a brute-force reference, with a snapshot after
// every step and a restore into a fresh instance every few: the same output as the
// reference, and only changed keys in each round.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { Operator, SessionWindows, TumblingWindows, exportOperator } from 'weir-operator';
import { apply, batch, records, restoreImage, round } from './support.mjs';

class Tumbling extends Operator {
  constructor(config) {
    super(config);
    this.counts = new TumblingWindows(config.int('window_ms', { min: 1 }), (a, b) => a + b);
  }
  process(list) {
    for (const r of list) this.counts.add(r.key, r.timestamp, 1);
  }
  onWatermark(watermark) {
    for (const [w, key, n] of this.counts.fire(watermark)) this.emit(key, `${w.start}-${w.end}:${n}`, w.end - 1);
  }
}

class Sessions extends Operator {
  constructor(config) {
    super(config);
    this.counts = new SessionWindows(config.int('gap_ms', { min: 1 }), (a, b) => a + b);
  }
  process(list) {
    for (const r of list) this.counts.add(r.key, r.timestamp, 1);
  }
  onWatermark(watermark) {
    for (const [w, key, n] of this.counts.fire(watermark)) this.emit(key, `${w.start}-${w.end}:${n}`, w.end - 1);
  }
}

/** Seeded steps: batches of (key, ts) with time mostly advancing, and watermarks. */
export function steps(seed) {
  const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 1);
  const out = [];
  let now = 1000;
  for (let i = 0; i < 60; i++) {
    const list = Array.from({ length: random() % 8 }, () => [`k${random() % 5}`, 'x', now - (random() % 400) + (random() % 50)]);
    out.push({ list });
    now += random() % 300;
    if (random() % 3 === 0) out.push({ watermark: now - 200 });
  }
  out.push({ watermark: now + 100000 });
  return out;
}

/** Drives the exports through `plan`, restoring into a fresh instance every `every` steps (0: never). */
function run(make, config, plan, every) {
  let op = make();
  op.init(config);
  const image = new Map();
  const out = [];
  let watermark = -(2n ** 63n);
  plan.forEach((step, i) => {
    if (step.list) out.push(...records(op.process(batch(step.list))));
    else {
      watermark = BigInt(step.watermark);
      out.push(...records(op.onWatermark(watermark)));
    }
    apply(image, round(op, 128));
    if (every > 0 && i % every === every - 1) {
      op = make();
      op.init(config);
      restoreImage(op, image, watermark);
    }
  });
  return out;
}

/** What tumbling windows must emit: every non-late record counted in its window. */
export function tumblingReference(plan, size) {
  const open = new Map();
  const out = [];
  let watermark = -Infinity;
  for (const step of plan) {
    if (step.list) {
      for (const [key, , ts] of step.list) {
        const start = ts - (((ts % size) + size) % size);
        if (start + size <= watermark) continue;
        const id = `${start}\u0000${key}`;
        open.set(id, (open.get(id) ?? 0) + 1);
      }
      continue;
    }
    watermark = Math.max(watermark, step.watermark);
    const due = [...open].map(([id, n]) => [Number(id.split('\u0000')[0]), id.split('\u0000')[1], n]).filter(([s]) => s + size <= watermark);
    due.sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
    for (const [start, key, n] of due) {
      open.delete(`${start}\u0000${key}`);
      out.push([key, `${start}-${start + size}:${n}`, start + size - 1]);
    }
  }
  return out;
}

test('tumbling windows: exact across restores, every few steps', () => {
  for (const seed of [1, 2, 3]) {
    const plan = steps(seed);
    const expected = tumblingReference(plan, 250);
    assert.ok(expected.length > 20);
    for (const every of [0, 1, 4]) {
      assert.deepEqual(run(() => exportOperator(Tumbling), [['window_ms', '250']], plan, every), expected, `seed ${seed}, every ${every}`);
    }
  }
});

test('session windows: the same output with and without restores', () => {
  for (const seed of [4, 5, 6]) {
    const plan = steps(seed);
    const straight = run(() => exportOperator(Sessions), [['gap_ms', '120']], plan, 0);
    assert.ok(straight.length > 10);
    for (const every of [1, 3]) {
      assert.deepEqual(run(() => exportOperator(Sessions), [['gap_ms', '120']], plan, every), straight, `seed ${seed}, every ${every}`);
    }
  }
});

test('session windows merge bridged sessions and drop late records', () => {
  const sessions = new SessionWindows(100, (a, b) => a + b);
  const key = Uint8Array.of(0x61);
  for (const ts of [0, 50, 400, 250, 320]) sessions.add(key, ts, 1);
  const fired = sessions.fire(1000).map(([w, , n]) => [w.start, w.end, n]);
  // 320 bridges [250, 350) and [400, 500).
  assert.deepEqual(fired, [[0, 150, 2], [250, 500, 3]]);
  assert.equal(sessions.add(key, 10, 1), false);
  assert.equal(sessions.lateRecords, 1);
});

test('a restore with another window size or gap is refused', () => {
  const op = exportOperator(Tumbling);
  op.init([['window_ms', '250']]);
  op.process(batch([['k', 'x', 10]]));
  const image = new Map();
  apply(image, round(op, 1024));
  const other = exportOperator(Tumbling);
  other.init([['window_ms', '500']]);
  assert.throws(() => restoreImage(other, image, 0), /windows are 250 ms long, but this operator's are 500 ms/);
  const sessions = exportOperator(Sessions);
  sessions.init([['gap_ms', '10']]);
  assert.throws(() => restoreImage(sessions, image, 0), /holds tumbling windows, but this operator keeps session windows/);
});
