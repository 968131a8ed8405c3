#!/usr/bin/env bash
# gpu-step-profile.sh: where the CUDA decode step's time goes (issue 4 benchmark goal), run ON
# the GPU machine from the repository root, from binaries built here and carried:
#   1. the gpu tests of the model (forward_cuda_test: ops, forward vs CPU, graph vs eager;
#      backend_factory_gpu_test)
#   2. forward_bench --cases decode --profile: per decode batch, eager vs graph step times,
#      host phases and per-op GPU times (CudaStepProfile, docs/forward-cuda.md "Benchmark")
#   3. with FULL=1, the whole forward_bench (ceilings, GEMMs alone, decode, prefill)
#   4. nsys (when installed) on a batch-32 decode run: kernel vs API time summary
#   with SANITIZER=1, compute-sanitizer memcheck on the graph, ops and one forward test first
# Logs and JSON under $OUT (default ./out); a short table last.
#
# Here:   cmake -S . -B build-gpustep -G Ninja -DPACKSERVE_CUDA=ON -DPACKSERVE_WERROR=ON
#         ninja -C build-gpustep forward_bench forward_cuda_test backend_factory_gpu_test
#         scripts/gpu-step-profile.sh --pack build-gpustep   # -> build-gpustep/carry/carry.tar.xz
# There:  scripts/gpu-step-profile.sh                        # (carry build-gpustep/carry)
# cuBLAS/cudart are the device's own (/usr/local/cuda/lib64), not carried.
set -uo pipefail
cd "$(dirname "$0")/.."
BINS="forward_bench forward_cuda_test backend_factory_gpu_test"
if [[ "${1:-}" == "--pack" ]]; then
  set -e
  BUILD=${2:-build-gpustep}
  CARRY=$BUILD/carry
  tmp=$(mktemp -d)
  mkdir -p "$tmp/lib" "$CARRY"
  for b in $BINS; do
    f=$(find "$BUILD" -name "$b" -type f -perm -u+x -not -path "*/carry/*" | head -1)
    [[ -n "$f" ]] || { echo "no $b under $BUILD: build it first" >&2; exit 1; }
    cp "$f" "$tmp/" && strip "$tmp/$b"
    ldd "$tmp/$b" | awk '/=> \//{print $3}' |
      grep -v -E '/lib/x86_64-linux-gnu/lib(c|m|gcc_s|stdc\+\+|pthread|dl|rt)\.so|libcublas|libcudart' |
      while read -r lib; do cp -L "$lib" "$tmp/lib/"; done
  done
  tar -cJf "$CARRY/carry.tar.xz" -C "$tmp" .
  rm -rf "$tmp"
  du -h "$CARRY/carry.tar.xz"
  exit 0
fi

OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
ARCHIVE=${ARCHIVE:-build-gpustep/carry/carry.tar.xz}
BIN=$(mktemp -d)
tar -xJf "$ARCHIVE" -C "$BIN" || { echo "cannot unpack $ARCHIVE"; exit 1; }
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
DEVICE=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)
echo "$(date -u +%FT%TZ) $DEVICE" | tee "$OUT/device.txt"

tests_rc=0
for t in forward_cuda_test backend_factory_gpu_test; do
  timeout 300 "$BIN/$t" >"$OUT/$t.log" 2>&1 || tests_rc=$?
  echo "$t: $(grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/$t.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]|graph vs eager" "$OUT/$t.log" | head -20
done

if [[ "${SANITIZER:-0}" == 1 ]]; then
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/forward_cuda_test" \
    --gtest_filter='CudaForwardGraph.*:ModelCudaOps.*:CudaForward.LlamaMatchesCpuOnMixedSteps' \
    >"$OUT/sanitizer.log" 2>&1
  echo "compute-sanitizer memcheck rc=$? ($(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log"))"
fi

BENCH_ARGS=${BENCH_ARGS:---cases decode --batches 1,32,128 --profile}
[[ "${FULL:-0}" == 1 ]] && BENCH_ARGS="--profile --cost-alpha 1,64"
timeout 400 "$BIN/forward_bench" $BENCH_ARGS >"$OUT/forward_bench.jsonl" 2>"$OUT/forward_bench.err"
echo "forward_bench $BENCH_ARGS rc=$?"

NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [[ "${NSYS_RUN:-1}" == 1 && -n "$NSYS" ]]; then
  timeout 150 "$NSYS" profile --stats=true -o "$OUT/nsys_b32" --force-overwrite true \
    "$BIN/forward_bench" --cases decode --batches 32 >"$OUT/nsys_stats.txt" 2>&1
  echo "nsys rc=$? ($NSYS)"
  rm -f "$OUT"/nsys_b32.qdrep "$OUT"/nsys_b32.sqlite
else
  echo "nsys: not found or NSYS_RUN=0"
fi

python3 - "$OUT/forward_bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for r in rows:
    if r.get("ceilings"):
        print(f"device {r['device']}: copy {r['copy_gbps']:.0f} GB/s, bf16 {r['matmul_tflops']:.0f} TFLOP/s")
print("| case | mode | step ms | roofline ms | x | gpu ms | validate | plan | upload | meta | enqueue | sync | logits copy |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if "mode" not in r: continue
    h = r["host"]
    print(f"| {r['case']} | {r['mode']} | {r['step_ms']:.2f} | {r['roofline_ms']:.2f} | {r['x_roofline']:.2f} | "
          f"{r['gpu_ms']:.2f} | {h['validate_ms']:.2f} | {h['plan_ms']:.2f} | {h['upload_ms']:.2f} | "
          f"{h['metadata_ms']:.2f} | {h['enqueue_ms']:.2f} | {h['sync_ms']:.2f} | {h['logits_copy_ms']:.2f} |")
for r in rows:
    if "op_gpu_ms" in r:
        ops = ", ".join(f"{k} {v:.2f}" for k, v in r["op_gpu_ms"].items())
        print(f"{r['case']} ops (GPU ms, summed over layers): {ops}")
    elif "case" in r and "mode" not in r:
        print(json.dumps(r))
PY
exit $tests_rc
