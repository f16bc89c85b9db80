/**
 * Versioned prompt files of the data pipeline (`prompts/data-*.vN.md`, docs/design.md §7). The file
 * name carries the version; the leading HTML comment is documentation and is not sent. Every
 * cache key and every item's `meta.prompt_version` includes the name and a hash of the text, so
 * an edited prompt never reuses stale answers.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** Pipeline tasks and their prompt files. */
export const DATA_PROMPTS = {
  map: 'data-map.v1',
  reduce: 'data-reduce.v1',
  'reduce-design': 'data-reduce-design.v1',
  question: 'data-question.v1',
  answer: 'data-answer.v1',
  'rubric-q': 'data-rubric-q.v1',
  'rubric-a': 'data-rubric-a.v1',
  'rubric-dedupe': 'data-rubric-dedupe.v1',
  'rubric-rank': 'data-rubric-rank.v1',
  leakage: 'data-leakage.v1',
  'rubric-dimension': 'data-rubric-dimension.v1',
} as const;
export type DataTask = keyof typeof DATA_PROMPTS;

/**
 * The pipeline's roles (issue 39; the paper builds its data with one LLM extracting and merging the
 * four stages and another writing the rubric): each may have its own endpoint, model and sampling.
 * - `extract`: map (section → four stages) and reduce (per stage)
 * - `qa`: question and reference answer synthesis
 * - `rubric`: rubric candidates R_Q and R_A
 * - `rank`: rubric merge (LLM-judged duplicates) and importance ranking
 */
export const PIPELINE_ROLES = ['extract', 'qa', 'rubric', 'rank'] as const;
export type PipelineRole = (typeof PIPELINE_ROLES)[number];

/** The role of each pipeline task (`leakage` is the audit's judge, not a build role: `rank`'s endpoint is not used for it). */
export const TASK_ROLES: Record<Exclude<DataTask, 'rubric-dimension'>, PipelineRole> = {
  map: 'extract',
  reduce: 'extract',
  'reduce-design': 'extract',
  question: 'qa',
  answer: 'qa',
  'rubric-q': 'rubric',
  'rubric-a': 'rubric',
  'rubric-dedupe': 'rank',
  'rubric-rank': 'rank',
  leakage: 'rank',
};

/** A loaded prompt. */
export interface DataPrompt {
  task: DataTask;
  /** File stem, e.g. `data-map.v1`. */
  name: string;
  template: string;
  /** `name#hash8`: what cache keys and items record. */
  version: string;
}

/** The packaged prompts/ directory (works from lib/ and dist/lib/). */
export function promptsDir(): string {
  for (const rel of ['../../prompts/', '../../../prompts/']) {
    const u = new URL(rel, import.meta.url);
    if (existsSync(new URL('data-map.v1.md', u))) return fileURLToPath(u);
  }
  return fileURLToPath(new URL('../../../prompts/', import.meta.url));
}

const cache = new Map<string, DataPrompt>();

/**
 * Load the prompt of a task.
 * @throws Error when the file is missing
 */
export function loadDataPrompt(task: DataTask, dir = promptsDir()): DataPrompt {
  const name = DATA_PROMPTS[task];
  const path = `${dir.replace(/\/$/, '')}/${name}.md`;
  const hit = cache.get(path);
  if (hit) return hit;
  const template = readFileSync(path, 'utf8').replace(/^\s*<!--[\s\S]*?-->/, '').trim();
  const p: DataPrompt = { task, name, template, version: `${name}#${createHash('sha256').update(template).digest('hex').slice(0, 8)}` };
  cache.set(path, p);
  return p;
}

/** Combined version of all pipeline prompts (recorded in `meta.prompt_version` of built items). */
export function dataPromptSetVersion(dir = promptsDir()): string {
  const h = createHash('sha256');
  for (const t of Object.keys(DATA_PROMPTS) as DataTask[]) h.update(loadDataPrompt(t, dir).version);
  return `data-v1#${h.digest('hex').slice(0, 8)}`;
}

/** Substitute `{{key}}` placeholders in one pass (values are not re-scanned). @throws on a missing value */
export function renderPrompt(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{\{(\w+)\}\}/g, (_m, k: string) => {
    if (!(k in values)) throw new Error(`prompt placeholder {{${k}}} has no value`);
    return String(values[k]);
  });
}

/** System message of a task; the tag lets test servers recognise the task. */
export function systemMessage(p: DataPrompt): string {
  return `[papergym task: ${p.task} ${p.version}] You are a meticulous research assistant who turns scientific papers into research-planning exercises. Follow the instructions exactly and reply with JSON only.`;
}
