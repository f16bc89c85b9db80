import { readFileSync, writeFileSync } from 'node:fs';
import { resolveModelRef } from '../../lib/hub/resolve.js';
import { basename } from 'node:path';
import type { CommandModule } from 'yargs';
import { JUDGE_AGREEMENT_OPTIONS, judgeOptions } from '../../lib/config/settings.js';
import { addSettings, parseList } from '../../lib/config/schema.js';
import { readDataset, type PaperGymItem } from '../../lib/data/schema.js';
import { checkJudge, judgeSharesPolicyWeights, membersKind, openJudge } from '../../lib/judge/backends/index.js';
import { JuryJudge, agreementUnitsFromVerdicts } from '../../lib/judge/jury.js';
import { formatAgreement, judgeAgreement, levelAgreement } from '../../lib/judge/agreement.js';
import { readEvalRows } from '../../lib/eval/compare.js';
import { agreementDimension } from '../../lib/eval/report.js';
import { RESEARCHQA_LEVELS, type ProtocolRow } from '../../lib/eval/protocols/index.js';
import { resolveDevice } from '../../lib/model/device.js';
import type { Device, Dtype } from '../../lib/model/qwen3.js';
import { judgeConfigFromArgs, type JudgeArgs } from '../judge-options.js';

interface AgreementArgs extends JudgeArgs {
  data: string;
  plans: string;
  rows?: string | string[];
  judges?: string;
  labels?: string;
  model?: string;
  out?: string;
  resamples: number;
  seed: number;
  json: boolean;
  device: string;
  dtype?: string;
}

/** One plan of plans.jsonl (`eval --plans` rows: `{questionId, sample, plan}`). */
interface PlanRow {
  id: string;
  questionId: string;
  plan: string;
}

/** Plan id of a question and sample (sample 0 when absent). */
const planId = (questionId: string, sample: unknown) => `${questionId}#${typeof sample === 'number' ? sample : 0}`;

function readJsonl(path: string, what: string, each: (o: Record<string, unknown>, line: number) => void): void {
  readFileSync(path, 'utf8')
    .split(/\r?\n/)
    .forEach((line, i) => {
      if (!line.trim()) return;
      let o: unknown;
      try {
        o = JSON.parse(line);
      } catch (e) {
        throw new Error(`${path}: line ${i + 1}: not JSON (${(e as Error).message})`);
      }
      if (!o || typeof o !== 'object' || Array.isArray(o)) throw new Error(`${path}: line ${i + 1}: must be an object (${what})`);
      each(o as Record<string, unknown>, i + 1);
    });
}

/** Reads plans.jsonl; every plan must name a question of `items`. @throws Error naming the file and line. */
export function readPlanRows(path: string, items: Map<string, PaperGymItem>): PlanRow[] {
  const out: PlanRow[] = [];
  const seen = new Set<string>();
  readJsonl(path, '{questionId, sample?, plan}', (o, line) => {
    if (typeof o.questionId !== 'string' || typeof o.plan !== 'string') throw new Error(`${path}: line ${line}: needs questionId and plan strings`);
    if (!items.has(o.questionId)) throw new Error(`${path}: line ${line}: questionId ${JSON.stringify(o.questionId)} names no item of --data`);
    const id = planId(o.questionId, o.sample);
    if (seen.has(id)) throw new Error(`${path}: line ${line}: plan ${id} given twice`);
    seen.add(id);
    out.push({ id, questionId: o.questionId, plan: o.plan });
  });
  if (!out.length) throw new Error(`${path}: no plans`);
  return out;
}

/**
 * Reads labels.jsonl (`{questionId, sample?, itemId, label: true|false}` per line, a person's verdict;
 * `met` is read as `label` too). @throws Error naming the file and line for a label naming an unknown
 * plan or rubric item, a non-boolean label, or a unit labelled twice.
 */
export function readLabels(path: string, plans: PlanRow[], items: Map<string, PaperGymItem>): Map<string, boolean> {
  const byId = new Map(plans.map((p) => [p.id, p]));
  const out = new Map<string, boolean>();
  readJsonl(path, '{questionId, sample?, itemId, label}', (o, line) => {
    const id = typeof o.questionId === 'string' ? planId(o.questionId, o.sample) : undefined;
    if (!id || !byId.has(id)) throw new Error(`${path}: line ${line}: plan ${JSON.stringify(id ?? o.questionId)} is not in --plans`);
    const item = items.get(o.questionId as string)!;
    if (typeof o.itemId !== 'string' || !item.rubric.some((r) => r.id === o.itemId))
      throw new Error(`${path}: line ${line}: itemId ${JSON.stringify(o.itemId)} is not a rubric item of ${o.questionId}`);
    const v = o.label ?? o.met;
    if (typeof v !== 'boolean') throw new Error(`${path}: line ${line}: label must be true or false (got ${JSON.stringify(v)})`);
    const k = `${id}\u0000${o.itemId}`;
    if (out.has(k)) throw new Error(`${path}: line ${line}: ${id} ${o.itemId} labelled twice`);
    out.set(k, v);
  });
  return out;
}

