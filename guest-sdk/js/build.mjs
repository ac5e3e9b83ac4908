#!/usr/bin/env node
// Builds a JavaScript operator into a weir:operator@0.2 component: rolldown bundles the
// entry module, its relative imports and this SDK (imported as 'weir-operator') into one
// ES module, which componentize-js compiles against the `operator` world of wit/.
//
//   node guest-sdk/js/build.mjs ENTRY.js OUT.wasm
//
// Environment: WEIR_WIT (default: the repository's wit/), WEIR_COMPONENTIZE_JS (the
// componentize-js package directory; default: the one scripts/setup-guest-toolchains
// installs in plugins/js-enrich/node_modules). Works offline once both are installed.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
const [entry, out] = process.argv.slice(2);
if (!entry || !out) {
  console.error('usage: node guest-sdk/js/build.mjs ENTRY.js OUT.wasm');
  process.exit(2);
}
const fail = (message) => {
  console.error(`build.mjs: error: ${message}`);
  process.exit(1);
};

const wit = process.env.WEIR_WIT ?? here('../../wit');
const componentizeDir = process.env.WEIR_COMPONENTIZE_JS ?? here('../../plugins/js-enrich/node_modules/@bytecodealliance/componentize-js');
const componentizeMain = join(componentizeDir, 'src/componentize.js');
if (!existsSync(componentizeMain)) fail(`componentize-js is not installed at ${componentizeDir}; run scripts/setup-guest-toolchains`);
if (!existsSync(here('node_modules/rolldown'))) fail(`rolldown is not installed in ${here('node_modules')}; run scripts/setup-guest-toolchains`);

const { rolldown } = await import('rolldown');
const { componentize } = await import(pathToFileURL(componentizeMain));

const started = performance.now();
const bundle = await rolldown({
  input: resolve(entry),
  // The world's imports stay imports; the SDK resolves by its package name from anywhere.
  external: [/^weir:/],
  resolve: { alias: { 'weir-operator': here('index.js') } },
  logLevel: 'warn',
});
const { output } = await bundle.generate({ format: 'esm' });
await bundle.close();
const bundled = performance.now();

const work = await mkdtemp(join(tmpdir(), 'weir-js-build-'));
try {
  const source = join(work, 'operator.js');
  await writeFile(source, output[0].code);
  const { component } = await componentize({
    sourcePath: source,
    witPath: wit,
    worldName: 'operator',
    // Without this the component would import wasi:http, which no job grants.
    disableFeatures: ['http', 'fetch-event'],
  });
  await writeFile(out, component);
} finally {
  await rm(work, { recursive: true, force: true });
}
const done = performance.now();
console.error(
  `build.mjs: ${entry}: bundled ${output[0].code.length} bytes in ${(bundled - started).toFixed(0)} ms, componentized in ${((done - bundled) / 1000).toFixed(1)} s`,
);
