#!/usr/bin/env bash
# The main job on its embedded default (CPU; issue 5 "Main job on its embedded default";
# docs/bench.md): builds packserve, makes the tiny dummy model, serves it on a free loopback
# port, replays a bundled slice of the Mooncake conversation trace with `packserve bench`,
# prints the summary and writes result.json and the plots to out/default/, then stops the
# server.
#
# The slice is sized for a couple of minutes on 2 cores: the first WINDOW_S (20) seconds of the
# trace at TIME_SCALE (2: half the arrival rate), prompts capped at their first
# MAX_INPUT_TOKENS (1024: two 512-token hash blocks, so the trace's shared first block still
# hits the prefix cache) and outputs at MAX_OUTPUT_TOKENS (64). Each is an environment variable.
#
# `scripts/run-default.sh --attention` runs the previous default instead: the attention
# engine's verification on a bundled batch and a simulator replay of the trace slice.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" --target packserve
bin="$build_dir/src/packserve/cli/packserve"

# Until `packserve serve` is part of the build, the previous default is what can run.
if [ "${1:-}" = "--attention" ] || ! "$bin" serve --help >/dev/null 2>&1; then
  if [ "${1:-}" != "--attention" ]; then
    echo "run-default: this build has no 'packserve serve'; running the attention job" >&2
  fi
  for policy in naive balanced prefix; do
    "$bin" attention verify --batch data/batches/default.json --policy "$policy"
  done
  "$bin" simulate --trace data/traces/mooncake_slice.jsonl
  exit 0
fi

out=${OUT_DIR:-out/default}
mkdir -p "$out"
"$bin" make-dummy-model --arch tiny --out "$out/model" >/dev/null

# GET $1 on 127.0.0.1:$port with bash's /dev/tcp; prints the status code (nothing when closed).
http_status() {
  local code=""
  if { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&3
    read -r -t 5 _ code _ <&3 || true
    exec 3<&- 3>&-
  fi
  echo "$code"
}

server_pid=""
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap stop_server EXIT

# A free loopback port: start at a random one and move on while something answers there or
# the server cannot bind it.
port=$((20000 + RANDOM % 20000))
for attempt in 1 2 3 4 5 6 7 8; do
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
  "$bin" serve --model "$out/model" --host 127.0.0.1 --port "$port" >"$out/server.log" 2>&1 &
  server_pid=$!
  ready=""
  for _ in $(seq 1 600); do
    if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    if [ "$(http_status /health)" = "200" ]; then ready=1; break; fi
    sleep 0.1
  done
  if [ -n "$ready" ]; then break; fi
  stop_server
  server_pid=""
  if [ "$attempt" = 8 ]; then
    echo "error: packserve serve did not become healthy; its log:" >&2
    cat "$out/server.log" >&2
    exit 1
  fi
  port=$((port + 1))
done
echo "run-default: serving $out/model on 127.0.0.1:$port (log: $out/server.log)" >&2

"$bin" bench --trace data/traces/mooncake_slice.jsonl --url "http://127.0.0.1:$port" \
  --model "$out/model" --duration-s "${WINDOW_S:-20}" --time-scale "${TIME_SCALE:-2}" \
  --max-input-tokens "${MAX_INPUT_TOKENS:-1024}" --max-output-tokens "${MAX_OUTPUT_TOKENS:-64}" \
  --slo-ttft-ms "${SLO_TTFT_MS:-5000}" --slo-tpot-ms "${SLO_TPOT_MS:-200}" --out "$out"
stop_server
server_pid=""
echo "run-default: plots and result.json in $out/" >&2
