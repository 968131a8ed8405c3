#!/usr/bin/env bash
# gpu-serve-check.sh: `--backend cuda` end to end on a GPU machine (issues 4 and 5;
# docs/forward-cuda.md "Serving with it"). Run from the repository root.
#
# Here (the build machine), after building the CUDA targets:
#   cmake -S . -B build-cuda -G Ninja -DPACKSERVE_CUDA=ON -DPACKSERVE_WERROR=ON
#   ninja -C build-cuda packserve backend_factory_gpu_test
#   scripts/gpu-serve-check.sh --pack build-cuda   # -> build-gpu-serve/carry.tar.xz (~17 MB)
# On the GPU machine (carry build-gpu-serve), one step per call (each well under 10 min):
#   scripts/gpu-serve-check.sh generate   # backend_factory_gpu_test; generate on a dummy
#                                         # qwen3-0.6b with --backend cuda and cpu, tokens compared
#   scripts/gpu-serve-check.sh make8b     # the llama-3.1-8b dummy checkpoint (16 GB, bf16)
#   scripts/gpu-serve-check.sh serve      # serve it with --backend cuda, `packserve bench` against it
#   scripts/gpu-serve-check.sh makemodel  # the ARCH dummy (default qwen3-8b) with the real Qwen3
#                                         # tokenizer, copied beforehand into
#                                         # build-gpu-serve/qwen3-tokenizer (skipped when present);
#                                         # makeqwen8b = ARCH=qwen3-8b makemodel
#   TRACE=... scripts/gpu-serve-check.sh matrix  # 3 request rates x (defaults, prefix caching
#                                                # off, naive attention; VARIANTS=prefixattn:
#                                                # the prefix attention policy, hostsample:
#                                                # --no-backend-sampling, nowait:
#                                                # --prefix-wait-min-tokens 0, autoattn /
#                                                # balancedattn: --attention-policy auto / balanced,
#                                                # shapetune / buckettune: --gemm-tuning shape /
#                                                # bucket, eager / graph64: --max-graph-rows 0 /
#                                                # 64)
#   scripts/gpu-serve-check.sh sharedtrace       # $DIR/shared_prefix.jsonl: N requests reading
#                                                # one long shared prompt, or one of G (for TRACE=)
#   scripts/gpu-serve-check.sh choices           # one request of n choices of a long prompt
#                                                # (scripts/choices_bench.py) per variant
#   scripts/gpu-serve-check.sh structured        # generate with and without a constraint
#                                                # (JSON object / schemas / regex), masks on the
#                                                # GPU or rows drawn on the host
#   scripts/gpu-serve-check.sh tools             # serve the qwen3-0.6b dummy with the Qwen3
#                                                # tokenizer; scripts/tool-calls-bench.py by
#                                                # tool_choice, TOOLS_CONCURRENCY (64) at once
# Env: OUT (default ./out), BENCH_DURATION_S (30), BENCH_TIME_SCALE (1), MAX_INPUT_TOKENS (2048),
# serve: BENCH_FLAGS (extra bench flags), RUN_NAME (bench: the results' name under $OUT),
# MAX_OUTPUT_TOKENS (128), GPU_MEMORY_UTILIZATION (0.9), PORT (8000); matrix: ARCH (qwen3-8b),
# MAX_BATCHED_TOKENS (2048, the server's --max-num-batched-tokens),
# TIME_SCALES ("2 1 0.5"), VARIANTS ("default noprefix naive"), ABLATE_SCALES (mid: the
# ablations at the middle scale only; all: at every scale), BENCH_FLAGS (extra bench flags),
# ROUNDS (1: each run once; N: N rounds of every run, names suffixed _r1.._rN);
# sharedtrace: SHARED_REQUESTS (256), SHARED_TOKENS (4096), UNIQUE_TOKENS (128), OUTPUT_TOKENS
# (128), SHARED_GROUPS (1: shared prompts, each read by REQUESTS/GROUPS consecutive requests),
# SHARED_LEAD_MS (1000: request 0's head start), SHARED_SPREAD_MS (1000: the others' arrivals);
# both 0: one burst.
# The dummy checkpoints live in build-gpu-serve/cache (kept between calls on a warm machine).
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=build-gpu-serve
PACK=$DIR/carry.tar.xz

