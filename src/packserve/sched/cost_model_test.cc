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

CostModelConfig fp8_kv(CostModelConfig c) {
  c.kv_dtype_bytes = 1;
  return c;
}

// A float8 KV cache halves the KV bytes of a token; the weights stay at dtype_bytes.
TEST(CostModel, Fp8KvHalvesKvBytesAndWeightBytesStay) {
  const CostModel bf16{CostModelConfig{}};
  const CostModel fp8{fp8_kv(CostModelConfig{})};
  EXPECT_DOUBLE_EQ(fp8.kv_bytes_per_token(), 65536.0);  // 2 * 32 * 8 * 128 * 1
  EXPECT_DOUBLE_EQ(bf16.kv_bytes_per_token(), 131072.0);
  // (32 * 218103808 + 4096 * 128256) * 2 = 15,009,316,864 bytes in both.
  EXPECT_DOUBLE_EQ(fp8.weight_bytes_per_step(), 15009316864.0);
  EXPECT_DOUBLE_EQ(bf16.weight_bytes_per_step(), 15009316864.0);
}

// Pages are floor(capacity / (kv_bytes_per_token * page_size)), taken per KV dtype: float8
// gets 2n pages where bf16's quotient is n + f with f < 0.5, and 2n + 1 where f >= 0.5.
TEST(CostModel, Fp8KvPagesAreTheFloorOfTheDoubledQuotient) {
  // 55e9 / (131072 * 16) = 26226.04 -> 26226; 55e9 / (65536 * 16) = 52452.09 -> 52452.
  EXPECT_EQ(CostModel{CostModelConfig{}}.num_kv_pages(16), 26226);
  EXPECT_EQ(CostModel{fp8_kv(CostModelConfig{})}.num_kv_pages(16), 52452);
  // 116e9 / (131072 * 16) = 55313.11 -> 55313; 116e9 / (65536 * 16) = 110626.22 -> 110626.
  CostModelConfig h200;
  h200.kv_capacity_bytes = 116.0e9;
  EXPECT_EQ(CostModel{h200}.num_kv_pages(16), 55313);
  EXPECT_EQ(CostModel{fp8_kv(h200)}.num_kv_pages(16), 110626);
  // 100.75 bf16 pages of 16 tokens (2,097,152 bytes each): bf16 100, float8 floor(201.5) = 201.
  CostModelConfig odd;
  odd.kv_capacity_bytes = 2097152.0 * 100.75;
  EXPECT_EQ(CostModel{odd}.num_kv_pages(16), 100);
  EXPECT_EQ(CostModel{fp8_kv(odd)}.num_kv_pages(16), 201);
  // page_size 1: 55e9 / 65536 = 839233.40 -> 839233 (bf16: 55e9 / 131072 = 419616.70 -> 419616).
  EXPECT_EQ(CostModel{CostModelConfig{}}.num_kv_pages(1), 419616);
  EXPECT_EQ(CostModel{fp8_kv(CostModelConfig{})}.num_kv_pages(1), 839233);
}

// A decode step of 64 rows at 4,096 tokens of context is memory bound in both dtypes (its
// compute is ~1.9 ms: GEMMs 9.6e11 FLOP / 6e14, attention 1.4e11 / 4e14); float8 moves half the
// KV bytes. A long prefill is compute bound, so the KV dtype does not change it.
TEST(CostModel, Fp8KvShortensKvBoundStepsOnly) {
  const CostModel bf16{CostModelConfig{}};
  const CostModel fp8{fp8_kv(CostModelConfig{})};
  StepWork decode;
  decode.num_decode_rows = 64;
  decode.num_sample_rows = 64;
  decode.kv_read_tokens = 64 * 4096;
  decode.attention_pairs = 64 * 4096;
  const double weights = (32.0 * 218103808 + 4096.0 * 128256) * 2;
  const double kv_tokens = 64.0 * 4096 + 64;  // read + the new rows written
  EXPECT_NEAR(bf16.step_time_ms(decode), 1.5 + (weights + 131072.0 * kv_tokens) / 3e12 * 1e3,
              1e-9);  // 17.959 ms
  EXPECT_NEAR(fp8.step_time_ms(decode), 1.5 + (weights + 65536.0 * kv_tokens) / 3e12 * 1e3,
              1e-9);  // 12.231 ms
  EXPECT_LT(fp8.step_time_ms(decode), bf16.step_time_ms(decode));

  StepWork prefill;
  prefill.num_prefill_tokens = 8192;
  prefill.num_sample_rows = 1;
  prefill.attention_pairs = 8192LL * 8193 / 2;
  prefill.kv_read_tokens = 8192;
  EXPECT_DOUBLE_EQ(fp8.step_time_ms(prefill), bf16.step_time_ms(prefill));
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
  // The file has no model.kv_dtype_bytes: the KV cache is in the model's dtype.
  EXPECT_EQ(m->config().kv_dtype_bytes, 2);
  EXPECT_EQ(m->config().kv_dtype_bytes, d.kv_dtype_bytes);
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
                      const std::string& heads = "8", const std::string& dtype_bytes = "2") {
  return R"({"name": "t", "model": {"num_layers": 2, "hidden_size": 64, "num_qo_heads": 8,
    "num_kv_heads": )" +
         heads + R"(, "head_dim": 8, "intermediate_size": 128, "vocab_size": 100,
    "dtype_bytes": )" +
         dtype_bytes + model_extra + R"(}, "device": {"hbm_bytes_per_s": 1e12,
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

