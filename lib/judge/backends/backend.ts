/**
 * A judge kind: one descriptor per kind, one file each in this folder, one registry (./index.ts).
 * The descriptor is the behaviour (start-up check, open, shared weights) and the kind's own settings
 * (`settings` rows and `settingsProblems`, lib/config/extensions.ts JudgeKindSettings; the shared
 * judge keys are the core rows of lib/config/judge.ts). Everything outside lib/judge/ asks the
 * registry (`judgeBackend(kind)` and the helpers beside it) instead of testing a kind by name.
 */
import type { JudgeConfig, JudgeKind, JudgeSettings } from '../../config/judge.js';
import type { JudgeKindSettings } from '../../config/extensions.js';
import type { Qwen3Model } from '../../model/qwen3.js';
import type { Tokenizer } from '../../model/tokenizer.js';
import type { Device, Dtype } from '../../addon.js';
import type { Judge } from '../types.js';
import type { PromptTemplate } from '../verdict.js';

/** What `open` may use: the policy's loaded model when the backend shares its weights, else a model dir to load. */
export interface JudgeOpenContext {
  /**
   * The policy's loaded model and tokenizer (train, eval). A backend whose
   * {@link JudgeBackend.sharesPolicyWeights} is true runs on it with the adapter off (no second copy).
   */
  policy?: {
    model: Qwen3Model;
    tokenizer: Tokenizer;
    /** Where the policy was loaded from and how (lib/model/policy.ts Policy.source): keys a local judge's answer cache. */
    source?: { dir: string; device?: string; dtype?: string };
  };
  /** A checkpoint dir to load when no policy is given (probe-judge --model); the judge then owns that model. */
  modelDir?: string;
  device?: Device;
  dtype?: Dtype;
  /** Tokens per scoring call chosen by the memory plan (memory.judgeTokensPerCall); undefined = the backend's default. */
  maxTokensPerCall?: number;
  /**
   * A per-item prompt template (lib/util/prompts.ts form) replacing the backend's own, for a benchmark
   * protocol that words its criterion question itself; a backend that cannot take one ignores it.
   */
  perItemPrompt?: PromptTemplate;
  /** Opens a judge of any registered kind with the same context (a backend made of sub-judges, e.g. a jury, opens its members through it). */
  openJudge(cfg: JudgeConfig): Promise<Judge>;
}

/** Options of a start-up check. */
export interface JudgeCheckOptions {
  timeoutMs?: number;
  fetch?: typeof fetch;
}

/** One judge kind. `C` is its config (the union member of its kind). */
export interface JudgeBackend<C extends JudgeConfig = JudgeConfig> extends JudgeKindSettings {
  /** The `--judge` / `judge.kind` value. */
  readonly kind: C['kind'];
  /** One line for docs and errors. */
  readonly describe: string;
  /** The judge settings this kind reads beside the common ones (kind, variants, score, maxNullRate): core keys and the keys of its own `settings` rows. */
  readonly settingKeys: readonly (keyof JudgeSettings)[];
  /** Rules tying this kind's keys together (see JudgeKindSettings), typed for its config. */
  settingsProblems?(c: C, prefix: string): string[];
  /**
   * The judge runs on the policy's own weights (adapter off): it needs `ctx.policy` (or a model dir),
   * its scoring calls share the model with the rollout's decode (GRPO judges beside the decode only
   * with grpo.judgeOverlap on), and the memory plan counts its working memory (the `judge` phase).
   */
  sharesPolicyWeights(c: C): boolean;
  /** See JudgeKindSettings.answersFreeForm, typed for its config. */
  answersFreeForm?(c: C): boolean;
  /**
   * The settings with its answers cached in SQLite at `path` when the kind caches answers and no
   * cache is set (a kind without an answer cache returns `c` as it is).
   */
  withAnswerCache?(c: C, path: string): C;
  /** Name of the judge in messages (null-rate stops, logs): `model@url`, `local`. */
  label(c: C): string;
  /**
   * Start-up check before any compute (a real request for a remote judge); resolves when the judge can
   * answer. @throws Error naming the endpoint / setting to fix.
   */
  check?(c: C, opts?: JudgeCheckOptions): Promise<void>;
  /** Opens the judge (close it with `judge.close()`). @throws Error when a needed model, URL or setting is missing. */
  open(c: C, ctx: JudgeOpenContext): Promise<Judge>;
}

/** A descriptor of kind `K`. */
export type JudgeBackendOf<K extends JudgeKind> = JudgeBackend<Extract<JudgeConfig, { kind: K }>>;
