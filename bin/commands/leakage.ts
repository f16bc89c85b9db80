/**
 * `papergym-native leakage --data dataset.jsonl [--llm URL --model NAME]` (docs/design.md §7/§8):
 * per rubric item, whether a judge can infer it from the question alone; rates overall, per
 * dimension and per origin; plus the LLM-free lexical-overlap proxy (always computed).
 */
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { CommandModule } from 'yargs';
import { leakageOptions } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { LlmClient } from '../../lib/llm/client.js';
import { auditLeakage, formatLeakage, type LeakageItem, type LeakageReport } from '../../lib/data/leakage.js';
import { formatAgreement, judgeAgreement, type AgreementReport, type AgreementUnit } from '../../lib/judge/agreement.js';
import { checkJudge, judgeAnswersFreeForm, JUDGE_BACKENDS } from '../../lib/judge/backends/index.js';
import { aggregateVerdicts, JuryRunWatch, juryRunMembers, leftOutNote, type JuryRunMemberHealth } from '../../lib/judge/jury.js';
import { judgeFlagsToConfig, juryFlagsError, juryFlagsGiven } from '../judge-options.js';
import { CachedLlm } from '../../lib/data/pipeline.js';
import { readEvalItems } from '../../lib/data/schema.js';
import { JUDGE_DEFAULTS, judgeKindsWithMembers, type JudgeConfig, type JuryAggregation, type JuryFailureRule } from '../../lib/config/judge.js';
import { parseList } from '../../lib/config/schema.js';
import { PipelineState } from '../../lib/data/state.js';
import { Progress } from '../../lib/data/progress.js';
import { handleInterrupt, InterruptedRun } from './build-data.js';
import { userCacheDir } from '../../lib/util/cache.js';

export interface LeakageArgs {
  /** One items file (runLeakage); the command accepts several (one table row each). */
  data: string;
  llm?: string;
  model?: string;
  state?: string;
  threshold?: number;
  out?: string;
  json?: boolean;
  concurrency?: number;
  /** Same as `concurrency` (the name eval and compare use); wins when both are given. */
  judgeConcurrency?: number;
  timeout?: number;
  strict?: boolean;
  progress?: 'auto' | 'plain' | 'none';
  /** Seconds between plain progress lines (default 5). */
  progressInterval?: number;
  /** A kind with members (the jury): the members of `judges` judge each rubric item instead of `llm`/`model`. */
  judge?: string;
  /** Jury members (a list of member mappings, or a YAML/JSON file holding it), as eval's `--judges`. */
  judges?: unknown;
  judgeAggregation?: JuryAggregation;
  juryOnMemberFailure?: JuryFailureRule;
  /** Fail when more than this share of the rubric items has no judge verdict (default 0.5); a member's own limit is its maxNullRate. */
  judgeMaxNullRate?: number;
}

/** A jury run's figures (`leakage --judge jury`): each member's weight and health, who was left out, the members' agreement. */
export interface LeakageJuryReport {
  aggregation: JuryAggregation;
  members: Record<string, { weight: number; health: JuryRunMemberHealth }>;
  leftOut: string[];
  /** Agreement of the members' verdicts (units: rubric items; clusters: dataset items); left-out members excluded. */
  agreement: AgreementReport;
}

/** The command's work (tests call it directly). @throws when `--llm` is given without `--model` */
/**
 * The command's work (tests call it directly). With a judge, a progress display counts rubric
 * items, judge calls (done, cached, in flight), tokens and an ETA (`--progress`, plain lines
 * without a TTY or under CI); every judge answer is stored as it arrives, so an aborted run
 * (`io.signal`) loses nothing and a rerun asks only the rest.
 * @throws when `--llm` is given without `--model`; the abort error when aborted
 */
