/**
 * A new scoring protocol and a new dataset format are each one descriptor file
 * (lib/eval/protocols/NAME.ts, lib/eval/formats/NAME.ts) and one registry line, with no other edit
 * (docs/design.md §9). This test writes both — IFEval's prompt-level strict accuracy as a protocol
 * (Zhou et al. 2023, "Instruction-Following Evaluation for Large Language Models", §3: a prompt
 * counts 1 when every one of its instructions is followed, else 0; the score is the mean over
 * prompts) and a JSONL format of {prompt, instructions[]} rows that scores with it — registers each
 * with one line, and finds them in the `eval --protocol` / `import --format` choices and the real
 * yargs parsers, the importer, `runBenchmark` and the score.
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yargs, { type Argv } from 'yargs';
import '../lib/train/stages/index.js'; // loads the registries the settings read (docs/design.md §9)
import { commandSettings } from '../lib/config/settings.js';
import { checkValue } from '../lib/config/schema.js';
import { PROTOCOLS, scoreRows, type Protocol } from '../lib/eval/protocols/index.js';
import { FORMATS, importDataset, RowError, type DatasetFormat } from '../lib/eval/formats/index.js';
import { runBenchmark } from '../lib/eval/protocols/run.js';
import { emptyStats, type Judge } from '../lib/judge/types.js';
import { evalCommand } from '../bin/commands/eval.js';
import { importCommand } from '../bin/commands/import.js';

// ---- the new file: lib/eval/protocols/prompt-level.ts ----
const promptLevelProtocol: Protocol = {
  name: 'prompt-level',
  formula: 'plan = 1 when every readable item is met, else 0 (IFEval prompt-level strict accuracy); score = mean over prompts',
  verdict: 'binary',
  planScore(rows) {
    const read = rows.filter((r) => r.met !== null);
    if (!read.length) return null;
    return read.every((r) => r.met === true) ? 1 : 0;
  },
  groupsOf: () => [],
  finish: (m) => m,
};
// ---- the new file: lib/eval/formats/ifeval-jsonl.ts ----
const ifevalJsonl: DatasetFormat = {
  name: 'ifeval-jsonl',
  describe: 'IFEval-style rows: a prompt and the instructions a response must follow',
  files: ['jsonl'],
  columns: ['prompt', 'instructions'],
  protocol: 'prompt-level',
  prompt: 'question',
  map(row, ctx) {
    if (typeof row.prompt !== 'string' || !row.prompt) throw new RowError('prompt must be a non-empty string');
    if (!Array.isArray(row.instructions) || !row.instructions.length) throw new RowError('instructions must be a non-empty list');
    return {
      id: `row${ctx.row}`,
      format: 'ifeval-jsonl',
      question: row.prompt,
      rubric: row.instructions.map((text, i) => ({ id: `i${i}`, text: String(text), weight: 1 })),
      source: { dataset: 'ifeval-jsonl', file: ctx.file, row: ctx.row },
    };
  },
};

const parse = (cmd: typeof evalCommand | typeof importCommand, args: string[]) =>
  (cmd.builder as (y: Argv) => Argv)(yargs().exitProcess(false))
    .fail((msg, err) => {
      throw err ?? new Error(msg);
    })
    .parseSync(args) as Record<string, unknown>;

describe('eval registries: a new protocol and a new format, one file and one registry line each', () => {
  let tmp = '';
  before(() => {
    tmp = mkdtempSync(join(tmpdir(), 'pg-eval-reg-'));
    // ---- the registry lines ----
    PROTOCOLS.register(promptLevelProtocol);
    FORMATS.register(ifevalJsonl);
  });
  after(() => {
    PROTOCOLS.unregister('prompt-level');
    FORMATS.unregister('ifeval-jsonl');
    rmSync(tmp, { recursive: true, force: true });
  });

  it('joins the eval --protocol and import --format choices, their value checks and the real parsers', () => {
    const protocol = commandSettings().eval!.find((s) => s.key === 'protocol')!;
    expect(protocol.choices).to.deep.equal(['researchqa', 'research-plan-gen', 'healthbench', 'rubrichub', 'rar', 'papergym', 'prompt-level']);
    expect(checkValue(protocol, 'prompt-level')).to.equal(undefined);
    const format = commandSettings().import!.find((s) => s.key === 'format')!;
    expect(format.choices).to.include('ifeval-jsonl');
    expect(parse(evalCommand, ['--protocol', 'prompt-level', '--model', 'm', '--data', 'd']).protocol).to.equal('prompt-level');
    expect(() => parse(evalCommand, ['--protocol', 'prompt-levl', '--model', 'm', '--data', 'd'])).to.throw(/prompt-levl/);
    expect(parse(importCommand, ['--format', 'ifeval-jsonl', '--input', 'x', '--out', 'y']).format).to.equal('ifeval-jsonl');
  });

  it('imports with the format, runs and scores with the protocol (the mean of all-or-nothing per prompt, by hand)', async () => {
    const file = join(tmp, 'rows.jsonl');
    writeFileSync(
      file,
      [
        { prompt: 'Write a haiku.', instructions: ['three lines', 'no capital letters'] },
        { prompt: 'List two colours.', instructions: ['exactly two items'] },
        { prompt: 'Say hi.', instructions: ['all lowercase', 'ends with !'] },
      ]
        .map((r) => JSON.stringify(r))
        .join('\n') + '\n',
    );
    const { items, problems } = await importDataset('ifeval-jsonl', file);
    expect(problems).to.deep.equal([]);
    expect(items.map((it) => [it.id, it.rubric.length])).to.deep.equal([
      ['row1', 2],
      ['row2', 1],
      ['row3', 2],
    ]);
    // The judge: met unless the item is 'no capital letters' (row1 fails one of two) or 'ends with !' (unreadable: left out).
    const judge: Judge = {
      name: 'fixed',
      stats: emptyStats,
      judge: async (reqs) =>
        reqs.map((r) => r.items.map((it) => ({ itemId: it.id, met: it.text === 'ends with !' ? null : it.text !== 'no capital letters' }))),
    };
    const { rows } = await runBenchmark({
      items,
      protocol: PROTOCOLS.get('prompt-level'),
      judge,
      generator: { generate: async (qs) => qs.map(() => [{ text: 'a response' }]) },
    });
    expect(rows.every((r) => r.protocol === 'prompt-level')).to.equal(true);
    // row1: one of two met → 0; row2: 1; row3: the readable item met → 1. Mean (0 + 1 + 1) / 3.
    const s = scoreRows(PROTOCOLS.get('prompt-level'), rows, { resamples: 0 });
    expect(s.score!.score).to.be.closeTo(2 / 3, 1e-12);
    expect(s.score!.n).to.equal(3);
  });
});
