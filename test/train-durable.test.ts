/**
 * A run dir used by one process at a time and a resume that refuses broken state (issue 38 items
 * 1 and 4), with the real CLI: a second `train` on a locked run dir fails at once naming the
 * holder's pid; `--resume` refuses a checkpoint missing optimizer.safetensors, a trainer state
 * with a negative or absurd step, a tampered learning rate, a `latest` pointing outside the run dir,
 * a file shorter than the checkpoint wrote; and a resume that fails while loading the checkpoint
 * leaves metrics.jsonl as it was. A run killed mid-checkpoint (PAPERGYM_FAULT) resumes.
 */
import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, unlinkSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RUN_LOCK, resumableKeys } from '../lib/train/run.js';
import { checkResumeCheckpoint, resolveCheckpoint } from '../lib/train/checkpoint.js';
import { cli, CLI, SMALL_TRAIN_FLAGS as SMALL } from './helpers/run.js';
import { packageRoot } from '../lib/native.js';

const lockModule = join(dirname(fileURLToPath(import.meta.url)), '..', 'lib', 'util', 'lock.js');

/** A second real process holding `path` (prints `locked` once it holds it; exits when its stdin closes). */
function holder(path: string): Promise<ChildProcess> {
  const src = `import { acquireLock } from ${JSON.stringify(lockModule)};
acquireLock(${JSON.stringify(path)}, 'test', 'holder'); process.stdout.write('locked\\n');
process.stdin.on('data', () => {}); process.stdin.on('end', () => process.exit(0));`;
  const c = spawn(process.execPath, ['--input-type=module', '-e', src], { stdio: ['pipe', 'pipe', 'inherit'] });
  return new Promise((res, rej) => {
    c.stdout!.once('data', () => res(c));
    c.once('exit', (code) => rej(new Error(`holder exited ${code}`)));
  });
}

