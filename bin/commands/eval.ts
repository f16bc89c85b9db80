import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { resolvePolicyRefs } from '../../lib/hub/resolve.js';
import { basename, join } from 'node:path';
import type { CommandModule } from 'yargs';
import { readDataset, readEvalItems, loadGeneralRubric } from '../../lib/data/schema.js';
import { checkJudge, judgeAnswersFreeForm, judgeWithAnswerCache, openJudge } from '../../lib/judge/backends/index.js';
import { formatHealth, judgeHealth, JudgeHealthError, type Judge, type Verdict } from '../../lib/judge/types.js';
import { loadPrompt, PER_ITEM_PROMPT, PER_PLAN_PROMPT } from '../../lib/judge/verdict.js';
import type { JudgeConfig } from '../../lib/config/judge.js';
import { readEvalRows } from '../../lib/eval/compare.js';
import { ChatJudge } from '../../lib/eval/chat-judge.js';
import { getFormat } from '../../lib/eval/formats/index.js';
import { formatProtocolScore, getProtocol, scoreRows, type Protocol, type ProtocolRow, type ProtocolScore } from '../../lib/eval/protocols/index.js';
import { nullCount, promptOf, RESEARCHQA_PROMPT, runBenchmark } from '../../lib/eval/protocols/run.js';
import { isNull } from '../../lib/eval/protocols/score.js';
import { Progress } from '../../lib/data/progress.js';
import { handleInterrupt, InterruptedRun } from './build-data.js';
import { formatSuiteTable, readSuite, suiteTable } from '../../lib/eval/suite.js';
import { writeReport } from '../../lib/report/html.js';
import type { BenchmarkItem } from '../../lib/task/types.js';
import { judgeConfigFromArgs, type JudgeArgs } from '../judge-options.js';
import { Policy } from '../../lib/model/policy.js';
import type { Device, Dtype } from '../../lib/model/qwen3.js';
import { policyPlanGenerator, policyPromptOf } from '../../lib/eval/backends.js';
import { assertPromptsFit } from '../../lib/train/input-checks.js';
import { buildReport, formatReport, rowsAgreement, writeRowsJsonl, type EvalRow } from '../../lib/eval/report.js';
import { formatAgreement } from '../../lib/judge/agreement.js';
import { formatProvenanceReports, reportsByProvenance } from '../../lib/eval/provenance.js';
import { evalJudgeCachePath } from '../../lib/eval/run.js';
import { ensureWritableFile } from '../../lib/util/fs.js';
import { EVAL_OPTIONS, evalJudgeOptions } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { resolveDevice } from '../../lib/model/device.js';

interface EvalArgs extends JudgeArgs {
  model: string;
  adapter?: string;
  data: string;
  out?: string;
  report?: string;
  plans?: string;
  split?: string;
  limit?: number;
  samples: number;
  temperature: number;
  topP: number;
  topK: number;
  maxNewTokens: number;
  thinking: boolean;
  general: boolean;
  generalRubric?: string;
  rewardAlpha: number;
  resamples: number;
  seed: number;
  chunk: number;
  device: string;
  dtype?: string;
  allowNonFiniteWeights?: boolean;
  keepRaw: boolean;
  protocol?: string;
  protocolPrompt?: string;
  rescore?: string;
  suite?: string;
  overwrite?: boolean;
  progress: 'auto' | 'plain' | 'none';
}

/**
 * Fails (JudgeHealthError: exit 1 with the reason) when more than `maxNullRate` of the verdicts are
 * null: a score computed from failures is never reported (issue 38 item 5).
 */
