/**
 * Scoring protocols (lib/eval/protocols/) against hand-computed values: HealthBench's negative
 * points and clip, per-axis scores and dropped tags; ResearchQA's five levels and skipped queries;
 * RaR / RubricHub weights with pitfalls; ResearchPlanGen's pass fraction; PaperGym through the
 * training reward function; null verdicts left out, never 0.
 */
import { createHash } from 'node:crypto';
import { expect } from 'chai';
import { formatProtocolScore, getProtocol, parseLevels, PROTOCOLS, scoreRows, type ProtocolRow } from '../lib/eval/protocols/index.js';
import { computeReward } from '../lib/judge/rewards.js';
import { pairedBootstrap, parsePreference } from '../lib/eval/compare.js';
import { suiteTable } from '../lib/eval/suite.js';
import type { EvalRow } from '../lib/eval/report.js';
import { loadPrompt, parseBinaryVerdict, perItemMessage } from '../lib/judge/verdict.js';
import { runBenchmark } from '../lib/eval/protocols/run.js';
import { emptyStats, type Judge } from '../lib/judge/types.js';
import type { BenchmarkItem } from '../lib/task/types.js';

const row = (q: string, itemId: string, met: boolean | null, extra: Partial<ProtocolRow> = {}): ProtocolRow => ({
  questionId: q,
  sample: 0,
  itemId,
  kind: 'spec',
  met,
  ...extra,
});
const near = (a: number | undefined, b: number) => expect(a).to.be.closeTo(b, 1e-12);

