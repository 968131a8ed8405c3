#!/usr/bin/env bash
# e2e.sh: `packserve serve --dummy-model tiny` on loopback, driven by the official OpenAI
# client from the npm registry (issue 5 "Tests"):
#   e2e.mjs   completions and chat, streaming and not (tool calls too, through the SDK's
#             stream accumulator), usage counts against `packserve
#             tokenize`, stop strings against the greedy text, a client that aborts a stream
#             (then /metrics shows KV pages back to baseline), every error case with status and
#             error type, malformed bodies over HTTP (all 4xx), 429 on a full queue, 503 while
#             draining, exit 0 after SIGTERM.
#   load.mjs  64 concurrent streaming clients, 500 requests: zero failures, every stream
#             well-formed, no page leak, /health 200 after.
#   tests/server/e2e.sh PACKSERVE_BINARY WORK_DIR
# WORK_DIR (a build folder) receives the npm package, the dummy model cache and server logs.
# Never passes silently: a missing tool, a failed install or a server that does not come up
# is a failure with its reason.
set -euo pipefail

readonly OPENAI_VERSION="6.30.1"

if [ $# -lt 2 ]; then
  echo "usage: $0 PACKSERVE_BINARY WORK_DIR" >&2
  exit 2
fi
packserve="$1"
work="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

fail() {
  echo "server e2e: FAILED: $*" >&2
  exit 1
}

[ -x "$packserve" ] || fail "packserve binary not found at '$packserve' (build the packserve target)"
packserve="$(cd "$(dirname "$packserve")" && pwd)/$(basename "$packserve")"
command -v node >/dev/null 2>&1 || fail "node not found on PATH; install Node.js >= 20 (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || fail "npm not found on PATH; this test installs the openai client from the npm registry"
"$packserve" serve --help >/dev/null 2>&1 || fail "'$packserve serve' is not available (was packserve built with the server and engine libraries?)"

mkdir -p "$work"
work="$(cd "$work" && pwd)"
if [ "$(node -e "try{console.log(require('$work/node_modules/openai/package.json').version)}catch(e){}")" != "$OPENAI_VERSION" ]; then
  echo "server e2e: npm install openai@$OPENAI_VERSION into $work"
  [ -f "$work/package.json" ] || echo '{"private": true}' > "$work/package.json"
  if ! npm install --prefix "$work" --no-audit --no-fund --loglevel=error \
      "openai@$OPENAI_VERSION" >"$work/npm-install.log" 2>&1; then
    cat "$work/npm-install.log" >&2
    fail "npm install failed (is the npm registry reachable?); log above"
  fi
fi

export XDG_CACHE_HOME="$work/cache"
free_port() { node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# start_server NAME PORT ARGS...: starts a server (pid in $server_pid), waits for /health 200;
# fails when it exits or is not healthy in time.
server_pid=""
start_server() {
  local name="$1" port="$2"
  shift 2
  "$packserve" --log-level info serve --dummy-model tiny --port "$port" "$@" \
    >"$work/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  server_pid="$pid"
  for _ in $(seq 1 600); do
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$work/$name.log" >&2
      fail "server '$name' exited during start-up (log above)"
    fi
    if node -e "fetch('http://127.0.0.1:$port/health').then(r=>process.exit(r.status===200?0:1)).catch(()=>process.exit(1))"; then
      return 0
    fi
    sleep 0.5
  done
  cat "$work/$name.log" >&2
  fail "server '$name' not healthy after 300 s"
}

main_port="$(free_port)"
start_server main "$main_port" --api-key e2e-key --max-model-len 512 \
  --max-body-bytes 65536 --num-pages 1024
main_pid="$server_pid"
small_port="$(free_port)"
start_server small "$small_port" --max-waiting 1 --max-num-running-requests 1 \
  --max-model-len 4096 --drain-grace-s "${E2E_DRAIN_GRACE_S:-20}"
small_pid="$server_pid"
tokdir="$XDG_CACHE_HOME/packserve/dummy-models/tiny-seed0-bf16"
[ -f "$tokdir/tokenizer.json" ] || tokdir="$(dirname "$(find "$XDG_CACHE_HOME" -name tokenizer.json | head -1)")"
[ -f "$tokdir/tokenizer.json" ] || fail "no tokenizer.json under $XDG_CACHE_HOME after the dummy model was made"

# ES modules resolve packages next to the importing file: run copies from WORK_DIR.
cp "$here/common.mjs" "$here/e2e.mjs" "$here/load.mjs" "$work/"
cd "$work"
if ! node "$work/e2e.mjs" --packserve "$packserve" --tokenizer "$tokdir" \
    --url "http://127.0.0.1:$main_port" --api-key e2e-key \
    --small-url "http://127.0.0.1:$small_port" --small-pid "$small_pid"; then
  tail -n 30 "$work/main.log" >&2
  tail -n 30 "$work/small.log" >&2
  fail "e2e.mjs failed (logs in $work)"
fi
# e2e.mjs sent SIGTERM to the small server while a stream ran: it must exit 0.
small_rc=0
wait "$small_pid" || small_rc=$?
[ "$small_rc" -eq 0 ] || fail "the small server exited with $small_rc after SIGTERM (log: $work/small.log)"

if ! node "$work/load.mjs" --url "http://127.0.0.1:$main_port" --api-key e2e-key \
    --clients 64 --requests 500; then
  tail -n 50 "$work/main.log" >&2
  fail "load.mjs failed (log in $work/main.log)"
fi

kill -TERM "$main_pid"
main_rc=0
wait "$main_pid" || main_rc=$?
[ "$main_rc" -eq 0 ] || fail "the main server exited with $main_rc after SIGTERM (log: $work/main.log)"
echo "server e2e: OK"
