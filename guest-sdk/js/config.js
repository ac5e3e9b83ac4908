// The job's `[operators.config]` as an operator reads it. Every key an operator asks
// for is remembered, so the glue can refuse the keys nobody asked for by name.

import { WeirError } from './errors.js';

export class Config {
  /** @param {Iterable<[string, string]>} pairs as `init` receives them */
  constructor(pairs) {
    /** @type {Map<string, string>} */
    this.values = new Map(pairs);
    /** @type {Set<string>} */
    this.asked = new Set();
  }

  /**
   * The value of `name`, or `fallback` when it is not set.
   * @param {string} name
   * @param {string} [fallback]
   * @returns {string | undefined}
   */
  get(name, fallback) {
    this.asked.add(name);
    const value = this.values.get(name);
    return value === undefined ? fallback : value;
  }

  /**
   * The value of `name`; refused when it is missing or empty.
   * @param {string} name
   * @param {string} [what] what the key is for, for the error message
   * @returns {string}
   */
  require(name, what) {
    const value = this.get(name);
    if (value === undefined || value === '') {
      throw new WeirError(`operator config \`${name}\` is missing or empty${what ? `: ${what}` : ''}`);
    }
    return value;
  }

  /**
   * The integer value of `name`, within [min, max]; `fallback` when unset (required
   * when there is no fallback).
   * @param {string} name
   * @param {{ fallback?: number, min?: number, max?: number }} [options]
   * @returns {number}
   */
  int(name, { fallback, min = Number.MIN_SAFE_INTEGER, max = Number.MAX_SAFE_INTEGER } = {}) {
    const value = this.get(name);
    if (value === undefined || value === '') {
      if (fallback !== undefined) return fallback;
      throw new WeirError(`operator config \`${name}\` is missing: expected an integer from ${min} to ${max}`);
    }
    const parsed = /^[+-]?\d+$/.test(value.trim()) ? Number(value) : NaN;
    if (!Number.isSafeInteger(parsed) || parsed < min || parsed > max) {
      throw new WeirError(`operator config \`${name}\` = ${JSON.stringify(value)} is out of range: expected an integer from ${min} to ${max}`);
    }
    return parsed;
  }

  /** Every key set, asked for or not. */
  keys() {
    return this.values.keys();
  }

  /**
   * Refuses keys nobody asked for; the glue calls it after the operator's constructor.
   * @param {string} plugin
   */
  denyUnknown(plugin) {
    const unknown = [...this.values.keys()].filter((name) => !this.asked.has(name));
    if (unknown.length === 0) return;
    const known = [...this.asked].map((name) => `\`${name}\``).join(', ') || 'no keys';
    throw new WeirError(
      `operator config has unknown key${unknown.length > 1 ? 's' : ''} ${unknown.map((n) => `\`${n}\``).join(', ')}; ${plugin} knows: ${known}`,
    );
  }
}
