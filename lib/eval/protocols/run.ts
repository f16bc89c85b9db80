/**
 * The eval loop of imported benchmarks: generate plans for every item (prompted as its format
 * says: the task's plan prompt, the question alone, or the published chat messages), judge them
 * the protocol's way, and keep one row per rubric item with every verdict (lib/eval/protocols/
 * types.ts ProtocolRow) so the score can be recomputed from the rows alone. Generation and
 * judging overlap (chunk k is judged while chunk k+1 samples). Binary protocols ask the Judge
 * contract (lib/judge/types.ts; any backend); ResearchQA asks a {@link ChatJudge} for its five
 * levels, 8 items per call, retrying an unreadable reply 3 times before the query is skipped.
 */
import { createHash } from 'node:crypto';
import type { GeneralRubricItem } from '../../data/schema.js';
import type { Judge } from '../../judge/types.js';
import { loadPrompt, renderTemplate } from '../../judge/verdict.js';
import type { ChatMessage } from '../../llm/messages.js';
import { stripThink } from '../../llm/think.js';
import type { BenchmarkItem } from '../../task/types.js';
import type { ChatJudge } from '../chat-judge.js';
import { getFormat } from '../formats/index.js';
import type { EvalPlan, PlanGenerator } from '../run.js';
import { parseLevels, RESEARCHQA_BATCH, RESEARCHQA_LEVELS, RESEARCHQA_RETRIES } from './researchqa.js';
import { isNull } from './score.js';
import type { Protocol, ProtocolRow } from './types.js';

/** The ResearchQA coverage prompt (prompts/). */
export const RESEARCHQA_PROMPT = 'eval-researchqa-coverage.v1';

/** How the policy is asked for `item`'s plan: a string gets the task's student prompt; messages go as they are. */
export function promptOf(item: BenchmarkItem): string | ChatMessage[] {
  const style = getFormat(item.format).prompt;
  if (style === 'plan') return item.question;
  if (style === 'chat' && item.messages?.length) return item.messages;
  return [{ role: 'user', content: item.question }];
}

/** Options of {@link runBenchmark}. */
export interface BenchmarkEvalOptions {
  items: BenchmarkItem[];
  protocol: Protocol;
  generator: PlanGenerator;
  /** Binary protocols (and ResearchQA without a chat judge, read as 1 / 5). */
  judge?: Judge;
  /** ResearchQA's five levels. */
  chatJudge?: ChatJudge;
  /** PaperGym: the general items judged for every plan. */
  general?: GeneralRubricItem[];
  samples?: number;
  chunkSize?: number;
  genSeed?: number;
  keepRaw?: boolean;
  /** The judge prompt (name, SHA-256 prefix) stamped on every row; see lib/eval/protocols/types.ts ProtocolRow.prompt. */
  prompt?: { name: string; hash: string };
  /** Called per judged plan. */
  onPlan?: (done: number, total: number) => void;
  signal?: AbortSignal;
}

/**
 * The identity of a judged plan on its rows: the first 16 hex of the SHA-256 of the plan text (UTF-8,
 * after the thinking block is stripped), so that `judge-agreement --rows` can tell two files that
 * judged the same plans from two that judged different ones (a base model's and an adapter's).
 */
export function planHash(plan: string): string {
  return createHash('sha256').update(plan, 'utf8').digest('hex').slice(0, 16);
}

/** Rows of one plan from a binary judge's verdicts. */
function rowsOfItem(item: BenchmarkItem, sample: number, p: Protocol): ProtocolRow[] {
  return item.rubric.map((r) => ({
    protocol: p.name,
    questionId: item.id,
    sample,
    itemId: r.id,
    kind: 'spec' as const,
    met: null,
    weight: r.weight,
    ...(r.dimension && { dimension: r.dimension }),
    ...(r.origin && { origin: r.origin }),
    ...(r.axis && { axis: r.axis }),
    ...(r.type && { type: r.type }),
    ...((r.tags?.length || item.tags?.length) && { tags: [...(r.tags ?? []), ...(item.tags ?? [])] }),
  }));
}

/** ResearchQA levels of one plan: batches of 8 items, each retried until its labels can be read. */
async function rateLevels(
  cj: ChatJudge,
  item: BenchmarkItem,
  plan: string,
  rows: ProtocolRow[],
  keepRaw: boolean,
  signal?: AbortSignal,
  promptName = RESEARCHQA_PROMPT,
): Promise<void> {
  const prompt = loadPrompt(promptName);
  for (let s = 0; s < item.rubric.length; s += RESEARCHQA_BATCH) {
    const part = item.rubric.slice(s, s + RESEARCHQA_BATCH);
    const content = renderTemplate(prompt.template, {
      question: item.question,
      plan,
      count: String(part.length),
      items: part.map((r, k) => `${k + 1}. ${r.text}`).join('\n'),
    });
    let levels: number[] | null = null;
    let last = '';
    let failed = false;
    for (let attempt = 0; attempt <= RESEARCHQA_RETRIES && !levels; attempt++) {
      const a = await cj.ask(prompt, [{ role: 'user', content }], { maxTokens: 16 * part.length + 32, attempt, signal });
      failed = a.content === null;
      last = a.content ?? a.error ?? '';
      levels = a.content === null ? null : parseLevels(a.content, part.length);
    }
    part.forEach((_r, k) => {
      const row = rows[s + k]!;
      row.level = levels ? levels[k]! : null;
      if (!levels) {
        row.skipped = true;
        if (failed) row.error = true;
      }
      if (keepRaw) row.raw = last;
    });
  }
  // The authors leave the whole query out when any call of it cannot be read.
  if (rows.some((r) => r.skipped)) for (const r of rows) r.skipped = true;
}

