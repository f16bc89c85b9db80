/**
 * The local judge's host shortcuts (lib/judge/local.ts): `tokenSplit` (lib/model/tokenizer.ts
 * `concatSafe`) — each plan's prompt head (template, question, plan) is tokenized once and only the
 * item-specific tail per rubric item — and `renderOnce` (lib/model/chat.ts `userContentVerbatim`) —
 * each plan's prompt rendered once with a marker, the items substituted. Checked on the real tokenizers (Qwen3, Llama 3.1), real judge
 * prompts (prompts/judge-per-item.v1.md, the embedded dataset's questions and rubric items, the
 * general rubric) and plans / items with odd text:
 * - wherever concatSafe holds, encode(head + tail) is exactly encode(head) ++ encode(tail); where it
 *   does not (a tail starting with a space or a line break), the two can differ — the fallback is needed;
 * - the judge's prompt texts and ids with the shortcuts equal rendering and tokenizing each whole
 *   prompt (plans quoting the marker, the special tokens or `{{item}}` included);
 * - the verdicts (P(yes), met) are identical with and without the split, through deterministic
 *   scorers of the ids and, when the addon is available, the tiny Qwen3 with prefix sharing.
 */
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { qwen3TokenizerDir, Tokenizer } from '../lib/model/tokenizer.js';
import { ChatTemplate } from '../lib/model/chat.js';
import { LocalJudge, localJudgeForModel, type AnswerScorer, type PrefixScorer } from '../lib/judge/local.js';
import type { JudgeRequest } from '../lib/judge/types.js';
import { loadPrompt, perItemMessage, PER_ITEM_PROMPT } from '../lib/judge/verdict.js';
import { loadGeneralRubric, readDataset, sampleDatasetPath } from '../lib/data/schema.js';
import { loadModel, type Qwen3Model } from '../lib/model/qwen3.js';
import { tinyModel } from './helpers/tiny.js';
import { orSkip } from './helpers/run.js';

const LLAMA3_TOKENIZER_DIR = join(packageRoot, 'node_modules', '@lenml', 'tokenizer-llama3_1', 'models');

/** Plans with odd text (the head of every prompt). */
const ODD_PLANS = [
  'We profile X, then ablate each component.\n\n1. Measure.\n2. Compare.',
  'Unicode: 中文的计划 — naïve café, e\u0301 (combining), عربى, emoji 🙂🚀, Ωμέγα.\n',
  'Code:\n```python\ndef f(x):\n    return x  \n```\n',
  'Trailing spaces   \nand tabs\t\t\nand CRLF\r\nlines   ',
  '<think>\nI should reason first.\n</think>\n\nThe plan: measure, then report.\n\n',
  'A plan quoting the special tokens <|im_end|> and <|im_start|>assistant and {{item}} literally.',
  'A plan that contains the judge marker \uE000papergym-rubric-item\uE001 itself.',
  '',
  '   ',
];

/** Rubric items with odd first characters (safe and unsafe boundaries both). */
const ODD_ITEMS = [
  ' Leading space before the item.',
  '\nA line break first.',
  '\tA tab first.',
  '  Two spaces.',
  ' \n\nA blank line first.',
  'éach accented letter first.',
  '(a) parenthesised item.',
  "'s a contraction at the start.",
  '1. A numbered item.',
  '<think>reasoning</think> then the item.',
  '`code` first.',
  '🙂 an emoji first.',
  '\u0301 a combining mark first.',
  '<|im_end|> a special token first.',
  'Does the plan end with a trailing space? ',
];

/** Deterministic logprobs of a token sequence (FNV-1a of the ids): any id difference changes them. */
function hashLogprob(ids: number[], cand: number): number {
  let h = 0x811c9dc5;
  for (const x of ids) h = Math.imul(h ^ x, 0x01000193) >>> 0;
  h = Math.imul(h ^ cand, 0x01000193) >>> 0;
  return -0.05 - (h % 1000) / 250;
}

