#!/usr/bin/env bash
# gpu-check.sh: the one GPU check of issue 6, run ON the GPU machine from the repository root:
#   1. the gpu-labelled tests (run_cuda_test: GPU vs CPU executor vs float64 reference)
#   2. compute-sanitizer memcheck, racecheck, initcheck and synccheck on small mixed batches
#   3. bench/gpu/attention_bench (ceilings + our kernels), gather_bench (the streaming ceiling
#      of a few SMs), forward_bench (bf16, --quantization fp8, --kv-cache-dtype fp8, and fp8
#      decode with plain launches as the programmatic launches' peer), plan_bench (the
#      planner on this machine's host CPU),
#   4. scripts/spec-bench.sh (prompt-lookup speculative decoding on qwen3-0.6b dummies, and
#      float8 against bf16 weights end to end) and
#      scripts/gpu_peers.py (PyTorch),
#   4b. scripts/fp8-kv-scales-check.sh (a checkpoint's K/V cache scales through generate
#      --kv-cache-dtype fp8 on the qwen3-0.6b copy model),
#   5. scripts/model_gpu_check.py (our CUDA and CPU forward vs transformers, through
#      forward_logits and packserve, on the copy dummy models; HF_ARGS="--inits copy,random"
#      adds the random ones, about 4 minutes more)
# and writes a markdown table to $OUT/summary.md (printed last), the profile to profile.txt and
# every other log into $OUT/logs.tar.gz (the device tool returns at most 8 files).
#
# Binaries: the device machine has no gtest/spdlog/fmt dev packages, so build HERE (same
# x86-64, same nvcc 13.0) and carry them as one archive (docs/gpu.md):
#   cmake -S . -B build-cuda -G Ninja -DPACKSERVE_CUDA=ON -DPACKSERVE_WERROR=ON
#   ninja -C build-cuda $(scripts/gpu-check.sh --targets)
#   scripts/gpu-check.sh --pack [BUILD_DIR]   # -> .gpu-carry/carry.tar.xz (binaries + libs)
# then on the device (carry .gpu-carry):  scripts/gpu-check.sh
# cuBLAS is not carried (600 MB): the device's /usr/local/cuda/lib64 has it.
# Without .gpu-carry/ the script builds into build-gpu/ when the dependencies are there.
# A/B: `scripts/gpu-check.sh --pack-base BUILD_DIR NAME` packs the attention_bench of another
# build (e.g. main's, built in a worktree) as .gpu-carry/base-NAME.tar.xz; the bench step runs
# every such base right after ours, and the summary adds each one's graph time and our speedup.
# The profile step: per-kernel ncu times and throughputs of decode_b32, the PAT trees and the
# packed prefill (attention and merge kernels), every warp stall reason per issued instruction
# ("no_instruction" is the instruction cache: docs/gpu.md, "Code size"), and the spill
# instructions (LDL/STL) of each attention kernel in the SASS (cuobjdump), into
# $OUT/profile.txt.
# The timeline step: attention_bench --timeline on the decode, PAT and prefill cases (every
# work item's SM, start and end) summarised by scripts/timeline.py into $OUT/timeline.md.
# Env: OUT (default ./out), GPU_CHECK_SKIP (comma list of
# tests,sanitizer,cli,bench,timeline,profile,spec,kvscales,peers,hf).
# The cli step runs `packserve attention verify --device cuda` on data/batches/*.json and
# `packserve attention bench --device cuda` on data/batches/default.json.
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu-carry
export TESTS="run_cuda_test forward_cuda_test backend_factory_gpu_test generate_cli_gpu_test"
TARGETS="$TESTS attention_bench gather_bench forward_bench packserve plan_bench forward_logits"
if [[ "${1:-}" == "--targets" ]]; then echo "$TARGETS"; exit 0; fi
if [[ "${1:-}" == "--pack-base" ]]; then
  set -e
  name=${3:?usage: --pack-base BUILD_DIR NAME}
  f=$(find "$2" -name attention_bench -type f -perm -u+x | head -1)
  [[ -n "$f" ]] || { echo "no attention_bench under $2: build it first" >&2; exit 1; }
  tmp=$(mktemp -d)
  cp "$f" "$tmp/" && strip "$tmp/attention_bench"
  mkdir -p $CARRY && tar -cJf "$CARRY/base-$name.tar.xz" -C "$tmp" . && rm -rf "$tmp"
  du -h "$CARRY/base-$name.tar.xz"
  exit 0
