/**
 * `Symbol.dispose` / `Symbol.asyncDispose` (explicit resource management: TypeScript `using` /
 * `await using`). Node defines both from 20.4 (as `Symbol.for('nodejs.dispose')` and
 * `Symbol.for('nodejs.asyncDispose')`); on Node 20.0–20.3 importing this module defines them the
 * same way, so this package's models, policies and judges are disposable there too and interoperate
 * with Node's own disposables. Import it before a class that defines `[Symbol.dispose]`.
 */
const S: { readonly dispose?: symbol; readonly asyncDispose?: symbol } = Symbol;
if (typeof S.dispose !== 'symbol') Object.defineProperty(Symbol, 'dispose', { value: Symbol.for('nodejs.dispose') });
if (typeof S.asyncDispose !== 'symbol') Object.defineProperty(Symbol, 'asyncDispose', { value: Symbol.for('nodejs.asyncDispose') });

export {};
