#!/usr/bin/env bash
# scripts/sanitize-check.sh [address|thread]: builds the CPU code with sanitizers (no CUDA, no
# benchmarks; -O1) and runs every CPU test under them; any report fails the test that made it.
#   address (default): AddressSanitizer (leaks too) + UndefinedBehaviorSanitizer, in build-asan/
#   thread: ThreadSanitizer, in build-tsan/, with scripts/tsan.supp (OpenBLAS and cpp-httplib
#           are not instrumented) and a longer drain grace for the server e2e test (the
#           generation it waits for runs about ten times slower)
# Not part of .ci/run: each is a second build of about 11 minutes on 2 cores (README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
mode=${1:-address}
case "$mode" in
  address)
    build_dir=${BUILD_DIR:-build-asan}
    flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    ;;
  thread)
    build_dir=${BUILD_DIR:-build-tsan}
    flags="-fsanitize=thread"
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"
    export E2E_DRAIN_GRACE_S=180
    ;;
  *)
    echo "usage: scripts/sanitize-check.sh [address|thread]" >&2
    exit 2
    ;;
esac
link="${flags%% *}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPACKSERVE_CUDA=OFF \
  -DPACKSERVE_BENCH=OFF -DCMAKE_CXX_FLAGS="-O1 $flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$link" -DCMAKE_SHARED_LINKER_FLAGS="$link"
cmake --build "$build_dir"
ctest --test-dir "$build_dir" -LE gpu --output-on-failure -j "$(nproc)" --timeout 900