fi
if [[ "${1:-}" == "--pack" ]]; then
  set -e
  BUILD=${2:-build-cuda}
  tmp=$(mktemp -d)
  mkdir -p "$tmp/lib" $CARRY
  for b in $TARGETS; do
    f=$(find "$BUILD" -name "$b" -type f -perm -u+x | head -1)
    [[ -n "$f" ]] || { echo "no $b under $BUILD: build it first" >&2; exit 1; }
    cp "$f" "$tmp/" && strip "$tmp/$b"
    # (a binary that needs only the system's libraries leaves grep nothing: not an error)
    ldd "$tmp/$b" | awk '/=> \//{print $3}' |
      { grep -v -E '/lib/x86_64-linux-gnu/lib(c|m|gcc_s|stdc\+\+|pthread|dl|rt)\.so|libcublas' || true; } |
      while read -r lib; do cp -L "$lib" "$tmp/lib/"; done
  done
  tar -cJf $CARRY/carry.tar.xz -C "$tmp" .
  rm -rf "$tmp"
  du -h $CARRY/carry.tar.xz
  exit 0
fi

OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
SKIP=${GPU_CHECK_SKIP:-}
skip() { [[ ",$SKIP," == *",$1,"* ]]; }
if [[ -f $CARRY/carry.tar.xz ]]; then
  BIN=$(mktemp -d)
  tar -xJf $CARRY/carry.tar.xz -C "$BIN"
  export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"  # cuBLAS: the device's own
else
  cmake -S . -B build-gpu -G Ninja -DPACKSERVE_CUDA=ON -DPACKSERVE_BENCH=OFF >"$OUT/build.log" 2>&1 &&
    ninja -C build-gpu $TARGETS >>"$OUT/build.log" 2>&1 ||
    { echo "build failed, see $OUT/build.log"; tail -20 "$OUT/build.log"; exit 1; }
  BIN=$(mktemp -d)
  for b in $TARGETS; do cp "$(find build-gpu -name "$b" -type f -perm -u+x | head -1)" "$BIN/"; done
fi
# NCCL (tensor parallelism, loaded at run time): the toolkit's, else PyTorch's wheel's.
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) + "/lib")' 2>/dev/null)
[[ -n "$NCCL_DIR" ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64:$NCCL_DIR"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines (device KINDS.md)
export PACKSERVE_BIN="$BIN/packserve"  # generate_cli_gpu_test runs it
DEVICE=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)
echo "$DEVICE"

tests_rc=skipped memcheck_rc=skipped racecheck_rc=skipped initcheck_rc=skipped synccheck_rc=skipped
if ! skip tests; then
  tests_rc=0
  for t in $TESTS; do
    timeout 300 "$BIN/$t" >"$OUT/$t.log" 2>&1 || tests_rc=$?
    echo "$t: $(grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/$t.log" | tr '\n' ' ')"
  done
fi
if ! skip sanitizer; then
  sanitize() {  # TOOL GTEST_FILTER: run_cuda_test under compute-sanitizer, into sanitizer.log
    # (racecheck of its four tests takes about 235 s on an H200)
    timeout 400 compute-sanitizer --tool "$1" --error-exitcode 9 "$BIN/run_cuda_test" \
      --gtest_filter="$2" >>"$OUT/sanitizer.log" 2>&1
  }
  : >"$OUT/sanitizer.log"
  small='RunCuda.EdgeShapes:RunCuda.GraphReplay*:RunCuda.KvAppend*:RunCuda.ChainedPasses*:RunCuda.PlansWithWide*:RunCuda.QuadTickets*'
  sanitize memcheck "$small"; memcheck_rc=$?
  # initcheck only on the attention engine: the model's cuBLASLt GEMMs store their outputs in
  # a way initcheck does not see, so it reports every read of them (docs/forward-cuda.md).
  sanitize initcheck "$small"; initcheck_rc=$?
  sanitize synccheck "$small"; synccheck_rc=$?
  sanitize racecheck 'RunCuda.GraphReplay*:RunCuda.ChainedPasses*:RunCuda.WideKernelSmallBatch:RunCuda.QuadTickets*'
  racecheck_rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log"
