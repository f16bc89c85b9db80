/**
 * `serve`'s pipelined decode loop (lib/serve/server.ts pump/dispatch) under faults, on a scripted
 * stepper (deterministic tokens, controllable encode / step / detokenize), through real HTTP on
 * loopback: a client that disconnects while its prompt is being encoded gets no rows on the engine;
 * a detokenizer failure answers the requests in flight with an error (the process survives and
 * serves the next request); a failed engine step cancels its rows on the engine.
 */
import { expect } from 'chai';
import { request } from 'node:http';
import { ChatServer } from '../lib/serve/server.js';
import type { ServeStepper } from '../lib/serve/stepper.js';
import type { EngineRow, EngineStep } from '../lib/model/engine.js';

/** Records unhandled rejections until `stop()` (prepended: mocha's own listener, which would fail
 * the run, sees them too). */
function recordUnhandled(): { unhandled: unknown[]; stop: () => void } {
  const unhandled: unknown[] = [];
  const on = (e: unknown) => unhandled.push(e);
  process.prependListener('unhandledRejection', on);
  return { unhandled, stop: () => process.off('unhandledRejection', on) };
}

/** Each row emits tokens 'a', 'b', 'c', … (ids 97, 98, …) until maxNewTokens; ids are their char codes. */
class ScriptedStepper implements ServeStepper {
  readonly maxRows = 8;
  capacity = 4096;
  readonly stopIds = [0];
  rows = new Map<number, { n: number; max: number }>();
  added: number[] = [];
  cancelled: number[] = [];
  encodeGate?: Promise<void>;
  failDecodeOnce = false;
  failStepOnce = false;
  /** Step number (1-based) that rejects; with slowDecodeMs, it rejects while the previous step's tokens are still being routed. */
  failStepAt = 0;
  slowDecodeMs = 0;
  steps = 0;
  async encode(): Promise<number[]> {
    if (this.encodeGate) await this.encodeGate;
    return [1, 2, 3];
  }
  add(row: EngineRow): void {
    this.added.push(row.id);
    this.rows.set(row.id, { n: 0, max: row.maxNewTokens ?? 16 });
  }
  cancel(id: number): void {
    this.cancelled.push(id);
    this.rows.delete(id);
  }
  async step(): Promise<EngineStep> {
    this.steps++;
    if (this.steps === this.failStepAt) throw new Error('simulated engine failure in the pipelined step');
    await new Promise((r) => setImmediate(r));
    if (this.failStepOnce) {
      this.failStepOnce = false;
      throw new Error('simulated engine failure');
    }
    const tokens: EngineStep['tokens'] = [];
    for (const [id, r] of this.rows) {
      const finish = r.n + 1 >= r.max ? 'length' : null;
      tokens.push({ id, token: 97 + (r.n % 26), logprob: 0, rawLogprob: 0, finish });
      r.n++;
      if (finish) this.rows.delete(id);
    }
    return {
      tokens,
      active: this.rows.size,
      waiting: 0,
      joined: 0,
      prefillTokens: 0,
      batchRows: tokens.length,
      shifts: 0,
      graphCaptures: 0,
      prefillMs: 0,
      decodeMs: 0,
      sampleMs: 0,
    };
  }
  async decodeBatch(ids: number[][]): Promise<string[]> {
    if (this.failDecodeOnce) {
      this.failDecodeOnce = false;
      throw new Error('simulated detokenizer failure');
    }
    if (this.slowDecodeMs) await new Promise((r) => setTimeout(r, this.slowDecodeMs));
    return ids.map((a) => String.fromCharCode(...a.filter((t) => t >= 32)));
  }
  tokenInfo(id: number): { token: string; bytes: number[] } {
    return { token: String.fromCharCode(id), bytes: [id] };
  }
  async release(): Promise<void> {}
}

