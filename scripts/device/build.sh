#!/usr/bin/env bash
# On the GPU machine (device tool), from the repo root: set up Node + CUDA libtorch (shared/device/env.sh),
# unpack the carried bundle, build the addon against the image's CUDA libtorch, print doctor.
set -eo pipefail
for e in ../shared/device/env.sh shared/device/env.sh .device/env/env.sh; do [ -f "$e" ] && { source "$e"; break; }; done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16}
t0=$(date +%s)
npx cmake-js compile --log-level warn 2>&1 | grep -vE "^\s*$" | tail -30
echo "addon build: $(( $(date +%s) - t0 )) s"
node dist/bin/papergym-native.js doctor
