// ops.cu: kernels of ops.h. One CTA per row for the row-wise kernels (rmsnorm, qkv_epilogue),
// grid-stride loops for the element-wise ones. Reductions: per-thread f32 partial sums, warp
// shuffles, then one value per warp through shared memory (fixed order: deterministic).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <climits>
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

__global__ void rmsnorm_kernel(const float* x, const int32_t* row_index, int hidden, const float* w,
                               float eps, uint16_t* y) {
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

// One pass: each thread keeps its up to kMaxVec float4 of the row in registers (hidden % 4 == 0,
// hidden <= 4 * kMaxVec * kRowThreads), so x is read once. Same sums as rmsnorm_kernel up to
// the order of the f32 partial sums.
constexpr int kMaxVec = 8;
__global__ void rmsnorm_vec_kernel(const float* x, const int32_t* row_index, int hidden,
                                   const float* w, float eps, uint16_t* y) {
  const size_t i = blockIdx.x;
  const size_t s = row_index != nullptr ? static_cast<size_t>(row_index[i]) : i;
  const int n4 = hidden / 4;
  const float4* xr = reinterpret_cast<const float4*>(x + s * hidden);
  float4 v[kMaxVec];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int j = threadIdx.x + k * kRowThreads;
    v[k] = j < n4 ? xr[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  __nv_bfloat162* yr = reinterpret_cast<__nv_bfloat162*>(y + i * hidden);
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int j = threadIdx.x + k * kRowThreads;
    if (j < n4) {
      const float4 g = w4[j];
      yr[2 * j] = __floats2bfloat162_rn(v[k].x * inv * g.x, v[k].y * inv * g.y);
      yr[2 * j + 1] = __floats2bfloat162_rn(v[k].z * inv * g.z, v[k].w * inv * g.w);
    }
  }
}

__global__ void rope_cos_sin_kernel(const int32_t* positions, const double* inv_freq, int half,
                                    float* cos_sin) {
  const size_t r = blockIdx.x;
  const double pos = static_cast<double>(positions[r]);
  for (int p = threadIdx.x; p < half; p += blockDim.x) {
    double s, c;
    sincos(pos * inv_freq[p], &s, &c);
    cos_sin[(r * half + p) * 2] = static_cast<float>(c);
    cos_sin[(r * half + p) * 2 + 1] = static_cast<float>(s);
  }
}

// One warp per (row, head); lane l holds elements j * 32 + l (j < kPerLane) of the head, so
// the RoPE pair (p, p + head_dim / 2) sits in one lane at slots j and j + kPerLane / 2. The
// norm sums in the same order as a loop over i = lane, lane + 32, ... followed by warp_sum.
constexpr int kEpilogueWarps = 8;
template <int kPerLane>
__global__ void qkv_epilogue_kernel(QkvEpilogueArgs a) {
  constexpr int kDim = kPerLane * 32, kHalf = kDim / 2, kHalfSlots = kPerLane / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = blockIdx.y * kEpilogueWarps + warp;
  const int num_heads = a.num_qo_heads + 2 * a.num_kv_heads;
  if (head >= num_heads) return;
  const size_t r = blockIdx.x;
  const float* src = a.qkv + r * num_heads * kDim + head * kDim;
  float v[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    v[j] = src[j * 32 + lane] + (a.bias != nullptr ? a.bias[head * kDim + j * 32 + lane] : 0.0f);
  }
  const int first_v = a.num_qo_heads + a.num_kv_heads;
  if (head < first_v) {
    if (a.q_norm != nullptr) {
      const float* w = head < a.num_qo_heads ? a.q_norm : a.k_norm;
      float ss = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) ss += v[j] * v[j];
      const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(kDim) + a.eps);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) v[j] = v[j] * inv * w[j * 32 + lane];
    }
