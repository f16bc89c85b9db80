/**
 * `papergym-native compare --data items.jsonl --plans a.jsonl b.jsonl [c.jsonl…] --judge http …`:
 * the paper's Table 2 N-way win rate. Per question with a plan from every system, the judge picks
 * the best plan under every candidate order (all permutations up to 4 systems, else a Latin
 * square), so position bias cancels; ties and unreadable replies are counted; win rate per system
 * with a question-bootstrap CI; the position-bias figure is printed. Answers are cached in SQLite
 * (`--judge-cache`, default `<out>.compare-cache.sqlite`, else under the per-user cache dir; lib/eval/run.ts evalJudgeCachePath): a killed run asks nothing twice when rerun.
 * Exit 1 when the judge mostly fails (no win rate written). `--judge jury --judges FILE`: a jury of
 * free-form judges (see compareWithJury below). The paired bootstrap of two eval row files stays in
 * `report --eval a.jsonl --eval b.jsonl`.
 */
import { basename } from 'node:path';
import { writeFileSync } from 'node:fs';
import type { CommandModule } from 'yargs';
import { COMPARE_OPTIONS, compareOptions } from '../../lib/config/settings.js';
import { addSettings, parseList } from '../../lib/config/schema.js';
import { readEvalItems } from '../../lib/data/schema.js';
import { Progress } from '../../lib/data/progress.js';
import { ChatJudge } from '../../lib/eval/chat-judge.js';
import { evalJudgeCachePath } from '../../lib/eval/run.js';
import {
  arenaHardWinRate,
  candidateOrders,
  COMPARE_PAIRWISE_PROMPT,
  COMPARE_PROMPT,
  compareSystems,
  compareSystemsWithJury,
  formatJuryCompare,
  formatPairwise,
  formatWinRates,
  lengthControlledWinRate,
  juryCompareSummary,
  readPlans,
  winRates,
  type CompareJuryMember,
} from '../../lib/eval/compare.js';
import type { JudgeConfig } from '../../lib/config/judge.js';
import { checkJudge, judgeAnswersFreeForm, judgeHasMembers, judgeLabel } from '../../lib/judge/backends/index.js';
import { juryRunMembers } from '../../lib/judge/jury.js';
import { JudgeHealthError } from '../../lib/judge/types.js';
import { loadPrompt } from '../../lib/judge/verdict.js';
import { ensureWritableFile } from '../../lib/util/fs.js';
import { judgeConfigFromArgs, juryFlagsError, juryFlagsGiven, type JudgeArgs } from '../judge-options.js';
import { handleInterrupt, InterruptedRun } from './build-data.js';

interface CompareArgs extends JudgeArgs {
  data: string;
  plans: string | string[];
  out?: string;
  report?: string;
  resamples: number;
  seed: number;
  keepRaw: boolean;
  winRate: 'choice' | 'arena-hard';
  progress: 'auto' | 'plain' | 'none';
}

/** The progress display of `total` judgements (`--progress`), with the judge's requests in flight and queued from `load`. */
function judgementProgress(argv: Pick<CompareArgs, 'progress'>, total: number, load: () => { active: number; queued: number }): Progress {
  return new Progress({
    label: 'compare',
    unit: 'judgements',
    total,
    silent: argv.progress === 'none',
    plain: argv.progress === 'plain' ? true : undefined,
    load,
  });
}

