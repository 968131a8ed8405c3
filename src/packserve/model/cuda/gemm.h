// gemm.h: the bf16 linear layer of the CUDA forward through cuBLASLt (f32 accumulate,
// CUBLAS_COMPUTE_32F), in Hugging Face's weight layout:
//   y [rows, out] = x [rows, in] * w^T        (w [out, in] row-major, x bf16)
//   y (f32 only) += x * w^T with accumulate   (the residual add fused into the GEMM, beta = 1)
// y is bf16 (rounded once) or f32. No CUDA header (STYLE.md §1).
//
// Algorithm per shape (rows, in, out, y dtype), chosen once and cached:
//   * autotune on and rows <= kMaxTunedRows (decode-sized): the first eager call times the
//     cuBLASLt heuristic's best kTuneCandidates algorithms and the split-K variants (2, 4, 8
//     splits, f32 reduction in the workspace) of those that support it, at most
//     kMaxCandidates (1 warm-up + kTuneReps runs each,
//     CUDA events, beta = 0 into y, or into a scratch buffer when accumulating so that y is not
//     disturbed) and keeps the fastest; small-row GEMMs are memory-bound and the heuristic's
//     first pick reached only 0.6-0.87 of copy bandwidth on an H100 (docs/forward-cuda.md).
//     One-time cost: at most kMaxCandidates x (kTuneReps + 1) GEMMs per new shape.
//   * otherwise the heuristic's first algorithm.
// Inside a stream capture a shape that is not cached yet gets the heuristic's first algorithm
// without caching it (nothing may synchronise during a capture); the CUDA forward runs every
// shape eagerly before it captures (forward_step.cu).
// Numerics: the algorithm depends on the shape and, with autotune, on timings, so the rounding
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

namespace packserve::model::cuda {

class Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLAS's own Hopper default
  static constexpr int64_t kMaxTunedRows = 512;
  static constexpr int kTuneCandidates = 8;  // heuristic picks asked for
  static constexpr int kMaxCandidates = 24;  // with their split-K variants (2, 4, 8 splits)
  static constexpr int kTuneReps = 3;

  // Creates the cuBLASLt handle bound to `stream` with its workspace. kInternal when
  // cuBLASLt fails to initialise, kResourceExhausted when the workspace does not fit.
  static Result<Gemm> create(attention::cuda::StreamHandle stream, bool autotune = true);
  Gemm(Gemm&& other) noexcept;
  Gemm& operator=(Gemm&& other) noexcept;
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  ~Gemm();

  // kInvalidArgument for non-positive sizes, null pointers, a y dtype other than bf16/f32 or
  // accumulate into bf16; kInternal naming the cuBLASLt status. rows == 0 is a no-op.
  Status linear(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                void* y, DType y_dtype, bool accumulate = false);

  // Shapes with a cached algorithm, and how many of them were chosen by timing.
  int num_cached_shapes() const;
  int num_tuned_shapes() const;

  struct Plan;  // cuBLASLt descriptors + chosen algorithm of one shape (gemm.cu)

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int>;  // rows, in, out, y dtype
  Gemm() = default;
  void release();
  Result<const Plan*> plan_for(const Key& key, const uint16_t* x, const uint16_t* w, void* y,
                               bool accumulate);

  void* lt_ = nullptr;  // cublasLtHandle_t
  attention::cuda::StreamHandle stream_ = nullptr;
  void* workspace_ = nullptr;  // device, kWorkspaceBytes
  void* scratch_ = nullptr;    // device, tuning output of accumulating GEMMs
  size_t scratch_bytes_ = 0;
  bool autotune_ = true;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::unique_ptr<Plan> uncached_;  // a shape first seen inside a capture (one call)
};

}  // namespace packserve::model::cuda