export async function runLeakage(
  a: LeakageArgs,
  io: { signal?: AbortSignal; stream?: NodeJS.WriteStream; onWarning?: (m: string) => void } = {},
): Promise<LeakageReport & { jury?: LeakageJuryReport }> {
  // PaperGym items and imported benchmark items alike (a chat prompt is read as its folded text).
  const { items } = readEvalItems(a.data, { strict: a.strict });
  if (hasMembers(a.judge)) return runLeakageJury(a, items, io);
  if (a.judge !== undefined && a.judge !== null)
    throw new Error(
      `--judge: leakage takes --judge ${judgeKindsWithMembers().join(' or ')} only (got ${JSON.stringify(a.judge)}); one judge is --llm URL --model NAME`,
    );
  const juryFlags = juryFlagsGiven(a as unknown as Record<string, unknown>);
  if (juryFlags.length) throw juryFlagsError('leakage', juryFlags, 'got no --judge; one judge is --llm URL --model NAME');
  if (a.llm && !a.model) throw new Error('--llm needs --model');
  let state: PipelineState | undefined;
  let llm: CachedLlm | undefined;
  let progress: Progress | undefined;
  if (a.llm && a.model) {
    state = new PipelineState(leakageStatePath(a));
    const client = new LlmClient({
      baseUrl: a.llm,
      model: a.model,
      concurrency: a.judgeConcurrency ?? a.concurrency ?? 8,
      timeoutMs: (a.timeout ?? 120) * 1000,
    });
    const total = items.reduce((n, it) => n + it.rubric.length, 0);
    progress = new Progress({
      label: 'leakage',
      unit: 'rubric items',
      total,
      stream: io.stream,
      load: () => client.load(),
      intervalMs: (a.progressInterval ?? 5) * 1000,
      silent: a.progress === 'none',
      plain: a.progress === 'plain' ? true : undefined,
    });
    llm = new CachedLlm(client, state, { temperature: 0, maxTokens: 512, signal: io.signal, progress });
  }
  try {
    const rep = await auditLeakage(items, { llm, threshold: a.threshold, onRow: (_r, cached) => progress?.tick(cached) });
    progress?.stop();
    if (a.out) writeFileSync(a.out, JSON.stringify(rep, null, 2) + '\n');
    return rep;
  } finally {
    progress?.stop();
    state?.close();
  }
}

/** `--judge` names a registered kind made of member judges (the jury). */
const hasMembers = (kind: string | null | undefined): boolean => typeof kind === 'string' && (JUDGE_BACKENDS.find(kind)?.hasMembers ?? false);

/** Settings of a leakage jury: the judge section from the flags (concurrency, timeout from leakage's own), members from `judges`. */
function leakageJuryConfig(a: LeakageArgs): JudgeConfig {
  const over = judgeFlagsToConfig(a as unknown as Record<string, unknown>);
  return {
    ...JUDGE_DEFAULTS,
    ...over,
    kind: a.judge as JudgeConfig['kind'],
    concurrency: a.judgeConcurrency ?? a.concurrency ?? 8,
    timeoutMs: (a.timeout ?? 120) * 1000,
  } as JudgeConfig;
}

/**
 * `leakage --judge jury`: every member (http each) judges every rubric item, the members
 * concurrently, each through its own LLM client and its own SQLite call cache
 * ({@link leakageMemberStatePath}); the verdict per item by the jury's aggregation (majority: a
 * weighted majority says inferable, a tie does not; unanimous: every voting member says inferable,
 * any "no" makes it not inferable, yes with nulls is null; mean-prob is refused — the JSON answers
 * carry no P(yes)); member failure by judge.juryOnMemberFailure (lib/judge/jury.ts JuryRunWatch).
 */
