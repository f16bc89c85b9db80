/**
 * The judge settings: one schema shared by `train` (YAML `judge:` section and `--judge*` flags),
 * `eval`, `probe-judge` and the library. The core rows here are the judge section's shared keys (a
 * jury member reads any of them); a judge backend (lib/judge/backends/, one file per kind, one
 * registry) may bring rows and key rules of its own (`settings`, `settingsProblems`:
 * lib/config/extensions.ts), and {@link judgeSettings} is the core rows plus the registered ones,
 * with the registered kinds as the `--judge` choices. The behaviour half — start-up check, how a
 * judge is opened, whether it runs on the policy's weights — is the backend's descriptor. Kept in
 * lib/config/ so that the training config reads it without depending on the judge (lib/ rooms:
 * config sits below judge and train).
 */
import { checkValue, type Setting } from './schema.js';
import { memoOn, ownRows, registeredJudgeBackends } from './extensions.js';

/**
 * Judge kind names. Each backend file (lib/judge/backends/, the registry's folder) adds its own by
 * declaration merging (`declare module '…/config/judge.js' { interface JudgeKindNames { echo: true } }`),
 * so that {@link JudgeConfigOf} and lib/judge/backends JudgeBackendOf type it.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface JudgeKindNames {}
export type JudgeKind = keyof JudgeKindNames;

/** The registered judge kinds, in registration order: the `--judge` / `judge.kind` choices. @throws Error when lib/judge/backends/ has not loaded. */
export function judgeKinds(): string[] {
  return registeredJudgeBackends('the judge kinds (--judge choices)').map((b) => b.kind);
}

/** The registered kinds a jury member may be: every kind without members (JudgeKindSettings.hasMembers). */
export function memberJudgeKinds(): string[] {
  return registeredJudgeBackends('the judge kinds (jury members)')
    .filter((b) => !b.hasMembers)
    .map((b) => b.kind);
}

/** The registered kinds made of member judges (they read `judge.judges`). */
export function judgeKindsWithMembers(): string[] {
  return registeredJudgeBackends('the judge kinds (judge.judges)')
    .filter((b) => b.hasMembers)
    .map((b) => b.kind);
}

/**
 * Judge settings (YAML `judge:` keys of `train`; `--judge-*` flags of `train` and `eval`), every key
 * present whatever the kind (a flat section: old configs and checkpoints load as they are). The
 * keys a kind reads are listed by its backend (lib/judge/backends/, `settingKeys`). A backend's own
 * keys (its `settings` rows) are added by declaration merging from its file, as optional keys
 * (`interface JudgeSettings { echoWord?: string }`): {@link JUDGE_DEFAULTS} holds the core keys,
 * {@link judgeDefaults} the registered ones too.
 */
export interface JudgeSettings {
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
  /** http: longest `Retry-After` honoured, ms (longer: the client's backoff; lib/llm/client.ts). */
  maxRetryAfterMs: number;
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
  /**
   * jury: the member judges (YAML list, no flag): each `{name, kind, weight?}` (kind: any kind without members) plus any
   * judge key of its own (url, model, score, mode, …; unset keys are this section's). Null otherwise.
   */
  judges: JuryMemberSettings[] | null;
  /** jury: how member verdicts make one (lib/judge/jury.ts). */
  aggregation: JuryAggregation;
  /** jury: a failing member stops the run, or is left out (named, counted, warned). */
  juryOnMemberFailure: JuryFailureRule;
}

/** Aggregation rules of a jury (lib/judge/jury.ts). */
export const JURY_AGGREGATIONS = ['majority', 'mean-prob', 'unanimous'] as const;
export type JuryAggregation = (typeof JURY_AGGREGATIONS)[number];

/** What a jury does when a member fails (lib/judge/jury.ts). */
export const JURY_FAILURE_RULES = ['stop', 'continue'] as const;
export type JuryFailureRule = (typeof JURY_FAILURE_RULES)[number];

/** Keys of a jury member: its name, kind and weight, and any judge key except the jury's own. */
export type JuryMemberSettings = { name: string; kind: JudgeKind; weight?: number } & Partial<
  Omit<JudgeSettings, 'judges' | 'aggregation' | 'juryOnMemberFailure'>
>;

