// scheduler_policy_test.cc: preemption, kv_exhausted, cancellation, FCFS starvation freedom,
// copy-on-write through the scheduler, abort_step and the aimd policy (scheduler.h).
#include <gtest/gtest.h>

#include "packserve/common/rng.h"
#include "packserve/sched/scheduler.h"
#include "packserve/sched/scheduler_test_util.h"

namespace packserve::sched {
namespace {

using testing_util::expected_output;
using testing_util::Harness;

kv::KvCacheConfig kv_config(int32_t num_pages, int32_t page_size = 4, bool caching = true) {
  kv::KvCacheConfig c;
  c.num_pages = num_pages;
  c.page_size = page_size;
  c.enable_prefix_caching = caching;
  return c;
}

SchedulerConfig fcfs(int32_t budget, int32_t max_running) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_running_requests = max_running;
  return c;
}

void run_to_completion(Harness& h, double* now, int max_steps = 10000) {
  for (int i = 0; i < max_steps && h.scheduler->has_unfinished_requests(); ++i) {
    h.step(*now);
    *now += 10.0;
  }
  ASSERT_FALSE(h.scheduler->has_unfinished_requests()) << "did not finish in " << max_steps;
}

// 10 pages of 4 tokens; A and B (prompt 8, 20 outputs) each need 7 pages. They grow in
// lockstep until all 10 pages are used at 20 tokens each; A (older) then needs a page, so B,
// the most recently admitted, is preempted. Both finish with the exact tokens of an
// undisturbed run.
TEST(SchedulerPolicyTest, PreemptsTheMostRecentlyAdmittedAndKeepsItsTokens) {
  for (const bool caching : {false, true}) {
    SCOPED_TRACE(caching ? "prefix caching on" : "prefix caching off");
    Harness h(fcfs(64, 4), kv_config(10, 4, caching));
    ASSERT_TRUE(h.add(1, 8, 20, 0.0, 1).ok());
    ASSERT_TRUE(h.add(2, 8, 20, 0.0, 500).ok());
    double now = 0.0;
    run_to_completion(h, &now);
    ASSERT_FALSE(h.preempted_order.empty());
    EXPECT_EQ(h.preempted_order.front(), 2u);
    EXPECT_EQ(h.finished[1].num_preemptions, 0);
    EXPECT_GE(h.finished[2].num_preemptions, 1);
    for (const RequestId id : {RequestId{1}, RequestId{2}}) {
      EXPECT_EQ(h.finished[id].reason, FinishReason::kLength);
      EXPECT_EQ(h.outputs[id], expected_output(id, 8, 20)) << "req=" << id;
    }
    EXPECT_GT(h.scheduler->stats().num_recomputed_tokens, 0);
    const kv::KvCacheStats kv = h.scheduler->kv_cache().stats();
    EXPECT_EQ(kv.pages_free + kv.pages_cached, kv.pages_total);
  }
}

// A preemption victim already placed in this step's batch (a decode row) is withdrawn when an
// older request in prefill needs its pages.
TEST(SchedulerPolicyTest, VictimAlreadyInTheBatchIsWithdrawn) {
  // Pool 6 pages of 4. Request 1: prompt 20 (5 pages) prefilled in chunks of 4. Request 2:
  // prompt 3, admitted in the first step beside it, decodes from step 1 on and holds 2 pages
  // by step 2. In step 4 request 2's decode row is placed first; then request 1's last chunk
  // needs a sixth page with none left, and request 2 (newest) is withdrawn and preempted.
  SchedulerConfig c = fcfs(8, 4);
  c.max_prefill_chunk_tokens = 4;
  Harness h(c, kv_config(6, 4, false));
  h.keep_batches = true;
  ASSERT_TRUE(h.add(1, 20, 2, 0.0, 1).ok());
  ASSERT_TRUE(h.add(2, 3, 20, 0.0, 500).ok());  // 23 tokens: 6 pages, fits alone
  double now = 0.0;
  for (int step = 0; step < 5; ++step, now += 10.0) h.step(now);
  ASSERT_EQ(h.preempted_order, std::vector<RequestId>{2});
  ASSERT_EQ(h.batches.size(), 5u);
  ASSERT_EQ(h.batches[3].sequences.size(), 2u);  // both still ran in step 3
  ASSERT_EQ(h.batches[4].sequences.size(), 1u);  // request 2's row was withdrawn
  EXPECT_EQ(h.batches[4].sequences[0].id, 1u);
  EXPECT_EQ(h.batches[4].sequences[0].start_position, 16);
  EXPECT_EQ(h.batches[4].num_batched_tokens, 4);
  run_to_completion(h, &now);
  EXPECT_EQ(h.outputs[1], expected_output(1, 20, 2));
  EXPECT_EQ(h.outputs[2], expected_output(2, 3, 20));
}

// 4 pages of 4 tokens = 16 slots. A 20-token prompt can never fit: refused at admission.
// A 12-token prompt alone computes positions 0..15, then needs a fifth page for position 16:
// it is alone, so it ends with kv_exhausted after 5 tokens (sampled at kv_len 12..16).
TEST(SchedulerPolicyTest, RequestLargerThanThePoolEndsWithKvExhausted) {
  Harness h(fcfs(64, 4), kv_config(4, 4));
  ASSERT_TRUE(h.add(1, 20, 5, 0.0).ok());
  ASSERT_TRUE(h.add(2, 12, 10, 0.0, 100).ok());
  double now = 0.0;
  run_to_completion(h, &now);
  EXPECT_EQ(h.finished[1].reason, FinishReason::kKvExhausted);
  EXPECT_EQ(h.finished[1].num_output_tokens, 0);
  EXPECT_EQ(h.finished[2].reason, FinishReason::kKvExhausted);
  EXPECT_EQ(h.finished[2].num_output_tokens, 5);
  EXPECT_EQ(h.outputs[2], expected_output(2, 12, 5));
  EXPECT_EQ(h.scheduler->stats().num_kv_exhausted, 2);
  const kv::KvCacheStats kv = h.scheduler->kv_cache().stats();
  EXPECT_EQ(kv.pages_free + kv.pages_cached, kv.pages_total);
}

// Cancels random requests at random moments: staged/waiting, running, and between schedule()
// and commit(). Each request ends exactly once; all pages return.
TEST(SchedulerPolicyTest, CancellationAtAnyTimeReturnsPages) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    Rng rng(seed);
    Harness h(fcfs(32, 6), kv_config(40, 4));
    std::vector<RequestId> live;
    std::set<RequestId> cancelled;
    RequestId next = 1;
    double now = 0.0;
    for (int step = 0; step < 400; ++step, now += 10.0) {
      if (next <= 80 && rng.uniform() < 0.5) {
        ASSERT_TRUE(h.add(next, static_cast<int32_t>(rng.uniform_int(1, 40)),
                          static_cast<int32_t>(rng.uniform_int(1, 30)), now,
                          rng.uniform() < 0.5 ? 1 : static_cast<TokenId>(next * 100))
                        .ok());
        live.push_back(next++);
      }
      auto cancel_one = [&]() {
        std::vector<RequestId> candidates;
        for (const RequestId id : live) {
          if (h.finished.count(id) == 0 && cancelled.count(id) == 0) candidates.push_back(id);
        }
        if (candidates.empty()) return;
        const RequestId id = candidates[static_cast<size_t>(
            rng.uniform_int(0, static_cast<int64_t>(candidates.size()) - 1))];
        ASSERT_TRUE(h.scheduler->cancel(id, now).ok());
        cancelled.insert(id);
      };
      if (rng.uniform() < 0.1) cancel_one();
      auto batch = h.scheduler->schedule(now);
      ASSERT_TRUE(batch.ok());
      StepOutput out;
      if (!(*batch)->empty()) {
        auto executed = h.executor.execute(**batch);
        ASSERT_TRUE(executed.ok());
        out = *executed;
      }
      if (rng.uniform() < 0.15) cancel_one();  // while the batch is pending
      auto events = h.scheduler->commit(out);
      ASSERT_TRUE(events.ok()) << events.status().to_string();
      h.record(**events);
    }
    run_to_completion(h, &now);
    EXPECT_EQ(h.finished.size(), static_cast<size_t>(next - 1));
    for (const auto& [id, f] : h.finished) {
      if (cancelled.count(id)) {
        EXPECT_EQ(f.reason, FinishReason::kCancelled) << "req=" << id;
        EXPECT_LE(f.num_output_tokens, h.max_output_of[id]);
      } else {
        EXPECT_EQ(f.reason, FinishReason::kLength) << "req=" << id;
      }
      // Whatever was produced, even by a cancelled request, is a prefix of the undisturbed run.
      EXPECT_EQ(h.outputs[id], expected_output(id, h.prompt_len_of[id], f.num_output_tokens));
    }
    EXPECT_EQ(h.scheduler->kv_cache().num_requests(), 0);
    const kv::KvCacheStats kv = h.scheduler->kv_cache().stats();
    EXPECT_EQ(kv.pages_free + kv.pages_cached, kv.pages_total);
  }
}

