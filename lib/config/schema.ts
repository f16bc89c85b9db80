/**
 * The settings schema: one entry per setting (name, type, default, range, meaning, source) that
 * drives the defaults, the validation, the CLI flags, every command's `--help` text and the
 * generated docs/config.md (scripts/gen-config-docs.mjs). The core entries live in lib/config/settings.ts
 * and lib/config/judge.ts; a registered judge backend or training stage brings its own
 * (lib/config/extensions.ts).
 */
import { readFileSync } from 'node:fs';
import type { Argv, Options } from 'yargs';
import { parse as parseYaml } from 'yaml';

export type SettingType = 'number' | 'integer' | 'boolean' | 'string' | 'path' | 'enum' | 'list';

/** One setting. `default: null` means "unset" (its meaning says what happens then). */
export interface Setting {
  /** Dotted key in the resolved config (`grpo.klCoef`) or the camelCase option name of a command. */
  key: string;
  /** CLI flag without the leading dashes (`kl-coef`). A training key's last part is the flag in camelCase, less its section's prefix (`--opsd-lr` is `opsd.lr`; lib/config/renames.ts). */
  flag: string;
  type: SettingType;
  default: unknown;
  /** Allowed values (enum; for lists, the allowed items). */
  choices?: readonly string[];
  /** Numeric range: inclusive bounds unless `exclusiveMin` / `exclusiveMax`. */
  min?: number;
  max?: number;
  exclusiveMin?: boolean;
  exclusiveMax?: boolean;
  /** Accepted values in words, for strings and paths (`cpu | cuda | cuda:N`, `an existing dir`). */
  values?: string;
  /** Regular expression a string must match (checked with `values` as the message). */
  pattern?: RegExp;
  /** List settings: the item type and length (`object`: mappings, given in the config file or on the command line as a YAML/JSON file holding the list). */
  items?: 'string' | 'number' | 'object';
  length?: number;
  /** List settings given by repeating the flag (`--prompt a --prompt b`); values are not split at commas. */
  repeatable?: boolean;
  /** One sentence: what it does, with units. */
  meaning: string;
  /** Where it comes from: paper section, or the TRL / peft / transformers / vLLM equivalent. */
  source: string;
  /** A short flag alias. */
  alias?: string;
  /** How messages name the setting when `key` is a command's option name (`judge.judges` for `judgeJudges`); default `key`. */
  label?: string;
  /**
   * The same setting's names in TRL `GRPOConfig` / transformers `TrainingArguments` / TRL
   * `ModelConfig` / PEFT `LoraConfig` (lib/config/trl.ts): an unknown flag or config key with one
   * of these names gets a "did you mean" naming this setting; one marked `alias` (exactly the same
   * meaning and units) is accepted as this setting (`--output-dir`, config key `output_dir`).
   */
  trl?: readonly TrlName[];
  /**
   * A run-time setting that `train --resume` may change (where the run goes on, how it is logged,
   * checkpointed and validated — never what it learns): lib/config/train.ts resumableKeys, which
   * docs/config.md's list is generated from.
   */
  resumable?: boolean;
  /** List settings: a value that stands for every choice (PEFT's `all-linear`). */
  all?: string;
  /**
   * Former names of a renamed setting (issue 51 item 3: one word per setting, the key is its flag):
   * still accepted, each with a deprecation line naming the new one (lib/config/renames.ts). `keys`:
   * former config keys, dotted as `key` (config files, saved runs and checkpoints); `flags`: former
   * flags without dashes.
   */
  formerly?: { keys?: readonly string[]; flags?: readonly string[] };
}

/** A TRL / transformers / PEFT name of a setting (see {@link Setting.trl}). */
export interface TrlName {
  /** The name as TRL spells it (`learning_rate`), snake_case. */
  name: string;
  /** Accepted as an alias: exactly the same meaning. */
  alias?: boolean;
  /** A TRL boolean that is this setting at one value (`bf16` is `--dtype bfloat16`). */
  value?: string;
}

