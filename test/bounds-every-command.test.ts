/**
 * Issue 50 item 1: one bounds check for every command that loads a model or reads rows, with the
 * real CLI and hostile inputs kept small: a config.json claiming 1e8 layers refused by generate,
 * serve and eval before the addon allocates anything; products of flags that set a step's memory
 * refused naming the flags and the limit; floats checked against float32, the type they become;
 * a LoRA rank above the model's width refused; SFT reference answers that cannot fit the context
 * refused at the start naming the row.
 */
import { expect } from 'chai';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDefaultModel } from '../lib/train/run.js';
import { checkRowLengths } from '../lib/train/input-checks.js';
import { sampleDatasetPath } from '../lib/data/schema.js';
import { cli, SMALL_TRAIN_FLAGS as SMALL } from './helpers/run.js';

describe('bounds on every command (issue 50 item 1)', function () {
  this.timeout(300000);
  let tmp: string;
  let base: string;
  before(() => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-bounds50-'));
    base = ensureDefaultModel();
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it('a config.json claiming 1e8 layers is refused by generate, serve and eval before loading, naming the file', async () => {
    const dir = join(tmp, 'model-huge');
    cpSync(base, dir, { recursive: true });
    const c = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    c.num_hidden_layers = 1e8;
    writeFileSync(join(dir, 'config.json'), JSON.stringify(c));
    for (const args of [
      ['generate', '--model', dir, '--prompt', 'hi', '--max-new-tokens', '2'],
      ['serve', '--model', dir, '--port', '0'],
      ['eval', '--model', dir, '--data', sampleDatasetPath(), '--judge', 'local'],
    ]) {
      const t0 = Date.now();
      const r = await cli(args);
      expect(r.code, `${args[0]}: ${r.err}`).to.equal(1);
      expect(r.err).to.contain(`${join(dir, 'config.json')}: num_hidden_layers is 100000000, not an integer in [1, 1024]`);
      expect(Date.now() - t0, args[0]).to.be.below(20000);
    }
  });

  it('products of flags are bounded naming the flags and the limit; each flag alone is in range', async () => {
    const out = join(tmp, 'run-products');
    const r = await cli(['train', '--out', out, '--questions-per-step', '65536', '--group-size', '4096']);
    expect(r.code).to.equal(1);
    expect(r.err).to.contain('--questions-per-step 65536 × --group-size 4096 = 268435456 rollouts per GRPO step, more than 65536');
    expect(existsSync(out)).to.equal(false);
    // The same product from a config file (the resolved config is checked too).
    const cfg = join(tmp, 'products.yaml');
    writeFileSync(cfg, 'grpo:\n  questionsPerStep: 1024\n  groupSize: 1024\n');
    const f = await cli(['train', '--config', cfg, '--out', out]);
    expect(f.code).to.equal(1);
    expect(f.err).to.contain('--questions-per-step 1024 × --group-size 1024 = 1048576 rollouts per GRPO step, more than 65536');
    const g = await cli(['generate', '--model', base, '--prompt', 'hi', '--n', '300', '--batch-size', '300']);
    expect(g.code).to.equal(1);
    expect(g.err).to.contain('--n 300 × --batch-size 300 = 90000 completions per generation call, more than 65536');
    const s = await cli(['serve', '--model', base, '--max-batch', '4096', '--max-model-len', '65536']);
    expect(s.code).to.equal(1);
    expect(s.err).to.contain('--max-batch 4096 × --max-model-len 65536 = 268435456 KV-cache slots of the decode batch, more than 134217728');
  });

  it("rows × length of a step with the dataset's longest prompt is bounded at the start (no run dir)", async () => {
    // 512 × 64 rollouts × 4096 new tokens is exactly 2^27 completion tokens (the config-level bound
    // holds); with the prompts the step holds more.
    const out = join(tmp, 'run-step-tokens');
    const flags = ['--opsd-batch-size', '1', '--opsd-micro-batch', '1', '--validate-every', '0', '--seed', '5', '--grpo-micro-batch', '2'];
    const r = await cli([
      'train',
      '--out',
      out,
      ...flags,
      '--questions-per-step',
      '512',
      '--group-size',
      '64',
      '--max-new-tokens',
      '4096',
      '--opsd-steps',
      '0',
      '--grpo-steps',
      '1',
    ]);
    expect(r.code, r.err).to.equal(1);
    expect(r.err).to.match(
      /--questions-per-step 512 × --group-size 64 × \(longest student prompt \d+ \+ --max-new-tokens 4096\) = \d+ tokens in one GRPO step, more than 134217728/,
    );
    expect(existsSync(out)).to.equal(false);
  });

  it('floats are checked against float32, the type they become; the LoRA rank against its range and the model width', async () => {
    const out = join(tmp, 'run-floats');
    const a = await cli(['train', '--out', out, '--lora-alpha', '1e308']);
    expect(a.code).to.equal(1);
    expect(a.err).to.contain("lora.alpha (--lora-alpha) must be within float32's range, the type it becomes");
    expect(a.err).to.contain('got 1e+308');
    // 3.5e38 is a finite double but not a finite float32 (max (2 − 2⁻²³)·2¹²⁷ ≈ 3.4028235e38); 1e-50 rounds to 0.
    for (const [flag, v] of [
      ['--kl-coef', '3.5e38'],
      ['--opsd-lr', '1e-50'],
    ]) {
      const r = await cli(['train', '--out', out, flag, v]);
      expect(r.code, flag).to.equal(1);
      expect(r.err, flag).to.match(new RegExp(`\\(${flag}\\) must be within float32's range`));
    }
    const cfg = join(tmp, 'alpha.yaml');
    writeFileSync(cfg, 'lora:\n  alpha: 1.0e+308\n');
    const f = await cli(['train', '--config', cfg, '--out', out]);
    expect(f.code).to.equal(1);
    expect(f.err).to.contain("lora.alpha (--lora-alpha) must be within float32's range");
    const r = await cli(['train', '--out', out, '--lora-r', '100000']);
    expect(r.code).to.equal(1);
    expect(r.err).to.contain('lora.r (--lora-r) must be in integer [1, 65536] (got 100000)');
    const hidden = (JSON.parse(readFileSync(join(base, 'config.json'), 'utf8')) as { hidden_size: number }).hidden_size;
    const w = await cli(['train', '--out', out, '--lora-r', String(hidden + 1), ...SMALL]);
    expect(w.code).to.equal(1);
    expect(w.err).to.contain(`lora.r (--lora-r) ${hidden + 1} is above the model's hidden_size ${hidden} (${join(base, 'config.json')})`);
    expect(existsSync(out)).to.equal(false);
  });

  it('checkRowLengths with reference answers: prompt + answer + end-of-turn against the context; a huge answer is not tokenized', async () => {
    const items = [
      { id: 'a', question: 'q one', reference_answer: 'w '.repeat(10).trim(), rubric: [] },
      { id: 'b', question: 'q two', reference_answer: 'x'.repeat(300000), rubric: [] },
      { id: 'c', question: 'q three', reference_answer: 'w '.repeat(995).trim(), rubric: [] },
    ] as never[];
    // One token per space-separated word (the test's own tokenizer).
    const words = (s: string) => s.split(' ').length;
    const encode = async (ps: { content: string }[][]) => ps.map((p) => new Array<number>(p.map((m) => words(m.content)).reduce((x, y) => x + y, 0)).fill(1));
    const answered: string[] = [];
    const encodeAnswers = async (ts: string[]) => ts.map((t) => (answered.push(t), new Array<number>(words(t)).fill(1)));
    const r = await checkRowLengths(items, 1000, 10, encode as never, { encodeAnswers });
    // c: student prompt "q three" (2 words + the system/user wrapping the test encoder counts) + 995 + 1 > 1000.
    expect(r.long.map((x) => x.id)).to.deep.equal(['b', 'c']);
    expect(r.long[0]!.why).to.contain('bytes of question and reference answer, more than 256 bytes per token');
    expect(r.long[1]!.why).to.match(
      /its reference answer is 996 tokens; after its \d+-token student prompt that passes the model's context of 1000 tokens \(SFT\)/,
    );
    expect(answered).to.have.length(2); // b never reached the tokenizer
    expect(r.longest.answer).to.equal(996);
    // Without an SFT stage the answers are not read.
    const plain = await checkRowLengths(items, 1000, 10, encode as never);
    expect(plain.long).to.deep.equal([]);
  });

  it('train --stages sft: a reference answer that cannot fit the context fails the start naming the row (no run dir)', async () => {
    const rows = readFileSync(sampleDatasetPath(), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    // The embedded tiny model's context is 40960 tokens: an answer of ~45k words cannot fit after the prompt.
    const long = { ...rows[1], id: 'long-answer', reference_answer: 'word '.repeat(45000) };
    const data = join(tmp, 'sft-long.jsonl');
    writeFileSync(data, [rows[0], long, rows[2]].map((x) => JSON.stringify(x)).join('\n') + '\n');
    const out = join(tmp, 'run-sft-long');
    const r = await cli(['train', '--data', data, '--out', out, '--stages', 'sft', '--sft-steps', '1', ...SMALL]);
    expect(r.code, r.err).to.equal(1);
    expect(r.err).to.match(
      /1 row\(s\) cannot fit the model's context: item "long-answer" \(#2\): its reference answer is \d+ tokens; after its \d+-token student prompt that passes the model's context of 40960 tokens \(SFT\)/,
    );
    expect(existsSync(out)).to.equal(false);
  });

  it('checkRowLengths with studentPrompt (eval, generate): only that prompt + max-new-tokens is checked, never the teacher prompt; a huge prompt is not tokenized', async () => {
    const items = [
      { id: 'a', question: 'q one', rubric: [{ text: 'w '.repeat(2000) }] },
      { id: 'b', question: 'w '.repeat(995).trim(), rubric: [] },
      { id: 'c', question: 'x'.repeat(300000), rubric: [] },
    ];
    // One token per space-separated word (the test's own tokenizer).
    const encoded: string[] = [];
    const encode = async (ps: string[]) => ps.map((p) => (encoded.push(p), new Array<number>(p.split(' ').length).fill(1)));
    const r = await checkRowLengths(items, 1000, 10, encode as never, { studentPrompt: (i) => items[i]!.question });
    // a: the 2000-word rubric (the teacher's) is not read; b: 995 + 10 > 1000; c: 300000 bytes > 1000 × 256.
    expect(r.long.map((x) => x.id)).to.deep.equal(['b', 'c']);
    expect(r.long[0]!.why).to.equal("its student prompt is 995 tokens; with --max-new-tokens 10 that passes the model's context of 1000 tokens");
    expect(r.long[1]!.why).to.equal("300000 bytes of prompt, more than 256 bytes per token of the model's 1000-token context");
    expect(encoded).to.deep.equal([items[0]!.question, items[1]!.question]); // c never reached the tokenizer
    // Without it, a's teacher prompt (question + rubric) is checked, as train does.
    const train = await checkRowLengths(items, 1000, 10, async (ps) => ps.map(() => [1]), {});
    expect(train.long.map((x) => x.id)).to.deep.equal(['c']);
  });

  it('eval refuses a 200 KB question before any plan, naming the file, the row and the limit', async () => {
    const rows = readFileSync(sampleDatasetPath(), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    // ~100k tokens of "a ": past the tiny model's 40960-token context.
    const huge = { ...rows[1], id: 'huge-question', question: 'a '.repeat(100000) };
    const data = join(tmp, 'eval-huge.jsonl');
    writeFileSync(data, [rows[0], huge].map((x) => JSON.stringify(x)).join('\n') + '\n');
    const out = join(tmp, 'eval-huge.rows.jsonl');
    const plans = join(tmp, 'eval-huge.plans.jsonl');
    const r = await cli(['eval', '--model', base, '--data', data, '--judge', 'local', '--max-new-tokens', '4', '--out', out, '--plans', plans]);
    expect(r.code, r.err).to.equal(1);
    expect(r.err).to.match(
      new RegExp(
        `1 row\\(s\\) cannot fit the model's context: item "huge-question" \\(${data.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} row 2\\): its student prompt is \\d+ tokens; with --max-new-tokens 4 that passes the model's context of 40960 tokens; lower --max-new-tokens or remove the row\\(s\\); nothing was generated`,
      ),
    );
    expect(r.err).not.to.contain('    at '); // no stack
    expect(existsSync(out)).to.equal(false);
    expect(existsSync(plans)).to.equal(false);
    // eval --suite checks each benchmark on each model the same way, before its first plan.
    const suite = join(tmp, 'huge-suite.yaml');
    writeFileSync(suite, `benchmarks:\n  - { name: B, data: ${data} }\nmodels:\n  - { name: base, model: ${base} }\n`);
    const suiteOut = join(tmp, 'huge-suite-out');
    const s = await cli(['eval', '--suite', suite, '--out', suiteOut, '--judge', 'local', '--max-new-tokens', '4']);
    expect(s.code, s.err).to.equal(1);
    expect(s.err).to.contain(`base/B: ${data}: 1 row(s) cannot fit the model's context: item "huge-question" (${data} row 2)`);
    expect(existsSync(join(suiteOut, 'base.B.rows.jsonl'))).to.equal(false);
  });

  it('generate refuses a prompt over the context (--input line, --prompt with --max-new-tokens) before generating anything', async () => {
    const input = join(tmp, 'gen-long.jsonl');
    writeFileSync(
      input,
      [
        { id: 'short', prompt: 'hi' },
        { id: 'long', question: 'a '.repeat(45000) },
      ]
        .map((x) => JSON.stringify(x))
        .join('\n') + '\n',
    );
    const out = join(tmp, 'gen-long.out.jsonl');
    const r = await cli(['generate', '--model', base, '--input', input, '--out', out, '--max-new-tokens', '2']);
    expect(r.code, r.err).to.equal(1);
    expect(r.err).to.contain(`${input}: 1 row(s) cannot fit the model's context: item "long" (${input}:2): its student prompt is`);
    expect(r.err).to.contain("with --max-new-tokens 2 that passes the model's context of 40960 tokens; lower --max-new-tokens or remove the row(s)");
    expect(r.err).not.to.contain('prompts,'); // no progress line: nothing generated
    expect(existsSync(out)).to.equal(false);
    // A short prompt whose --max-new-tokens alone passes the context.
    const p = await cli(['generate', '--model', base, '--prompt', 'hi', '--max-new-tokens', '40960']);
    expect(p.code, p.err).to.equal(1);
    expect(p.err).to.match(
      /--prompt: 1 row\(s\) cannot fit the model's context: item "0" \(--prompt #1\): its student prompt is \d+ tokens; with --max-new-tokens 40960/,
    );
    expect(p.out).to.equal('');
  });
});
