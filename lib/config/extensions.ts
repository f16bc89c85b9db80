/**
 * The settings that registered descriptors bring (docs/design.md §9 "Extending"): a judge backend
 * (lib/judge/backends/) or a training stage (lib/train/stages/) may carry its own settings rows (the
 * {@link Setting} entries of lib/config/schema.ts) and the rules that tie its keys together. Their
 * registries sit above lib/config/ (lib/ rooms: config is below judge and train), so they hand their
 * descriptors over here when their index module loads (`provideJudgeBackends`, `provideStages`); the
 * one schema behind the CLI flags, the YAML keys, docs/config.md and the validation
 * (lib/config/settings.ts `trainSettings()` and the command lists, lib/config/judge.ts
 * `judgeSettings()`) is assembled on each read from the core rows plus the registered ones, and the
 * `--judge` / `stages` choices are the registered names.
 *
 * Reading the schema before a registry has loaded is an error naming the module to import: the CLI
 * (bin/commands/index.ts) and the library entry (lib/index.ts) load both registries; code reading
 * lib/config/ directly imports `lib/judge/backends/index.js` and `lib/train/stages/index.js` first.
 */
import type { Setting } from './schema.js';
import type { JudgeConfig } from './judge.js';
import type { TrainConfig } from './train.js';

/** The settings half of a judge backend (lib/judge/backends/backend.ts JudgeBackend extends it). */
export interface JudgeKindSettings {
  /** The `--judge` / `judge.kind` value. */
  readonly kind: string;
  /**
   * Settings only this kind reads, keys relative to `judge.` (`train`: YAML `judge.<key>`, the row's
   * flag; `eval` / `probe-judge` / `compare` / `judge-agreement`: the same flag). Listed after the
   * core judge rows, in registration order. A key or flag another row has is refused.
   */
  readonly settings?: readonly Setting[];
  /**
   * Problems of the rules that tie this kind's keys together (each key's own range is checked by its
   * row), each naming the key as `${prefix}<key>`; empty when valid. Called for configs of this kind.
   */
  settingsProblems?(c: JudgeConfig, prefix: string): string[];
  /**
   * The kind is made of member judges (`judge.judges`, e.g. a jury): each member is a judge of any
   * registered kind without members, checked as a judge of its own kind. Absent: false (the kind
   * reads no `judges` list).
   */
  readonly hasMembers?: boolean;
  /**
   * The judge is a chat endpoint that can answer a free-form question (a protocol's graded levels,
   * `compare`'s N-way choice), not only yes/no verdicts on rubric items. Absent: false.
   */
  answersFreeForm?(c: JudgeConfig): boolean;
  /** Its own keys (relative to `judge.`) that `train --resume` may change (where it is judged, e.g. http's `url`). */
  readonly resumableKeys?: readonly string[];
}

/** The settings half of a training stage (lib/train/stages/stage.ts TrainingStage extends it). */
export interface StageSettings {
  /** The stage's name in `stages` (`--stages`) and its config section (`cfg[name]`, YAML `<name>:`). */
  readonly name: string;
  /**
   * The rows of its section, keys relative to it (`steps` is the config key `<name>.steps`); a stage
   * that reads `steps` / `lr` from its section lists them here. Listed after the built-in stages'
   * sections, in registration order. A key or flag another row has is refused.
   */
  readonly settings?: readonly Setting[];
  /** Problems of the rules that tie its keys together (each naming key and flag); empty when valid. Checked for every registered stage. */
  settingsProblems?(c: TrainConfig): string[];
  /**
   * Its batch for data parallelism (lib/train/dist.ts): the config keys of the global batch and of
   * the batch per process (full dotted keys, e.g. `grpo.questionsPerStep` / `grpo.questionsPerRank`),
   * and the unit the batch counts ("questions"). Absent: the stage has no batch to scale.
   */
  readonly batch?: { readonly global: string; readonly perRank: string; readonly unit: string };
  /** Config keys of the stage a resumed run may change (lib/config/train.ts resumableKeys). */
  readonly resumableKeys?: readonly string[];
}

/** A registry as lib/config/ sees it: the module that fills it, and its descriptors once it has loaded. */
interface Source<T> {
  readonly what: string;
  readonly module: string;
  list?: () => readonly T[];
}

