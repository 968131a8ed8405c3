// gpu_batch.h: test/bench helpers that copy a BatchData (batch_spec.h) to the device and read
// outputs back. Not part of the executor: run_cuda.h only sees DeviceBatch pointers.
//
//   DeviceBuffer  RAII cudaMalloc'ed bytes (move-only)
//   GpuBatch      device copies of q, k_pages, v_pages, the row positions, the page table and an
//                 output buffer [total_rows, num_qo_heads, head_dim] of the batch's dtype,
//                 each allocated with at least the requested capacity so a later batch of the
//                 same or smaller size can be copied in place (CUDA-graph replays).
// Errors are Status (kInternal with the CUDA call and file:line). Thread-safety: none.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "packserve/attention/batch_spec.h"
#include "packserve/attention/cuda/cuda_check.h"
#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/common/dtype.h"

namespace packserve::attention::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  // Grows to at least `bytes` (contents are lost when it grows).
  Status reserve(size_t bytes) {
    if (bytes <= bytes_ && ptr_ != nullptr) return ok_status();
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    PS_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes > 0 ? bytes : 16));
    bytes_ = bytes;
    return ok_status();
  }
  Status upload(const void* host, size_t bytes) {
    PS_RETURN_IF_ERROR(reserve(bytes));
    PS_CUDA_RETURN_IF_ERROR(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
    return ok_status();
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct GpuBatch {
  DeviceBuffer q, k_pages, v_pages, q_positions, kv_page_indptr, kv_page_indices, out;
  DeviceBatch view;  // pointers into the buffers above

  // Copies `data` in, reusing (and growing) the buffers.
  Status assign(const BatchData& data) {
    const BatchLayout& l = data.layout;
    PS_RETURN_IF_ERROR(q.upload(data.q.data(), data.q.size()));
    PS_RETURN_IF_ERROR(k_pages.upload(data.k_pages.data(), data.k_pages.size()));
    PS_RETURN_IF_ERROR(v_pages.upload(data.v_pages.data(), data.v_pages.size()));
    const std::vector<int32_t> positions = l.row_positions();
    PS_RETURN_IF_ERROR(q_positions.upload(positions.data(), positions.size() * 4));
    PS_RETURN_IF_ERROR(kv_page_indptr.upload(l.kv_page_indptr.data(), l.kv_page_indptr.size() * 4));
    PS_RETURN_IF_ERROR(
        kv_page_indices.upload(l.kv_page_indices.data(), l.kv_page_indices.size() * 4));
    PS_RETURN_IF_ERROR(out.reserve(l.q_elements() * dtype_size_bytes(l.dtype)));
    view.q = q.get();
    view.k_pages = k_pages.get();
    view.v_pages = v_pages.get();
    view.q_positions = static_cast<const int32_t*>(q_positions.get());
    view.kv_page_indptr = static_cast<const int32_t*>(kv_page_indptr.get());
    view.kv_page_indices = static_cast<const int32_t*>(kv_page_indices.get());
    view.kv_fp8 = l.kv_fp8;
    view.page_size = l.page_size;
    view.sm_scale = data.sm_scale;
    view.out = out.get();
    return ok_status();
  }

  // Fills the output with 0xFF bytes: NaN in bf16 and f16, so unwritten elements fail.
  Status poison_output(StreamHandle stream) {
    PS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out.get(), 0xFF, out.bytes(), stream));
    return ok_status();
  }

  // Reads the output back as f32 ([total_rows, num_qo_heads, head_dim] of `layout`).
  Result<std::vector<float>> read_output(const BatchLayout& layout) const {
    const size_t n = layout.q_elements();
    std::vector<std::byte> raw(n * dtype_size_bytes(layout.dtype));
    PS_CUDA_RETURN_IF_ERROR(cudaMemcpy(raw.data(), out.get(), raw.size(), cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = load_as_float(raw.data(), i, layout.dtype);
    return f;
  }
};

}  // namespace packserve::attention::cuda