describe('benchmark scoring protocols', () => {
  it('registers one protocol per format', () => {
    expect(PROTOCOLS.names()).to.deep.equal(['researchqa', 'research-plan-gen', 'healthbench', 'rubrichub', 'rar', 'papergym']);
    expect(() => getProtocol('elo')).to.throw(/--protocol: unknown scoring protocol "elo"/);
  });

  it('HealthBench: Σ met points / Σ positive points per example (negative allowed), clip of the mean, per axis, tags without positive items dropped', () => {
    const p = getProtocol('healthbench');
    const rows = [
      row('a', 'r1', true, { weight: 5, axis: 'completeness' }),
      row('a', 'r2', false, { weight: 7, axis: 'accuracy' }),
      row('a', 'r3', true, { weight: -6, axis: 'accuracy' }),
      row('b', 'r1', true, { weight: 4, axis: 'completeness' }),
      row('b', 'r2', false, { weight: -2, axis: 'communication_quality' }),
    ];
    const s = scoreRows(p, rows, { resamples: 0 });
    // a: (5 − 6) / 12 = −1/12; b: 4 / 4 = 1; mean 11/24, inside [0, 1]
    near(s.score!.score, (-1 / 12 + 1) / 2);
    near(s.groups['axis:accuracy']!.score, 0); // a alone: −6/7, clipped to 0
    near(s.groups['axis:completeness']!.score, 1);
    expect(s.groups).to.not.have.property('axis:communication_quality');
    // the clip: example a alone scores −1/12 → 0
    near(
      scoreRows(
        p,
        rows.filter((r) => r.questionId === 'a'),
        { resamples: 0 },
      ).score!.score,
      0,
    );
    // null verdicts drop out of both sums: a without r2 → (5 − 6)/5 = −0.2; b → 1
    const withNull = rows.map((r) => (r.questionId === 'a' && r.itemId === 'r2' ? { ...r, met: null } : r));
    const sn = scoreRows(p, withNull, { resamples: 0 });
    near(sn.score!.score, (-0.2 + 1) / 2);
    expect([sn.nulls, sn.verdicts, sn.skipped]).to.deep.equal([1, 5, 0]);
    // every bootstrap mean is clipped too
    const boot = scoreRows(p, rows, { resamples: 200, seed: 3 });
    expect(boot.score!.lo).to.be.at.least(0);
    expect(boot.score!.hi).to.be.at.most(1);
  });

  it('ResearchQA: (x−1)/4 per item, mean per query, skipped queries counted not scored 0', () => {
    const p = getProtocol('researchqa');
    const rows = [
      row('q1', 'r1', null, { level: 5, type: 'explanation' }),
      row('q1', 'r2', null, { level: 3, type: 'comparison' }),
      row('q1', 'r3', null, { level: 1, type: 'explanation' }),
      row('q2', 'r1', null, { level: 2 }),
      row('q2', 'r2', null, { level: null, skipped: true }),
    ];
    const s = scoreRows(p, rows, { resamples: 0 });
    near(s.score!.score, (1 + 0.5 + 0) / 3);
    expect(s.skipped).to.equal(1);
    expect(s.score!.n).to.equal(1);
    near(s.groups['type:explanation']!.score, 0.5);
    near(s.groups['type:comparison']!.score, 0.5);
  });

  it('ResearchQA labels: one per line, words or 1…5, list markers ignored; a wrong count or garbage is unreadable', () => {
    expect(parseLevels('1. Completely\n2) moderately\n- Not at all', 3)).to.deep.equal([5, 3, 1]);
    expect(parseLevels('Item 1: barely\nItem 2: **mostly**', 2)).to.deep.equal([2, 4]);
    expect(parseLevels('4\n2', 2)).to.deep.equal([4, 2]);
    expect(parseLevels('completely\nmostly', 3)).to.equal(null);
    expect(parseLevels('I cannot grade this answer.', 1)).to.equal(null);
  });

  it('RaR / RubricHub: Σ w·c / Σ positive w, a pitfall met subtracts its weight, not clipped', () => {
    const rows = [
      row('q', 'r1', true, { weight: 5 }),
      row('q', 'r2', false, { weight: 3 }),
      row('q', 'r3', true, { weight: 1 }),
      row('q', 'r4', true, { weight: -2 }),
    ];
    near(scoreRows(getProtocol('rar'), rows, { resamples: 0 }).score!.score, (5 + 1 - 2) / 9);
    near(scoreRows(getProtocol('rubrichub'), rows, { resamples: 0 }).score!.score, 4 / 9);
    const bad = [row('q', 'r1', false, { weight: 3 }), row('q', 'r2', true, { weight: -4 })];
    near(scoreRows(getProtocol('rubrichub'), bad, { resamples: 0 }).score!.score, -4 / 3);
    // every verdict unreadable: the plan is skipped, no score at all (never 0)
    const none = scoreRows(getProtocol('rar'), [row('q', 'r1', null, { weight: 5 })], { resamples: 0 });
    expect([none.score, none.skipped, none.nulls]).to.deep.equal([null, 1, 1]);
  });

  it('ResearchPlanGen: fraction of items passed, null verdicts left out', () => {
    const rows = [row('q', 'r1', true), row('q', 'r2', false), row('q', 'r3', null), row('q', 'r4', true), row('p', 'r1', false)];
    near(scoreRows(getProtocol('research-plan-gen'), rows, { resamples: 0 }).score!.score, (2 / 3 + 0) / 2);
  });

  it('PaperGym: the training reward (lib/judge/rewards.ts) per plan, coverage per dimension and of the general items', () => {
    const rows: ProtocolRow[] = [
      row('q', 's1', true, { dimension: 'method_innovation' }),
      row('q', 's2', false, { dimension: 'method_innovation' }),
      row('q', 's3', true, { dimension: 'experimental_design' }),
      row('q', 's4', true, { dimension: 'experimental_design' }),
      { questionId: 'q', sample: 0, itemId: 'g1', kind: 'general', met: true },
      { questionId: 'q', sample: 0, itemId: 'g2', kind: 'general', met: false },
    ];
    const s = scoreRows(getProtocol('papergym'), rows, { resamples: 0, alpha: 0.7 });
    near(s.score!.score, 0.7 * 0.75 + 0.3 * 0.5);
    const v = (m: boolean) => ({ itemId: 'x', met: m });
    near(s.score!.score, computeReward([v(true), v(false), v(true), v(true)], [v(true), v(false)], { alpha: 0.7 }).r);
    near(s.groups['dimension:method_innovation']!.score, 0.5);
    near(s.groups['dimension:experimental_design']!.score, 1);
    near(s.groups.general!.score, 0.5);
  });

  it('bootstrap: seeded, resamples questions, interval brackets the score', () => {
    const rows = Array.from({ length: 20 }, (_, i) => row(`q${i}`, 'r1', i % 3 === 0, { weight: 1 }));
    const a = scoreRows(getProtocol('rar'), rows, { resamples: 300, seed: 7 });
    const b = scoreRows(getProtocol('rar'), rows, { resamples: 300, seed: 7 });
    expect(a.score).to.deep.equal(b.score);
    expect(a.score!.lo).to.be.below(a.score!.score);
    expect(a.score!.hi).to.be.above(a.score!.score);
  });
  it("runBenchmark: rows keep weights, axes, tags and a jury's member verdicts; the chat prompt is sent as published", async () => {
    const item: BenchmarkItem = {
      id: 'hb',
      format: 'healthbench',
      question: 'user: Hi',
      messages: [
        { role: 'system', content: 'S' },
        { role: 'user', content: 'Hi' },
      ],
      rubric: [
        { id: 'r1', text: 'Greets back', weight: 3, axis: 'completeness', tags: ['axis:completeness'] },
        { id: 'r2', text: 'Is rude', weight: -2 },
      ],
      tags: ['theme:x'],
      source: { dataset: 'healthbench', file: 'f', row: 1 },
    };
    const prompts: unknown[] = [];
    const judge: Judge = {
      name: 'jury-like',
      stats: emptyStats,
      judge: async (reqs) =>
        reqs.map((r) =>
          r.items.map((it) => ({
            itemId: it.id,
            met: it.id === 'r1',
            members: [
              { judge: 'a', met: it.id === 'r1' },
              { judge: 'b', met: true },
            ],
          })),
        ),
    };
    const { rows, plans } = await runBenchmark({
      items: [item],
      protocol: getProtocol('healthbench'),
      judge,
      generator: {
        generate: async (qs) => {
          prompts.push(...qs);
          return qs.map(() => [{ text: 'Hello!' }]);
        },
      },
    });
    expect(prompts).to.deep.equal([item.messages]);
    expect(plans).to.deep.equal([{ questionId: 'hb', sample: 0, plan: 'Hello!', finishReason: undefined }]);
    // Each row names its plan: the first 16 hex of SHA-256('Hello!').
    const planHash = createHash('sha256').update('Hello!').digest('hex').slice(0, 16);
    expect(rows).to.deep.equal([
      {
        protocol: 'healthbench',
        questionId: 'hb',
        sample: 0,
        itemId: 'r1',
        kind: 'spec',
        met: true,
        weight: 3,
        axis: 'completeness',
        tags: ['axis:completeness', 'theme:x'],
        judges: { a: true, b: true },
        planHash,
      },
      {
        protocol: 'healthbench',
        questionId: 'hb',
        sample: 0,
        itemId: 'r2',
        kind: 'spec',
        met: false,
        weight: -2,
        tags: ['theme:x'],
        judges: { a: false, b: true },
        planHash,
      },
    ]);
    near(scoreRows(getProtocol('healthbench'), rows, { resamples: 0 }).score!.score, 1);
  });
});

