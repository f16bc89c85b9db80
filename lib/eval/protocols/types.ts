/**
 * The contract of a benchmark's scoring protocol (lib/eval/protocols/): per-item rows that keep
 * every verdict, and the score computed from them alone, so `eval --rescore rows.jsonl` recomputes
 * it without asking a judge again.
 */
import type { BenchmarkItem, BenchmarkRubricItem } from '../../task/types.js';
import type { EvalRow } from '../report.js';

/**
 * One judged rubric item of one plan. Extends the eval row of lib/eval/report.ts (PaperGym rows
 * stay readable by `report --eval` and the paired bootstrap) with what the other protocols need.
 */
export interface ProtocolRow extends Omit<EvalRow, 'dimension'> {
  /** The protocol that wrote the row. */
  protocol?: string;
  /** Signed weight (points); 1 where the dataset has none. */
  weight?: number;
  /** ResearchQA: the five-level label 1…5 (not at all … completely), null when unreadable. */
  level?: number | null;
  /** ResearchQA: the query's reply could not be read after retries (the query is skipped, not scored 0). */
  skipped?: boolean;
  /** The judge prompt the verdict came from (prompts/NAME.md) and the first 16 hex of the SHA-256 of its text. */
  prompt?: string;
  promptHash?: string;
  /** The first 16 hex of the SHA-256 of the judged plan's text (lib/eval/protocols/run.ts planHash). */
  planHash?: string;
  dimension?: string;
  axis?: string;
  /** Item tags and the example's tags (HealthBench `level:…`, `axis:…`, `theme:…`). */
  tags?: string[];
  type?: string;
}

/** A mean with its percentile-bootstrap interval (questions resampled). */
export interface ProtocolStat {
  score: number;
  lo: number;
  hi: number;
  /** Plans scored. */
  n: number;
  /** Null verdicts among the rows it covers (left out, never 0). */
  nulls?: number;
  /** Plans left out of it: no readable verdict in its rows (or, for the benchmark, the plan skipped). */
  skipped?: number;
}

/** A protocol's result over a set of rows. */
export interface ProtocolScore {
  protocol: string;
  /** The benchmark score; null when no plan could be scored. */
  score: ProtocolStat | null;
  /** The same formula per group (dimension, axis / tag, item type); groups with no scorable plan are left out. */
  groups: Record<string, ProtocolStat>;
  /** Groups in which no plan could be scored (every verdict of the group null): their counts, never a 0. */
  unscoredGroups?: Record<string, { nulls: number; skipped: number }>;
  /** The judge prompt the verdicts came from: its name and the first 16 hex of the SHA-256 of its text (lib/judge/verdict.ts loadPrompt). */
  prompt?: { name: string; sha256: string };
  questions: number;
  plans: number;
  /** Plans left out: every verdict null, or (ResearchQA) the reply unreadable after retries. */
  skipped: number;
  /** Verdicts, and those null (refused, unreadable, failed) — never counted as 0 or as a pass. */
  verdicts: number;
  nulls: number;
  formula: string;
  bootstrap: { resamples: number; seed: number; level: number };
}

/** One benchmark's scoring protocol. */
export interface Protocol {
  name: string;
  /** The formula in words, as printed with the score. */
  formula: string;
  /**
   * Why the protocol does not apply to `item` (e.g. PaperGym's on items without dimensions, an
   * unweighted fraction on items with negative weights), or null when it applies. `eval
   * --protocol` on items it does not apply to is an error, never ignored.
   */
  inapplicable?(item: BenchmarkItem): string | null;
  /** What is asked of the judge: a binary verdict per item, or ResearchQA's five levels per item. */
  verdict: 'binary' | 'levels';
  /** The plan is also judged on the shared general rubric (data/general-rubric.json; its rows have kind `general`). Absent: false. */
  generalRubric?: boolean;
  /** The rows also get the paper's coverage view (micro coverage, item origins, P(yes), by provenance; lib/eval/report.ts). Absent: false. */
  coverageView?: boolean;
  /**
   * Per-item prompt (prompts/NAME.md) for a judge that answers free-form (the authors' where it is
   * public); unset = the judge's own (prompts/judge-per-item.v1.md). `eval --protocol-prompt` names another.
   */
  itemPrompt?: string;
  /** The prompt for a judge that only answers yes / no (the local judge's P(yes)) when `itemPrompt` asks for more (JSON). */
  yesNoPrompt?: string;
  /** Judge answer tokens the item prompt needs (a JSON reply with an explanation); unset = the judge's default. */
  judgeMaxTokens?: number;
  /** The question text the judge sees (default: the item's question). HealthBench: the conversation as its grader joins it. */
  judgeQuestion?(item: BenchmarkItem): string;
  /** The rubric item text the judge sees (default: its text); `k` its 0-based index. HealthBench: `[points] criterion`, as str(RubricItem). */
  itemText?(r: BenchmarkRubricItem, k: number): string;
  /**
   * The score of one plan from its rows (null = not scorable: skipped). `group` restricts the
   * formula to the rows of one group (a HealthBench tag); the plan's other rows are ignored.
   */
  planScore(rows: ProtocolRow[], opts: { alpha: number }): number | null;
  /** The groups a row belongs to (breakdown keys). */
  groupsOf(row: ProtocolRow): string[];
  /** The benchmark score from the plan scores' mean (identity, or HealthBench's clip to [0, 1]). */
  finish(mean: number): number;
}

/**
 * Why an unweighted protocol (a fraction or mean over items) does not apply to `item`: a
 * negative-weight item (a pitfall to avoid) would count as a criterion to meet. Null when every
 * weight is positive.
 */
export function unsignedOnly(item: BenchmarkItem): string | null {
  const neg = item.rubric.find((r) => r.weight < 0);
  return neg ? `item ${item.id} has a negative-weight rubric item (${neg.id}, weight ${neg.weight}); score it with a protocol that weighs items` : null;
}
