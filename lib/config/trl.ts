/**
 * TRL / transformers / PEFT names of the settings (each setting's `trl` entries, lib/config/schema.ts):
 * a user coming from TRL's `GRPOConfig`, transformers' `TrainingArguments`, TRL's `ModelConfig` or
 * PEFT's `LoraConfig` types `--learning-rate` or a config key `learning_rate`; the name is either
 * accepted (an `alias`: exactly the same meaning, `--output-dir`, `num_generations:`) or refused with
 * "did you mean `--grpo-lr` (TRL: `learning_rate`)?". Source of the names: the TRL GRPOConfig and
 * transformers TrainingArguments reference, PEFT LoraConfig (docs/config.md's TRL column lists them).
 */
import type { Setting, TrlName } from './schema.js';
import { getPath, setPath, trlAliasFlags } from './schema.js';

/** `--learning_rate`, `learning-rate`, `learningRate` → `learning_rate` (TRL's spelling). */
export function trlSpelling(name: string): string {
  return name
    .replace(/^-+/, '')
    .replace(/=.*$/, '')
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/-/g, '_')
    .toLowerCase();
}

/** The settings that carry a TRL name, GRPO's own first (TRL's GRPOConfig is the reference trainer). */
function matches(name: string, settings: readonly Setting[]): { s: Setting; t: TrlName }[] {
  const n = trlSpelling(name);
  const out: { s: Setting; t: TrlName }[] = [];
  for (const s of settings) for (const t of s.trl ?? []) if (t.name === n) out.push({ s, t });
  return out.sort((a, b) => Number(b.s.key.startsWith('grpo.')) - Number(a.s.key.startsWith('grpo.')));
}

/**
 * The setting a TRL name is an alias of (exactly the same meaning), or undefined.
 * @param name a flag or config key in any spelling (`output-dir`, `output_dir`).
 */
export function trlAlias(name: string, settings: readonly Setting[]): Setting | undefined {
  const m = matches(name, settings).filter((x) => x.t.alias && !x.t.value);
  return m.length === 1 ? m[0]!.s : undefined;
}

/**
 * "did you mean `--grpo-lr` (TRL: `learning_rate`)?" for a flag or config key that is a TRL / PEFT
 * name of one or more settings; undefined when it is none.
 * @param as 'flag' names the flags; 'key' names the config keys with their flags.
 */
export function trlHint(name: string, settings: readonly Setting[], as: 'flag' | 'key' = 'flag'): string | undefined {
  const m = matches(name, settings);
  if (!m.length) return undefined;
  const one = ({ s, t }: { s: Setting; t: TrlName }) => {
    const flag = `--${s.flag}${t.value ? ` ${t.value}` : ''}`;
    return as === 'flag' ? `\`${flag}\`` : `\`${s.key}: ${t.value ?? '…'}\` (\`${flag}\`)`;
  };
  const list = m.map(one);
  const said = list.length === 1 ? list[0] : `${list.slice(0, -1).join(', ')} or ${list[list.length - 1]}`;
  return `did you mean ${said} (TRL: \`${trlSpelling(name)}\`)?`;
}

/**
 * Hints for every unknown flag of a command line that is a TRL name, one line each.
 * @param args the command line (`process.argv` without node and the script).
 */
export function trlFlagHints(args: readonly string[], settings: readonly Setting[]): string[] {
  return unknownFlagHints(args, settings, (name) => trlHint(name, settings));
}

/**
 * `--flag: <hint>` for each flag of `args` (before a bare `--`) that is not one of `settings`' (nor
 * an alias), where `hint` has one for its name (`--no-` dropped); one line each, in the order given.
 */
export function unknownFlagHints(
  args: readonly string[],
  settings: readonly Pick<Setting, 'flag' | 'alias' | 'trl'>[],
  hint: (name: string) => string | undefined,
): string[] {
  const out: string[] = [];
  const own = new Set(settings.flatMap((s) => [s.flag, ...(s.alias ? [s.alias] : []), ...trlAliasFlags(s as Setting)]));
  for (const a of args) {
    if (a === '--') break;
    if (!a.startsWith('--')) continue;
    const flag = a.slice(2).replace(/=.*$/, '');
    if (own.has(flag)) continue;
    const h = hint(flag.replace(/^no-/, ''));
    if (h) out.push(`--${flag}: ${h}`);
  }
  return [...new Set(out)];
}

/**
 * The command line with each TRL alias flag written as ours (`--output-dir x` → `--out x`,
 * `--num-generations=4` → `--group-size=4`, `--no-gradient-checkpointing` → `--no-recompute`), so
 * `--help` lists our flags only and docs/config.md's TRL column the aliases. Everything after `--`
 * is left alone.
 */
export function trlAliasArgs(args: readonly string[], settings: readonly Setting[]): string[] {
  const own = new Set(settings.flatMap((s) => [s.flag, ...(s.alias ? [s.alias] : [])]));
  const end = args.indexOf('--');
  return args.map((a, i) => {
    const m = /^--(no-)?([^=]+)(=.*)?$/.exec(a);
    if (!m || (end >= 0 && i > end) || own.has(m[2]!) || own.has(`${m[1] ?? ''}${m[2]}`)) return a;
    const s = trlAlias(m[2]!, settings);
    return s ? `--${m[1] ?? ''}${s.flag}${m[3] ?? ''}` : a;
  });
}

/**
 * A config file's top-level keys in TRL's flat YAML form: an alias (`output_dir: runs/a`,
 * `num_generations: 8`) is moved to its config key (`out`, `grpo.groupSize`); any other TRL name
 * (`learning_rate`) is an error with the hint. Changes `doc` in place.
 * @throws Error naming the file, the key and the setting meant, or both spellings of one setting.
 */
export function applyTrlConfigKeys(doc: Record<string, unknown>, known: Record<string, unknown>, settings: readonly Setting[], file: string): void {
  for (const k of Object.keys(doc)) {
    if (k in known) continue;
    const s = trlAlias(k, settings);
    if (s) {
      if (getPath(doc, s.key) !== undefined) throw new Error(`config ${file}: ${k} (TRL) and ${s.key} are the same setting; give one`);
      setPath(doc, s.key, doc[k]);
      delete doc[k];
      continue;
    }
    const h = trlHint(k, settings, 'key');
    if (h) throw new Error(`config ${file}: unknown key ${k}; ${h}`);
  }
}
