import { expect } from 'chai';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHttpJudge } from '../lib/judge/http.js';

type Behaviour = (n: number, body: { messages: { content: string }[]; response_format?: unknown }, res: ServerResponse) => boolean;

/** Loopback OpenAI-compatible server; `behave` may handle a request itself (return true), else it answers. */
async function startServer(behave: Behaviour): Promise<{ url: string; server: Server; count: () => number; close: () => Promise<void> }> {
  let n = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let data = '';
    req.on('data', (c) => (data += c));
    req.on('end', () => {
      n++;
      const body = JSON.parse(data);
      if (behave(n, body, res)) return;
      const user: string = body.messages[body.messages.length - 1].content;
      const plan = /<plan>\n([\s\S]*?)\n<\/plan>/.exec(user)![1];
      let content: string;
      if (body.response_format) {
        const items = [...user.matchAll(/^- \[([^\]]+)\] (.*)$/gm)].map((m) => ({ id: m[1], met: plan.includes(m[2]) }));
        content = JSON.stringify({ verdicts: items });
      } else {
        const item = /<item>\n([\s\S]*?)\n<\/item>/.exec(user)![1];
        content = plan.includes(item) ? 'Yes' : 'No';
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: 'x',
          object: 'chat.completion',
          choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 10, completion_tokens: 1, total_tokens: 11 },
        }),
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    server,
    count: () => n,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const items = [
  { id: 'a', text: 'ablation study' },
  { id: 'b', text: 'strong baselines' },
];

describe('judge http fault injection (loopback)', function () {
  this.timeout(20000);
  it('retries 5xx (with retry-after) and recovers', async () => {
    const s = await startServer((n, _b, res) => {
      if (n <= 2) {
        res.writeHead(n === 1 ? 503 : 500, { 'retry-after': '0' });
        res.end('overloaded');
        return true;
      }
      return false;
    });
    try {
      const j = createHttpJudge({ url: s.url, model: 'm', concurrency: 1, minBackoffMs: 10, maxRetries: 3 });
      const v = await j.judge([{ question: 'Q', plan: 'an ablation study', items }]);
      expect(v[0].map((x) => x.met)).to.deep.equal([true, false]);
      expect(s.count()).to.equal(4);
      expect(j.stats()).to.include({ requests: 2, failures: 0, promptTokens: 20 });
    } finally {
      await s.close();
    }
  });
  it('a hung request times out and is retried', async () => {
    const s = await startServer((n) => n === 1); // first request never answered
    try {
      const j = createHttpJudge({ url: s.url, model: 'm', concurrency: 1, timeoutMs: 300, minBackoffMs: 10, maxRetries: 2 });
      const t0 = Date.now();
      const v = await j.judge([{ question: 'Q', plan: 'strong baselines', items: [items[1]] }]);
      expect(v[0][0].met).to.equal(true);
      expect(Date.now() - t0).to.be.at.least(250);
      expect(s.count()).to.equal(2);
    } finally {
      await s.close();
    }
  });
  it('persistent 5xx: null verdicts with error, counted, not cached; other items unaffected', async () => {
    let broken = true;
    const s = await startServer((_n, body, res) => {
      if (broken && body.messages[0].content.includes('strong baselines\n</item>')) {
        res.writeHead(502);
        res.end('bad gateway');
        return true;
      }
      return false;
    });
    try {
      const j = createHttpJudge({ url: s.url, model: 'm', minBackoffMs: 5, maxRetries: 1 });
      const v = await j.judge([{ question: 'Q', plan: 'ablation study', items }]);
      expect(v[0][0].met).to.equal(true);
      expect(v[0][1]).to.include({ met: null, error: true });
      expect(v[0][1].raw).to.match(/502/);
      expect(j.stats().failures).to.equal(1);
      broken = false;
      const again = await j.judge([{ question: 'Q', plan: 'ablation study', items }]);
      expect(again[0].map((x) => x.met)).to.deep.equal([true, false]);
      expect(j.stats().cacheHits).to.equal(1);
    } finally {
      await s.close();
    }
  });
  it('per-plan mode over HTTP, 4xx is not retried', async () => {
    const s = await startServer((n, _b, res) => {
      if (n === 1) {
        res.writeHead(400);
        res.end('bad request');
        return true;
      }
      return false;
    });
    try {
      const j = createHttpJudge({ url: s.url, model: 'm', mode: 'per-plan', minBackoffMs: 5 });
      const bad = await j.judge([{ question: 'Q', plan: 'x', items }]);
      expect(bad[0].every((x) => x.met === null && x.error)).to.equal(true);
      expect(s.count()).to.equal(1);
      const v = await j.judge([{ question: 'Q', plan: 'strong baselines', items }]);
      expect(v[0].map((x) => x.met)).to.deep.equal([false, true]);
    } finally {
      await s.close();
    }
  });
});