// A burst of 20 requests (prompt 16, 8 outputs) with 8 running slots and ample budget and
// pages. A request admitted at step s prefills and samples token 0 at s, decodes tokens 1..7
// at s+1..s+7 and leaves at the commit of s+7, so its slot is refilled at s+8: request k
// (0-based, arrival order) is admitted at step 8 * floor(k / 8). FCFS admits in that order.
TEST(SchedulerPolicyTest, FcfsBurstIsServedInArrivalOrderWavesWithExactWaits) {
  Harness h(fcfs(1024, 8), kv_config(1024, 4));
  for (RequestId id = 0; id < 20; ++id)
    ASSERT_TRUE(h.add(id, 16, 8, 0.0, static_cast<TokenId>(id * 100)).ok());
  double now = 0.0;
  run_to_completion(h, &now);
  for (RequestId id = 0; id < 20; ++id) {
    const double admitted_step = 8.0 * static_cast<double>(id / 8);
    // The first token comes at the end of the admission step: (step + 1) * 10 ms.
    EXPECT_DOUBLE_EQ(*h.finished[id].first_token_time_ms, (admitted_step + 1.0) * 10.0)
        << "req=" << id;
  }
}

// Bounded arrivals (at most one per step), 8 running slots, each request resident at most
// 8 steps (prompt <= 16, outputs <= 8, budget for 8 prompts at once): over any 8 steps at
// least as many slots free as requests arrive, so no request waits more than 2 * 8 steps
// (one window for the backlog ahead of it, one for its own slot).
TEST(SchedulerPolicyTest, FcfsWaitIsBoundedUnderABoundedArrivalRate) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    Rng rng(seed);
    Harness h(fcfs(8 * 16 + 8, 8), kv_config(256, 4));
    double now = 0.0;
    RequestId next = 0;
    for (int step = 0; step < 2000; ++step, now += 10.0) {
      if (rng.uniform() < 0.9) {
        ASSERT_TRUE(h.add(next, static_cast<int32_t>(rng.uniform_int(1, 16)),
                          static_cast<int32_t>(rng.uniform_int(1, 8)), now,
                          static_cast<TokenId>(next * 17))
                        .ok());
        ++next;
      }
      h.step(now);
    }
    run_to_completion(h, &now);
    double max_wait_steps = 0.0;
    for (const auto& [id, f] : h.finished) {
      // Admission step = first token step (the prompt fits in one step).
      const double wait = (*f.first_token_time_ms - f.arrival_time_ms) / 10.0 - 1.0;
      max_wait_steps = std::max(max_wait_steps, wait);
    }
    EXPECT_LE(max_wait_steps, 16.0);
  }
}

