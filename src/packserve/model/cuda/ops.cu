// ops.cu: kernels of ops.h. One CTA per row for the row-wise kernels (rmsnorm, qkv_epilogue),
// grid-stride loops for the element-wise ones. Reductions: per-thread f32 partial sums, warp
// shuffles, then one value per warp through shared memory (fixed order: deterministic).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <string>
#include <utility>

#include "packserve/model/cuda/device_util.cuh"
#include "packserve/model/cuda/ops.h"

namespace packserve::model::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kQuantizeCtas = 264;  // quantize_fp8's grid at most (two per H100 / H200 SM)

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

// Reduces v over the CTA with op, warp by warp in order (blockDim.x a multiple of 32, <= 1024;
// every thread gets the result); `red` holds blockDim.x / 32 values.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* red) {
  for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();  // red may still be read by the previous reduction
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[0];
  const int num_warps = static_cast<int>(blockDim.x / 32);
  for (int w = 1; w < num_warps; ++w) v = op(v, red[w]);
  return v;
}

__global__ void embed_gather_kernel(const uint16_t* embed, const int32_t* token_ids, int hidden,
                                    float* x) {
  step_kernel_start();
  const size_t r = blockIdx.x;
  const uint16_t* e = embed + static_cast<size_t>(token_ids[r]) * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) x[r * hidden + j] = load_bf16(e, j);
}

__global__ void rmsnorm_kernel(const float* x, const int32_t* row_index, int hidden, const float* w,
                               float eps, uint16_t* y) {
  step_kernel_start();
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
  step_kernel_start();
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
                                    double attention_factor, float* cos_sin) {
  step_kernel_start();
  const size_t r = blockIdx.x;
  const double pos = static_cast<double>(positions[r]);
  for (int p = threadIdx.x; p < half; p += blockDim.x) {
    double s, c;
    sincos(pos * inv_freq[p], &s, &c);
    cos_sin[(r * half + p) * 2] = static_cast<float>(c * attention_factor);
    cos_sin[(r * half + p) * 2 + 1] = static_cast<float>(s * attention_factor);
  }
}

// One warp per (row, head); lane l holds elements j * 32 + l (j < kPerLane) of the head, so
// the RoPE pair (p, p + head_dim / 2) sits in one lane at slots j and j + kPerLane / 2. The
// norm sums in the same order as a loop over i = lane, lane + 32, ... followed by warp_sum.
constexpr int kEpilogueWarps = 8;
template <int kPerLane>
__global__ void qkv_epilogue_kernel(QkvEpilogueArgs a) {
  step_kernel_start();
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
        c = static_cast<float>(cd * a.rope_attention_factor);
        s = static_cast<float>(sd * a.rope_attention_factor);
      }
      const float x0 = v[j], x1 = v[j + kHalfSlots];
      v[j] = x0 * c - x1 * s;
      v[j + kHalfSlots] = x1 * c + x0 * s;
    }
  }
  if (head < a.num_qo_heads) {
    uint16_t* dst = a.q_out + r * a.num_qo_heads * kDim + head * kDim;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) store_bf16(dst, j * 32 + lane, v[j]);
    return;
  }
  const size_t at =
      (static_cast<size_t>(a.kv_page[r]) * a.page_size + static_cast<size_t>(a.kv_slot[r])) *
          a.num_kv_heads * kDim +
      static_cast<size_t>(head < first_v ? head - a.num_qo_heads : head - first_v) * kDim;
  void* pages = head < first_v ? a.k_pages : a.v_pages;
  if (a.kv_fp8) {
    auto* dst = static_cast<__nv_fp8_storage_t*>(pages) + at;
    const float scale = head < first_v ? a.k_scale : a.v_scale;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      dst[j * 32 + lane] = __nv_cvt_float_to_fp8(__fdiv_rn(v[j], scale), __NV_SATFINITE, __NV_E4M3);
    }
  } else {
    uint16_t* dst = static_cast<uint16_t*>(pages) + at;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) store_bf16(dst, j * 32 + lane, v[j]);
  }
}

// 8 elements (16 bytes of gate, of up and of y) per thread; inner % 8 == 0.
__global__ void silu_mul_vec_kernel(const uint16_t* gate_up, size_t rows, int inner, uint16_t* y) {
  step_kernel_start();
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

__global__ void add_f32_kernel(float* y, const float* x, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = __fadd_rn(y[i], x[i]);
  }
}

__global__ void silu_mul_kernel(const uint16_t* gate_up, size_t rows, int inner, uint16_t* y) {
  step_kernel_start();
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

// Block maximum of v (blockDim.x == kRowThreads); every thread gets it.
__device__ float block_max(float v) {
  __shared__ float warp_max[kRowThreads / 32];
  return block_reduce(
      v, [](float a, float b) { return fmaxf(a, b); }, warp_max);
}

// row_absmax (ops.h): one CTA per row.
__global__ void row_absmax_kernel(const uint16_t* x, int cols, float* amax) {
  const uint16_t* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  float m = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, fabsf(load_bf16(xr, j)));
  m = block_max(m);
  if (threadIdx.x == 0) amax[blockIdx.x] = m;
}

// quantize_fp8 (ops.h): each CTA reduces the maxima (a few KB at most), then quantizes rows
// blockIdx.x, + gridDim.x, ...
__global__ void quantize_fp8_kernel(const uint16_t* x, int rows, int cols, const float* amax,
                                    int num_amax, uint8_t* xq, float* scale) {
  float m = 0.0f;
  for (int i = threadIdx.x; i < num_amax; i += blockDim.x) m = fmaxf(m, amax[i]);
  m = block_max(m);
  const float s = m > 0.0f ? m / kFp8E4m3Max : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale = s;
  for (size_t r = blockIdx.x; r < static_cast<size_t>(rows); r += gridDim.x) {
    const uint16_t* xr = x + r * cols;
    uint8_t* qr = xq + r * cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
      qr[j] = __nv_cvt_float_to_fp8(load_bf16(xr, j) / s, __NV_SATFINITE, __NV_E4M3);
    }
  }
}