/** Problems of a jury's member list (names unique and non-empty, weights > 0); empty when valid. `prefix` names the setting. */
export function juryMemberProblems(members: unknown, prefix = 'judge.judges'): string[] {
  if (!Array.isArray(members) || !members.length) return [`${prefix} must be a non-empty list of judges ({name, kind, weight?, …})`];
  const errs: string[] = [];
  const seen = new Map<string, number>();
  members.forEach((m: { name?: unknown; weight?: unknown } | null, i) => {
    if (typeof m?.name !== 'string' || !m.name.trim()) errs.push(`${prefix}[${i}].name must be a non-empty string (got ${JSON.stringify(m?.name)})`);
    else if (seen.has(m.name))
      errs.push(`${prefix}[${i}].name ${JSON.stringify(m.name)} is already the name of ${prefix}[${seen.get(m.name)}]: judge names must be unique`);
    else seen.set(m.name, i);
    if (m?.weight !== undefined && m.weight !== null && !(typeof m.weight === 'number' && Number.isFinite(m.weight) && m.weight > 0)) {
      errs.push(`${prefix}[${i}].weight must be a finite number > 0 (got ${typeof m.weight === 'number' ? String(m.weight) : JSON.stringify(m.weight)})`);
    }
  });
  return errs;
}

/** The warning for a jury of one (it is that judge with extra bookkeeping). */
export function juryOfOneWarning(prefix = 'judge.judges'): string {
  return `${prefix} has one judge: a jury of one is that judge (no agreement figures); name two or more judges for a jury`;
}

const MEMBER_OWN_KEYS = new Set(['name', 'kind', 'weight']);
const JURY_KEYS = new Set(['judges', 'aggregation', 'juryOnMemberFailure']);

/**
 * The full settings of jury member `i`: the section's settings (`c`) under the member's own keys,
 * kind as given. @throws Error naming the member and the key for an unknown key or kind.
 */
export function juryMemberConfig(c: JudgeConfig, i: number, prefix = 'judge.judges'): JudgeConfig & { name: string; weight: number } {
  const m = (c.judges ?? [])[i] as Record<string, unknown> | undefined;
  if (!m || typeof m !== 'object') throw new Error(`${prefix}[${i}] must be a mapping {name, kind, weight?, …}`);
  // Any judge key a registered kind reads (the core keys and the backends' own rows).
  const known = judgeDefaults();
  for (const k of Object.keys(m)) {
    if (JURY_KEYS.has(k)) throw new Error(`${prefix}[${i}].${k}: a jury member cannot be a jury`);
    if (!MEMBER_OWN_KEYS.has(k) && !(k in known))
      throw new Error(
        `${prefix}[${i}]: unknown key ${k} (judge keys: ${Object.keys(known)
          .filter((x) => !JURY_KEYS.has(x))
          .join(', ')}, plus name, weight)`,
      );
  }
  const kinds = memberJudgeKinds();
  if (!kinds.includes(m.kind as string)) throw new Error(`${prefix}[${i}].kind must be ${kinds.join(' or ')} (got ${JSON.stringify(m.kind)})`);
  const { name, weight, ...rest } = m as { name: string; weight?: number };
  return { ...c, judges: null, ...(rest as Partial<JudgeConfig>), name, weight: weight ?? 1 } as JudgeConfig & { name: string; weight: number };
}

/** The judge settings of one kind: a discriminated union by `kind` ('http': an OpenAI-compatible endpoint; 'local': the policy's own base model, adapter off, reading P(yes)). */
export type JudgeConfigOf<K extends JudgeKind> = JudgeSettings & { kind: K };
export type JudgeConfig = { [K in JudgeKind]: JudgeConfigOf<K> }[JudgeKind];

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
  maxRetryAfterMs: 120000,
  maxTokens: null,
  noThink: false,
  batch: 16,
  variants: null,
  scoring: 'sequence-logprobs',
  score: 'binary',
  maxNullRate: 0.5,
  judges: null,
  aggregation: 'majority',
  juryOnMemberFailure: 'stop',
};

/**
 * The core judge settings ({@link JudgeConfig}), one entry each, keys relative to `judge.`:
 * `train` reads them as `judge.*` keys and flags, `eval` and `probe-judge` as `--judge*` flags.
 * Defaults are JUDGE_DEFAULTS (train: kind local, concurrency 8; eval: kind http). The `kind` row's
 * choices are filled from the registry by {@link judgeSettings}.
 */
