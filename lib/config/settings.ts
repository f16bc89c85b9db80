/**
 * Every setting of every command, one entry each (lib/config/schema.ts says what an entry holds).
 * {@link trainSettings} are the keys of the training config (layered defaults < preset < file <
 * flags; lib/config/train.ts builds the defaults from them); the other lists are the options of one
 * command each. docs/config.md is generated from this file (`node scripts/gen-config-docs.mjs`).
 * The core rows live in lib/config/settings/, one file per section they configure (a training
 * config section such as lora.ts or grpo.ts, or one command such as eval.ts); this file assembles
 * them in docs order and re-exports every list. A registered training stage or judge backend brings its own
 * (lib/config/extensions.ts), so the lists that hold those are functions, read after the registries
 * loaded: {@link trainSettings}, {@link judgeOptions}, {@link commandSettings}.
 */
import type { Setting } from './schema.js';
import { CORE_JUDGE_SETTINGS, judgeSettings } from './judge.js';
import { memoOn, ownRows, registeredStages } from './extensions.js';
import { RUN_SETTINGS } from './settings/run.js';
import { LORA_SETTINGS } from './settings/lora.js';
import { SAMPLING_SETTINGS } from './settings/sampling.js';
import { OPTIM_SETTINGS } from './settings/optim.js';
import { SFT_SETTINGS } from './settings/sft.js';
import { OPSD_SETTINGS } from './settings/opsd.js';
import { GRPO_SETTINGS } from './settings/grpo.js';
import { VALIDATION_SETTINGS } from './settings/validation.js';
import { CHECKPOINT_SETTINGS } from './settings/checkpoint.js';
import { LOG_SETTINGS } from './settings/log.js';
import { MEMORY_SETTINGS } from './settings/memory.js';
import { TRAIN_COMMAND_OPTIONS } from './settings/train-command.js';
import { GENERATE_OPTIONS } from './settings/generate.js';
import { EVAL_OPTIONS, evalJudgeOptions } from './settings/eval.js';
import { SERVE_OPTIONS } from './settings/serve.js';
import { REPORT_OPTIONS } from './settings/report.js';
import { JUDGE_AGREEMENT_OPTIONS, judgeOptions, PROBE_JUDGE_OPTIONS } from './settings/judge.js';
import { BUILD_DATA_OPTIONS } from './settings/build-data.js';
import { leakageOptions } from './settings/leakage.js';
import { compareOptions } from './settings/compare.js';
import { IMPORT_OPTIONS } from './settings/import.js';
import { SUBSET_OPTIONS } from './settings/subset.js';
import { DOCTOR_OPTIONS } from './settings/doctor.js';

export { judgeSettings };
export { TRAIN_COMMAND_OPTIONS } from './settings/train-command.js';
export { GENERATE_OPTIONS } from './settings/generate.js';
export { evalJudgeOptions, EVAL_OPTIONS } from './settings/eval.js';
export { SERVE_OPTIONS } from './settings/serve.js';
export { REPORT_OPTIONS } from './settings/report.js';
export { judgeOptions, PROBE_JUDGE_OPTIONS, JUDGE_AGREEMENT_OPTIONS } from './settings/judge.js';
export { BUILD_DATA_OPTIONS } from './settings/build-data.js';
export { LEAKAGE_OPTIONS, leakageOptions } from './settings/leakage.js';
export { compareOptions, COMPARE_OPTIONS } from './settings/compare.js';
export { IMPORT_OPTIONS } from './settings/import.js';
export { SUBSET_OPTIONS } from './settings/subset.js';
export { DOCTOR_OPTIONS } from './settings/doctor.js';

/**
 * Core keys of the training config before the judge section (lib/config/train.ts TrainConfig), in
 * docs order: run, LoRA, sampling, optimizer and the built-in stages' sections. The `stages` row's
 * choices are filled from the registry by {@link trainSettings}.
 */
