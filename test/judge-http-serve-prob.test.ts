/**
 * The HTTP judge's P(yes) read from OpenAI chat logprobs
 * (lib/judge/http.ts with `score: 'prob'`, lib/judge/logprobs.ts) against our own `serve`
 * (lib/serve/server.ts on the policy backend, real HTTP on loopback) equals the local judge's P(yes)
 * (lib/judge/local.ts, one prefill of the same model) within 1e-4 on CPU, for the same model and the
 * same judge prompt, 'pair' and 'all' answer tokens.
 *
 * Same prompt: the local judge renders the per-item judge message with the chat template,
 * generation prompt, thinking off; the HTTP judge sends the message verbatim with
 * `chat_template_kwargs.enable_thinking: false` (`noThink`), which serve renders with the same
 * template. The test records the token ids serve encoded for each request and requires them to be
 * identical to the local judge's `promptIds`, so a rendering mismatch fails as such.
 *
 * Model: tiny-untied with the maker's `--yes-no-readout` (scripts/make_tiny_qwen3.py): after the
 * non-thinking generation prompt every yes/no variant sits far above the other tokens (all ten in
 * serve's top 20) with a prompt-dependent, non-trivial P(yes); a greedy reply is "Yes"/"No" then
 * <|im_end|>. A random tiny Qwen3 would not put "Yes"/"No" in the top 20 at all.
 */
import { expect } from 'chai';
import { ChatServer, type ServeBackend } from '../lib/serve/server.js';
import type { ServeStepper } from '../lib/serve/stepper.js';
import { policyServeBackend } from '../lib/serve/policy.js';
import { Policy } from '../lib/model/policy.js';
import { httpJudgeFromConfig } from '../lib/judge/backends/index.js';
import { JUDGE_DEFAULTS } from '../lib/config/judge.js';
import { localJudgeForModel, type LocalJudge } from '../lib/judge/local.js';
import { JUDGE_TOP_LOGPROBS } from '../lib/judge/http.js';
import { yesProbabilityFromChatLogprobs } from '../lib/judge/logprobs.js';
import { makeRewardFn } from '../lib/judge/rewards.js';
import type { Judge, JudgeItem, Verdict } from '../lib/judge/types.js';
import { loadPrompt, perItemMessage, PER_ITEM_PROMPT } from '../lib/judge/verdict.js';
import { tinyModel } from './helpers/tiny.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const QUESTION = 'Does optimizer X train small transformers faster than a tuned Adam baseline?';
const PLANS = [
  'Train a 125M-parameter transformer with X and with Adam, each tuned over the same budget of 20 learning rates, and report validation loss versus steps over 5 seeds with error bars.',
  'Use X. It is better.',
];
const ITEMS: JudgeItem[] = [
  { id: 'baseline', text: 'Compares against Adam tuned with the same hyperparameter budget.' },
  { id: 'seeds', text: 'Reports variability over several seeds.' },
  { id: 'ablation', text: 'Ablates each component of X.' },
];
const GENERAL: JudgeItem[] = [{ id: 'g-metric', text: 'States the metric used to compare methods.' }];

