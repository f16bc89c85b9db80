/** Evaluation: the eval loop, the coverage report with bootstrap CIs, Policy adapters. */
export { runEval, type EvalOptions, type EvalPlan, type PlanGenerator } from './run.js';
export { buildReport, formatReport, writeRowsJsonl, mulberry32, quantile, type EvalReport, type EvalRow, type ReportOptions, type Stat } from './report.js';
export { policyPlanGenerator, type PlanSampling } from './backends.js';