async function runLeakageJury(
  a: LeakageArgs,
  items: LeakageItem[],
  io: { signal?: AbortSignal; stream?: NodeJS.WriteStream; onWarning?: (m: string) => void },
): Promise<LeakageReport & { jury: LeakageJuryReport }> {
  if (a.llm || a.model) throw new Error('leakage: give the judge as --llm URL --model NAME or as --judge jury --judges FILE, not both');
  if (a.judges === undefined || a.judges === null) throw new Error('leakage: --judge jury needs --judges FILE (a YAML/JSON list of members, as eval takes)');
  const warn = io.onWarning ?? ((m: string) => process.stderr.write(`warning: ${m}\n`));
  const jc = leakageJuryConfig(a);
  const members = juryRunMembers(jc, 'leakage', {
    canAnswer: judgeAnswersFreeForm,
    needs: "leakage's question is a JSON answer from a chat endpoint: every member needs kind http with url and model",
    onWarning: warn,
  });
  await checkJudge(jc);
  const total = items.reduce((n, it) => n + it.rubric.length, 0);
  const watch = new JuryRunWatch(members, total, jc.juryOnMemberFailure, 'leakage', warn);
  const stop = new AbortController();
  const own = new Map(members.map((m) => [m.name, new AbortController()]));
  const states: PipelineState[] = [];
  const clients: LlmClient[] = [];
  let progress: Progress | undefined;
  try {
    progress = new Progress({
      label: 'leakage',
      unit: 'rubric items',
      total,
      stream: io.stream,
      load: () =>
        clients.reduce(
          (t, c) => {
            const l = c.load();
            return { active: t.active + l.active, queued: t.queued + l.queued };
          },
          { active: 0, queued: 0 },
        ),
      intervalMs: (a.progressInterval ?? 5) * 1000,
      silent: a.progress === 'none',
      plain: a.progress === 'plain' ? true : undefined,
    });
    const llms = members.map((m) => {
      const state = new PipelineState(leakageMemberStatePath(a, m.name));
      states.push(state);
      const client = new LlmClient({
        baseUrl: m.config.url!,
        model: m.config.model!,
        concurrency: m.config.concurrency,
        timeoutMs: m.config.timeoutMs,
        maxRetries: m.config.maxRetries,
        maxRetryAfterMs: m.config.maxRetryAfterMs,
      });
      clients.push(client);
      const signal = AbortSignal.any([stop.signal, own.get(m.name)!.signal, ...(io.signal ? [io.signal] : [])]);
      return { name: m.name, llm: new CachedLlm(client, state, { temperature: 0, maxTokens: 512, signal, progress }) };
    });
    const weights = members.map((m) => m.weight);
    const aggregation = jc.aggregation;
    const rep = await auditLeakage(items, {
      threshold: a.threshold,
      onRow: (_r, cached) => progress?.tick(cached),
      jury: {
        members: llms,
        active: (n) => watch.active(n),
        onAnswer: (n, outcome, detail) => {
          try {
            watch.record(n, outcome, detail);
          } catch (e) {
            stop.abort(e);
            throw e;
          }
          if (!watch.active(n)) own.get(n)!.abort();
        },
        aggregate: (vs) =>
          aggregateVerdicts(
            'leakage',
            members.map((m) => ({ judge: m.name, met: vs[m.name] ?? null })),
            weights,
            aggregation,
          ).met,
      },
    });
    progress.stop();
    const leftOut = watch.leftOut();
    const voting = members.map((m) => m.name).filter((n) => !leftOut.includes(n));
    const units: AgreementUnit[] = rep.rows.map((r) => ({
      planId: r.itemId,
      itemId: r.rubricId,
      ...(r.dimension && { dimension: r.dimension }),
      verdicts: Object.fromEntries(voting.map((n) => [n, r.judges![n] ?? null])),
    }));
    const health = watch.health();
    const jury: LeakageJuryReport = {
      aggregation,
      members: Object.fromEntries(members.map((m) => [m.name, { weight: m.weight, health: health[m.name]! }])),
      leftOut,
      agreement: judgeAgreement(units, voting.length ? voting : members.map((m) => m.name), { resamples: 1000, seed: 0 }),
    };
    const out = { ...rep, jury };
    if (a.out) writeFileSync(a.out, JSON.stringify(out, null, 2) + '\n');
    return out;
  } finally {
    progress?.stop();
    for (const st of states) st.close();
  }
}

/**
 * The call cache of jury member `name` in `leakage --judge jury`: {@link leakageStatePath} with
 * `.NAME` before `.sqlite` (characters other than letters, digits, `.`, `_`, `-` replaced, plus a
 * short hash of the name when any was), so each member keeps its own answers and a rerun asks none again.
 */
export function leakageMemberStatePath(a: Pick<LeakageArgs, 'state' | 'data'>, name: string): string {
  const base = leakageStatePath(a).replace(/\.sqlite$/, '');
  const safe = name.replace(/[^\w.-]/g, '_');
  const tag = safe === name ? safe : `${safe}-${createHash('sha256').update(name).digest('hex').slice(0, 8)}`;
  return `${base}.${tag}.sqlite`;
}

/**
 * Where an interrupted leakage run's finished judge calls are (the Ctrl-C message): the call cache,
 * or with `--judge jury` each member's own ({@link leakageMemberStatePath}).
 */
export function leakageSavedIn(a: LeakageArgs): string {
  if (hasMembers(a.judge)) {
    let names: string[] = [];
    try {
      names = (leakageJuryConfig(a).judges ?? []).map((m) => m.name);
    } catch {
      // a judges list that does not parse never started a run; name the base path below
    }
    if (names.length) return `every finished judge call is saved in each member's cache: ${names.map((n) => leakageMemberStatePath(a, n)).join(', ')}`;
  }
  return `every finished judge call is saved in ${leakageStatePath(a)}`;
}

/** The judge-call cache of a leakage run. */
/**
 * The judge-call cache of `leakage`: `--state`, else `<cache dir>/leakage/<sha256 of the dataset's
 * absolute path, 16 hex>.sqlite` (per-user cache dir, lib/util/cache.ts), not beside the dataset
 * (a clone would get an untracked file).
 */
export const leakageStatePath = (a: Pick<LeakageArgs, 'state' | 'data'>) =>
  a.state ?? join(userCacheDir(), 'leakage', `${createHash('sha256').update(resolve(a.data)).digest('hex').slice(0, 16)}.sqlite`);

/**
 * Fails (exit 1 with the reason) when more than the judge null-rate limit of the judge calls of a
 * dataset failed: a leakage rate computed from a few survivors is never printed (issue 38 item 5).
 */