if [[ "${1:-}" == "--pack" ]]; then
  set -e
  BUILD=${2:-build-cuda}
  tmp=$(mktemp -d)
  mkdir -p "$tmp/lib" "$DIR"
  for b in packserve backend_factory_gpu_test; do
    f=$(find "$BUILD" -name $b -type f -perm -u+x | head -1)
    [[ -n "$f" ]] || { echo "no $b under $BUILD: build it first" >&2; exit 1; }
    cp "$f" "$tmp/" && strip "$tmp/$b"
    # Non-system libraries travel; cuBLAS (600 MB) is the device's own (/usr/local/cuda/lib64).
    ldd "$tmp/$b" | awk '/=> \//{print $3}' |
      grep -v -E '/lib/x86_64-linux-gnu/lib(c|m|gcc_s|stdc\+\+|pthread|dl|rt)\.so|libcublas' |
      while read -r lib; do cp -L "$lib" "$tmp/lib/"; done
  done
  tar -cJf "$PACK" -C "$tmp" .
  rm -rf "$tmp"
  du -h "$PACK"
  exit 0
fi

STEP=${1:-generate}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
[[ -f $PACK ]] || { echo "$PACK missing: run --pack on the build machine and carry $DIR" >&2; exit 1; }
BIN=$PWD/$DIR/bin
if [[ ! -x $BIN/packserve || $PACK -nt $BIN/packserve ]]; then
  rm -rf "$BIN" && mkdir -p "$BIN" && tar -xJf "$PACK" -C "$BIN"
fi
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export XDG_CACHE_HOME=$PWD/$DIR/cache
PS="$BIN/packserve --log-level info"

# variant_flags VARIANT: the server flags of a named variant into the array `flags`.
variant_flags() {
  case $1 in
    default) flags=() ;;
    noprefix) flags=(--no-prefix-caching) ;;
    naive) flags=(--attention-policy naive) ;;
    prefixattn) flags=(--attention-policy prefix) ;;
    hostsample) flags=(--no-backend-sampling) ;;
    nowait) flags=(--prefix-wait-min-tokens 0) ;;
    autoattn) flags=(--attention-policy auto) ;;
    balancedattn) flags=(--attention-policy balanced) ;;
    shapetune) flags=(--gemm-tuning shape) ;;
    buckettune) flags=(--gemm-tuning bucket) ;;
    eager) flags=(--max-graph-rows 0) ;;
    graph64) flags=(--max-graph-rows 64) ;;
    *) echo "unknown variant '$1': expected default, noprefix, naive, prefixattn, autoattn, balancedattn, hostsample, nowait, shapetune, buckettune, eager or graph64" >&2; exit 2 ;;
  esac
}

# start_server NAME MODEL FLAGS...: serves MODEL on $PORT with --backend cuda (log
# $OUT/serve_NAME.log, pid in $server); returns 0 once ready, 1 (with the log's tail) if not.
start_server() {
  local name=$1 model=$2; shift 2
  $PS serve --model "$model" --backend cuda --gpu-memory-utilization "${GPU_MEMORY_UTILIZATION:-0.9}" \
    --port "$PORT" --max-num-batched-tokens "${MAX_BATCHED_TOKENS:-2048}" "$@" >"$OUT/serve_$name.log" 2>&1 &
  server=$!
  for _ in $(seq 300); do
    grep -q "packserve serve: ready" "$OUT/serve_$name.log" && return 0
    kill -0 $server 2>/dev/null || break
    sleep 1
  done
  echo "$name: server not ready"; tail -5 "$OUT/serve_$name.log"
  return 1
}
PORT=${PORT:-8000}
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader

case $STEP in
generate)
  timeout 300 "$BIN/backend_factory_gpu_test" 2>&1 | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) "
  printf '%s\n' '{"prompt": "The capital of France is"}' '{"prompt": "def fibonacci(n):"}' \
    '{"prompt": "Once upon a time"}' '{"prompt_ids": [1, 2, 3, 4, 5, 6, 7, 8]}' >"$OUT/prompts.jsonl"
  for backend in cuda cpu; do
    start=$SECONDS
    timeout 300 $PS generate --dummy-model qwen3-0.6b \
      --prompts "$OUT/prompts.jsonl" --max-tokens 32 --temperature 0 --ignore-eos \
      --backend $backend --threads 8 >"$OUT/generate_$backend.jsonl" 2>"$OUT/generate_$backend.log"
    echo "generate --backend $backend: exit $? after $((SECONDS - start)) s (model made once)"
    grep -E "backend (cuda|cpu)|generate:|error" "$OUT/generate_$backend.log"
  done
  python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
rows = {b: [json.loads(l) for l in open(f"{out}/generate_{b}.jsonl")] for b in ("cuda", "cpu")}
for c, p in zip(rows["cuda"], rows["cpu"]):
    a, b = c["token_ids"], p["token_ids"]
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    print(f"prompt {c['index']}: cuda vs cpu greedy tokens agree on the first {same} of {len(a)}")
EOF
  ;;
make8b)
  start=$SECONDS
  $PS make-dummy-model --arch llama-3.1-8b --out "$DIR/llama-3.1-8b"
  echo "make-dummy-model llama-3.1-8b: exit $? after $((SECONDS - start)) s"
  ;;
serve)
  MODEL=$DIR/llama-3.1-8b
  [[ -f $MODEL/config.json ]] || { echo "$MODEL missing: run the make8b step first" >&2; exit 1; }
  $PS serve --model "$MODEL" --backend cuda \
    --gpu-memory-utilization "${GPU_MEMORY_UTILIZATION:-0.9}" --port "$PORT" \
    --max-num-batched-tokens 2048 >"$OUT/serve_${RUN_NAME:-bench}.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 300); do
    grep -q "packserve serve: ready" "$OUT/serve_${RUN_NAME:-bench}.log" && break
    kill -0 $SERVER 2>/dev/null || break
    sleep 1
  done
  grep -E "backend cuda|ready|error" "$OUT/serve_${RUN_NAME:-bench}.log"
  if ! grep -q "packserve serve: ready" "$OUT/serve_${RUN_NAME:-bench}.log"; then
    echo "server not ready"; tail -20 "$OUT/serve_${RUN_NAME:-bench}.log"; kill $SERVER 2>/dev/null; exit 1
  fi
  timeout 400 $PS bench --trace data/traces/mooncake_slice.jsonl --url "http://127.0.0.1:$PORT" \
    --dummy-model llama-3.1-8b --duration-s "${BENCH_DURATION_S:-30}" \
    --time-scale "${BENCH_TIME_SCALE:-1}" --max-input-tokens "${MAX_INPUT_TOKENS:-2048}" \
    --max-output-tokens "${MAX_OUTPUT_TOKENS:-128}" ${BENCH_FLAGS:-} --out "$OUT/${RUN_NAME:-bench}" \
    2>"$OUT/${RUN_NAME:-bench}.log"
  echo "bench: exit $?"
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
  kill -INT $SERVER
  wait $SERVER
  echo "serve: exit $?"
  ;;
makeqwen8b | makemodel)
  # ARCH shapes with the real Qwen3 tokenizer (carried in $DIR/qwen3-tokenizer), so every
  # sampled id decodes to text and the streamed chunks time each token. The vocabulary is
  # max(the arch's, the tokenizer's): 151,669 for llama-3.1-8b.
  [[ $STEP == makeqwen8b ]] && ARCH=qwen3-8b
  ARCH=${ARCH:-qwen3-8b}
  if [[ -f $DIR/$ARCH/config.json ]]; then
    echo "make-dummy-model $ARCH: already there"
  else
    start=$SECONDS
    $PS make-dummy-model --arch "$ARCH" --tokenizer "$DIR/qwen3-tokenizer" --out "$DIR/$ARCH"
    echo "make-dummy-model $ARCH: exit $? after $((SECONDS - start)) s"
  fi
  ;;
