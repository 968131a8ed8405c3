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

// sample_rows (ops.h): one CTA of kSampleThreads per row, common/sample_draw.h's arithmetic in
// its order. The logits are read, never written (a row left to the host keeps them). Every
// float64 sum whose order the header fixes runs in one thread, so its bits are the host's;
// the float32 block sums run as the header's lanes.
constexpr int kSampleThreads = 1024;
constexpr int kSampleWarps = kSampleThreads / 32;
constexpr int kSampleLanes = sample_math::kBlockLanes;
constexpr int kSampleBlock = static_cast<int>(sample_math::kWeightBlock);
constexpr int kMaxSampleVocab = 1 << 20;

// Dynamic shared memory of sample_rows_kernel: block sums (double), block maxima (float),
// lane sums and lane maxima (float, 8 per block), then the candidate keys.
size_t sample_rows_smem(int vocab) {
  const size_t blocks = (static_cast<size_t>(vocab) + kSampleBlock - 1) / kSampleBlock;
  return blocks * sizeof(double) + blocks * sizeof(float) +
         2 * blocks * kSampleLanes * sizeof(float) + kMaxSampleCandidates * sizeof(uint64_t);
}

struct SampleSmem {
  double* block_sums;  // [blocks]
  float* block_max;    // [blocks]
  float* lane_sums;    // [blocks * 8]
  float* lane_max;     // [blocks * 8]
  uint64_t* keys;      // [kMaxSampleCandidates]
};

// Reduces v over the CTA with op (every thread gets the result); `red` holds kSampleWarps.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* red) {
  for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();  // red may still be read by the previous reduction
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < kSampleWarps; ++w) v = op(v, red[w]);
  return v;
}

// Block sums of the weights (temperature_sample.h's lanes and order) into s.block_sums, and
// with `maxima` each block's largest weight into s.block_max.
__device__ void weight_block_sums(const float* row, int vocab, float m, float inv_t, float min_p,
                                  const SampleSmem& s, bool maxima) {
  const int blocks = (vocab + kSampleBlock - 1) / kSampleBlock;
  // Lane l of block b: w[8k + l] of the block's whole octets, in order.
  for (int task = threadIdx.x; task < blocks * kSampleLanes; task += kSampleThreads) {
    const int b = task / kSampleLanes, l = task % kSampleLanes;
    const int len = min(kSampleBlock, vocab - b * kSampleBlock);
    const float* x = row + static_cast<size_t>(b) * kSampleBlock;
    const int whole = len - len % kSampleLanes;
    float sum = 0.0f, mx = 0.0f;
    for (int i = l; i < whole; i += kSampleLanes) {
      const float w = sample_math::weight(x[i], m, inv_t, min_p);
      sum = sample_math::add(sum, w);
      mx = fmaxf(mx, w);
    }
    s.lane_sums[task] = sum;
    s.lane_max[task] = mx;
  }
  __syncthreads();
  // Block b: its tail in order from zero, then lanes 0..7.
  for (int b = threadIdx.x; b < blocks; b += kSampleThreads) {
    const int len = min(kSampleBlock, vocab - b * kSampleBlock);
    const float* x = row + static_cast<size_t>(b) * kSampleBlock;
    float sum = 0.0f, mx = 0.0f;
    for (int i = len - len % kSampleLanes; i < len; ++i) {
      const float w = sample_math::weight(x[i], m, inv_t, min_p);
      sum = sample_math::add(sum, w);
      mx = fmaxf(mx, w);
    }
    for (int l = 0; l < kSampleLanes; ++l) {
      sum = sample_math::add(sum, s.lane_sums[b * kSampleLanes + l]);
      mx = fmaxf(mx, s.lane_max[b * kSampleLanes + l]);
    }
    s.block_sums[b] = static_cast<double>(sum);
    if (maxima) s.block_max[b] = mx;
  }
  __syncthreads();
}

// Thread 0: the block sums added in order (float64).
__device__ double blocks_total(const SampleSmem& s, int blocks) {
  double total = 0.0;
  for (int b = 0; b < blocks; ++b) total = __dadd_rn(total, s.block_sums[b]);
  return total;
}

