/**
 * Publishing to the Hub: a PaperGym dataset (`build-data --push-to-hub`) and a trained PEFT
 * adapter (`train --push-to-hub`), each with its card (lib/hub/cards.ts), through lib/hub/upload.ts.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { auditLeakage } from '../data/leakage.js';
import { PAPERGYM_FORMAT, readDataset } from '../data/schema.js';
import { adapterModelCard, paperGymDatasetCard, type CardEvalResult } from './cards.js';
import { parseHubRef } from './resolve.js';
import { upgradeSavedConfig } from '../config/renames.js';
import { pushToHub, type PushResult, type UploadFile } from './upload.js';

/** Options shared by the publishers. */
export interface PublishOptions {
  /** Create the repo private (TRL hub_private_repo). */
  private?: boolean;
  env?: NodeJS.ProcessEnv;
  fetch?: typeof fetch;
}

/**
 * Publishes the PaperGym dataset JSONL `path` to the dataset repo `repoId`: one JSON Lines file
 * per split (`data/<split>.jsonl`, the items as written by build-data) and a dataset card with
 * the split files as its `default` config (read by `datasets.load_dataset`), the domain mix, the
 * provenance the items carry and the leakage rate of the lexical proxy (lib/data/leakage.ts:
 * the share of rubric items whose content words are ≥ 60% in the question; no judge is called).
 * @throws an Error naming the file when it holds no valid item, and the push errors of lib/hub/upload.ts
 */
export async function publishPaperGymDataset(path: string, repoId: string, opts: PublishOptions = {}): Promise<PushResult & { files: string[] }> {
  const { items } = readDataset(path, { onProblem: () => {} });
  if (!items.length) throw new Error(`--push-to-hub: ${path} holds no valid PaperGym item`);
  const bySplit = new Map<string, string[]>();
  const domains: Record<string, number> = {};
  for (const it of items) {
    const rows = bySplit.get(it.split) ?? [];
    rows.push(JSON.stringify(it));
    bySplit.set(it.split, rows);
    domains[it.source.domain] = (domains[it.source.domain] ?? 0) + 1;
  }
  const splits: Record<string, string> = {};
  const counts: Record<string, number> = {};
  const files: UploadFile[] = [];
  for (const [split, rows] of [...bySplit].sort((a, b) => a[0].localeCompare(b[0]))) {
    splits[split] = `data/${split}.jsonl`;
    counts[split] = rows.length;
    files.push({ path: splits[split]!, from: { content: `${rows.join('\n')}\n` } });
  }
  const leak = await auditLeakage(items);
  const p0 = items[0]!;
  const provenance = {
    items: items.length,
    papers: new Set(items.map((i) => i.source.paper_id)).size,
    prompt_version: p0.meta?.prompt_version,
    models: p0.provenance?.models ?? (p0.meta?.model ? { all: p0.meta.model } : undefined),
    rubric_sources: p0.provenance?.rubric_sources,
    rubric_dimensions: p0.provenance?.rubric_dimensions,
    rubric_top_k: p0.provenance?.rubric_top_k,
    general_items: p0.provenance?.general_items,
    domain_mix: p0.provenance?.domain_mix,
    licences: [...new Set(items.map((i) => i.source.licence).filter(Boolean))],
  };
  const card = paperGymDatasetCard({
    repoId,
    splits,
    counts,
    domains,
    provenance,
    leakage: {
      rate: leak.lexical.overall.rate,
      n: leak.lexical.overall.n,
      method: `lexical proxy: a rubric item counts as leaked when ≥ ${Math.round(100 * leak.lexical.threshold)}% of its content words occur in the question (papergym-native leakage); judge-based rates come from \`papergym-native leakage --llm …\``,
    },
  });
  files.push({ path: 'README.md', from: { content: card } });
  const r = await pushToHub({ type: 'dataset', id: repoId }, files, {
    private: opts.private,
    message: `PaperGym dataset: ${items.length} item(s) (papergym-native build-data)`,
    env: opts.env,
    fetch: opts.fetch,
  });
  return { ...r, files: files.map((f) => f.path) };
}

