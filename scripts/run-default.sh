#!/usr/bin/env bash
# The main job on its embedded default (CPU): builds packserve and runs it on bundled data.
# Until the engine can serve (issues 4 and 5), the main job is the attention engine's
# verification on a bundled mixed batch (shared 2-level prefix, decode rows, a chunked
# prefill), followed by a replay of a bundled slice of a real trace in the simulator.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" --target packserve
bin="$build_dir/src/packserve/cli/packserve"
for policy in naive balanced prefix; do
  "$bin" attention verify --batch data/batches/default.json --policy "$policy"
done
if [ -f data/traces/mooncake_slice.jsonl ]; then
  "$bin" simulate --trace data/traces/mooncake_slice.jsonl
fi
