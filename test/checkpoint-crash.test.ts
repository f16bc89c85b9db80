/**
 * Crash-safe checkpoints (lib/train/checkpoint.ts, issue 38 item 3): a child process writes a
 * checkpoint and is SIGKILLed at each named point of the write (PAPERGYM_FAULT=checkpoint:<point>,
 * no timing luck). After every kill `latest` names a complete checkpoint (every file its
 * trainer_state.json lists, with its size) holding the previous or the new state, the leftovers
 * are removed at the next start (cleanCheckpointTemps) without touching what `latest` names, and
 * the next write succeeds. Both a new step and a rewrite of the step `latest` names (the window
 * that lost the only good copy before) are covered.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHECKPOINT_FAULT_POINTS, cleanCheckpointTemps, resolveCheckpoint, writeCheckpoint, type TrainerState } from '../lib/train/checkpoint.js';

const ckModule = join(dirname(fileURLToPath(import.meta.url)), '..', 'lib', 'train', 'checkpoint.js');

const state = (step: number, tag: string): TrainerState => ({
  version: 1,
  stageIndex: 0,
  stageStep: step,
  globalStep: step,
  cursor: { epoch: 0, position: step },
  validation: [],
  stageDone: false,
  seed: 1,
  config: { stages: ['opsd'], seed: 1, tag },
  wallSeconds: 0,
});

/** Writes `state(step, tag)` with three files whose contents name `tag`, in a child process killed at `fault`. */
function childWrite(run: string, step: number, tag: string, fault: string): { status: number | null; signal: string | null } {
  const src = `import { writeCheckpoint } from ${JSON.stringify(ckModule)};
import { writeFileSync } from 'node:fs'; import { join } from 'node:path';
const st = ${JSON.stringify(state(step, tag))};
await writeCheckpoint(${JSON.stringify(run)}, st, async (d) => {
  for (const f of ['adapter_model.safetensors', 'adapter_config.json', 'optimizer.safetensors']) writeFileSync(join(d, f), ${JSON.stringify(tag)} + ':' + f + '-'.repeat(${step}));
});`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', src], {
    env: { ...process.env, PAPERGYM_FAULT: `checkpoint:${fault}` },
    encoding: 'utf8',
  });
  return { status: r.status, signal: r.signal };
}

/** The tag of the complete checkpoint `latest` names (asserting every listed file is there with the tag). */
function latestTag(run: string): string {
  const ck = resolveCheckpoint(run); // throws on a missing or short file
  const tag = (ck.state.config as { tag: string }).tag;
  const files = Object.keys(ck.state.files ?? {});
  expect(files.sort()).to.deep.equal(['adapter_config.json', 'adapter_model.safetensors', 'optimizer.safetensors']);
  for (const f of files) expect(readFileSync(join(ck.dir, f), 'utf8').startsWith(`${tag}:${f}`), `${ck.dir}/${f}`).to.equal(true);
  return tag;
}

describe('crash-safe checkpoints (a kill in each window of the write)', function () {
  this.timeout(60000);
  let tmp: string;
  before(() => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-ckcrash-'));
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  const write = (run: string, step: number, tag: string) =>
    writeCheckpoint(run, state(step, tag), async (d) => {
      const { writeFileSync } = await import('node:fs');
      for (const f of ['adapter_model.safetensors', 'adapter_config.json', 'optimizer.safetensors'])
        writeFileSync(join(d, f), `${tag}:${f}${'-'.repeat(step)}`);
    });

  for (const kind of ['new step', 'rewrite of the latest step'] as const) {
    const points = CHECKPOINT_FAULT_POINTS.filter((p) =>
      kind === 'new step' ? !['after-latest-tmp', 'after-remove-old', 'after-link'].includes(p) : p !== 'after-rename',
    );
    for (const point of points) {
      it(`${kind}: killed at ${point}, latest names a complete checkpoint; the next start cleans up and writes again`, async () => {
        const run = join(tmp, `${kind.replace(/\W+/g, '-')}-${point}`);
        await write(run, 2, 'old');
        const step = kind === 'new step' ? 4 : 2;
        const r = childWrite(run, step, 'new', point);
        expect(r.signal, `the child must die at ${point} (status ${r.status})`).to.equal('SIGKILL');
        const tag = latestTag(run);
        // Before the new state is committed the old one stands; after `latest` moves, the new one.
        const committed = ['after-latest-tmp', 'after-remove-old', 'after-link', 'after-latest'].includes(point);
        expect(tag).to.equal(committed ? 'new' : 'old');
        const leftovers = readdirSync(join(run, 'checkpoints')).filter((n) => n.startsWith('.'));
        const removed = await cleanCheckpointTemps(run);
        expect(removed.sort()).to.deep.equal(leftovers.filter((n) => n !== readFileSync(join(run, 'checkpoints', 'latest'), 'utf8').trim()).sort());
        expect(latestTag(run)).to.equal(tag); // cleaning never touches what latest names
        // The run goes on: the next checkpoint of the same step (the replay) writes cleanly.
        await write(run, step, 'next');
        expect(latestTag(run)).to.equal('next');
        expect(resolveCheckpoint(run).dir).to.equal(join(run, 'checkpoints', `step-00000${step}`));
        await cleanCheckpointTemps(run);
        const names = readdirSync(join(run, 'checkpoints')).sort();
        expect(
          names.filter((n) => n.startsWith('.')),
          names.join(),
        ).to.deep.equal([]);
      });
    }
  }

  it('without a fault the rewrite of the latest step leaves only the step dir and latest', async () => {
    const run = join(tmp, 'plain');
    await write(run, 3, 'a');
    await write(run, 3, 'b');
    expect(readdirSync(join(run, 'checkpoints')).sort()).to.deep.equal(['latest', 'step-000003']);
    expect(latestTag(run)).to.equal('b');
    expect(existsSync(join(run, 'checkpoints', 'step-000003', 'trainer_state.json'))).to.equal(true);
  });
});
