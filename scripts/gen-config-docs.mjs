#!/usr/bin/env node
// Writes docs/config.md from the settings schema (lib/config/settings.ts, built to dist/).
// `--check`: exit 1 when docs/config.md is not what the schema gives (CI / tests).
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// The registered training stages and judge backends bring settings rows of their own: load their registries first.
await import(join(root, 'dist', 'lib', 'train', 'stages', 'index.js'));
await import(join(root, 'dist', 'lib', 'judge', 'backends', 'index.js'));
const { renderConfigDocs } = await import(join(root, 'dist', 'lib', 'config', 'docs.js'));
const path = join(root, 'docs', 'config.md');
const text = renderConfigDocs();
if (process.argv.includes('--check')) {
  const cur = existsSync(path) ? readFileSync(path, 'utf8') : '';
  if (cur !== text) {
    console.error('docs/config.md is stale: run `npm run build:ts && node scripts/gen-config-docs.mjs`');
    process.exit(1);
  }
  console.log('docs/config.md is current');
} else {
  writeFileSync(path, text);
  console.log(`wrote ${path}`);
}