// sample_temperature's walk (thread 0's result; every thread must call it).
__device__ int32_t temperature_token(const float* row, int vocab, float m, const SampleDraw& d,
                                     const SampleSmem& s, float* staged) {
  __shared__ int walk_block;
  __shared__ double walk_cum, walk_target;
  const int blocks = (vocab + kSampleBlock - 1) / kSampleBlock;
  weight_block_sums(row, vocab, m, d.inv_temperature, d.min_p, s, false);
  if (threadIdx.x == 0) {
    const double target = __dmul_rn(d.u, blocks_total(s, blocks));
    double cum = 0.0;
    int b = 0;
    for (; b + 1 < blocks; ++b) {
      if (__dadd_rn(cum, s.block_sums[b]) > target) break;
      cum = __dadd_rn(cum, s.block_sums[b]);
    }
    walk_block = b;
    walk_cum = cum;
    walk_target = target;
  }
  __syncthreads();
  const int begin = walk_block * kSampleBlock;
  const int len = min(kSampleBlock, vocab - begin);
  for (int i = threadIdx.x; i < len; i += kSampleThreads) {
    staged[i] = sample_math::weight(row[begin + i], m, d.inv_temperature, d.min_p);
  }
  __syncthreads();
  if (threadIdx.x != 0) return 0;
  double cum = walk_cum;
  for (int i = 0; i < len; ++i) {
    if (staged[i] == 0.0f) continue;
    cum = __dadd_rn(cum, static_cast<double>(staged[i]));
    if (cum > walk_target) return begin + i;
  }
  for (int i = len - 1; i >= 0; --i) {  // rounding fallback: the block's last nonzero weight
    if (staged[i] != 0.0f) return begin + i;
  }
  for (int i = begin - 1; i >= 0; --i) {  // or the last one before it
    if (sample_math::weight(row[i], m, d.inv_temperature, d.min_p) != 0.0f) return i;
  }
  return 0;
}

__device__ __forceinline__ float key_weight(uint64_t key) {
  return __int_as_float(static_cast<int32_t>(key >> 32));
}
__device__ __forceinline__ int32_t key_token(uint64_t key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
}

