#!/usr/bin/env bash
# Builds the CPU code with AddressSanitizer (leaks included) and UndefinedBehaviorSanitizer in
# build-asan/ (no CUDA, no benchmarks; -O1) and runs every CPU test under them. Any report fails
# the test that made it (UBSan halts, ASan aborts). Not part of .ci/run: the second build takes
# about 11 minutes on 2 cores (README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build_dir=${BUILD_DIR:-build-asan}
flags="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPACKSERVE_CUDA=OFF \
  -DPACKSERVE_BENCH=OFF -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$build_dir"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$build_dir" -LE gpu --output-on-failure -j "$(nproc)" --timeout 900