export function assertProtocolHealth(p: Protocol, rows: ProtocolRow[], maxNullRate: number, judgeName: string): void {
  const nulls = nullCount(p, rows);
  if (rows.length && nulls / rows.length > maxNullRate) {
    const bad = rows.filter((r) => isNull(p, r));
    const errors = bad.filter((r) => r.error).length;
    const refusals = bad.filter((r) => r.refused && !r.error).length;
    throw new JudgeHealthError(
      `judge ${judgeName}: eval (${p.name}): ${nulls} of ${rows.length} verdicts are null or unreadable (${((100 * nulls) / rows.length).toFixed(0)}% > ${(100 * maxNullRate).toFixed(0)}%: ${errors} failed requests, ${nulls - errors - refusals} unreadable replies, ${refusals} refusals); no score written`,
    );
  }
}

/** `eval --rescore rows.jsonl`: the protocol's score from recorded verdicts, no judge asked. */
function rescore(argv: EvalArgs): ProtocolScore {
  const { rows, notes } = readEvalRows(argv.rescore!);
  for (const n of notes) process.stderr.write(`eval: ${argv.rescore}: ${n}\n`);
  if (!rows.length) throw new Error(`${argv.rescore}: no eval rows to rescore`);
  const prows = rows as ProtocolRow[];
  const p = getProtocol(argv.protocol ?? prows[0]!.protocol ?? 'papergym');
  // A protocol that does not apply to the rows' items is an error here too: the items as the rows
  // describe them (the protocol that wrote them stands for the format: rows record no format).
  const byQ = new Map<string, ProtocolRow[]>();
  for (const r of prows) byQ.set(r.questionId, [...(byQ.get(r.questionId) ?? []), r]);
  for (const [q, rs] of byQ) {
    const why = p.inapplicable?.({
      id: q,
      format: rs[0]!.protocol ?? 'papergym',
      question: '',
      rubric: rs.filter((r) => r.kind === 'spec').map((r) => ({ id: r.itemId, text: '', weight: r.weight ?? 1 })),
      source: { dataset: rs[0]!.protocol ?? 'papergym', file: argv.rescore!, row: 0 },
    });
    if (why) throw new Error(`${argv.rescore}: --protocol ${p.name} does not apply: ${why}`);
  }
  if (p.verdict === 'levels' && prows.every((r) => r.level === undefined))
    throw new Error(`${argv.rescore}: protocol ${p.name} needs five-level labels; these rows hold binary verdicts (rescore them with another --protocol)`);
  const s = scoreRows(p, prows, { resamples: argv.resamples, seed: argv.seed, alpha: argv.rewardAlpha });
  if (!s.score) throw new Error(`${argv.rescore}: no plan could be scored under ${p.name} (${s.skipped} skipped, ${s.nulls} of ${s.verdicts} verdicts null)`);
  return s;
}

/**
 * The judge prompt of a protocol's items: `--protocol-prompt`, else the protocol's (the authors'
 * where public); a judge that answers only yes / no gets the protocol's yes/no prompt instead of one
 * that asks for JSON; ResearchQA's levels their coverage prompt; else the judge's own per-item or
 * per-plan prompt. Name and hash go on every row and the summary.
 */
export function protocolPromptOf(p: Protocol, jc: JudgeConfig, override?: string): { name: string; hash: string; own: boolean } {
  const freeForm = judgeAnswersFreeForm(jc);
  let name: string;
  if (override) name = override;
  else if (p.verdict === 'levels' && freeForm) name = RESEARCHQA_PROMPT;
  else if (p.itemPrompt && (freeForm || !p.yesNoPrompt)) name = p.itemPrompt;
  else if (p.yesNoPrompt) name = p.yesNoPrompt;
  else name = jc.mode === 'per-plan' ? PER_PLAN_PROMPT : PER_ITEM_PROMPT;
  const own = !override && !p.itemPrompt && !(p.verdict === 'levels' && freeForm);
  return { name, hash: loadPrompt(name).hash, own };
}

