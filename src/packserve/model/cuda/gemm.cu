// gemm.cu: Gemm (gemm.h) on cublasLtMatmul. Row-major y[rows, out] = x w^T is, in cuBLAS's
// column-major view, Y' [out, rows] = W'^T [out, in] X' [in, rows] with W' = w viewed as
// [in, out] (ld in) and X' = x viewed as [in, rows] (ld in): op(A) = T, op(B) = N; C = D = Y'.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "packserve/model/cuda/device_util.cuh"
#include "packserve/model/cuda/gemm.h"

namespace packserve::model::cuda {
namespace {

std::string lt_error(const char* call, cublasStatus_t s) {
  return std::string(call) + " failed: " + cublasGetStatusName(s);
}
#define PS_LT_RETURN_IF_ERROR(call)                                              \
  do {                                                                           \
    const cublasStatus_t s_ = (call);                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) return internal_error(lt_error(#call, s_)); \
  } while (0)

cublasLtHandle_t lt_handle(void* p) { return static_cast<cublasLtHandle_t>(p); }

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool tuned = false;   // algo timed for this shape
  bool bucket = false;  // algo timed for another shape of its tuning bucket
  ~Plan() {
    if (a != nullptr) (void)cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) (void)cublasLtMatrixLayoutDestroy(b);
    if (c != nullptr) (void)cublasLtMatrixLayoutDestroy(c);
    if (op != nullptr) (void)cublasLtMatmulDescDestroy(op);
  }
};

struct Gemm::Heuristic {  // cuBLASLt's best picks for a shape, best first
  cublasLtMatmulHeuristicResult_t found[kTuneCandidates] = {};
  int num_found = 0;
};

Result<Gemm> Gemm::create(attention::cuda::StreamHandle stream, GemmTuning tuning) {
  Gemm g;
  g.stream_ = stream;
  g.tuning_ = tuning;
  cublasLtHandle_t h = nullptr;
  const cublasStatus_t s = cublasLtCreate(&h);
  if (s != CUBLAS_STATUS_SUCCESS) return internal_error(lt_error("cublasLtCreate", s));
  g.lt_ = h;
  if (cudaMalloc(&g.workspace_, kWorkspaceBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    g.workspace_ = nullptr;
    return resource_exhausted("gemm: cannot allocate the " + std::to_string(kWorkspaceBytes) +
                              "-byte cuBLASLt workspace");
  }
  return Result<Gemm>(std::move(g));
}

Gemm::Gemm(Gemm&& other) noexcept { *this = std::move(other); }
Gemm& Gemm::operator=(Gemm&& other) noexcept {
  std::swap(lt_, other.lt_);
  std::swap(stream_, other.stream_);
  std::swap(workspace_, other.workspace_);
  std::swap(scratch_, other.scratch_);
  std::swap(scratch_bytes_, other.scratch_bytes_);
  std::swap(tuning_, other.tuning_);
  std::swap(plans_, other.plans_);
  std::swap(uncached_, other.uncached_);
  return *this;
}
Gemm::~Gemm() { release(); }

void Gemm::release() {
  plans_.clear();
  uncached_.reset();
  if (lt_ != nullptr) (void)cublasLtDestroy(lt_handle(lt_));
  if (workspace_ != nullptr) (void)cudaFree(workspace_);
  if (scratch_ != nullptr) (void)cudaFree(scratch_);
  lt_ = workspace_ = scratch_ = nullptr;
}

int Gemm::num_cached_shapes() const { return static_cast<int>(plans_.size()); }
int Gemm::num_tuned_shapes() const {
  return static_cast<int>(
      std::count_if(plans_.begin(), plans_.end(), [](const auto& p) { return p.second->tuned; }));
}
int Gemm::num_bucket_shapes() const {
  return static_cast<int>(
      std::count_if(plans_.begin(), plans_.end(), [](const auto& p) { return p.second->bucket; }));
}

int64_t Gemm::tune_bucket(int64_t rows) {
  return rows <= kBucketRows ? rows : (rows + kBucketRows - 1) / kBucketRows * kBucketRows;
}

bool Gemm::take_bucket_algo(const Key& key, Plan& plan) const {
  const auto [rows, in, out, y_dtype, fp8] = key;
  // A bucket's own row count is cached under the bucket's key; timed, it is the bucket's plan.
  const auto it = plans_.find(Key{tune_bucket(rows), in, out, y_dtype, fp8});
  if (it == plans_.end() || !it->second->tuned) return false;
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(lt_handle(lt_), plan.op, plan.a, plan.b, plan.c, plan.c,
                              &it->second->algo, &check) != CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > kWorkspaceBytes) {
    return false;
  }
  plan.algo = it->second->algo;
  plan.bucket = true;
  return true;
}

Result<std::unique_ptr<Gemm::Plan>> Gemm::make_plan(const Key& key, Heuristic& h) const {
  const auto [rows, in, out, y_dtype, fp8] = key;
  const cudaDataType_t y_type =
      static_cast<DType>(y_dtype) == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  auto plan = std::make_unique<Plan>();
  PS_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  PS_LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  PS_LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  PS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, in_type, in, out, in));
  PS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, in_type, in, rows, in));
  PS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->c, y_type, out, rows, out));
  cublasLtMatmulPreference_t pref = nullptr;
  PS_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = kWorkspaceBytes;
  cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasLtMatmulAlgoGetHeuristic(lt_handle(lt_), plan->op, plan->a, plan->b, plan->c, plan->c,
                                       pref, kTuneCandidates, h.found, &h.num_found);
  }
  (void)cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || h.num_found < 1) {
    const std::string what =
        std::string("cublasLtMatmulAlgoGetHeuristic") + (fp8 ? " (float8 e4m3)" : "") + " [" +
        std::to_string(rows) + " x " + std::to_string(in) + "] x [" + std::to_string(out) + " x " +
        std::to_string(in) + "]^T found no algorithm: " + cublasGetStatusName(s);
    return fp8 ? unimplemented(what) : internal_error(what);
  }
  plan->algo = h.found[0].algo;
  return Result<std::unique_ptr<Plan>>(std::move(plan));
}

