/**
 * `papergym-native train` end to end: resolve the config, check every input before any compute
 * (model dir has weights, tokenizer matches the model, the dataset parses, the output dir is
 * writable), build the policy, judge, reward and backend, run the Trainer, handle SIGINT (write a
 * checkpoint, then exit), print the summary table.
 */
import { existsSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { packageRoot, cudaAvailable } from '../native.js';
import { resolveConfig, type PRESETS, type TrainConfig } from '../config/train.js';
import { readDataset, loadGeneralRubric, sampleDatasetPath } from '../data/schema.js';
import { Policy } from '../model/policy.js';
import { localJudgeForModel } from '../judge/local.js';
import { createHttpJudge } from '../judge/http.js';
import { makeRewardFn } from '../judge/rewards.js';
import type { Judge } from '../judge/types.js';
import { computeAdvantages } from './advantages.js';
import { resolveCheckpoint } from './checkpoint.js';
import { NativeBackend } from './native-backend.js';
import { Trainer, ensureWritableDir, type TrainItem, type TrainSummary, type RewardFn } from './trainer.js';
import { initDist, type DistContext } from './dist.js';

/** The embedded default model: a tiny random Qwen3 (real tokenizer), made once and reused. */
export function ensureDefaultModel(): string {
  const dir = join(packageRoot, '.cache', 'tiny-models', 'default-tiny-tied-s0');
  if (existsSync(join(dir, 'fingerprint.json'))) return dir;
  mkdirSync(join(packageRoot, '.cache', 'tiny-models'), { recursive: true });
  const py = process.env.PYTHON ?? 'python3';
  try {
    execFileSync(py, [join(packageRoot, 'scripts', 'make_tiny_qwen3.py'), '--name', 'tiny-tied', '--out', dir, '--seed', '0'], { stdio: ['ignore', 'ignore', 'inherit'] });
  } catch (e) {
    throw new Error(`could not create the embedded tiny model with ${py} scripts/make_tiny_qwen3.py (needs torch + transformers: run scripts/setup.sh): ${(e as Error).message}`);
  }
  return dir;
}

/** Checks a model dir before loading: config.json, weights, tokenizer, and that they agree. */
export function checkModelDir(dir: string): void {
  if (!existsSync(dir)) throw new Error(`model dir ${dir} does not exist`);
  const cfgPath = join(dir, 'config.json');
  if (!existsSync(cfgPath)) throw new Error(`model dir ${dir} has no config.json`);
  if (!existsSync(join(dir, 'model.safetensors')) && !existsSync(join(dir, 'model.safetensors.index.json'))) {
    throw new Error(`model dir ${dir} has no weights (model.safetensors or model.safetensors.index.json)`);
  }
  const tokPath = join(dir, 'tokenizer.json');
  if (!existsSync(tokPath)) throw new Error(`model dir ${dir} has no tokenizer.json`);
  let vocab: number;
  try {
    vocab = (JSON.parse(readFileSync(cfgPath, 'utf8')) as { vocab_size: number }).vocab_size;
  } catch (e) {
    throw new Error(`${cfgPath}: ${(e as Error).message}`);
  }
  let maxId = -1;
  try {
    const tj = JSON.parse(readFileSync(tokPath, 'utf8')) as { model?: { vocab?: Record<string, number> }; added_tokens?: { id: number }[] };
    for (const id of Object.values(tj.model?.vocab ?? {})) if (id > maxId) maxId = id;
    for (const t of tj.added_tokens ?? []) if (t.id > maxId) maxId = t.id;
  } catch (e) {
    throw new Error(`${tokPath}: ${(e as Error).message}`);
  }
  if (!(vocab > 0) || maxId >= vocab) {
    throw new Error(`tokenizer ${tokPath} does not match the model: token id ${maxId} >= config vocab_size ${vocab}`);
  }
}

/**
 * Wraps a reward function so judge failures never turn into rewards: when more than half of a
 * batch's verdicts are errors (endpoint down, timeouts after retries), the step fails with an
 * Error naming the judge instead of training on zeros. Checkpoints written so far stay valid.
 */
export function guardJudgeFailures(reward: RewardFn, judgeName: string): RewardFn {
  return async (reqs) => {
    const out = await reward(reqs);
    let errors = 0;
    let total = 0;
    for (const r of out as (typeof out[number] & { breakdown?: { errors: number; specTotal: number; genTotal: number } })[]) {
      if (!r.breakdown) continue;
      errors += r.breakdown.errors;
      total += r.breakdown.specTotal + r.breakdown.genTotal;
    }
    if (total > 0 && errors / total > 0.5) {
      throw new Error(`judge ${judgeName}: ${errors} of ${total} verdicts failed (unreachable, timing out or erroring after retries); stopping instead of training on failed verdicts — fix the judge and --resume`);
    }
    return out;
  };
}

/** Fails fast when an OpenAI-compatible endpoint does not answer at all (any HTTP status counts as up). */
export async function checkEndpoint(url: string, timeoutMs = 10000): Promise<void> {
  const target = url.replace(/\/+$/, '') + '/models';
  try {
    await fetch(target, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new Error(`judge endpoint ${url} is unreachable (${cause?.code ?? cause?.message ?? (e as Error).message}); start it or pass --judge local`);
  }
}

export interface RunOptions {
  preset?: keyof typeof PRESETS;
  file?: string;
  flags?: Partial<TrainConfig>;
  resume?: string;
  /** Called with log lines (default stderr). */
  log?: (line: string) => void;
  /** Custom reward (tests: a checkable toy reward instead of the judge). */
  reward?: RewardFn;
  /** Install a SIGINT handler that checkpoints before exiting (default true). */
  handleSignals?: boolean;
  /**
   * Data parallelism (lib/train/dist.ts): with torchrun's environment (WORLD_SIZE > 1) this process
   * joins the c10d group as RANK; `timeoutMs` bounds every collective (default 10 min).
   */
  dist?: { timeoutMs?: number; initTimeoutMs?: number; env?: NodeJS.ProcessEnv };
}

function timestamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-').replace('Z', '');
}

/** Runs training; resolves with the summary (interrupted = stopped by SIGINT after a checkpoint). */
export async function runTraining(o: RunOptions): Promise<TrainSummary> {
  const log = o.log ?? ((l: string) => process.stderr.write(l + '\n'));
  let cfg: TrainConfig;
  let resume: ReturnType<typeof resolveCheckpoint> | undefined;
  if (o.resume) {
    resume = resolveCheckpoint(o.resume);
    cfg = resume.state.config as TrainConfig;
    cfg = { ...cfg, out: resume.runDir };
    log(`resuming ${resume.dir} (stage ${cfg.stages[resume.state.stageIndex] ?? 'done'}, step ${resume.state.stageStep}, global ${resume.state.globalStep})`);
  } else {
    cfg = resolveConfig({ preset: o.preset, file: o.file, flags: o.flags as never });
  }

  // ---- checks before any compute (and before the run dir is created) ----
  const dataPath = cfg.data ?? sampleDatasetPath();
  let ds: ReturnType<typeof readDataset>;
  try {
    ds = readDataset(dataPath, { strict: cfg.strict, onProblem: (p) => log(`dataset ${dataPath}: line ${p.line}: ${p.errors.join('; ')} (skipped)`) });
  } catch (e) {
    throw new Error(`dataset ${dataPath}: ${(e as Error).message}`);
  }
  if (!ds.items.length) throw new Error(`dataset ${dataPath}: no valid items`);
  if (cfg.device.startsWith('cuda') && !cudaAvailable()) throw new Error(`device ${cfg.device}: CUDA is not available to the addon (see papergym-native doctor)`);
  const modelDir = cfg.model ? resolve(cfg.model) : ensureDefaultModel();
  checkModelDir(modelDir);
  if (cfg.judge.kind === 'http') {
    if (!cfg.judge.url || !cfg.judge.model) throw new Error('judge http needs judge.url and judge.model');
    await checkEndpoint(cfg.judge.url);
  }
  // ---- data parallelism: join the group (port in use, unreachable master, mismatched world
  // sizes fail here, before any compute); rank 0 names the run dir for every rank ----
  const joined = await initDist({ device: cfg.device, timeoutMs: o.dist?.timeoutMs, initTimeoutMs: o.dist?.initTimeoutMs, env: o.dist?.env, log });
  let dist: DistContext = joined.ctx;
  if (dist.worldSize > 1) {
    const rankLog = log;
    const r = dist.rank;
    if (r !== 0) o = { ...o, log: (l: string) => rankLog(`[rank ${r}] ${l}`) };
    cfg = { ...cfg, device: joined.device, out: (await dist.allGather(resolve(cfg.out ?? join('runs', timestamp()))))[0]! };
  }
  try {
    return await trainWithGroup(o, cfg, resume, ds, dataPath, modelDir, dist, (d) => (dist = d));
  } catch (e) {
    dist.destroy();
    throw e;
  }
}

async function trainWithGroup(
  o: RunOptions, cfg: TrainConfig, resume: ReturnType<typeof resolveCheckpoint> | undefined, ds: ReturnType<typeof readDataset>,
  dataPath: string, modelDir: string, dist: DistContext, setDist: (d: DistContext) => void,
): Promise<TrainSummary> {
  const log = o.log ?? ((l: string) => process.stderr.write(l + '\n'));
  const runDir = resolve(cfg.out ?? join('runs', timestamp()));
  if (dist.isMain) ensureWritableDir(runDir);
  const resolved: TrainConfig = { ...cfg, out: runDir };
  if (!resume && dist.isMain) writeFileSync(join(runDir, 'config.json'), JSON.stringify({ ...resolved, model: cfg.model, modelDir }, null, 2));
  log(`run dir ${runDir}; model ${modelDir}${cfg.model ? '' : ' (embedded tiny random Qwen3)'}; data ${dataPath} (${ds.items.length} items${cfg.data ? '' : ', embedded hand-made sample'}); stages ${cfg.stages.join(' -> ')}`);

  // ---- model, judge, reward ----
  const policy = await Policy.load(modelDir, { device: cfg.device as never, dtype: cfg.dtype ?? undefined });
  try {
    policy.model.addLora({ r: cfg.lora.r, alpha: cfg.lora.alpha, dropout: cfg.lora.dropout, useRslora: cfg.lora.useRslora, targetModules: cfg.lora.targetModules as never, seed: cfg.seed });
    if (cfg.memory?.recompute) policy.model.setGradientCheckpointing(true);
    policy.model.setLoraFloat32Branch(cfg.lora.float32Branch ?? false);
    const backend = new NativeBackend(policy, resolved, { baseModelName: modelDir });
    if (resume) await backend.loadState(resume.dir);
    if (dist.worldSize > 1) {
      dist = dist.withModel(policy.model.raw);
      setDist(dist);
      // Same starting adapter on every rank (rank 0's), whatever each loaded.
      await dist.broadcastParameters();
    }
    let judge: Judge;
    if (cfg.judge.kind === 'http') {
      judge = createHttpJudge({ url: cfg.judge.url!, model: cfg.judge.model!, mode: cfg.judge.mode, concurrency: cfg.judge.concurrency });
    } else {
      // The frozen base (adapter off) reads P(yes) at the scored position only.
      judge = await localJudgeForModel(policy.model, policy.tokenizer);
    }
    const general = loadGeneralRubric().items.map((g) => ({ id: g.id, text: g.text }));
    const reward: RewardFn = o.reward ?? guardJudgeFailures(makeRewardFn(judge, general, { alpha: cfg.grpo.alpha }) as unknown as RewardFn, cfg.judge.kind === 'http' ? cfg.judge.url! : 'local judge');
    const trainer = new Trainer(resolved, {
      backend,
      items: ds.items as unknown as TrainItem[],
      reward,
      advantages: (r, G, opts) => {
        const a = computeAdvantages(r, { groupSize: G, scale: opts.scale, dropZeroVariance: opts.dropZeroVariance });
        return { advantages: Array.from(a.advantages), keep: Array.from(a.keep, (k) => k === 1) };
      },
      runDir,
      log,
      dist,
    }, resume?.state);

    let sigints = 0;
    const onSigint = () => {
      sigints += 1;
      if (sigints > 1) {
        log('second SIGINT: exiting without a checkpoint');
        process.exit(130);
      }
      log('SIGINT: finishing the current step, writing a checkpoint, then exiting (Ctrl-C again to exit now)');
      trainer.requestStop();
    };
    if (o.handleSignals !== false) process.on('SIGINT', onSigint);
    try {
      const summary = await trainer.run();
      // Rank 0 wrote the last checkpoint and the final adapter; everyone leaves together.
      await dist.barrier();
      dist.destroy();
      if (dist.isMain) process.stdout.write(Trainer.formatSummary(summary) + '\n');
      return summary;
    } finally {
      if (o.handleSignals !== false) process.off('SIGINT', onSigint);
    }
  } finally {
    policy.dispose();
  }
}
