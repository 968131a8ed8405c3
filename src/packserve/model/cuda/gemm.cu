// gemm.cu: Gemm (gemm.h) on cublasGemmEx. Row-major y[rows, out] = x w^T is, in cuBLAS's
// column-major view, Y' [out, rows] = W'^T [out, in] X' [in, rows] with W' = w viewed as
// [in, out] (ld in) and X' = x viewed as [in, rows] (ld in): op(A) = T, op(B) = N.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <limits>
#include <string>
#include <utility>

#include "packserve/model/cuda/gemm.h"

namespace packserve::model::cuda {

Result<Gemm> Gemm::create(attention::cuda::StreamHandle stream) {
  Gemm g;
  cublasHandle_t h = nullptr;
  cublasStatus_t s = cublasCreate(&h);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return internal_error(std::string("cublasCreate failed: ") + cublasGetStatusName(s));
  }
  g.handle_ = h;
  s = cublasSetStream(h, stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return internal_error(std::string("cublasSetStream failed: ") + cublasGetStatusName(s));
  }
  return Result<Gemm>(std::move(g));
}

Gemm::Gemm(Gemm&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
Gemm& Gemm::operator=(Gemm&& other) noexcept {
  std::swap(handle_, other.handle_);
  return *this;
}
Gemm::~Gemm() {
  if (handle_ != nullptr) (void)cublasDestroy(handle_);
}

Status Gemm::linear(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                    void* y, DType y_dtype, bool accumulate) {
  if (rows == 0) return ok_status();
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (rows < 0 || rows > kMax || in < 1 || in > kMax || out < 1 || out > kMax) {
    return invalid_argument("gemm: rows = " + std::to_string(rows) + ", in = " +
                            std::to_string(in) + ", out = " + std::to_string(out) +
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
  if (handle_ == nullptr) return failed_precondition("gemm: used after move");
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  const cudaDataType_t y_type = y_dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  const cublasStatus_t s = cublasGemmEx(
      handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(rows),
      static_cast<int>(in), &alpha, w, CUDA_R_16BF, static_cast<int>(in), x, CUDA_R_16BF,
      static_cast<int>(in), &beta, y, y_type, static_cast<int>(out), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    return internal_error("cublasGemmEx [" + std::to_string(rows) + " x " + std::to_string(in) +
                          "] x [" + std::to_string(out) + " x " + std::to_string(in) +
                          "]^T failed: " + cublasGetStatusName(s));
  }
  return ok_status();
}

}  // namespace packserve::model::cuda
