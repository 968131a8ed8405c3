// simulator_test.cc: replays whose TTFT/TPOT/TBT/TTLT are worked out by hand from a cost model
// reduced to a fixed 10 ms per step, and replays of windows of the two real traces that must
// complete every request with consistent token counts and no leaked page.
#include "packserve/sched/simulator.h"

#include <gtest/gtest.h>

#include "packserve/common/shared_dir.h"

namespace packserve::sched {
namespace {

// Every non-empty step lasts 10 ms: the rates are so high that the roofline term is < 1e-12 ms.
CostModel fixed_10ms_model() {
  CostModelConfig c;
  c.hbm_bytes_per_s = 1e30;
  c.gemm_flops_per_s = 1e30;
  c.attention_flops_per_s = 1e30;
  c.step_overhead_us = 10000;
  return CostModel(c);
}

trace::TraceRequest request(double arrival_ms, int32_t input, int32_t output, int64_t line) {
  trace::TraceRequest r;
  r.line_number = line;
  r.arrival_ms = arrival_ms;
  r.input_tokens = input;
  r.output_tokens = output;
  r.segments.push_back(trace::PromptSegment{(uint64_t{1} << 63) | uint64_t(line), input});
  return r;
}

SimulatorConfig small_config() {
  SimulatorConfig c;
  c.kv.num_pages = 1024;
  c.scheduler.check_invariants_every_step = true;
  return c;
}

TEST(Simulator, OneRequestByHand) {
  // Arrives at 0 with 100 prompt tokens and 5 output tokens. Step 1 [0, 10] prefills and samples
  // token 0 at 10 ms; decode steps end at 20, 30, 40, 50.
  trace::Trace t;
  t.requests.push_back(request(0, 100, 5, 1));
  auto r = simulate(t, fixed_10ms_model(), small_config());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->completed, 1);
  EXPECT_NEAR(r->ttft_ms.p50, 10, 1e-6);
  EXPECT_NEAR(r->tpot_ms.p50, 10, 1e-6);  // (50 - 10) / (5 - 1)
  EXPECT_NEAR(r->ttlt_ms.p50, 50, 1e-6);
  EXPECT_EQ(r->tbt_ms.count, 4);
  EXPECT_NEAR(r->tbt_ms.p99, 10, 10 * 0.0005);  // histogram: 0.05 % relative
  EXPECT_NEAR(r->tbt_ms.mean, 10, 1e-6);
  EXPECT_NEAR(r->makespan_s, 0.05, 1e-9);
  EXPECT_NEAR(r->output_tokens_per_s, 100, 1e-6);  // 5 tokens / 0.05 s
  EXPECT_EQ(r->pages_leaked, 0);
  EXPECT_EQ(r->token_count_mismatches, 0);
}

TEST(Simulator, TwoRequestsShareStepsByHand) {
  // A: arrives 0, 100 prompt, 3 out. B: arrives 5, 50 prompt, 2 out.
  // Step [0, 10]: A prefill -> A0 @10. B joins at 10 (arrived during the step).
  // Step [10, 20]: A decode + B prefill -> A1 @20, B0 @20. Step [20, 30]: A2 @30, B1 @30.
  // TTFT: A 10, B 15. TPOT: A (30 - 10) / 2 = 10, B (30 - 20) / 1 = 10. TTLT: A 30, B 25.
  trace::Trace t;
  t.requests.push_back(request(0, 100, 3, 1));
  t.requests.push_back(request(5, 50, 2, 2));
  SimulatorConfig c = small_config();
  c.slo_ttft_ms = 12;  // only A meets it
  auto r = simulate(t, fixed_10ms_model(), c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->completed, 2);
  EXPECT_NEAR(r->ttft_ms.mean, 12.5, 1e-6);
  EXPECT_NEAR(r->ttft_ms.p50, 10, 1e-6);  // nearest rank: 1st of 2
  EXPECT_NEAR(r->ttft_ms.p99, 15, 1e-6);
  EXPECT_NEAR(r->tpot_ms.mean, 10, 1e-6);
  EXPECT_NEAR(r->ttlt_ms.mean, 27.5, 1e-6);
  EXPECT_NEAR(r->makespan_s, 0.03, 1e-9);
  EXPECT_NEAR(r->requests_per_s, 2 / 0.03, 1e-6);
  EXPECT_NEAR(r->goodput_req_per_s, 1 / 0.03, 1e-6);
  EXPECT_EQ(r->num_steps, 3);
}

TEST(Simulator, IdleGapJumpsToNextArrival) {
  // A at 0 (1 token out) finishes at 10; B arrives at 1000 and gets its token at 1010.
  trace::Trace t;
  t.requests.push_back(request(0, 20, 1, 1));
  t.requests.push_back(request(1000, 20, 1, 2));
  auto r = simulate(t, fixed_10ms_model(), small_config());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NEAR(r->ttft_ms.p99, 10, 1e-6);
  EXPECT_NEAR(r->makespan_s, 1.01, 1e-9);
  EXPECT_EQ(r->tpot_ms.count, 0);  // one-token requests have no TPOT
}

TEST(Simulator, AimdHoldsALoneRequestUntilTheStagingTimeout) {
  // N_min = 2, one request: the staging queue (1 < N_t) is held until the oldest waited
  // staging_timeout_ms = 200; the replay jumps there, prefills [200, 210]: TTFT = 210.
  trace::Trace t;
  t.requests.push_back(request(0, 20, 1, 1));
  SimulatorConfig c = small_config();
  c.scheduler.policy = SchedulingPolicy::kAimd;
  c.scheduler.aimd.n_min = 2;
  c.scheduler.aimd.staging_timeout_ms = 200;
  auto r = simulate(t, fixed_10ms_model(), c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NEAR(r->ttft_ms.p50, 210, 1e-6);
}

TEST(Simulator, RejectsBadConfig) {
  trace::Trace t;
  SimulatorConfig c = small_config();
  c.slo_tpot_ms = 0;
  auto r = simulate(t, fixed_10ms_model(), c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("slo_tpot_ms"), std::string::npos);
}

// ---- windows of the real traces (../shared/traces) ----

struct Case {
  const char* file;
  int64_t max_requests;
  double time_scale;
  SchedulingPolicy policy;
  PackingAlgorithm packing;
  // 0 = the cost model capacity; small values force preemption. Mooncake needs >= 8013 pages:
  // its longest request (126,195 + 2,000 output tokens) must fit alone.
  int32_t num_pages;
};

class RealTraceReplay : public ::testing::TestWithParam<Case> {};

TEST_P(RealTraceReplay, CompletesEveryRequestWithoutLeaks) {
  const Case& k = GetParam();
  auto path = find_shared_file(k.file);
  ASSERT_TRUE(path.ok()) << path.status().to_string();
  trace::TraceWindow w;
  w.max_requests = k.max_requests;
  w.time_scale = k.time_scale;
  auto t = trace::load_trace(*path, std::nullopt, w);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(static_cast<int64_t>(t->requests.size()), k.max_requests);
  auto cm = CostModel::load(source_root() + "/data/cost_models/h100_llama31_8b.json");
  ASSERT_TRUE(cm.ok()) << cm.status().to_string();
  SimulatorConfig c;
  c.scheduler.policy = k.policy;
  c.scheduler.packing = k.packing;
  c.kv.num_pages = k.num_pages;
  auto r = simulate(*t, *cm, c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  int64_t expected_tokens = 0;
  for (const auto& q : t->requests) expected_tokens += q.output_tokens;
  EXPECT_EQ(r->completed, k.max_requests);
  EXPECT_EQ(r->kv_exhausted, 0);
  EXPECT_EQ(r->token_count_mismatches, 0);
  EXPECT_EQ(r->output_tokens, expected_tokens);
  EXPECT_EQ(r->pages_leaked, 0);
  EXPECT_EQ(r->ttft_ms.count, k.max_requests);
  if (k.num_pages > 0) {
    EXPECT_GT(r->preemptions, 0);  // the small pool must have forced some
  }
}

constexpr const char* kMooncake = "traces/mooncake/conversation_trace.jsonl";
constexpr const char* kAzure = "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv";
INSTANTIATE_TEST_SUITE_P(
    Windows, RealTraceReplay,
    ::testing::Values(
        Case{kMooncake, 300, 2.0, SchedulingPolicy::kFcfs, PackingAlgorithm::kNone, 0},
        Case{kMooncake, 300, 2.0, SchedulingPolicy::kAimd, PackingAlgorithm::kDp, 0},
        Case{kMooncake, 200, 4.0, SchedulingPolicy::kFcfs, PackingAlgorithm::kNone, 8100},
        Case{kAzure, 500, 1.0, SchedulingPolicy::kFcfs, PackingAlgorithm::kNone, 0},
        Case{kAzure, 500, 1.0, SchedulingPolicy::kAimd, PackingAlgorithm::kFirstFitDecreasing, 0},
        Case{kAzure, 500, 0.25, SchedulingPolicy::kAimd, PackingAlgorithm::kDp, 2000}));

}  // namespace
}  // namespace packserve::sched