// The launch's error `e` (by default the last error, for <<<>>> launches) as Status.
Status launched(const char* what, cudaError_t e = cudaGetLastError()) {
  if (e == cudaSuccess) return ok_status();
  (void)cudaGetLastError();  // a failed launch also sets the thread's last error
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

// mask_rows (ops.h): blockIdx.y is the row; a thread per token, so a warp's stores are one
// row span (a thread per mask word wrote 32 lines per store: 0.3 ms for 128 rows of 128,256
// tokens on an H200) and its 32 lanes read one mask word.
__global__ void mask_rows_kernel(float* logits, int vocab, const int32_t* mask_index,
                                 const uint32_t* masks) {
  const int k = mask_index[blockIdx.y];
  if (k < 0) return;
  const uint32_t* mask = masks + static_cast<size_t>(k) * ((vocab + 31) / 32);
  float* row = logits + static_cast<size_t>(blockIdx.y) * vocab;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < vocab; t += gridDim.x * blockDim.x) {
    if (((mask[t / 32] >> (t % 32)) & 1u) == 0) row[t] = -CUDART_INF_F;
  }
}

// sample_rows (ops.h): one CTA of kSampleThreads per row, common/sample_draw.h's arithmetic in
// its order. The logits are read, and written only where a row has adjustments (a row left to
// the host gets its raw logits back). Every float64 sum whose order the header fixes runs in
// one thread, so its bits are the host's; the float32 block sums run as the header's lanes;
// the ordered draws' masses are integers, whose sums are the host's in any order.
constexpr int kSampleThreads = 1024;
constexpr int kSampleWarps = kSampleThreads / 32;
constexpr int kSampleLanes = sample_math::kBlockLanes;
constexpr int kSampleBlock = static_cast<int>(sample_math::kWeightBlock);
constexpr int kMaxSampleVocab = 1 << 20;
constexpr int kDigitBins = 256;  // the radix descent's digits are 8 bits of a 64-bit key
constexpr int kKeysPerThread = kMaxSampleCandidates / kSampleThreads;
static_assert(kKeysPerThread * kSampleThreads == kMaxSampleCandidates);

// Dynamic shared memory of sample_rows_kernel: the candidate keys, then a region that holds
// either the weight block sums (double) and lane sums (float, 8 per block) or the per-warp
// digit histograms (mass, then count).
size_t sample_rows_smem(int vocab) {
  const size_t blocks = (static_cast<size_t>(vocab) + kSampleBlock - 1) / kSampleBlock;
  const size_t weights = blocks * sizeof(double) + blocks * kSampleLanes * sizeof(float);
  const size_t histograms =
      size_t{kSampleWarps} * kDigitBins * (sizeof(uint64_t) + sizeof(uint32_t));
  return kMaxSampleCandidates * sizeof(uint64_t) + (weights > histograms ? weights : histograms);
}

struct SampleSmem {
  uint64_t* keys;       // [kMaxSampleCandidates]
  double* block_sums;   // [blocks]       } the same bytes
  float* lane_sums;     // [blocks * 8]   }
  uint64_t* bin_mass;   // [kSampleWarps * kDigitBins]: warp w's bins at w * kDigitBins, merged
  uint32_t* bin_count;  // [kSampleWarps * kDigitBins]   into [0, kDigitBins)
};

// The dynamic shared memory (sample_rows_smem(vocab) bytes at smem) as a SampleSmem.
__device__ SampleSmem sample_smem(double* smem, int vocab) {
  const int blocks = (vocab + kSampleBlock - 1) / kSampleBlock;
  SampleSmem s;
  s.keys = reinterpret_cast<uint64_t*>(smem);
  s.block_sums = smem + kMaxSampleCandidates;
  s.lane_sums = reinterpret_cast<float*>(s.block_sums + blocks);
  s.bin_mass = reinterpret_cast<uint64_t*>(s.block_sums);
  s.bin_count = reinterpret_cast<uint32_t*>(s.bin_mass + kSampleWarps * kDigitBins);
  return s;
}