/** Largest finite float32, (2 − 2⁻²³)·2¹²⁷ (IEEE 754 binary32). */
export const FLOAT32_MAX = 3.4028234663852886e38;
/** Smallest positive float32 (subnormal), 2⁻¹⁴⁹ (IEEE 754 binary32). */
export const FLOAT32_MIN_SUBNORMAL = 1.401298464324817e-45;

/**
 * Products of settings that set the memory of one step, bounded together (each flag's own range is
 * not enough: `--questions-per-step 65536 --group-size 4096` is 2.7e8 rollouts). A rule applies to
 * every command (or training config) that has all of its flags; {@link productProblems} checks it
 * before anything is allocated.
 */
export interface MemoryProduct {
  /** The flags multiplied (each a setting's `flag`). */
  flags: readonly string[];
  /** Largest allowed product. */
  max: number;
  /** What the product counts, in words. */
  what: string;
}

/** Rows (sequences) one step or call may hold at once. */
export const MAX_ROWS_PER_STEP = 65536;
/** Tokens one step or call may hold at once (2²⁷: 512 MiB of int32 ids alone; far above the paper's 64 × 8 × 1024). */
export const MAX_TOKENS_PER_STEP = 2 ** 27;

export const MEMORY_PRODUCTS: readonly MemoryProduct[] = [
  { flags: ['questions-per-step', 'group-size'], max: MAX_ROWS_PER_STEP, what: 'rollouts per GRPO step' },
  { flags: ['questions-per-rank', 'group-size'], max: MAX_ROWS_PER_STEP, what: 'rollouts per GRPO step per process' },
  { flags: ['questions-per-step', 'group-size', 'max-new-tokens'], max: MAX_TOKENS_PER_STEP, what: 'completion tokens per GRPO step' },
  { flags: ['questions-per-rank', 'group-size', 'max-new-tokens'], max: MAX_TOKENS_PER_STEP, what: 'completion tokens per GRPO step per process' },
  { flags: ['opsd-batch-size', 'max-new-tokens'], max: MAX_TOKENS_PER_STEP, what: 'completion tokens per OPSD step' },
  { flags: ['n', 'batch-size'], max: MAX_ROWS_PER_STEP, what: 'completions per generation call' },
  { flags: ['n', 'batch-size', 'max-new-tokens'], max: MAX_TOKENS_PER_STEP, what: 'completion tokens per generation call' },
  { flags: ['max-batch', 'max-model-len'], max: MAX_TOKENS_PER_STEP, what: 'KV-cache slots of the decode batch' },
];

/**
 * The {@link MEMORY_PRODUCTS} rules whose flags are all among `settings`, checked on the values
 * `value(setting)` gives (a rule with an unset value is skipped). Returns each problem in words,
 * naming the flags, their values and the limit.
 */
export function productProblems(settings: readonly Setting[], value: (s: Setting) => unknown): string[] {
  const out: string[] = [];
  for (const rule of MEMORY_PRODUCTS) {
    const rows = rule.flags.map((f) => settings.find((s) => s.flag === f));
    if (rows.some((r) => !r)) continue;
    const vals = rows.map((r) => value(r!));
    if (!vals.every((v) => typeof v === 'number' && Number.isFinite(v))) continue;
    const product = (vals as number[]).reduce((a, b) => a * b, 1);
    if (product > rule.max)
      out.push(
        `${rule.flags.map((f, i) => `--${f} ${vals[i]}`).join(' × ')} = ${product} ${rule.what}, more than ${rule.max} (bounded before anything is allocated; lower one of them)`,
      );
  }
  return out;
}