#pragma unroll
    for (int j = 0; j < kHalfSlots; ++j) {
      const int p = j * 32 + lane;
      float c, s;
      if (a.cos_sin != nullptr) {
        c = a.cos_sin[(r * kHalf + p) * 2];
        s = a.cos_sin[(r * kHalf + p) * 2 + 1];
      } else {
        double sd, cd;
        sincos(static_cast<double>(a.positions[r]) * a.inv_freq[p], &sd, &cd);
        c = static_cast<float>(cd);
        s = static_cast<float>(sd);
      }
      const float x0 = v[j], x1 = v[j + kHalfSlots];
      v[j] = x0 * c - x1 * s;
      v[j + kHalfSlots] = x1 * c + x0 * s;
    }
  }
  uint16_t* dst;
  if (head < a.num_qo_heads) {
    dst = a.q_out + r * a.num_qo_heads * kDim + head * kDim;
  } else {
    const size_t slot =
        (static_cast<size_t>(a.kv_page[r]) * a.page_size + static_cast<size_t>(a.kv_slot[r])) *
        a.num_kv_heads * kDim;
    dst = head < first_v ? a.k_pages + slot + (head - a.num_qo_heads) * kDim
                         : a.v_pages + slot + (head - first_v) * kDim;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) store_bf16(dst, j * 32 + lane, v[j]);
}

