/**
 * Model and dataset cards (README.md with YAML front matter) as the Hub reads them: the metadata
 * fields of the Hub's model card spec (huggingface.co/docs/hub/model-cards: `base_model`,
 * `library_name`, `tags`, `pipeline_tag`, `model-index` with task / dataset / metrics, as
 * huggingface_hub's `ModelCardData` and `EvalResult` parse it) and dataset card spec
 * (huggingface.co/docs/hub/datasets-cards; `configs` with `data_files` per split, which
 * `datasets.load_dataset` follows: huggingface.co/docs/hub/datasets-manual-configuration).
 */
import { stringify } from 'yaml';
import { PAPERGYM_FORMAT } from '../data/schema.js';

/** One evaluation result of a model (one `model-index` metric). */
export interface CardEvalResult {
  /** Metric id (`type`, e.g. `rubric_reward`) and its display name. */
  metric: string;
  metricName: string;
  value: number;
  /** The data it was measured on: id (`type`) and display name. */
  dataset: string;
  datasetName: string;
  /** The split, when known. */
  split?: string;
}

/** What a PEFT adapter's model card says. */
export interface AdapterCardInput {
  /** The Hub repo of the adapter (`org/name`). */
  repoId: string;
  /** The base model: a Hub id (`Qwen/Qwen3-1.7B`), else the local path it was trained from. */
  baseModel: string;
  /** Whether `baseModel` is a Hub id (only then is it written as `base_model`). */
  baseModelIsHubId: boolean;
  /** The training settings to list (the run's resolved config, flattened `key: value`). */
  settings: Record<string, unknown>;
  results: CardEvalResult[];
  /** A sentence or two on how it was trained. */
  summary: string;
  tags?: string[];
}

const front = (data: Record<string, unknown>) => `---\n${stringify(data, { lineWidth: 0 })}---\n`;

/** Flattens nested settings to `a.b: value` rows (arrays joined). */
function flatten(v: unknown, prefix = '', out: [string, string][] = []): [string, string][] {
  if (v && typeof v === 'object' && !Array.isArray(v)) for (const [k, x] of Object.entries(v)) flatten(x, prefix ? `${prefix}.${k}` : k, out);
  else if (v !== undefined && v !== null) out.push([prefix, Array.isArray(v) ? v.join(', ') : String(v)]);
  return out;
}

/**
 * The README.md of a PEFT adapter repo: `base_model`, `library_name: peft`, tags, `pipeline_tag`,
 * and the eval results as `model-index` (what the Hub shows as the evaluation results widget); the
 * body lists the training settings and how to load the adapter with peft and with this package.
 */
