/** The training stages by name (docs/design.md §6), each behind {@link TrainingStage}. */
import type { Stage } from '../../config/train.js';
import type { TrainingStage } from './stage.js';
import { sftStage } from './sft.js';
import { opsdStage } from './opsd.js';
import { grpoStage } from './grpo.js';

export const STAGES: Readonly<Record<Stage, TrainingStage>> = { sft: sftStage, opsd: opsdStage, grpo: grpoStage };
export type { TrainingStage, StageContext, StepResult, StepPhase } from './stage.js';
