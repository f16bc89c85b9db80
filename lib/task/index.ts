/**
 * The task itself — research-plan writing graded by rubric items — as every consumer sees it:
 * the student / teacher prompts, the item and the reward contract.
 */
export { studentMessages, teacherMessages } from './prompts.js';
export type { TaskItem, TaskRubricItem, GradedItem, RewardRequest, RewardResult, RewardFn, BenchmarkItem, BenchmarkRubricItem } from './types.js';
