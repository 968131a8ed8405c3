// scheduler_test.cc: the scheduler's step anatomy, chunked prefill, token budget, finish
// rules, validation and API contract (scheduler.h). Preemption, cancellation, starvation and
// the aimd policy are in scheduler_policy_test.cc. Every scheduler here runs
// check_invariants() after every step (the harness turns it on).
#include "packserve/sched/scheduler.h"

#include <gtest/gtest.h>

#include "packserve/common/rng.h"
#include "packserve/sched/scheduler_test_util.h"

namespace packserve::sched {
namespace {

using testing_util::expected_output;
using testing_util::Harness;

kv::KvCacheConfig kv_config(int32_t num_pages, int32_t page_size = 4) {
  kv::KvCacheConfig c;
  c.num_pages = num_pages;
  c.page_size = page_size;
  return c;
}

SchedulerConfig fcfs(int32_t budget, int32_t max_running) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_running_requests = max_running;
  return c;
}

TEST(SchedulerConfigTest, ValidateNamesEachField) {
  EXPECT_TRUE(SchedulerConfig{}.validate().ok());
  struct Case {
    void (*mutate)(SchedulerConfig&);
    const char* field;
  };
  const Case cases[] = {
      {[](SchedulerConfig& c) { c.max_num_batched_tokens = 0; }, "max_num_batched_tokens"},
      {[](SchedulerConfig& c) { c.max_num_running_requests = 0; }, "max_num_running_requests"},
      {[](SchedulerConfig& c) { c.max_prefill_chunk_tokens = -1; }, "max_prefill_chunk_tokens"},
      {[](SchedulerConfig& c) { c.prefill_bin_tokens = -1; }, "prefill_bin_tokens"},
      {[](SchedulerConfig& c) { c.prefill_bin_max_requests = -1; }, "prefill_bin_max_requests"},
      {[](SchedulerConfig& c) {
         c.policy = SchedulingPolicy::kAimd;
         c.aimd.n_min = 0;
       },
       "scheduler.aimd.n_min"},
  };
  for (const Case& k : cases) {
    SchedulerConfig c;
    k.mutate(c);
    const Status s = c.validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << k.field;
    EXPECT_NE(s.message().find(k.field), std::string::npos) << s.message();
  }
  // An invalid AIMD config does not matter under fcfs.
  SchedulerConfig c;
  c.aimd.n_min = 0;
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(*parse_scheduling_policy("aimd"), SchedulingPolicy::kAimd);
  EXPECT_FALSE(parse_scheduling_policy("lifo").ok());
  EXPECT_FALSE(Scheduler::create(fcfs(0, 1), kv_config(4)).ok());
  EXPECT_FALSE(Scheduler::create(fcfs(8, 1), kv_config(0)).ok());
}

TEST(SchedulerTest, BadRequestsAndMisuseAreRejectedWithNothingChanged) {
  Harness h(fcfs(16, 4), kv_config(16));
  ASSERT_TRUE(h.add(1, 4, 2, 0.0).ok());
  EXPECT_EQ(h.add(1, 4, 2, 0.0).code(), StatusCode::kInvalidArgument);  // duplicate live id
  EXPECT_EQ(h.add(2, 0, 2, 0.0).code(), StatusCode::kInvalidArgument);  // empty prompt
  EXPECT_EQ(h.add(3, 4, 0, 0.0).code(), StatusCode::kInvalidArgument);  // max_output_tokens
  Request r;
  r.id = 4;
  r.prompt_token_ids = {1};
  r.arrival_time_ms = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(h.scheduler->add_request(r).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.scheduler->cancel(99, 0.0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.scheduler->num_unfinished_requests(), 1);
  EXPECT_EQ(h.scheduler->num_waiting(), 1);

  EXPECT_EQ(h.scheduler->commit(StepOutput{}).status().code(), StatusCode::kInvalidArgument);
  auto batch = h.scheduler->schedule(5.0);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ((*batch)->sequences.size(), 1u);
  EXPECT_EQ(h.scheduler->schedule(6.0).status().code(), StatusCode::kInvalidArgument);
  StepOutput wrong;  // no sampled token for the one sequence
  EXPECT_EQ(h.scheduler->commit(wrong).status().code(), StatusCode::kInvalidArgument);
  StepOutput negative;
  negative.sampled_token_ids = {7};
  negative.step_duration_ms = -1.0;
  EXPECT_EQ(h.scheduler->commit(negative).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(h.scheduler->batch_pending());
  StepOutput good;
  good.sampled_token_ids = {7};
  ASSERT_TRUE(h.scheduler->commit(good).ok());
  EXPECT_EQ(h.scheduler->schedule(4.0).status().code(), StatusCode::kInvalidArgument);  // past
  EXPECT_TRUE(h.scheduler->check_invariants().ok());
}

// prompt 10, budget 4: chunks [0,4) [4,8) [8,10) (the last samples output 0), then decode
// rows for outputs 1..4: 3 + 4 = 7 steps.
TEST(SchedulerTest, ChunkedPrefillThenDecodeToMaxOutputTokens) {
  Harness h(fcfs(4, 4), kv_config(16));
  h.keep_batches = true;
  ASSERT_TRUE(h.add(7, 10, 5, 0.0).ok());
  for (int step = 0; step < 7; ++step) h.step(10.0 * step);
  ASSERT_EQ(h.batches.size(), 7u);
  const int32_t starts[] = {0, 4, 8, 10, 11, 12, 13};
  const int32_t lens[] = {4, 4, 2, 1, 1, 1, 1};
  for (size_t i = 0; i < 7; ++i) {
    ASSERT_EQ(h.batches[i].sequences.size(), 1u);
    const ScheduledSequence& seq = h.batches[i].sequences[0];
    EXPECT_EQ(seq.start_position, starts[i]) << "step " << i;
    EXPECT_EQ(seq.num_tokens, lens[i]) << "step " << i;
    EXPECT_EQ(seq.is_prefill, i < 3);
    EXPECT_EQ(seq.samples_token, i >= 2);
  }
  ASSERT_EQ(h.finished.count(7), 1u);
  const FinishedRequest& f = h.finished[7];
  EXPECT_EQ(f.reason, FinishReason::kLength);
  EXPECT_EQ(f.num_output_tokens, 5);
  // First token at the end of step 2 (starts at 20 ms, lasts 10 ms); last at the end of step 6.
  EXPECT_DOUBLE_EQ(*f.first_token_time_ms, 30.0);
  EXPECT_DOUBLE_EQ(f.finish_time_ms, 70.0);
  EXPECT_EQ(h.outputs[7], expected_output(7, 10, 5));
  EXPECT_FALSE(h.scheduler->has_unfinished_requests());
  const kv::KvCacheStats kv = h.scheduler->kv_cache().stats();
  EXPECT_EQ(kv.pages_free + kv.pages_cached, kv.pages_total);
}

TEST(SchedulerTest, StopTokenFinishesAndCounts) {
  Harness h(fcfs(64, 4), kv_config(16));
  Request r;
  r.id = 3;
  r.prompt_token_ids = {1, 2, 3};
  r.max_output_tokens = 50;
  // The fake executor's third output token (position 3 + 2).
  r.stop_token_ids = {testing_util::fake_token(3, 5)};
  h.known[3] = r.prompt_token_ids;
  ASSERT_TRUE(h.scheduler->add_request(r).ok());
  for (int step = 0; step < 10 && h.scheduler->has_unfinished_requests(); ++step) h.step(step);
  ASSERT_EQ(h.finished.count(3), 1u);
  EXPECT_EQ(h.finished[3].reason, FinishReason::kStop);
  EXPECT_EQ(h.finished[3].num_output_tokens, 3);
}

// A decode row appears in every step while a prompt 20x the budget is prefilled beside it.
TEST(SchedulerTest, DecodeRowsNeverStallBehindALongPrompt) {
  const int32_t budget = 64;
  Harness h(fcfs(budget, 8), kv_config(1024, 16));
  h.keep_batches = true;
  ASSERT_TRUE(h.add(1, 8, 60, 0.0).ok());
  h.step(0.0);  // request 1 prefilled, first token out
  ASSERT_TRUE(h.add(2, 20 * budget, 4, 10.0).ok());
  int step = 1;
  while (h.finished.count(1) == 0) {
    const size_t before = h.outputs[1].size();
    h.step(10.0 * step++);
    const ScheduledBatch& b = h.batches.back();
    ASSERT_FALSE(b.sequences.empty());
    EXPECT_EQ(b.sequences[0].id, 1u);
    EXPECT_FALSE(b.sequences[0].is_prefill);
    EXPECT_LE(b.num_prefill_tokens, budget - 1);
    EXPECT_EQ(h.outputs[1].size(), before + 1) << "request 1 got no token in step " << step;
  }
  // 20 * 64 prompt tokens at 63 per step beside the decode row: ceil(1280 / 63) = 21 steps.
  int prefill_steps = 0;
  for (const ScheduledBatch& b : h.batches) {
    for (const ScheduledSequence& seq : b.sequences) prefill_steps += seq.id == 2 && seq.is_prefill;
  }
  EXPECT_EQ(prefill_steps, 21);
}

TEST(SchedulerTest, MaxPrefillChunkTokensCapsEachChunk) {
  SchedulerConfig c = fcfs(100, 8);
  c.max_prefill_chunk_tokens = 16;
  Harness h(c, kv_config(256));
  h.keep_batches = true;
  ASSERT_TRUE(h.add(1, 40, 1, 0.0).ok());
  ASSERT_TRUE(h.add(2, 40, 1, 0.0).ok());
  h.step(0.0);
  ASSERT_EQ(h.batches[0].sequences.size(), 2u);
  EXPECT_EQ(h.batches[0].sequences[0].num_tokens, 16);
  EXPECT_EQ(h.batches[0].sequences[1].num_tokens, 16);
}

// Property: over random arrivals and lengths, under fcfs and aimd (ffd, dp), every batch
// respects the budget, the running limit and the batch invariants (checked in FakeExecutor),
// and every request finishes with exactly max_output_tokens tokens equal to an undisturbed
// run's.
TEST(SchedulerTest, RandomArrivalsRespectBudgetAndFinishExactly) {
  for (uint64_t seed = 1; seed <= 18; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    Rng rng(seed);
    const int32_t page_size = static_cast<int32_t>(rng.uniform_int(1, 16));
    SchedulerConfig c = fcfs(static_cast<int32_t>(rng.uniform_int(8, 256)),
                             static_cast<int32_t>(rng.uniform_int(1, 16)));
    c.max_prefill_chunk_tokens = static_cast<int32_t>(rng.uniform_int(0, 64));
    // Seeds 13-18 run the priority policy with random priorities; of the others every third
    // runs fcfs, the rest aimd with each packing.
    const bool by_priority = seed > 12;
    if (by_priority) {
      c.policy = SchedulingPolicy::kPriority;
    } else if (seed % 3 != 0) {
      c.policy = SchedulingPolicy::kAimd;
      c.packing = seed % 3 == 1 ? PackingAlgorithm::kFirstFitDecreasing : PackingAlgorithm::kDp;
      c.aimd.n_min = static_cast<int32_t>(rng.uniform_int(1, 6));
      c.aimd.n_max = c.aimd.n_min + 8;
      c.aimd.tau_low_ms = 50.0;
      c.aimd.tau_high_ms = 200.0;
      c.aimd.staging_timeout_ms = 100.0;
    }
    // Enough pages for the largest request (300 + 20 tokens) alone, often far fewer than all.
    const int32_t num_pages = 320 / page_size + 1 + static_cast<int32_t>(rng.uniform_int(0, 200));
    Harness h(c, kv_config(num_pages, page_size));
    const int num_requests = 60;
    RequestId next = 1;
    double now = 0.0;
    for (int step = 0; step < 5000; ++step, now += 10.0) {
      while (next <= static_cast<RequestId>(num_requests) && rng.uniform() < 0.3) {
        // Shared prefixes: half the prompts start with the same 32 tokens.
        const int32_t len = static_cast<int32_t>(rng.uniform_int(1, 300));
        const TokenId first = rng.uniform() < 0.5 ? 1 : static_cast<TokenId>(next * 1000);
        const int32_t priority = by_priority ? static_cast<int32_t>(rng.uniform_int(-1, 3)) : 0;
        ASSERT_TRUE(
            h.add(next, len, static_cast<int32_t>(rng.uniform_int(1, 20)), now, first, priority)
                .ok());
        ++next;
      }
      h.step(now);
      if (next > static_cast<RequestId>(num_requests) && !h.scheduler->has_unfinished_requests()) {
        break;
      }
    }
    ASSERT_EQ(h.finished.size(), static_cast<size_t>(num_requests));
    for (const auto& [id, f] : h.finished) {
      EXPECT_EQ(f.reason, FinishReason::kLength) << "req=" << id;
      EXPECT_EQ(f.num_output_tokens, h.max_output_of[id]) << "req=" << id;
      EXPECT_EQ(h.outputs[id], expected_output(id, h.prompt_len_of[id], h.max_output_of[id]))
          << "req=" << id;
    }
    const kv::KvCacheStats kv = h.scheduler->kv_cache().stats();
    EXPECT_EQ(kv.pages_free + kv.pages_cached, kv.pages_total);
  }
}

}  // namespace
}  // namespace packserve::sched
