/**
 * The one loader and renderer of the versioned prompt files under `prompts/` (judge prompts
 * `judge-*.vN.md`, data pipeline prompts `data-*.vN.md`, eval protocol prompts `eval-*.vN.md`):
 * the file name carries the version, the leading `<!-- … -->` comment is documentation and is not
 * sent, and `sha256` of the remaining text goes into cache keys, so an edited prompt never reuses
 * stale answers.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** A loaded prompt file. */
export interface PromptFile {
  /** File stem, e.g. `judge-per-item.v1`. */
  name: string;
  /** The text without its header comment, trimmed. */
  template: string;
  /** sha256 of `template`, hex (64 characters). */
  sha256: string;
}

/** The packaged prompts/ directory (works from lib/ and from dist/lib/). */
export function promptsDir(): string {
  for (const rel of ['../../prompts/', '../../../prompts/']) {
    const u = new URL(rel, import.meta.url);
    if (existsSync(new URL('judge-per-item.v1.md', u))) return fileURLToPath(u);
  }
  return fileURLToPath(new URL('../../../prompts/', import.meta.url));
}

const cache = new Map<string, PromptFile>();

/** Loads `<dir>/<name>.md` (cached per path). @throws Error (ENOENT) naming the file when it is missing. */
export function loadPromptFile(name: string, dir = promptsDir()): PromptFile {
  const path = join(dir, `${name}.md`);
  const hit = cache.get(path);
  if (hit) return hit;
  const template = readFileSync(path, 'utf8')
    .replace(/^\s*<!--[\s\S]*?-->/, '')
    .trim();
  const p: PromptFile = { name, template, sha256: createHash('sha256').update(template).digest('hex') };
  cache.set(path, p);
  return p;
}

/**
 * Substitutes `{{key}}` placeholders in one pass (values are never re-scanned, so a plan that
 * contains `{{item}}` stays literal). @throws Error naming a placeholder with no value.
 */
export function renderTemplate(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{\{(\w+)\}\}/g, (_m, k: string) => {
    if (!(k in values)) throw new Error(`prompt placeholder {{${k}}} has no value`);
    return String(values[k]);
  });
}