export const compareCommand: CommandModule<object, CompareArgs> = {
  command: 'compare',
  describe: "N-way win rates of systems' plans judged on the same questions (candidate order permuted, ties and unreadable replies counted)",
  builder: (y) => addSettings(y, compareOptions(), { withDefaults: true }).demandOption(['data', 'plans']) as never,
  handler: async (argv) => {
    for (const [flag, path] of [
      ['--out', argv.out],
      ['--report', argv.report],
    ] as const)
      if (path) ensureWritableFile(path, flag);
    const specs = parseList(
      COMPARE_OPTIONS.find((s) => s.key === 'plans')!,
      argv.plans,
    ) as string[];
    if (specs.length < 2) throw new Error(`--plans needs two or more files (got ${specs.length})`);
    const systems = specs.map((sp) => {
      const eq = sp.indexOf('=');
      const [name, path] = eq > 0 ? [sp.slice(0, eq), sp.slice(eq + 1)] : [basename(sp).replace(/\.jsonl?$/, ''), sp];
      const { plans, notes } = readPlans(path);
      for (const n of notes) process.stderr.write(`compare: ${path}: ${n}\n`);
      return { name, plans };
    });
    if (new Set(systems.map((s) => s.name)).size !== systems.length)
      throw new Error(`--plans: system names repeat (${systems.map((s) => s.name).join(', ')}); name them NAME=FILE`);
    const items = readEvalItems(argv.data).items;
    const questions = items.filter((it) => systems.every((s) => s.plans.has(it.id))).map((it) => ({ id: it.id, question: it.question }));
    const left = items.length - questions.length;
    if (!questions.length) throw new Error(`${argv.data}: no question has a plan in every --plans file`);
    const jc = judgeConfigFromArgs(argv);
    if (!jc.cache) jc.cache = evalJudgeCachePath(argv.out, argv.data, 'compare');
    const pairwise = argv.winRate === 'arena-hard';
    if (pairwise && systems.length !== 2)
      throw new Error(`--win-rate arena-hard compares two systems, the baseline first (got ${systems.length}: ${systems.map((s) => s.name).join(', ')})`);
    if (pairwise && judgeHasMembers(jc)) throw new Error('--win-rate arena-hard takes one judge (--judge http)');
    if (judgeHasMembers(jc)) return compareWithJury(argv, jc, systems, questions, left);
    const juryFlags = juryFlagsGiven(argv as unknown as Record<string, unknown>);
    if (juryFlags.length) throw juryFlagsError('compare', juryFlags, `got --judge ${jc.kind}`);
    await checkJudge(jc);
    const judge = new ChatJudge(jc, jc.cache);
    const orders = candidateOrders(systems.length).length;
    process.stderr.write(
      `compare: ${systems.map((s) => s.name).join(' vs ')} on ${questions.length} question(s) × ${orders} order(s)${left ? ` (${left} without a plan from every system left out)` : ''}; judge cache ${jc.cache}\n`,
    );
    const progress = judgementProgress(argv, questions.length * orders, () => judge.load());
    judge.observer = progress;
    try {
      const js = await handleInterrupt(
        'compare',
        (signal) =>
          compareSystems({
            questions,
            systems,
            judge,
            keepRaw: argv.keepRaw,
            maxTokens: jc.maxTokens ?? undefined,
            pairwise,
            signal,
            onJudgement: (_j, cached) => progress.tick(cached),
          }),
        () => `every judge answer so far is cached in ${jc.cache}`,
      );
      progress.stop();
      if (js === InterruptedRun) return;
      const prompt = loadPrompt(pairwise ? COMPARE_PAIRWISE_PROMPT : COMPARE_PROMPT);
      // Every judgement row names the prompt it was asked with and the hash of its text.
      if (argv.out)
        writeFileSync(
          argv.out,
          js
            .map((j) =>
              JSON.stringify({
                ...j,
                order: j.order.map((i) => systems[i]!.name),
                winner: typeof j.winner === 'number' ? systems[j.winner]!.name : j.winner,
                prompt: prompt.name,
                promptHash: prompt.hash,
              }),
            )
            .join('\n') + '\n',
        );
      const r = winRates(
        systems.map((s) => s.name),
        js,
        { resamples: argv.resamples, seed: argv.seed },
      );
      process.stderr.write(`judge ${judge.name}: ${JSON.stringify(judge.stats())}\n`);
      const badRate = r.judgements ? r.unreadable / r.judgements : 0;
      if (badRate > jc.maxNullRate) {
        throw new JudgeHealthError(
          `judge ${judge.name}: compare: ${r.unreadable} of ${r.judgements} judgements unreadable or failed (${(100 * badRate).toFixed(0)}% > ${(100 * jc.maxNullRate).toFixed(0)}%: ${r.failed} failed requests); no win rate written`,
        );
      }
      // Arena-Hard's score and AlpacaEval's length-controlled rate: the second system against the first (the baseline).
      const arena = pairwise
        ? arenaHardWinRate(
            r.systems.map((x) => x.name),
            js,
            1,
            0,
            { seed: argv.seed },
          )
        : undefined;
      const lc = pairwise
        ? lengthControlledWinRate(
            r.systems.map((x) => x.name),
            js,
            (q, s) => systems[s]!.plans.get(q)!.length,
            1,
            0,
          )
        : undefined;
      if (argv.report)
        writeFileSync(
          argv.report,
          JSON.stringify(
            {
              ...r,
              ...(arena && { arenaHard: arena, lengthControlled: lc }),
              prompt: { name: prompt.name, sha256: prompt.hash },
              judge: judge.name,
              judgeStats: judge.stats(),
            },
            null,
            2,
          ) + '\n',
        );
      process.stdout.write(
        formatWinRates(r) + '\n' + (arena && lc ? formatPairwise(arena, lc) + '\n' : '') + `judge prompt: ${prompt.name} (sha256 ${prompt.hash})\n`,
      );
    } finally {
      progress.stop();
      judge.close();
    }
  },
};

