// generate_cli_gpu_test.cc: `packserve generate --backend cuda` on copy models (label gpu;
// built only with CUDA, skips without a device): greedy decoding through the CUDA backend
// (CUDA graphs, pages of 4 tokens, chunked prefill beside decode rows, a cached prefix)
// continues every prompt with the copy distance's period (generate_cli_fixture.h). On a GPU
// machine, PACKSERVE_BIN names the carried executable.
#include "packserve/engine/generate_cli_fixture.h"
#include "packserve/model/factory/backend_factory.h"

namespace packserve::testing {
namespace {

TEST_F(GenerateCliTest, CudaCopyModelContinuesEachPromptPeriodically) {
  if (!model::cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  expect_copy_models_decode_periodically("cuda");
}

TEST_F(GenerateCliTest, CudaStructuredOutputsHold) {
  if (!model::cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  expect_structured_outputs_hold("cuda");
}

// The default pool (sized from --gpu-memory-utilization) of a tiny model with pages of 4 tokens:
// millions of pages, whose attention workspace share (gpu_page_workspace_bytes) must be
// budgeted with them (it once asked cudaMalloc for 21 GB beyond the budget and failed).
TEST_F(GenerateCliTest, CudaDefaultPoolOfSmallPagesFits) {
  if (!model::cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const fs::path prompts = write("one.jsonl", "{\"prompt_ids\": [5, 17, 42, 42, 9]}\n");
  const CliRun r = run("generate " + model() + " --prompts " + prompts.string() +
                       " --max-tokens 4 --temperature 0 --ignore-eos --page-size 4 --backend cuda");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out)[0]["token_ids"].size(), 4u);
}

}  // namespace
}  // namespace packserve::testing