matrix)
  # Issue 5's benchmark on one trace (TRACE, default the bundled Mooncake slice): request
  # rates TIME_SCALES, each with the defaults (VARIANTS default), prefix caching off
  # (noprefix) and the naive attention policy (naive); the ablations at the middle rate only
  # unless ABLATE_SCALES=all. One fresh server per run (no prefix cache carried between runs);
  # results in $OUT/<trace>_<variant>_scale<S>/, the engine's /metrics step times in
  # $OUT/<run>.metrics.
  ARCH=${ARCH:-qwen3-8b}
  MODEL=$DIR/$ARCH
  [[ -f $MODEL/config.json ]] || { echo "$MODEL missing: run the makemodel step first" >&2; exit 1; }
  TRACE=${TRACE:-data/traces/mooncake_slice.jsonl}
  tag=$(basename "$TRACE" | sed -E 's/_.*//')
  read -r -a SCALES <<<"${TIME_SCALES:-2 1 0.5}"
  read -r -a RUN_VARIANTS <<<"${VARIANTS:-default noprefix naive}"
  run_variant() {  # name, time scale, server flags...
    local name=$1 scale=$2; shift 2
    if start_server "$name" "$MODEL" "$@"; then
      timeout 300 $PS bench --trace "$TRACE" --url "http://127.0.0.1:$PORT" --tokenizer "$MODEL" \
        --duration-s "${BENCH_DURATION_S:-30}" --time-scale "$scale" \
        --max-input-tokens "${MAX_INPUT_TOKENS:-2048}" --max-output-tokens "${MAX_OUTPUT_TOKENS:-128}" ${BENCH_FLAGS:-} \
        --out "$OUT/$name" >"$OUT/$name.txt" 2>"$OUT/bench_$name.log"
      echo "$name: bench exit $?"
      python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
        "http://127.0.0.1:$PORT/metrics" | grep -E '^packserve_(engine_|prefix_cache_hit_rate)' >"$OUT/$name.metrics"
    fi
    kill -INT $server 2>/dev/null; wait $server
  }
  mid=${SCALES[1]:-${SCALES[0]}}
  rounds=${ROUNDS:-1}
  for ((round = 1; round <= rounds; ++round)); do
    suffix=""
    ((rounds > 1)) && suffix="_r$round"
    for variant in "${RUN_VARIANTS[@]}"; do
      variant_flags "$variant"
      for scale in "${SCALES[@]}"; do
        if [[ $variant != default && ${ABLATE_SCALES:-mid} != all && $scale != "$mid" ]]; then continue; fi
        run_variant "${tag}_${variant}_scale$scale$suffix" "$scale" "${flags[@]}"
      done
    done
  done
  python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def fmt(v): return "-" if v is None else f"{v:.2f}"  # goodput needs --slo-* flags
def step_times(name):
    m = {}
    try:
        for line in open(os.path.join(out, name + ".metrics")):
            k, v = line.split()
            m[k] = float(v)
    except OSError:
        return "- | - | -"
    s = m.get("packserve_engine_step_seconds_total", 0.0)
    f = m.get("packserve_engine_forward_seconds_total", 0.0)
    p = m.get("packserve_engine_sample_seconds_total", 0.0)
    n = m.get("packserve_engine_steps_total", 0.0)
    h = m.get("packserve_prefix_cache_hit_rate")
    hit = "-" if h is None else f"{h:.2f}"
    c = m.get("packserve_engine_graph_captures_total", 0.0)
    r = m.get("packserve_engine_graph_replays_total", 0.0)
    cs = m.get("packserve_engine_graph_capture_seconds_total", 0.0)
    return (f"{s:.1f} / {f:.1f} / {p:.1f} / {1000 * s / max(n, 1):.1f} | {hit} | "
            f"{c:.0f} / {r:.0f} / {cs:.2f}")