const judgeBackends: Source<JudgeKindSettings> = { what: 'judge backends', module: 'lib/judge/backends/index.js' };
const stages: Source<StageSettings> = { what: 'training stages', module: 'lib/train/stages/index.js' };

/** Called once by lib/judge/backends/index.ts: `list` returns the registered backends (read on each schema read). */
export function provideJudgeBackends(list: () => readonly JudgeKindSettings[]): void {
  judgeBackends.list = list;
}

/** Called once by lib/train/stages/index.ts: `list` returns the registered stages (read on each schema read). */
export function provideStages(list: () => readonly StageSettings[]): void {
  stages.list = list;
}

function read<T>(s: Source<T>, reading: string): readonly T[] {
  if (!s.list) {
    throw new Error(
      `${reading} read before the ${s.what} registered their settings: import ${s.module} first (the CLI and lib/index.js do; ` +
        'code that reads lib/config/ directly must load the registries, docs/design.md §9)',
    );
  }
  return s.list();
}

/**
 * The registries whose names are CLI choices and nothing more (no settings rows of their own): the
 * scoring protocols (`--protocol`), the dataset formats (`import --format`) and the experiment
 * trackers (`--report-to`). Each index module hands its names over here when it loads
 * ({@link provideNames}); a settings row reads them on each read through {@link registeredNames}.
 */
const named = {
  protocols: { what: 'scoring protocols', module: 'lib/eval/protocols/index.js' } as Source<string>,
  formats: { what: 'dataset formats', module: 'lib/eval/formats/index.js' } as Source<string>,
  trackers: { what: 'experiment trackers', module: 'lib/train/trackers/index.js' } as Source<string>,
};
export type NamedRegistry = keyof typeof named;

/** Called once by the registry's index module: `list` returns its registered names (read on each read). */
export function provideNames(registry: NamedRegistry, list: () => readonly string[]): void {
  named[registry].list = list;
}

/** The registered names of `registry`, in registration order. @throws Error naming the module to import when it has not loaded. */
export function registeredNames(registry: NamedRegistry, reading = `the ${named[registry].what}`): readonly string[] {
  return read(named[registry], reading);
}

/** The registered judge backends' settings halves, in registration order. @throws Error when lib/judge/backends/ has not loaded. */
export function registeredJudgeBackends(reading = 'the judge settings'): readonly JudgeKindSettings[] {
  return read(judgeBackends, reading);
}

/** The registered training stages' settings halves, in registration order. @throws Error when lib/train/stages/ has not loaded. */
export function registeredStages(reading = 'the training settings'): readonly StageSettings[] {
  return read(stages, reading);
}

/**
 * `build()` re-run only when `deps()` changed (compared item by item, by identity): the schema is
 * rebuilt when a descriptor is registered or removed, and is otherwise the same array on every
 * read (so rows can be compared by identity, as docs/config.md's split of `train` does).
 */
export function memoOn<T>(deps: () => readonly unknown[], build: () => T): () => T {
  let last: readonly unknown[] | undefined;
  let value: T;
  return () => {
    const d = deps();
    if (!last || d.length !== last.length || d.some((x, i) => x !== last![i])) {
      value = build();
      last = d;
    }
    return value;
  };
}

/**
 * `rows` (keys as in the assembled list) checked against the rows already `taken`: a key or flag
 * that another row has is refused. @throws Error naming the descriptor, the key or flag and the row that has it.
 */
export function ownRows(owner: string, rows: readonly Setting[], taken: readonly Setting[]): Setting[] {
  const keys = new Map(taken.map((s) => [s.key, s]));
  const flags = new Map(taken.map((s) => [s.flag, s]));
  for (const r of rows) {
    if (keys.has(r.key)) throw new Error(`${owner}: setting ${r.key} is already a setting (--${keys.get(r.key)!.flag})`);
    if (flags.has(r.flag)) throw new Error(`${owner}: flag --${r.flag} of ${r.key} is already the flag of ${flags.get(r.flag)!.key}`);
    keys.set(r.key, r);
    flags.set(r.flag, r);
  }
  return [...rows];
}