// model.kv_dtype_bytes is optional: absent, the KV cache is in model.dtype_bytes.
TEST(CostModel, JsonKvDtypeBytesDefaultsToDtypeBytes) {
  auto absent = CostModel::parse(json_with("", ""), "cm.json");
  ASSERT_TRUE(absent.ok()) << absent.status().to_string();
  EXPECT_EQ(absent->config().kv_dtype_bytes, 2);
  EXPECT_DOUBLE_EQ(absent->kv_bytes_per_token(), 512.0);  // 2 * 2 layers * 8 heads * 8 * 2
  // 1e9 / (512 * 16) = 122070.31 -> 122070 pages.
  EXPECT_EQ(absent->num_kv_pages(16), 122070);
  auto f32 = CostModel::parse(json_with("", "", "8", "4"), "cm.json");
  ASSERT_TRUE(f32.ok()) << f32.status().to_string();
  EXPECT_EQ(f32->config().kv_dtype_bytes, 4);

  auto fp8 = CostModel::parse(json_with(", \"kv_dtype_bytes\": 1", ""), "cm.json");
  ASSERT_TRUE(fp8.ok()) << fp8.status().to_string();
  EXPECT_EQ(fp8->config().dtype_bytes, 2);
  EXPECT_EQ(fp8->config().kv_dtype_bytes, 1);
  EXPECT_DOUBLE_EQ(fp8->kv_bytes_per_token(), 256.0);  // 2 * 2 * 8 * 8 * 1
  // 1e9 / (256 * 16) = 244140.625 -> 244140 pages.
  EXPECT_EQ(fp8->num_kv_pages(16), 244140);
  EXPECT_DOUBLE_EQ(fp8->weight_bytes_per_step(), absent->weight_bytes_per_step());
}

TEST(CostModel, JsonBadKvDtypeBytesNamesTheKey) {
  for (const char* bad : {"0", "3", "-1", "8"}) {
    SCOPED_TRACE(bad);
    expect_bad(json_with(std::string(", \"kv_dtype_bytes\": ") + bad, ""),
               std::string("model.kv_dtype_bytes: expected 1 (float8), 2 (bf16/fp16) or 4 (f32)"));
    expect_bad(json_with(std::string(", \"kv_dtype_bytes\": ") + bad, ""),
               std::string("got ") + bad);
  }
  expect_bad(json_with(", \"kv_dtype_bytes\": \"1\"", ""),
             "model.kv_dtype_bytes: expected an integer, got \"1\"");
  expect_bad(json_with(", \"kv_dtype_bytes\": 1.5", ""),
             "model.kv_dtype_bytes: expected an integer, got 1.5");
  // Absent, it takes model.dtype_bytes, which must then be a valid KV element size too.
  expect_bad(json_with("", "", "8", "3"), "model.kv_dtype_bytes");
  // A misspelling is still an unknown key, not a silent default.
  expect_bad(json_with(", \"kv_dtype_byte\": 1", ""), "model.kv_dtype_byte: unknown key");
}

}  // namespace
}  // namespace packserve::sched
