// backend_factory_gpu_test.cc: the backend factory on a CUDA device (label gpu; built only
// with CUDA, every test skips without a device). Oracle: the CPU backend (f32) on the same
// weights; the CUDA backend computes in bf16, so logits agree to a relative 2e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "packserve/model/cuda/device_query.h"
#include "packserve/model/factory/backend_factory.h"
#include "packserve/model/forward_test_util.h"

namespace packserve::model {
namespace {

using testing_util::run_prefill;

// ||got - want||_2 / ||want||_2.
double relative_rms_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

TEST(BackendFactoryGpu, CudaAndAutoMatchCpu) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const ModelWeights w = testing_util::make_weights(testing_util::qwen3_config());
  BackendOptions o;
  o.weights = &w;
  o.cpu_default_num_pages = 8;
  auto cpu = make_forward_backend(o);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  const std::vector<float> want = run_prefill(*cpu->backend, w.config.vocab_size);

  for (BackendKind kind : {BackendKind::kCuda, BackendKind::kAuto}) {
    o.kind = kind;
    o.num_pages = 0;                  // sized from free device memory
    o.gpu_memory_utilization = 0.05;  // leave the device to others
    o.max_batch_rows = 64;
    auto made = make_forward_backend(o);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    EXPECT_EQ(made->backend->name(), "cuda");
    EXPECT_GE(made->pool.num_pages, 2);
    EXPECT_NE(made->summary.find("--gpu-memory-utilization"), std::string::npos) << made->summary;
    const std::vector<float> got = run_prefill(*made->backend, w.config.vocab_size);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LT(relative_rms_error(got, want), 2e-2);
  }
}

// Tensor parallelism over two devices: each device's pool is sized for its share (half the
// KV heads), the summary names the devices, and the logits are the CPU's.
TEST(BackendFactoryGpu, TensorParallelMatchesCpu) {
  if (cuda::cuda_device_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  ModelConfig c = testing_util::qwen3_config();
  c.num_kv_heads = 2;
  const ModelWeights w = testing_util::make_weights(c);
  BackendOptions o;
  o.weights = &w;
  o.cpu_default_num_pages = 8;
  auto cpu = make_forward_backend(o);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  const std::vector<float> want = run_prefill(*cpu->backend, c.vocab_size);
  o.kind = BackendKind::kCuda;
  o.num_pages = 0;
  o.gpu_memory_utilization = 0.05;
  o.max_batch_rows = 64;
  o.tensor_parallel = 2;
  auto made = make_forward_backend(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_NE(made->summary.find("devices 0..1, tensor parallel 2"), std::string::npos)
      << made->summary;
  const std::vector<float> got = run_prefill(*made->backend, c.vocab_size);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(relative_rms_error(got, want), 2e-2);
}

TEST(BackendFactoryGpu, BadDeviceIsAClearError) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const ModelWeights w = testing_util::make_weights(testing_util::qwen3_config());
  BackendOptions o;
  o.kind = BackendKind::kCuda;
  o.weights = &w;
  o.cuda_device = 999;
  auto made = make_forward_backend(o);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(made.status().message().find("CUDA device 999"), std::string::npos);
}

}  // namespace
}  // namespace packserve::model