/**
 * `judge-agreement --rows a=rows-a.jsonl b=rows-b.jsonl …`: the agreement of verdicts already
 * recorded by `eval --out`, one file per judge (the same items and plans): units are (question,
 * sample, rubric item) present in every file; binary verdicts give the κs and nominal α (lib/judge/
 * agreement.ts judgeAgreement), five-level rows (ResearchQA) also ordinal and nominal α over the
 * levels (levelAgreement). @throws Error naming the file when a file has no rows or names repeat
 */
function rowsAgreementCommand(argv: AgreementArgs): void {
  const specs = parseList(
    JUDGE_AGREEMENT_OPTIONS.find((s) => s.key === 'rows')!,
    argv.rows,
  ) as string[];
  if (specs.length < 2) throw new Error(`--rows needs two or more files (got ${specs.length})`);
  const files = specs.map((sp) => {
    const eq = sp.indexOf('=');
    const [name, path] = eq > 0 ? [sp.slice(0, eq), sp.slice(eq + 1)] : [basename(sp).replace(/\.jsonl?$/, ''), sp];
    const { rows, notes } = readEvalRows(path);
    for (const n of notes) process.stderr.write(`judge-agreement: ${path}: ${n}\n`);
    if (!rows.length) throw new Error(`${path}: no eval rows`);
    return { name, rows: rows as ProtocolRow[] };
  });
  const names = files.map((f) => f.name);
  if (new Set(names).size !== names.length) throw new Error(`--rows: judge names repeat (${names.join(', ')}); name them NAME=FILE`);
  const key = (r: ProtocolRow) => `${r.questionId}#${r.sample}\u0000${r.itemId}`;
  const maps = files.map((f) => new Map(f.rows.map((r) => [key(r), r])));
  const shared = [...maps[0]!.keys()].filter((k) => maps.every((m) => m.has(k)));
  if (!shared.length) throw new Error(`--rows: the files share no (question, sample, rubric item)`);
  const first = maps[0]!;
  // Agreement needs the judges to have rated the same plans: rows carry the hash of the plan they
  // judged (planHash), so two files of different plans (a base model's and an adapter's) are refused.
  const hashed = files.map((f) => f.rows.some((r) => typeof r.planHash === 'string'));
  if (hashed.every(Boolean)) {
    for (const k of shared) {
      const hs = maps.map((m) => m.get(k)!.planHash);
      if (hs.some((h) => typeof h === 'string') && hs.some((h) => h !== hs[0])) {
        const r = first.get(k)!;
        throw new Error(
          `--rows: the files judged different plans: question ${r.questionId} sample ${r.sample} item ${r.itemId} has plan hash ` +
            `${files.map((f, i) => `${f.name}=${hs[i] ?? 'none'}`).join(', ')}; agreement needs the same plans rated by each judge ` +
            `(judge one set of plans with each judge: judge-agreement --data --plans --judges, or eval with a jury)`,
        );
      }
    }
  } else
    process.stderr.write(
      `judge-agreement: warning: ${files
        .filter((_, i) => !hashed[i])
        .map((f) => f.name)
        .join(', ')} carry no planHash (rows written before it was recorded): that the files judged the same plans cannot be checked\n`,
    );
  const units = shared.map((k) => {
    const r = first.get(k)!;
    return {
      planId: `${r.questionId}#${r.sample}`,
      itemId: r.itemId,
      cluster: r.questionId,
      ...agreementDimension(r),
      verdicts: Object.fromEntries(names.map((n, i) => [n, maps[i]!.get(k)!.met])),
    };
  });
  const o = { resamples: argv.resamples, seed: argv.seed };
  const report = judgeAgreement(units, names, o);
  const levelled = files.every((f) => f.rows.some((r) => r.level !== undefined));
  const levels = levelled
    ? levelAgreement(
        shared.map((k) => {
          const r = first.get(k)!;
          return {
            planId: `${r.questionId}#${r.sample}`,
            itemId: r.itemId,
            cluster: r.questionId,
            levels: Object.fromEntries(names.map((n, i) => [n, maps[i]!.get(k)!.level ?? null])),
          };
        }),
        names,
        RESEARCHQA_LEVELS.length,
        o,
      )
    : undefined;
  const full = { agreement: report, ...(levels && { levels }), units: shared.length };
  if (argv.out) writeFileSync(argv.out, JSON.stringify(full, null, 2) + '\n');
  const f = (e: { value: number | null; lo: number | null; hi: number | null; reason?: string }) =>
    e.value === null ? `n/a (${e.reason})` : `${e.value.toFixed(3)} [${e.lo?.toFixed(3) ?? '?'}, ${e.hi?.toFixed(3) ?? '?'}]`;
  process.stdout.write(
    (argv.json
      ? JSON.stringify(full, null, 2)
      : formatAgreement(report) +
        (levels ? `\n  five levels (${levels.units} units): Krippendorff α ordinal ${f(levels.ordinal)}, nominal ${f(levels.nominal)}` : '')) + '\n',
  );
}

