/**
 * The decoder's old module path and names, kept for compatibility: the model is
 * {@link DecoderModel} in lib/model/decoder.ts (it runs every registered architecture, not only
 * Qwen3); `Qwen3Model` is the same type and `instanceof` guard under its old name.
 */
import { DecoderModel } from './decoder.js';

export * from './decoder.js';

/** The old name of {@link DecoderModel}. */
export type Qwen3Model = DecoderModel;
/** The old name of {@link DecoderModel} (`x instanceof Qwen3Model`). */
export const Qwen3Model = DecoderModel;
