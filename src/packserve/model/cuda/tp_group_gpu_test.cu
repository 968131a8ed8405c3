// tp_group_gpu_test.cu [label gpu]: NCCL loaded at run time (TpGroup) on one device: a group
// of one rank, whose all-reduce is the identity, run eagerly and captured in a CUDA graph
// (the forward's graphs capture the ranks' all-reduces). Skips without a device, and says so
// without NCCL (libnccl.so.2 not on the library path). The two-device forward is
// forward_cuda_test's CudaTensorParallel suite.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "packserve/model/cuda/tp_group.h"

namespace packserve::model::cuda {
namespace {

TEST(TpGroupGpu, OneRankAllReduceIsTheIdentityEagerAndInAGraph) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "no CUDA device";
  }
  auto group = TpGroup::create({0});
  if (group.status().code() == StatusCode::kUnimplemented) {
    GTEST_SKIP() << group.status().to_string();
  }
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  EXPECT_EQ((*group)->size(), 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  constexpr size_t kCount = 4099;
  std::vector<float> host(kCount), back(kCount);
  for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(i) * 0.5f - 7.0f;
  float* x = nullptr;
  ASSERT_EQ(cudaMalloc(&x, kCount * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(x, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_TRUE((*group)->all_reduce_sum(0, x, kCount, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), x, kCount * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(back, host);

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status captured = (*group)->all_reduce_sum(0, x, kCount, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.to_string();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), x, kCount * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(back, host);
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  (void)cudaFree(x);
  (void)cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace packserve::model::cuda
