// cost_model_test.cc: the roofline of cost_model.h against hand arithmetic and published facts
// (Llama-3.1-8B has 8,030,261,248 parameters), and the JSON validation rules.
#include "packserve/sched/cost_model.h"

#include <gtest/gtest.h>

#include "packserve/common/shared_dir.h"

namespace packserve::sched {
namespace {

TEST(CostModel, LlamaShapeMatchesPublishedParameterCount) {
  const CostModel m{CostModelConfig{}};
  // Per layer: q 4096*4096 + k,v 2*4096*1024 + o 4096*4096 + MLP 3*4096*14336 = 218,103,808.
  EXPECT_EQ(m.linear_params_per_layer(), 218103808);
  // 32 layers + embedding + lm_head (untied, 128256 * 4096 each) + 65 RMSNorm weight vectors
  // (2 per layer + the final one) = 8,030,261,248 (the model card's count).
  const int64_t total = 32 * m.linear_params_per_layer() + 2 * 128256LL * 4096 + 65 * 4096;
  EXPECT_EQ(total, 8030261248LL);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token(), 131072.0);  // 2 * 32 * 8 * 128 * 2
  // 55e9 / (131072 * 16) = 26226.04 -> 26226 pages of 16 tokens.
  EXPECT_EQ(m.num_kv_pages(16), 26226);
}

TEST(CostModel, DecodeStepIsMemoryBound) {
  const CostModel m{CostModelConfig{}};
  StepWork w;
  w.num_decode_rows = 1;
  w.num_sample_rows = 1;
  w.kv_read_tokens = 1000;
  w.attention_pairs = 1000;
  // bytes = (32 * 218103808 + 4096 * 128256) * 2 + 131072 * (1000 + 1)
  const double bytes = (32.0 * 218103808 + 4096.0 * 128256) * 2 + 131072.0 * 1001;
  const double expected_ms = 1.5 + bytes / 3e12 * 1e3;  // 6.5468 ms
  EXPECT_NEAR(m.step_time_ms(w), expected_ms, 1e-9);
}

TEST(CostModel, LongPrefillIsComputeBound) {
  const CostModel m{CostModelConfig{}};
  StepWork w;
  w.num_prefill_tokens = 8192;
  w.num_sample_rows = 1;
  w.attention_pairs = 8192LL * 8193 / 2;
  w.kv_read_tokens = 8192;
  const double gemm = 2.0 * 32 * 218103808 * 8192 + 2.0 * 4096 * 128256;
  const double attn = 4.0 * 32 * 128 * 32 * (8192.0 * 8193 / 2);
  const double expected_ms = 1.5 + (gemm / 6e14 + attn / 4e14) * 1e3;  // ~197 ms
  EXPECT_NEAR(m.step_time_ms(w), expected_ms, 1e-9);
  EXPECT_EQ(m.step_time_ms(StepWork{}), 0.0);  // an empty step costs nothing
}

TEST(CostModel, StepWorkOfBatchCountsCausalPairs) {
  ScheduledBatch b;
  ScheduledSequence prefill;
  prefill.is_prefill = true;
  prefill.start_position = 10;
  prefill.num_tokens = 4;  // rows see 11, 12, 13, 14 keys
  prefill.samples_token = false;
  ScheduledSequence decode;
  decode.is_prefill = false;
  decode.start_position = 99;
  decode.num_tokens = 1;  // sees 100 keys
  decode.samples_token = true;
  b.sequences = {decode, prefill};
  b.num_prefill_tokens = 4;
  b.num_decode_rows = 1;
  const StepWork w = step_work_of(b);
  EXPECT_EQ(w.attention_pairs, 11 + 12 + 13 + 14 + 100);
  EXPECT_EQ(w.kv_read_tokens, 14 + 100);
  EXPECT_EQ(w.num_sample_rows, 1);
}

TEST(CostModel, BundledJsonIsTheDocumentedDefault) {
  auto m = CostModel::load(source_root() + "/data/cost_models/h100_llama31_8b.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const CostModelConfig d;
  EXPECT_EQ(m->config().num_layers, d.num_layers);
  EXPECT_EQ(m->config().num_kv_heads, d.num_kv_heads);
  EXPECT_EQ(m->config().intermediate_size, d.intermediate_size);
  EXPECT_EQ(m->config().vocab_size, d.vocab_size);
  EXPECT_DOUBLE_EQ(m->config().hbm_bytes_per_s, d.hbm_bytes_per_s);
  EXPECT_DOUBLE_EQ(m->config().gemm_flops_per_s, d.gemm_flops_per_s);
  EXPECT_DOUBLE_EQ(m->config().attention_flops_per_s, d.attention_flops_per_s);
  EXPECT_DOUBLE_EQ(m->config().kv_capacity_bytes, d.kv_capacity_bytes);
  EXPECT_DOUBLE_EQ(m->config().step_overhead_us, d.step_overhead_us);
}

// The H200 file was fitted to packserve's CUDA forward on an H200 (forward_bench, graph-replayed
// steps with the device argmax, 2026-12-02, docs/simulator.md): it must give those step times
// back. Decode b1 and b128 fix the bandwidth and the overhead, so they match to rounding; b32
// is the check (the model is 3.6 % slow there); the 8k prefill fixes the attention rate.
TEST(CostModel, H200FileReproducesTheMeasuredSteps) {
  auto m = CostModel::load(source_root() + "/data/cost_models/h200_llama31_8b.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const auto decode = [](int64_t rows) {
    StepWork w;
    w.num_decode_rows = rows;
    w.num_sample_rows = rows;
    w.attention_pairs = rows * 2049;  // one query row after 2048 keys
    w.kv_read_tokens = rows * 2049;
    return w;
  };
  EXPECT_NEAR(m->step_time_ms(decode(1)), 5.296, 0.01 * 5.296);
  EXPECT_NEAR(m->step_time_ms(decode(32)), 7.004, 0.05 * 7.004);
  EXPECT_NEAR(m->step_time_ms(decode(128)), 13.338, 0.01 * 13.338);
  StepWork prefill;
  prefill.num_prefill_tokens = 8192;
  prefill.num_sample_rows = 1;
  prefill.attention_pairs = int64_t{8192} * 8193 / 2;
  prefill.kv_read_tokens = 8192;
  EXPECT_NEAR(m->step_time_ms(prefill), 217.37, 0.01 * 217.37);
}

std::string json_with(const std::string& model_extra, const std::string& device_extra,
                      const std::string& heads = "8") {
  return R"({"name": "t", "model": {"num_layers": 2, "hidden_size": 64, "num_qo_heads": 8,
    "num_kv_heads": )" +
         heads + R"(, "head_dim": 8, "intermediate_size": 128, "vocab_size": 100,
    "dtype_bytes": 2)" +
         model_extra + R"(}, "device": {"hbm_bytes_per_s": 1e12,
    "gemm_flops_per_s": 1e14, "attention_flops_per_s": 1e14, "kv_capacity_bytes": 1e9,
    "step_overhead_us": 0)" +
         device_extra + "}}";
}

