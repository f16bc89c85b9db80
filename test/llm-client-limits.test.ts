/**
 * Issue 50 item 3, over real HTTP (node:http servers): a remote server cannot stall or flood the
 * client that build-data, the HTTP judge, eval's chat judge and leakage share (lib/llm/client.ts).
 * `Retry-After: 86400` does not set our clock (past the cap, the client's own backoff); every wait
 * counts against the call's deadline; a reply past the byte cap, declared or streamed without end,
 * fails as an unreadable reply without being read whole.
 */
import { expect } from 'chai';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { LlmClient, LlmResponseError, LlmTimeoutError } from '../lib/llm/client.js';

const completion = (content: string) =>
  JSON.stringify({
    choices: [{ message: { role: 'assistant', content }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  });

/** A server whose n-th request (1-based) is answered by `handle`; resolves with its base URL and request count. */
async function serve(handle: (n: number, res: ServerResponse) => void): Promise<{ url: string; count: () => number; server: Server }> {
  let n = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => handle(++n, res));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, count: () => n, server };
}

describe('llm client: remote servers cannot stall or flood us (issue 50 item 3)', function () {
  this.timeout(30000);
  const servers: Server[] = [];
  afterEach(() => {
    for (const s of servers.splice(0)) (s.closeAllConnections(), s.close());
  });
  const msgs = [{ role: 'user' as const, content: 'hi' }];

  it('Retry-After: 86400 is not obeyed: past the cap the backoff is used, and the call succeeds in well under a second', async () => {
    const s = await serve((n, res) => {
      if (n === 1) {
        res.writeHead(429, { 'retry-after': '86400', 'content-type': 'application/json' });
        res.end('{"error":"slow down"}');
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(completion('ok'));
      }
    });
    servers.push(s.server);
    const delays: number[] = [];
    const c = new LlmClient({
      baseUrl: s.url,
      model: 'm',
      minBackoffMs: 20,
      maxRetryAfterMs: 5000,
      onEvent: (e) => e.type === 'retry' && delays.push(e.delayMs),
    });
    const t0 = Date.now();
    const r = await c.chat({ messages: msgs });
    expect(r.content).to.equal('ok');
    expect(Date.now() - t0).to.be.below(1000);
    // The backoff of the first retry: 20 ms ± 25 % (the 86400 s asked for is above the 5 s cap).
    expect(delays).to.have.length(1);
    expect(delays[0]).to.be.within(15, 25);
  });

  it('a Retry-After within the cap is honoured but counted against the call deadline: past it the call ends at once naming both', async () => {
    const s = await serve((_n, res) => {
      res.writeHead(503, { 'retry-after': '3' });
      res.end('busy');
    });
    servers.push(s.server);
    const c = new LlmClient({ baseUrl: s.url, model: 'm', maxRetryAfterMs: 10000, deadlineMs: 1000 });
    const t0 = Date.now();
    const e = await c.chat({ messages: msgs }).catch((x: unknown) => x);
    expect(Date.now() - t0).to.be.below(800);
    expect(e).to.be.instanceOf(LlmTimeoutError);
    expect((e as Error).message).to.match(
      /gave up after 1 attempt\(s\): waiting 3000 ms \(retry-after 3 s\) to retry would pass the call's deadline of 1000 ms; last error: LLM HTTP 503/,
    );
    expect(s.count()).to.equal(1);
  });

  it('the attempt timeout is cut to what is left of the deadline', async () => {
    const s = await serve(() => {
      /* never answers */
    });
    servers.push(s.server);
    const c = new LlmClient({ baseUrl: s.url, model: 'm', timeoutMs: 60000, maxRetries: 3, deadlineMs: 400 });
    const t0 = Date.now();
    const e = await c.chat({ messages: msgs }).catch((x: unknown) => x);
    expect(e).to.be.instanceOf(LlmTimeoutError);
    expect(Date.now() - t0).to.be.below(3000);
  });

  it('a reply past the byte cap fails as unreadable: declared by Content-Length (not read), or streamed without end (cancelled)', async () => {
    const big = completion('x'.repeat(200000));
    const declared = await serve((_n, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(big) });
      res.end(big);
    });
    servers.push(declared.server);
    const e1 = await new LlmClient({ baseUrl: declared.url, model: 'm', maxReplyBytes: 65536 }).chat({ messages: msgs }).catch((x: unknown) => x);
    expect(e1).to.be.instanceOf(LlmResponseError);
    expect((e1 as Error).message).to.match(/is unreadable: more than 65536 bytes \(maxReplyBytes\), abandoned at the cap/);
    // Chunked, endless: 64 KiB chunks forever. The client stops reading past the cap; the server sees the connection close.
    let written = 0;
    let closed = false;
    const endless = await serve((_n, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"choices":[{"message":{"role":"assistant","content":"');
      const chunk = 'y'.repeat(65536);
      const pump = () => {
        while (!closed && res.write(chunk)) written += chunk.length;
        if (!closed) res.once('drain', pump);
      };
      res.on('close', () => (closed = true));
      pump();
    });
    servers.push(endless.server);
    const c = new LlmClient({ baseUrl: endless.url, model: 'm', maxReplyBytes: 1 << 20, maxRetries: 3 });
    const e2 = await c.chat({ messages: msgs }).catch((x: unknown) => x);
    expect(e2).to.be.instanceOf(LlmResponseError);
    expect((e2 as Error).message).to.match(/more than 1048576 bytes \(maxReplyBytes\).*it begins "\{\\"choices\\"/);
    // Not retried (the same request gets the same reply), and the stream was abandoned near the cap.
    expect(endless.count()).to.equal(1);
    await new Promise((r) => setTimeout(r, 200));
    expect(closed).to.equal(true);
    expect(written).to.be.below(64 << 20);
    expect(c.stats().byStatus['too-large']).to.equal(1);
  });

  it('a reply under the cap is read whole', async () => {
    const s = await serve((_n, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      // Chunked in two writes, with a multi-byte character split between them.
      const body = Buffer.from(completion('héllo'));
      const cut = body.indexOf(Buffer.from('é')) + 1;
      res.write(body.subarray(0, cut));
      setTimeout(() => res.end(body.subarray(cut)), 20);
    });
    servers.push(s.server);
    const r = await new LlmClient({ baseUrl: s.url, model: 'm', maxReplyBytes: 4096 }).chat({ messages: msgs });
    expect(r.content).to.equal('héllo');
  });
});
