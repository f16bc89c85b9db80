/** Policy: chat-rendered prompts → native generation → decoded completions. */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { Policy } from '../lib/model/policy.js';
import { tinyModel } from './helpers/tiny.js';

describe('Policy (model + tokenizer + chat template)', function () {
  this.timeout(120000);
  let policy: Policy;
  before(async () => {
    policy = await Policy.load(tinyModel('tiny-tied'));
  });
  after(() => policy.dispose());

  it('renders string prompts and conversations with the chat template and samples n per prompt', async () => {
    const r = await policy.generateWithStats(
      [
        'What is 2+2?',
        [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hi' },
        ],
      ],
      { n: 3, temperature: 1, topP: 0.95, maxNewTokens: 6, seed: 11, enableThinking: false },
    );
    expect(r.promptIds[0]).to.deep.equal([151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271]);
    expect(r.completions.length).to.equal(6);
    expect(r.completions.map((c) => c.promptIndex)).to.deep.equal([0, 0, 0, 1, 1, 1]);
    for (const c of r.completions) {
      expect(c.tokenIds.length).to.equal(c.logprobs.length);
      expect(c.tokenIds.length).to.be.within(1, 6);
      expect(c.text).to.be.a('string');
      expect(['stop', 'length']).to.include(c.finishReason);
      for (const lp of c.logprobs) expect(lp).to.be.at.most(0);
    }
    const thinking = await policy.encodePrompts(['What is 2+2?']);
    expect(thinking[0]).to.deep.equal(r.promptIds[0].slice(0, 15));
    expect((await policy.encodePrompts(['x'], { raw: true }))[0]).to.deep.equal([87]);
  });

  it('decodes text without the final stop token and reports finish "stop"', async () => {
    const greedy = await policy.generate(['Hello'], { temperature: 0, maxNewTokens: 5 });
    const stopTok = greedy[0].tokenIds[2];
    const k = greedy[0].tokenIds.indexOf(stopTok);
    const r = await policy.generate(['Hello'], { temperature: 0, maxNewTokens: 5, stopIds: [stopTok] });
    expect(r[0].finishReason).to.equal('stop');
    expect(Array.from(r[0].tokenIds)).to.deep.equal(Array.from(greedy[0].tokenIds.slice(0, k + 1)));
    const body = Array.from(greedy[0].tokenIds.slice(0, k)).filter((t) => t < policy.tokenizer.vocabSize);
    expect(r[0].text).to.equal(await policy.tokenizer.decode(body));
  });

  it('rejects empty prompts with a TypeError naming the prompt', async () => {
    for (const bad of [[''], ['ok', '   '], [[]]] as never[][]) {
      let e: Error | undefined;
      try {
        await policy.generate(bad);
      } catch (x) {
        e = x as Error;
      }
      expect(e).to.be.instanceOf(TypeError);
      expect(e!.message).to.match(/prompts\[\d\] is empty/);
    }
    let e2: Error | undefined;
    try {
      await policy.generate(['hi'], { temperature: -1 });
    } catch (x) {
      e2 = x as Error;
    }
    expect(e2).to.be.instanceOf(TypeError);
    expect(e2!.message).to.match(/temperature/);
  });

  it('Policy.load rejects a non-string model dir (and bad options) with our TypeError naming the argument', async () => {
    const err = (p: Promise<unknown>): Promise<Error & { code?: string }> =>
      p.then(
        () => new Error('expected a rejection'),
        (e) => e as Error & { code?: string },
      );
    const dir = tinyModel('tiny-tied');
    const cases: [Promise<unknown>, RegExp][] = [
      [Policy.load(5 as never), /^Policy\.load: dir must be a non-empty string \(the checkpoint directory\), got number 5$/],
      [Policy.load(undefined as never), /^Policy\.load: dir must be a non-empty string .*got undefined$/],
      [Policy.load(''), /^Policy\.load: dir must be a non-empty string .*got ""$/],
      [Policy.load(dir, 'cpu' as never), /^Policy\.load: options must be an object, got "cpu"$/],
      [Policy.load(dir, { tokenizerDir: 5 as never }), /^Policy\.load: options\.tokenizerDir must be a non-empty string, got number 5$/],
      [Policy.load(dir, { adapter: {} as never }), /^Policy\.load: options\.adapter must be a non-empty string, got an object$/],
    ];
    for (const [p, re] of cases) {
      const e = await err(p);
      expect(e).to.be.instanceOf(TypeError);
      expect(e.code, e.message).to.equal('ERR_PG_ARG');
      expect(e.message).to.match(re);
    }
  });

  it('a missing model directory is reported as such (not as a missing tokenizer.json), by Policy.load and the CLI', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'pg-nomodel-'));
    const missing = join(tmp, 'no-such-model');
    const file = join(tmp, 'a-file');
    writeFileSync(file, 'x');
    const e = await Policy.load(missing).then(
      () => undefined,
      (x) => x as Error & { code?: string },
    );
    expect(e?.message).to.equal(`model directory ${missing} does not exist`);
    expect(e?.code).to.equal('ERR_PG_INPUT');
    expect((await Policy.load(file).catch((x) => x)).message).to.equal(`model directory ${file} is not a directory`);
    expect((await Policy.load(tinyModel('tiny-tied'), { adapter: missing }).catch((x) => x)).message).to.equal(`adapter directory ${missing} does not exist`);
    const cli = join(packageRoot, 'dist', 'bin', 'papergym-native.js');
    const out = join(tmp, 'plans.jsonl');
    writeFileSync(out, 'earlier results\n');
    const r = spawnSync(process.execPath, [cli, 'generate', '--model', missing, '--prompt', 'hi', '--out', out], { encoding: 'utf8', env: process.env });
    expect(r.status).to.equal(1);
    expect(r.stderr.split('\n').filter(Boolean).at(-1)).to.equal(`papergym-native: model directory ${missing} does not exist`);
    expect(r.stderr).not.to.match(/\n\s+at |tokenizer\.json/);
    expect(readFileSync(out, 'utf8')).to.equal('earlier results\n');
    rmSync(tmp, { recursive: true, force: true });
  });

  it('CLI: papergym-native generate --input questions.jsonl --out plans.jsonl', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pg-cli-gen-'));
    const input = join(dir, 'q.jsonl');
    const out = join(dir, 'plans.jsonl');
    // A UTF-8 byte order mark at the start is not part of the first row.
    writeFileSync(input, '\uFEFF{"id":"a","question":"How do we test sparse attention?"}\n{"prompt":"Say hi"}\n');
    const r = spawnSync(
      process.execPath,
      [
        join(packageRoot, 'dist', 'bin', 'papergym-native.js'),
        'generate',
        '--model',
        tinyModel('tiny-tied'),
        '--input',
        input,
        '--out',
        out,
        '--n',
        '2',
        '--max-new-tokens',
        '3',
        '--seed',
        '5',
        '--tokens',
      ],
      { encoding: 'utf8', env: process.env },
    );
    expect(r.status, r.stderr).to.equal(0);
    const lines = readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.length).to.equal(4);
    expect(lines.map((l) => [l.id, l.prompt_index, l.sample_index])).to.deep.equal([
      ['a', 0, 0],
      ['a', 0, 1],
      ['1', 1, 0],
      ['1', 1, 1],
    ]);
    expect(lines[0].question).to.equal('How do we test sparse attention?');
    for (const l of lines) {
      expect(l.token_ids.length).to.equal(l.completion_tokens);
      expect(l.logprobs.length).to.equal(l.completion_tokens);
      expect(l.seed).to.equal(5);
    }
    // An empty question is refused naming the file and line, as an empty --prompt is.
    writeFileSync(input, '{"question":"ok"}\n{"question":"  "}\n');
    const empty = spawnSync(
      process.execPath,
      [join(packageRoot, 'dist', 'bin', 'papergym-native.js'), 'generate', '--model', tinyModel('tiny-tied'), '--input', input, '--out', out],
      { encoding: 'utf8', env: process.env },
    );
    expect(empty.status).to.equal(1);
    expect(empty.stderr.trim().split('\n').at(-1)).to.equal(`papergym-native: ${input}:2: "question" is empty`);
    const bad = spawnSync(
      process.execPath,
      [join(packageRoot, 'dist', 'bin', 'papergym-native.js'), 'generate', '--model', tinyModel('tiny-tied'), '--prompt', 'hi', '--top-p', '0'],
      { encoding: 'utf8', env: process.env },
    );
    expect(bad.status).to.not.equal(0);
    expect(bad.stderr).to.match(/topP \(--top-p\) must be in \(0, 1\]/);
  });
});
