/**
 * The training stages by name (docs/design.md §6), each behind {@link TrainingStage}, one registry.
 * A new stage is one file in this folder and one name in the `register` call below: its settings
 * rows and key rules are in its descriptor (`settings`, `settingsProblems`), handed to the one
 * settings schema (lib/config/extensions.ts) when this module loads, and its name joins the `stages`
 * choices; the trainer, the memory plan and the resume rules iterate the registry.
 * Registration order is the order of the memory plan's phases (and of the `stages` choices).
 */
import type { Stage } from '../../config/train.js';
import { provideStages } from '../../config/extensions.js';
import { Registry } from '../../util/registry.js';
import type { TrainingStage } from './stage.js';
import { sftStage } from './sft.js';
import { opsdStage } from './opsd.js';
import { grpoStage } from './grpo.js';
// The registries whose names are only CLI choices load with this one (lib/config/extensions.ts registeredNames).
import '../trackers/index.js';
import '../../eval/protocols/index.js';
import '../../eval/formats/index.js';

export const STAGES = new Registry<TrainingStage>('training stage', (s) => s.name).register(opsdStage, grpoStage, sftStage);
provideStages(() => STAGES.values());

/** The descriptor of stage `name`. @throws Error naming the stages (--stages) and the registered ones. */
export function stageOf(name: Stage): TrainingStage {
  return STAGES.get(name, 'stages (--stages)');
}
export type { TrainingStage, StageContext, StepResult, StepPhase, StageMemory, MemoryTerms, LongestPrompts, StepTokens } from './stage.js';
