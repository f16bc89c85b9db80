/**
 * Versioned prompt files of the data pipeline (`prompts/data-*.vN.md`, docs/design.md §7). The file
 * name carries the version; the leading HTML comment is documentation and is not sent. Every
 * cache key and every item's `meta.prompt_version` includes the name and a hash of the text, so
 * an edited prompt never reuses stale answers.
 */
import { createHash } from 'node:crypto';
import { loadPromptFile, promptsDir, renderTemplate } from '../util/prompts.js';

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

export { promptsDir };

/**
 * Load the prompt of a task.
 * @throws Error when the file is missing
 */
export function loadDataPrompt(task: DataTask, dir = promptsDir()): DataPrompt {
  const name = DATA_PROMPTS[task];
  // The one prompt loader (lib/util/prompts.ts); the version keeps its 8 hex digits (cache keys).
  const f = loadPromptFile(name, dir);
  return { task, name, template: f.template, version: `${name}#${f.sha256.slice(0, 8)}` };
}

/** Combined version of all pipeline prompts (recorded in `meta.prompt_version` of built items). */
export function dataPromptSetVersion(dir = promptsDir()): string {
  const h = createHash('sha256');
  for (const t of Object.keys(DATA_PROMPTS) as DataTask[]) h.update(loadDataPrompt(t, dir).version);
  return `data-v1#${h.digest('hex').slice(0, 8)}`;
}

/** Substitute `{{key}}` placeholders in one pass (values are not re-scanned). @throws on a missing value */
export function renderPrompt(template: string, values: Record<string, string | number>): string {
  return renderTemplate(template, values);
}

/** System message of a task; the tag lets test servers recognise the task. */
export function systemMessage(p: DataPrompt): string {
  return `[papergym task: ${p.task} ${p.version}] You are a meticulous research assistant who turns scientific papers into research-planning exercises. Follow the instructions exactly and reply with JSON only.`;
}
