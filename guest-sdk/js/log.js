// Logging through the host (the world's only import): each line is tagged with the
// plugin and subtask, cut and rate-limited by the host.

import { log as hostLog } from 'weir:operator/log@0.2.0';

/** One function per level, each taking one line of text. */
export const log = Object.freeze({
  /** @param {string} message */ trace: (message) => hostLog('trace', String(message)),
  /** @param {string} message */ debug: (message) => hostLog('debug', String(message)),
  /** @param {string} message */ info: (message) => hostLog('info', String(message)),
  /** @param {string} message */ warn: (message) => hostLog('warn', String(message)),
  /** @param {string} message */ error: (message) => hostLog('error', String(message)),
});