void expect_bad(const std::string& text, const std::string& needle) {
  auto m = CostModel::parse(text, "cm.json");
  ASSERT_FALSE(m.ok()) << "accepted: " << text;
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("cm.json"), std::string::npos);
}

TEST(CostModel, JsonValidation) {
  ASSERT_TRUE(CostModel::parse(json_with("", ""), "cm.json").ok());
  expect_bad(json_with(", \"num_experts\": 8", ""), "model.num_experts: unknown key");
  expect_bad(json_with("", ", \"tflops\": 1"), "device.tflops: unknown key");
  expect_bad(json_with("", "", "3"), "model.num_qo_heads");  // 8 % 3 != 0
  expect_bad(json_with("", "", "\"8\""), "model.num_kv_heads: expected an integer");
  expect_bad(json_with("", "", "0"), "model.num_kv_heads");
  std::string no_bw = json_with("", "");
  no_bw.replace(no_bw.find("\"hbm_bytes_per_s\": 1e12,"), 25, "");
  expect_bad(no_bw, "device.hbm_bytes_per_s: missing");
  std::string neg = json_with("", "");
  neg.replace(neg.find("1e14"), 4, "-1");
  expect_bad(neg, "device.gemm_flops_per_s");
  expect_bad("{\"name\": ", "parse error");
  auto missing = CostModel::load("/nonexistent/cm.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace packserve::sched
