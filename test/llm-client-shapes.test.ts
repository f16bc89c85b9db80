/**
 * Reply and error shapes that real OpenAI-compatible servers send, over a
 * loopback HTTP server: content as a string or an array of parts, thinking in parts /
 * `reasoning_content` / `reasoning` / `<think>`, logprobs passthrough; what is retried (connection
 * errors, timeouts, 408/409/429/5xx) and what fails once with the endpoint and the first 200
 * characters of the body (HTML page, empty body, non-JSON, `choices: []`, a 200 carrying `error`,
 * 4xx).
 */
import { expect } from 'chai';
import { createServer } from 'node:net';
import { LlmClient, LlmHttpError, LlmResponseError, LlmNetworkError } from '../lib/llm/client.js';
import { startFakeLlm, type FakeLlm, type FakeFault } from './helpers/fake-llm.js';

const msgs = [{ role: 'user' as const, content: 'Does the plan satisfy the item?' }];

describe('llm client: reply shapes and retry policy (loopback server)', function () {
  this.timeout(30000);
  let srv: FakeLlm;
  let client: LlmClient;
  before(async () => {
    srv = await startFakeLlm();
    client = new LlmClient({ baseUrl: srv.url, model: 'm', maxRetries: 3, minBackoffMs: 1, maxBackoffMs: 2, timeoutMs: 2000 });
  });
  after(() => srv.close());
  beforeEach(() => {
    srv.log.length = 0;
    srv.setFault(undefined);
  });

  const reply = (message: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    srv.setResponder(() => ({ content: 'x', message: { role: 'assistant', ...message }, ...extra }));

  it('content as an array of parts: text parts joined, thinking parts (string or nested parts) go to reasoning', async () => {
    reply({
      content: [
        { type: 'thinking', thinking: [{ type: 'text', text: 'The plan matches.' }] },
        { type: 'text', text: 'Ye' },
        { type: 'text', text: 's' },
      ],
    });
    const r = await client.chat({ messages: msgs });
    expect(r.content).to.equal('Yes');
    expect(r.reasoning).to.equal('The plan matches.');
    reply({
      content: [
        { type: 'reasoning', reasoning: 'think think' },
        { type: 'output_text', text: 'No' },
      ],
    });
    const r2 = await client.chat({ messages: msgs });
    expect([r2.content, r2.reasoning]).to.deep.equal(['No', 'think think']);
    expect(srv.log.length).to.equal(2);
  });

  it('reasoning_content, reasoning and <think> all go to reasoning, never to content', async () => {
    reply({ content: 'Yes', reasoning_content: 'Verdict: No? no.' });
    expect(await client.chat({ messages: msgs })).to.include({ content: 'Yes', reasoning: 'Verdict: No? no.' });
    reply({ content: 'No', reasoning: 'yes yes' });
    expect(await client.chat({ messages: msgs })).to.include({ content: 'No', reasoning: 'yes yes' });
    reply({ content: '<THINK>hmm</THINK>\n\nNo' });
    expect(await client.chat({ messages: msgs })).to.include({ content: 'No', reasoning: 'hmm' });
    reply({ content: null, refusal: "I can't help with that." });
    expect((await client.chat({ messages: msgs })).content).to.equal("I can't help with that.");
  });

  it('asks for logprobs and returns choices[0].logprobs.content as sent', async () => {
    const lp = {
      content: [
        {
          token: 'Yes',
          logprob: -0.1,
          bytes: [89, 101, 115],
          top_logprobs: [
            { token: 'Yes', logprob: -0.1, bytes: [89, 101, 115] },
            { token: 'No', logprob: -2.4, bytes: [78, 111] },
          ],
        },
      ],
    };
    reply({ content: 'Yes' }, { logprobs: lp });
    const r = await client.chat({ messages: msgs, topLogprobs: 20 });
    expect(r.logprobs).to.deep.equal(lp.content);
    expect(srv.log[0].body).to.include({ logprobs: true, top_logprobs: 20 });
  });

  const failsOnce: [string, FakeFault, RegExp][] = [
    [
      'an HTML page',
      {
        kind: 'raw',
        status: 200,
        contentType: 'text/html',
        body: '<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body>' + 'x'.repeat(400) + '</body></html>',
      },
      /is an HTML page.*"<!DOCTYPE html><html><head><title>Welcome to nginx!/,
    ],
    ['an empty body', { kind: 'raw', status: 200, body: '' }, /has an empty body: ""/],
    [
      'a non-JSON body',
      { kind: 'raw', status: 200, contentType: 'text/plain', body: 'upstream connect error or disconnect/reset before headers' },
      /is not JSON: "upstream connect error/,
    ],
    [
      'choices: []',
      { kind: 'raw', status: 200, body: '{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3}}' },
      /has no choices \(choices: \[\]\): "\{\\"id\\":\\"x\\"/,
    ],
    [
      'a 200 carrying an error object',
      { kind: 'raw', status: 200, body: '{"error":{"message":"The model `judge` does not exist","type":"invalid_request_error","code":404}}' },
      /carries an error \(The model `judge` does not exist\)/,
    ],
    ['no message', { kind: 'raw', status: 200, body: '{"choices":[{"index":0,"text":"Yes","finish_reason":"stop"}]}' }, /has no choices\[0\]\.message/],
  ];
  for (const [what, fault, re] of failsOnce) {
    it(`${what}: fails once with the endpoint and the first 200 characters`, async () => {
      srv.setFault(() => fault);
      let err: Error | undefined;
      try {
        await client.chat({ messages: msgs });
      } catch (e) {
        err = e as Error;
      }
      expect(err).to.be.instanceOf(LlmResponseError);
      expect(err!.message).to.match(re);
      expect(err!.message).to.include(client.url);
      expect((err as LlmResponseError).body.length).to.be.at.most(200);
      expect(srv.log.length, 'not retried').to.equal(1);
    });
  }

  for (const status of [400, 401, 403, 404, 422]) {
    it(`HTTP ${status} is not retried`, async () => {
      srv.setFault(() => ({ kind: 'status', status }));
      let err: unknown;
      try {
        await client.chat({ messages: msgs });
      } catch (e) {
        err = e;
      }
      expect(err).to.be.instanceOf(LlmHttpError);
      expect((err as Error).message)
        .to.include(`HTTP ${status}`)
        .and.include(client.url);
      expect(srv.log.length).to.equal(1);
    });
  }

  for (const status of [408, 409, 429, 500, 502, 503, 504]) {
    it(`HTTP ${status} is retried and then succeeds`, async () => {
      srv.setResponder(() => 'Yes');
      let n = 0;
      srv.setFault(() => (++n === 1 ? { kind: 'status', status } : undefined));
      expect((await client.chat({ messages: msgs })).content).to.equal('Yes');
      expect(srv.log.length).to.equal(2);
    });
  }

  it('a connection reset and a timeout are retried', async () => {
    srv.setResponder(() => 'No');
    let n = 0;
    srv.setFault(() => (++n === 1 ? { kind: 'reset' } : n === 2 ? { kind: 'hang' } : undefined));
    const c = new LlmClient({ baseUrl: srv.url, model: 'm', maxRetries: 3, minBackoffMs: 1, maxBackoffMs: 2, timeoutMs: 300 });
    const r = await c.chat({ messages: msgs });
    expect(r.content).to.equal('No');
    expect(r.attempts).to.equal(3);
  });

  it('a refused connection is retried maxRetries times, then a network error naming the endpoint', async () => {
    const port = await new Promise<number>((res) => {
      const s = createServer();
      s.listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => res(p));
      });
    });
    const c = new LlmClient({ baseUrl: `http://127.0.0.1:${port}/v1`, model: 'm', maxRetries: 2, minBackoffMs: 1, maxBackoffMs: 2 });
    let err: unknown;
    try {
      await c.chat({ messages: msgs });
    } catch (e) {
      err = e;
    }
    expect(err).to.be.instanceOf(LlmNetworkError);
    expect((err as Error).message).to.include(`127.0.0.1:${port}`);
    expect(c.stats().requests).to.equal(3);
  });
});
