// gemm.h: the bf16 linear layer of the CUDA forward through cuBLASLt (f32 accumulate,
// CUBLAS_COMPUTE_32F), in Hugging Face's weight layout:
//   y [rows, out] = x [rows, in] * w^T        (w [out, in] row-major, x bf16)
//   y (f32 only) += x * w^T with accumulate   (the residual add fused into the GEMM, beta = 1)
// y is bf16 (rounded once) or f32. No CUDA header (STYLE.md §1).
// linear_fp8 is the same product on float8 e4m3 operands, each with one f32 scale (device
// scalars: cuBLASLt's per-tensor scaling; its per-row "outer vector" scales are refused on sm_90,
// CUBLAS_STATUS_INVALID_VALUE on the H200):
//   y[r, o] = x_scale * w_scale * sum_k xq[r, k] wq[o, k]      (f32 accumulate)
// (--quantization fp8: ops.h quantize_fp8 makes both operands). Its algorithm is chosen as
// linear's (below), timed on the call's own scales.
//
// Algorithm per shape (rows, in, out, y dtype), chosen once and cached (GemmTuning):
//   * kPerShape and rows <= kMaxTunedRows (decode-sized): the first eager call of the shape
//     times the cuBLASLt heuristic's best kTuneCandidates algorithms and the split-K variants
//     (2, 4, 8 splits, f32 reduction in the workspace) of those that support it, at most
//     kMaxCandidates: 1 warm-up + kTuneReps runs each, back to back, CUDA events, beta = 0
//     into y (into a scratch buffer when accumulating, so that y keeps its value); the
//     fastest is kept (timing each run after an L2 flush picked algorithms as fast:
//     benchmarks.md, "cold-tune-rejected"). One-time cost: at most kMaxCandidates x
//     (kTuneReps + 1) GEMMs per shape, and a synchronisation.
//   * kPerBucket and rows <= kMaxTunedRows: rows are rounded up to a tuning bucket
//     (tune_bucket: 1, 2, ..., 16, then multiples of 16). The bucket's own row count is timed
//     as kPerShape times a shape, at the first shape of the bucket: on the caller's x
//     and y when that is the bucket's row count, else on scratch x (the caller's rows,
//     repeated) and y, allocated for the timing and freed. Every shape of the bucket takes
//     that algorithm when cuBLASLt accepts it for its row count (cublasLtMatmulAlgoCheck, no
//     timing, no synchronisation), else it is timed itself. A server whose step row counts
//     wander over 1..512 so times 47 shapes per weight matrix instead of 512.
//   * otherwise (kHeuristic, or more rows) the heuristic's first algorithm.
// Measured on an H100 (docs/benchmarks.md "GEMM tuning"): over 59 row counts of llama-3.1-8b's
// decode GEMMs the steady passes are 2.7 % faster timed per shape and 0.8 % per bucket than the
// heuristic's, for 4.1 s and 1.9 s of one-time timing; serving a trace from a fresh server
// those stalls cost more than they save (TPOT p99 51-62 ms timed, 31-40 ms not), so the CUDA
// backend's default is kHeuristic.
// Inside a stream capture a shape that is not cached yet gets the heuristic's first algorithm
// without caching it (nothing may synchronise during a capture); the CUDA forward runs every
// shape eagerly before it captures (forward_step.cu).
// Numerics: the algorithm depends on the shape and, with tuning, on timings, so the rounding
// of a row may depend on the number of rows and differ between processes (not
// bit-reproducible across batch compositions or runs; within one Gemm a shape always uses the
// same algorithm).
// CUDA graphs: the Gemm owns its cuBLASLt workspace (kWorkspaceBytes), so cuBLASLt never
// allocates inside a capture and a captured linear() replays.
// Thread-safety: one Gemm per stream; calls are asynchronous on that stream, except a tuning
// call, which synchronises the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/common/dtype.h"
#include "packserve/common/status.h"
#include "packserve/model/gemm_tuning.h"

namespace packserve::model::cuda {

class Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLAS's own Hopper default
  static constexpr int64_t kMaxTunedRows = 512;
  static constexpr int kTuneCandidates = 8;  // heuristic picks asked for
  static constexpr int kMaxCandidates = 24;  // with their split-K variants (2, 4, 8 splits)
  static constexpr int kTuneReps = 3;
  static constexpr int64_t kBucketRows = 16;  // kPerBucket: row counts above it in steps of it