export const CORE_JUDGE_SETTINGS: readonly Setting[] = [
  {
    key: 'kind',
    flag: 'judge',
    type: 'enum',
    // The registered kinds, filled in by judgeSettings() (the registry is the only list of them).
    choices: [],
    default: JUDGE_DEFAULTS.kind,
    meaning: 'Rubric judge: the frozen base model in-process (adapter off, P(yes) from one prefill) or an OpenAI-compatible endpoint',
    source: 'paper: LLM judge decides each rubric item (docs/design.md §6)',
  },
  {
    key: 'url',
    flag: 'judge-url',
    type: 'string',
    default: JUDGE_DEFAULTS.url,
    values: 'http(s)://host:port/v1',
    meaning: 'http: judge endpoint (vLLM, SGLang, papergym-native serve)',
    source: 'OpenAI API base_url',
  },
  {
    key: 'model',
    flag: 'judge-model',
    type: 'string',
    default: JUDGE_DEFAULTS.model,
    values: 'a served model name',
    meaning: 'http: model name the judge endpoint serves',
    source: 'OpenAI API model',
  },
  {
    key: 'mode',
    flag: 'judge-mode',
    type: 'enum',
    choices: ['per-item', 'per-plan'],
    default: JUDGE_DEFAULTS.mode,
    meaning: 'http: one yes/no request per rubric item, or one JSON request per plan',
    source: 'paper: per-item judging (docs/design.md §6)',
  },
  {
    key: 'concurrency',
    resumable: true,
    flag: 'judge-concurrency',
    type: 'integer',
    min: 1,
    default: JUDGE_DEFAULTS.concurrency,
    meaning: 'http: requests in flight',
    source: 'vLLM benchmark --max-concurrency',
  },
  {
    key: 'cache',
    flag: 'judge-cache',
    type: 'path',
    default: JUDGE_DEFAULTS.cache,
    values: 'a SQLite file',
    meaning:
      "http: SQLite file caching judge answers by request hash; local: each plan's verdicts, keyed by the judge model's files and placement, the judge's settings and the request; unset = no cache",
    source: 'papergym-native (lib/judge/cache.ts, lib/judge/local-cache.ts)',
  },
  {
    key: 'timeoutMs',
    flag: 'judge-timeout-ms',
    type: 'integer',
    min: 1,
    default: JUDGE_DEFAULTS.timeoutMs,
    meaning: 'http: per-attempt timeout in milliseconds',
    source: 'OpenAI client timeout',
  },
  {
    key: 'maxRetries',
    flag: 'judge-max-retries',
    type: 'integer',
    min: 0,
    default: JUDGE_DEFAULTS.maxRetries,
    meaning: 'http: retries after the first attempt (only connection errors, timeouts, 408/409/429/5xx; backoff honouring retry-after)',
    source: 'OpenAI client max_retries',
  },
  {
    key: 'maxRetryAfterMs',
    flag: 'judge-max-retry-after-ms',
    type: 'integer',
    min: 0,
    max: 3600000,
    default: JUDGE_DEFAULTS.maxRetryAfterMs,
    meaning:
      "http: longest Retry-After honoured, ms; a server asking for longer gets the client's own backoff instead, and every wait counts against the call's deadline",
    source: 'openai-python: Retry-After honoured up to 60 s, else its backoff',
  },
  {
    key: 'maxTokens',
    flag: 'judge-max-tokens',
    type: 'integer',
    min: 1,
    default: JUDGE_DEFAULTS.maxTokens,
    meaning: 'http: max answer tokens; unset = 16 per item, 64 + 24 per item per plan',
    source: 'OpenAI API max_tokens',
  },
  {
    key: 'noThink',
    flag: 'judge-no-think',
    type: 'boolean',
    default: JUDGE_DEFAULTS.noThink,
    meaning: 'http: send chat_template_kwargs.enable_thinking=false (vLLM, SGLang, serve)',
    source: 'vLLM chat_template_kwargs; Qwen3 enable_thinking',
  },
  {
    key: 'batch',
    flag: 'judge-batch',
    type: 'integer',
    min: 1,
    default: JUDGE_DEFAULTS.batch,
    meaning: 'local: prompts per prefill batch',
    source: 'vLLM max_num_seqs',
  },
  {
    key: 'variants',
    flag: 'judge-variants',
    type: 'enum',
    choices: ['pair', 'all'],
    default: JUDGE_DEFAULTS.variants,
    meaning: 'P(yes) answer tokens: Yes/No only, or every casing/space variant summed; unset = pair (local with forward-logits: all)',
    source: 'papergym-native local judge (lib/judge/local.ts)',
  },
  {
    key: 'scoring',
    flag: 'judge-scoring',
    type: 'enum',
    choices: ['sequence-logprobs', 'forward-logits'],
    default: JUDGE_DEFAULTS.scoring,
    meaning: 'local: lm_head at the scored position only, or full forward logits',
    source: 'papergym-native local judge (lib/judge/local.ts)',
  },
  {
    key: 'score',
    flag: 'judge-score',
    type: 'enum',
    choices: ['binary', 'prob'],
    default: JUDGE_DEFAULTS.score,
    meaning: "Reward per rubric item: the binary verdict (the paper's) or P(yes) (local judge; http per-item asks for logprobs)",
    source: 'paper: binary rubric verdicts (docs/design.md §6); OpenAI API logprobs / top_logprobs',
  },
  {
    key: 'judges',
    flag: 'judges',
    type: 'list',
    items: 'object',
    default: JUDGE_DEFAULTS.judges,
    values: 'jury members: a YAML list in the config file, a YAML/JSON file on the command line',
    meaning:
      "jury: the member judges, each {name, kind (any registered kind without members), weight (> 0, default 1)} plus any judge key of its own (url, model, score, mode, maxNullRate, …; unset keys are the judge section's)",
    source: 'papergym-native jury (lib/judge/jury.ts); issue 32',
  },
  {
    key: 'aggregation',
    flag: 'judge-aggregation',
    type: 'enum',
    choices: JURY_AGGREGATIONS,
    default: JUDGE_DEFAULTS.aggregation,
    meaning: "jury: one verdict from the members' (judge.judges, a YAML list): weighted majority (a tie is not met), weighted mean P(yes) > 0.5, or all yes",
    source: 'papergym-native jury (lib/judge/jury.ts); issue 32',
  },
  {
    key: 'juryOnMemberFailure',
    formerly: { keys: ['onMemberFailure'] },
    flag: 'jury-on-member-failure',
    type: 'enum',
    choices: JURY_FAILURE_RULES,
    default: JUDGE_DEFAULTS.juryOnMemberFailure,
    meaning:
      'jury: a member whose call fails or whose null rate passes its judge.maxNullRate stops the run (named), or is left out of that call (named, counted, warned)',
    source: 'papergym-native jury (lib/judge/jury.ts); never silently fewer judges',
  },
  {
    key: 'maxNullRate',
    flag: 'judge-max-null-rate',
    type: 'number',
    min: 0,
    max: 1,
    default: JUDGE_DEFAULTS.maxNullRate,
    meaning: "Stop training (with a checkpoint) / fail eval when more than this fraction of a step's verdicts is null (refused, unreadable, failed)",
    source: 'papergym-native (a failing judge is never a silent zero reward)',
  },
];

