/**
 * Judge replies in the styles real judge models produce (Qwen3 thinking on and
 * off, DeepSeek-R1, JSON-mode chat models, Llama-3, Mistral, long prose judges), each with its
 * expected verdict, run end to end: createHttpJudge → the shared LLM client → a loopback
 * OpenAI-compatible HTTP server started here, which sends each reply as the chat completion
 * (string content, content parts, reasoning_content / reasoning fields, refusal field,
 * finish_reason length). The hard cases (key names, labels against a leading yes/no, boxes, thinking parts) are marked "hard case".
 */
import { expect } from 'chai';
import { createHttpJudge } from '../lib/judge/http.js';
import { startFakeLlm, between, type FakeLlm, type FakeReply } from './helpers/fake-llm.js';

type Row = { style: string; reply: string | FakeReply; met: boolean | null; refused?: boolean };

const LONG_NO =
  'The research plan proposes to compare the new optimizer against Adam and SGD with momentum on three image classification benchmarks. ' +
  'It describes the architectures, the data augmentation and the learning-rate schedules in some detail, and it mentions that all runs use three seeds. ' +
  'The rubric item, however, asks whether the baselines receive the same hyperparameter tuning budget as the proposed method. ' +
  'The plan tunes the proposed optimizer with a 100-trial random search but uses the default hyperparameters for Adam and SGD. ' +
  'In summary, although the plan names strong baselines, it does not give them the same tuning budget, so the item is not met.';
const LONG_YES =
  'To decide this item I looked for an explicit description of how the held-out test set is kept separate from model selection. ' +
  'The plan states that hyperparameters are chosen on a validation split carved out of the training data, that the test split is touched exactly once at the end, ' +
  'and that the same protocol is applied to every baseline. It also explains why a simpler single split would leak information. ' +
  'The plan therefore satisfies the rubric item.';