/**
 * `papergym-native judge-agreement --data items.jsonl --plans plans.jsonl --judges judges.yaml
 * [--labels labels.jsonl]`: every judge of the list (a jury, lib/judge/jury.ts) decides every
 * rubric item of every plan; prints per pair of judges the share of equal verdicts and Cohen's κ,
 * Fleiss' κ over all, each with a bootstrap CI, overall and per rubric dimension; with labels, each
 * judge's agreement, precision, recall and F1 against them (lib/judge/agreement.ts).
 */
export const judgeAgreementCommand: CommandModule<object, AgreementArgs> = {
  command: 'judge-agreement',
  describe: "Agreement of several judges with each other (Cohen's and Fleiss' κ, bootstrap CIs) and with people's labels (precision, recall, F1)",
  builder: (y) =>
    addSettings(addSettings(y, JUDGE_AGREEMENT_OPTIONS, { withDefaults: true }), judgeOptions(), { withDefaults: true }).check((a) => {
      if (!a.rows && (!a.data || !a.plans || !a.judges)) throw new Error('judge-agreement needs --data, --plans and --judges (or --rows FILE FILE …)');
      return true;
    }) as never,
  handler: async (argv) => {
    if (argv.rows) return rowsAgreementCommand(argv);
    const items = new Map(readDataset(argv.data).items.map((it) => [it.id, it]));
    if (!items.size) throw new Error(`${argv.data}: no valid items`);
    const plans = readPlanRows(argv.plans, items);
    const labels = argv.labels ? readLabels(argv.labels, plans, items) : undefined;
    if (labels && !labels.size) process.stderr.write(`warning: labels file ${argv.labels} has no labels: no agreement with people's labels is reported\n`);
    const jc = { ...judgeConfigFromArgs(argv), kind: membersKind() };
    await checkJudge(jc);
    const onModel = judgeSharesPolicyWeights(jc);
    if (onModel && !argv.model) throw new Error('a local judge in --judges needs --model DIR');
    const judge = await openJudge(
      jc,
      onModel
        ? {
            modelDir: await resolveModelRef(argv.model!, { what: '--model' }),
            device: resolveDevice(argv.device) as Device,
            dtype: argv.dtype as Dtype | undefined,
          }
        : {},
    );
    try {
      if (!(judge instanceof JuryJudge)) throw new Error('judge-agreement: --judges did not open a jury');
      const reqs = plans.map((p) => {
        const it = items.get(p.questionId)!;
        return { question: it.question, plan: p.plan, items: it.rubric.map((r) => ({ id: r.id, text: r.text })) };
      });
      const verdicts = await judge.judge(reqs);
      const dims = new Map(plans.map((p) => [p.id, new Map(items.get(p.questionId)!.rubric.map((r) => [r.id, r.dimension]))]));
      const byPlan = new Map(plans.map((p) => [p.id, p.questionId]));
      const units = agreementUnitsFromVerdicts(
        plans.map((p) => p.id),
        verdicts,
        { dimension: (pid, iid) => dims.get(pid)?.get(iid), cluster: (pid) => byPlan.get(pid)! },
      );
      if (labels) for (const u of units) if (labels.has(`${u.planId}\u0000${u.itemId}`)) u.label = labels.get(`${u.planId}\u0000${u.itemId}`);
      const report = judgeAgreement(units, judge.memberNames(), { resamples: argv.resamples, seed: argv.seed });
      const full = { agreement: report, memberHealth: judge.memberHealth(), stats: judge.stats(), plans: plans.length, labelled: labels?.size ?? 0 };
      if (argv.out) writeFileSync(argv.out, JSON.stringify(full, null, 2) + '\n');
      process.stdout.write((argv.json ? JSON.stringify(full, null, 2) : formatAgreement(report)) + '\n');
    } finally {
      await judge.close?.();
    }
  },
};
