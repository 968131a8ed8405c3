#!/usr/bin/env bash
# Builds everything (CUDA code too when nvcc is present, warnings as errors) and runs every
# CPU test. GPU tests (label gpu) run with scripts/gpu-check.sh on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPACKSERVE_WERROR=ON
cmake --build "$build_dir"
ctest --test-dir "$build_dir" -LE gpu --output-on-failure -j "$(nproc)"
