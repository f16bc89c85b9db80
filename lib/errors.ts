/**
 * The error codes of papergym-native, shared by the addon (native/napi/util.cc sets them on the
 * errors it throws) and the JS layer, with constructors and a type guard.
 *
 * Every error this package raises on purpose carries a `code` (Node's convention, as
 * `ERR_INVALID_ARG_TYPE` or `ABORT_ERR`):
 *
 * | code              | class      | meaning                                                              |
 * |-------------------|------------|----------------------------------------------------------------------|
 * | `ERR_PG_ARG`      | TypeError  | a wrong argument (type, range, shape); the message names it          |
 * | `ERR_PG_INPUT`    | Error      | bad input data: a corrupt or mismatched file, a missing directory    |
 * | `ERR_PG_OOM`      | Error      | the device ran out of memory; the object stays usable                |
 * | `ABORT_ERR`       | Error (name `AbortError`) | cancelled through an AbortSignal                      |
 * | `ERR_PG_DISPOSED` | Error      | a model, policy or judge used after `dispose()` / `close()`          |
 * | `ERR_PG_INTERNAL` | Error      | anything else from libtorch (a bug or an unsupported case)           |
 *
 * Branch on `code` with {@link isPapergymError}, never on the message text.
 */

/** The codes, by name. */
export const ErrorCode = {
  /** A wrong argument (TypeError). */
  ARG: 'ERR_PG_ARG',
  /** Bad input data (a file, a tensor that does not match). */
  INPUT: 'ERR_PG_INPUT',
  /** Device out of memory. */
  OOM: 'ERR_PG_OOM',
  /** Cancelled by an AbortSignal (`name` is `AbortError`, as Node's own). */
  ABORT: 'ABORT_ERR',
  /** Used after dispose. */
  DISPOSED: 'ERR_PG_DISPOSED',
  /** Anything else raised by libtorch. */
  INTERNAL: 'ERR_PG_INTERNAL',
} as const;

/** One of the {@link ErrorCode} values. */
export type PapergymErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** An Error carrying one of the package's codes. */
export interface PapergymError extends Error {
  code: PapergymErrorCode;
}

const CODES: ReadonlySet<string> = new Set(Object.values(ErrorCode));

/**
 * True when `e` is an Error carrying a papergym code (`code` given: that code). Works for errors
 * thrown by the addon and by the JS layer alike.
 *
 * ```ts
 * try { await policy.generate(prompts); } catch (e) { if (isPapergymError(e, ErrorCode.OOM)) shrink(); else throw e; }
 * ```
 */
export function isPapergymError(e: unknown, code?: PapergymErrorCode): e is PapergymError {
  if (!(e instanceof Error)) return false;
  const c = (e as { code?: unknown }).code;
  return typeof c === 'string' && (code === undefined ? CODES.has(c) : c === code);
}

function withCode<E extends Error>(e: E, code: PapergymErrorCode): E & { code: PapergymErrorCode } {
  return Object.assign(e, { code });
}

/** A TypeError with code `ERR_PG_ARG`; `msg` names the argument. */
export function argError(msg: string): TypeError & PapergymError {
  return withCode(new TypeError(msg), ErrorCode.ARG);
}

/** An Error with code `ERR_PG_INPUT` (bad file or data; `msg` names it). */
export function inputError(msg: string): PapergymError {
  return withCode(new Error(msg), ErrorCode.INPUT);
}

/** An Error with code `ERR_PG_OOM`. */
export function oomError(msg: string): PapergymError {
  return withCode(new Error(msg), ErrorCode.OOM);
}

/** An Error named `AbortError` with code `ABORT_ERR` (as the addon and Node raise it). */
export function abortError(msg = 'aborted'): PapergymError {
  const e = withCode(new Error(msg), ErrorCode.ABORT);
  e.name = 'AbortError';
  return e;
}

/** An Error with code `ERR_PG_DISPOSED`: `<what> was disposed`. */
export function disposedError(what: string): PapergymError {
  return withCode(new Error(`${what} was disposed`), ErrorCode.DISPOSED);
}
