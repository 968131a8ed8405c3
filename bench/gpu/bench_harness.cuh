// bench_harness.cuh: the small GPU timing harness of bench/gpu (STYLE.md §9, llm.c's
// benchmark_kernel): warm-up, L2 flush before each eager run, CUDA events, median of N, and
// the median of CUDA-graph replays of back-to-back calls; plus the two ceilings measured in
// the same process (device-to-device copy bandwidth counting bytes read + written, cuBLAS
// bf16 GEMM 8192^3 on random data). Errors abort the bench with the CUDA call and line: a
// benchmark is a program, not a library, so this file may exit.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace packserve::bench {

#define BENCH_CUDA(call)                                                                        \
  do {                                                                                          \
    cudaError_t e_ = (call);                                                                    \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s failed: %s at %s:%d\n", #call, cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                                   \
      std::exit(3);                                                                             \
    }                                                                                           \
  } while (0)

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Element i's N(0,1)-ish draw (sum of 4 uniforms, scaled), from a hash of i.
__device__ inline float random_draw(size_t i, uint32_t seed) {
  float acc = 0.0f;
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32);
  for (int k = 0; k < 4; ++k) {
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    acc += static_cast<float>(h & 0xffffff) * (1.0f / 16777216.0f);
  }
  return (acc - 2.0f) * 1.7320508f;
}

// Fills n b16 values with random_draw.
__global__ inline void fill_random_b16(uint16_t* out, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    __nv_bfloat16 v = __float2bfloat16_rn(random_draw(i, seed));
    out[i] = *reinterpret_cast<uint16_t*>(&v);
  }
}

inline void fill_random(void* p, size_t n_b16, uint32_t seed) {
  fill_random_b16<<<1024, 256>>>(static_cast<uint16_t*>(p), n_b16, seed);
  BENCH_CUDA(cudaGetLastError());
}

// The same draws as e4m3 bytes (a float8 KV cache; saturated, never NaN).
__global__ inline void fill_random_e4m3_kernel(uint8_t* out, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = __nv_cvt_float_to_fp8(random_draw(i, seed), __NV_SATFINITE, __NV_E4M3);
  }
}

inline void fill_random_e4m3(void* p, size_t n, uint32_t seed) {
  fill_random_e4m3_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), n, seed);
  BENCH_CUDA(cudaGetLastError());
}

class Timer {
 public:
  Timer() {
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BENCH_CUDA(cudaEventCreate(&start_));
    BENCH_CUDA(cudaEventCreate(&stop_));
    BENCH_CUDA(cudaMalloc(&flush_, kFlushBytes));
  }
  ~Timer() {
    cudaFree(flush_);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
  }
  cudaStream_t stream() const { return stream_; }

  // Median ms of `reps` eager calls, each after an L2 flush, after `warmup` untimed calls.
  double eager_ms(const std::function<void(cudaStream_t)>& fn, int warmup = 3, int reps = 20) {
    for (int i = 0; i < warmup; ++i) fn(stream_);
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      BENCH_CUDA(cudaMemsetAsync(flush_, i & 0xff, kFlushBytes, stream_));
      BENCH_CUDA(cudaEventRecord(start_, stream_));
      fn(stream_);
      BENCH_CUDA(cudaEventRecord(stop_, stream_));
      BENCH_CUDA(cudaEventSynchronize(stop_));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
      t.push_back(ms);
    }
    return median(t);
  }

  // Median per-call ms of graph replays, each replay = `calls` back-to-back calls of fn.
  double graph_ms(const std::function<void(cudaStream_t)>& fn, int calls = 10, int reps = 15) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    BENCH_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) fn(stream_);
    BENCH_CUDA(cudaStreamEndCapture(stream_, &graph));
    BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    BENCH_CUDA(cudaGraphLaunch(exec, stream_));  // warm-up
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      BENCH_CUDA(cudaEventRecord(start_, stream_));
      BENCH_CUDA(cudaGraphLaunch(exec, stream_));
      BENCH_CUDA(cudaEventRecord(stop_, stream_));
      BENCH_CUDA(cudaEventSynchronize(stop_));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
      t.push_back(ms / calls);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return median(t);
  }

 private:
  static constexpr size_t kFlushBytes = size_t{256} << 20;  // > L2 (50 MB on H100)
  cudaStream_t stream_{};
  cudaEvent_t start_{}, stop_{};
  void* flush_ = nullptr;
};

struct Ceilings {
  double copy_gbps = 0;    // device-to-device copy, bytes read + written per second / 1e9
  double bf16_tflops = 0;  // cuBLAS bf16 GEMM 8192^3, f32 accumulate
};

inline Ceilings measure_ceilings(Timer& timer) {
  Ceilings c;
  const size_t bytes = size_t{2} << 30;
  void *a, *b;
  BENCH_CUDA(cudaMalloc(&a, bytes));
  BENCH_CUDA(cudaMalloc(&b, bytes));
  BENCH_CUDA(cudaMemset(a, 1, bytes));
  const double copy_ms = timer.eager_ms(
      [&](cudaStream_t s) {
        BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
      },
      2, 10);
  c.copy_gbps = 2.0 * bytes / (copy_ms * 1e-3) / 1e9;
  BENCH_CUDA(cudaFree(a));
  BENCH_CUDA(cudaFree(b));

  const int n = 8192;
  void *ma, *mb, *mc;
  const size_t mbytes = size_t{n} * n * 2;
  BENCH_CUDA(cudaMalloc(&ma, mbytes));
  BENCH_CUDA(cudaMalloc(&mb, mbytes));
  BENCH_CUDA(cudaMalloc(&mc, mbytes));
  fill_random(ma, size_t{n} * n, 1);
  fill_random(mb, size_t{n} * n, 2);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    std::exit(3);
  }
  cublasSetStream(h, timer.stream());
  const float alpha = 1.0f, beta = 0.0f;
  const double gemm_ms = timer.eager_ms(
      [&](cudaStream_t) {
        if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, ma, CUDA_R_16BF, n, mb,
                         CUDA_R_16BF, n, &beta, mc, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
          std::fprintf(stderr, "cublasGemmEx failed\n");
          std::exit(3);
        }
      },
      3, 10);
  c.bf16_tflops = 2.0 * n * n * static_cast<double>(n) / (gemm_ms * 1e-3) / 1e12;
  cublasDestroy(h);
  BENCH_CUDA(cudaFree(ma));
  BENCH_CUDA(cudaFree(mb));
  BENCH_CUDA(cudaFree(mc));
  return c;
}

}  // namespace packserve::bench