describe('serve: the pipelined decode loop under faults (scripted stepper)', function () {
  this.timeout(30000);
  const body = (extra: Record<string, unknown> = {}) => JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 6, ...extra });
  const start = async (st: ScriptedStepper) => {
    const srv = new ChatServer({ backend: { stepper: () => st, generate: () => Promise.reject(new Error('unused')) }, modelId: 'm' });
    const { url } = await srv.start();
    return { srv, url };
  };
  const post = (url: string, b = body()) => fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: b });

  it('serves the scripted tokens (sanity: the fake is faithful)', async () => {
    const st = new ScriptedStepper();
    const { srv, url } = await start(st);
    try {
      const j = (await (await post(url)).json()) as { choices: { message: { content: string }; finish_reason: string }[] };
      expect(j.choices[0]!.message.content).to.equal('abcdef');
      expect(j.choices[0]!.finish_reason).to.equal('length');
    } finally {
      await srv.close();
    }
  });

  it('without max_tokens a request gets the context left after its prompt (vLLM), not a 400 naming a max_tokens it never sent', async () => {
    const st = new ScriptedStepper();
    st.capacity = 9; // prompt of 3 tokens: 6 left, under the default max_tokens (1024)
    const { srv, url } = await start(st);
    try {
      const r = await post(url, JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }));
      expect(r.status).to.equal(200);
      const j = (await r.json()) as { choices: { message: { content: string }; finish_reason: string }[] };
      expect(j.choices[0]!.message.content).to.equal('abcdef');
      expect(j.choices[0]!.finish_reason).to.equal('length');
      // An explicit max_tokens that does not fit is still the client's error.
      const e = await post(url, body({ max_tokens: 7 }));
      expect(e.status).to.equal(400);
      expect(((await e.json()) as { error: { message: string } }).error.message).to.include('max_tokens 7');
    } finally {
      await srv.close();
    }
  });

  it('a client that disconnects while its prompt is encoded puts no rows on the engine', async () => {
    const st = new ScriptedStepper();
    let open!: () => void;
    st.encodeGate = new Promise<void>((r) => (open = r));
    const { srv, url } = await start(st);
    try {
      const u = new URL(`${url}/chat/completions`);
      const req = request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { 'content-type': 'application/json' } });
      req.on('error', () => undefined);
      req.end(body({ max_tokens: 1000 }));
      // Wait until the server is inside encode (the request was counted), then drop the connection.
      while (srv.stats().requests < 1) await new Promise((r) => setTimeout(r, 5));
      req.destroy();
      await new Promise((r) => setTimeout(r, 100));
      st.encodeGate = undefined;
      open();
      await new Promise((r) => setTimeout(r, 200));
      expect(st.added, 'rows added for a gone client').to.deep.equal([]);
      expect(srv.stats().liveRows).to.equal(0);
      // The server still serves.
      const j = (await (await post(url)).json()) as { choices: { message: { content: string } }[] };
      expect(j.choices[0]!.message.content).to.equal('abcdef');
    } finally {
      await srv.close();
    }
  });

  it('a detokenizer failure answers the requests in flight with an error and the next request is served', async () => {
    const st = new ScriptedStepper();
    const { srv, url } = await start(st);
    const { unhandled, stop } = recordUnhandled();
    try {
      st.failDecodeOnce = true;
      const a = await post(url);
      expect(a.status).to.equal(500);
      expect(((await a.json()) as { error: { message: string } }).error.message).to.include('simulated detokenizer failure');
      st.failDecodeOnce = true;
      const text = await (await post(url, body({ stream: true }))).text();
      expect(text).to.include('simulated detokenizer failure');
      expect(text.trimEnd().endsWith('data: [DONE]')).to.equal(true);
      await new Promise((r) => setTimeout(r, 50));
      expect(unhandled).to.deep.equal([]);
      expect(srv.stats().liveRows).to.equal(0);
      const j = (await (await post(url)).json()) as { choices: { message: { content: string } }[] };
      expect(j.choices[0]!.message.content).to.equal('abcdef');
    } finally {
      stop();
      await srv.close();
    }
  });

  it('an engine step that fails while the previous step is routed (the pipelined step) is no unhandled rejection; the request gets its error', async () => {
    const st = new ScriptedStepper();
    st.failStepAt = 3;
    st.slowDecodeMs = 30;
    const { srv, url } = await start(st);
    const { unhandled, stop } = recordUnhandled();
    try {
      const text = await (await post(url, body({ stream: true }))).text();
      expect(text).to.include('simulated engine failure in the pipelined step');
      await new Promise((r) => setTimeout(r, 50));
      expect(unhandled.map(String)).to.deep.equal([]);
      st.slowDecodeMs = 0;
      const j = (await (await post(url)).json()) as { choices: { message: { content: string } }[] };
      expect(j.choices[0]!.message.content).to.equal('abcdef');
    } finally {
      stop();
      await srv.close();
    }
  });

  it('a failed engine step cancels its rows on the engine, answers 500, and the next request is served', async () => {
    const st = new ScriptedStepper();
    const { srv, url } = await start(st);
    try {
      st.failStepOnce = true;
      const r = await post(url);
      expect(r.status).to.equal(500);
      expect(st.rows.size, 'rows left decoding on the engine').to.equal(0);
      expect(st.cancelled).to.include(st.added[0]);
      const j = (await (await post(url)).json()) as { choices: { message: { content: string } }[] };
      expect(j.choices[0]!.message.content).to.equal('abcdef');
    } finally {
      await srv.close();
    }
  });
});
