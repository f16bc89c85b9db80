/**
 * The data layer (docs/design.md §7): item schema and dataset IO, LaTeX ingestion, the LLM pipeline
 * with SQLite state, and the leakage audit.
 */
export * from './schema.js';
export { buildDataset, buildItem, CachedLlm, discoverPapers, ingestPapers, loadPaperCached, type IngestOutcome, stripNumbers, assignSplit, type BuildOptions, type BuildResult, type JsonLlm } from './pipeline.js';
export { PipelineState, callKey, type PaperWarningRow } from './state.js';
export { auditLeakage, formatLeakage, lexicalOverlap, type LeakageReport, type LeakageRow } from './leakage.js';
export { loadPaper, unpackSource, chooseMainFile, formatWarning, ArchiveError, type Paper, type PaperSection, type PaperWarning, type RootCandidate } from './latex/index.js';
export { Progress, type ProgressOptions, type ProgressCounts } from './progress.js';