// The second request's prompt is fully in the first one's published pages: it recomputes its
// last token into a private copy of the shared last page (one PageCopy in the batch). An
// executor failure on that step aborts it; the copy is issued again with the next batch.
TEST(SchedulerPolicyTest, FullyCachedPromptCopiesItsLastPageAndAbortReissuesTheCopy) {
  Harness h(fcfs(64, 4), kv_config(32, 4));
  ASSERT_TRUE(h.add(1, 8, 10, 0.0).ok());
  h.step(0.0);  // request 1 computes and publishes 2 full pages
  ASSERT_TRUE(h.add(2, 8, 3, 10.0).ok());
  h.executor.num_failures_to_inject = 1;
  auto failed = h.scheduler->step(10.0, h.executor);
  EXPECT_EQ(failed.status().code(), StatusCode::kInternal);
  EXPECT_FALSE(h.scheduler->batch_pending());
  auto batch = h.scheduler->schedule(20.0);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ((*batch)->page_copies.size(), 1u);
  EXPECT_EQ((*batch)->page_copies[0].num_tokens, 3);  // positions 4..6 of the shared page
  bool found = false;
  for (const ScheduledSequence& seq : (*batch)->sequences) {
    if (seq.id != 2) continue;
    found = true;
    EXPECT_EQ(seq.start_position, 7);  // 7 cached tokens, the 8th recomputed
    EXPECT_EQ(seq.num_tokens, 1);
    EXPECT_TRUE(seq.samples_token);
  }
  EXPECT_TRUE(found);
  auto out = h.executor.execute(**batch);
  ASSERT_TRUE(out.ok());
  auto events = h.scheduler->commit(*out);
  ASSERT_TRUE(events.ok());
  h.record(**events);
  double now = 30.0;
  run_to_completion(h, &now);
  EXPECT_EQ(h.outputs[2], expected_output(2, 8, 3));
  EXPECT_EQ(h.finished[2].num_cached_prompt_tokens, 7);
}