// 8 elements (16 bytes of gate, of up and of y) per thread; inner % 8 == 0.
__global__ void silu_mul_vec_kernel(const uint16_t* gate_up, size_t rows, int inner, uint16_t* y) {
  const size_t n8 = rows * inner / 8;
  const int inner8 = inner / 8;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n8;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / inner8, c = i % inner8;
    const uint4 g4 = reinterpret_cast<const uint4*>(gate_up)[r * 2 * inner8 + c];
    const uint4 u4 = reinterpret_cast<const uint4*>(gate_up)[r * 2 * inner8 + inner8 + c];
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&g4);
    const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&u4);
    uint4 o4;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&o4);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 g = __bfloat1622float2(g2[k]), u = __bfloat1622float2(u2[k]);
      o2[k] = __floats2bfloat162_rn(g.x / (1.0f + __expf(-g.x)) * u.x,
                                    g.y / (1.0f + __expf(-g.y)) * u.y);
    }
    reinterpret_cast<uint4*>(y)[i] = o4;
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
    uint32_t h = mix32(static_cast<uint32_t>(i) ^
                       mix32(static_cast<uint32_t>(i >> 32) ^ static_cast<uint32_t>(seed)) ^
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

// Argmax of one row per CTA (ops.h): each thread scans its strided share in increasing index
// order and keeps the first maximum (strict >, so NaN and later ties never replace it), then
// the block reduces (value, index) pairs by (larger value, then lower index).
constexpr int kArgmaxThreads = 1024;

__device__ __forceinline__ void keep_better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_rows_kernel(const float* logits, int vocab, int32_t* out) {
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  float v = -CUDART_INF_F;
  int idx = INT_MAX;
  if (vocab % 4 == 0) {  // rows stay 16-byte aligned
    const auto* row4 = reinterpret_cast<const float4*>(row);
    for (int q = threadIdx.x; q < vocab / 4; q += kArgmaxThreads) {
      const float4 x = row4[q];
      if (x.x > v) v = x.x, idx = 4 * q;
      if (x.y > v) v = x.y, idx = 4 * q + 1;
      if (x.z > v) v = x.z, idx = 4 * q + 2;
      if (x.w > v) v = x.w, idx = 4 * q + 3;
    }
  } else {
    for (int j = threadIdx.x; j < vocab; j += kArgmaxThreads) {
      if (row[j] > v) v = row[j], idx = j;
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    keep_better(v, idx, __shfl_down_sync(0xffffffffu, v, off),
                __shfl_down_sync(0xffffffffu, idx, off));
  }
  __shared__ float warp_v[kArgmaxThreads / 32];
  __shared__ int warp_i[kArgmaxThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_v[warp] = v;
    warp_i[warp] = idx;
  }
  __syncthreads();
  if (warp != 0) return;
  v = warp_v[lane];
  idx = warp_i[lane];
  for (int off = 16; off > 0; off /= 2) {
    keep_better(v, idx, __shfl_down_sync(0xffffffffu, v, off),
                __shfl_down_sync(0xffffffffu, idx, off));
  }
  if (lane == 0) out[blockIdx.x] = v == -CUDART_INF_F ? 0 : idx;
}

// sample_rows (ops.h): one CTA of kSampleThreads per row, common/temperature_sample.h's
// arithmetic in its order. The walk is serial (one thread) so that its float64 sums are the
// host's, bit for bit; the block it walks is staged in shared memory first.
constexpr int kSampleThreads = 1024;
constexpr int kSampleLanes = sample_math::kBlockLanes;
constexpr int kSampleBlock = static_cast<int>(sample_math::kWeightBlock);

// Dynamic shared memory of sample_rows_kernel: block sums (double) and lane sums (float).
constexpr int kMaxSampleVocab = 1 << 20;  // 40 KiB of dynamic shared memory
size_t sample_rows_smem(int vocab) {
  const size_t blocks = (static_cast<size_t>(vocab) + kSampleBlock - 1) / kSampleBlock;
  return blocks * sizeof(double) + blocks * kSampleLanes * sizeof(float);
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_rows_kernel(float* logits, int vocab, const TemperatureDraw* draws, int32_t* out) {
  extern __shared__ double block_sums[];  // [blocks], then float lane sums [blocks * 8]
  __shared__ float staged[kSampleBlock];
  __shared__ float warp_max[kSampleThreads / 32];
  __shared__ int walk_block;
  __shared__ double walk_cum;
  const int blocks = (vocab + kSampleBlock - 1) / kSampleBlock;
  float* lane_sums = reinterpret_cast<float*>(block_sums + blocks);
  float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  const TemperatureDraw d = draws[blockIdx.x];
  const int t = threadIdx.x;

  // m = max_ignoring_nan(row): NaN compares false, fmaxf drops NaN.
  float m = -CUDART_INF_F;
  for (int j = t; j < vocab; j += kSampleThreads) m = row[j] > m ? row[j] : m;
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (t % 32 == 0) warp_max[t / 32] = m;
  __syncthreads();
  m = warp_max[0];
  for (int w = 1; w < kSampleThreads / 32; ++w) m = fmaxf(m, warp_max[w]);

  if (m == CUDART_INF_F || m == -CUDART_INF_F) {  // degenerate: equally likely at m
    if (t != 0) return;
    long long count = 0;
    for (int j = 0; j < vocab; ++j) count += row[j] == m ? 1 : 0;
    int32_t token = 0;
    if (count > 0) {
      const double p = 1.0 / static_cast<double>(count);
      double cum = 0.0;
      for (int j = 0; j < vocab; ++j) {
        if (row[j] != m) continue;
        token = j;
        cum = __dadd_rn(cum, p);
        if (cum > d.u) break;
      }
    }
    out[blockIdx.x] = token;
    return;
  }

  // Weights in place of the logits.
  for (int j = t; j < vocab; j += kSampleThreads) {
    row[j] = sample_math::weight(row[j], m, d.inv_temperature, d.min_p);
  }
  __syncthreads();
  // Lane l of block b: w[8k + l] of the block's whole octets, in order.
  for (int task = t; task < blocks * kSampleLanes; task += kSampleThreads) {
    const int b = task / kSampleLanes, l = task % kSampleLanes;
    const int len = min(kSampleBlock, vocab - b * kSampleBlock);
    const float* w = row + static_cast<size_t>(b) * kSampleBlock;
    const int whole = len - len % kSampleLanes;
    float s = 0.0f;
    for (int i = l; i < whole; i += kSampleLanes) s = sample_math::add(s, w[i]);
    lane_sums[task] = s;
  }
  __syncthreads();
  // Block b: its tail in order from zero, then lanes 0..7.
  for (int b = t; b < blocks; b += kSampleThreads) {
    const int len = min(kSampleBlock, vocab - b * kSampleBlock);
    const float* w = row + static_cast<size_t>(b) * kSampleBlock;
    float s = 0.0f;
    for (int i = len - len % kSampleLanes; i < len; ++i) s = sample_math::add(s, w[i]);
    for (int l = 0; l < kSampleLanes; ++l) s = sample_math::add(s, lane_sums[b * kSampleLanes + l]);
    block_sums[b] = static_cast<double>(s);
  }
  __syncthreads();
  double target = 0.0;
  if (t == 0) {
    double total = 0.0;
    for (int b = 0; b < blocks; ++b) total = __dadd_rn(total, block_sums[b]);
    target = __dmul_rn(d.u, total);
    double cum = 0.0;
    int b = 0;
    for (; b + 1 < blocks; ++b) {
      if (__dadd_rn(cum, block_sums[b]) > target) break;
      cum = __dadd_rn(cum, block_sums[b]);
    }
    walk_block = b;
    walk_cum = cum;
  }
  __syncthreads();
  const int b = walk_block;
  const int begin = b * kSampleBlock;
  const int len = min(kSampleBlock, vocab - begin);
  for (int i = t; i < len; i += kSampleThreads) staged[i] = row[begin + i];
  __syncthreads();
  if (t != 0) return;
  double cum = walk_cum;
  int last_kept = -1;
  for (int i = 0; i < len; ++i) {
    const float w = staged[i];
    if (w == 0.0f) continue;
    last_kept = begin + i;
    cum = __dadd_rn(cum, static_cast<double>(w));
    if (cum > target) break;
  }
  if (last_kept < 0) {  // rounding fallback: the last nonzero weight before the block
    last_kept = 0;
    for (int i = begin - 1; i >= 0; --i) {
      if (row[i] != 0.0f) {
        last_kept = i;
        break;
      }
    }
  }
  out[blockIdx.x] = last_kept;
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

Status embed_gather(const uint16_t* embed, const int32_t* token_ids, int rows, int hidden, float* x,
                    StreamHandle stream) {
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
  if (hidden % 4 == 0 && hidden <= 4 * kMaxVec * kRowThreads) {
    rmsnorm_vec_kernel<<<rows, kRowThreads, 0, stream>>>(x, row_index, hidden, w, eps, y);
  } else {
    rmsnorm_kernel<<<rows, kRowThreads, 0, stream>>>(x, row_index, hidden, w, eps, y);
  }
  return launched("rmsnorm");
}

Status rope_cos_sin(const int32_t* positions, int rows, const double* inv_freq, int head_dim,
                    float* cos_sin, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(head_dim, "head_dim"));
  rope_cos_sin_kernel<<<rows, 64, 0, stream>>>(positions, inv_freq, head_dim / 2, cos_sin);
  return launched("rope_cos_sin");
}

Status qkv_epilogue(const QkvEpilogueArgs& a, StreamHandle stream) {
  if (a.rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(a.rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(a.num_qo_heads, "num_qo_heads"));
  PS_RETURN_IF_ERROR(check_positive(a.num_kv_heads, "num_kv_heads"));
  PS_RETURN_IF_ERROR(check_positive(a.page_size, "page_size"));
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) {
    return invalid_argument("head_dim = " + std::to_string(a.head_dim) +
                            ": expected 64, 128 or 256");
  }
  if ((a.q_norm == nullptr) != (a.k_norm == nullptr)) {
    return invalid_argument("q_norm, k_norm: expected both or neither");
  }
  const dim3 grid(static_cast<unsigned>(a.rows),
                  static_cast<unsigned>((a.num_qo_heads + 2 * a.num_kv_heads + kEpilogueWarps - 1) /
                                        kEpilogueWarps));
  const int threads = 32 * kEpilogueWarps;
  if (a.head_dim == 64) qkv_epilogue_kernel<2><<<grid, threads, 0, stream>>>(a);
  if (a.head_dim == 128) qkv_epilogue_kernel<4><<<grid, threads, 0, stream>>>(a);
  if (a.head_dim == 256) qkv_epilogue_kernel<8><<<grid, threads, 0, stream>>>(a);
  return launched("qkv_epilogue");
}

Status silu_mul(const uint16_t* gate_up, int rows, int inner, uint16_t* y, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(inner, "inner"));
  const size_t n = static_cast<size_t>(rows) * inner;
  if (inner % 8 == 0) {
    silu_mul_vec_kernel<<<grid_for(n / 8), 256, 0, stream>>>(gate_up, rows, inner, y);
  } else {
    silu_mul_kernel<<<grid_for(n), 256, 0, stream>>>(gate_up, rows, inner, y);
  }
  return launched("silu_mul");
}

Status argmax_rows(const float* logits, int rows, int vocab, int32_t* out, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(vocab, "vocab"));
  argmax_rows_kernel<<<rows, kArgmaxThreads, 0, stream>>>(logits, vocab, out);
  return launched("argmax_rows");
}

Status sample_rows(float* logits, int rows, int vocab, const TemperatureDraw* draws, int32_t* out,
                   StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(vocab, "vocab"));
  if (vocab > kMaxSampleVocab) {
    return invalid_argument("sample_rows: vocab = " + std::to_string(vocab) +
                            ": expected at most " + std::to_string(kMaxSampleVocab));
  }
  sample_rows_kernel<<<rows, kSampleThreads, sample_rows_smem(vocab), stream>>>(logits, vocab,
                                                                                draws, out);
  return launched("sample_rows");
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