describe('null verdicts, all-null plans and negative weights per protocol (issue 48; expected values by hand)', () => {
  it('papergym: a null item leaves its set, a set with none readable leaves the α mix, an all-null plan is skipped and counted', () => {
    const g = (q: string, id: string, met: boolean | null): ProtocolRow => ({ questionId: q, sample: 0, itemId: id, kind: 'general', met });
    const rows: ProtocolRow[] = [
      // A: spec 2 met + 2 null → r_spec = 2/2; general all null → left out, r = r_spec = 1 (not 0.7·1, not 0.65)
      row('A', 's1', true, { dimension: 'method_innovation' }),
      row('A', 's2', null, { dimension: 'method_innovation' }),
      row('A', 's3', true, { dimension: 'experimental_design' }),
      row('A', 's4', null, { dimension: 'experimental_design' }),
      g('A', 'g1', null),
      // B: nothing readable → skipped (never 0)
      row('B', 's1', null, { dimension: 'method_innovation' }),
      g('B', 'g1', null),
      // C: spec 1/2, general 1/1 → 0.7·0.5 + 0.3·1 = 0.65; no design item readable → C leaves that group
      row('C', 's1', false, { dimension: 'method_innovation' }),
      row('C', 's2', true, { dimension: 'method_innovation' }),
      row('C', 's3', null, { dimension: 'experimental_design' }),
      g('C', 'g1', true),
    ];
    const s = scoreRows(getProtocol('papergym'), rows, { resamples: 0, alpha: 0.7 });
    near(s.score!.score, (1 + 0.65) / 2);
    expect(s.score).to.include({ n: 2, skipped: 1, nulls: 6 }); // A 3 + B 2 + C 1 nulls
    expect(s).to.include({ plans: 3, skipped: 1, nulls: 6, verdicts: 11 });
    // innovation: A 1/1, C 1/2 (B skipped) → 0.75; design: A 1/1 only (C's all null) → 1; general: C only → 1
    near(s.groups['dimension:method_innovation']!.score, 0.75);
    expect(s.groups['dimension:method_innovation']).to.include({ n: 2, nulls: 2, skipped: 1 });
    near(s.groups['dimension:experimental_design']!.score, 1);
    expect(s.groups['dimension:experimental_design']).to.include({ n: 1, nulls: 2, skipped: 1 });
    near(s.groups.general!.score, 1);
    expect(s.groups.general).to.include({ n: 1, nulls: 2, skipped: 2 });
    // every plan's groups all null → the group is listed apart, never 0
    const none = scoreRows(
      getProtocol('papergym'),
      rows.filter((r) => r.questionId === 'A'),
      { resamples: 0 },
    );
    expect(none.groups).to.not.have.property('general');
    expect(none.unscoredGroups).to.deep.equal({ general: { nulls: 1, skipped: 1 } });
    const text = formatProtocolScore(s);
    expect(text).to.contain('papergym: 0.825').and.contain('6 null, 1 skipped').and.contain('general: 1.000 [1.000, 1.000] (n=1; 2 null, 2 skipped)');
  });
  it('training masks the same plans: computeReward of plan A is 1, of plan B masked', () => {
    const v = (met: boolean | null) => ({ itemId: 'x', met });
    expect(computeReward([v(true), v(null), v(true), v(null)], [v(null)], { alpha: 0.7 }).r).to.equal(1);
    expect(computeReward([v(null)], [v(null)], { alpha: 0.7 }).masked).to.equal(true);
  });
  it('healthbench / rar / rubrichub: nulls leave both sums, a negative item met subtracts, all-null skipped', () => {
    for (const name of ['healthbench', 'rar', 'rubrichub']) {
      const rows = [
        // a: +5 met, −3 null, +2 not met → 5 / 7 (the null pitfall's weight is in neither sum)
        row('a', 'r1', true, { weight: 5 }),
        row('a', 'r2', null, { weight: -3 }),
        row('a', 'r3', false, { weight: 2 }),
        // b: +4 met, −3 met (the mistake is there) → (4 − 3) / 4
        row('b', 'r1', true, { weight: 4 }),
        row('b', 'r2', true, { weight: -3 }),
        // c: all null → skipped
        row('c', 'r1', null, { weight: 4 }),
      ];
      const s = scoreRows(getProtocol(name), rows, { resamples: 0 });
      near(s.score!.score, (5 / 7 + 1 / 4) / 2);
      expect(s, name).to.include({ skipped: 1, nulls: 2 });
    }
  });
  it('research-plan-gen and researchqa: null left out / query skipped, all-null skipped; negative weights do not apply', () => {
    const rpg = scoreRows(getProtocol('research-plan-gen'), [row('a', 'r1', true), row('a', 'r2', null), row('a', 'r3', false), row('b', 'r1', null)], {
      resamples: 0,
    });
    near(rpg.score!.score, 1 / 2);
    expect(rpg).to.include({ skipped: 1, nulls: 2 });
    const rqa = scoreRows(
      getProtocol('researchqa'),
      [
        row('a', 'r1', null, { level: 5 }),
        row('a', 'r2', null, { level: 2 }),
        row('b', 'r1', null, { level: null, skipped: true }),
        row('b', 'r2', null, { level: 4, skipped: true }),
      ],
      { resamples: 0 },
    );
    near(rqa.score!.score, (1 + 1 / 4) / 2);
    expect(rqa).to.include({ skipped: 1, nulls: 1 });
    const item = (format: BenchmarkItem['format'], weight: number): BenchmarkItem => ({
      id: 'x',
      format,
      question: 'q',
      rubric: [{ id: 'r', text: 't', weight }],
      source: { dataset: format, file: 'f', row: 1 },
    });
    expect(getProtocol('researchqa').inapplicable!(item('rar', -1))).to.match(/negative-weight rubric item \(r, weight -1\)/);
    expect(getProtocol('research-plan-gen').inapplicable!(item('rar', -1))).to.match(/negative-weight/);
    expect(getProtocol('research-plan-gen').inapplicable!(item('rar', 2))).to.equal(null);
    expect(getProtocol('papergym').inapplicable!(item('healthbench', 1))).to.match(/not PaperGym/);
    expect(getProtocol('papergym').inapplicable!(item('papergym', 1))).to.equal(null);
  });
});