/**
 * The judge settings, one entry each, keys relative to `judge.`: the core rows, then each registered
 * backend's own rows (registration order); the `kind` row's choices are the registered kinds. The
 * same array on every read until a backend is registered or removed.
 * @throws Error when lib/judge/backends/ has not loaded, or a backend's row repeats a key or flag.
 */
export const judgeSettings: () => readonly Setting[] = memoOn(
  () => registeredJudgeBackends().flatMap((b) => [b, b.settings]),
  () => {
    const backends = registeredJudgeBackends();
    const kinds = backends.map((b) => b.kind);
    const rows: Setting[] = CORE_JUDGE_SETTINGS.map((s) => (s.key === 'kind' ? { ...s, choices: kinds } : s));
    for (const b of backends) rows.push(...ownRows(`judge backend ${b.kind}`, b.settings ?? [], rows));
    return rows;
  },
);

/** {@link JUDGE_DEFAULTS} with the defaults of the registered backends' own settings. @throws Error when lib/judge/backends/ has not loaded. */
export function judgeDefaults(): JudgeConfig {
  const own = judgeSettings().filter((s) => !CORE_JUDGE_SETTINGS.some((c) => c.key === s.key));
  return { ...JUDGE_DEFAULTS, ...Object.fromEntries(own.map((s) => [s.key, Array.isArray(s.default) ? [...s.default] : s.default])) };
}