/** The range of a setting in words (docs and --help). */
export function rangeText(s: Setting): string {
  if (s.type === 'boolean') return 'true | false';
  if (s.type === 'enum') return (s.choices ?? []).join(' | ');
  if (s.type === 'list' && s.repeatable) return `repeatable: ${s.values ?? s.items ?? 'string'}`;
  if (s.type === 'list')
    return `comma list${s.length ? ` of ${s.length}` : ''} of ${s.choices ? s.choices.join(' | ') : (s.values ?? s.items ?? 'string')}${s.all ? `, or ${s.all} (every one)` : ''}`;
  if (s.type === 'number' || s.type === 'integer') {
    const lo = s.min === undefined ? '(-∞' : `${s.exclusiveMin ? '(' : '['}${s.min}`;
    const hi = s.max === undefined ? '∞)' : `${s.max}${s.exclusiveMax ? ')' : ']'}`;
    return `${s.type === 'integer' ? 'integer ' : ''}${lo}, ${hi}`;
  }
  return s.values ?? 'any string';
}

/** The default in words. */
export function defaultText(s: Setting): string {
  if (s.default === null || s.default === undefined) return 'unset';
  if (Array.isArray(s.default)) return s.default.join(',');
  return String(s.default);
}

/** `--help` line: meaning, range, default (left out when yargs prints its own `[default: …]`). */
export function helpText(s: Setting, withDefault = true): string {
  return `${s.meaning}${s.type === 'enum' ? '' : ` [${rangeText(s)}]`}${withDefault ? ` (default: ${defaultText(s)})` : ''}`;
}

/** Parses a comma list flag value into strings or numbers. */
export function parseList(s: Setting, v: unknown): unknown[] {
  if (s.items === 'object') return objectList(s, v);
  if (s.repeatable) return (Array.isArray(v) ? v : [v]).map(String);
  const parts = Array.isArray(v) ? v.flatMap((x) => String(x).split(',')) : String(v).split(',');
  const out = parts.map((p) => p.trim()).filter(Boolean);
  return s.items === 'number' ? out.map(Number) : (expandAll(s, out) as unknown[]);
}

/**
 * A list value with the setting's `all` word (PEFT's `all-linear`) alone, as a string or a
 * one-item list: every choice; any other value unchanged.
 */
export function expandAll(s: Setting, v: unknown): unknown {
  if (!s.all || !s.choices) return v;
  const only = Array.isArray(v) && v.length === 1 ? v[0] : v;
  return only === s.all ? [...s.choices] : v;
}

/**
 * A list of mappings: as given (a config file's YAML list), or read from the YAML/JSON file a flag
 * names (a list, or a mapping holding the list under the flag's last word, e.g. `judges:`).
 * @throws Error naming the flag and the file.
 */
function objectList(s: Setting, v: unknown): unknown[] {
  if (Array.isArray(v) && v.every((x) => x && typeof x === 'object')) return v;
  const path = Array.isArray(v) ? String(v[v.length - 1]) : String(v);
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new Error(`--${s.flag} ${path}: ${(e as Error).message}`);
  }
  const last = s.flag.split('-').pop()!;
  if (doc && typeof doc === 'object' && !Array.isArray(doc) && Array.isArray((doc as Record<string, unknown>)[last]))
    doc = (doc as Record<string, unknown>)[last];
  if (!Array.isArray(doc)) throw new Error(`--${s.flag} ${path}: must hold a list (or ${last}: a list)`);
  return doc;
}

/**
 * Checks one value against its setting; returns the problem in words (naming the key and flag)
 * or undefined when it is valid.
 */