SchedulerConfig aimd_config(int32_t n_min, int32_t budget, PackingAlgorithm packing) {
  SchedulerConfig c = fcfs(budget, 16);
  c.policy = SchedulingPolicy::kAimd;
  c.packing = packing;
  c.aimd.n_min = n_min;
  c.aimd.n_max = 2 * n_min;
  c.aimd.staging_timeout_ms = 1000.0;
  c.aimd.burst_queue_depth = 1000;
  c.aimd.burst_arrival_rate_per_s = 1e9;
  return c;
}

// Cold start N_0 = N_min = 3: two staged requests are held until the third arrives or the
// staging timeout expires.
SchedulerConfig by_priority(int32_t budget, int32_t max_running) {
  SchedulerConfig c = fcfs(budget, max_running);
  c.policy = SchedulingPolicy::kPriority;
  return c;
}

// One request runs at a time: they start in (priority, arrival) order, whatever order they
// arrived in; fcfs refuses a priority.
TEST(SchedulerPolicyTest, PriorityAdmitsByPriorityThenArrival) {
  Harness h(by_priority(64, 1), kv_config(64));
  const std::vector<std::pair<RequestId, int32_t>> arrivals = {
      {1, 2}, {2, 0}, {3, 1}, {4, 0}, {5, -3}};
  for (const auto& [id, priority] : arrivals) {
    ASSERT_TRUE(h.add(id, 4, 2, 0.0, static_cast<TokenId>(id * 100), priority).ok());
  }
  double now = 0.0;
  run_to_completion(h, &now);
  std::vector<std::pair<double, RequestId>> starts;
  for (const auto& [id, f] : h.finished) starts.emplace_back(*f.first_token_time_ms, id);
  std::sort(starts.begin(), starts.end());
  std::vector<RequestId> order;
  for (const auto& [t, id] : starts) order.push_back(id);
  EXPECT_EQ(order, (std::vector<RequestId>{5, 2, 4, 3, 1}));

  Harness f(fcfs(64, 1), kv_config(64));
  const Status refused = f.add(1, 4, 2, 0.0, 1, 1);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "req=1: priority: 1 needs the priority scheduling policy (this one is fcfs)");
  EXPECT_FALSE(f.scheduler->has_unfinished_requests());
  EXPECT_EQ(parse_scheduling_policy("priority").value(), SchedulingPolicy::kPriority);
}

