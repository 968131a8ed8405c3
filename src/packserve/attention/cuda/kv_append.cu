// kv_append.cu: writes a step's new K/V rows into their pages (issue 6, "KV append").
//   k_pages[page[i], slot[i], h, :] = k_new[i, h, :]   (v likewise), i < num_rows
// Mapping: one thread per 16-byte chunk of one (row, kv head) vector, K and V both; the
// element type only sets the chunk count, so every dtype uses the same kernel.
// Precondition (caller's): (page[i], slot[i]) distinct, page < num_pages, slot < page_size.
#include <string>

#include "packserve/attention/cuda/cuda_check.h"
#include "packserve/attention/cuda/run_cuda.h"

namespace packserve::attention::cuda {
namespace {

__global__ void kv_append_kernel(const uint4* k_new, const uint4* v_new, const int32_t* page,
                                 const int32_t* slot, int num_rows, uint4* k_pages, uint4* v_pages,
                                 int page_size, int chunks_per_row) {
  const long long total = static_cast<long long>(num_rows) * chunks_per_row;
  for (long long c = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; c < total;
       c += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(c / chunks_per_row);
    const int within = static_cast<int>(c % chunks_per_row);
    const size_t dst =
        (static_cast<size_t>(page[row]) * page_size + slot[row]) * chunks_per_row + within;
    k_pages[dst] = k_new[c];
    v_pages[dst] = v_new[c];
  }
}

}  // namespace

Status kv_append(const KvAppendArgs& a, StreamHandle stream) {
  if (a.num_rows < 0)
    return invalid_argument("kv_append: num_rows = " + std::to_string(a.num_rows) + " < 0");
  if (a.num_rows == 0) return ok_status();
  if (!a.k_new || !a.v_new || !a.page || !a.slot || !a.k_pages || !a.v_pages) {
    return invalid_argument(
        "kv_append: k_new, v_new, page, slot, k_pages and v_pages must be "
        "non-null device pointers");
  }
  const size_t row_bytes =
      static_cast<size_t>(a.num_kv_heads) * a.head_dim * dtype_size_bytes(a.dtype);
  if (a.num_kv_heads < 1 || a.head_dim < 1 || row_bytes % 16 != 0 || a.page_size < 1) {
    return invalid_argument(
        "kv_append: num_kv_heads * head_dim * dtype size = " + std::to_string(row_bytes) +
        " bytes must be a positive multiple of 16, page_size >= 1");
  }
  const int chunks = static_cast<int>(row_bytes / 16);
  const long long total = static_cast<long long>(a.num_rows) * chunks;
  const int block = 256;
  const int grid = static_cast<int>(std::min<long long>((total + block - 1) / block, 4096));
  kv_append_kernel<<<grid, block, 0, stream>>>(static_cast<const uint4*>(a.k_new),
                                               static_cast<const uint4*>(a.v_new), a.page, a.slot,
                                               a.num_rows, static_cast<uint4*>(a.k_pages),
                                               static_cast<uint4*>(a.v_pages), a.page_size, chunks);
  PS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

}  // namespace packserve::attention::cuda
