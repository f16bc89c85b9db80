import type { CommandModule } from 'yargs';
import { isHubModelRef, resolveModelRef, resolvePolicyRefs } from '../../lib/hub/resolve.js';
import { basename } from 'node:path';
import { Policy } from '../../lib/model/policy.js';
import type { Device, Dtype } from '../../lib/model/qwen3.js';
import { ChatServer, checkBindAuth } from '../../lib/serve/server.js';
import { loadServedAdapters, policyServeBackend } from '../../lib/serve/policy.js';
import { readGenerationDefaults } from '../../lib/serve/generation-config.js';
import { SERVE_OPTIONS } from '../../lib/config/settings.js';
import { addSettings } from '../../lib/config/schema.js';
import { resolveDevice } from '../../lib/model/device.js';

interface ServeArgs {
  model: string;
  adapter?: string;
  port: number;
  host: string;
  servedModelName?: string;
  loraModules?: string[];
  generationConfig: string;
  maxBatch: number;
  maxQueue: number;
  maxModelLen?: number;
  batchWindowMs: number;
  maxTokens: number;
  thinking?: boolean;
  device: string;
  dtype?: string;
  allowNonFiniteWeights?: boolean;
  exitWithParent?: boolean;
  apiKey?: string;
  allowUnauthenticated?: boolean;
  allowedHosts?: string[];
  headersTimeout: number;
  requestTimeout: number;
}

/**
 * Whether serve shuts down with its parent: `--exit-with-parent` / `--no-exit-with-parent` when
 * given, else on when npm started it (npx / npm exec set npm_command=exec, npm scripts set
 * npm_lifecycle_event), whose wrapper process may be killed without passing the signal on.
 */
export function exitsWithParent(flag: boolean | undefined | null, env: NodeJS.ProcessEnv = process.env): boolean {
  if (flag === true || flag === false) return flag;
  return env.npm_command === 'exec' || Boolean(env.npm_lifecycle_event);
}

/**
 * `papergym-native serve --model DIR [--adapter DIR] --port N`: an OpenAI-compatible server
 * (`/v1/chat/completions` plain + streaming with logprobs, stop strings and tool turns,
 * `/v1/models`) on the addon with continuous batching (lib/serve/server.ts): up to `--max-batch`
 * rows decode together, each request with its own sampling settings; up to `--max-queue` requests
 * wait (then 429). Serve a frozen base as the judge of another run with
 * `--judge http --judge-url http://HOST:PORT/v1 --judge-model NAME --judge-no-think`.
 *
 * Lifetime: SIGINT and SIGTERM stop it cleanly (queued requests get 503, the port is freed).
 * Started through npx / npm exec / an npm script (or with `--exit-with-parent`), it also exits when
 * its parent process goes away (the orphaned server notices the changed parent within a second) and
 * on SIGHUP. Otherwise it stays up as long as its user wants: `nohup node …/papergym-native.js serve … &`
 * from a script survives that script's shell, a systemd unit runs it until `systemctl stop` (SIGTERM);
 * SIGHUP is then logged and ignored, as nohup intends.
 */