/** The judges a protocol asks: the five levels from a chat judge (http), the rest through the Judge contract. */
async function openProtocolJudges(
  p: Protocol,
  jc: JudgeConfig,
  policy: Policy,
  prompt: { name: string; own: boolean },
): Promise<{ judge?: Judge; chatJudge?: ChatJudge; name: string }> {
  if (p.verdict === 'levels' && judgeAnswersFreeForm(jc)) {
    const chatJudge = new ChatJudge(jc, jc.cache ?? undefined);
    return { chatJudge, name: chatJudge.name };
  }
  if (p.verdict === 'levels')
    process.stderr.write(
      `eval: note: judge ${jc.kind} gives yes/no verdicts; ResearchQA's five levels need a judge that answers free-form (--judge http), so met reads as completely and not met as not at all\n`,
    );
  if (p.itemPrompt && prompt.name !== p.itemPrompt && !judgeAnswersFreeForm(jc))
    process.stderr.write(
      `eval: note: judge ${jc.kind} answers yes / no only; items asked with ${prompt.name}, not the protocol's default ${p.itemPrompt} (a JSON reply)\n`,
    );
  // A prompt that asks for JSON with an explanation needs room to answer (unless --judge-max-tokens says otherwise).
  const c = p.judgeMaxTokens && jc.maxTokens === null && prompt.name === p.itemPrompt ? { ...jc, maxTokens: p.judgeMaxTokens } : jc;
  const judge = await openJudge(c, { policy, ...(prompt.own ? {} : { perItemPrompt: loadPrompt(prompt.name) }) });
  return { judge, name: judge.name };
}

/**
 * `papergym-native eval --model DIR [--adapter DIR] --data bench.jsonl --judge local|http …
 * --out results.jsonl`: generates plans (the training student prompt), judges each against its
 * instance rubric + the general items, prints rubric coverage overall / method innovation /
 * experimental design / general and the mean reward with bootstrap CIs; writes per-item rows
 * (JSONL, --out), the report (JSON, --report) and the plans (JSONL, --plans).
 * `--judge local` uses the same loaded model with its adapter off (no second copy).
 */
export const evalCommand: CommandModule<object, EvalArgs> = {
  command: 'eval',
  describe: 'Generate research plans for a benchmark and report rubric coverage (overall, per dimension) with bootstrap CIs',
  builder: (y) =>
    addSettings(addSettings(y, EVAL_OPTIONS, { withDefaults: true }), evalJudgeOptions(), { withDefaults: true }).check((a) => {
      if (!a.rescore && !a.suite && (!a.model || !a.data)) throw new Error('eval needs --model and --data (or --suite FILE, or --rescore ROWS)');
      return true;
    }) as never,
  handler: async (argv) => {
    if (argv.suite) return suiteEval(argv);
    for (const [flag, path] of [
      ['--out', argv.out],
      ['--report', argv.report],
      ['--plans', argv.plans],
    ] as const)
      if (path) ensureWritableFile(path, flag);
    if (argv.rescore) {
      const s = rescore(argv);
      if (argv.report) writeFileSync(argv.report, JSON.stringify({ ...s, meta: { rescored: argv.rescore } }, null, 2) + '\n');
      process.stdout.write(formatProtocolScore(s) + '\n');
      return;
    }
    // Every file — PaperGym items, imported benchmarks — goes through the one protocol loop.
    return benchmarkEval(argv, readEvalItems(argv.data).items);
  },
};

/**
 * `eval` over imported benchmark items: the protocol of `--protocol` (default: the items' format),
 * plans prompted as the format says, rows with every verdict (--out), the protocol score with its
 * groups and CI (stdout, --report). HTTP judge answers are cached (default `<out|data>.judge-cache.sqlite`),
 * so a killed run asks again only what was not answered; Ctrl-C exits 130 with the resume command.
 */
