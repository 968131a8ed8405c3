// backend_factory_test.cc: the backend factory on the CPU (label cpu).
// Oracles: CpuForwardBackend created directly (bit-identical logits), the tensors of
// make_random_weights counted one by one (device weight bytes), hand-computed page sizes and
// the published parameter count of Llama-3.1-8B.
#include "packserve/model/factory/backend_factory.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "packserve/model/dummy_model.h"
#include "packserve/model/forward_cpu.h"
#include "packserve/model/forward_test_util.h"

namespace packserve::model {
namespace {

using testing_util::run_prefill;

constexpr size_t kGiB = size_t{1} << 30;

TEST(BackendFactory, ParsesKinds) {
  EXPECT_EQ(*parse_backend_kind("cpu"), BackendKind::kCpu);
  EXPECT_EQ(*parse_backend_kind("cuda"), BackendKind::kCuda);
  EXPECT_EQ(*parse_backend_kind("auto"), BackendKind::kAuto);
  EXPECT_EQ(*parse_gemm_tuning("bucket"), GemmTuning::kPerBucket);
  EXPECT_EQ(*parse_gemm_tuning("shape"), GemmTuning::kPerShape);
  EXPECT_EQ(*parse_gemm_tuning("heuristic"), GemmTuning::kHeuristic);
  const auto bad_tuning = parse_gemm_tuning("fast");
  ASSERT_EQ(bad_tuning.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_tuning.status().message().find("expected bucket, shape or heuristic"),
            std::string::npos)
      << bad_tuning.status().to_string();
  EXPECT_EQ(*parse_weight_quantization("none"), WeightQuantization::kNone);
  EXPECT_EQ(*parse_weight_quantization("fp8"), WeightQuantization::kFp8);
  EXPECT_EQ(parse_weight_quantization("int4").status().message(),
            "quantization 'int4': expected none or fp8");
  EXPECT_EQ(*parse_kv_cache_dtype("auto"), KvCacheDtype::kAuto);
  EXPECT_EQ(*parse_kv_cache_dtype("fp8"), KvCacheDtype::kFp8E4m3);  // vLLM: fp8 = fp8_e4m3
  EXPECT_EQ(*parse_kv_cache_dtype("fp8_e4m3"), KvCacheDtype::kFp8E4m3);
  const auto bad_kv = parse_kv_cache_dtype("int4");
  EXPECT_EQ(bad_kv.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_kv.status().message(), "kv_cache_dtype 'int4': expected auto, fp8 or fp8_e4m3");
  auto bad = parse_backend_kind("gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("expected cpu, cuda or auto"), std::string::npos);
}

TEST(BackendFactory, CpuEqualsDirectCpuBackend) {
  const ModelWeights w = testing_util::make_weights(testing_util::llama_config());
  BackendOptions o;
  o.kind = BackendKind::kCpu;
  o.weights = &w;
  o.cpu_default_num_pages = 8;
  auto made = make_forward_backend(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(made->backend->name(), "cpu");
  EXPECT_EQ(made->pool.num_pages, 8);  // num_pages = 0: the CPU default
  EXPECT_EQ(made->pool.page_size, 16);
  EXPECT_EQ(made->summary,
            "backend cpu: 8 KV pages x 16 tokens (f32, 0.25 MiB), 1 attention thread(s)");

  auto direct = CpuForwardBackend::create(w, KvPoolShape{8, 16}, CpuForwardOptions{});
  ASSERT_TRUE(direct.ok());
  const std::vector<float> a = run_prefill(*made->backend, w.config.vocab_size);
  const std::vector<float> b = run_prefill(**direct, w.config.vocab_size);
  ASSERT_EQ(a.size(), static_cast<size_t>(w.config.vocab_size));
  EXPECT_EQ(a, b);  // same backend, same options: bit-identical

  o.num_pages = 5;  // an explicit num_pages wins
  auto explicit_pages = make_forward_backend(o);
  ASSERT_TRUE(explicit_pages.ok());
  EXPECT_EQ(explicit_pages->pool.num_pages, 5);
}

// --kv-cache-dtype fp8 on the cpu: the option reaches CpuForwardBackend, the page count is
// the CPU rule's (cpu_default_num_pages, or num_pages as given: the dtype does not change it)
// and the pool takes a byte per element. Hand-computed, llama_config: 2 layers, kv_size =
// 2 KV heads x 64 = 128, so a 16-token page is 2 x 2 x 16 x 128 = 8192 elements: 8192 bytes
// in e4m3, 32768 in f32; 8 pages: 65536 bytes (0.06 MiB) against 262144 (0.25 MiB).
TEST(BackendFactory, CpuFp8KvCacheKeepsThePageCountAtAByteAnElement) {
  const ModelWeights w = testing_util::make_weights(testing_util::llama_config());
  EXPECT_EQ(cpu_kv_page_bytes(w.config, 16, KvCacheDtype::kFp8E4m3), size_t{8192});
  EXPECT_EQ(cpu_kv_page_bytes(w.config, 16, KvCacheDtype::kAuto), size_t{32768});
  EXPECT_EQ(cpu_kv_page_bytes(w.config, 16), size_t{32768});
  BackendOptions o;
  o.kind = BackendKind::kCpu;
  o.weights = &w;
  o.cpu_default_num_pages = 8;
  o.kv_cache_dtype = KvCacheDtype::kFp8E4m3;
  auto made = make_forward_backend(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(made->pool.num_pages, 8);
  EXPECT_EQ(made->pool.page_size, 16);
  const auto* cpu = dynamic_cast<const CpuForwardBackend*>(made->backend.get());
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->kv_cache_dtype(), KvCacheDtype::kFp8E4m3);
  EXPECT_EQ(cpu->kv_pool_bytes(), size_t{65536});
  EXPECT_TRUE(cpu->k_pages(0).empty());
  EXPECT_EQ(cpu->k_pages_fp8(0).size(), size_t{8 * 16 * 128});
  EXPECT_EQ(made->summary,
            "backend cpu: 8 KV pages x 16 tokens (fp8_e4m3, 0.06 MiB), 1 attention thread(s)");

  // The same backend made directly: bit-identical logits.
  CpuForwardOptions direct_options;
  direct_options.kv_cache_dtype = KvCacheDtype::kFp8E4m3;
  auto direct = CpuForwardBackend::create(w, KvPoolShape{8, 16}, direct_options);
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  const std::vector<float> a = run_prefill(*made->backend, w.config.vocab_size);
  const std::vector<float> b = run_prefill(**direct, w.config.vocab_size);
  ASSERT_EQ(a.size(), static_cast<size_t>(w.config.vocab_size));
  EXPECT_EQ(a, b);
  // ...and not the f32 pool's (the option is not dropped on the way).
  auto f32 = CpuForwardBackend::create(w, KvPoolShape{8, 16}, CpuForwardOptions{});
  ASSERT_TRUE(f32.ok());
  EXPECT_NE(a, run_prefill(**f32, w.config.vocab_size));

  o.num_pages = 5;  // an explicit num_pages wins, in e4m3 too
  auto explicit_pages = make_forward_backend(o);
  ASSERT_TRUE(explicit_pages.ok());
  EXPECT_EQ(explicit_pages->pool.num_pages, 5);
  EXPECT_EQ(dynamic_cast<const CpuForwardBackend&>(*explicit_pages->backend).kv_pool_bytes(),
            5 * cpu_kv_page_bytes(w.config, 16, KvCacheDtype::kFp8E4m3));

  o.kv_cache_dtype = KvCacheDtype::kAuto;  // the f32 pool of the same 5 pages: 5 x 32768 bytes
  auto auto_made = make_forward_backend(o);
  ASSERT_TRUE(auto_made.ok());
  EXPECT_EQ(dynamic_cast<const CpuForwardBackend&>(*auto_made->backend).kv_pool_bytes(),
            size_t{5 * 32768});
}

TEST(BackendFactory, AutoWithoutDeviceIsCpu) {
  if (cuda_device_available()) GTEST_SKIP() << "a CUDA device is visible: auto picks cuda";
  const ModelWeights w = testing_util::make_weights(testing_util::qwen3_config());
  BackendOptions o;
  o.kind = BackendKind::kAuto;
  o.weights = &w;
  o.cpu_default_num_pages = 4;
  auto made = make_forward_backend(o);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(made->backend->name(), "cpu");
  EXPECT_EQ(made->pool.num_pages, 4);
  const std::vector<float> logits = run_prefill(*made->backend, w.config.vocab_size);
  ASSERT_EQ(logits.size(), static_cast<size_t>(w.config.vocab_size));
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

TEST(BackendFactory, CudaWithoutCudaBuildOrDeviceIsAClearError) {
  if (cuda_device_available()) GTEST_SKIP() << "a CUDA device is visible (gpu test covers it)";
  const ModelWeights w = testing_util::make_weights(testing_util::llama_config());
  BackendOptions o;
  o.kind = BackendKind::kCuda;
  o.weights = &w;
  auto made = make_forward_backend(o);
  ASSERT_FALSE(made.ok());
  const std::string& m = made.status().message();
  if (cuda_backend_compiled()) {
    EXPECT_EQ(made.status().code(), StatusCode::kFailedPrecondition) << m;
    EXPECT_NE(m.find("no CUDA device is visible"), std::string::npos) << m;
  } else {
    EXPECT_EQ(made.status().code(), StatusCode::kUnimplemented) << m;
    EXPECT_NE(m.find("built without CUDA"), std::string::npos) << m;
    EXPECT_NE(m.find("-DPACKSERVE_CUDA=ON"), std::string::npos) << m;
  }
  EXPECT_NE(m.find("--backend cpu"), std::string::npos) << m;  // says what to do instead
}

TEST(BackendFactory, BadOptionsNameTheField) {
  const ModelWeights w = testing_util::make_weights(testing_util::llama_config());
  BackendOptions o;
  auto no_weights = make_forward_backend(o);
  ASSERT_FALSE(no_weights.ok());
  EXPECT_NE(no_weights.status().message().find("weights"), std::string::npos);

  o.weights = &w;
  o.num_pages = -1;
  auto negative = make_forward_backend(o);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("num_pages = -1"), std::string::npos);

  o.num_pages = 0;
  o.page_size = 0;
  auto bad_page = make_forward_backend(o);
  ASSERT_FALSE(bad_page.ok());
  EXPECT_EQ(bad_page.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_page.status().message().find("page_size"), std::string::npos);

  o.page_size = 16;
  o.quantization = WeightQuantization::kFp8;
  EXPECT_EQ(make_forward_backend(o).status().message(),
            "--quantization fp8: needs --backend cuda (the cpu backend computes in f32 from the "
            "checkpoint's values)");
  o.quantization = WeightQuantization::kNone;
  o.tensor_parallel = 2;
  auto cpu_tp = make_forward_backend(o);
  EXPECT_EQ(cpu_tp.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      cpu_tp.status().message(),
      "--tensor-parallel-size = 2: needs --backend cuda (the cpu backend runs on one device)");
}

// Device weight bytes, counted tensor by tensor: every 2-D tensor is a bf16 matrix, every
// 1-D tensor an f32 vector (sizes multiples of 128, so the backend's alignment adds nothing).
size_t weight_bytes_by_tensor(const ModelWeights& w) {
  size_t bytes = 0;
  auto count = [&](const HostTensor& t) {
    if (t.shape.empty()) return;
    bytes += static_cast<size_t>(t.num_elements()) * (t.shape.size() == 2 ? 2 : 4);
  };
  count(w.embed_tokens);
  if (!w.config.tie_word_embeddings) count(w.lm_head);
  count(w.final_norm);
  for (const LayerWeights& l : w.layers) {
    for (const HostTensor* t : {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.q_bias,
                                &l.k_bias, &l.v_bias, &l.q_norm, &l.k_norm, &l.o_proj,
                                &l.post_attention_norm, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      count(*t);
    }
  }
  return bytes;
}

TEST(BackendFactory, NonKvBytesCountEveryWeightOnce) {
  for (ModelConfig c : {testing_util::llama_config(), testing_util::qwen2_config()}) {
    c.vocab_size = 384;  // a multiple of 128: no alignment padding
    const ModelWeights w = testing_util::make_weights(c);
    const size_t R = 3;
    const size_t H = 128, I = 256, Q = static_cast<size_t>(c.q_size()),
                 KV = static_cast<size_t>(c.kv_size());
    const size_t activations =
        R * (H * 4 + (Q + 2 * KV) * 4 + H * 2 + 2 * Q * 2 + 2 * I * 2 + I * 2);
    const size_t rest = weight_bytes_by_tensor(w) + activations + kGpuFixedReserveBytes;
    // The logits: the sampling rows, at least the scoring pass's 64.
    EXPECT_EQ(gpu_non_kv_bytes(c, 3, 2), rest + 64 * 384 * 4);
    EXPECT_EQ(gpu_non_kv_bytes(c, 3, 64), rest + 64 * 384 * 4);
    EXPECT_EQ(gpu_non_kv_bytes(c, 3, 100), rest + 100 * 384 * 4);
    // fp8: the layers' matrices a byte per weight (256-byte aligned: these sizes are) plus an
    // f32 scale each (64-element aligned), and a quantized GEMM input with its rows' maxima and
    // its scale.
    size_t layer_weights = 0, scales = 0;
    for (const LayerWeights& l : w.layers) {
      for (const HostTensor* t :
           {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
        layer_weights += static_cast<size_t>(t->num_elements());
      }
      scales += 4 * 64;
    }
    EXPECT_EQ(gpu_non_kv_bytes(c, 3, 2, WeightQuantization::kFp8),
              rest + 64 * 384 * 4 - layer_weights + scales * 4 + R * (std::max({H, Q, I}) + 4) + 4);
  }
}

TEST(BackendFactory, Llama31_8bSizingOnAn80GiBDevice) {
  auto c = dummy_model_config("llama-3.1-8b", 128256);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  // 32 layers x (k + v) x 16 tokens x 8 kv heads x 128 x bf16 = 2 MiB per page.
  EXPECT_EQ(gpu_kv_page_bytes(*c, 16), size_t{2} << 20);
  // Published parameter count 8,030,261,248 = 8,029,995,008 in matrices (bf16, 2 bytes) +
  // 266,240 in norms (f32, 4 bytes): take away activations, logits and reserve, then count.
  const size_t weights =
      gpu_non_kv_bytes(*c, 1, 1) - kGpuFixedReserveBytes -
      (4096 * 4 + 6144 * 4 + 4096 * 2 + 2 * 4096 * 2 + 2 * 14336 * 2 + 14336 * 2) - 64 * 128256 * 4;
  const size_t norm_params = 4096 * (2 * 32 + 1);
  EXPECT_EQ((weights - norm_params * 4) / 2 + norm_params, size_t{8030261248});

  BackendOptions o;  // utilization 0.9, 2048 rows, 256 sampling rows
  const size_t total = 80 * kGiB, free = 79 * kGiB;
  auto sized = gpu_kv_pages_for_memory(*c, free, total, o);
  ASSERT_TRUE(sized.ok()) << sized.status().to_string();
  const double budget = std::floor(0.9 * static_cast<double>(total) - 1.0 * double(kGiB) -
                                   static_cast<double>(gpu_non_kv_bytes(*c, 2048, 256)));
  EXPECT_EQ(sized->budget_bytes, static_cast<size_t>(budget));
  // Each page also pays its workspace share: two page ids x (13 int32 + 32 q heads x (128 bf16
  // + an f32 lse)).
  const size_t workspace = 2 * (13 * 4 + 32 * (128 * 2 + 4));
  EXPECT_EQ(gpu_page_workspace_bytes(*c), workspace);
  EXPECT_EQ(sized->num_pages,
            static_cast<int32_t>(static_cast<size_t>(budget) / ((2 << 20) + workspace)));
  // About 54 GiB of KV: ~27k pages of 16 tokens.
  EXPECT_GT(sized->num_pages, 26000);
  EXPECT_LT(sized->num_pages, 28500);

  // Memory used by others counts against the share: 20 GiB less free, 20 GiB fewer bytes of pages.
  auto busier = gpu_kv_pages_for_memory(*c, free - 20 * kGiB, total, o);
  ASSERT_TRUE(busier.ok());
  EXPECT_EQ(busier->num_pages, static_cast<int32_t>((static_cast<size_t>(budget) - 20 * kGiB) /
                                                    ((2 << 20) + workspace)));
}

TEST(BackendFactory, Fp8KvCacheHalvesThePageAndAboutDoublesThePool) {
  auto c = dummy_model_config("llama-3.1-8b", 128256);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  // 32 layers x (k + v) x 16 tokens x 8 kv heads x 128 x 1 byte (e4m3) = 1 MiB per page, half
  // of bf16's 2 MiB.
  EXPECT_EQ(gpu_kv_page_bytes(*c, 16, KvCacheDtype::kAuto), size_t{2} << 20);
  EXPECT_EQ(gpu_kv_page_bytes(*c, 16, KvCacheDtype::kFp8E4m3), size_t{1} << 20);
  EXPECT_EQ(gpu_kv_page_bytes(*c, 16, KvCacheDtype::kFp8E4m3) * 2, gpu_kv_page_bytes(*c, 16));

  BackendOptions o;  // utilization 0.9, 2048 rows, 256 sampling rows
  const size_t total = 80 * kGiB, free = 79 * kGiB;
  auto bf16 = gpu_kv_pages_for_memory(*c, free, total, o);
  ASSERT_TRUE(bf16.ok()) << bf16.status().to_string();
  o.kv_cache_dtype = KvCacheDtype::kFp8E4m3;
  auto fp8 = gpu_kv_pages_for_memory(*c, free, total, o);
  ASSERT_TRUE(fp8.ok()) << fp8.status().to_string();
  // The KV dtype changes the pages, not the budget (weights and activations stay as they are).
  const double budget = std::floor(0.9 * static_cast<double>(total) - 1.0 * double(kGiB) -
                                   static_cast<double>(gpu_non_kv_bytes(*c, 2048, 256)));
  EXPECT_EQ(fp8->budget_bytes, static_cast<size_t>(budget));
  EXPECT_EQ(fp8->budget_bytes, bf16->budget_bytes);
  // Each page: 1 MiB of K/V plus the same workspace share as bf16's, two page ids x (13 int32
  // + 32 q heads x (128 bf16 + an f32 lse)) = 16,744 B; far below INT32_MAX pages.
  const size_t workspace = 2 * (13 * 4 + 32 * (128 * 2 + 4));
  EXPECT_EQ(fp8->num_pages,
            static_cast<int32_t>(static_cast<size_t>(budget) / ((1 << 20) + workspace)));
  EXPECT_EQ(bf16->num_pages,
            static_cast<int32_t>(static_cast<size_t>(budget) / ((2 << 20) + workspace)));
  // About twice the pages: a bit less, as the workspace share does not halve.
  EXPECT_GT(fp8->num_pages, bf16->num_pages);
  EXPECT_LT(fp8->num_pages, 2 * bf16->num_pages);
  EXPECT_GT(fp8->num_pages, 2 * bf16->num_pages * 98 / 100);
}

TEST(BackendFactory, GpuSizingErrors) {
  auto c = dummy_model_config("qwen3-0.6b", 151936);
  ASSERT_TRUE(c.ok());
  BackendOptions o;
  for (double u : {0.0, -0.5, 1.01, std::numeric_limits<double>::quiet_NaN()}) {
    o.gpu_memory_utilization = u;
    auto r = gpu_kv_pages_for_memory(*c, 70 * kGiB, 80 * kGiB, o);
    ASSERT_FALSE(r.ok()) << u;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--gpu-memory-utilization"), std::string::npos);
  }
  o.gpu_memory_utilization = 0.9;
  auto inverted = gpu_kv_pages_for_memory(*c, 81 * kGiB, 80 * kGiB, o);
  ASSERT_FALSE(inverted.ok());
  EXPECT_EQ(inverted.status().code(), StatusCode::kInvalidArgument);
  // 2 GiB device: 1.8 GiB share - 1 GiB reserve - weights (~1.5 GB) < one page.
  auto small = gpu_kv_pages_for_memory(*c, 2 * kGiB, 2 * kGiB, o);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(small.status().message().find("raise --gpu-memory-utilization"), std::string::npos);
}

}  // namespace
}  // namespace packserve::model