// Block sums of the weights (temperature_sample.h's lanes and order) into s.block_sums.
__device__ void weight_block_sums(const float* row, int vocab, float m, float inv_t, float min_p,
                                  const SampleSmem& s) {
  const int blocks = (vocab + kSampleBlock - 1) / kSampleBlock;
  // Lane l of block b: w[8k + l] of the block's whole octets, in order.
  for (int task = threadIdx.x; task < blocks * kSampleLanes; task += kSampleThreads) {
    const int b = task / kSampleLanes, l = task % kSampleLanes;
    const int len = min(kSampleBlock, vocab - b * kSampleBlock);
    const float* x = row + static_cast<size_t>(b) * kSampleBlock;
    const int whole = len - len % kSampleLanes;
    float sum = 0.0f;
    for (int i = l; i < whole; i += kSampleLanes) {
      sum = sample_math::add(sum, sample_math::weight(x[i], m, inv_t, min_p));
    }
    s.lane_sums[task] = sum;
  }
  __syncthreads();
  // Block b: its tail in order from zero, then lanes 0..7.
  for (int b = threadIdx.x; b < blocks; b += kSampleThreads) {
    const int len = min(kSampleBlock, vocab - b * kSampleBlock);
    const float* x = row + static_cast<size_t>(b) * kSampleBlock;
    float sum = 0.0f;
    for (int i = len - len % kSampleLanes; i < len; ++i) {
      sum = sample_math::add(sum, sample_math::weight(x[i], m, inv_t, min_p));
    }
    for (int l = 0; l < kSampleLanes; ++l) {
      sum = sample_math::add(sum, s.lane_sums[b * kSampleLanes + l]);
    }
    s.block_sums[b] = static_cast<double>(sum);
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
  weight_block_sums(row, vocab, m, d.inv_temperature, d.min_p, s);
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

// The ordered draws (top-k, top-p) on the device. Every cut is the first key, most likely
// first over all candidates, at which the running count or mass reaches a need: top-k's k,
// then top-p's need within the top-k mass, then the draw's target + 1 within the kept mass,
// each need no more than the mass before it, so each cut lies within the one before (no lower
// bound is needed). A cut is found among up to kMaxSampleCandidates keys gathered into shared
// memory, sorted and prefix-summed: the most likely keys down to a weight floor, when one of
// the fixed floors (one pass counts every floor's keys and mass) holds the cut with few enough
// keys -- then the later cuts of the row are found there without a pass -- else the keys of
// one bin of a radix descent over the key's bytes (histograms of count and mass by the next
// byte), narrowed until the bin that holds the cut is small enough to gather.
struct Located {
  uint64_t key;    // the cut's key (0: not found, which the arithmetic rules out)
  uint32_t count;  // candidates with key >= this key
  uint64_t mass;   // and their mass
};

// The keys a descent orders, most likely first (key 0: not a candidate). DrawKeys: a draw's
// candidates (w > 0) by sample_key, each with its integer mass.
struct DrawKeys {
  static constexpr bool kMass = true;
  const float* row;
  float m, inv_t, min_p;
  __device__ __forceinline__ uint64_t operator()(int j) const {
    const float w = sample_math::weight(row[j], m, inv_t, min_p);
    return w == 0.0f ? 0 : sample_math::sample_key(w, j);
  }
};

// LogitKeys: every token by logit (NaN as -inf, -0 as +0), then id ascending (top_logprobs'
// order, sample_draw.h): the float's bits made monotone above the token's sample_key bits.
struct LogitKeys {
  static constexpr bool kMass = false;
  const float* row;
  __device__ __forceinline__ uint64_t operator()(int j) const {
    const float x = row[j];
    uint32_t b = __float_as_uint(isnan(x) ? -CUDART_INF_F : x == 0.0f ? 0.0f : x);
    b = (b & 0x80000000u) != 0 ? ~b : b | 0x80000000u;  // >= 0x007fffff (-inf): never 0
    return (static_cast<uint64_t>(b) << 32) | (0xffffffffu - static_cast<uint32_t>(j));
  }
};

// Key j when it is a candidate with lo <= key <= hi, else 0.
template <typename Keys>
__device__ __forceinline__ uint64_t key_in(const Keys& keys, int j, uint64_t lo, uint64_t hi) {
  const uint64_t key = keys(j);
  return key != 0 && key >= lo && key <= hi ? key : 0;
}

// The keys whose first `level` bytes are prefix's.
__device__ __forceinline__ uint64_t bin_end(uint64_t prefix, int level) {
  return level == 0 ? ~uint64_t{0} : prefix | (~uint64_t{0} >> (8 * level));
}

// Histograms of the candidates whose first `level` bytes are prefix's, by their byte `level`
// (count, and mass when Keys has it), into s.bin_count / s.bin_mass [0, kDigitBins). A warp's
// lanes with one byte add their masses together (__match_any_sync, then __reduce_add_sync on
// two 20-bit halves: 32 masses <= 2^40 fit), and one lane writes the warp's own bins: no
// atomics.
template <typename Keys>
__device__ void digit_histogram(const Keys& keys, int vocab, const SampleSmem& s, uint64_t prefix,
                                int level) {
  const int t = threadIdx.x, lane = t % 32;
  for (int i = t; i < kSampleWarps * kDigitBins; i += kSampleThreads) {
    s.bin_mass[i] = 0;
    s.bin_count[i] = 0;
  }
  __syncthreads();
  uint64_t* warp_mass = s.bin_mass + (t / 32) * kDigitBins;
  uint32_t* warp_count = s.bin_count + (t / 32) * kDigitBins;
  const int shift = 56 - 8 * level;
  const uint64_t hi = bin_end(prefix, level);
  for (int j0 = 0; j0 < vocab; j0 += kSampleThreads) {  // the warp's lanes stay together
    __syncwarp();  // the previous round's bin writes are seen by this round's writers
    const int j = j0 + t;
    const uint64_t key = j < vocab ? key_in(keys, j, prefix, hi) : 0;
    const unsigned in_range = __ballot_sync(0xffffffffu, key != 0);
    if (key == 0) continue;
    const unsigned digit = static_cast<unsigned>(key >> shift) & (kDigitBins - 1);
    const unsigned peers = __match_any_sync(in_range, digit);
    if constexpr (Keys::kMass) {
      const uint64_t mass = sample_math::key_mass(key);
      const unsigned mass_hi = __reduce_add_sync(peers, static_cast<unsigned>(mass >> 20));
      const unsigned mass_lo = __reduce_add_sync(peers, static_cast<unsigned>(mass & 0xfffff));
      if (lane == __ffs(peers) - 1)
        warp_mass[digit] += (static_cast<uint64_t>(mass_hi) << 20) + mass_lo;
    }
    if (lane == __ffs(peers) - 1) warp_count[digit] += __popc(peers);
  }
  __syncthreads();
  for (int b = t; b < kDigitBins; b += kSampleThreads) {
    uint64_t mass = 0;
    uint32_t count = 0;
    for (int w = 0; w < kSampleWarps; ++w) {
      mass += s.bin_mass[w * kDigitBins + b];
      count += s.bin_count[w * kDigitBins + b];
    }
    s.bin_mass[b] = mass;
    s.bin_count[b] = count;
  }
  __syncthreads();
}

// Gathers the candidates with lo <= key <= hi (at most kMaxSampleCandidates: the caller knows
// their count) into s.keys and sorts them descending (bitonic); returns how many.
template <typename Keys>
__device__ int gather_sorted(const Keys& keys, int vocab, const SampleSmem& s, uint64_t lo,
                             uint64_t hi) {
  __shared__ int count;
  const int t = threadIdx.x;
  if (t == 0) count = 0;
  __syncthreads();
  for (int j = t; j < vocab; j += kSampleThreads) {
    const uint64_t key = key_in(keys, j, lo, hi);
    if (key == 0) continue;
    const int slot = atomicAdd(&count, 1);
    if (slot < kMaxSampleCandidates) s.keys[slot] = key;
  }
  __syncthreads();
  const int n = min(count, kMaxSampleCandidates);
  int padded = 1;
  while (padded < n) padded *= 2;
  for (int i = n + t; i < padded; i += kSampleThreads) s.keys[i] = 0;  // below every key
  __syncthreads();
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
  return n;
}

// In s.keys[0, n) (sorted, after `above_count` candidates of mass `above_mass`): the first
// key at which the running count (by_mass false) or mass reaches `need`. Every thread gets
// the result; key 0 when the keys do not reach it.
__device__ Located find_in_sorted(const SampleSmem& s, int n, uint64_t need, bool by_mass,
                                  uint32_t above_count, uint64_t above_mass) {
  __shared__ uint64_t warp_totals[kSampleWarps];
  __shared__ Located found;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int first = t * kKeysPerThread, last = min(n, first + kKeysPerThread);
  uint64_t mine = 0;
  for (int i = first; i < last; ++i) mine += sample_math::key_mass(s.keys[i]);
  uint64_t inclusive = mine;  // over the warp's lanes, then the warps before
  for (int off = 1; off < 32; off *= 2) {
    const uint64_t v = __shfl_up_sync(0xffffffffu, inclusive, off);
    if (lane >= off) inclusive += v;
  }
  if (t == 0) found = Located{0, 0, 0};
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  uint64_t mass = above_mass + inclusive - mine;
  for (int w = 0; w < warp; ++w) mass += warp_totals[w];
  // The thread whose keys hold the cut finds it (one thread: the running values increase).
  for (int i = first; i < last; ++i) {
    const uint64_t prev = mass;
    mass += sample_math::key_mass(s.keys[i]);
    const uint64_t count = above_count + static_cast<uint64_t>(i) + 1;
    const bool reached = by_mass ? mass >= need && prev < need : count == need;
    if (reached) found = Located{s.keys[i], static_cast<uint32_t>(count), mass};
  }
  __syncthreads();
  const Located result = found;
  __syncthreads();  // read before the next call resets it
  return result;
}

// The weight floors of the first gather, most likely keys first: each floor's keys are those
// with w >= it, whose keys are >= floor_key(f).
constexpr int kFloors = 8;
__device__ __forceinline__ float floor_weight(int f) {
  constexpr float kFloor[kFloors] = {0x1p-1f, 0x1p-2f,  0x1p-4f,  0x1p-6f,
                                     0x1p-9f, 0x1p-12f, 0x1p-16f, 0x1p-24f};
  return kFloor[f];
}
__device__ __forceinline__ uint64_t floor_key(int f) {
  return static_cast<uint64_t>(__float_as_uint(floor_weight(f))) << 32;
}

// Count and mass of the candidates at or above each floor, and of every candidate
// ([kFloors]).
struct FloorStats {
  uint32_t count[kFloors + 1];
  uint64_t mass[kFloors + 1];
};

// One pass over the row into `out` (shared); s.bin_* hold the warps' partial sums.
__device__ void floor_stats(const float* row, int vocab, float m, const SampleDraw& d,
                            const SampleSmem& s, FloorStats& out) {
  uint32_t count[kFloors + 1] = {};
  uint64_t mass[kFloors + 1] = {};
  for (int j = threadIdx.x; j < vocab; j += kSampleThreads) {
    const float w = sample_math::weight(row[j], m, d.inv_temperature, d.min_p);
    if (w == 0.0f) continue;
    const uint64_t wm = sample_math::weight_mass(w);
#pragma unroll
    for (int f = 0; f < kFloors; ++f) {
      count[f] += w >= floor_weight(f) ? 1 : 0;
      mass[f] += w >= floor_weight(f) ? wm : 0;
    }
    count[kFloors] += 1;
    mass[kFloors] += wm;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int f = 0; f <= kFloors; ++f) {
    for (int off = 16; off > 0; off /= 2) {
      count[f] += __shfl_xor_sync(0xffffffffu, count[f], off);
      mass[f] += __shfl_xor_sync(0xffffffffu, mass[f], off);
    }
    if (lane == 0) {
      s.bin_count[warp * (kFloors + 1) + f] = count[f];
      s.bin_mass[warp * (kFloors + 1) + f] = mass[f];
    }
  }
  __syncthreads();
  if (threadIdx.x <= kFloors) {
    const int f = threadIdx.x;
    uint32_t c = 0;
    uint64_t ms = 0;
    for (int w = 0; w < kSampleWarps; ++w) {
      c += s.bin_count[w * (kFloors + 1) + f];
      ms += s.bin_mass[w * (kFloors + 1) + f];
    }
    out.count[f] = c;
    out.mass[f] = ms;
  }
  __syncthreads();
}

// What one row's cuts share: the floor statistics, the byte-0 histogram of every candidate
// (made by the first descent), and the resident most likely keys (s.keys[0, resident_n), of
// mass resident_mass; 0 when none).
struct OrderedState {
  const FloorStats* floors;
  uint32_t* count0;
  uint64_t* mass0;
  bool hist0_ready;
  int resident_n;
  uint64_t resident_mass;
};

// The cut at `need` (count or mass; need >= 1 and at most every candidate's).
__device__ Located locate(const float* row, int vocab, float m, const SampleDraw& d,
                          const SampleSmem& s, OrderedState& st, uint64_t need, bool by_mass) {
  __shared__ int chosen;
  __shared__ uint32_t above_count_s;
  __shared__ uint64_t above_mass_s;
  const DrawKeys keys{row, m, d.inv_temperature, d.min_p};
  // The cut among the resident keys, after gathering every key >= lo (of mass `mass`) as the
  // new resident keys when lo is given.
  const auto resident_cut = [&](bool gather, uint64_t lo, uint64_t mass) {
    if (gather) {
      st.resident_n = gather_sorted(keys, vocab, s, lo, ~uint64_t{0});
      st.resident_mass = mass;
    }
    return find_in_sorted(s, st.resident_n, need, by_mass, 0, 0);
  };
  if (by_mass ? need <= st.resident_mass : need <= static_cast<uint64_t>(st.resident_n)) {
    return resident_cut(false, 0, 0);
  }
  // The smallest floor whose keys hold the cut, if they fit.
  for (int f = 0; f < kFloors; ++f) {
    if ((by_mass ? st.floors->mass[f] : st.floors->count[f]) < need) continue;
    if (st.floors->count[f] > static_cast<uint32_t>(kMaxSampleCandidates)) break;
    return resident_cut(true, floor_key(f), st.floors->mass[f]);
  }
  if (!st.hist0_ready) {
    digit_histogram(keys, vocab, s, 0, 0);
    for (int b = threadIdx.x; b < kDigitBins; b += kSampleThreads) {
      st.count0[b] = s.bin_count[b];
      st.mass0[b] = s.bin_mass[b];
    }
    __syncthreads();
    st.hist0_ready = true;
  }
  uint64_t prefix = 0;
  for (int level = 0; level < 8; ++level) {
    if (level > 0) digit_histogram(keys, vocab, s, prefix, level);
    const uint32_t* count = level == 0 ? st.count0 : s.bin_count;
    const uint64_t* mass = level == 0 ? st.mass0 : s.bin_mass;
    if (threadIdx.x == 0) {
      uint32_t above_count = level == 0 ? 0 : above_count_s;
      uint64_t above_mass = level == 0 ? 0 : above_mass_s;
      chosen = -1;
      for (int b = kDigitBins - 1; b >= 0; --b) {
        if ((by_mass ? above_mass + mass[b] : above_count + count[b]) >= need) {
          chosen = b;
          break;
        }
        above_count += count[b];
        above_mass += mass[b];
      }
      above_count_s = above_count;
      above_mass_s = above_mass;
    }
    __syncthreads();
    const int b = chosen;
    const uint32_t above_count = above_count_s, bin_count = count[b < 0 ? 0 : b];
    const uint64_t above_mass = above_mass_s, bin_mass = mass[b < 0 ? 0 : b];
    __syncthreads();  // every thread has read them before thread 0 or a histogram moves on
    if (b < 0) return Located{0, 0, 0};
    prefix |= static_cast<uint64_t>(b) << (56 - 8 * level);
    if (above_count + bin_count <= static_cast<uint32_t>(kMaxSampleCandidates)) {
      return resident_cut(true, prefix, above_mass + bin_mass);  // the bin and all above it
    }
    if (bin_count <= static_cast<uint32_t>(kMaxSampleCandidates)) {
      const int n = gather_sorted(keys, vocab, s, prefix, bin_end(prefix, level + 1));
      st.resident_n = 0;
      st.resident_mass = 0;
      return find_in_sorted(s, n, need, by_mass, above_count, above_mass);
    }
  }
  return Located{0, 0, 0};  // unreachable: a byte-7 bin holds one key
}

// The top-k / top-p draw (every thread gets it); -1 when a cut is not found, which the
// arithmetic rules out (the row would go to the host).
__device__ int32_t ordered_token(const float* row, int vocab, float m, const SampleDraw& d,
                                 const SampleSmem& s) {
  __shared__ FloorStats floors;
  __shared__ uint32_t count0[kDigitBins];
  __shared__ uint64_t mass0[kDigitBins];
  floor_stats(row, vocab, m, d, s, floors);
  OrderedState st{&floors, count0, mass0, false, 0, 0};
  uint64_t kept_mass = floors.mass[kFloors];
  if (d.top_k > 0 && static_cast<uint32_t>(d.top_k) < floors.count[kFloors]) {
    const Located cut = locate(row, vocab, m, d, s, st, d.top_k, false);
    if (cut.key == 0) return -1;
    kept_mass = cut.mass;
  }
  if (d.top_p < 1.0) {
    const uint64_t need = sample_math::top_p_need(d.top_p, kept_mass);
    const Located cut = locate(row, vocab, m, d, s, st, need, true);
    if (cut.key == 0) return -1;
    kept_mass = cut.mass;
  }
  const uint64_t target = sample_math::draw_target(d.u, kept_mass);
  const Located drawn = locate(row, vocab, m, d, s, st, target + 1, true);
  return drawn.key == 0 ? -1 : sample_math::key_token(drawn.key);
}

// The k most likely tokens of a row by logit (LogitKeys; 1 <= k <= vocab) in s.keys[0, k): a
// radix descent narrows to the bin that holds the k-th key until it and the keys above it are
// at most kTopGather, which are gathered and sorted.
constexpr int kTopGather = 1024;
__device__ void top_logit_keys(const float* row, int vocab, int k, const SampleSmem& s) {
  __shared__ int chosen;
  __shared__ uint32_t above_s;
  const LogitKeys keys{row};
  uint64_t prefix = 0;
  for (int level = 0; level < 8; ++level) {
    digit_histogram(keys, vocab, s, prefix, level);
    if (threadIdx.x == 0) {
      uint32_t above = level == 0 ? 0 : above_s;
      int b = kDigitBins - 1;  // the bins hold >= k - above keys: b stops at 0 at the latest
      for (; b > 0 && above + s.bin_count[b] < static_cast<uint32_t>(k); --b) {
        above += s.bin_count[b];
      }
      chosen = b;
      above_s = above;
    }
    __syncthreads();
    const int b = chosen;
    const uint32_t through = above_s + s.bin_count[b];
    __syncthreads();  // read before thread 0 or the next histogram writes them
    prefix |= static_cast<uint64_t>(b) << (56 - 8 * level);
    if (through <= static_cast<uint32_t>(kTopGather)) {  // at level 7 at the latest (one key)
      gather_sorted(keys, vocab, s, prefix, ~uint64_t{0});
      return;
    }
  }
}

// m = max_ignoring_nan(row) (every thread gets it): NaN compares false, fmaxf drops NaN.
__device__ float row_max(const float* row, int vocab, float* red) {
  float m = -CUDART_INF_F;
  for (int j = threadIdx.x; j < vocab; j += kSampleThreads) m = row[j] > m ? row[j] : m;
  return block_reduce(
      m, [](float a, float b) { return fmaxf(a, b); }, red);
}

// Thread 0: log of the weights' total at temperature 1 and min-p 0 (sample_draw.h's logprob).
__device__ double log_sum_exp_shifted(const float* row, int vocab, float m, const SampleSmem& s) {
  weight_block_sums(row, vocab, m, 1.0f, 0.0f, s);
  return threadIdx.x == 0 ? log(blocks_total(s, (vocab + kSampleBlock - 1) / kSampleBlock)) : 0.0;
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_rows_kernel(float* logits, int vocab, const SampleDraw* draws, SampleAdjusts adj,
                       int32_t* out, float* out_logprobs, TopLogprob* out_top) {
  extern __shared__ double smem[];
  __shared__ float staged[kSampleBlock];
  __shared__ float red[kSampleWarps];
  __shared__ int red_i[kSampleWarps];
  const SampleSmem s = sample_smem(smem, vocab);
  float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  const SampleDraw d = draws[blockIdx.x];
  const int t = threadIdx.x;

  // The logit bias and penalties, in place; the raw row's maximum and log-sum first when the
  // logprob is wanted (it is the raw row's), and each adjusted logit's raw value kept.
  const int a_begin = adj.indptr != nullptr ? adj.indptr[blockIdx.x] : 0;
  const int a_end = adj.indptr != nullptr ? adj.indptr[blockIdx.x + 1] : 0;
  const bool adjusted = a_end > a_begin;
  float raw_m = 0.0f;
  double raw_log_sum = 0.0;  // thread 0's
  if (adjusted) {
    if (d.logprob) {
      raw_m = row_max(row, vocab, red);
      // An infinite raw maximum stays infinite (finite stages): the row goes to the host.
      if (raw_m != CUDART_INF_F && raw_m != -CUDART_INF_F) {
        raw_log_sum = log_sum_exp_shifted(row, vocab, raw_m, s);
      }
    }
    for (int e = a_begin + t; e < a_end; e += kSampleThreads) {
      const LogitAdjust a = adj.entries[e];
      adj.raw[e] = row[a.token];
      row[a.token] = sample_math::adjust_logit(row[a.token], a);
    }
    __syncthreads();
  }

  const float m = row_max(row, vocab, red);
  if (m == CUDART_INF_F || m == -CUDART_INF_F) {  // left to the host (sample_draw)
    // The host draws from the raw row with the adjustments (sample_draw_adjusted): put the
    // raw logits back (each thread the entries it adjusted).
    for (int e = a_begin + t; e < a_end; e += kSampleThreads)
      row[adj.entries[e].token] = adj.raw[e];
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
    token = ordered_token(row, vocab, m, d, s);
  }
  __shared__ int32_t chosen;
  if (t == 0) chosen = token;
  __syncthreads();
  token = chosen;
  float logprob = 0.0f;
  double mx = 0.0, log_sum = 0.0;  // the raw row's maximum and log-sum (thread 0's)
  if (d.logprob && token >= 0) {
    // logit - m - log(sum_exp): sum_exp is the weights' total at temperature 1, min-p 0, of
    // the raw row.
    float x = 0.0f;
    if (adjusted) {
      if (t == 0) {  // the token's raw logit: its entry's kept value when it was adjusted
        x = row[token];
        int lo = a_begin, hi = a_end;
        while (lo < hi) {
          const int mid = (lo + hi) / 2;
          if (adj.entries[mid].token < token) {
            lo = mid + 1;
          } else {
            hi = mid;
          }
        }
        if (lo < a_end && adj.entries[lo].token == token) x = adj.raw[lo];
      }
      mx = raw_m;
      log_sum = raw_log_sum;
    } else {
      log_sum = log_sum_exp_shifted(row, vocab, m, s);
      x = row[token];
      mx = m;
    }
    if (t == 0) {
      const double xd = isnan(x) ? -CUDART_INF : static_cast<double>(x);
      logprob = static_cast<float>(__dsub_rn(__dsub_rn(xd, mx), log_sum));
    }
  }
  if (t == 0) {
    out[blockIdx.x] = token;
    out_logprobs[blockIdx.x] = logprob;
  }
  // top_logprobs (which needs logprob): the raw row's most likely tokens, each with the
  // logprob expression above.
  const int k = min(static_cast<int>(d.top_logprobs), vocab);
  if (k == 0 || token < 0) return;
  __shared__ double top_mx, top_log_sum;
  if (t == 0) {
    top_mx = mx;
    top_log_sum = log_sum;
  }
  __syncthreads();  // thread 0 has read the adjusted row
  for (int e = a_begin + t; e < a_end; e += kSampleThreads) row[adj.entries[e].token] = adj.raw[e];
  __syncthreads();
  top_logit_keys(row, vocab, k, s);
  if (t < k) {
    const int32_t id = sample_math::key_token(s.keys[t]);
    const float x = row[id];
    const double xd = isnan(x) ? -CUDART_INF : static_cast<double>(x);
    out_top[static_cast<size_t>(blockIdx.x) * kMaxTopLogprobs + t] =
        TopLogprob{id, static_cast<float>(__dsub_rn(__dsub_rn(xd, top_mx), top_log_sum))};
  }
}

// score_rows (ops.h): one CTA of kSampleThreads per row, score_row's arithmetic
// (common/sample_draw.h): the row's maximum m; the logprob of x is x - m - log-sum as
// sample_rows' logprob, or, when m is infinite, -log(tokens at m) at m and -inf elsewhere.
__global__ void __launch_bounds__(kSampleThreads)
    score_rows_kernel(const float* logits, int vocab, const int32_t* targets, const int32_t* tops,
                      float* out_logprobs, TopLogprob* out_top) {
  extern __shared__ double smem[];
  __shared__ float red[kSampleWarps];
  __shared__ int red_i[kSampleWarps];
  __shared__ double log_sum_s;  // log-sum, or log(tokens at m) when m is infinite
  const SampleSmem s = sample_smem(smem, vocab);
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  const int t = threadIdx.x;
  const float m = row_max(row, vocab, red);
  const bool degenerate = m == CUDART_INF_F || m == -CUDART_INF_F;
  auto as_double = [](float x) { return isnan(x) ? -CUDART_INF : static_cast<double>(x); };
  if (degenerate) {
    int count = 0;
    for (int j = t; j < vocab; j += kSampleThreads) count += as_double(row[j]) == m ? 1 : 0;
    count = block_reduce(
        count, [](int a, int b) { return a + b; }, red_i);
    if (t == 0) log_sum_s = log(static_cast<double>(count));
  } else {
    const double log_sum = log_sum_exp_shifted(row, vocab, m, s);
    if (t == 0) log_sum_s = log_sum;
  }
  __syncthreads();
  const double log_sum = log_sum_s;
  auto logprob = [&](int32_t id) {
    const double x = as_double(row[id]);
    if (degenerate) return x == m ? static_cast<float>(-log_sum) : -CUDART_INF_F;
    return static_cast<float>(__dsub_rn(__dsub_rn(x, m), log_sum));
  };
  if (t == 0) out_logprobs[blockIdx.x] = logprob(targets[blockIdx.x]);
  const int k = min(tops[blockIdx.x], vocab);
  if (k <= 0) return;
  top_logit_keys(row, vocab, k, s);
  if (t < k) {
    const int32_t id = sample_math::key_token(s.keys[t]);
    out_top[static_cast<size_t>(blockIdx.x) * kMaxTopLogprobs + t] = TopLogprob{id, logprob(id)};
  }
}

// Allows `kernel` sample_rows_smem(kMaxSampleVocab) bytes of dynamic shared memory, once per
// device (bit d of `prepared`); `what` names the launch in the error.
template <typename Kernel>
Status allow_sample_smem(Kernel kernel, std::atomic<uint64_t>& prepared, const char* what) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (err == cudaSuccess && (bit == 0 || (prepared.load() & bit) == 0)) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(sample_rows_smem(kMaxSampleVocab)));
    if (err == cudaSuccess) prepared.fetch_or(bit);
  }
  if (err != cudaSuccess) {
    return internal_error(std::string(what) +
                          ": shared memory attribute: " + cudaGetErrorString(err));
  }
  return ok_status();
}

