/**
 * The contract of one published dataset format: which files it ships as, which columns a row must
 * have, and how a row maps to a {@link BenchmarkItem} (lib/task/types.ts). docs/data.md
 * "Importing published benchmarks" lists every mapping with its source.
 */
import type { BenchmarkItem } from '../../task/types.js';

/** Where a mapped row came from (the importer fills it). */
export interface RowContext {
  file: string;
  /** 1-based row within `file`. */
  row: number;
  /** `--config` (ResearchPlanGen's `ml` / `arxiv` / `pubmed`), when given. */
  config?: string;
  /** The split: `--split`, else what the file's path implies. */
  split?: string;
}

/** How the policy is prompted for an item of this format during `eval`. */
export type PromptStyle =
  /** The task's research-plan prompt around the question (lib/task/prompts.ts studentMessages). */
  | 'plan'
  /** The question as the one user message. */
  | 'question'
  /** The published chat messages as they are (falls back to the question as one user turn). */
  | 'chat';

/** One dataset format. */
export interface DatasetFormat {
  /** `--format` name. */
  name: string;
  /** The dataset and its source (paper / repository). */
  describe: string;
  /** File kinds the dataset is published as. */
  files: readonly ('json' | 'jsonl' | 'parquet')[];
  /** Top-level columns every row must have (Parquet files are checked from their schema first). */
  columns: readonly string[];
  /** The scoring protocol `eval` uses by default (lib/eval/protocols/). */
  protocol: string;
  prompt: PromptStyle;
  /**
   * Maps one row. @throws RowError (lib/eval/formats/read.ts) naming the field that cannot be
   * mapped; the importer reports it with file and row and counts it.
   */
  map(row: Record<string, unknown>, ctx: RowContext): BenchmarkItem;
}
