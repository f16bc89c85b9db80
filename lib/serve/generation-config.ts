/**
 * `serve --generation-config auto | vllm | DIR`, as vLLM names it: the sampling defaults a request
 * gets when it does not set them. `auto` (default, as vLLM since 0.9): the model's
 * `generation_config.json`; `vllm`: none (OpenAI's / vLLM's own defaults: temperature 1, top_p 1,
 * top_k off, min_p 0); a directory: its `generation_config.json`. As vLLM
 * (ModelConfig.get_diff_sampling_param), only the sampling keys are read: `temperature`, `top_p`,
 * `top_k`, `min_p` (Qwen3's file: temperature 0.6, top_p 0.95, top_k 20); `repetition_penalty`
 * has no counterpart in this engine and is reported, not applied.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** Request defaults read from a generation config (ChatServerOptions.samplingDefaults). */
export interface GenerationDefaults {
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
}

/**
 * The sampling defaults of a raw generation_config.json object, plus notes on keys not applied.
 * @param where names the file in errors.
 * @throws Error naming the file and key when a sampling key is not a number in its range.
 */
export function generationDefaults(raw: Record<string, unknown> | undefined, where: string): { defaults: GenerationDefaults; notes: string[] } {
  const defaults: GenerationDefaults = {};
  const notes: string[] = [];
  if (!raw) return { defaults, notes };
  const take = (key: string, field: keyof GenerationDefaults, ok: (v: number) => boolean, range: string) => {
    const v = raw[key];
    if (v === undefined || v === null) return;
    if (typeof v !== 'number' || !Number.isFinite(v) || !ok(v)) throw new Error(`${where}: ${key} must be a number in ${range} (got ${JSON.stringify(v)})`);
    defaults[field] = v;
  };
  take('temperature', 'temperature', (v) => v >= 0 && v <= 2, '[0, 2]');
  take('top_p', 'topP', (v) => v > 0 && v <= 1, '(0, 1]');
  take('top_k', 'topK', (v) => Number.isInteger(v) && v >= -1, 'integers ≥ -1');
  take('min_p', 'minP', (v) => v >= 0 && v <= 1, '[0, 1]');
  if (defaults.topK !== undefined && defaults.topK < 0) defaults.topK = 0;
  const rp = raw.repetition_penalty;
  if (typeof rp === 'number' && rp !== 1) notes.push(`${where}: repetition_penalty ${rp} is not applied (this engine has no repetition penalty)`);
  return { defaults, notes };
}

/**
 * Reads the defaults `--generation-config` names: 'vllm' → none; 'auto' → `modelDir`'s file (none
 * when it has no generation_config.json); a directory → its file, which must exist.
 * @throws Error naming the flag and the path when a directory holds no readable generation_config.json.
 */
export function readGenerationDefaults(choice: string, modelDir: string): { defaults: GenerationDefaults; notes: string[]; source: string | null } {
  if (choice === 'vllm') return { defaults: {}, notes: [], source: null };
  const dir = choice === 'auto' ? modelDir : choice;
  const file = join(dir, 'generation_config.json');
  if (!existsSync(file)) {
    if (choice === 'auto') return { defaults: {}, notes: [], source: null };
    throw new Error(`--generation-config ${choice}: ${file} does not exist`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`--generation-config ${choice}: ${file}: ${(e as Error).message}`);
  }
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw new Error(`--generation-config ${choice}: ${file} must hold a JSON object`);
  return { ...generationDefaults(raw as Record<string, unknown>, file), source: file };
}
