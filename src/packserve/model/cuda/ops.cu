// ops.cu: kernels of ops.h. One CTA per row for the row-wise kernels (rmsnorm, qkv_epilogue),
// grid-stride loops for the element-wise ones. Reductions: per-thread f32 partial sums, warp
// shuffles, then one value per warp through shared memory (fixed order: deterministic).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "packserve/model/cuda/device_util.cuh"
#include "packserve/model/cuda/ops.h"

namespace packserve::model::cuda {
namespace {

constexpr int kRowThreads = 256;

__device__ __forceinline__ float load_bf16(const uint16_t* p, size_t i) {
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
}
__device__ __forceinline__ void store_bf16(uint16_t* p, size_t i, float v) {
  reinterpret_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the CTA (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  float total = 0.0f;
  const int num_warps = blockDim.x / 32;
  for (int w = 0; w < num_warps; ++w) total += warp_sums[w];
  __syncthreads();  // warp_sums may be reused by the next call
  return total;
}

__global__ void embed_gather_kernel(const uint16_t* embed, const int32_t* token_ids, int hidden,
                                    float* x) {
  const size_t r = blockIdx.x;
  const uint16_t* e = embed + static_cast<size_t>(token_ids[r]) * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) x[r * hidden + j] = load_bf16(e, j);
}

__global__ void rmsnorm_kernel(const float* x, const int32_t* row_index, int hidden,
                               const float* w, float eps, uint16_t* y) {
  const size_t i = blockIdx.x;
  const size_t s = row_index != nullptr ? static_cast<size_t>(row_index[i]) : i;
  const float* xr = x + s * hidden;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) ss += xr[j] * xr[j];
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    store_bf16(y, i * hidden + j, xr[j] * inv * w[j]);
  }
}

// Dynamic shared memory: the row's Q + 2 KV floats, then head_dim/2 (cos, sin) pairs.
__global__ void qkv_epilogue_kernel(QkvEpilogueArgs a) {
  extern __shared__ float smem[];
  const int q_size = a.num_qo_heads * a.head_dim;
  const int kv_size = a.num_kv_heads * a.head_dim;
  const int stride = q_size + 2 * kv_size;
  const int half = a.head_dim / 2;
  float* row = smem;
  float* cos_sin = smem + stride;
  const size_t r = blockIdx.x;
  for (int i = threadIdx.x; i < stride; i += blockDim.x) {
    row[i] = a.qkv[r * stride + i] + (a.bias != nullptr ? a.bias[i] : 0.0f);
  }
  const double pos = static_cast<double>(a.positions[r]);
  for (int p = threadIdx.x; p < half; p += blockDim.x) {
    double s, c;
    sincos(pos * a.inv_freq[p], &s, &c);
    cos_sin[2 * p] = static_cast<float>(c);
    cos_sin[2 * p + 1] = static_cast<float>(s);
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, num_warps = blockDim.x / 32;
  for (int head = warp; head < a.num_qo_heads + a.num_kv_heads; head += num_warps) {
    float* h = row + head * a.head_dim;  // k heads follow q heads in the fused row
    if (a.q_norm != nullptr) {
      const float* w = head < a.num_qo_heads ? a.q_norm : a.k_norm;
      float ss = 0.0f;
      for (int i = lane; i < a.head_dim; i += 32) ss += h[i] * h[i];
      const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(a.head_dim) + a.eps);
      for (int i = lane; i < a.head_dim; i += 32) h[i] = h[i] * inv * w[i];
      __syncwarp();
    }
    for (int p = lane; p < half; p += 32) {
      const float x0 = h[p], x1 = h[p + half];
      const float c = cos_sin[2 * p], s = cos_sin[2 * p + 1];
      h[p] = x0 * c - x1 * s;
      h[p + half] = x1 * c + x0 * s;
    }
    __syncwarp();
  }
  __syncthreads();
  for (int i = threadIdx.x; i < q_size; i += blockDim.x) store_bf16(a.q_out, r * q_size + i, row[i]);
  const size_t dst =
      (static_cast<size_t>(a.kv_page[r]) * a.page_size + static_cast<size_t>(a.kv_slot[r])) *
      kv_size;
  for (int i = threadIdx.x; i < kv_size; i += blockDim.x) {
    store_bf16(a.k_pages, dst + i, row[q_size + i]);
    store_bf16(a.v_pages, dst + i, row[q_size + kv_size + i]);
  }
}

