/**
 * Importers of the published benchmark formats (lib/eval/formats/) on the small files that
 * scripts/make_benchmark_fixtures.py writes in each published schema (data/benchmarks/):
 * every field mapping, the Hub directory layout, and the bad-input cases.
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { FORMATS, getFormat, importDataset } from '../lib/eval/formats/index.js';
import { readEvalItems, sampleDatasetPath, validateBenchmarkItem, writeEvalItems } from '../lib/data/schema.js';
import { cli } from './helpers/run.js';

const FX = join(packageRoot, 'data', 'benchmarks');
/** Inputs each importer must refuse or report (not shipped). */
const BAD = join(packageRoot, 'test', 'fixtures', 'benchmarks-bad');

describe('benchmark import formats', () => {
  it('registers the six formats, each with a default protocol', () => {
    expect(FORMATS.names()).to.deep.equal(['researchqa', 'research-plan-gen', 'healthbench', 'rubrichub', 'rar', 'papergym']);
    for (const f of FORMATS.values()) expect(f.protocol).to.equal(f.name === 'research-plan-gen' ? 'research-plan-gen' : f.name);
    expect(() => getFormat('healthbenchx')).to.throw(/--format: unknown dataset format "healthbenchx" \(registered: researchqa/);
  });

  it('ResearchQA: query, rubric[].rubric_item / type, weight 1, split from the file name, own id', async () => {
    const r = await importDataset('researchqa', join(FX, 'researchqa'));
    expect(r.problems).to.deep.equal([]);
    expect(r.items.map((i) => [i.id, i.split])).to.deep.equal([
      ['rqa-1', 'test'],
      ['rqa-2', 'test'],
      ['rqa-v1', 'valid'],
    ]);
    const it0 = r.items[0]!;
    expect(it0.question).to.match(/^How does curriculum ordering/);
    expect(it0.reference_answer).to.equal(undefined);
    expect(it0.rubric[1]).to.deep.equal({ id: 'r2', text: 'Compares curriculum ordering with uniform replay', weight: 1, type: 'comparison' });
    expect(it0.source).to.deep.include({ dataset: 'researchqa', row: 1, id: 'rqa-1' });
    expect(r.items.every((i) => validateBenchmarkItem(i).ok)).to.equal(true);
    // --split narrows the directory to one file
    expect((await importDataset('researchqa', join(FX, 'researchqa'), { split: 'valid' })).items.map((i) => i.id)).to.deep.equal(['rqa-v1']);
  });

  it('ResearchPlanGen: Hub Parquet {config}/{split}, Goal / Rubric / "Reference solution" / q_id', async () => {
    const r = await importDataset('research-plan-gen', join(FX, 'research-plan-gen'), { config: 'ml', split: 'test' });
    expect(r.files.map((f) => f.file.slice(FX.length))).to.deep.equal(['/research-plan-gen/ml/test/0000.parquet']);
    const it0 = r.items[0]!;
    expect(it0.id).to.equal('ml/q-ml-1');
    expect(it0.question).to.match(/^Design a method to detect label noise/);
    expect(it0.reference_answer).to.match(/^Train two networks/);
    expect(it0.rubric.map((x) => [x.text, x.weight])).to.deep.equal([
      ['Proposes a noise estimate that needs no clean labels', 1],
      ['Evaluates on at least two noise rates', 1],
      ['Compares with a co-teaching baseline', 1],
    ]);
    expect(it0.split).to.equal('test');
    expect(it0.source).to.deep.equal({ dataset: 'research-plan-gen', file: r.files[0]!.file, row: 1, config: 'ml', id: 'a-ml-1' });
    // whole tree: three configs/splits, the split taken from the directory
    const all = await importDataset('research-plan-gen', join(FX, 'research-plan-gen'));
    expect(all.items.map((i) => `${i.id}:${i.split}`)).to.deep.equal(['q-ax-1:test', 'q-ml-1:test', 'q-ml-2:test', 'q-ml-3:train']);
    let err: Error | undefined;
    await importDataset('research-plan-gen', join(FX, 'research-plan-gen'), { config: 'pubmed' }).catch((e: Error) => (err = e));
    expect(err?.message).to.match(/no data file for config pubmed \(data files seen: arxiv/);
  });

  it('HealthBench: chat prompt folded, signed points, axis / level tags, example tags, ideal completion', async () => {
    const r = await importDataset('healthbench', join(FX, 'healthbench', 'healthbench.jsonl'));
    const [a, b] = r.items;
    expect(a!.id).to.equal('hb-1');
    expect(a!.question).to.equal('I have had a mild headache for two days. What can I do at home?');
    expect(a!.messages).to.have.length(1);
    expect(a!.reference_answer).to.match(/^Rest, drink water/);
    expect(a!.tags).to.deep.equal(['theme:global_health']);
    expect(a!.rubric.map((x) => [x.weight, x.axis])).to.deep.equal([
      [5, 'completeness'],
      [7, 'accuracy'],
      [-6, 'accuracy'],
    ]);
    expect(a!.rubric[2]!.tags).to.deep.equal(['level:example', 'axis:accuracy']);
    expect(b!.messages!.map((m) => m.role)).to.deep.equal(['user', 'assistant', 'user']);
    expect(b!.question).to.equal(
      'user: Can I take ibuprofen?\n\nassistant: It depends on your health. Do you have kidney problems or stomach ulcers?\n\nuser: No, neither.',
    );
    expect(b!.reference_answer).to.equal(undefined);
    expect(b!.rubric[1]).to.deep.include({ weight: -2, axis: 'communication_quality' });
  });

  it('RubricHub: verl Parquet (zstd), prompt chat list, Rubrics[].criterion / points, reward_model.ground_truth when not empty', async () => {
    const r = await importDataset('rubrichub', join(FX, 'rubrichub'));
    const [a, b] = r.items;
    expect(a!.id).to.equal('science/0');
    expect(a!.rubric.map((x) => [x.text, x.weight])).to.deep.equal([
      ['Gives the correct unit for the answer', 3],
      ['Explains each step of the derivation', 5],
      ['Contains an arithmetic error', -4],
    ]);
    expect(a!.reference_answer).to.equal('98 J');
    expect(a!.split).to.equal(undefined);
    expect(b!.reference_answer).to.equal(undefined);
    expect(b!.messages!.map((m) => m.role)).to.deep.equal(['system', 'user']);
    expect(b!.tags).to.deep.equal(['domain:science']);
  });

  it('RaR: Parquet data/{split}-* (gzip), question / reference_answer / rubric[].description, title, weight with pitfalls', async () => {
    const r = await importDataset('rar', join(FX, 'rar'));
    const a = r.items[0]!;
    expect(a.split).to.equal('test');
    expect(a.reference_answer).to.match(/^Ice is less dense/);
    expect(a.rubric.map((x) => [x.title, x.weight])).to.deep.equal([
      ['Density', 5],
      ['Mechanism', 3],
      ['Detail', 1],
      ['Air myth', -2],
    ]);
    expect(a.rubric[3]!.text).to.equal('Pitfall Criteria: claims ice floats because it contains air');
  });

  it('PaperGym: the project items keep question, reference, split and dimension, weight 1', async () => {
    const r = await importDataset('papergym', sampleDatasetPath());
    expect(r.items).to.have.length(8);
    expect(r.items[0]!.rubric.every((x) => x.weight === 1 && (x.dimension === 'method_innovation' || x.dimension === 'experimental_design'))).to.equal(true);
    // eval reads PaperGym rows and imported rows alike
    const tmp = mkdtempSync(join(tmpdir(), 'pg-fmt-'));
    try {
      const f = join(tmp, 'mixed.jsonl');
      const rqa = (await importDataset('researchqa', join(FX, 'researchqa'))).items;
      writeEvalItems(f, rqa);
      writeFileSync(f, readFileSync(f, 'utf8') + readFileSync(sampleDatasetPath(), 'utf8').split('\n')[0] + '\n');
      const back = readEvalItems(f, { onProblem: () => {} });
      expect(back.problems).to.deep.equal([]);
      expect(back.items.map((i) => i.format)).to.deep.equal(['researchqa', 'researchqa', 'researchqa', 'papergym']);
      expect(back.items.slice(0, 3)).to.deep.equal(rqa);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  describe('bad input', () => {
    it('a truncated JSON file is an error naming the file', async () => {
      let err: Error | undefined;
      await importDataset('researchqa', join(BAD, 'truncated.json')).catch((e: Error) => (err = e));
      expect(err?.message).to.match(/bad\/truncated\.json: not valid JSON \(truncated or malformed\)/);
    });
    it('a Parquet file without the expected columns names the missing ones and the columns found', async () => {
      let err: Error | undefined;
      await importDataset('rar', join(BAD, 'no-rubric.parquet')).catch((e: Error) => (err = e));
      expect(err?.message).to.match(/no-rubric\.parquet: Parquet file without the expected column\(s\) 'rubric' \(columns: question, answer\)/);
    });
    it('a wrong --format for the file is an error that lists the columns the rows have', async () => {
      let err: Error | undefined;
      await importDataset('rar', join(FX, 'healthbench')).catch((e: Error) => (err = e));
      expect(err?.message).to.match(/no row has the columns of --format rar \(question, rubric\); the rows have prompt_id, prompt, rubrics/);
    });
    it('an item with no criterion text skips its row, counted with file and row', async () => {
      const r = await importDataset('researchqa', join(BAD, 'no-criterion.json'));
      expect(r.items.map((i) => i.id)).to.deep.equal(['rqa-1']);
      expect(r.problems).to.deep.equal([{ file: join(BAD, 'no-criterion.json'), row: 2, reason: 'rubric[1].rubric_item is empty' }]);
    });
    it('a weight that is not a number and a cut JSONL line are counted skips', async () => {
      const r = await importDataset('healthbench', join(BAD, 'weights.jsonl'));
      expect(r.items.map((i) => i.id)).to.deep.equal(['hb-1']);
      expect(r.problems.map((p) => [p.row, p.reason.replace(/:.*$/, '')])).to.deep.equal([
        [2, 'rubrics[0].points is not a number ("five")'],
        [3, 'invalid JSON on line 3'],
      ]);
    });
  });

  it('CLI: import prints skipped rows with file and row and the counts; exit 1 when nothing imports', async function () {
    this.timeout(30000);
    const tmp = mkdtempSync(join(tmpdir(), 'pg-imp-'));
    try {
      const out = join(tmp, 'hb.jsonl');
      const ok = await cli(['import', '--format', 'healthbench', '--input', join(BAD, 'weights.jsonl'), '--out', out]);
      expect(ok.code, ok.err).to.equal(0);
      expect(ok.err).to.match(/weights\.jsonl: row 2 skipped: rubrics\[0\]\.points is not a number/);
      expect(ok.out).to.match(/weights\.jsonl: 3 row\(s\), 1 imported, 2 skipped/);
      expect(ok.out).to.match(/import: 1 item\(s\), 3 rubric item\(s\) → .*hb\.jsonl; 2 row\(s\) skipped/);
      expect(readEvalItems(out).items.map((i) => i.id)).to.deep.equal(['hb-1']);
      const bad = await cli(['import', '--format', 'researchqa', '--input', join(BAD, 'truncated.json'), '--out', join(tmp, 'x.jsonl')]);
      expect(bad.code).to.equal(1);
      expect(bad.err).to.match(/truncated\.json: not valid JSON/);
      const wrong = await cli(['import', '--format', 'nope', '--input', FX, '--out', join(tmp, 'x.jsonl')]);
      expect(wrong.code).to.equal(1);
      expect(wrong.err).to.match(/--format|Choices/);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