export function checkValue(s: Setting, v: unknown): string | undefined {
  const name = `${s.label ?? s.key} (--${s.flag})`;
  const got = (x: unknown) => (typeof x === 'string' ? JSON.stringify(x) : Array.isArray(x) ? JSON.stringify(x) : String(x));
  if (v === null || v === undefined) return s.default === null ? undefined : `${name} must be set (${rangeText(s)})`;
  switch (s.type) {
    case 'boolean':
      return typeof v === 'boolean' ? undefined : `${name} must be true or false (got ${got(v)})`;
    case 'number':
    case 'integer': {
      if (typeof v !== 'number' || !Number.isFinite(v)) return `${name} must be a number (got ${got(v)})`;
      if (s.type === 'integer' && !Number.isInteger(v)) return `${name} must be an integer (got ${got(v)})`;
      // Numbers reach the addon as float32 (learning rates, alpha, coefficients): outside its range
      // they become Inf ("value cannot be converted to type float" at step 1), a nonzero value
      // below its smallest subnormal becomes 0.
      if (s.type === 'number' && (Math.abs(v) > FLOAT32_MAX || (v !== 0 && Math.fround(v) === 0)))
        return `${name} must be within float32's range, the type it becomes (|x| ≤ ${FLOAT32_MAX.toPrecision(8)}, and not below ${FLOAT32_MIN_SUBNORMAL.toPrecision(2)} unless 0; got ${got(v)})`;
      const lowOk = s.min === undefined || (s.exclusiveMin ? v > s.min : v >= s.min);
      const highOk = s.max === undefined || (s.exclusiveMax ? v < s.max : v <= s.max);
      return lowOk && highOk ? undefined : `${name} must be in ${rangeText(s)} (got ${got(v)})`;
    }
    case 'enum':
      return typeof v === 'string' && s.choices?.includes(v) ? undefined : `${name} must be one of ${rangeText(s)} (got ${got(v)})`;
    case 'list': {
      if (!Array.isArray(v)) return `${name} must be a list (got ${got(v)})`;
      if (s.length !== undefined && v.length !== s.length) return `${name} must have ${s.length} values (got ${v.length})`;
      if (!v.length) return s.items === 'object' ? `${name} must be a non-empty list` : `${name} must not be empty`;
      for (const x of v) {
        if (s.items === 'object') {
          if (!x || typeof x !== 'object' || Array.isArray(x)) return `${name}: each item must be a mapping (got ${got(x)})`;
          continue;
        }
        if (s.items === 'number' ? typeof x !== 'number' || !Number.isFinite(x) : typeof x !== 'string') return `${name}: bad item ${got(x)} (${rangeText(s)})`;
        if (s.choices && !s.choices.includes(x as string)) return `${name}: unknown item ${got(x)} (${s.choices.join(' | ')})`;
      }
      if (s.items === 'number' && (s.min !== undefined || s.max !== undefined)) {
        for (const x of v as number[]) {
          const e = checkValue({ ...s, type: 'number' }, x);
          if (e) return e;
        }
      }
      return undefined;
    }
    default:
      if (typeof v !== 'string' || (s.type !== 'path' && s.default !== null && !v.length)) return `${name} must be a string (${rangeText(s)}; got ${got(v)})`;
      if (s.pattern && !s.pattern.test(v)) return `${name} must be ${rangeText(s)} (got ${got(v)})`;
      return undefined;
  }
}

/** The flags (kebab-case) of a setting's TRL names accepted as aliases (`--output-dir`), without its own flag. */
export function trlAliasFlags(s: Setting): string[] {
  return (s.trl ?? [])
    .filter((t) => t.alias && !t.value)
    .map((t) => t.name.replace(/_/g, '-'))
    .filter((f) => f !== s.flag);
}

/** The yargs option of a setting. `withDefault`: let yargs fill the default (commands without layered config). */
export function yargsOption(s: Setting, withDefault: boolean): Options {
  const yargsShowsDefault = withDefault && s.default !== null && s.default !== undefined;
  const o: Options = { describe: helpText(s, !yargsShowsDefault) };
  if (s.alias) o.alias = s.alias;
  if (s.type === 'boolean') o.type = 'boolean';
  // Numbers parsed here, not by yargs' type 'number', which reads an empty value (`--x ''`, `--x=`)
  // as 0; empty, a bare flag and anything Number() rejects become NaN ("not a number" below).
  else if (s.type === 'number' || s.type === 'integer')
    o.coerce = (x: unknown) => (Array.isArray(x) || typeof x === 'number' ? x : typeof x === 'string' && x.trim() !== '' ? Number(x) : NaN);
  else if (s.type === 'enum') o.choices = s.choices as string[];
  else o.type = 'string';
  if (s.repeatable) o.array = true;
  if (withDefault && s.default !== null && s.default !== undefined) o.default = s.type === 'list' && Array.isArray(s.default) ? s.default.join(',') : s.default;
  return o;
}