describe('judge http P(yes) through our own serve equals the local judge', function () {
  this.timeout(180000);
  let policy: Policy;
  let srv: ChatServer;
  let url: string;
  /** Token ids serve encoded, by the request's last user message. */
  const served = new Map<string, number[]>();
  let maxDelta = 0;
  const seen: number[] = [];

  before(async () => {
    policy = await Policy.load(tinyModel('tiny-untied', { yesNoReadout: true }));
    const inner = policyServeBackend(policy, { maxRows: 8 });
    let wrapped: ServeStepper | undefined;
    // Record what serve's real stepper encodes (the rendered prompt it prefills), unchanged.
    const backend: ServeBackend = {
      generate: (p, o) => inner.generate(p, o),
      stepper: () => {
        if (wrapped) return wrapped;
        const st = inner.stepper!();
        if (!st) return undefined;
        wrapped = {
          ...st,
          encode: async (messages, o) => {
            const ids = await st.encode(messages, o);
            served.set(String(messages[messages.length - 1]!.content), ids);
            return ids;
          },
        };
        return wrapped;
      },
    };
    srv = new ChatServer({ backend, modelId: 'tiny-judge', maxBatch: 8 });
    url = (await srv.start()).url;
  });
  after(async () => {
    await srv?.close();
    policy?.dispose();
    console.log(
      `      max |ΔP(yes)| http (serve logprobs) vs local: ${maxDelta.toExponential(2)} over ${seen.length} (plan, item, variants); P(yes) in [${Math.min(...seen).toFixed(4)}, ${Math.max(...seen).toFixed(4)}]`,
    );
  });

  const requests = () => PLANS.map((plan) => ({ question: QUESTION, plan, items: ITEMS }));
  /** The HTTP judge as `--judge http --judge-score prob --judge-no-think --judge-variants V` builds it. */
  const httpJudge = (variants: 'pair' | 'all') =>
    httpJudgeFromConfig({ ...JUDGE_DEFAULTS, kind: 'http', url, model: 'tiny-judge', score: 'prob', noThink: true, variants, maxRetries: 0 });
  const post = async (b: Json): Promise<Json> => {
    const r = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
    expect(r.status).to.equal(200);
    return (await r.json()) as Json;
  };

  for (const variants of ['pair', 'all'] as const) {
    it(`${variants}: same prompt token ids, P(yes) from serve's top_logprobs = local P(yes) within 1e-4, and the prob reward uses it`, async () => {
      const local: LocalJudge = await localJudgeForModel(policy.model, policy.tokenizer, { variants });
      const http: Judge = httpJudge(variants);
      const lv = await local.judge(requests());
      const hv = await http.judge(requests());
      expect(http.stats().withProb).to.equal(PLANS.length * ITEMS.length);

      // 1. identical prompts, token for token (the local judge's rendering vs what serve encoded)
      const tmpl = loadPrompt(PER_ITEM_PROMPT);
      const endThink = await policy.tokenizer.encode('</think>\n\n');
      for (const plan of PLANS)
        for (const it of ITEMS) {
          const msg = perItemMessage(QUESTION, plan, it, tmpl);
          const sIds = served.get(msg);
          expect(sIds, `serve saw no request for item ${it.id}`).to.be.an('array');
          const lIds = await local.promptIds(QUESTION, plan, it.text);
          expect(sIds, `prompt token ids of serve vs the local judge differ for item ${it.id}`).to.deep.equal(lIds);
          expect(lIds.slice(-endThink.length), 'prompt ends with the empty think block (thinking off)').to.deep.equal(endThink);
        }

      // 2. serve really returns the yes/no tokens among top_logprobs, with a non-trivial P(yes)
      const msg0 = perItemMessage(QUESTION, PLANS[0]!, ITEMS[0]!, tmpl);
      const res = await post({
        model: 'tiny-judge',
        messages: [{ role: 'user', content: msg0 }],
        temperature: 0,
        max_tokens: 16,
        logprobs: true,
        top_logprobs: JUDGE_TOP_LOGPROBS,
        chat_template_kwargs: { enable_thinking: false },
      });
      const content = res.choices[0].logprobs.content as Json[];
      expect(['Yes', 'No']).to.include(res.choices[0].message.content);
      expect(res.choices[0].finish_reason).to.equal('stop');
      const tops = (content[0]!.top_logprobs as Json[]).map((e) => e.token as string);
      expect(tops).to.have.length(JUDGE_TOP_LOGPROBS);
      for (const w of variants === 'all' ? ['Yes', 'yes', 'YES', ' Yes', ' yes', 'No', 'no', 'NO', ' No', ' no'] : ['Yes', 'No'])
        expect(tops, `"${w}" in top_logprobs`).to.include(w);
      const direct = yesProbabilityFromChatLogprobs(content as never, { variants });
      expect(direct!.position).to.equal(0);
      expect(direct!.pYes).to.be.closeTo(hv[0]![0]!.prob!, 1e-12);

      // 3. P(yes) equal within 1e-4, not trivially 0/1; verdicts agree
      hv.forEach((vs, r) =>
        vs.forEach((v: Verdict, k) => {
          const l = lv[r]![k]!;
          expect(v.itemId).to.equal(l.itemId);
          expect(v.prob, `http verdict ${v.itemId} records prob`).to.be.a('number');
          expect(l.prob).to.be.within(0.05, 0.95);
          const d = Math.abs(v.prob! - l.prob!);
          maxDelta = Math.max(maxDelta, d);
          seen.push(l.prob!);
          expect(d, `|ΔP(yes)| plan ${r} item ${v.itemId} (${variants})`).to.be.below(1e-4);
          expect(v.met).to.equal(l.met);
        }),
      );
      const probs = hv.flat().map((v) => v.prob!);
      expect(Math.max(...probs) - Math.min(...probs), 'P(yes) differs between prompts').to.be.above(1e-3);

      // 4. the reward with score 'prob' uses the recorded P(yes); 'binary' uses met
      const item = { id: 'q1', question: QUESTION, rubric: ITEMS.map((i) => ({ ...i, dimension: 'design' })) };
      const judgeP = httpJudge(variants);
      const [rp] = await makeRewardFn(judgeP, GENERAL, { score: 'prob' })([{ item, plan: PLANS[0]! }]);
      const [rb] = await makeRewardFn(judgeP, GENERAL, { score: 'binary' })([{ item, plan: PLANS[0]! }]);
      const [lg] = await local.judge([{ question: QUESTION, plan: PLANS[0]!, items: GENERAL }]);
      const spec = lv[0]!.map((v) => v.prob!);
      const expected = 0.7 * (spec.reduce((a, b) => a + b, 0) / spec.length) + 0.3 * lg![0]!.prob!;
      expect(rp!.reward).to.be.closeTo(expected, 1e-4);
      const binary = 0.7 * (lv[0]!.filter((v) => v.met).length / ITEMS.length) + 0.3 * (lg![0]!.met ? 1 : 0);
      expect(rb!.reward).to.be.closeTo(binary, 1e-12);
      expect(Math.abs(rp!.reward - rb!.reward)).to.be.above(0.05);
    });
  }
});