Status Gemm::tune_bucket_top(const Key& bucket_key, const Operands& ops, int64_t x_rows) {
  const auto [rows, in, out, y_dtype, fp8] = bucket_key;
  const size_t row_bytes = static_cast<size_t>(in) * (fp8 ? 1 : 2);
  const size_t x_bytes = static_cast<size_t>(rows) * row_bytes;
  const size_t y_bytes = static_cast<size_t>(rows) * static_cast<size_t>(out) *
                         (static_cast<DType>(y_dtype) == DType::kF32 ? 4 : 2);
  DeviceMemory scratch;  // x, then y; freed after the timing
  if (!scratch.alloc(x_bytes + y_bytes, "gemm tuning").ok()) return ok_status();  // not tuned
  // x: the caller's rows, repeated.
  for (int64_t r = 0; r < rows; r += x_rows) {
    PS_MODEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(scratch.as<std::byte>() + static_cast<size_t>(r) * row_bytes, ops.x,
                        static_cast<size_t>(std::min(x_rows, rows - r)) * row_bytes,
                        cudaMemcpyDeviceToDevice, stream_));
  }
  Heuristic h;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, make_plan(bucket_key, h));
  PS_RETURN_IF_ERROR(set_scales(*plan, ops));
  PS_RETURN_IF_ERROR(time_candidates(*plan, h, rows, out, scratch.as<std::byte>(), ops.w,
                                     scratch.as<std::byte>() + x_bytes, /*accumulate=*/false,
                                     static_cast<DType>(y_dtype) == DType::kF32));
  plans_.emplace(bucket_key, std::move(plan));
  return ok_status();
}

Status Gemm::set_scales(Plan& plan, const Operands& ops) {
  if (ops.w_scale == nullptr) return ok_status();  // bf16
  // The scales are per call (each layer has its own w_scale); a captured graph keeps them.
  PS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ops.w_scale, sizeof ops.w_scale));
  PS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ops.x_scale, sizeof ops.x_scale));
  return ok_status();
}