export function adapterModelCard(c: AdapterCardInput): string {
  const meta: Record<string, unknown> = {
    ...(c.baseModelIsHubId && { base_model: c.baseModel }),
    library_name: 'peft',
    pipeline_tag: 'text-generation',
    tags: [...new Set(['papergym-native', 'peft', 'lora', ...(c.baseModelIsHubId ? [`base_model:adapter:${c.baseModel}`] : []), ...(c.tags ?? [])])],
  };
  if (c.results.length)
    meta['model-index'] = [
      {
        name: c.repoId,
        results: c.results.map((r) => ({
          task: { type: 'text-generation', name: 'Research plan generation' },
          dataset: { type: r.dataset, name: r.datasetName, ...(r.split && { split: r.split }) },
          metrics: [{ type: r.metric, name: r.metricName, value: r.value }],
        })),
      },
    ];
  const rows = flatten(c.settings).map(([k, v]) => `| \`${k}\` | ${v.replace(/\|/g, '\\|').replace(/\n/g, ' ')} |`);
  return `${front(meta)}
# ${c.repoId}

A LoRA adapter${c.baseModelIsHubId ? ` for [${c.baseModel}](https://huggingface.co/${c.baseModel})` : ` for ${c.baseModel}`}, trained with [papergym-native](https://www.npmjs.com/package/papergym-native). ${c.summary}

## Use

With peft:

\`\`\`python
from peft import AutoPeftModelForCausalLM
model = AutoPeftModelForCausalLM.from_pretrained("${c.repoId}")
\`\`\`

With papergym-native: \`npx papergym-native generate --model ${c.baseModel} --adapter ${c.repoId} --prompt "…"\`.

## Evaluation

${c.results.length ? `| data | split | metric | value |\n|---|---|---|---|\n${c.results.map((r) => `| ${r.datasetName} | ${r.split ?? ''} | ${r.metricName} | ${r.value} |`).join('\n')}` : 'No evaluation results were recorded by the run.'}

## Training settings

| setting | value |
|---|---|
${rows.join('\n')}
`;
}

/** What a PaperGym dataset card says. */
export interface DatasetCardInput {
  repoId: string;
  /** Repo paths of the data files per split (`data/train.jsonl`). */
  splits: Record<string, string>;
  /** Items per split. */
  counts: Record<string, number>;
  /** Items per source domain. */
  domains: Record<string, number>;
  /** How the items were built: the pipeline models, prompts, rubric settings, paper draw. */
  provenance: Record<string, unknown>;
  /** Leakage of the rubric items: the rate and how it was measured. */
  leakage: { rate: number | null; n: number; method: string };
  licence?: string;
}

/** The number-of-items bucket of the Hub's `size_categories` (n<1K, 1K<n<10K, …). */
function sizeCategory(n: number): string {
  if (n < 1000) return 'n<1K';
  if (n < 10000) return '1K<n<10K';
  if (n < 100000) return '10K<n<100K';
  if (n < 1000000) return '100K<n<1M';
  return '1M<n<10M';
}

/**
 * The README.md of a PaperGym dataset repo: `configs` (one `default` config, a data file per
 * split, which `datasets.load_dataset("org/name")` reads), task, size and tags in the front matter;
 * the body gives the provenance, the domain mix and the leakage rate.
 */
export function paperGymDatasetCard(c: DatasetCardInput): string {
  const total = Object.values(c.counts).reduce((a, b) => a + b, 0);
  const meta: Record<string, unknown> = {
    ...(c.licence && { license: c.licence }),
    task_categories: ['text-generation'],
    language: ['en'],
    tags: [PAPERGYM_FORMAT, 'papergym-native', 'research-plans', 'rubrics'],
    size_categories: [sizeCategory(total)],
    configs: [{ config_name: 'default', data_files: Object.entries(c.splits).map(([split, path]) => ({ split, path })) }],
  };
  const pct = (n: number) => `${((100 * n) / Math.max(1, total)).toFixed(1)}%`;
  return `${front(meta)}
# ${c.repoId}

PaperGym items (a research goal from a paper, the paper's plan as reference answer, and a ranked
rubric), built from papers by [papergym-native](https://www.npmjs.com/package/papergym-native)
\`build-data\`. Load with \`datasets.load_dataset("${c.repoId}")\`, or train on it with
\`npx papergym-native train --data <split file>\`.

## Splits

| split | items | file |
|---|---|---|
${Object.entries(c.splits)
  .map(([s, p]) => `| ${s} | ${c.counts[s] ?? 0} | \`${p}\` |`)
  .join('\n')}

## Domain mix

| domain | items | share |
|---|---|---|
${Object.entries(c.domains)
  .sort((a, b) => b[1] - a[1])
  .map(([d, n]) => `| ${d} | ${n} | ${pct(n)} |`)
  .join('\n')}

## Leakage

Rubric items that can be inferred from the question alone: ${c.leakage.rate === null ? 'not measured' : `${(100 * c.leakage.rate).toFixed(1)}%`} of ${c.leakage.n} (${c.leakage.method}).

## Provenance

| field | value |
|---|---|
${flatten(c.provenance)
  .map(([k, v]) => `| \`${k}\` | ${v.replace(/\|/g, '\\|')} |`)
  .join('\n')}
`;
}
