/**
 * Bounded work before any compute in `train` (issue 38 item 2), with the real CLI: absurd batch
 * sizes refused by the settings schema (no JavaScript out-of-memory), a model config.json with
 * absurd sizes or sizes the weights cannot hold refused before the addon loads it, invalid UTF-8 in
 * --data warned with its line, a row that cannot fit the model's context refused at the start
 * naming the row (no run dir left), and on resume such a row skipped with a warning.
 */
import { expect } from 'chai';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDefaultModel } from '../lib/train/run.js';
import { checkRowLengths, invalidUtf8Lines } from '../lib/train/input-checks.js';
import { sampleDatasetPath } from '../lib/data/schema.js';
import { cli, SMALL_TRAIN_FLAGS as SMALL } from './helpers/run.js';

describe('train: bounded work before any compute', function () {
  this.timeout(300000);
  let tmp: string;
  let rows: Record<string, unknown>[];
  before(() => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-bounds-'));
    rows = readFileSync(sampleDatasetPath(), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));
  const writeRows = (name: string, rs: Record<string, unknown>[]) => {
    const p = join(tmp, name);
    writeFileSync(p, rs.map((r) => JSON.stringify(r)).join('\n') + '\n');
    return p;
  };

  it('absurd batch sizes and step counts are range errors naming the flag (no JavaScript out of memory)', async () => {
    for (const [flag, val, re] of [
      ['--opsd-batch-size', '1e8', /opsd\.batchSize \(--opsd-batch-size\) must be in (integer )?\[1, 65536\] \(got 100000000\)/],
      ['--group-size', '100000', /grpo\.groupSize \(--group-size\) must be in (integer )?\[2, 4096\]/],
      ['--grpo-steps', '1e12', /grpo\.steps \(--grpo-steps\) must be in (integer )?\[0, 1000000000\]/],
    ] as const) {
      const out = join(tmp, `run${flag}`);
      const r = await cli(['train', '--out', out, flag, val]);
      expect([r.code, r.err], flag).to.satisfy(([c, e]: [number, string]) => c === 1 && re.test(e));
      expect(existsSync(out)).to.equal(false);
    }
    // A repeated step flag is refused like any other repeat (never summed).
    const twice = await cli(['train', '--out', join(tmp, 'twice'), '--opsd-steps', '1', '--opsd-steps', '2']);
    expect([twice.code, twice.err.trim().split('\n').at(-1)]).to.deep.equal([1, 'papergym-native: --opsd-steps: given more than once (1, 2)']);
  });

  it('a config.json with num_hidden_layers 1e8, or more layers than the weights hold, is refused before loading', async () => {
    const base = ensureDefaultModel();
    for (const [name, edit, re] of [
      ['huge', (c: Record<string, unknown>) => (c.num_hidden_layers = 1e8), /num_hidden_layers is 100000000, not an integer in \[1, 1024\]/],
      [
        'mismatch',
        (c: Record<string, unknown>) => (c.num_hidden_layers = 1000),
        /model .*: its weights \(\*\.safetensors\) hold only \d+ bytes, but .*config\.json \(num_hidden_layers 1000, .*\) describes at least .* parameters/,
      ],
    ] as const) {
      const dir = join(tmp, `model-${name}`);
      cpSync(base, dir, { recursive: true });
      const c = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
      expect([c.num_hidden_layers, c.dtype ?? c.torch_dtype]).to.deep.equal([2, 'float32']);
      edit(c);
      writeFileSync(join(dir, 'config.json'), JSON.stringify(c));
      const out = join(tmp, `run-model-${name}`);
      const r = await cli(['train', '--model', dir, '--out', out, ...SMALL]);
      expect(r.code, name).to.equal(1);
      expect(r.err).to.match(re);
      expect(r.err).to.contain(join(dir, 'config.json'));
      expect(existsSync(out)).to.equal(false);
    }
  });

  it('invalid UTF-8 is warned with its line; a row that cannot fit the context fails the start naming it; on resume it is skipped', async () => {
    // Line 2 holds bytes that are not UTF-8 inside its question.
    const good = writeRows('utf8.jsonl', rows.slice(0, 3));
    const text = readFileSync(good);
    const at = text.indexOf('"question":"', text.indexOf('\n') + 1) + 12;
    const bad = Buffer.concat([text.subarray(0, at), Buffer.from([0xc3, 0x28, 0xff]), text.subarray(at)]);
    const badPath = join(tmp, 'bad-utf8.jsonl');
    writeFileSync(badPath, bad);
    expect(invalidUtf8Lines(badPath)).to.deep.equal([2]);
    expect(invalidUtf8Lines(good)).to.deep.equal([]);
    // The context of the embedded tiny model is 40960 tokens: a row of ~45k tokens cannot fit.
    const long = { ...rows[1], id: 'too-long-q', question: 'word '.repeat(45000) };
    const data = writeRows('long.jsonl', [rows[0]!, long, rows[2]!]);
    const out = join(tmp, 'run-long');
    const t0 = Date.now();
    const r = await cli(['train', '--data', badPath, '--out', join(tmp, 'run-utf8'), '--opsd-steps', '1', '--grpo-steps', '0', ...SMALL]);
    expect(r.code, r.err).to.equal(0);
    expect(r.err).to.contain(`warning: dataset ${badPath}: line(s) 2 are not valid UTF-8`);
    const f = await cli(['train', '--data', data, '--out', out, '--opsd-steps', '1', '--grpo-steps', '0', ...SMALL]);
    expect(f.code).to.equal(1);
    expect(f.err).to.match(
      /dataset .*long\.jsonl: 1 row\(s\) cannot fit the model's context: item "too-long-q" \(#2\): its (teacher|student) prompt is \d+ tokens; with --max-new-tokens 4 that passes the model's context of 40960 tokens/,
    );
    expect(f.err).to.not.match(/\n\s+at /);
    expect(existsSync(out)).to.equal(false);
    expect(Date.now() - t0).to.be.below(240000);
    // A run started with rows that fit, whose file later holds a row that does not (a run from
    // before this check): --data cannot change on resume, so that row is skipped with a warning.
    const data2 = writeRows('later.jsonl', rows.slice(0, 3));
    const run = join(tmp, 'run-later');
    const a = await cli(['train', '--data', data2, '--out', run, '--opsd-steps', '1', '--grpo-steps', '0', ...SMALL]);
    expect(a.code, a.err).to.equal(0);
    writeRows('later.jsonl', [rows[0]!, long, rows[2]!]);
    const b = await cli(['train', '--resume', run, '--grpo-steps', '1']);
    expect(b.code, b.err).to.equal(0);
    expect(b.err).to.match(/warning: resume: skipping 1 row\(s\) of .*later\.jsonl that cannot fit the model's context .*item "too-long-q"/);
  });

  it('checkRowLengths: prompts plus max-new-tokens against the context; a row of more than 256 bytes per token is not tokenized', async () => {
    const items = [
      { id: 'a', question: 'short', rubric: [{ id: 'r', text: 'x', dimension: 'd' }] },
      { id: 'b', question: 'x'.repeat(300000), rubric: [] },
      { id: 'c', question: 'medium '.repeat(20), rubric: [{ id: 'r', text: 'y '.repeat(40), dimension: 'd' }] },
    ] as never[];
    const seen: number[] = [];
    const encode = async (ps: { content: string }[][]) =>
      ps.map((p) => {
        const n = p.map((m) => m.content.split(' ').length).reduce((x, y) => x + y, 0);
        seen.push(n);
        return new Array<number>(n).fill(1);
      });
    const r = await checkRowLengths(items, 1000, 940, encode as never);
    expect(r.long.map((x) => x.id)).to.deep.equal(['b', 'c']);
    expect(r.long[0]!.why).to.contain('300000 bytes of question and rubric, more than 256 bytes per token');
    expect(seen).to.have.length(4); // rows a and c, student + teacher each: b never reached the encoder
    expect(r.longest.teacher).to.be.greaterThan(r.longest.student);
  });
});