/** What a train run hands to {@link publishAdapter}. */
export interface AdapterRun {
  /** The run dir (its `config.json` is the resolved config; `final/` the adapter). */
  runDir: string;
  /** The base model as given (`--model`: a Hub id or a dir); default: the `model` of the run's config.json. */
  model?: string | null;
  /** Per stage: best validation reward and last rollout reward, when measured. */
  stages: { stage: string; steps: number; bestValidation?: number; lastReward?: number }[];
  /** The data file trained on; default: the `data` of the run's config.json. */
  data?: string | null;
  /** The adapter to push (default `<runDir>/final`; a checkpoint dir with hub_strategy every_save). */
  adapterDir?: string;
}

/**
 * Uploads the run's final PEFT adapter (`final/adapter_config.json`, `final/adapter_model.safetensors`)
 * with a model card to the model repo `repoId` (TRL `push_to_hub` with `hub_model_id`,
 * `hub_strategy="end"`): `base_model` (when the base is a Hub id), `library_name: peft`, tags, the
 * resolved training settings, and the stages' validation / rollout rewards as `model-index` results.
 * @throws when the run has no final adapter, and the push errors of lib/hub/upload.ts
 */
export async function publishAdapter(run: AdapterRun, repoId: string, opts: PublishOptions = {}): Promise<PushResult> {
  const final = run.adapterDir ?? join(run.runDir, 'final');
  for (const f of ['adapter_config.json', 'adapter_model.safetensors'])
    if (!existsSync(join(final, f))) throw new Error(`--push-to-hub ${repoId}: the run ${run.runDir} has no adapter at ${final} (${f} is missing)`);
  let settings: Record<string, unknown> = {};
  try {
    settings = JSON.parse(readFileSync(join(run.runDir, 'config.json'), 'utf8')) as Record<string, unknown>;
    // A run begun before a setting was renamed: the card names today's keys.
    upgradeSavedConfig(settings, join(run.runDir, 'config.json'));
  } catch {
    /* a run without config.json is still pushed, without the settings table */
  }
  const model = run.model !== undefined ? run.model : ((settings.model as string | null | undefined) ?? null);
  const data = run.data !== undefined ? run.data : ((settings.data as string | null | undefined) ?? null);
  // Runtime paths of this machine say nothing to a reader of the card.
  for (const k of ['out', 'modelDir', 'origins', 'memoryPlan', 'data', 'batching']) delete settings[k];
  const hubBase = model && !existsSync(model) ? parseHubRef(model, 'model') : undefined;
  const baseModel = hubBase ? hubBase.id : (model ?? 'papergym-native embedded tiny Qwen3');
  const dataName = data ? (parseHubRef(data, 'dataset')?.id ?? data.split('/').pop()!) : 'papergym-native sample';
  const results: CardEvalResult[] = [];
  for (const s of run.stages) {
    if (s.bestValidation !== undefined && Number.isFinite(s.bestValidation))
      results.push({
        metric: 'rubric_reward',
        metricName: `best validation rubric reward (${s.stage})`,
        value: s.bestValidation,
        dataset: PAPERGYM_FORMAT,
        datasetName: dataName,
        split: 'val',
      });
    if (s.lastReward !== undefined && Number.isFinite(s.lastReward))
      results.push({
        metric: 'rubric_reward',
        metricName: `last rollout rubric reward (${s.stage})`,
        value: s.lastReward,
        dataset: PAPERGYM_FORMAT,
        datasetName: dataName,
        split: 'train',
      });
  }
  const card = adapterModelCard({
    repoId,
    baseModel,
    baseModelIsHubId: !!hubBase,
    settings,
    results,
    summary: `Stages: ${run.stages.map((s) => `${s.stage} (${s.steps} steps)`).join(' → ')}; the settings below are the run's resolved config.`,
    tags: ['research-plans', ...run.stages.map((s) => s.stage)],
  });
  return pushToHub(
    { type: 'model', id: repoId },
    [
      { path: 'adapter_config.json', from: { file: join(final, 'adapter_config.json') } },
      { path: 'adapter_model.safetensors', from: { file: join(final, 'adapter_model.safetensors') } },
      { path: 'README.md', from: { content: card } },
    ],
    {
      private: opts.private,
      message: run.adapterDir
        ? `Checkpoint ${run.adapterDir.split(/[\\/]/).pop()} (papergym-native train, hub_strategy every_save)`
        : `Upload LoRA adapter (papergym-native train, ${run.stages.map((s) => s.stage).join(' → ')})`,
      env: opts.env,
      fetch: opts.fetch,
    },
  );
}