Result<Gemm::Plan*> Gemm::plan_for(const Key& key, const Operands& ops, void* y, bool accumulate) {
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  const auto [rows, in, out, y_dtype, fp8] = key;
  Heuristic h;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, make_plan(key, h));
  PS_RETURN_IF_ERROR(set_scales(*plan, ops));
  const bool timed = tuning_ != GemmTuning::kHeuristic && rows <= kMaxTunedRows;
  const Key bucket_key{tune_bucket(rows), in, out, y_dtype, fp8};
  const bool by_bucket = timed && tuning_ == GemmTuning::kPerBucket;
  const auto cache = [&] {
    Plan* p = plan.get();
    plans_.emplace(key, std::move(plan));
    return p;
  };
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream_, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (by_bucket && bucket_key != key) {
    // The bucket's algorithm is timed at its largest row count, so that its tiles cover
    // every row count of the bucket (timed at the first row count seen instead, an algorithm
    // timed at 40 rows ran 41-48 rows 1.13x slower than timing them did; benchmarks.md).
    if (!capturing && !plans_.contains(bucket_key)) {
      PS_RETURN_IF_ERROR(tune_bucket_top(bucket_key, ops, rows));
    }
    if (take_bucket_algo(key, *plan)) return cache();
  }
  if (capturing) {
    // No timing (and no caching) inside a capture: the heuristic's pick for this call only.
    uncached_ = std::move(plan);
    return uncached_.get();
  }
  if (timed) {
    PS_RETURN_IF_ERROR(time_candidates(*plan, h, rows, out, ops.x, ops.w, y, accumulate,
                                       static_cast<DType>(y_dtype) == DType::kF32));
  }
  return cache();
}

Status Gemm::time_candidates(Plan& plan, const Heuristic& h, int64_t rows, int64_t out,
                             const void* x, const void* w, void* y, bool accumulate, bool f32_out) {
  // Candidates: the heuristic's picks, plus split-K variants of those that support it (the
  // small-row GEMMs with few output tiles leave SMs idle; cuBLASLt checks each variant, and the
  // reduction goes through the workspace in f32, without atomics).
  cublasLtMatmulAlgo_t candidates[kMaxCandidates];
  int num_candidates = 0;
  for (int i = 0; i < h.num_found; ++i) candidates[num_candidates++] = h.found[i].algo;
  for (int i = 0; i < h.num_found; ++i) {
    int32_t splitk = 0;
    uint32_t schemes = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&h.found[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT,
                                          &splitk, sizeof splitk,
                                          &written) != CUBLAS_STATUS_SUCCESS ||
        splitk == 0 ||
        cublasLtMatmulAlgoCapGetAttribute(&h.found[i].algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK,
                                          &schemes, sizeof schemes,
                                          &written) != CUBLAS_STATUS_SUCCESS ||
        (schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) == 0) {
      continue;
    }
    const int32_t splits[] = {2, 4, 8};
    for (const int32_t k : splits) {
      cublasLtMatmulAlgo_t algo = h.found[i].algo;
      const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &k,
                                               sizeof k) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                               &scheme, sizeof scheme) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulAlgoCheck(lt_handle(lt_), plan.op, plan.a, plan.b, plan.c, plan.c, &algo,
                                  &check) == CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= kWorkspaceBytes && num_candidates < kMaxCandidates) {
        candidates[num_candidates++] = algo;
      }
    }
  }
  if (num_candidates > 1) {
    void* out_ptr = y;
    const size_t out_bytes =
        static_cast<size_t>(rows) * static_cast<size_t>(out) * (f32_out ? 4 : 2);
    if (accumulate) {  // time into scratch so that y keeps its value
      if (scratch_bytes_ < out_bytes) {
        if (scratch_ != nullptr) (void)cudaFree(scratch_);
        scratch_ = nullptr;
        scratch_bytes_ = 0;
        PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMalloc(&scratch_, out_bytes));
        scratch_bytes_ = out_bytes;
      }
      out_ptr = scratch_;
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
    const float alpha = 1.0f, beta = 0.0f;
    float best_ms = std::numeric_limits<float>::infinity();
    Status failed = ok_status();
    for (int i = 0; i < num_candidates && failed.ok(); ++i) {
      bool ran = true;
      for (int rep = 0; rep <= kTuneReps && ran; ++rep) {
        if (rep == 1) (void)cudaEventRecord(start, stream_);
        ran = cublasLtMatmul(lt_handle(lt_), plan.op, &alpha, w, plan.a, x, plan.b, &beta, out_ptr,
                             plan.c, out_ptr, plan.c, &candidates[i], workspace_, kWorkspaceBytes,
                             stream_) == CUBLAS_STATUS_SUCCESS;
      }
      if (!ran) continue;  // a candidate that refuses the problem is skipped
      (void)cudaEventRecord(stop, stream_);
      float ms = 0.0f;
      const cudaError_t e = cudaEventSynchronize(stop);
      if (e != cudaSuccess) {
        failed = cuda_status(e, "cudaEventSynchronize(gemm tuning)", __FILE__, __LINE__);
        break;
      }
      (void)cudaEventElapsedTime(&ms, start, stop);
      if (ms < best_ms) {
        best_ms = ms;
        plan.algo = candidates[i];
      }
    }
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    PS_RETURN_IF_ERROR(failed);
    plan.tuned = true;
  }
  return ok_status();
}

