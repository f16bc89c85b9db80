/**
 * Issue 50 item 6: `serve` refuses what it does not do. OpenAI parameters its sampler does not
 * apply (logit_bias, presence / frequency / repetition penalties, min_tokens) are a 400 naming the
 * parameter (accepted at their no-op values); `GET /v1/models/{id}` answers the model card (404 for
 * another id); a non-loopback bind without an API key is refused unless --allow-unauthenticated,
 * which the log says. Over real HTTP with a counting backend (nothing reaches it when refused).
 */
import { expect } from 'chai';
import { ChatServer, checkBindAuth, type ServeBackend } from '../lib/serve/server.js';
import { cli } from './helpers/run.js';

function counting() {
  let calls = 0;
  const backend: ServeBackend = {
    async generate(prompts, opts) {
      calls++;
      return prompts.map(() => ({
        promptTokens: 3,
        completions: Array.from({ length: opts.n }, () => ({ text: 'Yes', finishReason: 'stop' as const, completionTokens: 1 })),
      }));
    },
  };
  return { backend, calls: () => calls };
}

describe('serve refuses what it does not do (issue 50 item 6)', function () {
  this.timeout(60000);
  let srv: ChatServer | undefined;
  afterEach(async () => {
    await srv?.close();
    srv = undefined;
  });
  const post = (url: string, body: Record<string, unknown>) =>
    fetch(`${url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], ...body }),
    });

  it('unapplied sampling parameters are a 400 naming them; their no-op values are accepted', async () => {
    const f = counting();
    srv = new ChatServer({ backend: f.backend, modelId: 'org/tiny', batchWindowMs: 1 });
    const { url } = await srv.start();
    for (const [name, value] of [
      ['logit_bias', { '9454': -100 }],
      ['presence_penalty', 1.5],
      ['frequency_penalty', -0.5],
      ['repetition_penalty', 1.2],
      ['min_tokens', 4],
    ] as const) {
      const r = await post(url, { [name]: value });
      expect(r.status, name).to.equal(400);
      const e = ((await r.json()) as { error: { message: string; param: string; type: string } }).error;
      expect([e.param, e.type], name).to.deep.equal([name, 'invalid_request_error']);
      expect(e.message).to.contain(`${name} is not supported by this server`);
    }
    expect(f.calls()).to.equal(0);
    const ok = await post(url, { logit_bias: {}, presence_penalty: 0, frequency_penalty: 0, repetition_penalty: 1, min_tokens: 0, seed: 1 });
    expect(ok.status).to.equal(200);
    const nulls = await post(url, { logit_bias: null, presence_penalty: null });
    expect(nulls.status).to.equal(200);
    expect(f.calls()).to.be.greaterThan(0);
  });

  it('GET /v1/models/{id}: the model card for the served id (slashes in the id too), 404 model_not_found for another', async () => {
    srv = new ChatServer({ backend: counting().backend, modelId: 'org/tiny', batchWindowMs: 1 });
    const { url } = await srv.start();
    const list = (await (await fetch(`${url}/models`)).json()) as { data: { id: string; created: number }[] };
    for (const path of ['models/org/tiny', 'models/org%2Ftiny']) {
      const r = await fetch(`${url}/${path}`);
      expect(r.status, path).to.equal(200);
      expect(await r.json()).to.deep.equal({ id: 'org/tiny', object: 'model', created: list.data[0]!.created, owned_by: 'papergym-native' });
    }
    const other = await fetch(`${url}/models/gpt-4o`);
    expect(other.status).to.equal(404);
    expect(((await other.json()) as { error: { code: string } }).error.code).to.equal('model_not_found');
    expect((await fetch(`${url}/models/org/tiny`, { method: 'POST' })).status).to.equal(405);
  });

  it('a non-loopback bind without an API key is refused unless --allow-unauthenticated (said in the log)', async () => {
    expect(checkBindAuth('127.0.0.1', undefined, false)).to.equal(undefined);
    expect(checkBindAuth('localhost', undefined, false)).to.equal(undefined);
    expect(checkBindAuth('::1', undefined, false)).to.equal(undefined);
    expect(checkBindAuth('0.0.0.0', 'k', false)).to.equal(undefined);
    expect(() => checkBindAuth('0.0.0.0', undefined, false)).to.throw(/--host 0\.0\.0\.0 is not a loopback address.*--api-key.*--allow-unauthenticated/);
    expect(() => checkBindAuth('::', undefined, undefined)).to.throw(/--host :: is not a loopback address/);
    // The library refuses too, before listening.
    const lines: string[] = [];
    const refused = new ChatServer({ backend: counting().backend, modelId: 't', host: '0.0.0.0', log: (l) => lines.push(l) });
    const e = await refused.start().catch((x: unknown) => x);
    expect((e as Error).message).to.contain('--host 0.0.0.0 is not a loopback address');
    srv = new ChatServer({ backend: counting().backend, modelId: 't', host: '0.0.0.0', allowUnauthenticated: true, log: (l) => lines.push(l) });
    await srv.start();
    expect(lines).to.deep.equal(['warning: serving on 0.0.0.0 without an API key (--allow-unauthenticated): anyone who can reach the port can use the model']);
    // The CLI refuses before loading the model (a model dir that does not exist is never reached).
    const r = await cli(['serve', '--model', '/nonexistent-model', '--host', '0.0.0.0', '--port', '0']);
    expect(r.code).to.equal(1);
    expect(r.err).to.contain('--host 0.0.0.0 is not a loopback address');
    expect(r.err).to.not.contain('nonexistent-model');
  });
});
