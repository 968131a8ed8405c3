// gather_bench.cu: the streaming ceiling of a few SMs. How fast can N CTAs (one per SM) pull
// K/V-like rows into shared memory with cp.async, and how many warps must issue the copies?
// It bounds any plan that streams memory-bound items on some SMs while others compute
// (docs/gpu.md, "Streaming per SM").
//
// Each CTA gathers its own 4096 rows of 256 bytes (one KV head's key at head_dim 128, bf16)
// at a stride of 2048 bytes (the eight KV heads of a token), 128 rows (32 KiB) per stage,
// through a ring of kStages stages in shared memory (cp.async.cg, commit/wait groups): the
// copies of stage s + kStages - 1 are issued as stage s has landed. W warps issue the copies;
// the CTA has 8 warps whatever W is, and 192 KiB of shared memory, so one CTA per SM. Bytes
// counted: rows read (no writes). Time: median of 7 samples after a warm-up, each the mean of
// kLaunches back-to-back launches (cudaEvent).
// Usage: gather_bench   (prints a markdown table; exit code 3 on a CUDA error)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "packserve/attention/cuda/tile_mma.cuh"  // cp_async_16 / commit / wait

namespace {

using packserve::attention::cuda::cp_async_16;
using packserve::attention::cuda::cp_async_commit;
using packserve::attention::cuda::cp_async_wait;

constexpr int kRowBytes = 256, kStrideBytes = 2048, kStageRows = 128, kStages = 6;
constexpr int kRowsPerCta = 4096, kThreads = 256;
constexpr int kLaunches = 10;  // back to back per sample (their launch gaps amortised)
constexpr int kStageBytes = kStageRows * kRowBytes;
constexpr int kSmemBytes = kStages * kStageBytes;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(3);
  }
}

// W issuing warps; the stage's 2048 16-byte pieces are split among their threads.
template <int W>
__global__ void __launch_bounds__(kThreads, 1) gather_kernel(const char* src, int* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kIssuers = 32 * W, kPieces = kStageBytes / 16;
  static_assert(kPieces % kIssuers == 0, "pieces split evenly");
  const int tid = static_cast<int>(threadIdx.x);
  const char* base = src + static_cast<int64_t>(blockIdx.x) * kRowsPerCta * kStrideBytes;
  constexpr int kNumStages = kRowsPerCta / kStageRows;
  auto issue = [&](int st) {
    if (tid < kIssuers && st < kNumStages) {
      unsigned char* dst = smem + (st % kStages) * kStageBytes;
#pragma unroll 4
      for (int i = tid; i < kPieces; i += kIssuers) {
        const int row = i / (kRowBytes / 16), piece = i % (kRowBytes / 16);
        const char* g =
            base + static_cast<int64_t>(st * kStageRows + row) * kStrideBytes + piece * 16;
        cp_async_16(dst + row * kRowBytes + piece * 16, g, true);
      }
    }
    cp_async_commit();
  };
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  int acc = 0;
  for (int st = 0; st < kNumStages; ++st) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage st landed for every issuer; stage st - 1 is free
    acc += smem[(st % kStages) * kStageBytes + tid * 4];
    issue(st + kStages - 1);
  }
  if (acc == -1) *sink = acc;  // keeps the reads
}

template <int W>
double gbps(const char* src, int* sink, int ctas) {
  check(cudaFuncSetAttribute(gather_kernel<W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kSmemBytes),
        "cudaFuncSetAttribute");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  gather_kernel<W><<<ctas, kThreads, kSmemBytes>>>(src, sink);
  check(cudaGetLastError(), "launch");
  std::vector<float> ms(7);
  for (float& m : ms) {
    check(cudaEventRecord(e0), "record");
    for (int i = 0; i < kLaunches; ++i) gather_kernel<W><<<ctas, kThreads, kSmemBytes>>>(src, sink);
    check(cudaEventRecord(e1), "record");
    check(cudaEventSynchronize(e1), "launch");
    check(cudaEventElapsedTime(&m, e0, e1), "elapsed");
    m /= kLaunches;
  }
  check(cudaEventDestroy(e0), "event");
  check(cudaEventDestroy(e1), "event");
  std::sort(ms.begin(), ms.end());
  const double bytes = static_cast<double>(ctas) * kRowsPerCta * kRowBytes;
  return bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

}  // namespace

int main() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "properties");
  const int sms = prop.multiProcessorCount;
  char* src = nullptr;
  int* sink = nullptr;
  const size_t bytes = static_cast<size_t>(sms) * kRowsPerCta * kStrideBytes;
  check(cudaMalloc(&src, bytes), "cudaMalloc");
  check(cudaMalloc(&sink, sizeof(int)), "cudaMalloc");
  check(cudaMemset(src, 1, bytes), "cudaMemset");
  std::printf(
      "### gather ceiling: %s, %d SMs; %d rows of %d B at a %d B stride per CTA, "
      "%d-stage ring of %d KiB stages\n\n",
      prop.name, sms, kRowsPerCta, kRowBytes, kStrideBytes, kStages, kStageBytes / 1024);
  std::printf("| CTAs (1 per SM) | 1 warp issues | 2 warps | 4 warps | 8 warps |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const int ctas : {sms / 8, sms / 4, sms / 2, 3 * sms / 4, sms}) {
    const double r[4] = {gbps<1>(src, sink, ctas), gbps<2>(src, sink, ctas),
                         gbps<4>(src, sink, ctas), gbps<8>(src, sink, ctas)};
    std::printf("| %d |", ctas);
    for (const double g : r) std::printf(" %.0f GB/s (%.1f per SM) |", g, g / ctas);
    std::printf("\n");
  }
  check(cudaFree(src), "cudaFree");
  check(cudaFree(sink), "cudaFree");
  return 0;
}