__global__ void silu_mul_kernel(const uint16_t* gate_up, size_t rows, int inner, uint16_t* y) {
  const size_t n = rows * inner;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / inner, c = i % inner;
    const float g = load_bf16(gate_up, r * 2 * inner + c);
    const float u = load_bf16(gate_up, r * 2 * inner + inner + c);
    store_bf16(y, i, g / (1.0f + __expf(-g)) * u);
  }
}

__device__ __forceinline__ uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

__global__ void fill_random_kernel(void* out, size_t n, bool bf16, uint64_t seed, float mean,
                                   float std) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = mix32(static_cast<uint32_t>(i) ^ mix32(static_cast<uint32_t>(i >> 32) ^
                                                        static_cast<uint32_t>(seed)) ^
                       static_cast<uint32_t>(seed >> 32) * 0x9e3779b9u);
    float acc = 0.0f;
    for (int k = 0; k < 4; ++k) {
      h = mix32(h + 0x9e3779b9u);
      acc += static_cast<float>(h & 0xffffff) * (1.0f / 16777216.0f);
    }
    const float v = mean + std * (acc - 2.0f) * 1.7320508f;  // 4 uniforms: variance 1/3
    if (bf16) {
      store_bf16(static_cast<uint16_t*>(out), i, v);
    } else {
      static_cast<float*>(out)[i] = v;
    }
  }
}

Status launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return ok_status();
  return internal_error(std::string(what) + " launch failed: " + cudaGetErrorName(e) + " (" +
                        cudaGetErrorString(e) + ")");
}

Status check_positive(int v, const char* name) {
  if (v > 0) return ok_status();
  return invalid_argument(std::string(name) + " = " + std::to_string(v) + ": expected > 0");
}

int grid_for(size_t n) {
  const size_t blocks = (n + 255) / 256;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

}  // namespace

Status embed_gather(const uint16_t* embed, const int32_t* token_ids, int rows, int hidden,
                    float* x, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(hidden, "hidden"));
  embed_gather_kernel<<<rows, kRowThreads, 0, stream>>>(embed, token_ids, hidden, x);
  return launched("embed_gather");
}

Status rmsnorm(const float* x, const int32_t* row_index, int rows, int hidden, const float* w,
               float eps, uint16_t* y, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(hidden, "hidden"));
  rmsnorm_kernel<<<rows, kRowThreads, 0, stream>>>(x, row_index, hidden, w, eps, y);
  return launched("rmsnorm");
}

Status qkv_epilogue(const QkvEpilogueArgs& a, StreamHandle stream) {
  if (a.rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(a.rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(a.num_qo_heads, "num_qo_heads"));
  PS_RETURN_IF_ERROR(check_positive(a.num_kv_heads, "num_kv_heads"));
  PS_RETURN_IF_ERROR(check_positive(a.head_dim, "head_dim"));
  PS_RETURN_IF_ERROR(check_positive(a.page_size, "page_size"));
  if (a.head_dim % 2 != 0) {
    return invalid_argument("head_dim = " + std::to_string(a.head_dim) + ": expected even");
  }
  if ((a.q_norm == nullptr) != (a.k_norm == nullptr)) {
    return invalid_argument("q_norm, k_norm: expected both or neither");
  }
  const size_t smem_bytes =
      (static_cast<size_t>(a.num_qo_heads + 2 * a.num_kv_heads) * a.head_dim + a.head_dim) *
      sizeof(float);
  if (smem_bytes > 48 * 1024) {
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        qkv_epilogue_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(smem_bytes)));
  }
  qkv_epilogue_kernel<<<a.rows, kRowThreads, smem_bytes, stream>>>(a);
  return launched("qkv_epilogue");
}

Status silu_mul(const uint16_t* gate_up, int rows, int inner, uint16_t* y, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(inner, "inner"));
  const size_t n = static_cast<size_t>(rows) * inner;
  silu_mul_kernel<<<grid_for(n), 256, 0, stream>>>(gate_up, rows, inner, y);
  return launched("silu_mul");
}

Status fill_random(void* out, size_t n, DType dtype, uint64_t seed, float mean, float std,
                   StreamHandle stream) {
  if (dtype != DType::kBF16 && dtype != DType::kF32) {
    return invalid_argument("fill_random dtype: expected bf16 or f32");
  }
  if (n == 0) return ok_status();
  fill_random_kernel<<<grid_for(n), 256, 0, stream>>>(out, n, dtype == DType::kBF16, seed, mean,
                                                       std);
  return launched("fill_random");
}

}  // namespace packserve::model::cuda
