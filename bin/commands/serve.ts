import type { CommandModule } from 'yargs';
import { basename } from 'node:path';
import { Policy } from '../../lib/model/policy.js';
import type { Device, Dtype } from '../../lib/model/qwen3.js';
import { ChatServer } from '../../lib/judge/serve.js';
import { policyServeBackend } from '../../lib/eval/backends.js';
import { SERVE_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { resolveDevice } from '../../lib/util/device.js';

interface ServeArgs {
  model: string;
  adapter?: string;
  port: number;
  host: string;
  servedModelName?: string;
  maxBatch: number;
  batchWindowMs: number;
  maxTokens: number;
  thinking?: boolean;
  device: string;
  dtype?: string;
}

/**
 * `papergym-native serve --model DIR [--adapter DIR] --port N`: an OpenAI-compatible server
 * (`/v1/chat/completions` plain + streaming, `/v1/models`) on the addon, requests batched into
 * generation (lib/judge/serve.ts). Serve a frozen base as the judge of another run with
 * `--judge http --judge-url http://HOST:PORT/v1 --judge-model NAME --judge-no-think`.
 */
export const serveCommand: CommandModule<object, ServeArgs> = {
  command: 'serve',
  describe: 'OpenAI-compatible chat server (/v1/chat/completions, /v1/models) with batched generation',
  builder: (y) =>
    addSettings(y, SERVE_OPTIONS, { withDefaults: true }).demandOption('model') as never,
  handler: async (argv) => {
    const device = resolveDevice(argv.device);
    process.stderr.write(`serve: loading ${argv.model} on ${device}\n`);
    const policy = await Policy.load(argv.model, { adapter: argv.adapter, device: device as Device, dtype: argv.dtype as Dtype | undefined });
    const modelId = argv.servedModelName ?? basename(argv.model.replace(/\/+$/, ''));
    const server = new ChatServer({
      backend: policyServeBackend(policy),
      modelId,
      host: argv.host,
      port: argv.port,
      maxBatch: argv.maxBatch,
      batchWindowMs: argv.batchWindowMs,
      defaultMaxTokens: argv.maxTokens,
      enableThinking: argv.thinking,
      log: (l) => process.stderr.write(`serve: ${l}\n`),
    });
    const { url } = await server.start();
    process.stdout.write(`serving ${modelId} at ${url} (POST /chat/completions, GET /models)\n`);
    await new Promise<void>((resolve) => {
      const stop = () => resolve();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });
    await server.close();
    policy.dispose();
  },
};