/**
 * `compare --judge jury --judges judges.yaml`: every member (each one that answers free-form: http)
 * asked every (question, order); the jury's choice by weighted plurality (lib/eval/compare.ts
 * compareSystemsWithJury); rows keep each member's choice (`judges`), the summary each member's win
 * rates and health and their agreement (share of equal choices, Cohen's κ, Fleiss' κ with CIs).
 */
async function compareWithJury(
  argv: CompareArgs,
  jc: JudgeConfig,
  systems: { name: string; plans: Map<string, string> }[],
  questions: { id: string; question: string }[],
  left: number,
): Promise<void> {
  const warn = (m: string) => process.stderr.write(`warning: ${m}\n`);
  const members = juryRunMembers(jc, 'compare', {
    canAnswer: judgeAnswersFreeForm,
    needs: "compare's N-way choice is a free-form question: every member needs kind http with url and model (a local judge gives only yes/no verdicts)",
    onWarning: warn,
  });
  await checkJudge(jc);
  const aggregation = jc.aggregation as 'majority' | 'unanimous';
  const opened: CompareJuryMember[] = [];
  const name = judgeLabel(jc);
  const names = systems.map((s) => s.name);
  const orders = candidateOrders(systems.length).length;
  try {
    for (const m of members)
      opened.push({ name: m.name, weight: m.weight, maxNullRate: m.maxNullRate, judge: new ChatJudge(m.config, m.config.cache ?? undefined) });
    const caches = [...new Set(members.map((m) => m.config.cache))].join(', ');
    process.stderr.write(
      `compare: ${names.join(' vs ')} on ${questions.length} question(s) × ${orders} order(s)${left ? ` (${left} without a plan from every system left out)` : ''}; ` +
        `jury ${name}, on member failure ${jc.juryOnMemberFailure}; judge cache ${caches}\n`,
    );
    const progress = judgementProgress(argv, questions.length * orders, () =>
      opened.reduce(
        (t, m) => {
          const l = m.judge.load();
          return { active: t.active + l.active, queued: t.queued + l.queued };
        },
        { active: 0, queued: 0 },
      ),
    );
    try {
      const res = await handleInterrupt(
        'compare',
        (signal) =>
          compareSystemsWithJury({
            questions,
            systems,
            members: opened,
            aggregation,
            juryOnMemberFailure: jc.juryOnMemberFailure,
            keepRaw: argv.keepRaw,
            maxTokens: jc.maxTokens ?? undefined,
            signal,
            onWarning: warn,
            onJudgement: (_j, cached) => progress.tick(cached),
          }),
        () => `every judge answer so far is cached in ${caches}`,
      );
      progress.stop();
      if (res === InterruptedRun) return;
      const sys = (w: number | 'tie' | null) => (typeof w === 'number' ? names[w]! : w);
      if (argv.out)
        writeFileSync(
          argv.out,
          res.judgements
            .map((j) =>
              JSON.stringify({
                questionId: j.questionId,
                order: j.order.map((i) => names[i]!),
                winner: sys(j.winner),
                position: j.position,
                ...(j.error && { error: true }),
                judges: Object.fromEntries(Object.entries(j.members).map(([k, m]) => [k, m ? sys(m.winner) : null])),
                ...(argv.keepRaw && { raw: Object.fromEntries(Object.entries(j.members).map(([k, m]) => [k, m?.raw ?? null])) }),
              }),
            )
            .join('\n') + '\n',
        );
      const r = winRates(names, res.judgements, { resamples: argv.resamples, seed: argv.seed });
      const jury = await juryCompareSummary(names, res, members, aggregation, { resamples: argv.resamples, seed: argv.seed });
      for (const m of opened) process.stderr.write(`judge ${m.name} (${m.judge.name}): ${JSON.stringify(m.judge.stats())}\n`);
      const badRate = r.judgements ? r.unreadable / r.judgements : 0;
      if (badRate > jc.maxNullRate) {
        throw new JudgeHealthError(
          `judge ${name}: compare: ${r.unreadable} of ${r.judgements} jury judgements without a readable member choice (${(100 * badRate).toFixed(0)}% > ${(100 * jc.maxNullRate).toFixed(0)}%); no win rate written`,
        );
      }
      if (argv.report)
        writeFileSync(
          argv.report,
          JSON.stringify({ ...r, judge: name, jury, judgeStats: Object.fromEntries(opened.map((m) => [m.name, m.judge.stats()])) }, null, 2) + '\n',
        );
      process.stdout.write(formatWinRates(r) + '\n' + (await formatJuryCompare(jury)) + '\n');
    } finally {
      progress.stop();
    }
  } finally {
    for (const m of opened) m.judge.close();
  }
}