async function benchmarkEval(argv: EvalArgs, loaded: BenchmarkItem[]): Promise<void> {
  let items = argv.split ? loaded.filter((it) => it.split === argv.split) : loaded;
  if (argv.limit !== undefined) items = items.slice(0, argv.limit);
  if (!items.length) throw new Error(`${argv.data}: no items to evaluate${argv.split ? ` in split ${argv.split}` : ''}`);
  const p = protocolFor(items, argv.protocol);
  const jc = judgeWithAnswerCache(judgeConfigFromArgs(argv), evalJudgeCachePath(argv.out, argv.data));
  await checkJudge(jc);
  const device = resolveDevice(argv.device);
  process.stderr.write(
    `eval: ${argv.model}${argv.adapter ? ` + ${argv.adapter}` : ''} on ${device}; ${items.length} item(s), protocol ${p.name}${jc.cache ? `; judge cache ${jc.cache}` : ''}\n`,
  );
  const refs = await resolvePolicyRefs(argv as { model: string; adapter?: string; revision?: string });
  const policy = await Policy.load(refs.model, {
    adapter: refs.adapter,
    device: device as Device,
    dtype: argv.dtype as Dtype | undefined,
    allowNonFinite: argv.allowNonFiniteWeights,
  });
  try {
    const t0 = Date.now();
    const res = await evalOnPolicy(argv, policy, items, p, jc, 'eval');
    if (res === InterruptedRun) return;
    const { rows, plans, judgeName, stats } = res;
    if (argv.out) writeRowsJsonl(argv.out, rows as never);
    if (argv.plans) writeFileSync(argv.plans, plans.map((x) => JSON.stringify(x)).join('\n') + '\n');
    assertProtocolHealth(p, rows, jc.maxNullRate, judgeName);
    const s = scoreRows(p, rows, { resamples: argv.resamples, seed: argv.seed, alpha: argv.rewardAlpha });
    if (!s.score) throw new JudgeHealthError(`eval (${p.name}): no plan could be scored (${s.skipped} skipped); no score written`);
    const meta = {
      model: argv.model,
      adapter: argv.adapter ?? null,
      data: argv.data,
      judge: judgeName,
      judgeStats: stats,
      samples: argv.samples,
      seconds: (Date.now() - t0) / 1000,
    };
    // A jury: its members' agreement (lib/judge/agreement.ts) in the report and the summary.
    const agreement = rowsAgreement(rows as never, { resamples: argv.resamples, seed: argv.seed });
    // PaperGym: the paper's coverage view of the same rows (micro coverage, item origins, P(yes)), same null rule.
    const coverage = p.coverageView ? buildReport(rows as EvalRow[], { resamples: argv.resamples, seed: argv.seed, alpha: argv.rewardAlpha }) : undefined;
    if (coverage) delete coverage.agreement;
    // PaperGym items built as different data experiments (build-data provenance): one coverage report per group too.
    const byProvenance = coverage
      ? reportsByProvenance(
          readDataset(argv.data, { onProblem: () => {} }).items.filter((it) => items.some((x) => x.id === it.id)),
          rows as EvalRow[],
          { resamples: argv.resamples, seed: argv.seed, alpha: argv.rewardAlpha },
        )
      : undefined;
    if (argv.report)
      writeFileSync(
        argv.report,
        JSON.stringify({ ...s, ...(coverage && { coverage }), ...(byProvenance && { byProvenance }), ...(agreement && { agreement }), meta }, null, 2) + '\n',
      );
    process.stdout.write(
      formatProtocolScore(s) +
        '\n' +
        (coverage ? formatReport(coverage) + '\n' : '') +
        (byProvenance ? formatProvenanceReports(byProvenance) + '\n' : '') +
        (agreement ? formatAgreement(agreement) + '\n' : ''),
    );
  } finally {
    policy.dispose();
  }
}

/**
 * The protocol of `--protocol`, else of the items' (first) format.
 * @throws Error naming --protocol when it does not apply to an item (never ignored)
 */
export function protocolFor(items: BenchmarkItem[], name?: string, where = '--protocol'): Protocol {
  const formats = [...new Set(items.map((it) => it.format))];
  const p = getProtocol(name ?? getFormat(formats[0]!).protocol);
  for (const it of items) {
    const why = p.inapplicable?.(it);
    if (why) throw new Error(`${where} ${p.name} does not apply: ${why}`);
  }
  if (formats.length > 1 && !name) process.stderr.write(`eval: note: items of formats ${formats.join(', ')}; scoring all with ${p.name} (pass --protocol)\n`);
  return p;
}

