/**
 * Rubric judging (docs/design.md §6/§8): the Judge contract, the backends (./backends/: one descriptor per kind), verdict
 * parsing, rewards and the reward-hacking probe. The OpenAI-compatible server is lib/serve/.
 */
export * from './types.js';
export { splitThink, stripThink, type ThinkSplit } from '../llm/think.js';
export {
  parseBinaryVerdict,
  parsePlanVerdicts,
  readPlanVerdicts,
  VERDICT_KEYS,
  loadPrompt,
  renderTemplate,
  perItemMessage,
  perPlanMessage,
  perPlanSchema,
  PER_ITEM_PROMPT,
  PER_PLAN_PROMPT,
  type PromptTemplate,
  type BinaryReading,
  type PlanReading,
} from './verdict.js';
export {
  computeReward,
  scorePlans,
  summariseRewards,
  makeRewardFn,
  DEFAULT_ALPHA,
  type RewardBreakdown,
  type RewardOptions,
  type RewardInput,
} from './rewards.js';
export { HttpJudge, createHttpJudge, JUDGE_TOP_LOGPROBS, type HttpJudgeOptions, type CreateHttpJudgeOptions, type ChatLike } from './http.js';
export { JudgeCache, requestHash } from './cache.js';
export {
  LocalJudge,
  localJudgeForModel,
  openLocalJudge,
  sequenceLogprobsScorer,
  scorerFromLastLogits,
  modelLastLogits,
  yesProbability,
  yesProbabilityFromLogprobs,
  type AnswerScorer,
  type LastLogitsFn,
  type LocalJudgeOptions,
  type LocalJudgeTimings,
  type LocalModelJudgeOptions,
} from './local.js';
export { runProbe, attackPlan, formatProbe, ATTACKS, DEFAULT_ATTACKS, type Attack, type AttackResult, type ProbeReport } from './probe.js';
export {
  JUDGE_BACKENDS,
  judgeBackend,
  judgeSharesPolicyWeights,
  judgeLabel,
  checkJudge,
  openJudge,
  httpJudgeFromConfig,
  localJudgeOptionsFromConfig,
  type JudgeBackend,
  type JudgeOpenContext,
} from './backends/index.js';
export { JUDGE_DEFAULTS, judgeConfigProblems, type JudgeConfig } from '../config/judge.js';
export { yesProbabilityFromChatLogprobs, yesProbabilityAt, type ChatYesProbability } from './logprobs.js';
export { tokenText } from './logprobs.js';
export {
  JuryJudge,
  aggregateVerdicts,
  agreementUnitsFromVerdicts,
  memberHealthOf,
  aggregateChoices,
  JuryRunWatch,
  juryRunMembers,
  type JuryRunMember,
  type JuryRunMemberHealth,
  JURY_AGGREGATIONS,
  JURY_FAILURE_RULES,
  type JuryMember,
  type JuryOptions,
  type JuryAggregation,
  type JuryFailureRule,
} from './jury.js';
export {
  judgeAgreement,
  choiceAgreement,
  formatAgreement,
  type ChoiceUnit,
  type AgreementReport,
  type AgreementUnit,
  type AgreementOptions,
  type Estimate,
  type GroupAgreement,
  type PairAgreement,
  type LabelAgreement,
} from './agreement.js';
