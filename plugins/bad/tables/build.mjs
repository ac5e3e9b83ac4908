// Builds bad-tables: tables.wat with 100 funcref tables of 2^20 elements and a
// function filling them added,
// assembled, given the `operator` world of the repository's WIT and made a
// component, with the wasm-tools that componentize-js brings along (installed in
// plugins/js-enrich by scripts/setup-guest-toolchains). Usage: node build.mjs OUT.wasm
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';

const TABLES = 100;
const ELEMENTS = 1 << 20;

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
const out = process.argv[2];
if (!out) {
  console.error('usage: node build.mjs OUT.wasm');
  process.exit(2);
}
const tools = await import(
  pathToFileURL(here('../../js-enrich/node_modules/@bytecodealliance/jco-transpile/dist/wasm-tools.js'))
);

const indices = Array.from({ length: TABLES }, (_, i) => i);
const tables = [
  ...indices.map(() => `  (table ${ELEMENTS} funcref)`),
  '  (func $fill',
  ...indices.map((i) => `    (table.fill ${i} (i32.const 0) (ref.func $ok) (i32.const ${ELEMENTS}))`),
  '  )',
].join('\n');
const wat = (await readFile(here('./tables.wat'), 'utf8')).replace(';; TABLES', tables);
const core = await tools.parse(wat);
const witSource = await readFile(here('../../../wit/operator.wit'), 'utf8');
const embedded = await tools.componentEmbed({ binary: core, witSource, world: 'operator' });
await writeFile(out, await tools.componentNew(embedded, null));