/**
 * Generates and judges `items` on a loaded policy: the protocol's judges opened and closed here,
 * a progress bar (plain lines under CI / without a TTY), Ctrl-C → InterruptedRun (exit 130 with the
 * resume command; judge answers so far stay cached). Prints the judge's counters and failure rate.
 */
async function evalOnPolicy(argv: EvalArgs, policy: Policy, items: BenchmarkItem[], p: Protocol, jc: JudgeConfig, label: string) {
  // Every question's prompt (as the generator is given it) + --max-new-tokens against the context, before any plan.
  await assertPromptsFit(items, (i) => policyPromptOf(promptOf(items[i]!)), policy, {
    maxNewTokens: argv.maxNewTokens,
    enableThinking: argv.thinking,
    what: `${label}: ${[...new Set(items.map((it) => it.source.file))].join(', ')}`,
    where: (i) => `${items[i]!.source.file} row ${items[i]!.source.row}`,
  });
  const general = p.generalRubric && argv.general ? loadGeneralRubric(argv.generalRubric).items : [];
  let judges: Awaited<ReturnType<typeof openProtocolJudges>> | undefined;
  const progress = new Progress({
    label,
    unit: 'plans',
    total: items.length * argv.samples,
    silent: argv.progress === 'none',
    plain: argv.progress === 'plain' ? true : undefined,
    load: () => judges?.chatJudge?.load() ?? { active: 0, queued: 0 },
  });
  try {
    const prompt = protocolPromptOf(p, jc, argv.protocolPrompt);
    judges = await openProtocolJudges(p, jc, policy, prompt);
    if (judges.chatJudge) judges.chatJudge.observer = progress;
    const res = await handleInterrupt(
      'eval',
      (signal) =>
        runBenchmark({
          items,
          protocol: p,
          judge: judges!.judge,
          chatJudge: judges!.chatJudge,
          general,
          generator: policyPlanGenerator(policy, {
            temperature: argv.temperature,
            topP: argv.topP,
            topK: argv.topK,
            maxNewTokens: argv.maxNewTokens,
            enableThinking: argv.thinking,
          }),
          samples: argv.samples,
          chunkSize: argv.chunk,
          genSeed: argv.seed,
          keepRaw: argv.keepRaw,
          prompt,
          signal,
          onPlan: () => progress.tick(),
        }),
      () => (jc.cache ? `every judge answer so far is cached in ${jc.cache}` : 'nothing was cached (local judge)'),
    );
    progress.stop();
    if (res === InterruptedRun) return res;
    const stats = judges.chatJudge?.stats() ?? judges.judge?.stats();
    process.stderr.write(`judge ${judges.name}: ${JSON.stringify(stats)}\n`);
    const nulls = nullCount(p, res.rows);
    // Binary verdicts: the judge-health breakdown (refusals, unreadable replies, failed requests).
    const health = judgeHealth(res.rows.map((r) => ({ itemId: r.itemId, met: r.met, refused: r.refused, error: r.error }) as Verdict));
    process.stderr.write(
      p.verdict === 'binary'
        ? `judge health: ${health.verdicts} verdicts, ${formatHealth(health) || 'no verdicts'}\n`
        : `judge health: ${res.rows.length} verdicts, ${nulls} null or unreadable (${res.rows.length ? ((100 * nulls) / res.rows.length).toFixed(1) : '0'}%)\n`,
    );
    return { ...res, judgeName: judges.name, stats };
  } finally {
    progress.stop();
    await judges?.judge?.close?.();
    judges?.chatJudge?.close();
  }
}

/**
 * `eval --suite suite.yaml --out DIR`: every benchmark for every model (lib/eval/suite.ts), one
 * policy loaded at a time; rows per cell in DIR/ROWS, then DIR/suite.json, DIR/table.md and
 * DIR/report.html (the table). A judge that mostly fails on any cell fails the command.
 */
