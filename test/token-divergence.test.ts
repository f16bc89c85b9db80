/**
 * OPSD token diagnostics (lib/train/token-divergence.ts): token classes, the per-class means and
 * the top tokens computed by hand; then an OPSD step on the embedded tiny model whose diagnosed row
 * is its whole batch: the diagnostics' mean JSD (full logits, after the update's backward) equals the
 * step's loss (the fused, chunked JSD of the update), and the per-class figures add up.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addTokens, emptyDivergence, mergeDivergence, summarizeDivergence, tokenClass } from '../lib/train/token-divergence.js';
import { ensureDefaultModel } from '../lib/train/run.js';
import { cli, orSkip } from './helpers/run.js';
import { fakeBackend } from './helpers/fake-backend.js';
import { resolveConfig } from '../lib/config/train.js';
import { Trainer, type TrainItem } from '../lib/train/trainer.js';
import type { TrainBackend } from '../lib/train/backend.js';
import { oomError } from '../lib/errors.js';

describe('OPSD token diagnostics: hand-computed cases', () => {
  it('tokenClass: whitespace, punctuation, markdown symbols and <|…|> specials are format; a letter or digit makes content', () => {
    for (const t of [' ', '\n\n', '##', ' **', '-', ' |', '```', ':', '.', '<|im_end|>', '']) expect(tokenClass(t), JSON.stringify(t)).to.equal('format');
    for (const t of [' the', 'Method', '3', ' x2', 'é', '<think>']) expect(tokenClass(t), JSON.stringify(t)).to.equal('content');
  });

  it('summarizeDivergence: class means, JSD shares, top-1 agreement and the top ids by mean JSD', () => {
    const s = addTokens(emptyDivergence(), [
      { id: 5, text: '\n', jsd: 0.4, top1Agree: false },
      { id: 9, text: ' the', jsd: 0.1, top1Agree: true },
      { id: 5, text: '\n', jsd: 0.2, top1Agree: true },
      { id: 7, text: '**', jsd: 0.9, top1Agree: false },
    ]);
    const r = summarizeDivergence(mergeDivergence(s, emptyDivergence()), 2);
    // 4 tokens, JSD sum 1.6: mean 0.4; top-1 agreement 2/4.
    expect(r.tokens).to.equal(4);
    expect(r.meanJsd).to.be.closeTo(0.4, 1e-15);
    expect(r.top1Agreement).to.equal(0.5);
    // format: '\n', '\n', '**' → sum 1.5 over 3 = 0.5, share 1.5/1.6 = 0.9375; content: ' the' → 0.1, share 0.0625.
    expect(r.format.tokens).to.equal(3);
    expect(r.format.meanJsd).to.be.closeTo(0.5, 1e-15);
    expect(r.format.jsdShare).to.be.closeTo(0.9375, 1e-15);
    expect(r.content).to.deep.equal({ tokens: 1, meanJsd: 0.1, jsdShare: 0.0625 });
    // By mean JSD: id 7 (0.9), id 5 (0.3), id 9 (0.1); the top 2.
    expect(r.topTokens.map((t) => t.id)).to.deep.equal([7, 5]);
    expect(r.topTokens[1]).to.deep.include({ id: 5, text: '\n', count: 2 });
    expect(r.topTokens[1]!.meanJsd).to.be.closeTo(0.3, 1e-15);
  });
});

describe('OPSD token diagnostics out of memory (fake backend)', () => {
  it('cost the diagnostics, not the step: a log line, opsd.diagnosticRows 0 for the rest of the run, no tokenDivergence', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pg-tokdiv-oom-'));
    try {
      let calls = 0;
      const lines: string[] = [];
      const cfg = resolveConfig({
        flags: {
          stages: ['opsd'],
          opsd: { steps: 2, batchSize: 1, microBatch: 1 } as never,
          checkpoint: { every: 0 },
          validation: { validateEvery: 0, items: 0 },
        } as never,
      });
      const backend: TrainBackend = {
        ...fakeBackend(),
        opsdTokenDiagnostics: async () => {
          calls++;
          throw oomError('out of memory: simulated full-logit forward');
        },
      };
      const items: TrainItem[] = [
        { id: 'q', question: 'q', reference_answer: 'a', rubric: [{ id: 'r1', text: 'x', dimension: 'method_innovation' }], split: 'train' },
      ];
      await new Trainer(cfg, {
        backend,
        items,
        reward: async () => [],
        advantages: (r) => ({ advantages: r.map(() => 0), keep: r.map(() => true) }),
        runDir: join(tmp, 'run'),
        log: (l) => lines.push(l),
      }).run();
      expect(calls).to.equal(1);
      expect(cfg.opsd.diagnosticRows).to.equal(0);
      expect(lines.some((l) => /token diagnostics: out of memory .*off from now on/.test(l))).to.equal(true);
      const steps = readFileSync(join(tmp, 'run', 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(steps.filter((l) => typeof l.loss === 'number')).to.have.length(2);
      expect(steps.some((l) => 'tokenDivergence' in l)).to.equal(false);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});

describe('train: OPSD token diagnostics in the step line (embedded tiny model)', function () {
  this.timeout(600000);
  let tmp: string;
  before(async function () {
    await orSkip(this, () => ensureDefaultModel());
    tmp = mkdtempSync(join(tmpdir(), 'pg-tokdiv-'));
  });
  after(() => tmp && rmSync(tmp, { recursive: true, force: true }));

  it('the diagnosed batch (one row) gives the mean JSD the update computed as its loss, split by class', async () => {
    const out = join(tmp, 'run');
    const r = await cli([
      'train',
      '--out',
      out,
      '--stages',
      'opsd',
      '--opsd-steps',
      '2',
      '--opsd-batch-size',
      '1',
      '--opsd-micro-batch',
      '1',
      '--max-new-tokens',
      '8',
      '--lora-dropout',
      '0',
      '--validate-every',
      '0',
      '--seed',
      '3',
    ]);
    expect(r.code, r.out + r.err).to.equal(0);
    const steps = readFileSync(join(out, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => typeof l.loss === 'number');
    expect(steps).to.have.length(2);
    for (const st of steps) {
      const d = st.tokenDivergence as ReturnType<typeof summarizeDivergence>;
      expect(d.tokens).to.equal(st.completionTokens);
      // Full-logit JSD of the diagnostics = the fused chunked JSD of the loss (same weights, no dropout).
      expect(d.meanJsd).to.be.closeTo(st.loss as number, 1e-5 + 1e-4 * (st.loss as number));
      expect(d.format.tokens + d.content.tokens).to.equal(d.tokens);
      expect(d.format.jsdShare + d.content.jsdShare).to.be.closeTo(d.tokens ? 1 : 0, 1e-9);
      expect(d.top1Agreement).to.be.within(0, 1);
      expect(d.topTokens.length).to.be.within(1, 10);
      for (let i = 1; i < d.topTokens.length; i++) expect(d.topTokens[i - 1]!.meanJsd).to.be.at.least(d.topTokens[i]!.meanJsd);
    }
    // The report plots the class split and lists the last step's top tokens.
    const html = readFileSync(join(out, 'report.html'), 'utf8');
    expect(html).to.include('data-plot="token-divergence"');
    expect(html).to.include('data-plot="length-truncation"');
    expect(html).to.match(/OPSD: highest-divergence tokens.*OPSD step 2 \(global 2\)/s);
  });
});