/**
 * The rules of a kind with members (JudgeKindSettings.hasMembers, e.g. the jury): its member list,
 * and each member's settings checked as a judge of its own kind, recursively through
 * judgeConfigProblems. The rules that tie a kind's own keys together are its descriptor's
 * `settingsProblems` (lib/judge/backends/, lib/config/extensions.ts); each key's own range is
 * checked by its row.
 */
function memberRules(c: JudgeConfig, prefix: string): string[] {
  const errs = juryMemberProblems(c.judges, `${prefix}judges`);
  if (errs.length) return errs;
  (c.judges ?? []).forEach((_m, i) => {
    try {
      const mc = juryMemberConfig(c, i, `${prefix}judges`);
      errs.push(...judgeConfigProblems(mc, `${prefix}judges[${i}].`));
    } catch (e) {
      errs.push((e as Error).message);
    }
  });
  return errs;
}

/** Range/consistency problems of judge settings (empty when valid); `prefix` names the section. */
export function judgeConfigProblems(c: JudgeConfig, prefix = 'judge.'): string[] {
  const errs: string[] = [];
  const backends = registeredJudgeBackends('the judge kinds (judge.kind)');
  const backend = backends.find((b) => b.kind === c.kind);
  if (!backend) errs.push(`${prefix}kind must be ${backends.map((b) => b.kind).join(' or ')} (got ${JSON.stringify(c.kind)})`);
  if (c.mode !== 'per-item' && c.mode !== 'per-plan') errs.push(`${prefix}mode must be per-item or per-plan (got ${JSON.stringify(c.mode)})`);
  if (c.score !== 'binary' && c.score !== 'prob') errs.push(`${prefix}score must be binary or prob (got ${JSON.stringify(c.score)})`);
  if (c.variants !== null && c.variants !== 'pair' && c.variants !== 'all')
    errs.push(`${prefix}variants must be pair or all (got ${JSON.stringify(c.variants)})`);
  if (!(typeof c.maxNullRate === 'number' && c.maxNullRate >= 0 && c.maxNullRate <= 1))
    errs.push(`${prefix}maxNullRate must be in [0, 1] (got ${JSON.stringify(c.maxNullRate)})`);
  for (const k of ['concurrency', 'timeoutMs', 'batch'] as const)
    if (!(Number.isInteger(c[k]) && c[k] > 0)) errs.push(`${prefix}${k} must be a positive integer (got ${JSON.stringify(c[k])})`);
  if (!(Number.isInteger(c.maxRetries) && c.maxRetries >= 0)) errs.push(`${prefix}maxRetries must be an integer >= 0 (got ${JSON.stringify(c.maxRetries)})`);
  if (c.maxTokens !== null && !(Number.isInteger(c.maxTokens) && c.maxTokens > 0))
    errs.push(`${prefix}maxTokens must be a positive integer or null (got ${JSON.stringify(c.maxTokens)})`);
  if (typeof c.noThink !== 'boolean') errs.push(`${prefix}noThink must be true or false (got ${JSON.stringify(c.noThink)})`);
  if (!(JURY_AGGREGATIONS as readonly string[]).includes(c.aggregation ?? 'majority'))
    errs.push(`${prefix}aggregation must be ${JURY_AGGREGATIONS.join(' or ')} (got ${JSON.stringify(c.aggregation)})`);
  if (!(JURY_FAILURE_RULES as readonly string[]).includes(c.juryOnMemberFailure ?? 'stop'))
    errs.push(`${prefix}juryOnMemberFailure must be stop or continue (got ${JSON.stringify(c.juryOnMemberFailure)})`);
  if (!backend?.hasMembers && c.judges !== null && c.judges !== undefined)
    errs.push(`${prefix}judges is only read by ${prefix}kind ${judgeKindsWithMembers().join(' or ')} (got kind ${JSON.stringify(c.kind)})`);
  // The backend's own settings (its rows' ranges; train checks them as judge.* keys too), then its rules.
  for (const row of backend?.settings ?? []) {
    const e = checkValue({ ...row, key: `${prefix}${row.key}` }, (c as unknown as Record<string, unknown>)[row.key]);
    if (e) errs.push(e);
  }
  if (backend?.hasMembers) errs.push(...memberRules(c, prefix));
  errs.push(...(backend?.settingsProblems?.(c, prefix) ?? []));
  return errs;
}
