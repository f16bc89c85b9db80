/**
 * Judge settings shared by `train` (YAML `judge:` section and flags), `eval` and the library (issue
 * 12 item 7: the same judge options everywhere). Kept free of heavy imports so that the training
 * config can use it; the CLI flags and the judge builders are in ./factory.ts.
 */

/** Judge settings (YAML `judge:` keys of `train`; `--judge-*` flags of `train` and `eval`). */
export interface JudgeConfig {
  /** 'http': an OpenAI-compatible endpoint; 'local': the policy's own base model (adapter off) reading P(yes). */
  kind: 'http' | 'local';
  url: string | null;
  model: string | null;
  /** http: one request per item (yes/no) or per plan (JSON). */
  mode: 'per-item' | 'per-plan';
  /** http: requests in flight. */
  concurrency: number;
  /** http: SQLite file caching answers by request hash. */
  cache: string | null;
  /** http: per-attempt timeout, ms. */
  timeoutMs: number;
  /** http: retries after the first attempt (only connection errors, timeouts, 408/409/429/5xx). */
  maxRetries: number;
  /** http: max answer tokens (null: 16 per-item, 64 + 24/item per-plan). */
  maxTokens: number | null;
  /** http: send `chat_template_kwargs.enable_thinking=false` (vLLM, SGLang, serve). */
  noThink: boolean;
  /** local: prompts per prefill batch. */
  batch: number;
  /** Answer tokens for P(yes): 'pair' (Yes/No) or 'all' (casing/space variants); null: the backend's default. */
  variants: 'pair' | 'all' | null;
  /** local: lm_head at the scored position only, or full forward logits. */
  scoring: 'sequence-logprobs' | 'forward-logits';
  /** What the reward uses per item: 'binary' (met → 1; the paper's) or 'prob' (P(yes); http asks for logprobs). */
  score: 'binary' | 'prob';
  /** Stop (train) / fail (eval) when more than this fraction of a step's verdicts is null. In [0, 1]. */
  maxNullRate: number;
}

/** Defaults of {@link JudgeConfig} (the kind defaults to local for train; eval's flag default is http). */
export const JUDGE_DEFAULTS: JudgeConfig = {
  kind: 'local',
  url: null,
  model: null,
  mode: 'per-item',
  concurrency: 16,
  cache: null,
  timeoutMs: 120000,
  maxRetries: 5,
  maxTokens: null,
  noThink: false,
  batch: 16,
  variants: null,
  scoring: 'sequence-logprobs',
  score: 'binary',
  maxNullRate: 0.5,
};

/** Range/consistency problems of judge settings (empty when valid); `prefix` names the section. */
export function judgeConfigProblems(c: JudgeConfig, prefix = 'judge.'): string[] {
  const errs: string[] = [];
  if (c.kind !== 'http' && c.kind !== 'local') errs.push(`${prefix}kind must be http or local (got ${JSON.stringify(c.kind)})`);
  if (c.kind === 'http' && (!c.url || !c.model)) errs.push(`${prefix}kind http needs ${prefix}url and ${prefix}model`);
  if (c.mode !== 'per-item' && c.mode !== 'per-plan') errs.push(`${prefix}mode must be per-item or per-plan (got ${JSON.stringify(c.mode)})`);
  if (c.score !== 'binary' && c.score !== 'prob') errs.push(`${prefix}score must be binary or prob (got ${JSON.stringify(c.score)})`);
  if (c.variants !== null && c.variants !== 'pair' && c.variants !== 'all') errs.push(`${prefix}variants must be pair or all (got ${JSON.stringify(c.variants)})`);
  if (!(typeof c.maxNullRate === 'number' && c.maxNullRate >= 0 && c.maxNullRate <= 1)) errs.push(`${prefix}maxNullRate must be in [0, 1] (got ${JSON.stringify(c.maxNullRate)})`);
  for (const k of ['concurrency', 'timeoutMs', 'batch'] as const) if (!(Number.isInteger(c[k]) && c[k] > 0)) errs.push(`${prefix}${k} must be a positive integer (got ${JSON.stringify(c[k])})`);
  if (!(Number.isInteger(c.maxRetries) && c.maxRetries >= 0)) errs.push(`${prefix}maxRetries must be an integer >= 0 (got ${JSON.stringify(c.maxRetries)})`);
  if (c.maxTokens !== null && !(Number.isInteger(c.maxTokens) && c.maxTokens > 0)) errs.push(`${prefix}maxTokens must be a positive integer or null (got ${JSON.stringify(c.maxTokens)})`);
  if (typeof c.noThink !== 'boolean') errs.push(`${prefix}noThink must be true or false (got ${JSON.stringify(c.noThink)})`);
  if (c.kind === 'http' && c.score === 'prob' && c.mode === 'per-plan') errs.push(`${prefix}score prob needs ${prefix}mode per-item (P(yes) is read from the verdict token of a one-word reply)`);
  return errs;
}

