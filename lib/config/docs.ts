/** Renders docs/config.md from the settings schema (scripts/gen-config-docs.mjs writes it; a test checks it is current). */
import { commandSettings, trainSettings } from './settings.js';
import { PRESETS, resumableKeys } from './train.js';
import { markdownTable } from './schema.js';

/** The whole docs/config.md text. */
export function renderConfigDocs(): string {
  const COMMAND_SETTINGS = commandSettings();
  const TRAIN_SETTINGS = trainSettings();
  const parts: string[] = [
    '# Settings',
    '',
    '<!-- Generated from lib/config/settings.ts by `node scripts/gen-config-docs.mjs`; do not edit by hand. -->',
    '',
    'Every setting of every command, from one schema (`lib/config/settings.ts`, plus the rows that the',
    'registered judge backends and training stages bring: docs/design.md §9): its flag, type, default,',
    'range, meaning and source (the paper, or the TRL / peft / transformers / vLLM equivalent). The same',
    "entries give the defaults, the validation and each command's `--help`.",
    '',
    "The train tables' **TRL / PEFT** column names each setting as TRL's `GRPOConfig`, transformers'",
    "`TrainingArguments`, TRL's `ModelConfig` or PEFT's `LoraConfig` spell it. An *alias* means exactly",
    'the same and is accepted as the flag (`--output-dir`, `--output_dir`) or as a top-level config key',
    '(`output_dir: runs/a`); a *hint* is close but not the same (TRL counts another unit, or one TRL name',
    'covers several stages), so it is refused with "did you mean `--grpo-lr` (TRL: `learning_rate`)?".',
    '`--lora-target-modules all-linear` is accepted as PEFT resolves it.',
    '',
    '## train',
    '',
    'Values are layered **default < `--preset` < `--config` file < flags**. A config file (YAML or JSON)',
    'uses the config keys below, nested (`grpo: {lr: 1e-5}`) — unknown keys are an error. A run writes',
    'every resolved value to `<run>/config.json`, with `origins` saying where each came from',
    '(`default`, `preset`, `file`, `flag`). With `--resume`, only these may change (the run-time settings',
    'and step counts, from `resumableKeys` in lib/config/train.ts, the rule `--resume` enforces):',
    resumableKeys()
      .map((k) => `\`--${TRAIN_SETTINGS.find((s) => s.key === k)?.flag ?? k}\``)
      .join(', ') + '.',
    '',
    markdownTable(
      COMMAND_SETTINGS.train!.filter((s) => !TRAIN_SETTINGS.includes(s)),
      { keyColumn: false, trlColumn: true },
    ),
    '',
    '### Training config keys',
    '',
    markdownTable(TRAIN_SETTINGS, { keyColumn: true, trlColumn: true }),
    '',
    '### Former names',
    '',
    "One word per setting: a training config key is its flag in camelCase, less the section's prefix",
    '(`--kl-coef` is `grpo.klCoef`, `--opsd-lr` is `opsd.lr`; `--judge` is `judge.kind`). These settings',
    'were renamed to their flags; the former names are still read (in a config file, a run’s config.json',
    'and a checkpoint, which still resume), each with a warning naming the new one, and will be removed:',
    '',
    '| former | now | flag |',
    '| --- | --- | --- |',
    ...Object.entries(COMMAND_SETTINGS).flatMap(([cmd, settings]) =>
      settings.flatMap((s) => [
        ...(cmd === 'train' ? (s.formerly?.keys ?? []).map((k) => `| \`${k}\` | \`${s.key}\` | \`--${s.flag}\` |`) : []),
        ...(s.formerly?.flags ?? []).map((f) => `| \`${cmd} --${f}\` | \`${cmd} --${s.flag}\` | \`--${s.flag}\` |`),
      ]),
    ),
    '',
    '### Presets',
    '',
    'Each preset overrides these keys (the rest keep their defaults):',
    '',
    '| preset | overrides |',
    '| --- | --- |',
    ...Object.entries(PRESETS).map(
      ([name, p]) =>
        `| \`${name}\` | ${flat(p)
          .map(([k, v]) => `\`${k}\`=${JSON.stringify(v)}`)
          .join(', ')} |`,
    ),
    '',
  ];
  for (const [cmd, settings] of Object.entries(COMMAND_SETTINGS)) {
    if (cmd === 'train') continue;
    parts.push(`## ${cmd}`, '');
    if (cmd === 'report')
      parts.push('`papergym-native report RUN_DIR [RUN_DIR…] [options]`: the run dirs (`train --out`) are overlaid in the order given.', '');
    parts.push(markdownTable(settings, { keyColumn: false }), '');
  }
  return parts.join('\n');
}

function flat(o: unknown, prefix = ''): [string, unknown][] {
  if (!o || typeof o !== 'object' || Array.isArray(o)) return [[prefix, o]];
  return Object.entries(o).flatMap(([k, v]) => flat(v, prefix ? `${prefix}.${k}` : k));
}