const TRAIN_SETTINGS_HEAD: readonly Setting[] = [
  ...RUN_SETTINGS,
  ...LORA_SETTINGS,
  ...SAMPLING_SETTINGS,
  ...OPTIM_SETTINGS,
  ...SFT_SETTINGS,
  ...OPSD_SETTINGS,
  ...GRPO_SETTINGS,
];

/** The judge rows as training config keys (`judge.<key>`; train's own defaults: kind local, concurrency 8). */
const trainJudgeRow = (j: Setting): Setting => ({
  ...j,
  key: `judge.${j.key}`,
  ...(j.formerly?.keys ? { formerly: { ...j.formerly, keys: j.formerly.keys.map((k) => `judge.${k}`) } } : {}),
  ...(j.key === 'kind' ? { default: 'local' } : j.key === 'concurrency' ? { default: 8 } : {}),
});

/** Core keys of the training config after the judge section: validation, checkpoints, logging, memory. */
const TRAIN_SETTINGS_TAIL: readonly Setting[] = [...VALIDATION_SETTINGS, ...CHECKPOINT_SETTINGS, ...LOG_SETTINGS, ...MEMORY_SETTINGS];

/**
 * Keys of the training config (lib/config/train.ts TrainConfig), in docs order: the core rows to
 * the built-in stages' sections, each registered stage's own rows (`<name>.<key>`, registration
 * order), the judge section (lib/config/judge.ts {@link judgeSettings}, with the registered
 * backends' rows), then validation, checkpoints, logging and memory. The `stages` choices are the
 * registered stages. The same array on every read until a stage or backend is registered or removed.
 * @throws Error when lib/train/stages/ or lib/judge/backends/ has not loaded, or a row repeats a key or flag.
 */
export const trainSettings: () => readonly Setting[] = memoOn(
  () => [...registeredStages().flatMap((s) => [s, s.settings]), judgeSettings()],
  () => {
    const stages = registeredStages();
    const rows: Setting[] = TRAIN_SETTINGS_HEAD.map((s) => (s.key === 'stages' ? { ...s, choices: stages.map((st) => st.name) } : s));
    const tail = [...judgeSettings().map(trainJudgeRow), ...TRAIN_SETTINGS_TAIL];
    for (const st of stages) {
      const own = (st.settings ?? []).map((r) => ({ ...r, key: `${st.name}.${r.key}` }));
      rows.push(...ownRows(`training stage ${st.name}`, own, [...rows, ...tail]));
    }
    return [...rows, ...tail];
  },
);

/**
 * The core training config keys (no registered stage's or backend's own rows; no `stages` choices):
 * what DEFAULTS (lib/config/train.ts, public) is built from, readable before any registry has loaded.
 */
export const CORE_TRAIN_SETTINGS: readonly Setting[] = [...TRAIN_SETTINGS_HEAD, ...CORE_JUDGE_SETTINGS.map(trainJudgeRow), ...TRAIN_SETTINGS_TAIL];

/** Every command's settings, for docs/config.md and the completeness test. @throws Error when a registry has not loaded (see {@link trainSettings}). */
export const commandSettings: () => Record<string, readonly Setting[]> = memoOn(
  () => [trainSettings(), judgeOptions(), evalJudgeOptions(), leakageOptions(), compareOptions()],
  () => ({
    train: [...TRAIN_COMMAND_OPTIONS, ...trainSettings()],
    generate: GENERATE_OPTIONS,
    eval: [...EVAL_OPTIONS, ...evalJudgeOptions()],
    serve: SERVE_OPTIONS,
    report: REPORT_OPTIONS,
    'build-data': BUILD_DATA_OPTIONS,
    subset: SUBSET_OPTIONS,
    leakage: leakageOptions(),
    import: IMPORT_OPTIONS,
    compare: compareOptions(),
    'probe-judge': [...PROBE_JUDGE_OPTIONS, ...judgeOptions()],
    'judge-agreement': [...JUDGE_AGREEMENT_OPTIONS, ...judgeOptions()],
    doctor: DOCTOR_OPTIONS,
  }),
);
