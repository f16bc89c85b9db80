/**
 * Verdicts and P(yes) read right from every server style (issue 32, item 1): one row per server
 * style of reply and logprob shape, each sent by a loopback OpenAI-compatible server and read end to
 * end by the HTTP judge (createHttpJudge, per-item, logprobs on).
 * - vLLM / Ollama write `token` as tokenizer pieces (byte-level BPE `ĠYes`, SentencePiece `▁Yes`)
 *   with the right `bytes`; SGLang may send the pieces with `bytes: null`; llama.cpp's server and
 *   OpenAI write decoded text (llama.cpp adds token ids).
 * - Replies that end in a leaked end-of-turn token (`</s>`, `<|eot_id|>`, `<end_of_turn>`, …).
 * Expected P(yes) are hand-computed from the rows' logprobs: p = e^y / (e^y + e^n).
 */
import { expect } from 'chai';
import { createHttpJudge } from '../lib/judge/http.js';
import { tokenText } from '../lib/judge/logprobs.js';
import { END_OF_TURN_MARKERS } from '../lib/llm/think.js';
import { startFakeLlm, between, type FakeLlm, type FakeReply } from './helpers/fake-llm.js';

const utf8 = (s: string) => [...Buffer.from(s, 'utf8')];
/** One logprob entry; `bytes` 'utf8' = the text's bytes, null = none sent, or explicit. */
function e(
  token: string,
  logprob: number,
  bytes: number[] | null | 'none',
  top: [string, number, (number[] | null | 'none')?][] = [],
  extra: Record<string, unknown> = {},
) {
  const one = (t: string, lp: number, b: number[] | null | 'none' | undefined) => ({
    token: t,
    logprob: lp,
    ...(b === 'none' ? {} : { bytes: b ?? null }),
    ...extra,
  });
  return { ...one(token, logprob, bytes), top_logprobs: top.map(([t, lp, b]) => one(t, lp, b)) };
}
const p = (y: number, n: number) => Math.exp(y) / (Math.exp(y) + Math.exp(n));

interface Row {
  server: string;
  reply: FakeReply;
  met: boolean;
  prob?: number;
}

const ROWS: Row[] = [
  {
    server: 'vLLM (byte-level BPE pieces, right bytes, after a label)',
    reply: {
      content: 'Verdict: Yes',
      logprobs: {
        content: [
          e('Ver', -0.01, utf8('Ver')),
          e('dict', -0.01, utf8('dict')),
          e(':', -0.01, utf8(':')),
          e('ĠYes', -0.22, utf8(' Yes'), [
            ['ĠYes', -0.22, utf8(' Yes')],
            ['ĠNo', -1.61, utf8(' No')],
            ['Ġyes', -4, utf8(' yes')],
          ]),
        ],
      },
    },
    met: true,
    prob: p(-0.22, -1.61),
  },
  {
    server: 'Ollama (SentencePiece ▁ pieces, right bytes)',
    reply: {
      content: 'No',
      logprobs: {
        content: [
          e('▁No', -0.105, utf8(' No'), [
            ['▁No', -0.105, utf8(' No')],
            ['▁Yes', -2.3, utf8(' Yes')],
          ]),
        ],
      },
    },
    met: false,
    prob: p(-2.3, -0.105),
  },
  {
    server: 'llama.cpp server (decoded text + ids, leaked </s>)',
    reply: {
      content: 'Yes</s>',
      logprobs: {
        content: [
          e(
            'Yes',
            -0.05,
            utf8('Yes'),
            [
              ['Yes', -0.05, utf8('Yes')],
              ['No', -3.0, utf8('No')],
            ],
            { id: 7 },
          ),
          e('</s>', -0.01, utf8('</s>'), [], { id: 2 }),
        ],
      },
    },
    met: true,
    prob: p(-0.05, -3.0),
  },
  {
    server: 'SGLang (byte-level pieces, bytes null)',
    reply: {
      content: 'No',
      logprobs: {
        content: [
          e('No', -0.4, null, [
            ['No', -0.4, null],
            ['Yes', -1.1, null],
            ['ĠNo', -3, null],
          ]),
        ],
      },
    },
    met: false,
    prob: p(-1.1, -0.4),
  },
  {
    server: 'SGLang (pieces without a bytes field, leading-space verdict)',
    reply: {
      content: 'Answer: No',
      logprobs: {
        content: [
          e('Answer', -0.01, 'none'),
          e(':', -0.01, 'none'),
          e('ĠNo', -0.3, 'none', [
            ['ĠNo', -0.3, 'none'],
            ['ĠYes', -1.5, 'none'],
          ]),
        ],
      },
    },
    met: false,
    prob: p(-1.5, -0.3),
  },
  {
    server: 'OpenAI (decoded text + bytes, markdown label)',
    reply: {
      content: '**Verdict:** No',
      logprobs: {
        content: [
          e('**', -0.01, utf8('**')),
          e('Ver', -0.01, utf8('Ver')),
          e('dict', -0.01, utf8('dict')),
          e(':**', -0.01, utf8(':**')),
          e(' No', -0.7, utf8(' No'), [
            [' No', -0.7],
            [' Yes', -0.69],
          ]),
        ],
      },
    },
    met: false,
    prob: p(-0.69, -0.7),
  },
  { server: 'vLLM Llama 3 (leaked <|eot_id|>)', reply: { content: 'No<|eot_id|>' }, met: false },
  { server: 'Gemma (leaked <end_of_turn>)', reply: { content: 'Yes<end_of_turn>\n' }, met: true },
  { server: 'Phi-3 (leaked <|end|>)', reply: { content: 'Yes.<|end|>' }, met: true },
  { server: 'DeepSeek Coder (leaked <|EOT|>)', reply: { content: 'No<|EOT|>' }, met: false },
  { server: 'Mistral (leaked </s> after a label)', reply: { content: 'Final answer: Yes</s>' }, met: true },
  { server: 'ChatML raw decode (<|im_end|><|endoftext|>)', reply: { content: 'No<|im_end|><|endoftext|>' }, met: false },
  { server: 'Llama 3 base (<|end_of_text|>)', reply: { content: 'Yes<|end_of_text|>' }, met: true },
];

