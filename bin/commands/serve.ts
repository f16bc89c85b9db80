import type { CommandModule } from 'yargs';
import { basename } from 'node:path';
import { Policy } from '../../lib/model/policy.js';
import type { Device, Dtype } from '../../lib/model/qwen3.js';
import { ChatServer } from '../../lib/serve/server.js';
import { policyServeBackend } from '../../lib/serve/policy.js';
import { SERVE_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { resolveDevice } from '../../lib/model/device.js';

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
  allowNonFiniteWeights?: boolean;
}

/**
 * `papergym-native serve --model DIR [--adapter DIR] --port N`: an OpenAI-compatible server
 * (`/v1/chat/completions` plain + streaming with logprobs, stop strings and tool turns,
 * `/v1/models`) on the addon with continuous batching (lib/serve/server.ts): up to `--max-batch`
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
    addSettings(y, SERVE_OPTIONS, { withDefaults: true }).demandOption('model') as never,
  handler: async (argv) => {
    const device = resolveDevice(argv.device);
    process.stderr.write(`serve: loading ${argv.model} on ${device}\n`);
    const policy = await Policy.load(argv.model, {
      adapter: argv.adapter, device: device as Device, dtype: argv.dtype as Dtype | undefined, allowNonFinite: argv.allowNonFiniteWeights,
    });
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
