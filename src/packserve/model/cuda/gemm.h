// gemm.h: the bf16 linear layer of the CUDA forward through cuBLAS (cublasGemmEx, f32
// accumulate, CUBLAS_COMPUTE_32F), in Hugging Face's weight layout:
//   y [rows, out] = x [rows, in] * w^T        (w [out, in] row-major, x bf16)
//   y (f32 only) += x * w^T with accumulate   (the residual add fused into the GEMM, beta = 1)
// y is bf16 (rounded once) or f32. No CUDA header (STYLE.md §1).
// Numerics: cuBLAS picks its algorithm from the shape, so the rounding of a row may depend on
// the number of rows in the batch (not bit-reproducible across batch compositions).
// Thread-safety: one Gemm per stream; calls are asynchronous on that stream.
#pragma once

#include <cstdint>
#include <memory>

#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/common/dtype.h"
#include "packserve/common/status.h"

struct cublasContext;  // cublasHandle_t is cublasContext*

namespace packserve::model::cuda {

class Gemm {
 public:
  // Creates the cuBLAS handle bound to `stream`. kInternal when cuBLAS fails to initialise.
  static Result<Gemm> create(attention::cuda::StreamHandle stream);
  Gemm(Gemm&& other) noexcept;
  Gemm& operator=(Gemm&& other) noexcept;
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  ~Gemm();

  // kInvalidArgument for non-positive sizes, null pointers, a y dtype other than bf16/f32 or
  // accumulate into bf16; kInternal naming the cuBLAS status. rows == 0 is a no-op.
  Status linear(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                void* y, DType y_dtype, bool accumulate = false);

 private:
  Gemm() = default;
  cublasContext* handle_ = nullptr;
};

}  // namespace packserve::model::cuda