export const serveCommand: CommandModule<object, ServeArgs> = {
  command: 'serve',
  describe: 'OpenAI-compatible chat server (/v1/chat/completions, /v1/models) with batched generation',
  builder: (y) => addSettings(y, SERVE_OPTIONS, { withDefaults: true }).demandOption('model') as never,
  handler: async (argv) => {
    const apiKey = argv.apiKey ?? (process.env.PAPERGYM_API_KEY || undefined);
    // A non-loopback bind without a key is refused before the model loads (lib/serve/server.ts checkBindAuth).
    checkBindAuth(argv.host, apiKey, argv.allowUnauthenticated);
    const device = resolveDevice(argv.device);
    process.stderr.write(`serve: loading ${argv.model} on ${device}\n`);
    const refs = await resolvePolicyRefs(argv);
    const policy = await Policy.load(refs.model, {
      adapter: refs.adapter,
      device: device as Device,
      dtype: argv.dtype as Dtype | undefined,
      allowNonFinite: argv.allowNonFiniteWeights,
    });
    // A Hub id is served under the id itself, as vLLM does; a dir under its name.
    const modelId = argv.servedModelName ?? (isHubModelRef(argv.model) ? argv.model : basename(argv.model.replace(/\/+$/, '')));
    // vLLM's --lora-modules: more adapters, each a snapshot of the model picked by the request's model.
    // Each module's adapter is a directory or a Hub id, resolved like --adapter (lib/hub).
    const modules: string[] = [];
    for (const m of argv.loraModules ?? []) {
      const eq = m.indexOf('=');
      const ref = eq > 0 ? m.slice(eq + 1).trim() : '';
      modules.push(ref ? `${m.slice(0, eq)}=${await resolveModelRef(ref, { kind: 'adapter', what: `--lora-modules ${m}` })}` : m);
    }
    const adapters = await loadServedAdapters(policy, modules, {
      activeDir: refs.adapter,
      allowNonFinite: argv.allowNonFiniteWeights,
      reserved: [modelId],
    });
    const gen = readGenerationDefaults(argv.generationConfig, refs.model);
    for (const n of gen.notes) process.stderr.write(`serve: note: ${n}\n`);
    if (gen.source)
      process.stderr.write(
        `serve: request defaults from ${gen.source}: ${
          Object.entries(gen.defaults)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ') || 'none'
        } (--generation-config vllm to use none)\n`,
      );
    const server = new ChatServer({
      backend: policyServeBackend(policy, { maxRows: argv.maxBatch, capacity: argv.maxModelLen, adapters }),
      modelId,
      adapters: Object.keys(adapters),
      samplingDefaults: gen.defaults,
      host: argv.host,
      port: argv.port,
      maxBatch: argv.maxBatch,
      maxQueue: argv.maxQueue,
      batchWindowMs: argv.batchWindowMs,
      defaultMaxTokens: argv.maxTokens,
      enableThinking: argv.thinking,
      apiKey,
      allowUnauthenticated: argv.allowUnauthenticated,
      allowedHosts: argv.allowedHosts ?? undefined,
      headersTimeoutMs: argv.headersTimeout * 1000,
      requestTimeoutMs: argv.requestTimeout * 1000,
      log: (l) => process.stderr.write(`serve: ${l}\n`),
    });
    const { url } = await server.start();
    process.stdout.write(`serving ${[modelId, ...Object.keys(adapters)].join(', ')} at ${url} (POST /chat/completions, GET /models)\n`);
    const parent = process.ppid;
    const withParent = exitsWithParent(argv.exitWithParent);
    process.stderr.write(
      withParent
        ? `serve: exits with its parent process ${parent} (started by npm / --exit-with-parent; --no-exit-with-parent to keep it up)\n`
        : `serve: runs until SIGINT / SIGTERM (pid ${process.pid}); its parent exiting does not stop it\n`,
    );
    let orphanTimer: NodeJS.Timeout | undefined;
    const onHup = () => process.stderr.write('serve: SIGHUP ignored (not started with --exit-with-parent); SIGTERM stops the server\n');
    await new Promise<void>((resolve) => {
      const stop = (sig: string) => {
        process.stderr.write(`serve: ${sig}: shutting down\n`);
        resolve();
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      if (withParent) {
        process.once('SIGHUP', stop);
        // Started through a wrapper (npx) that was killed: we were re-parented.
        orphanTimer = setInterval(() => {
          if (process.ppid !== parent) {
            process.stderr.write(`serve: parent process ${parent} exited; shutting down\n`);
            resolve();
          }
        }, 1000);
        orphanTimer.unref();
      } else {
        process.on('SIGHUP', onHup);
      }
    });
    process.off('SIGHUP', onHup);
    if (orphanTimer) clearInterval(orphanTimer);
    await server.close();
    policy.dispose();
  },
};