const rows: Row[] = [
  // --- the hard cases: key names, labels against leading words, boxes, thinking parts ---
  { style: 'hard case: JSON key name', reply: '{"met": false}', met: false },
  { style: 'hard case: JSON with reason', reply: '{"satisfied": false, "reason": "no equal budget"}', met: false },
  {
    style: 'hard case: leading "No" determiner, labelled Yes',
    reply: 'No tuned baseline is named in the first sentence, but the plan then compares against Adam under the same tuning budget.\nFinal answer: Yes',
    met: true,
  },
  {
    style: 'hard case: leading Yes, labelled No',
    reply: 'Yes, the plan mentions Adam, but it never gives the baseline the same tuning budget.\nVerdict: No',
    met: false,
  },
  { style: 'hard case: boxed', reply: '\\boxed{Yes}', met: true },
  { style: 'hard case: question then boxed', reply: 'The plan gives Adam the same budget? It does not.\n\n\\boxed{No}', met: false },
  {
    style: 'hard case: content parts with a thinking part',
    reply: {
      content: 'Yes',
      message: {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: [{ type: 'text', text: 'The plan matches.' }] },
          { type: 'text', text: 'Yes' },
        ],
      },
    },
    met: true,
  },
  // --- Qwen3, thinking on ---
  {
    style: 'qwen3 think',
    reply:
      '<think>\nOkay, let me check the plan. The rubric item asks whether the baseline gets the same tuning budget. The plan says Adam is tuned with the same 50-trial budget. So yes.\n</think>\n\nYes',
    met: true,
  },
  {
    style: 'qwen3 think',
    reply: '<think>\nThe item requires error bars over seeds. The plan reports a single run. No error bars. So the answer is No.\n</think>\n\nNo',
    met: false,
  },
  {
    style: 'qwen3 think: thinking says yes, answer no',
    reply: '<think>\nAt first glance yes, the plan mentions ablations.\nFinal answer: Yes? Wait — it only lists them without saying how.\n</think>\n\nNo',
    met: false,
  },
  {
    style: 'qwen3 think: reasoning_content field (vLLM reasoning parser)',
    reply: { content: 'Yes', reasoningContent: 'Verdict: No. Hmm, actually the plan does specify the split, so it is met.' },
    met: true,
  },
  {
    style: 'qwen3 think: reasoning_content, newline content',
    reply: { content: '\n\nNo', reasoningContent: 'The answer is yes... no, the plan never names the metric.' },
    met: false,
  },
  {
    style: 'qwen3 think: template opened the block',
    reply: 'The plan names the dataset but not the split. Yes it names it, but no split.\n</think>\n\nNo',
    met: false,
  },
  {
    style: 'qwen3 think: cut off while thinking (length)',
    reply: { content: '<think>\nLet me consider whether the plan does this... the answer is yes', finishReason: 'length' },
    met: null,
  },
  { style: 'qwen3 think: emphasis', reply: '<think>\nok\n</think>\n\n**Yes**', met: true },
  { style: 'qwen3 think: upper-case tags', reply: '<THINK>Verdict: yes</THINK>\nNo', met: false },
  // --- Qwen3, thinking off ---
  { style: 'qwen3 no-think', reply: 'Yes', met: true },
  { style: 'qwen3 no-think', reply: 'No', met: false },
  { style: 'qwen3 no-think', reply: 'Yes.', met: true },
  { style: 'qwen3 no-think', reply: 'No.', met: false },
  { style: 'qwen3 no-think: empty think block echoed', reply: '<think>\n\n</think>\n\nYes', met: true },
  { style: 'qwen3 no-think', reply: 'yes', met: true },
  { style: 'qwen3 no-think', reply: 'NO', met: false },
  // --- DeepSeek-R1 ---
  {
    style: 'r1: reasoning then boxed',
    reply: 'Okay, so I need to figure out if the plan satisfies the item. Yes, it mentions seeds, but not how many.\n</think>\n\n**Final Answer**\n\\boxed{No}',
    met: false,
  },
  {
    style: 'r1: answer label',
    reply: '<think>\nAlright. The plan clearly describes the ablation.\n</think>\n\nThe plan satisfies the rubric item.\n\n**Answer:** Yes',
    met: true,
  },
  {
    style: 'r1: reasoning field (OpenRouter)',
    reply: { content: 'No', message: { role: 'assistant', content: 'No', reasoning: 'Yes yes yes, final answer: Yes' } },
    met: false,
  },
  { style: 'r1: boxed text', reply: 'Checked the budget.\n</think>\n\n\\boxed{\\text{Yes}}', met: true },
  { style: 'r1: Final Answer boxed', reply: '</think>\n\n**Final Answer:** \\boxed{No}', met: false },
  { style: 'r1: bold label value', reply: '</think>\n\nFinal answer: **No**', met: false },
  // --- JSON-mode chat models ---
  { style: 'json', reply: '{"verdict": "Yes"}', met: true },
  { style: 'json', reply: '{"verdict": "no", "explanation": "The plan has no baseline."}', met: false },
  { style: 'json', reply: '{"answer": true}', met: true },
  { style: 'json', reply: '{"answer": "No"}', met: false },
  { style: 'json', reply: '{"met": true, "reason": "Adam is tuned with the same budget."}', met: true },
  { style: 'json', reply: '{"pass": false}', met: false },
  { style: 'json', reply: '{"passed": true}', met: true },
  { style: 'json', reply: '{"result": "PASS"}', met: true },
  { style: 'json', reply: '{"decision": "not met", "rationale": "The plan never says how."}', met: false },
  { style: 'json: fenced', reply: '```json\n{"satisfied": true}\n```', met: true },
  {
    style: 'json: fenced in prose, reasoning says yes',
    reply: 'Here is my evaluation:\n```json\n{"reasoning": "The plan does say yes to baselines but not to budgets.", "verdict": false}\n```',
    met: false,
  },
  { style: 'json: reasoning key first', reply: '{"reasoning": "Yes, the item is about the tuning budget.", "final_answer": "No"}', met: false },
  { style: 'json: 1/0', reply: '{"met": 1}', met: true },
  { style: 'json: bare boolean', reply: 'true', met: true },
  { style: 'json: yes string', reply: '{"met": "yes"}', met: true },
  { style: 'json: key case', reply: '{"Met": false}', met: false },
  { style: 'json: wrapped', reply: '{"evaluation": {"met": false, "confidence": 0.9}}', met: false },
  // --- Llama-3 ---
  {
    style: 'llama3',
    reply:
      'Based on the provided research plan, the rubric item is satisfied. The plan explicitly compares against Adam with an equal tuning budget.\n\n**Answer: Yes**',
    met: true,
  },
  { style: 'llama3', reply: "I'd be happy to help evaluate this plan.\n\nThe plan does not specify the random seeds.\n\n**Verdict:** No", met: false },
  { style: 'llama3', reply: 'The answer is: No.', met: false },
  {
    style: 'llama3',
    reply: 'After carefully reviewing the research plan, I can conclude that the plan meets the requirements of the rubric item.\n\nAnswer: YES',
    met: true,
  },
  { style: 'llama3', reply: '**No**\n\nThe plan does not mention any statistical test.', met: false },
  { style: 'llama3', reply: 'Yes\n\nExplanation: The plan includes a held-out test set.', met: true },
  // --- Mistral ---
  { style: 'mistral', reply: 'No, the plan does not describe how hyperparameters are tuned.', met: false },
  { style: 'mistral', reply: 'Yes, the plan satisfies the item: it reports error bars over five seeds.', met: true },
  { style: 'mistral', reply: ' Yes', met: true },
  { style: 'mistral', reply: 'Answer: No\nReason: the ablation is only mentioned.', met: false },
  { style: 'mistral', reply: 'Final Judgment: Yes', met: true },
  { style: 'mistral', reply: 'Final judgment - no', met: false },
  // --- long prose judges ---
  { style: 'prose: not met', reply: LONG_NO, met: false },
  { style: 'prose: satisfies', reply: LONG_YES, met: true },
  { style: 'prose: contradiction, no label', reply: 'Yes. The plan mentions Adam. However, on reflection, it never tunes it.\n\nNo.', met: null },
  { style: 'prose: no verdict', reply: 'The plan discusses several optimizers and their learning rates in detail.', met: null },
  { style: 'prose: refusal', reply: "I'm sorry, but I can't evaluate research plans.", met: null, refused: true },
  {
    style: 'prose: leading determiner, last sentence',
    reply: 'No tuned baseline is named at first. The plan later tunes Adam with the same budget. Yes.',
    met: true,
  },
  { style: 'prose: relabelled, last wins', reply: 'Verdict: Yes\n\nWait, re-reading the plan, the budget differs.\n\nVerdict: No', met: false },
  { style: 'prose: heading then bold', reply: '### Final Verdict\n**No**', met: false },
  { style: 'prose: not met', reply: 'Not met.', met: false },
  { style: 'prose: met', reply: 'Met.', met: true },
  { style: 'empty content', reply: '', met: null },
  {
    style: 'refusal field (OpenAI)',
    reply: { content: '', message: { role: 'assistant', content: null, refusal: "I can't help with that." } },
    met: null,
    refused: true,
  },
];