/**
 * Runs the benchmark: rows ordered by item, sample, rubric item (then general items for PaperGym).
 * @throws Error when the protocol needs a judge that was not given; the abort reason on abort
 */
export async function runBenchmark(o: BenchmarkEvalOptions): Promise<{ rows: ProtocolRow[]; plans: EvalPlan[] }> {
  const samples = o.samples ?? 1;
  const chunk = Math.max(1, o.chunkSize ?? 8);
  const p = o.protocol;
  if (!o.judge && !(p.verdict === 'levels' && o.chatJudge)) throw new Error(`protocol ${p.name} needs a judge`);
  const general = p.generalRubric ? (o.general ?? []) : [];
  const byItem: ProtocolRow[][] = new Array(o.items.length * samples);
  const plans: EvalPlan[] = [];
  const judging: Promise<void>[] = [];
  let done = 0;
  const total = o.items.length * samples;
  for (let start = 0, k = 0; start < o.items.length; start += chunk, k++) {
    o.signal?.throwIfAborted();
    const part = o.items.slice(start, start + chunk);
    const gen = await o.generator.generate(part.map(promptOf), { samples, seed: (o.genSeed ?? 0) + k, signal: o.signal });
    if (gen.length !== part.length || gen.some((g) => g.length !== samples))
      throw new Error(`generator returned ${gen.map((g) => g.length)} plans for ${part.length} questions × ${samples}`);
    const jobs = part.flatMap((it, i) =>
      gen[i]!.map((g, s) => {
        const plan = stripThink(g.text);
        plans.push({ questionId: it.id, sample: s, plan, finishReason: g.finishReason });
        return { it, s, plan, slot: (start + i) * samples + s };
      }),
    );
    const tick = () => o.onPlan?.(++done, total);
    if (p.verdict === 'levels' && o.chatJudge) {
      const cj = o.chatJudge;
      judging.push(
        ...jobs.map(async (j) => {
          const rows = rowsOfItem(j.it, j.s, p);
          await rateLevels(cj, j.it, j.plan, rows, !!o.keepRaw, o.signal, o.prompt?.name);
          for (const r of rows) r.planHash = planHash(j.plan);
          byItem[j.slot] = rows;
          tick();
        }),
      );
      continue;
    }
    const judge = o.judge!;
    judging.push(
      (async () => {
        const verdicts = await judge.judge(
          jobs.map((j) => ({
            question: p.judgeQuestion ? p.judgeQuestion(j.it) : j.it.question,
            plan: j.plan,
            items: [
              ...j.it.rubric.map((r, k) => ({ id: r.id, text: p.itemText ? p.itemText(r, k) : r.text })),
              ...general.map((g) => ({ id: g.id, text: g.text })),
            ],
          })),
          { signal: o.signal },
        );
        jobs.forEach((j, n) => {
          const rows: ProtocolRow[] = [
            ...rowsOfItem(j.it, j.s, p),
            ...general.map((g) => ({ protocol: p.name, questionId: j.it.id, sample: j.s, itemId: g.id, kind: 'general' as const, met: null, weight: 1 })),
          ];
          verdicts[n]!.forEach((v, m) => {
            const row = rows[m]!;
            row.met = v.met;
            if (p.verdict === 'levels') {
              // A binary judge for ResearchQA: met → completely (5), not met → not at all (1), null → skipped.
              row.level = v.met === null ? null : v.met ? RESEARCHQA_LEVELS.length : 1;
              if (v.met === null) row.skipped = true;
            }
            if (v.prob !== undefined) row.prob = v.prob;
            if (v.refused) row.refused = true;
            if (v.error) row.error = true;
            // A jury's members, as lib/eval/run.ts keeps them (the rows' judge agreement).
            if (v.members) row.judges = Object.fromEntries(v.members.map((m) => [m.judge, m.met]));
            if (o.keepRaw && v.raw !== undefined) row.raw = v.raw;
          });
          if (p.verdict === 'levels' && rows.some((r) => r.skipped)) for (const r of rows) r.skipped = true;
          for (const r of rows) r.planHash = planHash(j.plan);
          byItem[j.slot] = rows;
          tick();
        });
      })(),
    );
  }
  await Promise.all(judging);
  const rows = byItem.flat();
  if (o.prompt) for (const r of rows) Object.assign(r, { prompt: o.prompt.name, promptHash: o.prompt.hash });
  return { rows, plans };
}

/** Null verdicts of rows (levels: unreadable labels), for the failure rate. */
export function nullCount(p: Protocol, rows: ProtocolRow[]): number {
  return rows.filter((r) => isNull(p, r)).length;
}