async function suiteEval(argv: EvalArgs): Promise<void> {
  const suite = readSuite(argv.suite!);
  const outDir = argv.out ?? argv.suite!.replace(/\.ya?ml$/i, '') + '-results';
  refuseSuiteOverwrite(outDir, argv.overwrite === true, argv.out === undefined);
  mkdirSync(outDir, { recursive: true });
  const benches = suite.benchmarks.map((b) => {
    let items = readEvalItems(b.data).items;
    if (b.limit !== undefined) items = items.slice(0, b.limit);
    if (!items.length) throw new Error(`${argv.suite}: benchmark ${b.name}: ${b.data} has no items`);
    return { ...b, items, protocol: protocolFor(items, b.protocol, `${argv.suite}: benchmark ${b.name}: protocol`) };
  });
  const jc = judgeWithAnswerCache(judgeConfigFromArgs(argv), join(outDir, 'judge-cache.sqlite'));
  await checkJudge(jc);
  const device = resolveDevice(argv.device);
  const rows: ProtocolRow[][][] = [];
  for (const m of suite.models) {
    process.stderr.write(`eval --suite: ${m.name}: ${m.model}${m.adapter ? ` + ${m.adapter}` : ''} on ${device}\n`);
    const refs = await resolvePolicyRefs({ model: m.model, adapter: m.adapter });
    const policy = await Policy.load(refs.model, { adapter: refs.adapter, device: device as Device, dtype: argv.dtype as Dtype | undefined });
    const per: ProtocolRow[][] = [];
    try {
      for (const b of benches) {
        const res = await evalOnPolicy(argv, policy, b.items, b.protocol, jc, `${m.name}/${b.name}`);
        if (res === InterruptedRun) return;
        writeRowsJsonl(join(outDir, `${safeName(m.name)}.${safeName(b.name)}.rows.jsonl`), res.rows as never);
        assertProtocolHealth(b.protocol, res.rows, jc.maxNullRate, res.judgeName);
        per.push(res.rows);
      }
    } finally {
      policy.dispose();
    }
    rows.push(per);
  }
  const table = suiteTable({ benchmarks: benches.map((b) => ({ name: b.name, protocol: b.protocol.name })), models: suite.models }, rows, {
    resamples: argv.resamples,
    seed: argv.seed,
    alpha: argv.rewardAlpha,
  });
  writeFileSync(join(outDir, 'suite.json'), JSON.stringify(table, null, 2) + '\n');
  const md = formatSuiteTable(table);
  writeFileSync(join(outDir, 'table.md'), md + '\n');
  const html = writeReport({
    runs: [],
    out: join(outDir, 'report.html'),
    suite: table,
    png: false,
    title: `papergym-native benchmarks: ${basename(argv.suite!)}`,
  });
  process.stdout.write(md + '\n');
  process.stderr.write(`eval --suite: rows, suite.json, table.md and ${html.html} in ${outDir}\n`);
}

/**
 * A suite's results already in `outDir` (suite.json, table.md, report.html or a rows file) are not
 * replaced without `--overwrite`.
 * @throws Error naming the dir, what it holds, and the two ways on.
 */
export function refuseSuiteOverwrite(outDir: string, overwrite: boolean, defaulted: boolean): void {
  if (overwrite || !existsSync(outDir)) return;
  const held = readdirSync(outDir).filter((f) => ['suite.json', 'table.md', 'report.html'].includes(f) || f.endsWith('.rows.jsonl'));
  if (!held.length) return;
  throw new Error(
    `eval --suite: ${outDir}${defaulted ? ' (the default --out: <suite>-results)' : ''} already holds a suite's results (${held.slice(0, 3).join(', ')}${held.length > 3 ? ', …' : ''}); pass --overwrite to replace them, or another --out`,
  );
}

const safeName = (s: string) => s.replace(/[^\w.-]+/g, '_');
