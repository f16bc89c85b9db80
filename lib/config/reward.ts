/**
 * The reward mix's constant, named once: α, the weight of the instance rubric items in
 * r = α·r_spec + (1 − α)·r_gen (paper: α = 0.7, docs/design.md §6; ../shared/DESIGN.md). Train
 * (`grpo.rewardAlpha`, `--reward-alpha`), eval (`--reward-alpha`), the probe and the reports default to it.
 */
export const DEFAULT_ALPHA = 0.7;
