// Lets Node load the SDK outside a component: the world's log import resolves to a stub
// that keeps the lines in `globalThis.weirLog`.
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