describe('train: one process per run dir, resume refuses broken state', function () {
  this.timeout(300000);
  let tmp: string;
  let run: string;
  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-durable-'));
    run = join(tmp, 'run');
    const r = await cli(['train', '--out', run, '--opsd-steps', '2', '--grpo-steps', '0', '--checkpoint-every', '1', ...SMALL]);
    expect(r.code, r.err).to.equal(0);
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  /** A copy of the finished run to break. */
  const copy = (name: string) => {
    const d = join(tmp, name);
    cpSync(run, d, { recursive: true });
    return d;
  };
  const latestDir = (d: string) => join(d, 'checkpoints', readFileSync(join(d, 'checkpoints', 'latest'), 'utf8').trim());

  it('a second train on a run dir in use (fresh or --resume) fails at once naming the holder pid; nothing there changes', async () => {
    const d = copy('locked');
    const metrics = readFileSync(join(d, 'metrics.jsonl'), 'utf8');
    const h = await holder(join(d, RUN_LOCK));
    try {
      const t0 = Date.now();
      for (const args of [
        ['train', '--resume', d, '--grpo-steps', '1'],
        ['train', '--out', d, ...SMALL],
      ]) {
        const r = await cli(args);
        expect(r.code, r.err).to.equal(1);
        expect(r.err).to.contain(`run dir ${d} is in use by pid ${h.pid}`);
      }
      expect(Date.now() - t0).to.be.below(60000);
      expect(readFileSync(join(d, 'metrics.jsonl'), 'utf8')).to.equal(metrics);
    } finally {
      h.stdin!.end();
    }
    await new Promise((r) => h.once('exit', r));
    // Once the holder is gone (the OS lock went with it) the resume goes ahead.
    const r = await cli(['train', '--resume', d, '--grpo-steps', '1']);
    expect(r.code, r.err).to.equal(0);
  });

  it('refuses a checkpoint without optimizer.safetensors, or with a file shorter than written', async () => {
    const d = copy('no-opt');
    unlinkSync(join(latestDir(d), 'optimizer.safetensors'));
    const r = await cli(['train', '--resume', d, '--grpo-steps', '1']);
    expect(r.code).to.equal(1);
    expect(r.err).to.contain(`${join(latestDir(d), 'optimizer.safetensors')} is missing`);
    const d2 = copy('short');
    const f = join(latestDir(d2), 'adapter_model.safetensors');
    truncateSync(f, statSync(f).size - 3);
    expect(() => resolveCheckpoint(d2)).to.throw(/adapter_model\.safetensors has \d+ bytes, the checkpoint wrote \d+/);
    // An older checkpoint without the files list: the optimizer is still required once a step ran.
    const d3 = copy('no-opt-old');
    const sp = join(latestDir(d3), 'trainer_state.json');
    const st = JSON.parse(readFileSync(sp, 'utf8'));
    delete st.files;
    st.stageStep = 1;
    st.stageIndex = 0;
    writeFileSync(sp, JSON.stringify(st));
    unlinkSync(join(latestDir(d3), 'optimizer.safetensors'));
    expect(() => checkResumeCheckpoint(resolveCheckpoint(d3), resumableKeys())).to.throw(/optimizer\.safetensors missing from the checkpoint/);
  });

  it('refuses a trainer state with a negative step, a step of 1e12, or a tampered learning rate', async () => {
    for (const [name, edit, re] of [
      ['neg', (s: Record<string, unknown>) => (s.globalStep = -1), /globalStep is -1, not an integer in \[0, 1000000000\]/],
      ['huge', (s: Record<string, unknown>) => (s.globalStep = 1e12), /globalStep is 1000000000000/],
      ['stage', (s: Record<string, unknown>) => Object.assign(s, { stageIndex: 0, stageStep: 2000 }), /stageStep is 2000/],
      [
        'lr',
        (s: Record<string, unknown>) => ((s.config as { opsd: { lr: number } }).opsd.lr = 0.5),
        /trainer_state\.json has opsd\.lr = 0\.5, the run's .*config\.json has [0-9.e-]+ \(a tampered checkpoint/,
      ],
    ] as const) {
      const d = copy(`state-${name}`);
      const sp = join(latestDir(d), 'trainer_state.json');
      const st = JSON.parse(readFileSync(sp, 'utf8'));
      edit(st);
      writeFileSync(sp, JSON.stringify(st));
      const r = await cli(['train', '--resume', d, '--grpo-steps', '1']);
      expect(r.code, name).to.equal(1);
      expect(r.err, name).to.match(re);
      expect(r.err).to.not.match(/\n\s+at /);
    }
  });

  it('refuses a latest that points outside the run dir', async () => {
    const d = copy('escape');
    const outside = join(tmp, 'elsewhere');
    cpSync(latestDir(d), join(outside, 'step-000002'), { recursive: true });
    for (const name of ['../../elsewhere/step-000002', '/etc', 'step-000002/../../../elsewhere/step-000002']) {
      writeFileSync(join(d, 'checkpoints', 'latest'), name + '\n');
      const r = await cli(['train', '--resume', d, '--grpo-steps', '1']);
      expect(r.code, name).to.equal(1);
      expect(r.err).to.contain('not a checkpoint of this run');
    }
  });

  it('a resume that fails while loading the checkpoint truncates nothing (metrics.jsonl and config.json unchanged)', async () => {
    const d = copy('bad-adapter');
    const f = join(latestDir(d), 'adapter_model.safetensors');
    writeFileSync(f, Buffer.alloc(statSync(f).size, 0x7b)); // same size, not a safetensors file
    // A row past the checkpoint (a crash after it was logged): a good resume would drop it.
    const p = join(d, 'metrics.jsonl');
    writeFileSync(p, readFileSync(p, 'utf8') + JSON.stringify({ stage: 'opsd', step: 3, globalStep: 3, loss: 1 }) + '\n');
    const before = readFileSync(p, 'utf8');
    const cfgBefore = readFileSync(join(d, 'config.json'), 'utf8');
    const r = await cli(['train', '--resume', d, '--grpo-steps', '1']);
    expect(r.code).to.equal(1);
    expect(r.err).to.contain('adapter_model.safetensors');
    expect(readFileSync(p, 'utf8')).to.equal(before);
    // --grpo-steps 1 changes the run's config: it is written only after the checkpoint loaded.
    expect(readFileSync(join(d, 'config.json'), 'utf8')).to.equal(cfgBefore);
  });

  it('a train killed inside a checkpoint write (PAPERGYM_FAULT) resumes from a complete checkpoint', async () => {
    const out = join(tmp, 'killed');
    const r = await new Promise<{ signal: string | null }>((res) => {
      const c = spawn(process.execPath, [CLI, 'train', '--out', out, '--opsd-steps', '2', '--grpo-steps', '0', '--checkpoint-every', '1', ...SMALL], {
        cwd: packageRoot,
        env: { ...process.env, CI: 'true', PAPERGYM_FAULT: 'checkpoint:after-rename' },
        stdio: 'ignore',
      });
      c.on('exit', (_code, signal) => res({ signal }));
    });
    expect(r.signal).to.equal('SIGKILL');
    expect(existsSync(join(out, 'checkpoints', 'step-000001'))).to.equal(true);
    expect(existsSync(join(out, 'checkpoints', 'latest'))).to.equal(false); // killed before latest named its first checkpoint
    const again = await cli(['train', '--resume', out]);
    expect(again.code, again.err).to.equal(0);
    expect(resolveCheckpoint(out).state.globalStep).to.equal(2);
  });
});
