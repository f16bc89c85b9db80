import type { CommandModule } from 'yargs';
import { basename } from 'node:path';
import { Policy } from '../../lib/model/policy.js';
import type { Device, Dtype } from '../../lib/model/qwen3.js';
import { ChatServer } from '../../lib/judge/serve.js';
import { policyServeBackend } from '../../lib/eval/backends.js';

interface ServeArgs {
  model: string;
  adapter?: string;
  port: number;
  host: string;
  servedModelName?: string;
  maxBatch: number;
  maxQueue: number;
  maxModelLen?: number;
  batchWindowMs: number;
  maxTokens: number;
  thinking?: boolean;
  device: string;
  dtype?: string;
}

/**
 * `papergym-native serve --model DIR [--adapter DIR] --port N`: an OpenAI-compatible server
 * (`/v1/chat/completions` plain + streaming with logprobs, stop strings and tool turns,
 * `/v1/models`) on the addon with continuous batching (lib/judge/serve.ts): up to `--max-batch`
 * rows decode together, each request with its own sampling settings; up to `--max-queue` requests
 * wait (then 429). Serve a frozen base as the judge of another run with
 * `--judge http --judge-url http://HOST:PORT/v1 --judge-model NAME --judge-no-think`.
 *
 * Lifetime: the server exits on SIGINT / SIGTERM / SIGHUP and when its parent process goes away
 * (e.g. `npx papergym-native serve` whose npx wrapper was killed: the orphaned server notices the
 * changed parent within a second and shuts down, freeing its port). To run it without a wrapper:
 * `node node_modules/papergym-native/dist/bin/papergym-native.js serve ...`.
 */
export const serveCommand: CommandModule<object, ServeArgs> = {
  command: 'serve',
  describe: 'OpenAI-compatible chat server (/v1/chat/completions, /v1/models) with batched generation',
  builder: (y) =>
    y
      .option('model', { type: 'string', demandOption: true, describe: 'Qwen3 checkpoint dir' })
      .option('adapter', { type: 'string', describe: 'PEFT LoRA adapter dir' })
      .option('port', { type: 'number', default: 8000, describe: '0 = any free port' })
      .option('host', { type: 'string', default: '127.0.0.1' })
      .option('served-model-name', { type: 'string', describe: 'model id clients send (default: the model dir name)' })
      .option('max-batch', { type: 'number', default: 32, describe: 'max rows (completions) decoding together' })
      .option('max-queue', { type: 'number', default: 256, describe: 'max requests waiting for a row; more get 429' })
      .option('max-model-len', { type: 'number', describe: 'KV slots per row: the prompt + max_tokens limit (default min(context, 4096)); on CUDA each decode step attends over all of them, so a smaller value is faster' })
      .option('batch-window-ms', { type: 'number', default: 5, describe: 'wait for more requests before an idle batch' })
      .option('max-tokens', { type: 'number', default: 1024, describe: 'default max_tokens' })
      .option('thinking', { type: 'boolean', describe: 'server-wide enable_thinking default (requests may override)' })
      .option('device', { type: 'string', default: 'cpu', describe: 'cpu | cuda | cuda:N' })
      .option('dtype', { type: 'string', describe: 'float32 | bfloat16 | float16' }) as never,
  handler: async (argv) => {
    const policy = await Policy.load(argv.model, { adapter: argv.adapter, device: argv.device as Device, dtype: argv.dtype as Dtype | undefined });
    const modelId = argv.servedModelName ?? basename(argv.model.replace(/\/+$/, ''));
    const server = new ChatServer({
      backend: policyServeBackend(policy, { maxRows: argv.maxBatch, capacity: argv.maxModelLen }),
      modelId,
      host: argv.host,
      port: argv.port,
      maxBatch: argv.maxBatch,
      maxQueue: argv.maxQueue,
      batchWindowMs: argv.batchWindowMs,
      defaultMaxTokens: argv.maxTokens,
      enableThinking: argv.thinking,
      log: (l) => process.stderr.write(`serve: ${l}\n`),
    });
    const { url } = await server.start();
    process.stdout.write(`serving ${modelId} at ${url} (POST /chat/completions, GET /models)\n`);
    const parent = process.ppid;
    let orphanTimer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      const stop = () => resolve();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      process.once('SIGHUP', stop);
      // Started through a wrapper (npx, a shell script) that was killed: we were re-parented.
      orphanTimer = setInterval(() => {
        if (process.ppid !== parent) {
          process.stderr.write(`serve: parent process ${parent} exited; shutting down\n`);
          resolve();
        }
      }, 1000);
      orphanTimer.unref();
    });
    if (orphanTimer) clearInterval(orphanTimer);
    await server.close();
    policy.dispose();
  },
};
