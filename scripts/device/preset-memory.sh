#!/usr/bin/env bash
# GPU memory per preset (docs/gpu-quickstart.md): a random-weight Qwen3 of the preset's real shape
# (scripts/make_random_qwen3.py; memory does not depend on the weights' values), one OPSD and one
# GRPO step with the preset's settings (batch sizes, G, 1024 new tokens, local judge), then the
# peak allocated GiB per phase from metrics.jsonl and the run's report (report.html + plots).
# Usage: bash scripts/device/preset-memory.sh qwen3-1.7b|qwen3-4b|qwen3-8b OUT_DIR
set -euo pipefail
shape=$1; out=$2
model=/tmp/random-$shape
[ -f "$model/config.json" ] || python3 scripts/make_random_qwen3.py --shape "$shape" --out "$model" --dtype bfloat16 --device cuda
run="$out/preset-$shape"
rm -rf "$run"
node dist/bin/papergym-native.js train --preset "$shape" --model "$model" --opsd-steps 1 --grpo-steps 1 \
  --validate-every 0 --checkpoint-every 0 --out "$run" 2>&1 | tail -8
node -e '
const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse).filter((r) => r.memory);
const gib = (b) => (b / 2 ** 30).toFixed(2);
for (const r of rows) console.log(r.stage, Object.entries(r.memory).map(([k, v]) => `${k} ${gib(v)} GiB`).join(", "), "| phase s", JSON.stringify(r.phaseSeconds));
' "$run/metrics.jsonl" | tee "$out/preset-$shape-memory.txt"