export function assertLeakageJudge(rep: LeakageReport, data: string, maxFailRate = JUDGE_DEFAULTS.maxNullRate): void {
  if (!rep.judge || !rep.rows.length) return;
  const rate = rep.judge.failed / rep.rows.length;
  if (rate > maxFailRate) {
    const what = rep.members ? 'rubric items have no jury verdict' : 'judge calls failed';
    const share = `${(100 * rate).toFixed(0)}% > ${(100 * maxFailRate).toFixed(0)}%`;
    throw new Error(
      `leakage: ${data}: ${rep.judge.failed} of ${rep.rows.length} ${what} (${share}); no leakage rate reported — check ${rep.members ? '--judges' : '--llm / --model'} and the server`,
    );
  }
}

/** A jury's lines: each member's health (left out or not), then the members' agreement. */
export function formatLeakageJury(j: LeakageJuryReport): string {
  const lines = Object.entries(j.members).map(
    ([n, m]) => `  member ${n} (weight ${m.weight}): ${m.health.answers} answers, ${m.health.failed} failed` + leftOutNote(m.health),
  );
  const agreement = j.agreement.judges.length >= 2 ? formatAgreement(j.agreement) : 'judge agreement: n/a (fewer than two members voting)';
  return [`jury (${j.aggregation}; ${lines.length} member${lines.length === 1 ? '' : 's'}):`, ...lines, agreement].join('\n');
}

/**
 * One table row per dataset: rubric items, judge leakage, lexical leakage, mean overlap; with a jury
 * the jury's rate and one column per member with its own rate (`left out` where it was).
 */
export function formatLeakageTable(reps: { data: string; rep: LeakageReport & { jury?: LeakageJuryReport } }[]): string {
  const pct = (r: { rate: number | null; leaked: number; n: number } | undefined) =>
    !r || r.rate === null ? '—' : `${(100 * r.rate).toFixed(1)}% (${r.leaked}/${r.n})`;
  const members = [...new Set(reps.flatMap(({ rep }) => Object.keys(rep.members ?? {})))];
  const head = [
    'dataset',
    'items',
    'rubric items',
    members.length ? 'judge leakage (jury)' : 'judge leakage',
    ...members.map((n) => `member ${n}`),
    `lexical (≥ ${reps[0]!.rep.lexical.threshold})`,
    'mean overlap',
  ];
  const body = reps.map(({ data, rep }) => [
    data,
    String(new Set(rep.rows.map((r) => r.itemId)).size),
    String(rep.rows.length),
    pct(rep.judge?.overall),
    ...members.map((n) => pct(rep.members?.[n]?.overall) + (rep.jury?.members[n]?.health.leftOut ? ' left out' : '')),
    pct(rep.lexical.overall),
    rep.lexical.meanOverlap.toFixed(3),
  ]);
  const w = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(w[i]!)).join(' | ')} |`;
  return [line(head), `|${w.map((n) => '-'.repeat(n + 2)).join('|')}|`, ...body.map(line)].join('\n');
}

export const leakageCommand: CommandModule<object, LeakageArgs> = {
  command: 'leakage',
  describe: 'Leakage audit: share of rubric items inferable from the question alone (judge and lexical proxy), one row per dataset',
  builder: (y) => addSettings(y, leakageOptions(), { withDefaults: true }).demandOption('data') as never,
  handler: async (argv) => {
    const datas = parseList(
      leakageOptions().find((s) => s.key === 'data')!,
      argv.data,
    ) as string[];
    if (datas.length > 1 && (argv.state || argv.out))
      throw new Error('--state and --out name one file: give them with a single --data (each dataset keeps its own cache under <cache dir>/leakage/)');
    const reps: { data: string; rep: LeakageReport & { jury?: LeakageJuryReport } }[] = [];
    for (const data of datas) {
      const a = { ...argv, data };
      const rep = await handleInterrupt(
        'leakage',
        (signal) => runLeakage(a, { signal }),
        () => leakageSavedIn(a),
      );
      if (rep === InterruptedRun) return;
      assertLeakageJudge(rep, data, argv.judgeMaxNullRate);
      reps.push({ data, rep });
    }
    if (argv.json) process.stdout.write(JSON.stringify(reps.length === 1 ? reps[0]!.rep : reps, null, 2) + '\n');
    else if (reps.length === 1) {
      const { rep } = reps[0]!;
      process.stdout.write(formatLeakage(rep) + '\n' + (rep.jury ? formatLeakageJury(rep.jury) + '\n' : ''));
    } else
      process.stdout.write(
        formatLeakageTable(reps) + '\n' + reps.map(({ data, rep }) => (rep.jury ? `${data}:\n${formatLeakageJury(rep.jury)}\n` : '')).join(''),
      );
  },
};
