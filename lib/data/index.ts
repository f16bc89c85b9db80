/**
 * The data layer (DESIGN.md §7): item schema and dataset IO, LaTeX ingestion, the LLM pipeline
 * with SQLite state, and the leakage audit.
 */
export * from './schema.js';
export { buildDataset, buildItem, CachedLlm, discoverPapers, loadPaperCached, stripNumbers, assignSplit, type BuildOptions, type BuildResult, type JsonLlm } from './pipeline.js';
export { PipelineState, callKey } from './state.js';
export { auditLeakage, formatLeakage, lexicalOverlap, type LeakageReport, type LeakageRow } from './leakage.js';
export { loadPaper, unpackSource, ArchiveError, type Paper, type PaperSection } from './latex/index.js';
export { Progress } from './progress.js';