Status check_positive(int v, const char* name) {
  if (v > 0) return ok_status();
  return invalid_argument(std::string(name) + " = " + std::to_string(v) + ": expected > 0");
}

Status check_vocab(int vocab, const char* what) {
  PS_RETURN_IF_ERROR(check_positive(vocab, "vocab"));
  if (vocab > kMaxSampleVocab) {
    return invalid_argument(std::string(what) + ": vocab = " + std::to_string(vocab) +
                            ": expected at most " + std::to_string(kMaxSampleVocab));
  }
  return ok_status();
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
  return launched("embed_gather", launch_step_kernel(rows, embed_gather_kernel, rows, kRowThreads,
                                                     0, stream, embed, token_ids, hidden, x));
}

Status rmsnorm(const float* x, const int32_t* row_index, int rows, int hidden, const float* w,
               float eps, uint16_t* y, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(hidden, "hidden"));
  const bool vec = hidden % 4 == 0 && hidden <= 4 * kMaxVec * kRowThreads;
  return launched("rmsnorm",
                  launch_step_kernel(rows, vec ? rmsnorm_vec_kernel : rmsnorm_kernel, rows,
                                     kRowThreads, 0, stream, x, row_index, hidden, w, eps, y));
}

Status rope_cos_sin(const int32_t* positions, int rows, const double* inv_freq, int head_dim,
                    double attention_factor, float* cos_sin, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(head_dim, "head_dim"));
  return launched("rope_cos_sin",
                  launch_step_kernel(rows, rope_cos_sin_kernel, rows, 64, 0, stream, positions,
                                     inv_freq, head_dim / 2, attention_factor, cos_sin));
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
  for (const auto& [scale, name] : {std::pair{a.k_scale, "k_scale"}, {a.v_scale, "v_scale"}}) {
    if (!(std::isfinite(scale) && scale > 0.0f) || (!a.kv_fp8 && scale != 1.0f)) {
      return invalid_argument(
          std::string(name) + " = " + std::to_string(scale) +
          (a.kv_fp8 ? ": expected a finite scale > 0" : ": expected 1 without kv_fp8"));
    }
  }
  const dim3 grid(static_cast<unsigned>(a.rows),
                  static_cast<unsigned>((a.num_qo_heads + 2 * a.num_kv_heads + kEpilogueWarps - 1) /
                                        kEpilogueWarps));
  const int threads = 32 * kEpilogueWarps;
  const auto kernel = a.head_dim == 64    ? qkv_epilogue_kernel<2>
                      : a.head_dim == 128 ? qkv_epilogue_kernel<4>
                                          : qkv_epilogue_kernel<8>;
  return launched("qkv_epilogue", launch_step_kernel(a.rows, kernel, grid, threads, 0, stream, a));
}