Status Gemm::check_call(const void* x, int64_t rows, int64_t in, const void* w, int64_t out,
                        const void* y, DType y_dtype, bool accumulate) const {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (rows < 0 || rows > kMax || in < 1 || in > kMax || out < 1 || out > kMax) {
    return invalid_argument("gemm: rows = " + std::to_string(rows) +
                            ", in = " + std::to_string(in) + ", out = " + std::to_string(out) +
                            ": expected rows >= 0 and in, out in [1, 2^31)");
  }
  if (x == nullptr || w == nullptr || y == nullptr) {
    return invalid_argument("gemm: x, w and y must be device pointers, got a null pointer");
  }
  if (y_dtype != DType::kBF16 && y_dtype != DType::kF32) {
    return invalid_argument("gemm: y dtype must be bf16 or f32");
  }
  if (accumulate && y_dtype != DType::kF32) {
    return invalid_argument("gemm: accumulate needs an f32 y");
  }
  if (lt_ == nullptr) return failed_precondition("gemm: used after move");
  return ok_status();
}

Status Gemm::matmul(const Plan& plan, const void* x, int64_t rows, int64_t in, const void* w,
                    int64_t out, void* y, bool accumulate) {
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  const cublasStatus_t s =
      cublasLtMatmul(lt_handle(lt_), plan.op, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y,
                     plan.c, &plan.algo, workspace_, kWorkspaceBytes, stream_);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return internal_error("cublasLtMatmul [" + std::to_string(rows) + " x " + std::to_string(in) +
                          "] x [" + std::to_string(out) + " x " + std::to_string(in) +
                          "]^T failed: " + cublasGetStatusName(s));
  }
  return ok_status();
}

Status Gemm::linear(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                    void* y, DType y_dtype, bool accumulate) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_call(x, rows, in, w, out, y, y_dtype, accumulate));
  PS_ASSIGN_OR_RETURN(const Plan* plan,
                      plan_for(Key{rows, in, out, static_cast<int>(y_dtype), false}, Operands{x, w},
                               y, accumulate));
  return matmul(*plan, x, rows, in, w, out, y, accumulate);
}

Status Gemm::linear_fp8(const uint8_t* xq, const float* x_scale, int64_t rows, int64_t in,
                        const uint8_t* wq, const float* w_scale, int64_t out, void* y,
                        DType y_dtype, bool accumulate) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_call(xq, rows, in, wq, out, y, y_dtype, accumulate));
  if (x_scale == nullptr || w_scale == nullptr) {
    return invalid_argument("gemm: x_scale and w_scale must be device pointers, got null");
  }
  if (in % 16 != 0) {
    return invalid_argument("gemm: in = " + std::to_string(in) +
                            ": float8 operands need a multiple of 16");
  }
  const auto misaligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; };
  if (misaligned(xq) || misaligned(wq) || misaligned(y)) {
    return invalid_argument("gemm: float8 x, w and y must be 16-byte aligned");
  }
  const Operands ops{xq, wq, x_scale, w_scale};
  PS_ASSIGN_OR_RETURN(Plan * plan, plan_for(Key{rows, in, out, static_cast<int>(y_dtype), true},
                                            ops, y, accumulate));
  PS_RETURN_IF_ERROR(set_scales(*plan, ops));
  return matmul(*plan, xq, rows, in, wq, out, y, accumulate);
}

}  // namespace packserve::model::cuda
