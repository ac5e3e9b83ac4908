// Builds the js-enrich component: componentize-js compiles enrich.js against the
// `operator` world of the repository's WIT package. Usage: node build.mjs OUT.wasm
import { writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { componentize } from '@bytecodealliance/componentize-js';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
const out = process.argv[2];
if (!out) {
  console.error('usage: node build.mjs OUT.wasm');
  process.exit(2);
}

const { component } = await componentize({
  sourcePath: here('./enrich.js'),
  witPath: here('../../wit'),
  worldName: 'operator',
  // Without this the component would import wasi:http, which no job grants.
  disableFeatures: ['http', 'fetch-event'],
});
await writeFile(out, component);