Status silu_mul(const uint16_t* gate_up, int rows, int inner, uint16_t* y, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(inner, "inner"));
  const size_t n = static_cast<size_t>(rows) * inner;
  const bool vec = inner % 8 == 0;
  return launched("silu_mul", launch_step_kernel(rows, vec ? silu_mul_vec_kernel : silu_mul_kernel,
                                                 grid_for(vec ? n / 8 : n), 256, 0, stream, gate_up,
                                                 static_cast<size_t>(rows), inner, y));
}

Status row_absmax(const uint16_t* x, int rows, int cols, float* amax, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(cols, "cols"));
  row_absmax_kernel<<<rows, kRowThreads, 0, stream>>>(x, cols, amax);
  return launched("row_absmax");
}

Status quantize_fp8(const uint16_t* x, int rows, int cols, const float* amax, int num_amax,
                    uint8_t* xq, float* scale, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(cols, "cols"));
  PS_RETURN_IF_ERROR(check_positive(num_amax, "num_amax"));
  quantize_fp8_kernel<<<std::min(rows, kQuantizeCtas), kRowThreads, 0, stream>>>(
      x, rows, cols, amax, num_amax, xq, scale);
  return launched("quantize_fp8");
}

Status add_f32(float* y, const float* x, size_t n, StreamHandle stream) {
  if (n == 0) return ok_status();
  add_f32_kernel<<<grid_for(n), 256, 0, stream>>>(y, x, n);
  return launched("add_f32");
}

