import { expect } from 'chai';
import { mkdtempSync, writeFileSync, readFileSync, existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveConfig, DEFAULTS } from '../lib/config/train.js';
import { takeItems, epochOrder, stepSeed } from '../lib/train/trainer.js';
import { writeCheckpoint, resolveCheckpoint, type TrainerState } from '../lib/train/checkpoint.js';

describe('train config', () => {
  it('layers defaults < preset < config file < flags', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pg-cfg-'));
    const file = join(dir, 'c.yaml');
    writeFileSync(file, 'grpo:\n  lr: 0.002\n  groupSize: 4\nseed: 7\n');
    const c = resolveConfig({ preset: 'qwen3-8b', file, flags: { seed: 9 } });
    expect(c.lora.r).to.equal(64); // preset
    expect(c.opsd.steps).to.equal(400); // preset (8B)
    expect(c.grpo.steps).to.equal(100);
    expect(c.grpo.lr).to.equal(0.002); // file beats preset
    expect(c.grpo.groupSize).to.equal(4);
    expect(c.seed).to.equal(9); // flag beats file
    expect(c.opsd.jsdBeta).to.equal(DEFAULTS.opsd.jsdBeta);
  });
  it('rejects unknown keys and bad values with the file and key named', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pg-cfg-'));
    const file = join(dir, 'bad.yaml');
    writeFileSync(file, 'grpo:\n  groupsize: 4\n');
    expect(() => resolveConfig({ file })).to.throw(/bad\.yaml.*unknown key grpo\.groupsize/);
    expect(() => resolveConfig({ flags: { stages: ['opsd', 'ppo' as never] } })).to.throw(/stages \(--stages\): unknown item "ppo"/);
    expect(() => resolveConfig({ flags: { sampling: { topP: 1.5 } as never } })).to.throw(/topP/);
    expect(() => resolveConfig({ flags: { judge: { kind: 'http' } as never } })).to.throw(/judge\.url/);
    // A section given as a scalar or a list is named as such; an empty one sets nothing.
    writeFileSync(file, 'checkpoint: true\n');
    expect(() => resolveConfig({ file })).to.throw(/bad\.yaml: checkpoint must be a mapping of its keys \(every, saveTotalLimit, background\), got true/);
    writeFileSync(file, 'lora: [1, 2]\n');
    expect(() => resolveConfig({ file })).to.throw(/bad\.yaml: lora must be a mapping/);
    writeFileSync(file, 'checkpoint:\n  # every: 10\nseed: 3\n');
    const c = resolveConfig({ file });
    expect([c.checkpoint.every, c.checkpoint.background, c.seed]).to.deep.equal([DEFAULTS.checkpoint.every, true, 3]);
  });
  it('returns a config of its own: changing one (the memory plan, out-of-memory recovery, the judge-overlap fallback do) leaves the defaults, presets and later configs alone', () => {
    const fresh = JSON.stringify(resolveConfig({ preset: 'qwen3-1.7b' }));
    const plain = JSON.stringify(resolveConfig({}));
    for (const c of [resolveConfig({}), resolveConfig({ preset: 'qwen3-1.7b' }), resolveConfig({ flags: { seed: 3 } })]) {
      c.memory.rolloutRows = 64;
      c.grpo.judgeOverlap = 'off';
      c.grpo.microBatch = 1;
      c.stages.push('sft');
      c.lora.targetModules.pop();
    }
    expect(JSON.stringify(resolveConfig({ preset: 'qwen3-1.7b' }))).to.equal(fresh);
    expect(JSON.stringify(resolveConfig({}))).to.equal(plain);
    expect(DEFAULTS.memory.rolloutRows).to.equal(0);
    expect(DEFAULTS.grpo.judgeOverlap).to.equal('auto');
  });
  it('accepts the ablation orders', () => {
    for (const s of [['opsd'], ['grpo'], ['grpo', 'opsd'], ['sft'], ['opsd', 'grpo']]) {
      expect(resolveConfig({ flags: { stages: s as never } }).stages).to.deep.equal(s);
    }
  });
});

describe('data cursor and seeds', () => {
  it('takes items deterministically across epochs, so a resumed cursor continues the same order', () => {
    const items = Array.from({ length: 5 }, (_, i) => i);
    let cur = { epoch: 0, position: 0 };
    const seen: number[] = [];
    for (let i = 0; i < 4; i++) {
      const r = takeItems(items, 3, 42, cur);
      seen.push(...r.batch);
      cur = r.cursor;
    }
    // Replay from a mid-way cursor gives the same continuation.
    const a = takeItems(items, 3, 42, { epoch: 0, position: 0 });
    const b = takeItems(items, 3, 42, a.cursor);
    expect([...a.batch, ...b.batch]).to.deep.equal(seen.slice(0, 6));
    expect([...epochOrder(5, 42, 0)].sort()).to.deep.equal([0, 1, 2, 3, 4]);
    expect(seen.slice(0, 5).sort()).to.deep.equal([0, 1, 2, 3, 4]); // each epoch is a permutation
  });
  it('derives distinct step seeds', () => {
    const s = new Set<number>();
    for (let st = 0; st < 3; st++) for (let k = 0; k < 50; k++) s.add(stepSeed(1234, st, k, 1));
    expect(s.size).to.equal(150);
  });
});

describe('checkpoints', () => {
  const state = (step: number): TrainerState => ({
    version: 1,
    stageIndex: 0,
    stageStep: step,
    globalStep: step,
    cursor: { epoch: 0, position: step },
    validation: [],
    stageDone: false,
    seed: 1,
    config: {},
    wallSeconds: 0,
  });
  it('writes atomically and resolves latest', async () => {
    const run = mkdtempSync(join(tmpdir(), 'pg-ckpt-'));
    await writeCheckpoint(run, state(2), async (d) => writeFileSync(join(d, 'adapter.bin'), 'a'));
    await writeCheckpoint(run, state(4), async (d) => writeFileSync(join(d, 'adapter.bin'), 'b'));
    const r = resolveCheckpoint(run);
    expect(r.state.globalStep).to.equal(4);
    expect(readFileSync(join(r.dir, 'adapter.bin'), 'utf8')).to.equal('b');
    expect(readdirSync(join(run, 'checkpoints')).filter((n) => n.startsWith('.tmp'))).to.deep.equal([]);
  });
  it('a failure while writing leaves the previous checkpoint as latest', async () => {
    const run = mkdtempSync(join(tmpdir(), 'pg-ckpt-'));
    await writeCheckpoint(run, state(2), async (d) => writeFileSync(join(d, 'adapter.bin'), 'a'));
    let threw = false;
    try {
      await writeCheckpoint(run, state(4), async () => {
        throw new Error('disk full');
      });
    } catch {
      threw = true;
    }
    expect(threw).to.equal(true);
    expect(resolveCheckpoint(run).state.globalStep).to.equal(2);
    expect(existsSync(join(run, 'checkpoints', 'step-000004'))).to.equal(false);
  });
  it('names the directory when nothing can be resumed', () => {
    const run = mkdtempSync(join(tmpdir(), 'pg-ckpt-'));
    expect(() => resolveCheckpoint(run)).to.throw(/no checkpoint found/);
    expect(() => resolveCheckpoint(join(run, 'nope'))).to.throw(/no such directory/);
  });
});
