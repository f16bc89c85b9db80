import { createWriteStream, readFileSync } from 'node:fs';
import { resolvePolicyRefs } from '../../lib/hub/resolve.js';
import type { CommandModule } from 'yargs';
import type { ChatMessage } from '../../lib/model/chat.js';
import { Policy, type PolicyPrompt } from '../../lib/model/policy.js';
import type { Device, Dtype } from '../../lib/model/qwen3.js';
import { studentMessages } from '../../lib/task/prompts.js';
import { assertPromptsFit } from '../../lib/train/input-checks.js';
import { ensureWritableFile } from '../../lib/util/fs.js';
import { GENERATE_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { resolveDevice } from '../../lib/model/device.js';

interface GenerateArgs {
  model: string;
  adapter?: string;
  prompt?: string[];
  input?: string;
  out?: string;
  plain: boolean;
  system?: string;
  n: number;
  temperature: number;
  topK: number;
  topP: number;
  maxNewTokens: number;
  seed?: number;
  thinking: boolean;
  batchSize: number;
  device: string;
  dtype?: string;
  allowNonFiniteWeights?: boolean;
  tokens: boolean;
}

/** One input record: its id (if any), a question/prompt text or messages. */
interface InputRecord {
  id?: string;
  question?: string;
  prompt: PolicyPrompt;
  /** Where it was read: `file:line` of --input, or `--prompt #k`. */
  where: string;
}

/**
 * Reads `--input` JSONL. Each line is an object with one of: `messages` (a chat), `prompt` (a user
 * message sent as is), `question` / `Goal` (a research question: wrapped in the training student
 * prompt unless --plain). `id` (or `q_id`) is carried to the output. Blank lines are skipped.
 */
function readInput(path: string, plain: boolean): InputRecord[] {
  const out: InputRecord[] = [];
  readFileSync(path, 'utf8')
    .replace(/^\uFEFF/, '') // a UTF-8 byte order mark (files saved by some Windows editors)
    .split('\n')
    .forEach((line, i) => {
      if (!line.trim()) return;
      let o: Record<string, unknown>;
      try {
        o = JSON.parse(line) as Record<string, unknown>;
      } catch (e) {
        throw new Error(`${path}:${i + 1}: invalid JSON (${(e as Error).message})`);
      }
      const id =
        typeof o.id === 'string' || typeof o.id === 'number'
          ? String(o.id)
          : typeof o.q_id === 'string' || typeof o.q_id === 'number'
            ? String(o.q_id)
            : undefined;
      const empty = (field: string) => new Error(`${path}:${i + 1}: "${field}" is empty`);
      if (Array.isArray(o.messages)) out.push({ id, prompt: o.messages as ChatMessage[], where: `${path}:${i + 1}` });
      else if (typeof o.prompt === 'string') {
        if (!o.prompt.trim()) throw empty('prompt');
        out.push({ id, prompt: o.prompt, where: `${path}:${i + 1}` });
      } else {
        const q = typeof o.question === 'string' ? o.question : typeof o.Goal === 'string' ? o.Goal : undefined;
        if (q === undefined) throw new Error(`${path}:${i + 1}: expected a "question", "prompt" or "messages" field`);
        if (!q.trim()) throw empty(typeof o.question === 'string' ? 'question' : 'Goal');
        out.push({ id, question: q, prompt: plain ? q : (studentMessages(q) as ChatMessage[]), where: `${path}:${i + 1}` });
      }
    });
  return out;
}

/**
 * `papergym-native generate --model DIR [--adapter DIR] (--prompt TEXT | --input questions.jsonl)
 * [--out plans.jsonl]`: samples completions with the native batched generator and writes one JSON
 * line per completion: `{id, prompt_index, sample_index, question?, text, finish_reason,
 * completion_tokens, seed}` (+ `token_ids`, `logprobs` with --tokens). Output goes to --out or stdout;
 * progress to stderr.
 */
export const generateCommand: CommandModule<object, GenerateArgs> = {
  command: 'generate',
  describe: 'Sample completions (research plans) from a Qwen3 checkpoint (+ LoRA adapter) with the native batched generator',
  builder: (y) =>
    addSettings(y, GENERATE_OPTIONS, { withDefaults: true })
      .demandOption('model')
      .check((a) => {
        const has = ((a.prompt as string[] | undefined)?.length ?? 0) > 0;
        if (has === !!a.input) throw new Error('give exactly one of --prompt or --input');
        if (!Number.isInteger(a.batchSize) || (a.batchSize as number) < 1) throw new Error('--batch-size must be an integer >= 1');
        return true;
      }) as never,
  handler: async (argv) => {
    if (argv.out) ensureWritableFile(argv.out, '--out');
    const records: InputRecord[] = argv.input
      ? readInput(argv.input, argv.plain)
      : (argv.prompt ?? []).map((p, k) => ({
          where: `--prompt #${k + 1}`,
          prompt: argv.system
            ? [
                { role: 'system', content: argv.system },
                { role: 'user', content: p },
              ]
            : p,
        }));
    if (!records.length) throw new Error('no prompts to generate for');
    const seed = argv.seed ?? Math.floor(Math.random() * 2 ** 31);
    const device = resolveDevice(argv.device);
    process.stderr.write(`generate: ${argv.model} on ${device}\n`);
    const refs = await resolvePolicyRefs(argv);
    const policy = await Policy.load(refs.model, {
      adapter: refs.adapter,
      device: device as Device,
      dtype: argv.dtype as Dtype | undefined,
      allowNonFinite: argv.allowNonFiniteWeights,
    });
    // Every prompt (chat template, thinking flag) + --max-new-tokens against the context, before any generation.
    try {
      await assertPromptsFit(
        records.map((r, i) => ({ id: r.id ?? String(i), question: r.question ?? '' })),
        (i) => records[i]!.prompt,
        policy,
        { maxNewTokens: argv.maxNewTokens, enableThinking: argv.thinking, what: argv.input ?? '--prompt', where: (i) => records[i]!.where },
      );
    } catch (e) {
      policy.dispose();
      throw e;
    }
    const out = argv.out ? createWriteStream(argv.out) : process.stdout;
    const ac = new AbortController();
    const onSig = () => ac.abort();
    process.once('SIGINT', onSig);
    let newTokens = 0;
    const t0 = performance.now();
    try {
      for (let b = 0; b * argv.batchSize < records.length; b++) {
        const chunk = records.slice(b * argv.batchSize, (b + 1) * argv.batchSize);
        const res = await policy.generateWithStats(
          chunk.map((r) => r.prompt),
          {
            n: argv.n,
            temperature: argv.temperature,
            topK: argv.topK,
            topP: argv.topP,
            maxNewTokens: argv.maxNewTokens,
            seed: seed + b,
            enableThinking: argv.thinking,
            signal: ac.signal,
          },
        );
        for (const c of res.completions) {
          const r = chunk[c.promptIndex];
          const line: Record<string, unknown> = {
            id: r.id ?? String(b * argv.batchSize + c.promptIndex),
            prompt_index: b * argv.batchSize + c.promptIndex,
            sample_index: c.sampleIndex,
            ...(r.question !== undefined ? { question: r.question } : {}),
            text: c.text,
            finish_reason: c.finishReason,
            completion_tokens: c.tokenIds.length,
            seed: seed + b,
          };
          if (argv.tokens) {
            line.token_ids = Array.from(c.tokenIds);
            line.logprobs = Array.from(c.logprobs);
          }
          out.write(JSON.stringify(line) + '\n');
        }
        newTokens += res.newTokens;
        const s = (performance.now() - t0) / 1000;
        process.stderr.write(
          `generate: ${Math.min((b + 1) * argv.batchSize, records.length)}/${records.length} prompts, ${newTokens} new tokens, ${(newTokens / s).toFixed(1)} tokens/s (seed ${seed})\n`,
        );
      }
    } finally {
      process.off('SIGINT', onSig);
      policy.dispose();
      if (out !== process.stdout) await new Promise<void>((resolve) => (out as ReturnType<typeof createWriteStream>).end(resolve));
    }
  },
};