Status argmax_rows(const float* logits, int rows, int vocab, int32_t* out, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(vocab, "vocab"));
  argmax_rows_kernel<<<rows, kArgmaxThreads, 0, stream>>>(logits, vocab, out);
  return launched("argmax_rows");
}

Status mask_rows(float* logits, int rows, int vocab, const int32_t* mask_index,
                 const uint32_t* masks, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_positive(vocab, "vocab"));
  if (rows > 65535) {
    return invalid_argument("rows = " + std::to_string(rows) + ": expected <= 65535");
  }
  constexpr int kThreads = 256, kSpan = 1024;  // tokens per CTA: four per thread
  const dim3 grid(static_cast<unsigned>((vocab + kSpan - 1) / kSpan), static_cast<unsigned>(rows));
  mask_rows_kernel<<<grid, kThreads, 0, stream>>>(logits, vocab, mask_index, masks);
  return launched("mask_rows");
}

Status sample_rows(float* logits, int rows, int vocab, const SampleDraw* draws,
                   const SampleAdjusts& adjusts, int32_t* out, float* out_logprobs,
                   TopLogprob* out_top, StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_vocab(vocab, "sample_rows"));
  static std::atomic<uint64_t> prepared{0};
  PS_RETURN_IF_ERROR(allow_sample_smem(sample_rows_kernel, prepared, "sample_rows"));
  sample_rows_kernel<<<rows, kSampleThreads, sample_rows_smem(vocab), stream>>>(
      logits, vocab, draws, adjusts, out, out_logprobs, out_top);
  return launched("sample_rows");
}

Status score_rows(const float* logits, int rows, int vocab, const int32_t* targets,
                  const int32_t* tops, float* out_logprobs, TopLogprob* out_top,
                  StreamHandle stream) {
  if (rows == 0) return ok_status();
  PS_RETURN_IF_ERROR(check_positive(rows, "rows"));
  PS_RETURN_IF_ERROR(check_vocab(vocab, "score_rows"));
  static std::atomic<uint64_t> prepared{0};
  PS_RETURN_IF_ERROR(allow_sample_smem(score_rows_kernel, prepared, "score_rows"));
  score_rows_kernel<<<rows, kSampleThreads, sample_rows_smem(vocab), stream>>>(
      logits, vocab, targets, tops, out_logprobs, out_top);
  return launched("score_rows");
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