describe('judge http: verdicts and P(yes) read right from every server style (loopback)', function () {
  this.timeout(30000);
  let srv: FakeLlm;
  before(async () => {
    srv = await startFakeLlm({ respond: (r) => ROWS[Number(between(r.body.messages[r.body.messages.length - 1].content, 'item').slice(4))].reply });
  });
  after(() => srv.close());

  for (const [i, row] of ROWS.entries()) {
    it(row.server, async () => {
      const judge = createHttpJudge({ url: srv.url, model: 'j', logprobs: true, noCache: true, maxRetries: 0 });
      const [[v]] = await judge.judge([{ question: 'Q', plan: 'P', items: [{ id: 'x', text: `row ${i}` }] }]);
      expect(v.met, row.reply.content).to.equal(row.met);
      if (row.prob === undefined) expect(v.prob).to.equal(undefined);
      else expect(v.prob).to.be.closeTo(row.prob, 1e-12);
      await judge.close();
    });
  }

  it('tokenText: bytes first, then byte-level and SentencePiece markers, else the token as written', () => {
    expect(tokenText({ token: 'ĠYes', bytes: utf8(' Yes') })).to.equal(' Yes');
    expect(tokenText({ token: 'ĠYes', bytes: null })).to.equal(' Yes');
    expect(tokenText({ token: 'ĊNo' })).to.equal('\nNo');
    expect(tokenText({ token: '▁Yes' })).to.equal(' Yes');
    expect(tokenText({ token: '<0x0A>' })).to.equal('\n');
    // Decoded text with letters from the byte map's range stays (their bytes are not valid UTF-8).
    expect(tokenText({ token: 'łódź' })).to.equal('łódź');
    expect(tokenText({ token: 'ĠÃ©' })).to.equal(' é');
    // A partial UTF-8 sequence in bytes: the token as written.
    expect(tokenText({ token: 'Ã', bytes: [0xc3] })).to.equal('Ã');
    expect(tokenText({ token: 'Yes', bytes: [] })).to.equal('Yes');
  });

  it('every listed end-of-turn marker is stripped at the end of a reply', async () => {
    const judge = createHttpJudge({ url: srv.url, model: 'j', noCache: true, maxRetries: 0 });
    const { parseBinaryVerdict } = await import('../lib/judge/verdict.js');
    for (const m of END_OF_TURN_MARKERS) {
      expect(parseBinaryVerdict(`Yes${m}`).met, m).to.equal(true);
      expect(parseBinaryVerdict(`No ${m}\n${m}`).met, m).to.equal(false);
    }
    await judge.close();
  });
});
