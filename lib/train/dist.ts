/**
 * Data-parallel training over libtorch's c10d (native/parallel): the rank / world logic of the trainer.
 *
 * Conventions are torchrun's: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`,
 * `MASTER_PORT` in the environment. Rank 0 hosts the c10d TCPStore at MASTER_ADDR:MASTER_PORT; the
 * collectives run on ProcessGroupGloo (CPU) or ProcessGroupNCCL (CUDA, one GPU per rank:
 * `cuda:LOCAL_RANK`).
 *
 * How a step is split (see Trainer): every rank takes the same global batch from the same data
 * cursor (so a run resumed with another world size continues the same data order), then works on
 * a contiguous share of whole units ({@link shard}: questions for SFT, sampling chunks for OPSD and
 * GRPO — a GRPO group never spans ranks). Completions are drawn from per-chunk seeds, so a chunk
 * gets the same completions whichever rank samples it. Each rank's loss is normalised by the global
 * batch (token or sequence counts exchanged with {@link DistContext.allGather}), so the sum over
 * ranks of the LoRA gradients is the one-process gradient: {@link DistContext.reduceGradients}
 * all-reduces them (SUM, in buckets) after the backward and before clipping / AdamW.
 */
import { native } from '../native.js';
import type { AddonModel, AddonProcessGroup } from '../addon.js';
import { stageBatches, type Stage, type TrainConfig } from '../config/train.js';
import { getPath, setPath } from '../config/schema.js';

/** A process group of the addon (native/napi/dist.cc; declared in lib/addon.ts). */
export type NativeProcessGroup = AddonProcessGroup;

/** The torchrun environment of one worker. */
export interface DistEnv {
  rank: number;
  worldSize: number;
  localRank: number;
  localWorldSize: number;
  masterAddr: string;
  masterPort: number;
}

/** Default collective timeout: torch.distributed's (10 min). */
export const DEFAULT_DIST_TIMEOUT_MS = 600_000;