print("| run | done/failed | req/s | out tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | TBT p99 ms | goodput req/s | engine s: steps / forward / sample, ms per step | prefix cache hit rate | graphs captured / replayed, capture s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for name in sorted(os.listdir(out)):
    p = os.path.join(out, name, "result.json")
    if not os.path.exists(p): continue
    r = json.load(open(p))
    print(f"| {name} | {r['completed']}/{r['failed']} | {r['request_throughput']:.2f} | {r['output_throughput']:.0f} | "
          f"{r['median_ttft_ms']:.0f} / {r['p99_ttft_ms']:.0f} | {r['median_tpot_ms']:.1f} / {r['p99_tpot_ms']:.1f} | "
          f"{r['p99_itl_ms']:.0f} | {fmt(r.get('request_goodput'))} | {step_times(name)} |")
EOF
  ;;
tools)
  # tool_choice's cost (docs/benchmarks.md "Tool calls"): chat requests with six tools against
  # the qwen3-0.6b dummy of the structured step, TOOLS_CONCURRENCY (64) at a time,
  # TOOLS_TOKENS (128) output tokens, TOOLS_ROUNDS (3) warm rounds per tool_choice.
  MODEL=$DIR/cache/qwen3-0.6b-qwen3tok
  if [[ ! -f $MODEL/config.json ]]; then
    [[ -f $DIR/qwen3-tokenizer/tokenizer.json ]] || { echo "$DIR/qwen3-tokenizer missing" >&2; exit 1; }
    $PS make-dummy-model --arch qwen3-0.6b --tokenizer "$DIR/qwen3-tokenizer" --out "$MODEL" >/dev/null
  fi
  if start_server tools "$MODEL" --served-model-name tq; then
    timeout 400 python3 scripts/tool-calls-bench.py --url "http://127.0.0.1:$PORT" --model tq \
      --concurrency "${TOOLS_CONCURRENCY:-64}" --max-tokens "${TOOLS_TOKENS:-128}" \
      --rounds "${TOOLS_ROUNDS:-3}" --choices auto,named,required,auto | tee -a "$OUT/tools.jsonl"
  fi
  kill -INT $server 2>/dev/null; wait $server
  ;;
choices)
  # n choices of one long prompt in one streaming request (scripts/choices_bench.py) on the
  # llama-3.1-8b dummy of make8b, for each of CHOICES_VARIANTS (default "default nowait
  # noprefix": prefix wait off makes the n copies prefill the prompt side by side; prefix
  # caching off also gives each its own KV). CHOICES_ARGS: extra choices_bench.py flags.
  MODEL=$DIR/llama-3.1-8b
  [[ -f $MODEL/config.json ]] || { echo "$MODEL missing: run the make8b step first" >&2; exit 1; }
  for variant in ${CHOICES_VARIANTS:-default nowait noprefix}; do
    variant_flags "$variant"
    if start_server "choices_$variant" "$MODEL" "${flags[@]}"; then
      timeout 400 python3 scripts/choices_bench.py --url "http://127.0.0.1:$PORT" \
        --model llama-3.1-8b --label "$variant" ${CHOICES_ARGS:-} | tee -a "$OUT/choices.jsonl"
    fi
    kill -INT $server 2>/dev/null; wait $server
  done
  ;;
sharedtrace)
  # A synthetic Mooncake-format trace of long shared prompts (a system prompt or document that
  # many requests read, PAT's B=[1,N] tree): SHARED_GROUPS prompts of SHARED_TOKENS, each read
  # by SHARED_REQUESTS / SHARED_GROUPS consecutive requests with UNIQUE_TOKENS of their own
  # (hash ids: the group's blocks, then the request's own block), OUTPUT_TOKENS out. Request 0
  # arrives at 0 s, the others evenly over SHARED_SPREAD_MS from SHARED_LEAD_MS on (the
  # defaults: request 0 fills the prefix cache first); both 0: one burst. Run the matrix on it
  # with MAX_INPUT_TOKENS at least the prompt length.
  python3 - "$DIR/shared_prefix.jsonl" "${SHARED_REQUESTS:-256}" "${SHARED_TOKENS:-4096}" \
    "${UNIQUE_TOKENS:-128}" "${OUTPUT_TOKENS:-128}" "${SHARED_GROUPS:-1}" \
    "${SHARED_LEAD_MS:-1000}" "${SHARED_SPREAD_MS:-1000}" <<'EOF'