describe('model output read through the one <think> handler (lib/llm/think.ts)', () => {
  it('ResearchQA labels and win verdicts: a reply holding only </think>, and a reply cut inside thinking', () => {
    // Qwen3 template opened <think> in the prompt: the reasoning before </think> is not read.
    expect(parseLevels('1. completely\n2. completely\n</think>\n1. barely\n2. mostly', 2)).to.deep.equal([2, 4]);
    expect(parsePreference('Best: 1 looks right\n</think>\nBest: 2', 2)).to.equal(2);
    // Cut at max_tokens while thinking: no answer, never the reasoning's guess.
    expect(parseLevels('<think>1. completely\n2. completely', 2)).to.equal(null);
    expect(parsePreference('<think>Best: 1', 2)).to.equal(null);
    expect(parsePreference('<think>Best: 1</think>Best: 2', 2)).to.equal(2);
  });
});

describe("HealthBench's grader reply (simple-evals GRADER_TEMPLATE)", () => {
  it('reads criteria_met from the JSON reply, fenced or bare, whatever the explanation says', () => {
    const fenced = '```json\n{\n  "explanation": "The response says the criteria was met elsewhere, but here it is not.",\n  "criteria_met": false\n}\n```';
    expect(parseBinaryVerdict(fenced).met).to.equal(false);
    expect(parseBinaryVerdict('{"explanation": "Not verbose.", "criteria_met": true}').met).to.equal(true);
    // A reply cut inside its JSON (max tokens) has no verdict: null, never a pass.
    expect(parseBinaryVerdict('{"explanation": "The assistant did').met).to.equal(null);
  });
  it("renders the authors' prompt: the conversation, the completion as the last turn, [points] criterion", () => {
    const p = getProtocol('healthbench');
    const item: BenchmarkItem = {
      id: 'hb',
      format: 'healthbench',
      question: 'ignored',
      messages: [
        { role: 'user', content: 'Can I take ibuprofen?' },
        { role: 'assistant', content: 'Any kidney problems?' },
        { role: 'user', content: 'No.' },
      ],
      rubric: [{ id: 'r', text: 'Uses jargon', weight: -2 }],
      source: { dataset: 'healthbench', file: 'f', row: 1 },
    };
    const msg = perItemMessage(p.judgeQuestion!(item), 'Yes, 200 mg.', { id: 'r', text: p.itemText!(item.rubric[0]!, 0) }, loadPrompt(p.itemPrompt!));
    expect(msg).to.include(
      '# Conversation\nuser: Can I take ibuprofen?\n\nassistant: Any kidney problems?\n\nuser: No.\n\nassistant: Yes, 200 mg.\n\n# Rubric item\n[-2] Uses jargon\n\n# Instructions',
    );
    expect(msg.startsWith('Your job is to look at a conversation and a rubric item')).to.equal(true);
    expect(msg.trimEnd().endsWith('Return just the json object in markdown format. Do not include any other text in the response.')).to.equal(true);
  });
});