/** Adds every setting as an option of a yargs command, with a check of each given value against its range. */
export function addSettings<T>(y: Argv<T>, settings: readonly Setting[], opts: { withDefaults: boolean }): Argv<T> {
  let out = y;
  for (const s of settings) out = out.option(s.flag, yargsOption(s, opts.withDefaults)) as Argv<T>;
  return out.check((argv) => {
    const errs: string[] = [];
    for (const s of settings) {
      const raw = (argv as Record<string, unknown>)[s.flag];
      if (raw === undefined) continue;
      if (Array.isArray(raw) && !s.repeatable) {
        errs.push(`--${s.flag}: given more than once (${raw.map((x) => JSON.stringify(x)).join(', ')})`);
        continue;
      }
      const v = s.type === 'list' ? parseList(s, raw) : raw;
      if (s.type === 'number' || s.type === 'integer') {
        if (typeof v === 'number' && Number.isNaN(v)) {
          errs.push(`--${s.flag}: not a number`);
          continue;
        }
      }
      const e = checkValue(s, v);
      if (e) errs.push(e);
    }
    // Products of flags: with yargs filling the defaults, over every value; otherwise (train: a
    // config file may set the others) over flags all given here, the resolved config is checked later.
    if (!errs.length) errs.push(...productProblems(settings, (s) => (argv as Record<string, unknown>)[s.flag] ?? (opts.withDefaults ? s.default : undefined)));
    if (errs.length) throw new Error(errs.join('; '));
    return true;
  }) as Argv<T>;
}

/** A setting's TRL / PEFT names in words (docs/config.md's TRL column): `output_dir` (alias), `learning_rate` (hint), `bf16` = bfloat16. */
export function trlText(s: Setting): string {
  return (s.trl ?? []).map((t) => `\`${t.name}\`${t.value ? ` = ${t.value}` : t.alias ? ' (alias)' : ' (hint)'}`).join(', ');
}

/** One row per setting for docs/config.md; `trlColumn` adds the TRL / PEFT names ({@link trlText}). */
export function markdownTable(settings: readonly Setting[], opts: { keyColumn: boolean; trlColumn?: boolean }): string {
  const cell = (x: string) => x.replace(/\|/g, '\\|').replace(/\n/g, ' ').replace(/</g, '&lt;');
  const names = ['flag', ...(opts.keyColumn ? ['config key'] : []), 'type', 'default', 'range', 'meaning', 'source', ...(opts.trlColumn ? ['TRL / PEFT'] : [])];
  const head = `| ${names.join(' | ')} |\n|${names.map(() => ' --- |').join('')}`;
  const rows = settings.map((s) => {
    const cols = [
      `\`--${s.flag}\``,
      ...(opts.keyColumn ? [`\`${s.key}\``] : []),
      s.type,
      `\`${defaultText(s)}\``,
      rangeText(s),
      s.meaning,
      s.source,
      ...(opts.trlColumn ? [trlText(s)] : []),
    ];
    return `| ${cols.map(cell).join(' | ')} |`;
  });
  return [head, ...rows].join('\n');
}

/** Sets `value` at a dotted key of a nested object. */
export function setPath(o: Record<string, unknown>, key: string, value: unknown): void {
  const parts = key.split('.');
  let cur = o;
  for (const p of parts.slice(0, -1)) cur = (cur[p] ??= {}) as Record<string, unknown>;
  cur[parts[parts.length - 1]!] = value;
}

/** Value at a dotted key (undefined when absent). */
export function getPath(o: unknown, key: string): unknown {
  let cur = o;
  for (const p of key.split('.')) {
    if (!cur || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[p];
  }
  return cur;
}

/** Dotted keys of the leaves of a nested object (arrays are leaves). */
export function leafKeys(o: unknown, prefix = ''): string[] {
  if (!o || typeof o !== 'object' || Array.isArray(o)) return prefix ? [prefix] : [];
  return Object.entries(o).flatMap(([k, v]) => leafKeys(v, prefix ? `${prefix}.${k}` : k));
}
