/**
 * Uploads to the Hub (lib/hub/publish.ts) through the real `@huggingface/hub` client against the
 * loopback Hub (test/helpers/hub-server.ts: create repo, preupload, LFS batch + PUT, commit), read
 * back with the real readers:
 * - `train --model org/tiny-qwen3 --push-to-hub me/adapter --hub-strategy every_save` (the base fetched by id, each checkpoint and then the
 *   adapter pushed with its card): the card parses with huggingface_hub's `ModelCard` (base_model,
 *   library_name peft, model-index eval results) and peft's `PeftConfig` reads the pushed config;
 * - `publishPaperGymDataset` (what `build-data --push-to-hub` calls): the pushed repo, fetched
 *   back into the cache, loads with `datasets.load_dataset` (splits and rows as the items) and its
 *   card parses with `DatasetCard`;
 * - no token / a token the Hub refuses: clear errors.
 * Python checks skip when the packages are missing (fail in CI).
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readDataset, sampleDatasetPath } from '../lib/data/schema.js';
import { publishPaperGymDataset, resolveDatasetRef, resolveModelRef } from '../lib/hub/index.js';
import { startFakeLlm } from './helpers/fake-llm.js';
import { FakeHub, python } from './helpers/hub-server.js';
import { CLI, orSkip, SMALL_TRAIN_FLAGS } from './helpers/run.js';
import { tinyModel } from './helpers/tiny.js';

const run = (args: string[], env: NodeJS.ProcessEnv) =>
  new Promise<{ code: number | null; out: string; err: string }>((res) => {
    const p = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, CI: 'true', ...env } });
    let out = '';
    let err = '';
    p.stdout.on('data', (b: Buffer) => (out += b.toString()));
    p.stderr.on('data', (b: Buffer) => (err += b.toString()));
    p.on('close', (code) => res({ code, out, err }));
  });

describe('hub: push adapters and datasets (loopback Hub, real client, real readers)', function () {
  this.timeout(240000);
  const hub = new FakeHub();
  let root: string;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    await hub.start();
    root = mkdtempSync(join(tmpdir(), 'pg-hub-push-'));
    env = { HF_HUB_CACHE: join(root, 'cache'), HF_HOME: join(root, 'home'), HF_ENDPOINT: hub.url, HF_TOKEN: 'hf_writer' };
  });
  after(async () => {
    await hub.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it('publishes a PaperGym dataset that datasets.load_dataset reads, with a DatasetCard (provenance, domain mix, leakage)', async function () {
    const r = await publishPaperGymDataset(sampleDatasetPath(), 'me/papergym-sample', { env });
    expect(r.files).to.deep.equal(['data/train.jsonl', 'data/val.jsonl', 'README.md']);
    const repo = hub.repos.get('dataset/me/papergym-sample')!;
    expect(repo.private).to.equal(false);
    // Read back through the client into the cache, then by datasets and huggingface_hub.
    const got = await resolveDatasetRef('hf://datasets/me/papergym-sample', { env, log: () => {} });
    const items = readDataset(sampleDatasetPath()).items;
    const out = await python(
      this,
      [
        'import json, sys, datasets, huggingface_hub as h',
        `d = datasets.load_dataset(${JSON.stringify(got.dir)})`,
        `card = h.DatasetCard.load(${JSON.stringify(join(got.dir, 'README.md'))})`,
        'print(json.dumps({"splits": {k: [r["id"] for r in v] for k, v in d.items()}, "rubric0": d["train"][0]["rubric"][0], "configs": card.data.configs, "tags": card.data.tags, "size": card.data.size_categories, "text": card.text}))',
      ].join('\n'),
      { HF_DATASETS_OFFLINE: '1', HF_HUB_OFFLINE: '1', HF_DATASETS_CACHE: join(root, 'ds-cache') },
      'datasets',
    );
    const j = JSON.parse(out) as { splits: Record<string, string[]>; rubric0: unknown; configs: unknown; tags: string[]; size: string[]; text: string };
    expect(j.splits).to.deep.equal({
      train: items.filter((i) => i.split === 'train').map((i) => i.id),
      val: items.filter((i) => i.split === 'val').map((i) => i.id),
    });
    expect(j.rubric0).to.deep.equal(items.find((i) => i.split === 'train')!.rubric[0]);
    expect(j.configs).to.deep.equal([
      {
        config_name: 'default',
        data_files: [
          { split: 'train', path: 'data/train.jsonl' },
          { split: 'val', path: 'data/val.jsonl' },
        ],
      },
    ]);
    expect(j.tags).to.include('papergym');
    expect(j.size).to.deep.equal(['n<1K']);
    // Domain mix counted by hand from the sample's items.
    const dom: Record<string, number> = {};
    for (const i of items) dom[i.source.domain] = (dom[i.source.domain] ?? 0) + 1;
    for (const [d, n] of Object.entries(dom)) expect(j.text).to.include(`| ${d} | ${n} | ${((100 * n) / items.length).toFixed(1)}% |`);
    expect(j.text).to.match(/Rubric items that can be inferred from the question alone: \d+\.\d% of \d+ \(lexical proxy/);
    expect(j.text).to.include(`| \`items\` | ${items.length} |`);
  });

  it('build-data --push-to-hub REPO: the built items (fake LLM) published, then read back by datasets.load_dataset', async function () {
    const srv = await startFakeLlm();
    try {
      const paper = join(root, 'papers', 'toy-paper');
      mkdirSync(paper, { recursive: true });
      const para = 'We propose a method for estimating diffusion coefficients from simulation and test it against baselines on benchmark systems. ';
      writeFileSync(
        join(paper, 'main.tex'),
        [
          '\\documentclass{article}',
          '\\title{A Toy Paper}',
          '\\begin{document}',
          '\\begin{abstract}',
          para,
          '\\end{abstract}',
          '\\section{Method}',
          para.repeat(3),
          '\\section{Experiments}',
          para.repeat(3),
          '\\end{document}',
          '',
        ].join('\n'),
      );
      const out = join(root, 'built.jsonl');
      const r = await run(
        ['build-data', '--papers', join(root, 'papers'), '--out', out, '--llm', srv.url, '--model', 'fake-model', '--push-to-hub', 'me/built'],
        { ...env, PAPERGYM_LLM_API_KEY: '' },
      );
      expect(r.code, r.err).to.equal(0);
      expect(r.out).to.match(/build-data: pushed data\/\w+\.jsonl, README\.md to http:\/\/127\.0\.0\.1:\d+\/datasets\/me\/built \(commit [0-9a-f]{40}\)/);
      const got = await resolveDatasetRef('hf://datasets/me/built', { env, log: () => {} });
      const built = readDataset(out).items;
      const ids = JSON.parse(
        await python(
          this,
          `import json, datasets\nd = datasets.load_dataset(${JSON.stringify(got.dir)})\nprint(json.dumps(sorted(r["id"] for s in d.values() for r in s)))`,
          { HF_DATASETS_OFFLINE: '1', HF_HUB_OFFLINE: '1', HF_DATASETS_CACHE: join(root, 'ds-cache2') },
          'datasets',
        ),
      ) as string[];
      expect(ids).to.deep.equal(built.map((i) => i.id).sort());
      expect(readFileSync(join(got.dir, 'README.md'), 'utf8')).to.include('| `models.extract` | fake-model |');
    } finally {
      await srv.close();
    }
  });

  it('refuses to push without a token or offline, and names the repo when the client refuses the token', async () => {
    const noTok = await publishPaperGymDataset(sampleDatasetPath(), 'me/x', { env: { ...env, HF_TOKEN: '' } }).catch((e: Error) => e);
    expect((noTok as Error).message).to.match(/--push-to-hub me\/x: pushing needs a Hub token with write access/);
    const bad = await publishPaperGymDataset(sampleDatasetPath(), 'me/x', { env: { ...env, HF_TOKEN: 'not-a-hub-token' } }).catch((e: Error) => e);
    expect((bad as Error).message).to.match(/--push-to-hub me\/x: .*hf_/);
    hub.seen.length = 0;
    const off = await publishPaperGymDataset(sampleDatasetPath(), 'me/x', { env: { ...env, HF_HUB_OFFLINE: '1' } }).catch((e: Error) => e);
    expect((off as Error).message).to.match(/--push-to-hub me\/x: HF_HUB_OFFLINE=1: pushing needs the network/);
    expect(hub.seen).to.have.length(0);
  });

  it('train --model ORG/NAME --push-to-hub REPO: the base fetched by id, the adapter pushed with a model card ModelCard and peft read', async function () {
    const model = await orSkip(this, () => tinyModel('tiny-tied'));
    const files: Record<string, Buffer> = {};
    for (const f of readdirSync(model)) if (statSync(join(model, f)).isFile()) files[f] = readFileSync(join(model, f));
    hub.addRepo('model/org/tiny-qwen3', files, { lfs: Object.keys(files).filter((f) => f.endsWith('.safetensors')) });
    const out = join(root, 'run');
    const r = await run(
      [
        'train',
        '--model',
        'org/tiny-qwen3',
        '--out',
        out,
        '--opsd-steps',
        '1',
        '--grpo-steps',
        '1',
        ...SMALL_TRAIN_FLAGS,
        '--push-to-hub',
        'me/tiny-adapter',
        '--hub-private-repo',
        '--hub-strategy',
        'every_save',
        '--checkpoint-every',
        '1',
      ],
      env,
    );
    expect(r.code, r.err).to.equal(0);
    expect(r.err).to.match(/train: adapter pushed to http:\/\/127\.0\.0\.1:\d+\/me\/tiny-adapter \(commit [0-9a-f]{40}\)/);
    const repo = hub.repos.get('model/me/tiny-adapter')!;
    expect(repo.private).to.equal(true);
    // every_save: one commit per checkpoint (each the checkpoint's adapter), then the final one; plus the repo's first commit.
    const pushed = [...r.err.matchAll(/train: checkpoint (\S+) pushed to /g)].map((m) => m[1]!);
    expect(pushed.length, r.err).to.be.greaterThan(0);
    expect(repo.commits.size).to.equal(pushed.length + 2);
    const head = repo.commits.get(repo.refs.get('main')!)!;
    expect([...head.keys()].sort()).to.deep.equal(['README.md', 'adapter_config.json', 'adapter_model.safetensors']);
    expect(head.get('adapter_model.safetensors')!.equals(readFileSync(join(out, 'final', 'adapter_model.safetensors')))).to.equal(true);
    expect(repo.lfs.has('adapter_model.safetensors')).to.equal(true);
    // The pushed adapter config names the base by its Hub id (as transformers writes base_model_name_or_path).
    expect(JSON.parse(head.get('adapter_config.json')!.toString()).base_model_name_or_path).to.equal('org/tiny-qwen3');
    const dir = await resolveModelRef('me/tiny-adapter', { env, kind: 'adapter', log: () => {} });
    writeFileSync(join(root, 'README.md'), head.get('README.md')!);
    const card = JSON.parse(
      await python(
        this,
        [
          'import json, huggingface_hub as h',
          `c = h.ModelCard.load(${JSON.stringify(join(root, 'README.md'))})`,
          'print(json.dumps({"base": c.data.base_model, "lib": c.data.library_name, "tags": c.data.tags, "name": c.data.model_name, "results": [[r.task_type, r.dataset_type, r.dataset_split, r.metric_type, r.metric_value] for r in (c.data.eval_results or [])], "text": c.text}))',
        ].join('\n'),
        {},
      ),
    ) as { base: string; lib: string; tags: string[]; name: string; results: unknown[][]; text: string };
    expect(card.base).to.equal('org/tiny-qwen3');
    expect(card.lib).to.equal('peft');
    expect(card.tags).to.include.members(['papergym-native', 'peft', 'lora', 'opsd']);
    expect(card.name).to.equal('me/tiny-adapter');
    // The run's own numbers: every model-index result is a stage reward the run logged.
    const logged = readFileSync(join(out, 'metrics.jsonl'), 'utf8');
    expect(card.results.length).to.be.greaterThan(0);
    for (const res of card.results) {
      expect(res.slice(0, 2)).to.deep.equal(['text-generation', 'papergym']);
      expect(logged).to.include(String(res[4]));
    }
    expect(card.text).to.match(/\| `lora\.r` \| \d+ \|/);
    const peft = await python(
      this,
      `from peft import PeftConfig\nc = PeftConfig.from_pretrained(${JSON.stringify(dir)})\nprint(c.base_model_name_or_path, c.peft_type.value)`,
      {},
      'peft',
    );
    expect(peft.trim()).to.equal('org/tiny-qwen3 LORA');
  });
});