// As PreemptsTheMostRecentlyAdmittedAndKeepsItsTokens, but the older request has the lower
// priority (5 against 0): it is the one preempted, and both still finish exactly.
TEST(SchedulerPolicyTest, PriorityPreemptsTheLowestPriority) {
  Harness h(by_priority(64, 4), kv_config(10, 4));
  ASSERT_TRUE(h.add(1, 8, 20, 0.0, 1, 5).ok());
  double now = 0.0;
  h.step(now);  // 1 is admitted first
  now += 10.0;
  ASSERT_TRUE(h.add(2, 8, 20, now, 500, 0).ok());
  run_to_completion(h, &now);
  ASSERT_FALSE(h.preempted_order.empty());
  EXPECT_EQ(h.preempted_order.front(), 1u);
  EXPECT_EQ(h.finished[2].num_preemptions, 0);
  EXPECT_GE(h.finished[1].num_preemptions, 1);
  for (const RequestId id : {RequestId{1}, RequestId{2}}) {
    EXPECT_EQ(h.finished[id].reason, FinishReason::kLength);
    EXPECT_EQ(h.outputs[id], expected_output(id, 8, 20)) << "req=" << id;
  }
}

TEST(SchedulerPolicyTest, AimdHoldsStagedRequestsUntilTheThreshold) {
  Harness h(aimd_config(3, 64, PackingAlgorithm::kNone), kv_config(64));
  ASSERT_TRUE(h.add(1, 4, 2, 0.0).ok());
  ASSERT_TRUE(h.add(2, 4, 2, 0.0).ok());
  EXPECT_TRUE(h.step(0.0).tokens.empty());
  EXPECT_EQ(h.scheduler->num_staged(), 2);
  EXPECT_DOUBLE_EQ(*h.scheduler->staging_deadline_ms(), 1000.0);
  ASSERT_TRUE(h.add(3, 4, 2, 5.0).ok());
  EXPECT_EQ(h.step(10.0).tokens.size(), 3u);
  EXPECT_EQ(h.scheduler->num_staged(), 0);
  // A lone request is released by the timeout.
  ASSERT_TRUE(h.add(4, 4, 2, 20.0).ok());
  EXPECT_TRUE(h.step(30.0).tokens.size() <= 3u);
  EXPECT_EQ(h.scheduler->num_staged(), 1);
  double now = 1020.0;
  run_to_completion(h, &now);
  EXPECT_GE(*h.finished[4].first_token_time_ms, 1020.0);
  EXPECT_EQ(h.scheduler->stats().num_aimd_releases, 2);
}

// Seed 001's example: lengths [7, 6, 4, 3], capacity 10. DP packs {7, 3} and {6, 4}; the bin
// holding the oldest request runs first and one step admits one bin only.
TEST(SchedulerPolicyTest, AimdAdmitsOnePackedBinPerStep) {
  Harness h(aimd_config(4, 10, PackingAlgorithm::kDp), kv_config(64));
  h.keep_batches = true;
  const int32_t lengths[] = {7, 6, 4, 3};
  for (RequestId id = 0; id < 4; ++id) {
    ASSERT_TRUE(h.add(id, lengths[id], 1, 0.0, static_cast<TokenId>(id * 100)).ok());
  }
  h.step(0.0);
  h.step(10.0);
  ASSERT_EQ(h.batches.size(), 2u);
  std::set<RequestId> first, second;
  for (const ScheduledSequence& s : h.batches[0].sequences) first.insert(s.id);
  for (const ScheduledSequence& s : h.batches[1].sequences) second.insert(s.id);
  EXPECT_EQ(first, (std::set<RequestId>{0, 3}));
  EXPECT_EQ(second, (std::set<RequestId>{1, 2}));
  EXPECT_EQ(h.batches[0].num_batched_tokens, 10);
  EXPECT_EQ(h.batches[1].num_batched_tokens, 10);
}

}  // namespace
}  // namespace packserve::sched
