/**
 * `serve` hardened (issue 38 item 7): Host / Origin checks refuse cross-site requests, an optional
 * API key (constant-time comparison), header and whole-request timeouts in seconds, a prompt that
 * cannot fit refused before it is tokenized (a real tiny Qwen3: an 8 MB prompt answers 400 at
 * once), and message.content not trimmed (equal to the decoded tokens, as vLLM).
 */
import { expect } from 'chai';
import { request } from 'node:http';
import { connect } from 'node:net';
import { ChatServer, type ServeBackend } from '../lib/serve/server.js';
import { policyServeBackend } from '../lib/serve/policy.js';
import { Policy } from '../lib/model/policy.js';
import { tinyModel } from './helpers/tiny.js';
import { orSkip } from './helpers/run.js';

function fake(text = 'Yes') {
  let calls = 0;
  const backend: ServeBackend = {
    async generate(prompts, opts) {
      calls++;
      return prompts.map(() => ({
        promptTokens: 3,
        completions: Array.from({ length: opts.n }, () => ({ text, finishReason: 'stop' as const, completionTokens: 2 })),
      }));
    },
  };
  return { backend, calls: () => calls };
}

/** A raw request (node:http lets the test set Host and Origin as a browser or a rebinding page would). */
function raw(
  url: string,
  o: { path?: string; method?: string; headers?: Record<string, string>; body?: string },
): Promise<{ status: number; body: Record<string, any> }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: u.hostname, port: u.port, path: o.path ?? '/v1/chat/completions', method: o.method ?? 'POST', headers: o.headers ?? {} },
      (res) => {
        let b = '';
        res.on('data', (d) => (b += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: b ? (JSON.parse(b) as Record<string, any>) : {} }));
      },
    );
    req.on('error', reject);
    req.end((o.method ?? 'POST') === 'POST' ? (o.body ?? JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] })) : undefined);
  });
}

describe('serve hardening (Host / Origin, API key, timeouts)', function () {
  this.timeout(30000);
  let srv: ChatServer | undefined;
  afterEach(async () => {
    await srv?.close();
    srv = undefined;
  });
  const start = async (o: Partial<ConstructorParameters<typeof ChatServer>[0]> = {}, text?: string) => {
    const f = fake(text);
    srv = new ChatServer({ backend: f.backend, modelId: 'tiny', batchWindowMs: 1, ...o });
    const { url, port } = await srv.start();
    return { url, port, calls: f.calls };
  };

  it('refuses a foreign Host (DNS rebinding) and a foreign Origin (a web page posting text/plain) with 403, before any work', async () => {
    const { url, port, calls } = await start();
    const ok = await raw(url, { headers: { host: `localhost:${port}`, 'content-type': 'application/json' } });
    expect(ok.status).to.equal(200);
    const rebound = await raw(url, { headers: { host: `evil.example:${port}` } });
    expect(rebound.status).to.equal(403);
    expect(rebound.body.error.code).to.equal('host_not_allowed');
    const page = await raw(url, { headers: { host: `127.0.0.1:${port}`, origin: 'https://evil.example', 'content-type': 'text/plain' } });
    expect(page.status).to.equal(403);
    expect(page.body.error.code).to.equal('origin_not_allowed');
    expect((await raw(url, { headers: { host: `127.0.0.1:${port}`, origin: 'null' } })).status).to.equal(403);
    expect(calls()).to.equal(1); // only the allowed request reached the model
    // a local page (same host) and IPv6 loopback are fine
    expect((await raw(url, { headers: { host: `[::1]:${port}`, origin: 'http://localhost:5173' } })).status).to.equal(200);
    expect((await raw(url, { path: '/v1/models', method: 'GET', headers: { host: `evil.example:${port}` } })).status).to.equal(403);
  });

  it('--allowed-hosts adds names; * turns the check off', async () => {
    const a = await start({ allowedHosts: ['judge.internal'] });
    expect((await raw(a.url, { headers: { host: `judge.internal:${a.port}` } })).status).to.equal(200);
    expect((await raw(a.url, { headers: { host: `other.internal:${a.port}` } })).status).to.equal(403);
    await srv!.close();
    const b = await start({ allowedHosts: ['*'] });
    expect((await raw(b.url, { headers: { host: `other.internal:${b.port}`, origin: 'https://x.example' } })).status).to.equal(200);
  });

  it('--api-key: Bearer key required on /v1 (401 otherwise), /health stays open', async () => {
    const { url, port, calls } = await start({ apiKey: 's3cret-key' });
    const h = { host: `localhost:${port}` };
    expect((await raw(url, { headers: h })).status).to.equal(401);
    const wrong = await raw(url, { headers: { ...h, authorization: 'Bearer s3cret-kez' } });
    expect(wrong.status).to.equal(401);
    expect(wrong.body.error.code).to.equal('invalid_api_key');
    expect((await raw(url, { headers: { ...h, authorization: 'Bearer s3cret' } })).status).to.equal(401); // a prefix is not the key
    expect((await raw(url, { path: '/v1/models', method: 'GET', headers: h })).status).to.equal(401);
    expect((await raw(url, { headers: { ...h, authorization: 'Bearer s3cret-key' } })).status).to.equal(200);
    expect((await raw(url, { path: '/health', method: 'GET', headers: h })).status).to.equal(200);
    expect(calls()).to.equal(1);
  });

  it('a body that trickles in is cut at the request timeout (seconds, not minutes); slow headers too', async () => {
    const { port } = await start({ requestTimeoutMs: 1000, headersTimeoutMs: 800 });
    const timed = (payload: (s: ReturnType<typeof connect>) => void) =>
      new Promise<{ seconds: number; reply: string }>((resolve) => {
        const t0 = Date.now();
        const s = connect(port, '127.0.0.1', () => payload(s));
        let reply = '';
        s.on('data', (d) => (reply += d));
        s.on('close', () => resolve({ seconds: (Date.now() - t0) / 1000, reply }));
        s.on('error', () => {});
      });
    const body = timed((s) => {
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:${port}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`);
      const iv = setInterval(() => (s.destroyed ? clearInterval(iv) : s.write(' ')), 100);
    });
    const headers = timed((s) => {
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:${port}\r\n`);
      const iv = setInterval(() => (s.destroyed ? clearInterval(iv) : s.write('X-Slow: 1\r\n')), 100);
    });
    const [b, h] = await Promise.all([body, headers]);
    expect(b.seconds).to.be.within(0.9, 3);
    expect(b.reply).to.match(/^HTTP\/1\.1 408/);
    expect(h.seconds).to.be.within(0.7, 3);
    expect(h.reply).to.match(/^HTTP\/1\.1 408/);
  });

  it('message.content is not trimmed: without thinking it equals the generated text (as vLLM)', async () => {
    const { url, port } = await start({}, '  Yes, indeed.\n');
    const r = await raw(url, { headers: { host: `localhost:${port}` } });
    expect(r.body.choices[0].message.content).to.equal('  Yes, indeed.\n');
  });
});