fi
if ! skip cli; then
  : >"$OUT/cli.jsonl"
  for f in data/batches/*.json; do
    "$BIN/packserve" attention verify --batch "$f" --device cuda >>"$OUT/cli.jsonl" 2>&1
    echo "verify --device cuda $f rc=$?"
  done
  "$BIN/packserve" attention bench --batch data/batches/default.json --policy balanced \
    --device cuda >>"$OUT/cli.jsonl" 2>&1; echo "bench --device cuda rc=$?"
fi
if ! skip bench; then
  timeout 300 "$BIN/attention_bench" >"$OUT/bench.jsonl" 2>"$OUT/bench.err"; echo "bench rc=$?"
  for a in "$CARRY"/base-*.tar.xz; do
    [[ -f "$a" ]] || continue
    name=$(basename "$a" .tar.xz); name=${name#base-}
    mkdir -p "$BIN/base-$name" && tar -xJf "$a" -C "$BIN/base-$name"
    timeout 300 "$BIN/base-$name/attention_bench" >"$OUT/bench_base-$name.jsonl" \
      2>"$OUT/bench_base-$name.err"
    echo "base $name bench rc=$?"
  done
  timeout 60 "$BIN/gather_bench" >"$OUT/gather.md" 2>&1; echo "gather_bench rc=$?"
  timeout 200 "$BIN/forward_bench" >"$OUT/forward_bench.jsonl" 2>"$OUT/forward_bench.err"
  echo "forward_bench rc=$?"
  timeout 150 "$BIN/forward_bench" --cases tuning >>"$OUT/forward_bench.jsonl" \
    2>>"$OUT/forward_bench.err"
  echo "forward_bench tuning rc=$?"
  # float8 layer weights (the few-row GEMM at batch 1, cuBLASLt at 32 and 128), bf16's peer above
  timeout 200 "$BIN/forward_bench" --cases decode,prefill --quantization fp8 \
    >"$OUT/forward_bench_fp8.jsonl" 2>"$OUT/forward_bench_fp8.err"
  echo "forward_bench --quantization fp8 rc=$?"
  # a float8 e4m3 KV pool under bf16 weights (--kv-cache-dtype fp8), bf16's peer above
  timeout 200 "$BIN/forward_bench" --cases decode --kv-cache-dtype fp8 \
    >"$OUT/forward_bench_fp8kv.jsonl" 2>"$OUT/forward_bench_fp8kv.err"
  echo "forward_bench --kv-cache-dtype fp8 rc=$?"
  # the peer of the step kernels' programmatic launches (docs/forward-cuda.md "One step")
  PACKSERVE_PROGRAMMATIC_LAUNCH=0 timeout 100 "$BIN/forward_bench" --cases decode \
    --quantization fp8 --batches 1,8 >"$OUT/forward_bench_fp8_plain.jsonl" \
    2>"$OUT/forward_bench_fp8_plain.err"
  echo "forward_bench --quantization fp8, plain launches rc=$?"
  if (( $(nvidia-smi -L | wc -l) >= 2 )); then  # tensor parallelism over two of the GPUs
    timeout 300 "$BIN/forward_bench" --cases decode,prefill --tensor-parallel 2 \
      >"$OUT/forward_bench_tp2.jsonl" 2>"$OUT/forward_bench_tp2.err"
    echo "forward_bench --tensor-parallel 2 rc=$?"
  fi
  # The planner runs on this machine's host CPU when serving: time it here too.
  timeout 120 "$BIN/plan_bench" --benchmark_min_time=0.3 --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true >"$OUT/plan_bench.txt" 2>&1
  echo "plan_bench rc=$?"; grep -E "_median" "$OUT/plan_bench.txt"
fi
if ! skip timeline; then
  mkdir -p "$OUT/timeline"
  timeout 300 "$BIN/attention_bench" --cases decode,pat,prefill --timeline "$OUT/timeline" \
    >"$OUT/timeline.jsonl" 2>&1
  echo "timeline rc=$?"
  python3 scripts/timeline.py "$OUT/timeline" >"$OUT/timeline.md"
  tar -czf "$OUT/timeline-csv.tar.gz" -C "$OUT" timeline && rm -rf "$OUT/timeline"
fi
if ! skip profile; then
  {
    for c in decode pat prefill; do
      echo "### ncu: attention_bench --cases $c (first attention + merge launch)"
      timeout 200 ncu --clock-control none --launch-count 2 \
        -k regex:'persistent_attention|merge_states' --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats \
        --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
        "$BIN/attention_bench" --cases "$c" 2>&1 | grep -v -E '^\{|^==PROF=='
    done
    echo "### SASS spill instructions (LDL/STL) per attention kernel"
    cuobjdump -sass "$BIN/attention_bench" 2>/dev/null |
      awk '/Function :/ {name = $3} name ~ /persistent_attention/ && /(LDL|STL)/ {n[name]++}
           END {for (f in n) print n[f], f; if (length(n) == 0) print "none"}'
  } >"$OUT/profile.txt" 2>&1
  echo "profile rc=$? ($OUT/profile.txt)"
fi
if ! skip spec; then  # speculative decoding against one token per step (scripts/spec-bench.sh)
  BIN="$BIN/packserve" BACKEND=cuda ARCHS=qwen3-0.6b BATCHES="1 16" CAPTURE_AFTER=2 \
    OUT="$OUT" timeout 120 scripts/spec-bench.sh >/dev/null 2>"$OUT/spec-bench.err"
  echo "spec-bench rc=$?"
  # float8 against bf16 weights end to end (one token per step, the same table's columns)
  fp8_out=$(mktemp -d)
  BIN="$BIN/packserve" BACKEND=cuda ARCHS=qwen3-0.6b BATCHES="4 16" CAPTURE_AFTER=2 SPECS=0 \
    INITS=random QUANT="none fp8" PROMPT_LEN=256 MAX_TOKENS=128 OUT="$fp8_out" \
    timeout 120 scripts/spec-bench.sh >/dev/null 2>"$OUT/fp8-generate.err"
  echo "fp8 generate rc=$?"
  cp "$fp8_out/spec-bench.md" "$OUT/fp8-generate.md" 2>/dev/null; rm -rf "$fp8_out"
fi
if ! skip kvscales; then  # checkpoint K/V scales end to end (scripts/fp8-kv-scales-check.sh)
  BIN="$BIN/packserve" BACKEND=cuda OUT="$OUT" timeout 300 scripts/fp8-kv-scales-check.sh \
    >"$OUT/kvscales.md" 2>"$OUT/kvscales.err"
  echo "fp8 kv scales rc=$?"; cat "$OUT/kvscales.md"
fi
if ! skip peers; then
  PYTHONUNBUFFERED=1 timeout 300 python3 scripts/gpu_peers.py ${PEERS_ARGS:-} >"$OUT/peers.jsonl" 2>"$OUT/peers.err"
  echo "peers rc=$?"
fi
if ! skip hf; then
  PYTHONUNBUFFERED=1 timeout 450 python3 scripts/model_gpu_check.py --bin "$BIN/forward_logits" \
    --cpu-bin "$BIN/packserve" ${HF_ARGS:---inits copy} >"$OUT/hf.jsonl" 2>"$OUT/hf.err"
  echo "model_gpu_check rc=$? (1 = a goal missed)"
fi

python3 - "$OUT" "$tests_rc" "$memcheck_rc" "$racecheck_rc" "$DEVICE" "$initcheck_rc" "$synccheck_rc" <<'PY' | tee "$OUT/summary.md"
import json, sys, os
out, t, m, r, dev, ic, sc = sys.argv[1:8]
def lines(name):
    p = os.path.join(out, name)
    if not os.path.exists(p): return []
    res = []
    for l in open(p):
        l = l.strip()
        if l.startswith("{"):
            try: res.append(json.loads(l))
            except ValueError: pass
    return res
print(f"## gpu-check: {dev}\n")
print(f"tests ({os.environ.get('TESTS', '')}) rc={t} (0 = all passed), memcheck rc={m}, racecheck rc={r}, initcheck rc={ic}, synccheck rc={sc} (0 = clean)\n")
bench = lines("bench.jsonl")
ceil = next((b for b in bench if b.get("ceilings")), None)
if ceil:
    print(f"ceilings: copy {ceil['copy_gbps']:.0f} GB/s, bf16 matmul {ceil['matmul_tflops']:.0f} TFLOP/s; "
          f"{ceil['num_sms']} SMs x {ceil['ctas_per_sm']} CTAs/SM, {ceil['smem_bytes_per_cta']} B smem/CTA\n")
bases = {}
for f in sorted(os.listdir(out)):
    if f.startswith("bench_base-") and f.endswith(".jsonl"):
        bases[f[len("bench_base-"):-len(".jsonl")]] = {
            b["case"] + "/" + b.get("policy", ""): b for b in lines(f) if "graph_ms" in b}
print("| case | impl | graph ms | eager ms | GB/s | frac copy | TFLOP/s | frac mm | x bound |" +
      "".join(f" {n} graph ms | speedup over {n} |" for n in bases))
print("|---|---|---|---|---|---|---|---|---|" + "---|---|" * len(bases))
cbw = ceil["copy_gbps"] if ceil else float("nan"); cmm = ceil["matmul_tflops"] if ceil else float("nan")
for b in bench:
    if "case" not in b: continue
    if b["case"] == "overhead_8":
        print(f"| overhead_8 (host: plan+upload+run+sync) | packserve | {b['plan_upload_run_sync_ms_graph']:.4f} | {b['plan_upload_run_sync_ms_eager']:.4f} | | | | | |")
        continue
    xb = f"{b['x_bound']:.2f}" if b.get("bound_ms", 0) > 0 else ""
    ab = ""
    for base in bases.values():
        o = base.get(b["case"] + "/" + b["policy"])
        ab += f" {o['graph_ms']:.4f} | {o['graph_ms'] / b['graph_ms']:.2f}x |" if o else " | |"
    print(f"| {b['case']} | packserve {b['policy']} | {b['graph_ms']:.4f} | {b['eager_ms']:.4f} | {b['effective_gbps']:.0f} | {b['frac_copy_bw']:.2f} | {b['useful_tflops']:.1f} | {b['frac_matmul']:.3f} | {xb} |{ab}")
for p in lines("peers.jsonl"):
    if "peer" not in p: continue
    if "error" in p:
        print(f"| {p['case']} | {p['peer']} | error: {p['error'][:80]} | | | | | | |"); continue
    print(f"| {p['case']} | {p['peer']} | {p['graph_ms']} | {p['eager_ms']} | {p['effective_gbps']:.0f} | {p['effective_gbps']/cbw:.2f} | {p['useful_tflops']:.1f} | {p['useful_tflops']/cmm:.3f} | |")
gather = os.path.join(out, "gather.md")
if os.path.exists(gather):
    print("\n" + open(gather).read())
for name, title in (("forward_bench.jsonl", "bf16"), ("forward_bench_fp8.jsonl", "fp8"),
                    ("forward_bench_fp8kv.jsonl", "bf16 weights, fp8 KV cache"),
                    ("forward_bench_fp8_plain.jsonl",
                     "fp8, PACKSERVE_PROGRAMMATIC_LAUNCH=0 (plain launches)")):
    fwd = lines(name)
    if fwd:
        print(f"\n### model forward, {title} (bench/gpu/forward_bench.cu)\n")
        for f in fwd: print("- `" + json.dumps(f) + "`")
        print()
spec = os.path.join(out, "spec-bench.md")
if os.path.exists(spec):
    print("\n### speculative decoding (scripts/spec-bench.sh)\n")
    print(open(spec).read())
fp8gen = os.path.join(out, "fp8-generate.md")
if os.path.exists(fp8gen):
    print("\n### float8 against bf16 weights, `packserve generate` (scripts/spec-bench.sh)\n")
    print(open(fp8gen).read())
hf = lines("hf.jsonl")
if hf:
    print("\n### CUDA forward vs transformers (scripts/model_gpu_check.py)\n")
    for f in hf: print("- `" + json.dumps(f) + "`")
    print()
PY
# The device tool returns at most 8 files from $OUT: keep summary.md, profile.txt and
# timeline.md, put every other log (the timeline CSVs too) into one archive.
(cd "$OUT" && find . -maxdepth 1 -type f ! -name summary.md ! -name profile.txt ! -name timeline.md ! -name logs.tar.gz \
  -printf '%P\n' | tar -czf logs.tar.gz -T - --remove-files)