describe('judge verdict styles end to end (createHttpJudge → loopback OpenAI-compatible server)', function () {
  this.timeout(60000);
  let srv: FakeLlm;
  before(async () => {
    srv = await startFakeLlm({
      respond: (r) => {
        const user = r.body.messages[r.body.messages.length - 1].content;
        const i = Number(/^row-(\d+)$/.exec(between(user, 'item'))?.[1]);
        const reply = rows[i]?.reply;
        if (reply === undefined) throw new Error(`no row for ${between(user, 'item')}`);
        return typeof reply === 'string' ? { content: reply } : reply;
      },
    });
  });
  after(() => srv.close());

  it(`has at least 60 replies, every hard case included`, () => {
    expect(rows.length).to.be.at.least(60);
    expect(rows.filter((r) => r.style.startsWith('hard case:')).length).to.equal(7);
  });

  it('every reply gives its expected verdict (one request per reply, no retries)', async () => {
    const judge = createHttpJudge({ url: srv.url, model: 'judge', mode: 'per-item', concurrency: 8, maxRetries: 2, minBackoffMs: 1, noCache: true });
    const items = rows.map((_, i) => ({ id: String(i), text: `row-${i}` }));
    const [verdicts] = await judge.judge([
      { question: 'Does the plan tune its baselines fairly?', plan: 'We compare against Adam under the same tuning budget.', items },
    ]);
    const wrong = rows
      .map((r, i) => ({ i, style: r.style, reply: r.reply, expected: r.met, got: verdicts[i].met, refusedOk: !r.refused || verdicts[i].refused === true }))
      .filter((x) => x.expected !== x.got || !x.refusedOk);
    expect(wrong, JSON.stringify(wrong, null, 1)).to.deep.equal([]);
    expect(srv.log.length, 'one request per reply: nothing was retried').to.equal(rows.length);
    const s = judge.stats();
    expect(s.failures).to.equal(0);
    expect(s.verdicts).to.equal(rows.length);
    expect(s.refusals).to.equal(rows.filter((r) => r.refused).length);
    expect(s.unparsed).to.equal(rows.filter((r) => r.met === null && !r.refused).length);
    expect(s.truncated).to.equal(1);
    await judge.close();
  });

  it('per-plan replies: the same grammar per item; missing ids null, duplicated ids the last, unknown ids ignored and counted', async () => {
    const items = [
      { id: 'a', text: 'ablation' },
      { id: 'b', text: 'baselines' },
      { id: 'c', text: 'error bars' },
    ];
    const replies: [string, (boolean | null)[]][] = [
      ['{"verdicts": [{"id": "a", "met": true}, {"id": "b", "met": false}, {"id": "c", "met": true}]}', [true, false, true]],
      [
        '<think>{"verdicts": [{"id": "a", "met": false}]}</think>\n```json\n{"verdicts": [{"id": "[a]", "met": "Yes"}, {"id": "b", "met": "No, never tuned"}, {"id": "c", "verdict": "Final answer: yes"}]}\n```',
        [true, false, true],
      ],
      ['{"verdicts": [{"id": "a", "met": true}, {"id": "c", "met": false}]}', [true, null, false]],
      ['{"verdicts": [{"id": "a", "met": true}, {"id": "a", "met": false}, {"id": "b", "met": true}, {"id": "c", "met": true}]}', [false, true, true]],
      ['{"verdicts": [{"id": "a", "met": true}, {"id": "zz", "met": true}, {"id": "b", "met": false}, {"id": "c", "met": false}]}', [true, false, false]],
      ['{"a": "yes", "b": {"met": false}, "c": true}', [true, false, true]],
      ['[a] Yes\n[b] No - the baselines are untuned\n[c] **Yes**', [true, false, true]],
      ['{"verdicts": [{"id": "a", "met": "maybe"}, {"id": "b", "met": false}, {"id": "c", "met": true}]}', [null, false, true]],
    ];
    const plans = replies.map((_, k) => `plan number ${k}`);
    const fake = await startFakeLlm({
      respond: (r) => {
        const user = r.body.messages[r.body.messages.length - 1].content;
        const k = Number(/plan number (\d+)/.exec(between(user, 'plan'))![1]);
        return { content: replies[k][0] };
      },
    });
    try {
      const judge = createHttpJudge({ url: fake.url, model: 'judge', mode: 'per-plan', maxRetries: 0, noCache: true });
      const out = await judge.judge(plans.map((plan) => ({ question: 'Q', plan, items })));
      expect(out.map((vs) => vs.map((v) => v.met))).to.deep.equal(replies.map((r) => r[1]));
      const s = judge.stats();
      expect(s.unknownIds).to.equal(1);
      expect(s.duplicateIds).to.equal(1);
      expect(s.unparsed).to.equal(2);
      await judge.close();
    } finally {
      await fake.close();
    }
  });
});