describe('serve hardening on a tiny Qwen3: the context check before tokenizing, content = joined logprob tokens', function () {
  this.timeout(240000);
  let policy: Policy;
  let srv: ChatServer;
  let url = '';
  before(async function () {
    policy = await orSkip(this, () => Policy.load(tinyModel('tiny-tied')));
    srv = new ChatServer({ backend: policyServeBackend(policy, { capacity: 256 }), modelId: 'tiny', maxBodyBytes: 16 << 20 });
    url = (await srv.start()).url;
  });
  after(async () => {
    await srv?.close();
    policy?.dispose();
  });
  const post = (body: unknown) =>
    fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('an 8 MB prompt is refused at once (400, no tokenizing), and memory goes back', async () => {
    await post({ messages: [{ role: 'user', content: 'warm up' }], max_tokens: 1 }); // the longest-token bound is computed once
    const rss0 = process.memoryUsage().rss;
    const t0 = Date.now();
    const r = await post({ messages: [{ role: 'user', content: 'word '.repeat(8 << 18) }], max_tokens: 4 });
    const seconds = (Date.now() - t0) / 1000;
    const j = (await r.json()) as { error: { message: string; param: string } };
    expect(r.status).to.equal(400);
    expect(j.error.message).to.match(/^prompt of at least \d+ tokens \(\d+ bytes rendered\) leaves no room in the context of 256 tokens/);
    expect(j.error.param).to.equal('messages');
    expect(seconds).to.be.lessThan(3);
    const grown = (process.memoryUsage().rss - rss0) / 2 ** 20;
    console.log(`    (8 MB prompt refused in ${seconds.toFixed(2)} s; RSS +${grown.toFixed(0)} MiB)`);
    expect(grown).to.be.lessThan(400);
    // a prompt that fits is still served
    expect((await post({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })).status).to.equal(200);
  });

  it('content equals the joined logprob tokens (no trimming)', async () => {
    const r = await post({
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 12,
      temperature: 0,
      logprobs: true,
      chat_template_kwargs: { enable_thinking: false },
    });
    const j = (await r.json()) as { choices: { message: { content: string; reasoning_content?: string }; logprobs: { content: { token: string }[] } }[] };
    const c = j.choices[0]!;
    if (c.message.reasoning_content) return; // thinking text is split off; the equality holds for answers only
    expect(c.message.content).to.equal(c.logprobs.content.map((t) => t.token).join(''));
  });
});