  // Creates the cuBLASLt handle bound to `stream` with its workspace. kInternal when
  // cuBLASLt fails to initialise, kResourceExhausted when the workspace does not fit.
  static Result<Gemm> create(attention::cuda::StreamHandle stream, GemmTuning tuning);
  // The tuning bucket of a row count in [1, kMaxTunedRows]: rows up to kBucketRows, above it
  // rows rounded up to a multiple of kBucketRows.
  static int64_t tune_bucket(int64_t rows);
  Gemm(Gemm&& other) noexcept;
  Gemm& operator=(Gemm&& other) noexcept;
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  ~Gemm();

  // kInvalidArgument for non-positive sizes, null pointers, a y dtype other than bf16/f32 or
  // accumulate into bf16; kInternal naming the cuBLASLt status. rows == 0 is a no-op.
  Status linear(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                void* y, DType y_dtype, bool accumulate = false);
  // As linear, on e4m3 bytes xq [rows, in] and wq [out, in] with scales x_scale and w_scale
  // (one device f32 each). Also kInvalidArgument when in is not a multiple of 16 (cuBLASLt's
  // float8 rule) or a pointer is not 16-byte aligned; kUnimplemented when cuBLASLt has no
  // algorithm for it (a device before sm_89).
  Status linear_fp8(const uint8_t* xq, const float* x_scale, int64_t rows, int64_t in,
                    const uint8_t* wq, const float* w_scale, int64_t out, void* y, DType y_dtype,
                    bool accumulate = false);

  // Shapes with a cached algorithm, how many of them were chosen by timing, and how many took
  // the algorithm timed for another shape of their tuning bucket.
  int num_cached_shapes() const;
  int num_tuned_shapes() const;
  int num_bucket_shapes() const;

  struct Plan;  // cuBLASLt descriptors + chosen algorithm of one shape (gemm.cu)

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int, bool>;  // rows, in, out, y dtype, fp8
  Gemm() = default;
  void release();
  struct Heuristic;  // cuBLASLt's picks for a shape (gemm.cu)
  struct Operands {  // a call's x and w (bf16 or e4m3) and, for float8, their device scales
    const void* x = nullptr;
    const void* w = nullptr;
    const float* x_scale = nullptr;
    const float* w_scale = nullptr;
  };
  // The descriptors of `key`'s shape with the heuristic's picks (h) and the first as algo.
  Result<std::unique_ptr<Plan>> make_plan(const Key& key, Heuristic& h) const;
  // Times the bucket's own shape (its largest row count) on scratch x (the caller's x_rows
  // rows of x, repeated) and y, and caches it under the bucket's key. Without memory for the
  // scratch the bucket stays untimed (no error).
  Status tune_bucket_top(const Key& bucket_key, const Operands& ops, int64_t x_rows);
  // The timed algorithm of `key`'s bucket when cuBLASLt accepts it for `plan`'s shape.
  bool take_bucket_algo(const Key& key, Plan& plan) const;
  // Times the picks and their split-K variants; the fastest goes into plan.algo.
  Status time_candidates(Plan& plan, const Heuristic& h, int64_t rows, int64_t out, const void* x,
                         const void* w, void* y, bool accumulate, bool f32_out);
  // The cached plan of `key`, made (and with tuning timed on ops) at its first call.
  Result<Plan*> plan_for(const Key& key, const Operands& ops, void* y, bool accumulate);
  // Points a float8 plan at the call's scales (no-op for bf16 operands).
  static Status set_scales(Plan& plan, const Operands& ops);
  // Checks the sizes, pointers and dtype of a linear call (kInvalidArgument naming them).
  Status check_call(const void* x, int64_t rows, int64_t in, const void* w, int64_t out,
                    const void* y, DType y_dtype, bool accumulate) const;
  // cublasLtMatmul of plan on the stream (kInternal naming the shape when it fails).
  Status matmul(const Plan& plan, const void* x, int64_t rows, int64_t in, const void* w,
                int64_t out, void* y, bool accumulate);

  void* lt_ = nullptr;  // cublasLtHandle_t
  attention::cuda::StreamHandle stream_ = nullptr;
  void* workspace_ = nullptr;  // device, kWorkspaceBytes
  void* scratch_ = nullptr;    // device, tuning output of accumulating GEMMs
  size_t scratch_bytes_ = 0;
  GemmTuning tuning_ = GemmTuning::kHeuristic;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::unique_ptr<Plan> uncached_;  // a shape first seen inside a capture (one call)
};

}  // namespace packserve::model::cuda
