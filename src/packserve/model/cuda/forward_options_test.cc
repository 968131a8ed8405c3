// forward_options_test.cc [label cpu]: CudaForwardBackend::create checks its options before it
// looks for a device, so these run (and must fail the same way) on machines without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "packserve/model/cuda/forward_cuda.h"
#include "packserve/model/forward_test_util.h"

namespace packserve::model {
namespace {

namespace tu = testing_util;

TEST(CudaForwardOptions, SkinnyGemmRowsIsCheckedBeforeTheDevice) {
  ModelConfig c = tu::llama_config();
  c.dtype = DType::kBF16;
  const ModelWeights w = tu::make_weights(c);
  for (const int rows : {-1, cuda::kSkinnyMaxRows + 1}) {
    CudaForwardOptions options;
    options.skinny_gemm_rows = rows;
    auto r = CudaForwardBackend::create(w, KvPoolShape{32, 16}, options);
    ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
    EXPECT_NE(r.status().message().find("skinny_gemm_rows = " + std::to_string(rows)),
              std::string::npos)
        << r.status().to_string();
    EXPECT_NE(r.status().message().find("expected in [0, 16]"), std::string::npos)
        << r.status().to_string();
  }
}

}  // namespace
}  // namespace packserve::model