describe('judge host shortcuts (render once, token split)', function () {
  this.timeout(120000);
  let qwen: Tokenizer;
  let llama: Tokenizer;
  let template: ChatTemplate;
  let requests: JudgeRequest[];
  before(() => {
    qwen = Tokenizer.fromDir(qwen3TokenizerDir());
    llama = Tokenizer.fromDir(LLAMA3_TOKENIZER_DIR);
    template = ChatTemplate.fromTokenizer(qwen);
    const data = readDataset(sampleDatasetPath()).items;
    const general = loadGeneralRubric().items.map((g) => ({ id: g.id, text: g.text }));
    const odd = ODD_ITEMS.map((text, i) => ({ id: `odd-${i}`, text }));
    requests = [
      ...data.slice(0, 3).map((it, i) => ({
        question: it.question,
        plan: `${it.reference_answer}\n\n${ODD_PLANS[i]}`,
        items: [...it.rubric.map((r) => ({ id: r.id, text: r.text })), ...general],
      })),
      ...ODD_PLANS.map((plan, i) => ({
        question: data[i % data.length].question,
        plan,
        items: [...data[i % data.length].rubric.slice(0, 3).map((r) => ({ id: r.id, text: r.text })), ...odd],
      })),
    ];
  });

  it('both real tokenizers qualify; a tokenizer.json outside the analysed pipeline does not', () => {
    expect(qwen.lineSplit).to.equal(true);
    expect(llama.lineSplit).to.equal(true);
    const tj = JSON.parse(readFileSync(join(qwen3TokenizerDir(), 'tokenizer.json'), 'utf8'));
    const variant = (f: (t: any) => void) => {
      const t = structuredClone(tj);
      f(t);
      return Tokenizer.fromStrings(JSON.stringify(t)).lineSplit;
    };
    expect(variant(() => {})).to.equal(true);
    expect(
      variant((t) => (t.pre_tokenizer.pretokenizers[0].pattern.Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+")),
    ).to.equal(false); // GPT-2's pattern
    expect(variant((t) => (t.pre_tokenizer.pretokenizers[1].add_prefix_space = true))).to.equal(false);
    expect(variant((t) => (t.normalizer = { type: 'NFKC' }))).to.equal(false);
    expect(variant((t) => (t.added_tokens[0].lstrip = true))).to.equal(false);
    expect(qwen.concatSafe('<item>\n', 'Does the plan')).to.equal(true);
    expect(qwen.concatSafe('<item>\n', ' Does the plan')).to.equal(false);
    expect(qwen.concatSafe('<item>', 'Does the plan')).to.equal(false);
  });

  for (const which of ['qwen3', 'llama3'] as const) {
    it(`${which}: encode(head + tail) = encode(head) ++ encode(tail) wherever concatSafe holds (real prompt parts and odd texts)`, async () => {
      const tok = which === 'qwen3' ? qwen : llama;
      // Heads: the real prompt heads of every request (rendered up to the line end before the item), plus odd ones.
      const heads = new Set<string>([
        '<item>\n',
        'x  \n',
        'end.\n\n',
        '\t\n',
        'é\n',
        '```\n',
        '</think>\n',
        '<|im_start|>user\n',
        '  \n',
        '\r\n',
        '中文\n',
        'it\n',
        '<item>',
        'word',
        'x ',
        'end.',
        '\n\n ',
      ]);
      const tails = new Set<string>([
        ...ODD_ITEMS,
        '\n</item>\n',
        'Does',
        '1.5 more',
        '中文',
        '```python\nx = 1\n```',
        "'ll be fine",
        '$x^2$',
        '—dash',
        'x\n',
        '  \nIndented after a blank line.',
        ' \t\n',
        '\r\nCRLF first.',
      ]);
      for (const req of requests) {
        const rendered = req.items.map((it) =>
          template.render([{ role: 'user', content: perItemMessage(req.question, req.plan, it) }], { addGenerationPrompt: true, enableThinking: false }),
        );
        const marked = template.render([{ role: 'user', content: perItemMessage(req.question, req.plan, { id: '', text: '\uE000' }) }], {
          addGenerationPrompt: true,
          enableThinking: false,
        });
        const head = marked.slice(0, marked.lastIndexOf('\n', marked.indexOf('\uE000') - 1) + 1);
        heads.add(head);
        for (const t of rendered) if (t.startsWith(head)) tails.add(t.slice(head.length));
      }
      const pairs: [string, string][] = [];
      for (const h of heads) for (const t of tails) pairs.push([h, t]);
      const whole = await tok.encodeBatch(pairs.map(([h, t]) => h + t));
      const hIds = new Map((await tok.encodeBatch([...heads])).map((x, i) => [[...heads][i], x]));
      const tIds = new Map((await tok.encodeBatch([...tails])).map((x, i) => [[...tails][i], x]));
      let safe = 0;
      let unsafeDiffer = 0;
      pairs.forEach(([h, t], i) => {
        const joined = [...hIds.get(h)!, ...tIds.get(t)!];
        if (tok.concatSafe(h, t)) {
          safe++;
          expect(joined, `${JSON.stringify(h.slice(-40))} + ${JSON.stringify(t.slice(0, 40))}`).to.deep.equal(whole[i]);
        } else if (JSON.stringify(joined) !== JSON.stringify(whole[i])) unsafeDiffer++;
      });
      console.log(`      (${pairs.length} pairs: ${safe} split and equal; ${unsafeDiffer} of the ${pairs.length - safe} refused would differ)`);
      expect(safe).to.be.greaterThan(300);
      // The rule is not vacuous: at the boundaries it refuses, the split would give other ids.
      expect(unsafeDiffer).to.be.greaterThan(10);
    });
  }

  it("the judge's prompt texts and ids (render once, token split) equal rendering and tokenizing each whole prompt; odd items and plans fall back", async () => {
    const make = (tokenSplit: boolean, renderOnce: boolean) => LocalJudge.create({ tokenizer: qwen, template, scorer: async () => [], tokenSplit, renderOnce });
    const judges = [await make(true, true), await make(false, true), await make(true, false), await make(false, false)];
    const got = await Promise.all(judges.map((j) => j.promptsFor(requests)));
    let n = 0;
    for (let r = 0; r < requests.length; r++)
      for (let k = 0; k < requests[r].items.length; k++) {
        const { question, plan, items } = requests[r];
        const text = template.render([{ role: 'user', content: perItemMessage(question, plan, items[k]) }], {
          addGenerationPrompt: true,
          enableThinking: false,
        });
        const ids = await qwen.encode(text);
        for (const g of got) {
          expect(g[r][k].text, `request ${r} item ${k}`).to.equal(text);
          expect(g[r][k].ids, `request ${r} item ${k}`).to.deep.equal(ids);
        }
        n++;
      }
    expect(n).to.equal(requests.reduce((s, q) => s + q.items.length, 0));
    const ts = judges[0].timings();
    expect(ts.promptsSplit).to.be.greaterThan(ts.promptsWhole);
    expect(ts.promptsWhole).to.be.greaterThan(0); // items starting with whitespace / a combining mark
    expect(judges[1].timings().promptsSplit).to.equal(0);
  });

  it("a plan or question quoting the marker, with a prompt that has no {{item}}, renders per item (the marker there is not the item's)", async () => {
    const prompt = { ...loadPrompt(PER_ITEM_PROMPT), template: 'Question: {{question}}\nPlan:\n{{plan}}\nAnswer Yes or No.' };
    const marker = '\uE000papergym-rubric-item\uE001';
    const reqs: JudgeRequest[] = [
      {
        question: 'q',
        plan: `Step 1.\n${marker}\nStep 2.`,
        items: [
          { id: 'a', text: 'First item.' },
          { id: 'b', text: 'Second item.' },
        ],
      },
      {
        question: `Why ${marker}?`,
        plan: 'A plan.',
        items: [
          { id: 'a', text: 'First item.' },
          { id: 'b', text: 'Second item.' },
        ],
      },
    ];
    const j = await LocalJudge.create({ tokenizer: qwen, template, scorer: async () => [], prompt });
    const got = await j.promptsFor(reqs);
    for (let r = 0; r < reqs.length; r++)
      for (let k = 0; k < reqs[r].items.length; k++) {
        const text = template.render([{ role: 'user', content: perItemMessage(reqs[r].question, reqs[r].plan, reqs[r].items[k], prompt) }], {
          addGenerationPrompt: true,
          enableThinking: false,
        });
        expect(got[r][k].text, `request ${r} item ${k}`).to.equal(text);
        expect(got[r][k].ids, `request ${r} item ${k}`).to.deep.equal(await qwen.encode(text));
      }
  });

  it('render once applies to the Qwen3 template only (a template that is not known to write the user message verbatim renders every prompt)', () => {
    expect(template.userContentVerbatim).to.equal(true);
    expect(ChatTemplate.fromTokenizer(llama).userContentVerbatim).to.equal(false);
    expect(new ChatTemplate(`${qwen.chatTemplate!} `).userContentVerbatim).to.equal(false);
  });

  it('verdicts are identical with and without the shortcuts (deterministic scorers of the ids, prefix sharing on and off)', async () => {
    const scorer: AnswerScorer = async (prompts, cands) => prompts.map((p) => Float64Array.from(cands, (c) => hashLogprob(p, c)));
    const prefixScorer: PrefixScorer = async (prefix, suffixes, cands) =>
      suffixes.map((s) => Float64Array.from(cands, (c) => hashLogprob([...prefix, ...s], c)));
    for (const sharing of [true, false]) {
      const make = (on: boolean) =>
        LocalJudge.create({ tokenizer: qwen, template, scorer, prefixScorer: sharing ? prefixScorer : undefined, tokenSplit: on, renderOnce: on });
      const on = await make(true);
      const off = await make(false);
      const va = await on.judge(requests);
      const vb = await off.judge(requests);
      expect(va).to.deep.equal(vb);
      expect(on.stats()).to.deep.equal(off.stats());
      expect(va.flat().some((v) => v.met === true) && va.flat().some((v) => v.met === false)).to.equal(true);
    }
  });

  describe('on the tiny Qwen3 (addon)', function () {
    let model: Qwen3Model | undefined;
    let tok: Tokenizer;
    before(async function () {
      await orSkip(this, async () => {
        const dir = tinyModel('tiny-tied');
        model = await loadModel(dir);
        tok = Tokenizer.fromDir(dir);
      });
    });
    after(() => model?.dispose());

    it('P(yes) and verdicts with prefix sharing are bit-identical with and without the shortcuts', async () => {
      const reqs = requests
        .slice(0, 2)
        .map((r) => ({ ...r, plan: r.plan.slice(0, 600) }))
        .concat(requests.slice(4, 6));
      const on = await localJudgeForModel(model!, tok, { template });
      const off = await localJudgeForModel(model!, tok, { template, tokenSplit: false, renderOnce: false });
      const va = await on.judge(reqs);
      const vb = await off.judge(reqs);
      expect(va).to.deep.equal(vb);
      expect(on.stats()).to.deep.equal(off.stats());
      expect(on.timings().promptsSplit).to.be.greaterThan(0);
    });
  });
});
