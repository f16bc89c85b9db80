#!/usr/bin/env bash
# Device-side driver (GPU machine): build from a clean `git archive` of HEAD carried in .device/src.tar
# (so uncommitted local edits never reach the measurement), then run the given steps.
# Usage: bash scripts/device/gpu-run.sh STEP... (steps: see the case list below)
# PG_CUDA_ARCHS (e.g. 90) narrows the own kernels' architectures for a faster build; PG_REUSE_BIN=DIR
# takes the addon from DIR (an earlier call's `savebin` output, same native sources) instead of building.
set -o pipefail
here=$PWD
rm -rf /tmp/src && mkdir -p /tmp/src && tar -xf .device/src.tar -C /tmp/src && cp -r .device /tmp/src/ && cd /tmp/src || exit 1
source .device/env/env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if ls .device/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .device/whl/*.whl && export PYTHONPATH=/tmp/site
fi
# Gloo headers for native/parallel (the GPU image has no apt access): the lead copies this machine's
# /usr/include/gloo into .device/gloo-include/gloo before the run (see docs/performance.md "Data parallel").
[ -f .device/gloo-include/gloo/algorithm.h ] && export GLOO_INCLUDE_DIR=$PWD/.device/gloo-include
t0=$(date +%s)
npx tsc -p tsconfig.json || exit 1
if [ -n "${PG_REUSE_BIN:-}" ]; then
  # The addon built by an earlier call of this session from the same native sources (its `savebin`
  # step's files, carried back in PG_REUSE_BIN): no compile, minutes of device time saved.
  mkdir -p build/Release && cp "$PG_REUSE_BIN"/*.node build/Release/ || exit 1
  echo "build: reused $(ls "$PG_REUSE_BIN"/*.node | xargs -n1 basename | tr '\n' ' ')"; node dist/bin/papergym-native.js doctor
elif [ "$*" != prebuild130 ]; then  # prebuild130 alone builds only the prebuilt (scripts/prebuild.sh)
  CMAKE_BUILD_PARALLEL_LEVEL=16 npx cmake-js compile --log-level warn 2>&1 | grep -iE "error|CUDA build|CPU build|kernels|CUDA compiler|data parallelism|NCCL process groups|gloo" | head -30
  echo "build: $(( $(date +%s) - t0 )) s"; node dist/bin/papergym-native.js doctor
fi
# After a profiled memplan run in /tmp/pg-NAME: its metrics, the trainer's whole log and the profile files into $OUT
# (NAME_metrics.jsonl, NAME_train.log, NAME-profile/), and the log's profile lines (written, or why not) printed.
keep_profiled_run() {
  local d=/tmp/pg-$1
  cp $d/metrics.jsonl $OUT/$1_metrics.jsonl 2>/dev/null; cp $d/train.log $OUT/$1_train.log 2>/dev/null
  grep -E "kernel profile|--profile-step" $d/train.log 2>/dev/null | cut -c1-300
  mkdir -p $OUT/$1-profile; cp $d/profile/*.json $OUT/$1-profile/ 2>/dev/null
}
for step in "$@"; do
  echo "=== $step ($(date +%T))"
  case $step in
    test) PG_GPU_REPORT=$OUT/gpu-parity.json npx mocha --config .mocharc.gpu.json 2>&1 | tee $OUT/gpu-tests.log | tail -40 ;;
    losses) timeout 300 node scripts/bench/losses.mjs --device cuda --json $OUT/losses.json 2>&1 | tail -30 ;;
    generate) timeout 400 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --json $OUT/generate.json 2>&1 | tail -30 ;;
    train17) timeout 330 node scripts/bench/train_step.mjs --device cuda --shape qwen3-1.7b --recompute --lora-bf16 --json $OUT/train_1.7b.json 2>&1 | tail -20 ;;
    gen) timeout 160 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 1,64 --json $OUT/generate.json 2>&1 | tail -12 ;;
    ema8) timeout 400 node scripts/bench/ema.mjs --device cuda --shape qwen3-8b --dtype bf16 --r 64 --json $OUT/ema_8b.json 2>&1 | tail -20 ;;
    train8) timeout 380 node scripts/bench/train_step.mjs --device cuda --shape qwen3-8b --lora-bf16 --json $OUT/train_8b.json 2>&1 | tail -20 ;;
    liger) timeout 240 node scripts/bench/losses_vs_liger.mjs --device cuda --json $OUT/losses_vs_liger.json 2>&1 | tail -20 ;;
    ligeraten) PAPERGYM_NO_FUSED_KERNELS=1 timeout 120 node scripts/bench/losses_vs_liger.mjs --device cuda --no-liger --json $OUT/losses_aten.json 2>&1 | tail -8 ;;
    train17fast) timeout 300 node scripts/bench/train_step.mjs --device cuda --shape qwen3-1.7b --lora-bf16 --json $OUT/train_1.7b.json 2>&1 | tail -12 ;;
    train17rc) timeout 300 node scripts/bench/train_step.mjs --device cuda --shape qwen3-1.7b --recompute-only --lora-bf16 --json $OUT/train_1.7b_rc.json 2>&1 | tail -12 ;;
    train8rc) timeout 330 node scripts/bench/train_step.mjs --device cuda --shape qwen3-8b --recompute-only --lora-bf16 --json $OUT/train_8b_rc.json 2>&1 | tail -12 ;;
    grpo) timeout 240 node scripts/bench/grpo_step.mjs --device cuda --shape qwen3-1.7b --json $OUT/grpo_step.json 2>&1 | tail -20 ;;
    graphs) timeout 200 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --no-ref --json $OUT/generate_graphs.json 2>&1 | tail -8 ;;
    nographs) timeout 300 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --no-graphs --no-ref --json $OUT/generate_nographs.json 2>&1 | tail -12 ;;
    # memory plan: `train --preset` at real shapes (random weights), 1 OPSD + 1 GRPO step, capped / uncapped
    memplan8) timeout 560 node scripts/bench/memplan.mjs --shape qwen3-8b --max-memory 80 --json $OUT/memplan_8b_80.json 2>&1 | tail -8 ;;
    memplan4) timeout 500 node scripts/bench/memplan.mjs --shape qwen3-4b --max-memory 48 --json $OUT/memplan_4b_48.json 2>&1 | tail -8 ;;
    memplan17) timeout 400 node scripts/bench/memplan.mjs --shape qwen3-1.7b --max-memory 48 --json $OUT/memplan_1.7b_48.json 2>&1 | tail -8 ;;
    memplan17x24) timeout 400 node scripts/bench/memplan.mjs --shape qwen3-1.7b --max-memory 24 --json $OUT/memplan_1.7b_24.json 2>&1 | tail -8 ;;
    memplan8u) timeout 560 node scripts/bench/memplan.mjs --shape qwen3-8b --json $OUT/memplan_8b_uncapped.json 2>&1 | tail -8 ;;
    memplan4u) timeout 500 node scripts/bench/memplan.mjs --shape qwen3-4b --json $OUT/memplan_4b_uncapped.json 2>&1 | tail -8 ;;
    memplan17u) timeout 400 node scripts/bench/memplan.mjs --shape qwen3-1.7b --json $OUT/memplan_1.7b_uncapped.json 2>&1 | tail -8 ;;
    # the trainer itself at 1.7B shapes, 3 OPSD + 3 GRPO steps, phase seconds per step (issue 15)
    trainphases) timeout 560 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 3 --grpo-steps 3 --json $OUT/train_phases_1.7b.json 2>&1 | tee $OUT/train_phases.log | grep -E "judge totals|memory plan|step [0-9]" ;;
    # the same run with the rollouts sampling through the LoRA branch (sampling.mergeAdapter off): the A/B of the merged adapter
    trainphasesoff) timeout 560 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 3 --grpo-steps 3 --extra="--merge-adapter off" --json $OUT/train_phases_1.7b_branch.json 2>&1 | tee $OUT/train_phases_branch.log | grep -E "judge totals|memory plan|step [0-9]" ;;
    # the trainer's GRPO step next to grpo_step.mjs phase by phase, same shapes (8 × 8 × 1024, micro-batch 8): 3 GRPO steps of train, then the comparison table
    phasecompare) timeout 200 node scripts/bench/grpo_step.mjs --device cuda --shape qwen3-1.7b --json $OUT/grpo_step.json 2>&1 | tail -14
      timeout 330 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 0 --grpo-steps 3 --out /tmp/pg-phasecompare --json $OUT/train_grpo_1.7b.json 2>&1 | tail -5
      node scripts/bench/compare_phases.mjs --bench $OUT/grpo_step.json --run /tmp/pg-phasecompare --json $OUT/phase_compare.json ;;
    # the local judge of one GRPO step (64 plans × ~1024 tokens × 17 rubric items) by part: host (render, tokenize, …) vs native; with and without the host shortcuts (render once, token split)
    judgehost) timeout 240 node scripts/bench/judge_host.mjs --device cuda --shape qwen3-1.7b --json $OUT/judge_host.json 2>&1 | tail -14
      timeout 240 node scripts/bench/judge_host.mjs --device cuda --shape qwen3-1.7b --no-token-split --no-render-once --repeat 2 --json $OUT/judge_host_before.json 2>&1 | tail -14 ;;
    judgehost1) timeout 120 node scripts/bench/judge_host.mjs --device cuda --shape qwen3-1.7b --repeat 1 --json $OUT/judge_host.json 2>&1 | tail -14
      timeout 100 node scripts/bench/judge_host.mjs --device cuda --shape qwen3-1.7b --no-token-split --no-render-once --repeat 1 --json $OUT/judge_host_before.json 2>&1 | tail -6 ;;
    # the judge bench on new plans every call (as each trainer step) vs the warm-up's plans again: is the trainer's 1.6× judge phase the shapes' first use?
    judgefresh) timeout 150 node scripts/bench/judge_host.mjs --device cuda --shape qwen3-1.7b --repeat 2 --fresh-plans --json $OUT/judge_fresh.json 2>&1 | grep -E "local judge|total \\(reward|native \\|"
      timeout 150 node scripts/bench/judge_host.mjs --device cuda --shape qwen3-1.7b --repeat 2 --json $OUT/judge_same.json 2>&1 | grep -E "local judge|total \\(reward|native \\|" ;;
    # the HTTP judge behind sampling (per-group judging via onGroupDone vs after the rollout), 1.7B shapes, group lengths 256…1024
    judgeoverlap) timeout 300 node scripts/bench/judge_overlap.mjs --device cuda --shape qwen3-1.7b --min-tokens 256 --max-tokens 1024 --latency-ms 100 --json $OUT/judge_overlap.json 2>&1 | tail -8 ;;
    # the local judge beside the decode (grpo.judgeOverlap on): same rollouts, the trainer's local judge on the policy model
    judgeoverlaplocal) timeout 300 node scripts/bench/judge_overlap.mjs --device cuda --shape qwen3-1.7b --min-tokens 256 --max-tokens 1024 --judge local --json $OUT/judge_overlap_local.json 2>&1 | tail -10 ;;
    # the local judge beside the decode with 16 libuv threads instead of 4 (generate holds one for the whole rollout; scoring calls and the tokenizer share the rest)
    judgepool) UV_THREADPOOL_SIZE=16 timeout 200 node scripts/bench/judge_overlap.mjs --device cuda --shape qwen3-1.7b --min-tokens 256 --max-tokens 1024 --judge local --json $OUT/judge_overlap_local_pool16.json 2>&1 | tail -9 ;;
    # the same with the scoring calls on the legacy default stream / a normal-priority side stream / a high-priority one (the default)
    judgestreams) for s in default side high; do PAPERGYM_SCORING_STREAM=$s timeout 200 node scripts/bench/judge_overlap.mjs --device cuda --shape qwen3-1.7b --min-tokens 256 --max-tokens 1024 --judge local --json $OUT/judge_overlap_local_$s.json 2>&1 | tail -6 | sed "s/^/$s: /"; done ;;
    gen1024) timeout 400 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 1,64,256 --new-tokens 1024 --no-ref --json $OUT/generate_1024.json 2>&1 | tail -12 ;;
    gen256) timeout 300 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 1,64,256 --no-ref --json $OUT/generate_256.json 2>&1 | tail -12 ;;
    # decode attention A/B (live-KV kernel vs masked over every slot) as the trainer's rollouts run:
    # LoRA r 64 on all projections, top-k 20; batch 1 / 64 / 256 × 256 / 1024 new tokens
    genab1024) timeout 400 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 1,64,256 --new-tokens 1024 --attention live-kv,masked --lora 64 --top-k 20 --no-ref --json $OUT/generate_ab_1024.json 2>&1 | tail -8 ;;
    genab256) timeout 300 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 1,64,256 --new-tokens 256 --attention live-kv,masked --lora 64 --top-k 20 --no-ref --json $OUT/generate_ab_256.json 2>&1 | tail -8 ;;
    gennolora) timeout 200 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 64 --new-tokens 1024 --top-k 20 --no-ref --json $OUT/generate_nolora_1024.json 2>&1 | tail -3 ;;
    # the trainer's bf16 LoRA branch: adapter cast once per call (default) vs per step (PAPERGYM_LORA_CACHE=0)
    genlorabf16) for c in 1 0; do PAPERGYM_LORA_CACHE=$c timeout 120 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 64 --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --no-ref --json $OUT/generate_lorabf16_cache$c.json 2>&1 | tail -1 | sed "s/^/cache=$c: /"; done ;;
    # rollouts through the LoRA branch vs the adapter merged into the weights (the trainer's sampling.mergeAdapter), bf16 branch, r 64, top-k 20: OPSD's 32 and GRPO's 64 rows, and 256
    genmerge) timeout 300 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 32,64,256 --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --adapter-mode branch,merged --no-ref --json $OUT/generate_merge_1024.json 2>&1 | tail -7 ;;
    # the inference fusions (residual add + RMSNorm, q/k norm + RoPE + KV write) off / on, merged-adapter rollouts as the trainer runs them: batch 1 / 32 / 64 / 256 × 1024 new tokens
    genfuse) for f in 0 1; do PAPERGYM_FUSED_NORM_ROPE=$f timeout 280 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 1,32,64,256 --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --adapter-mode merged --no-ref --json $OUT/generate_fuse$f.json 2>&1 | tail -6 | sed "s/^/fused=$f: /"; done ;;
    # CUPTI (the kernel profiler's source) works on this machine: torch.profiler over one matmul
    cupti) python3 -c "
import torch
from torch.profiler import profile, ProfilerActivity
x = torch.randn(1024, 1024, device='cuda')
with profile(activities=[ProfilerActivity.CUDA]) as p:
    (x @ x).sum().item()
print('cupti: GPU events', sum(1 for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA))" 2>&1 | tail -2 ;;
    # the decode step by kernel (Kineto profile of the same call after each timed one): merged adapter r 64, bf16, top-k 20, 512 × 1024
    genprof) timeout 300 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 1,32,64,256 --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --adapter-mode merged --no-ref --profile --json $OUT/generate_prof.json 2>&1 | grep -vE "^bench:" | tail -60 ;;
    # the same kernels without graphs (each op launched): what the graph replay saves, and the kernels if CUPTI misses graph replays
    genprofeager) timeout 120 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 64 --new-tokens 64 --lora 64 --lora-bf16 --top-k 20 --adapter-mode merged --no-ref --no-graphs --profile --json $OUT/generate_prof_eager.json 2>&1 | grep -vE "^bench:" | tail -14 ;;
    # A/B of the decode attention's key batching: one key per warp and iteration (the kernel before) against the default 4
    genkeys) for k in 1 4; do PAPERGYM_DECODE_ATTN_KEYS=$k timeout 200 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 32,64,256 --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --adapter-mode merged --no-ref --json $OUT/generate_keys$k.json 2>&1 | tail -4 | sed "s/^/keys=$k: /"; done ;;
    # A/B of the decode attention's keys per split (the default picks 32 / 64 / 128 by batch size)
    genchunk) for c in 32 64 128; do PAPERGYM_DECODE_ATTN_CHUNK=$c timeout 120 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 1,8,32 --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --adapter-mode merged --no-ref --json $OUT/generate_chunk$c.json 2>&1 | tail -3 | sed "s/^/chunk=$c: /"; done ;;
    # trainphases with the kernel profile of step 3 of each stage (--profile-step 3): steps 1-2 unprofiled, step 3 by kernel
    trainprof) timeout 330 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 3 --grpo-steps 3 --out /tmp/pg-trainprof --extra="--profile-step 3" --json $OUT/train_phases_prof.json 2>&1 | tee $OUT/train_prof.log | grep -E "kernel profile|step [0-9]|memory plan" | cut -c1-600
      mkdir -p $OUT/profile && cp /tmp/pg-trainprof/profile/*.json $OUT/profile/ 2>/dev/null; ls $OUT/profile ;;
    genchunk2) for c in 128 256; do PAPERGYM_DECODE_ATTN_CHUNK=$c timeout 150 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 32,64,256 --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --adapter-mode merged --no-ref --json $OUT/generate_chunk$c.json 2>&1 | tail -3 | sed "s/^/chunk=$c: /"; done ;;
    # the OPSD step with larger micro-batches (the preset's 4 against 8 and 16): 3 OPSD steps each
    opsdmb) for mb in 8 16; do timeout 200 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 3 --grpo-steps 0 --extra="--opsd-micro-batch $mb" --json $OUT/train_opsd_mb$mb.json 2>&1 | grep -E "step [0-9]|memory plan" | cut -c1-400 | sed "s/^/mb=$mb: /"; done ;;
    # the trainer at the session's final commit: 4 OPSD + 4 GRPO steps, step 4 of each kernel-profiled (steps 2-3 clean)
    trainfinal) timeout 200 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 4 --grpo-steps 4 --out /tmp/pg-trainfinal --extra="--profile-step 4" --json $OUT/train_final.json 2>&1 | tee $OUT/train_final.log | grep -E "step [0-9]|memory plan|judge totals" | cut -c1-500
      cp /tmp/pg-trainfinal/profile/*.json $OUT/ 2>/dev/null ;;
    # the sampler / fusion / judge tests of the decode suite only (a short verification run)
    decodefix) npx mocha --config .mocharc.gpu.json --grep "fused top-k|live-KV attention in bf16|inference fusions|prefixLogprobs on CUDA" 2>&1 | tee $OUT/gpu-decodefix.log | grep -vE "^\s*$" | tail -30 ;;
    decodetest) npx mocha --no-config --timeout 600000 dist/test/gpu/decode-graphs.test.js 2>&1 | tee $OUT/gpu-decode-tests.log | tail -30 ;;
    memplan) for s in 1.7b:48 4b:48 8b:80; do timeout 560 node scripts/bench/memplan.mjs --shape qwen3-${s%%:*} --max-memory ${s##*:} --json $OUT/memplan_${s%%:*}_${s##*:}.json 2>&1 | tail -6; done ;;
    prebuild130)
      # The cu130 prebuilt (relocatable: no RUNPATH) packed by scripts/prebuild.sh, installed
      # into an empty project as a user would (offline: the carried node_modules stand in for the
      # registry), then the loader's choice from the installed package and the GPU suite against that
      # binary, with LD_LIBRARY_PATH unset so only the loader's preload finds libtorch.
      pk=/tmp/pg-packs proj=/tmp/pg-consumer; rm -rf $pk $proj build-prebuild; t1=$(date +%s)
      CMAKE_BUILD_PARALLEL_LEVEL=16 bash scripts/prebuild.sh cu130 --pack-dir $pk 2>&1 | grep -vE "^\s*$" | tail -14
      echo "prebuild cu130: $(( $(date +%s) - t1 )) s"; ls -la $pk build-prebuild/cu130/pkg 2>&1 | tee $OUT/prebuild130-sizes.txt
      mkdir -p $proj && cp -r node_modules $proj/ && (cd $proj && echo '{"name":"consumer","version":"1.0.0","private":true}' > package.json &&
        t2=$(date +%s) && env -u LD_LIBRARY_PATH npm install --offline --no-audit --no-fund --foreground-scripts $pk/*.tgz 2>&1 | tail -8 && echo "npm install: $(( $(date +%s) - t2 )) s")
      (cd $proj && env -u LD_LIBRARY_PATH npx papergym-native doctor 2>&1 | tee $OUT/prebuild130-doctor.txt)
      bin=$proj/node_modules/@papergym-native/linux-x64-torch2.11-cu130/papergym_native.node
      env -u LD_LIBRARY_PATH PAPERGYM_NATIVE_ADDON=$bin PG_GPU_REPORT=$OUT/gpu-parity-prebuilt.json npx mocha --config .mocharc.gpu.json 2>&1 | tee $OUT/gpu-tests-prebuilt.log | tail -40 ;;
    serveload) timeout 500 node scripts/bench/serve_load.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --clients 64 --max-batch 64 --min-tokens 64 --max-tokens 256 --prompt-words 200 --json $OUT/serve_load.json 2>&1 | tail -14 ;;
    serveloadfull) timeout 300 node scripts/bench/serve_load.mjs --mix full --device cuda --shape qwen3-1.7b --dtype bf16 --clients 64 --max-batch 64 --min-tokens 64 --max-tokens 256 --prompt-words 200 --json $OUT/serve_load_full.json 2>&1 | tail -8 ;;
    decodevsfwd) timeout 200 node scripts/device/decode_vs_forward.mjs 2>&1 | tee $OUT/decode_vs_forward.txt ;;
    gpurows) timeout 300 npx mocha --no-config --timeout 600000 dist/test/gpu/generate-rows.test.js 2>&1 | tee $OUT/gpurows.log | tail -20 ;;
    # Data parallel (2 GPUs): NCCL collectives test, then the trainer's GRPO step and an
    # SFT step at 1.7B shapes on 1 vs 2 GPUs with the same global batch (throughput, all-reduce
    # seconds per step, adapter difference 1 vs 2 GPUs).
    disttest) npx mocha --no-config --timeout 600000 dist/test/gpu/dist-nccl.test.js 2>&1 | tee $OUT/gpu-dist-tests.log | tail -30 ;;
    dpgrpo) timeout 420 node scripts/bench/dp_scaling.mjs --stage grpo --shape qwen3-1.7b --steps 3 --json $OUT/dp_grpo_1.7b.json 2>&1 | tail -25 ;;
    dpsft) timeout 240 node scripts/bench/dp_scaling.mjs --stage sft --shape qwen3-1.7b --steps 4 --json $OUT/dp_sft_1.7b.json 2>&1 | tail -25 ;;
    # the built addon into $OUT, for PG_REUSE_BIN in a later call whose native sources are unchanged
    savebin) cp build/Release/*.node $OUT/ && ls -la $OUT/*.node ;;
    # a two-member jury as the GRPO reward (issue 32 item 4): the local judge (policy weights, adapter off) and this
    # package's serve on the same random 1.7B checkpoint as a loopback HTTP judge on the same GPU; 3 GRPO steps of
    # train at the 1.7B shape (run after trainphases, which makes the checkpoint), phase seconds per step
    jury17) m=.cache/random-models/qwen3-1.7b-bfloat16-s0
      node dist/bin/papergym-native.js serve --model $m --device cuda --port 8011 --served-model-name judge --max-batch 64 > $OUT/jury_serve.log 2>&1 & sp=$!
      for i in $(seq 180); do node -e "fetch('http://127.0.0.1:8011/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))" && break; sleep 1; done
      printf 'judge:\n  kind: jury\n  aggregation: majority\n  judges:\n    - {name: local, kind: local}\n    - {name: remote, kind: http, url: "http://127.0.0.1:8011/v1", model: judge, noThink: true, weight: 1.5}\n' > /tmp/jury.yaml
      timeout 420 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 0 --grpo-steps 3 --out /tmp/pg-jury --extra="--config /tmp/jury.yaml" --json $OUT/train_jury_1.7b.json 2>&1 | tee $OUT/train_jury.log | grep -E "step [0-9]|memory plan|judge totals" | cut -c1-420
      cp /tmp/pg-jury/metrics.jsonl $OUT/jury_metrics.jsonl 2>/dev/null; kill $sp ;;
    # the same jury with the HTTP member on a loopback stand-in that answers Yes / No after 100 ms (test/helpers/fake-llm):
    # a random-weights model behind serve answers unreadable text, which the jury rightly stops on (jury17's result)
    jury17loop) node -e "import('./dist/test/helpers/fake-llm.js').then((m) => m.startFakeLlm({ port: 8012, latencyMs: 100, respond: () => (Math.random() < 0.6 ? 'Yes' : 'No') }))" > $OUT/jury_fake.log 2>&1 & sp=$!
      sleep 2
      printf 'judge:\n  kind: jury\n  aggregation: majority\n  judges:\n    - {name: local, kind: local}\n    - {name: remote, kind: http, url: "http://127.0.0.1:8012/v1", model: judge, concurrency: 64, weight: 1.5}\n' > /tmp/jury.yaml
      timeout 300 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 0 --grpo-steps 3 --out /tmp/pg-jury2 --extra="--config /tmp/jury.yaml" --json $OUT/train_jury_loop_1.7b.json 2>&1 | tee $OUT/train_jury_loop.log | grep -E "step [0-9]|memory plan|judge totals" | cut -c1-420
      cp /tmp/pg-jury2/metrics.jsonl $OUT/jury_loop_metrics.jsonl 2>/dev/null; kill $sp ;;
    # the local judge beside the decode, with each side once more under the kernel profiler (GPU busy / idle)
    judgeoverlapprof) timeout 300 node scripts/bench/judge_overlap.mjs --device cuda --shape qwen3-1.7b --min-tokens 256 --max-tokens 1024 --judge local --profile --json $OUT/judge_overlap_local_prof.json 2>&1 | tail -16 ;;
    # the trainer, 4 OPSD + 4 GRPO steps at 1.7B shapes, no profile (steps 2-4 steady)
    train44) timeout 240 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 4 --grpo-steps 4 --out /tmp/pg-train44 --json $OUT/train_44.json 2>&1 | grep -E "step [0-9]|memory plan|judge totals" | cut -c1-420 ;;
    # the local judge of one GRPO step (new plans every call): shared-prefix attention + 2 plans at once (the default), the
    # same one plan at a time, and the path before both (the prefix K/V copied per row, one plan at a time)
    judgeab) for v in new:2: shared1:1: copy1:1:copy; do IFS=: read -r tag conc att <<< "$v"
        PAPERGYM_JUDGE_ATTENTION=$att timeout 150 node scripts/bench/judge_host.mjs --device cuda --shape qwen3-1.7b --repeat 2 --fresh-plans --plan-concurrency $conc --json $OUT/judge_ab_$tag.json 2>&1 | grep -E "^\| (native|total|host|score)|prefixLogprobs: prefix" | tr '\n' ' ' | sed "s/^/$tag: /"; echo; done ;;
    # the GPU suite's adapter-state file only (EMA, snapshot files, the pinned captures of checkpoints)
    statetest) npx mocha --no-config --timeout 600000 dist/test/gpu/adapter-state.test.js 2>&1 | tee $OUT/gpu-state-tests.log | tail -12 ;;
    # checkpoints off the critical path (issue 36): the trainer at 1.7B with a checkpoint after every step, written
    # beside the next step (the default) and in the step (--no-checkpoint-background), same run otherwise
    ck17) for bg in ${CK_MODES:-on off}; do f=; [ $bg = off ] && f=--no-checkpoint-background
        timeout 280 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 3 --grpo-steps 3 --out /tmp/pg-ck17-$bg --extra="--checkpoint-every 1 $f" --json $OUT/train_ck17_$bg.json 2>&1 | grep -E "step [0-9]|memory plan" | cut -c1-300 | sed "s/^/bg=$bg: /"
        cp /tmp/pg-ck17-$bg/metrics.jsonl $OUT/ck17_${bg}_metrics.jsonl 2>/dev/null; done ;;
    # the trainer at 1.7B / 4B / 8B shapes: 3 OPSD + 3 GRPO steps, a checkpoint after every step (beside the next one), the
    # third step of each stage under the kernel profiler (<run>/profile/*.json copied to $OUT)
    prof17|prof4|prof8) sh=${step#prof}; [ $sh = 17 ] && sh=1.7; lim=540; [ $step = prof17 ] && lim=300
      timeout $lim node scripts/bench/memplan.mjs --shape qwen3-${sh}b --opsd-steps 3 --grpo-steps 3 --out /tmp/pg-$step --extra="--checkpoint-every 1 --profile-step 3" --json $OUT/train_$step.json 2>&1 | grep -E "step [0-9]|memory plan|judge totals" | cut -c1-400
      keep_profiled_run $step ;;
    # issue 36 round 2: the kernels changed (RoPE pairs, LoRA dropout in the fused node) against the ATen / per-module paths, and the live-KV attention
    kernels36) timeout 300 npx mocha --config .mocharc.gpu.json --grep "own kernels on a model|LoRA dropout in the fused|live-KV attention|inference fusions" 2>&1 | tee $OUT/gpu-kernels36.log | grep -vE "^\s*$" | tail -30 ;;
    # the trainer at 1.7B, 2 OPSD + 2 GRPO steps, LoRA dropout per module (0) and in the fused node (1, the default): same run otherwise
    ab17) for f in 0 1; do PAPERGYM_FUSED_LORA_DROPOUT=$f timeout 200 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 2 --grpo-steps 2 --out /tmp/pg-ab17-$f --json $OUT/train_ab17_$f.json 2>&1 | grep -E "step [0-9]|memory plan" | cut -c1-300 | sed "s/^/fused=$f: /"
        cp /tmp/pg-ab17-$f/metrics.jsonl $OUT/ab17_${f}_metrics.jsonl 2>/dev/null; done ;;
    # decode at GRPO's shape (64 rows = 8 prompts × n 8) and OPSD's (32 distinct prompts), merged adapter r 64, top-k 20, 1024 new tokens, prompts of 512
    gengroup) timeout 200 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 64 --group 8 --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --adapter-mode merged --no-ref --json $OUT/generate_group8.json 2>&1 | grep -E "^[0-9]" | sed "s/^/group8: /"
      timeout 200 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 1,32,64 --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --adapter-mode merged --no-ref --json $OUT/generate_distinct.json 2>&1 | grep -E "^[0-9]" | sed "s/^/distinct: /" ;;
    # the decode GEMMs with TORCH_BLAS_PREFER_CUBLASLT=1 against ATen's default (two processes, one per setting), merged adapter, 32 / 64 rows
    genblas) for v in 0 1; do TORCH_BLAS_PREFER_CUBLASLT=$v timeout 150 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 32,64 --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --adapter-mode merged --no-ref --json $OUT/generate_blaslt$v.json 2>&1 | grep -E "^[0-9]" | sed "s/^/cublaslt=$v: /"; done ;;
    # 1.7B, 3 GRPO steps (no periodic checkpoints), the third kernel-profiled, the trainer's whole log kept (train.log)
    prof17g) timeout 240 node scripts/bench/memplan.mjs --shape qwen3-1.7b --opsd-steps 0 --grpo-steps 3 --out /tmp/pg-prof17g --extra="--profile-step 3" --json $OUT/train_prof17g.json 2>&1 | grep -E "step [0-9]|judge totals" | cut -c1-400
      keep_profiled_run prof17g ;;
    # the machine itself: clocks, power cap, and what torch reaches (copy bandwidth of 4 GiB, a bf16 8192³ matmul), to compare calls and sessions
    hw) nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,utilization.gpu --format=csv 2>&1 | tail -2
      python3 -c "
import torch, time
x = torch.empty(2 * 1024**3, dtype=torch.bfloat16, device='cuda'); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(20): y.copy_(x)
torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 20
print(f'copy: {2 * x.numel() * 2 / dt / 1e12:.2f} TB/s (read + write)')
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device='cuda'); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(20): a @ b
torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 20
print(f'matmul bf16 8192^3: {2 * 8192**3 / dt / 1e12:.0f} TFLOP/s')
" 2>&1 | tee $OUT/hw.txt ;;
    # issue 36 round 4: the GPU tests of the group prompt kernel and the fused judge merge, with the decode / judge tests they touch
    newtests) timeout 400 npx mocha --config .mocharc.gpu.json --grep "group prompt kernel|fused merge|live-KV attention|prefixLogprobs" 2>&1 | tee $OUT/gpu-newtests.log | grep -vE "^\s*$" | tail -40 ;;
    # the two new tests alone (the group prompt kernel, the fused merge)
    grouptests) timeout 300 npx mocha --config .mocharc.gpu.json --grep "group prompt kernel|fused merge" 2>&1 | tee $OUT/gpu-grouptests.log | grep -vE "^\s*$" | tail -30 ;;
    # decode at GRPO's shape (64 rows = 8 prompts x n 8, prompts of 512 and 256, 1024 new tokens) with the group prompt kernel off (0) and on (1)
    groupab) for pl in 512 256; do for g in 0 1; do PAPERGYM_DECODE_GROUP_PROMPT=$g timeout 150 node scripts/bench/generate.mjs --device cuda --shape qwen3-1.7b --dtype bf16 --batches 64 --group 8 --prompt-len $pl --new-tokens 1024 --lora 64 --lora-bf16 --top-k 20 --adapter-mode merged --no-ref --json $OUT/generate_group8_p${pl}_g$g.json 2>&1 | grep -E "^[0-9]" | sed "s/^/prompt=$pl groupkernel=$g: /"; done; done ;;
    # the local judge of one GRPO step (new plans every call) with the ATen merge (0) and the fused merge (1)
    mergeab) for f in 0 1; do PAPERGYM_FUSED_PREFIX_MERGE=$f timeout 150 node scripts/bench/judge_host.mjs --device cuda --shape qwen3-1.7b --repeat 2 --fresh-plans --json $OUT/judge_merge$f.json 2>&1 | grep -E "^\| (native|total|host|score)|prefixLogprobs: prefix" | tr '\n' ' ' | sed "s/^/merge=$f: /"; echo; done ;;
    # the trainer at the 4B / 8B shape, 2 OPSD + 2 GRPO steps, no profile (the second step of each stage steady)
    train4x2|train8x2) sh=${step#train}; sh=${sh%x2}; timeout 470 node scripts/bench/memplan.mjs --shape qwen3-${sh}b --opsd-steps 2 --grpo-steps 2 --out /tmp/pg-$step --json $OUT/train_${sh}b_x2.json 2>&1 | grep -E "step [0-9]|memory plan|judge totals" | cut -c1-420 ;;
    *) echo "unknown step $step" ;;
  esac
done
