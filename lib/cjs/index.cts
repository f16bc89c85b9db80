/**
 * CommonJS entry of papergym-native (`require('papergym-native')`, package.json `exports` →
 * `require`). The package itself is ES modules (its dependencies p-limit and unified-latex are
 * ESM-only), so this entry does not duplicate it:
 *
 * - Where Node can `require()` ES modules (Node >= 20.19 / 22.12 unless started with
 *   `--no-experimental-require-module`), every export of the ESM entry is here too, synchronously,
 *   and they are the same objects as `import('papergym-native')` gives (one module instance).
 * - Everywhere, `load()` returns a Promise of the full ESM API through dynamic `import()`, which
 *   CommonJS code can always use: `const pg = await require('papergym-native').load();`.
 *   Without require(esm), `load` is the only export.
 */
import type * as Api from '../index.js' with { 'resolution-mode': 'import' };

type PapergymNative = typeof Api;

/** The full ESM API, through dynamic import() (works in every CommonJS context). */
function load(): Promise<PapergymNative> {
  return import('../index.js');
}

function syncApi(): PapergymNative | undefined {
  if (!(process.features as { require_module?: boolean }).require_module) return undefined;
  try {
    return require('../index.js') as PapergymNative;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ERR_REQUIRE_ESM' || (e as NodeJS.ErrnoException).code === 'ERR_REQUIRE_ASYNC_MODULE') return undefined;
    throw e;
  }
}

const api = syncApi();

export = Object.assign({}, api, { load }) as PapergymNative & { load: typeof load };