function intVar(env: NodeJS.ProcessEnv, name: string, dflt?: number): number {
  const v = env[name];
  if (v === undefined || v === '') {
    if (dflt === undefined) throw new Error(`${name} is not set (torchrun convention: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)`);
    return dflt;
  }
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name}=${v} is not a non-negative integer`);
  return n;
}

/**
 * Reads the torchrun environment; null when WORLD_SIZE is unset (a single process). Throws naming
 * the variable when one is malformed or RANK is outside [0, WORLD_SIZE).
 */
export function readDistEnv(env: NodeJS.ProcessEnv = process.env): DistEnv | null {
  if (env.WORLD_SIZE === undefined || env.WORLD_SIZE === '') return null;
  const worldSize = intVar(env, 'WORLD_SIZE');
  if (worldSize < 1) throw new Error(`WORLD_SIZE=${env.WORLD_SIZE} must be >= 1`);
  const rank = intVar(env, 'RANK', worldSize === 1 ? 0 : undefined);
  if (rank >= worldSize) throw new Error(`RANK=${rank} is outside [0, WORLD_SIZE=${worldSize})`);
  const localRank = intVar(env, 'LOCAL_RANK', rank);
  const localWorldSize = intVar(env, 'LOCAL_WORLD_SIZE', worldSize);
  return { rank, worldSize, localRank, localWorldSize, masterAddr: env.MASTER_ADDR || '127.0.0.1', masterPort: intVar(env, 'MASTER_PORT', 29500) };
}

/** Contiguous share [start, end) of `n` units for `rank` of `world` (the first n % world ranks get one more). */
export function shard(n: number, rank: number, world: number): [number, number] {
  const base = Math.floor(n / world);
  const extra = n % world;
  const start = rank * base + Math.min(rank, extra);
  return [start, start + base + (rank < extra ? 1 : 0)];
}

/**
 * A rank's handle on the group. With worldSize 1 (no group) every collective is the identity, so the
 * trainer runs one code path.
 */
export class DistContext {
  /** Seconds spent in gradient all-reduces since the last {@link takeReduceSeconds}. */
  private reduceSeconds = 0;
  private reduceBytes = 0;
  /** Object all-gathers (rank agreement, metrics) and their seconds since the last {@link takeReduceStats}. */
  private gathers = 0;
  private gatherSeconds = 0;
  constructor(
    readonly rank: number,
    readonly worldSize: number,
    readonly localRank: number,
    private readonly group: NativeProcessGroup | null,
    private readonly model: AddonModel | null = null,
  ) {}

  /** A single-process context (no collectives). */
  static single(): DistContext {
    return new DistContext(0, 1, 0, null);
  }

  get isMain(): boolean {
    return this.rank === 0;
  }
  get backend(): string {
    return this.group?.backend ?? 'none';
  }

  /** Binds the model whose LoRA gradients {@link reduceGradients} all-reduces. */
  withModel(model: AddonModel): DistContext {
    return new DistContext(this.rank, this.worldSize, this.localRank, this.group, model);
  }

  /** Every rank's value (JSON round trip), in rank order. */
  async allGather<T>(value: T): Promise<T[]> {
    if (!this.group) return [JSON.parse(JSON.stringify(value)) as T];
    const t0 = performance.now();
    const all = await this.group.allGatherObject(JSON.stringify(value));
    this.gathers += 1;
    this.gatherSeconds += (performance.now() - t0) / 1000;
    return all.map((s) => JSON.parse(s) as T);
  }

  /**
   * Sums the LoRA gradients over ranks in place (c10d all-reduce in buckets of `bucketBytes`,
   * default 25 MiB as DDP), after multiplying this rank's by `preScale` (its share of a global
   * mean, e.g. local tokens / global tokens for SFT). No-op (apart from preScale) on one process.
   */
  async reduceGradients(preScale = 1, bucketBytes?: number): Promise<void> {
    if (!this.group) return;
    if (!this.model) throw new Error('DistContext.reduceGradients: no model bound (withModel)');
    const t0 = performance.now();
    const r = await this.group.allReduceGrads(this.model, { op: 'sum', preScale, bucketBytes });
    this.reduceSeconds += (performance.now() - t0) / 1000;
    this.reduceBytes += r.bytes;
  }

  /**
   * Since the last call (per-step metrics): gradient all-reduce seconds and bytes, and the object
   * all-gathers (`allGathers`: rank agreement on failures and stops, loss and metric sums; each is
   * two c10d all-gathers, sizes then bytes) with their seconds, waits for slower ranks included.
   */
  takeReduceStats(): { allReduceSeconds: number; allReduceBytes: number; allGathers: number; allGatherSeconds: number } {
    const out = { allReduceSeconds: this.reduceSeconds, allReduceBytes: this.reduceBytes, allGathers: this.gathers, allGatherSeconds: this.gatherSeconds };
    this.reduceSeconds = 0;
    this.reduceBytes = 0;
    this.gathers = 0;
    this.gatherSeconds = 0;
    return out;
  }

  /** Makes every rank's LoRA weights rank 0's (after init / resume). */
  async broadcastParameters(): Promise<void> {
    if (this.group && this.model) await this.group.broadcastParams(this.model, { root: 0 });
  }

  async barrier(): Promise<void> {
    if (this.group) await this.group.barrier();
  }

  destroy(): void {
    this.group?.destroy();
  }
}

/** How one stage's batch was resolved for a run (config.json `batching`). */
export interface StageBatch {
  /** `global`: the configured batch is the step's over all ranks; `per-rank`: each rank's, × the world size. */
  mode: 'global' | 'per-rank';
  /** Units (questions; GRPO: questions of G completions) of one optimizer step over all ranks. */
  global: number;
  /** Units per rank: the configured one (per-rank) or global / world size, the mean share (global; ranks differ by at most 1). */
  perRank: number;
}

/** The run's batches as resolved for its world size (config.json `batching`; docs/performance.md "Two ways to scale"). */
export interface BatchRecord {
  worldSize: number;
  stages: Partial<Record<Stage, StageBatch>>;
}

/**
 * Resolves each stage's global batch for `worldSize` processes (each stage descriptor's `batch`, lib/config/train.ts stageBatches):
 * where the per-rank key is set (`--questions-per-rank`, `--opsd-batch-size-per-rank`,
 * `--sft-batch-size-per-rank`), the global key becomes perRank × worldSize, in place — the stage
 * steps, the memory plan and the checkpoints read the global key; else the global key is kept and
 * split over the ranks. Only for a new run: a resumed run keeps its saved global batches
 * ({@link resumedBatches}). Returns what config.json records.
 */
export function resolveBatches(cfg: TrainConfig, worldSize: number): BatchRecord {
  const stages: Partial<Record<Stage, StageBatch>> = {};
  for (const b of stageBatches()) {
    const perRank = getPath(cfg, b.perRank) as number | null | undefined;
    if (perRank != null) setPath(cfg as unknown as Record<string, unknown>, b.global, perRank * worldSize);
    const global = getPath(cfg, b.global) as number;
    stages[b.stage] = perRank != null ? { mode: 'per-rank', global, perRank } : { mode: 'global', global, perRank: global / worldSize };
  }
  return { worldSize, stages };
}

/**
 * The batches of a resumed run on `worldSize` processes. The rule: a resumed run keeps the global
 * batch it was saved with, whatever the world size — its learning rate, schedule and data cursor
 * were chosen for that batch, and the steps it replays must be the steps it took; so with a
 * per-rank batch and another world size, each rank's share is recomputed (global / world size),
 * and `notes` says so (one line per such stage). To train with a larger global batch, start a new
 * run. The saved world size of a per-rank stage is global / perRank.
 */
export function resumedBatches(cfg: TrainConfig, worldSize: number): { record: BatchRecord; notes: string[] } {
  const stages: Partial<Record<Stage, StageBatch>> = {};
  const notes: string[] = [];
  for (const b of stageBatches()) {
    const perRank = getPath(cfg, b.perRank) as number | null | undefined;
    const global = getPath(cfg, b.global) as number;
    if (perRank != null && global !== perRank * worldSize && cfg.stages.includes(b.stage)) {
      notes.push(
        `${b.stage}: the run was started with ${b.perRank} ${perRank} on ${global / perRank} process(es) (global batch ${global}); resumed on ${worldSize}, it keeps the global batch ${global} (${global / worldSize} per process on average), so the run continues the steps it took — start a new run to change the global batch`,
      );
    }
    stages[b.stage] = perRank != null ? { mode: 'per-rank', global, perRank: global / worldSize } : { mode: 'global', global, perRank: global / worldSize };
  }
  return { record: { worldSize, stages }, notes };
}

/** One log line: each running stage's scaling mode and batches ("batches on 2 processes: grpo 8 questions per process × 2 = 16 per step (per-rank); ..."). */
export function formatBatches(r: BatchRecord, stages: readonly Stage[]): string {
  const unit = new Map(stageBatches().map((b) => [b.stage, b.unit]));
  const parts = stages.flatMap((st) => {
    const b = r.stages[st];
    if (!b) return []; // a stage without a batch to scale
    return b.mode === 'per-rank'
      ? [`${st} ${b.perRank} ${unit.get(st) ?? 'items'} per process × ${r.worldSize} = ${b.global} per step (per-rank)`]
      : [`${st} ${b.global} ${unit.get(st) ?? 'items'} per step split over the processes (global)`];
  });
  return `batches on ${r.worldSize} process(es): ${parts.join('; ')}`;
}

/** Options of {@link initDist}. */
export interface InitDistOptions {
  /** Training device: 'cpu' → Gloo; 'cuda' / 'cuda:N' → NCCL on cuda:LOCAL_RANK. */
  device: string;
  /** Collective timeout, ms (default 10 min). */
  timeoutMs?: number;
  /** Rendezvous timeout, ms (default min(timeout, 60 s)). */
  initTimeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  log?: (line: string) => void;
}

/**
 * Joins the process group described by the environment (null environment → single process).
 * Errors name the rank and the cause (port in use, master unreachable, world-size mismatch) and
 * come before any compute.
 */
export async function initDist(o: InitDistOptions): Promise<{ ctx: DistContext; device: string }> {
  const env = readDistEnv(o.env ?? process.env);
  if (!env || env.worldSize === 1) return { ctx: DistContext.single(), device: o.device };
  const avail = native().distAvailable();
  const cuda = o.device.startsWith('cuda');
  if (!avail.gloo)
    throw new Error(
      `rank ${env.rank}: WORLD_SIZE=${env.worldSize} but this addon was built without distributed support (gloo headers missing at build time: install libgloo-dev — scripts/setup.sh does as root — and rebuild)`,
    );
  if (cuda && !avail.nccl)
    throw new Error(
      `rank ${env.rank}: device ${o.device} needs the NCCL process group, not in this build (a CUDA build with nccl.h from the nvidia-nccl wheel)`,
    );
  // One GPU per rank: cuda:LOCAL_RANK (an explicit cuda:N is offset by LOCAL_RANK).
  const device = cuda ? `cuda:${(o.device.includes(':') ? Number(o.device.split(':')[1]) : 0) + env.localRank}` : o.device;
  const timeoutMs = o.timeoutMs ?? DEFAULT_DIST_TIMEOUT_MS;
  o.log?.(
    `rank ${env.rank}/${env.worldSize} (local ${env.localRank}/${env.localWorldSize}): joining ${cuda ? 'nccl' : 'gloo'} group at ${env.masterAddr}:${env.masterPort} (timeout ${timeoutMs / 1000}s)`,
  );
  const pg = await native().distInit({
    rank: env.rank,
    worldSize: env.worldSize,
    masterAddr: env.masterAddr,
    masterPort: env.masterPort,
    backend: cuda ? 'nccl' : 'gloo',
    device,
    timeoutMs,
    initTimeoutMs: o.initTimeoutMs ?? Math.min(timeoutMs, 60_000),
  });
  return { ctx: new DistContext(env.rank, env.worldSize, env.localRank, pg), device };
}
