/** Argument checks shared by the public JS API: our own TypeError (code `ERR_PG_ARG`, lib/errors.ts) naming the argument. */
import { argError } from '../errors.js';

export { argError };

/** Short description of a value for error messages: `number 5`, `"cpu"`, `null`, `an object`. */
export function describeValue(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'undefined';
  if (typeof v === 'string') return JSON.stringify(v.length > 80 ? `${v.slice(0, 80)}…` : v);
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return 'an object';
  if (typeof v === 'function') return 'a function';
  return `${typeof v} ${String(v)}`;
}

/**
 * Checks an options argument: undefined, or a plain object.
 * @throws TypeError (ERR_PG_ARG) `<fn>: options must be an object, got …`
 */
export function checkOptions(fn: string, opts: unknown): void {
  if (opts !== undefined && (opts === null || typeof opts !== 'object' || Array.isArray(opts)))
    throw argError(`${fn}: options must be an object, got ${describeValue(opts)}`);
}