import json, sys
path, n, shared, unique, out, groups, lead, spread = sys.argv[1], *map(int, sys.argv[2:])
assert shared % 512 == 0 and 0 < unique <= 512, "shared: whole 512-token blocks; unique: one block"
assert 1 <= groups <= n, "SHARED_GROUPS: 1 to SHARED_REQUESTS"
blocks = shared // 512
per_group = -(-n // groups)
with open(path, "w") as f:
    for i in range(n):
        t = 0 if i == 0 else lead + (i - 1) * spread // max(n - 1, 1)
        g = i // per_group
        own = groups * blocks + i
        f.write(json.dumps({"timestamp": t, "input_length": shared + unique, "output_length": out,
                            "hash_ids": list(range(g * blocks, (g + 1) * blocks)) + [own]}) + "\n")
print(f"{path}: {n} requests over {groups} shared prompt(s) of {shared} tokens + {unique} own, "
      f"{out} out, request 0 {lead} ms ahead, the rest over {spread} ms")
EOF
  ;;
structured)
  # Structured outputs' cost (docs/benchmarks.md "Structured outputs"): `generate` on a
  # qwen3-0.6b dummy with the real Qwen3 tokenizer ($DIR/qwen3-tokenizer), SO_PROMPTS (64)
  # prompts x SO_TOKENS (256) output tokens decoding together, without and with a
  # constraint, its rows masked and drawn on the GPU (default) or drawn on the host
  # (--no-backend-sampling), SO_ROUNDS (2) interleaved rounds; one line per run.
  MODEL=$DIR/cache/qwen3-0.6b-qwen3tok
  if [[ ! -f $MODEL/config.json ]]; then
    [[ -f $DIR/qwen3-tokenizer/tokenizer.json ]] || { echo "$DIR/qwen3-tokenizer missing" >&2; exit 1; }
    $PS make-dummy-model --arch qwen3-0.6b --tokenizer "$DIR/qwen3-tokenizer" --out "$MODEL" >/dev/null
  fi
  python3 - "$OUT/so_prompts.jsonl" "${SO_PROMPTS:-64}" <<'EOF'
import json, sys
topics = ["a city", "a river", "a book", "a machine", "a recipe", "a planet", "a song", "a game"]
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        words = " ".join(f"detail{j} of item {i}" for j in range(10 + i % 20))
        f.write(json.dumps({"prompt": f"Describe {topics[i % len(topics)]} as JSON: {words}"}) + "\n")
EOF
  echo '{"type":"object","properties":{"name":{"type":"string","maxLength":40},"year":{"type":"integer","minimum":0,"maximum":3000},"tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":4}},"required":["name","year","tags"]}' >"$OUT/so_schema.json"
  echo '{"type":"object","properties":{"name":{"type":"string"},"meta":{"type":"object"}},"required":["name","meta"]}' >"$OUT/so_schema_free.json"
  for round in $(seq "${SO_ROUNDS:-2}"); do
    for run in free free_host json json_host json_greedy json_greedy_host schema schema_free regex; do
      temperature=1
      case $run in
        free) flags=() ;;
        free_host) flags=(--no-backend-sampling) ;;
        json) flags=(--json-object) ;;
        json_host) flags=(--json-object --no-backend-sampling) ;;
        json_greedy) flags=(--json-object) temperature=0 ;;
        json_greedy_host) flags=(--json-object --no-backend-sampling) temperature=0 ;;
        schema) flags=(--json-schema "$OUT/so_schema.json") ;;
        schema_free) flags=(--json-schema "$OUT/so_schema_free.json") ;;
        regex) flags=(--regex '[a-z ]{0,300}') ;;
      esac
      line=$(timeout 300 $PS generate --model "$MODEL" --backend cuda --prompts "$OUT/so_prompts.jsonl" \
        --max-tokens "${SO_TOKENS:-256}" --temperature $temperature --seed 7 "${flags[@]}" 2>&1 >/dev/null |
        grep "generate: prompts=")
      echo "round $round $run: $line"
    done
  done
  ;;
*)
  echo "unknown step '$STEP': expected --pack, generate, make8b, serve, makemodel, makeqwen8b, sharedtrace, matrix, choices or structured" >&2
  exit 2
  ;;
esac