// The top-k / top-p draw (thread 0's result; every thread must call it); -1 when the row has
// more than kMaxSampleCandidates candidates above its floor (or the floor proves too high).
__device__ int32_t ordered_token(const float* row, int vocab, float m, const SampleDraw& d,
                                 const SampleSmem& s, float* red) {
  __shared__ int count;
  __shared__ float floor_w;
  const int blocks = (vocab + kSampleBlock - 1) / kSampleBlock;
  const int t = threadIdx.x;
  weight_block_sums(row, vocab, m, d.inv_temperature, d.min_p, s, d.top_k > 0);
  double total_all = 0.0;
  if (t == 0) {
    total_all = blocks_total(s, blocks);
    floor_w = 0.0f;
    count = 0;
  }
  __syncthreads();
  if (d.top_k > 0) {
    // The k-th largest block maximum (ties by the lower block): its rank among the maxima.
    if (d.top_k <= blocks) {
      for (int b = t; b < blocks; b += kSampleThreads) {
        const float v = s.block_max[b];
        int rank = 0;
        for (int o = 0; o < blocks; ++o) {
          const float w = s.block_max[o];
          rank += (w > v || (w == v && o < b)) ? 1 : 0;
        }
        if (rank == d.top_k - 1) floor_w = v;
      }
    }
  } else {
    // The largest of 2^-4, 2^-8, ..., 2^-64 whose weights at or above it hold the top-p mass
    // (a float32 estimate, with the host's margin); 0 when none does.
    constexpr int kFloors = 5;
    float mass[kFloors] = {};
    for (int j = t; j < vocab; j += kSampleThreads) {
      const float w = sample_math::weight(row[j], m, d.inv_temperature, d.min_p);
      for (int f = 0; f < kFloors; ++f) mass[f] += w >= ldexpf(1.0f, -(4 << f)) ? w : 0.0f;
    }
    for (int f = 0; f < kFloors; ++f) {
      mass[f] = block_reduce(
          mass[f], [](float a, float b) { return a + b; }, red);
    }
    if (t == 0) {
      const double need = d.top_p * total_all * (1.0 + 1e-5);
      for (int f = 0; f < kFloors; ++f) {
        if (static_cast<double>(mass[f]) >= need) {
          floor_w = ldexpf(1.0f, -(4 << f));
          break;
        }
      }
    }
  }
  __syncthreads();
  // Gather the candidates as keys ordered like "most likely first": weight bits (w > 0, so
  // they order as the weights), then the complement of the token id (lower ids first).
  const float floor = floor_w;
  for (int j = t; j < vocab; j += kSampleThreads) {
    const float w = sample_math::weight(row[j], m, d.inv_temperature, d.min_p);
    if (w == 0.0f || w < floor) continue;
    const int slot = atomicAdd(&count, 1);
    if (slot < kMaxSampleCandidates) {
      s.keys[slot] = (static_cast<uint64_t>(__float_as_uint(w)) << 32) |
                     (0xffffffffu - static_cast<uint32_t>(j));
    }
  }
  __syncthreads();
  const int n = count;
  if (n > kMaxSampleCandidates) return -1;
  int padded = 1;
  while (padded < n) padded *= 2;
  for (int i = n + t; i < padded; i += kSampleThreads) s.keys[i] = 0;  // below every key
  __syncthreads();
  // Bitonic sort, descending.
  for (int size = 2; size <= padded; size *= 2) {
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int i = t; i < padded; i += kSampleThreads) {
        const int other = i ^ stride;
        if (other <= i) continue;
        const uint64_t a = s.keys[i], b = s.keys[other];
        const bool descending = (i & size) == 0;
        if (descending ? a < b : a > b) {
          s.keys[i] = b;
          s.keys[other] = a;
        }
      }
      __syncthreads();
    }
  }
  if (t != 0) return 0;
  if (n == 0) return -1;  // unreachable: the maximum has weight 1
  int kept = n;
  double total = total_all;
  if (d.top_k > 0) {
    kept = min(n, d.top_k);
    total = 0.0;
    for (int i = 0; i < kept; ++i) total = __dadd_rn(total, key_weight(s.keys[i]));
  }
  if (d.top_p < 1.0) {
    const double target = __dmul_rn(__dmul_rn(d.top_p, total), 1.0 - 1e-12);
    double cum = 0.0;
    int cut = 0;
    for (; cut < kept; ++cut) {
      cum = __dadd_rn(cum, key_weight(s.keys[cut]));
      if (cum >= target) break;
    }
    if (cut == kept) {
      // Unreached: every candidate is kept, unless tokens below the floor were left out.
      if (d.top_k == 0 && floor > 0.0f) return -1;
    } else {
      kept = cut + 1;
    }
  }
  double sum = 0.0;
  for (int i = 0; i < kept; ++i) sum = __dadd_rn(sum, key_weight(s.keys[i]));
  double cum = 0.0;
  for (int i = 0; i < kept; ++i) {
    cum = __dadd_rn(cum, __ddiv_rn(key_weight(s.keys[i]), sum));
    if (cum > d.u) return key_token(s.keys[i]);
  }
  return key_token(s.keys[kept - 1]);  // rounding fallback: the last kept token
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_rows_kernel(const float* logits, int vocab, const SampleDraw* draws, int32_t* out,
                       float* out_logprobs) {
  extern __shared__ double smem[];
  __shared__ float staged[kSampleBlock];
  __shared__ float red[kSampleWarps];
  __shared__ int red_i[kSampleWarps];
  const int blocks = (vocab + kSampleBlock - 1) / kSampleBlock;
  SampleSmem s;
  s.block_sums = smem;
  s.keys = reinterpret_cast<uint64_t*>(s.block_sums + blocks);
  s.block_max = reinterpret_cast<float*>(s.keys + kMaxSampleCandidates);
  s.lane_sums = s.block_max + blocks;
  s.lane_max = s.lane_sums + blocks * kSampleLanes;
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  const SampleDraw d = draws[blockIdx.x];
  const int t = threadIdx.x;

  // m = max_ignoring_nan(row): NaN compares false, fmaxf drops NaN.
  float m = -CUDART_INF_F;
  for (int j = t; j < vocab; j += kSampleThreads) m = row[j] > m ? row[j] : m;
  m = block_reduce(
      m, [](float a, float b) { return fmaxf(a, b); }, red);
  if (m == CUDART_INF_F || m == -CUDART_INF_F) {  // left to the host (sample_draw)
    if (t == 0) {
      out[blockIdx.x] = -1;
      out_logprobs[blockIdx.x] = 0.0f;
    }
    return;
  }
  int32_t token = 0;
  if (d.greedy) {  // the first index of the maximum
    int first = INT_MAX;
    for (int j = t; j < vocab; j += kSampleThreads) {
      if (row[j] == m) {
        first = j;
        break;
      }
    }
    token = block_reduce(
        first, [](int a, int b) { return min(a, b); }, red_i);
  } else if (d.top_k == 0 && d.top_p >= 1.0) {
    token = temperature_token(row, vocab, m, d, s, staged);
  } else {
    token = ordered_token(row, vocab, m, d, s, red);
  }
  __shared__ int32_t chosen;
  if (t == 0) chosen = token;
  __syncthreads();
  token = chosen;
  float logprob = 0.0f;
  if (d.logprob && token >= 0) {
    // logit - m - log(sum_exp): sum_exp is the weights' total at temperature 1, min-p 0.
    weight_block_sums(row, vocab, m, 1.0f, 0.0f, s, false);
    if (t == 0) {
      const float x = row[token];
      const double xd = isnan(x) ? -CUDART_INF : static_cast<double>(x);
      logprob = static_cast<float>(
          __dsub_rn(__dsub_rn(xd, static_cast<double>(m)), log(blocks_total(s, blocks))));
    }
  }
  if (t == 0) {
    out[blockIdx.x] = token;
    out_logprobs[blockIdx.x] = logprob;
  }
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

Status sample_rows(const float* logits, int rows, int vocab, const SampleDraw* draws, int32_t* out,
                   float* out_logprobs, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(vocab, "vocab"));
  if (vocab > kMaxSampleVocab) {
    return invalid_argument("sample_rows: vocab = " + std::to_string(vocab) +
                            ": expected at most " + std::to_string(kMaxSampleVocab));
  }
  static const cudaError_t attr =
      cudaFuncSetAttribute(sample_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(sample_rows_smem(kMaxSampleVocab)));
  if (attr != cudaSuccess) {
    return internal_error(std::string("sample_rows: shared memory attribute: ") +
                          cudaGetErrorString(attr));
  }
  sample_rows_kernel<<<rows, kSampleThreads, sample_rows_smem(vocab), stream>>>(
      logits, vocab, draws, out, out_logprobs);
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