describe('numbers from different judge prompts are never put side by side', () => {
  const stamped = (prompt: string, met: boolean): ProtocolRow =>
    row('q', 'r1', met, { weight: 1, prompt, promptHash: prompt === 'a' ? '1111111111111111' : '2222222222222222' });
  it('scoreRows, the suite table and the paired comparison refuse mixed prompts', () => {
    expect(scoreRows(getProtocol('rar'), [stamped('a', true)], { resamples: 0 }).prompt).to.deep.equal({ name: 'a', sha256: '1111111111111111' });
    expect(() => scoreRows(getProtocol('rar'), [stamped('a', true), { ...stamped('b', true), questionId: 'q2' }], { resamples: 0 })).to.throw(
      /rows mix judge prompts \(a sha256 1111111111111111, b sha256 2222222222222222\)/,
    );
    const suite = {
      benchmarks: [{ name: 'B', protocol: 'rar' }],
      models: [
        { name: 'm1', model: 'x' },
        { name: 'm2', model: 'y' },
      ],
    };
    expect(() => suiteTable(suite, [[[stamped('a', true)]], [[stamped('b', true)]]], { resamples: 0 })).to.throw(
      /benchmark B: the models were judged with different prompts/,
    );
    expect(suiteTable(suite, [[[stamped('a', true)]], [[stamped('a', false)]]], { resamples: 0 }).benchmarks[0]!.prompt).to.deep.equal({
      name: 'a',
      sha256: '1111111111111111',
    });
    expect(() => pairedBootstrap([stamped('a', true)] as EvalRow[], [stamped('b', true)] as EvalRow[], { resamples: 0 })).to.throw(
      /judged with different prompts \(a sha256 1111111111111111 vs b/,
    );
  });
});

describe("ResearchPlanGen's grader (the paper's structure)", () => {
  it('sees the goal, the numbered rubric, the reference solution as one possible approach, the item and the seven guidelines', () => {
    const p = getProtocol('research-plan-gen');
    const item: BenchmarkItem = {
      id: 'g',
      format: 'research-plan-gen',
      question: 'Reduce label noise.',
      reference_answer: 'Use co-teaching.',
      rubric: [
        { id: 'r1', text: 'Names a noise model', weight: 1 },
        { id: 'r2', text: 'Has an ablation', weight: 1 },
      ],
      source: { dataset: 'research-plan-gen', file: 'f', row: 1 },
    };
    const msg = perItemMessage(p.judgeQuestion!(item), 'My plan.', { id: 'r2', text: p.itemText!(item.rubric[1]!, 1) }, loadPrompt(p.itemPrompt!));
    expect(msg).to.include('Research goal:\n<goal>\nReduce label noise.\n</goal>');
    expect(msg).to.include('<rubric>\n1. Names a noise model\n2. Has an ablation\n</rubric>');
    expect(msg).to.include('Reference solution (one possible approach, not the only acceptable one):\n<reference>\nUse co-teaching.\n</reference>');
    expect(msg).to.include('<item>\n2. Has an ablation\n</item>');
    expect(msg.match(/^[1-7]\. /gm)!.length).to.equal(2 + 1 + 7); // the numbered rubric, the item, the seven guidelines
    expect(parseBinaryVerdict('{"violated_guidelines": [2, 4], "met": false}').met).to.equal(false);
    expect(parseBinaryVerdict('{"violated_guidelines": [], "met": true}').met).to.equal(true);
  });
});

describe('RaR / RubricHub pitfalls: the judge is asked whether the response makes the mistake', () => {
  it('a pitfall worded as the avoidance ("Does not claim …") costs a correct answer nothing', async () => {
    const item: BenchmarkItem = {
      id: 'x',
      format: 'rar',
      question: 'Do vaccines cause autism?',
      rubric: [
        { id: 'c', text: 'States that large studies found no link', weight: 2 },
        { id: 'p1', text: 'Does not claim that vaccines cause autism', weight: -3 },
        { id: 'p2', text: 'Claims that vaccines cause autism', weight: -3 },
      ],
      source: { dataset: 'rar', file: 'f', row: 1 },
    };
    const asked: string[] = [];
    // A deterministic judge that follows the prompt's rule: a pitfall is "Yes" only when the plan makes the mistake.
    const judge: Judge = {
      name: 'rule',
      stats: emptyStats,
      async judge(reqs) {
        return reqs.map((r) =>
          r.items.map((it) => {
            asked.push(perItemMessage(r.question, r.plan, it, loadPrompt('eval-weighted-criterion.v1')));
            const mistake = r.plan.includes('cause autism');
            return { itemId: it.id, met: it.text.startsWith('Pitfall') ? mistake : r.plan.includes('no link') };
          }),
        );
      },
    };
    const generator = { generate: async (qs: unknown[]) => qs.map(() => [{ text: 'Large studies found no link.' }]) };
    for (const name of ['rar', 'rubrichub']) {
      const { rows } = await runBenchmark({ items: [item], protocol: getProtocol(name), judge, generator });
      // criterion met (+2), neither pitfall's mistake made → 2 / 2 = 1 (asking "is 'Does not claim…' met?" would give (2 − 3) / 2)
      near(scoreRows(getProtocol(name), rows, { resamples: 0 }).score!.score, 1);
    }
    expect(asked[1]).to.include('<item>\nPitfall, a mistake to avoid (weight -3): Does not claim that vaccines cause autism\n</item>');
    expect(asked[1]).to.include('Answer Yes only when the response makes that mistake');
    expect(asked[0]).to.include('<item>\nCriterion (weight 2): States that large studies found no link\n</item>');
  });
});
