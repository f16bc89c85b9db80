/**
 * Former names of renamed settings (issue 51 item 3: one word per setting from flag to kernel, TRL's
 * habit that the dataclass field is the flag: `--kl-coef` is `grpo.klCoef` in a config file, in
 * config.json and trainer_state.json, and `klCoef` at the addon). A renamed setting's row lists its
 * former config keys and flags (lib/config/schema.ts `Setting.formerly`); they are still accepted,
 * each with one deprecation line naming the new name, and a checkpoint written under the former
 * keys still resumes (lib/train/checkpoint.ts reads its saved config through {@link upgradeSavedConfig}).
 */
import { inputError } from '../errors.js';
import { getPath, setPath, type Setting } from './schema.js';
import { CORE_TRAIN_SETTINGS, trainSettings } from './settings.js';

/** Each former config key of `settings` → its setting (the row that now holds it). */
export function formerKeys(settings: readonly Setting[]): Map<string, Setting> {
  const out = new Map<string, Setting>();
  for (const s of settings) for (const k of s.formerly?.keys ?? []) out.set(k, s);
  return out;
}

/**
 * "did you mean `grpo.klCoef` (formerly grpo.betaKl, `--kl-coef`)?" for an unknown config key whose
 * name is the last part of a former key (`opsd: {betaKl: …}`, the former key in another section);
 * undefined when it is none.
 */
export function formerKeyHint(name: string, settings: readonly Setting[]): string | undefined {
  const m = [...formerKeys(settings)].filter(([old]) => old.split('.').pop() === name);
  if (!m.length) return undefined;
  return `did you mean ${m.map(([old, s]) => `\`${s.key}\` (formerly ${old}, \`--${s.flag}\`)`).join(' or ')}?`;
}

/** Removes the leaf at a dotted key; a section left empty by it is removed too. */
function deletePath(o: Record<string, unknown>, key: string): void {
  const parts = key.split('.');
  const parents: Record<string, unknown>[] = [o];
  for (const p of parts.slice(0, -1)) {
    const next = parents[parents.length - 1]![p];
    if (!next || typeof next !== 'object' || Array.isArray(next)) return;
    parents.push(next as Record<string, unknown>);
  }
  delete parents[parents.length - 1]![parts[parts.length - 1]!];
  for (let i = parents.length - 1; i > 0; i--) {
    if (Object.keys(parents[i]!).length) break;
    delete parents[i - 1]![parts[i - 1]!];
  }
}

/**
 * Moves every former key of `settings` found in `doc` (a nested config object: a YAML config file,
 * a run's config.json, a checkpoint's trainer state) to its setting's key, in place.
 * @param where names the input in messages (`config runs/a.yaml`, `checkpoint …/trainer_state.json`).
 * @returns one deprecation line per key moved (`config a.yaml: grpo.betaKl is a former name of
 *   grpo.klCoef (--kl-coef); read as grpo.klCoef`), empty when none was there.
 * @throws Error (`ERR_PG_INPUT`) naming `where` and both keys when a former key and its new key are
 *   both given (one setting given twice, as a TRL alias with our key is: lib/config/trl.ts).
 */
export function upgradeFormerKeys(doc: Record<string, unknown>, settings: readonly Setting[], where: string): string[] {
  const lines: string[] = [];
  for (const [old, s] of formerKeys(settings)) {
    const v = getPath(doc, old);
    if (v === undefined) continue;
    const now = getPath(doc, s.key);
    if (now !== undefined)
      throw inputError(
        `${where}: ${old} (a former name) and ${s.key} (--${s.flag}) are the same setting, given twice (${JSON.stringify(v)}, ${JSON.stringify(now)}); give ${s.key} only`,
      );
    deletePath(doc, old);
    setPath(doc, s.key, v);
    lines.push(`${where}: ${old} is a former name of ${s.key} (--${s.flag}); read as ${s.key} (rename it: the former name will be removed)`);
  }
  return lines;
}

/**
 * The command line with each former flag of `settings` written as its setting's flag (`--alpha 0.5`
 * → `--reward-alpha 0.5`; `--alpha=0.5`, `--no-…` too), with one deprecation line per flag
 * rewritten. A former flag that is also a current flag of `settings` is left alone; so is
 * everything after `--`.
 */
export function upgradeFormerFlags(args: readonly string[], settings: readonly Setting[]): { args: string[]; lines: string[] } {
  const current = new Set(settings.flatMap((s) => [s.flag, ...(s.alias ? [s.alias] : [])]));
  const former = new Map<string, Setting>();
  for (const s of settings) for (const f of s.formerly?.flags ?? []) if (!current.has(f)) former.set(f, s);
  const end = args.indexOf('--');
  const lines = new Set<string>();
  const out = args.map((a, i) => {
    const m = /^--(no-)?([^=]+)(=.*)?$/.exec(a);
    if (!m || (end >= 0 && i > end)) return a;
    const s = former.get(m[2]!);
    if (!s) return a;
    lines.add(`--${m[2]} is a former name of --${s.flag}; read as --${s.flag} (rename it: the former name will be removed)`);
    return `--${m[1] ?? ''}${s.flag}${m[3] ?? ''}`;
  });
  return { args: out, lines: [...lines] };
}

/**
 * A saved training config (a run's config.json, a checkpoint's trainer_state.json `config`)
 * written before a rename, read under today's keys, in place: every former key moves to its key,
 * and the `origins` record of config.json (dotted key → layer) is renamed with it. The former keys
 * are those of the registered settings when the registries have loaded, of the core settings
 * otherwise (lib/config/settings.ts CORE_TRAIN_SETTINGS).
 * @returns the former keys read (`grpo.betaKl → grpo.klCoef`), empty for a config of today.
 * @throws Error (`ERR_PG_INPUT`) naming `where` when a former key and its key are both there.
 */
export function upgradeSavedConfig(cfg: Record<string, unknown>, where: string): string[] {
  let settings: readonly Setting[];
  try {
    settings = trainSettings();
  } catch {
    settings = CORE_TRAIN_SETTINGS;
  }
  const moved: string[] = [];
  const origins = cfg.origins;
  for (const [old, s] of formerKeys(settings)) {
    if (origins && typeof origins === 'object' && !Array.isArray(origins) && old in origins) {
      const o = origins as Record<string, unknown>;
      if (!(s.key in o)) o[s.key] = o[old];
      delete o[old];
    }
    if (getPath(cfg, old) !== undefined) moved.push(`${old} → ${s.key}`);
  }
  upgradeFormerKeys(cfg, settings, where);
  return moved;
}
