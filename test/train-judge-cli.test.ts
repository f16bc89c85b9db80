/**
 * A failing judge as a new user meets it: `train` with an HTTP judge on the embedded tiny model.
 * A judge URL answering 404 fails the start-up check (exit 1, a message, no stack trace); a judge
 * whose replies cannot be read stops GRPO at its first step with a checkpoint and the resume
 * command (exit non-zero, not "reward 0.000" and exit 0); once the judge answers, `--resume`
 * finishes the run. `--judge-no-think` (as in eval) reaches the judge requests.
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { ensureDefaultModel } from '../lib/train/run.js';
import { resolveCheckpoint } from '../lib/train/checkpoint.js';
import { startFakeLlm, type FakeLlm } from './helpers/fake-llm.js';
import { orSkip } from './helpers/run.js';

const CLI = join(packageRoot, 'dist', 'bin', 'papergym-native.js');
const SMALL = [
  '--stages',
  'grpo',
  '--grpo-steps',
  '2',
  '--questions-per-step',
  '1',
  '--group-size',
  '2',
  '--max-new-tokens',
  '6',
  '--checkpoint-every',
  '1',
  '--validate-every',
  '0',
  '--seed',
  '3',
];

function run(args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [CLI, ...args], { cwd: packageRoot, env: { ...process.env, CI: 'true' } });
    let out = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (out += b));
    p.on('close', (code) => resolve({ code, out }));
  });
}

describe('train with a failing HTTP judge (embedded tiny model, loopback judge)', function () {
  this.timeout(600000);
  let tmp: string;
  let judge: FakeLlm;
  let mode: 'unreadable' | 'yes' = 'unreadable';
  before(async function () {
    await orSkip(this, () => ensureDefaultModel());
    tmp = mkdtempSync(join(tmpdir(), 'pg-train-judge-'));
    judge = await startFakeLlm({
      respond: (r) => {
        const user = r.body.messages[r.body.messages.length - 1].content;
        if (user.startsWith('Reply with the single word')) return 'Yes';
        return mode === 'yes' ? 'Yes' : 'The plan is interesting and touches on many aspects of the question.';
      },
    });
  });
  after(async () => {
    await judge?.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('a judge URL answering 404 fails the start-up check: exit 1, a clear message, no stack trace, no run dir', async () => {
    const web = createServer((_req, res) => {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('404 page not found');
    });
    await new Promise<void>((r) => web.listen(0, '127.0.0.1', r));
    try {
      const out = join(tmp, 'r404');
      const r = await run([
        'train',
        '--out',
        out,
        ...SMALL,
        '--judge',
        'http',
        '--judge-url',
        `http://127.0.0.1:${(web.address() as AddressInfo).port}/v1`,
        '--judge-model',
        'j',
      ]);
      expect(r.code).to.equal(1);
      expect(r.out).to.match(/failed the start-up check .*LLM HTTP 404/);
      expect(r.out).to.not.match(/\n\s+at .*\.js:\d+/);
      expect(existsSync(out)).to.equal(false);
    } finally {
      web.close();
    }
  });

  it('unreadable judge replies stop GRPO at its first step with a checkpoint and the resume command; --resume finishes once the judge answers', async () => {
    const out = join(tmp, 'unread');
    const r = await run(['train', '--out', out, ...SMALL, '--judge', 'http', '--judge-url', judge.url, '--judge-model', 'j', '--judge-no-think']);
    expect(r.code, r.out).to.equal(1);
    expect(r.out).to.match(
      /\[grpo\] step 1 failed: judge j@.*GRPO step 1: (\d+) of \1 verdicts are null \(100% > 50%: 0 failed requests, \1 unreadable replies/,
    );
    expect(r.out).to.include(`resume with: papergym-native train --resume ${out}`);
    expect(r.out).to.not.match(/\n\s+at .*\.js:\d+/);
    const ck = resolveCheckpoint(out);
    expect(ck.state.stageStep).to.equal(0);
    const items = judge.log.filter((e) => !e.body.messages[0].content.startsWith('Reply with'));
    expect(items.length).to.be.greaterThan(0);
    expect(items.every((e) => (e.body.chat_template_kwargs as { enable_thinking?: boolean })?.enable_thinking === false)).to.equal(true);
    mode = 'yes';
    const again = await run(['train', '--resume', out]);
    expect(again.code, again.out).to.equal(0);
    // The run ends with the judge's totals (an HTTP judge: its request counters, no local timings).
    expect(
      again.out,
      again.out
        .split('\n')
        .filter((l) => l.includes('judge totals'))
        .join('; '),
    ).to.match(/judge totals: [1-9]\d* prompts scored, [1-9]\d* prompt tokens, 0 cache hits, 0 failures\n/);
    expect(again.out).to.match(/\[grpo\] step 1\/2 loss -?[\d.]+ reward 1\.000 null 0%/); // the null rate in the progress line
    const steps = readFileSync(join(out, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((m) => typeof m.loss === 'number');
    expect(steps).to.have.length(2);
    expect(steps[0].judge).to.deep.include({ nulls: 0, errors: 0 });
    expect(steps[0].judge.verdicts).to.be.greaterThan(0);
    expect(steps[0].judgeNullRate).to.equal(0);
    expect(steps[0].rewardMean).to.equal(1);
  });
});
