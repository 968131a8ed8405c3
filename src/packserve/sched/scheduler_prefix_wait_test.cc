// scheduler_prefix_wait_test.cc: the prefix wait (scheduler.h, SchedulerConfig::
// prefix_wait_min_tokens): a waiting request whose next prompt pages running requests are
// computing waits for them, keeps its place in the queue, lets the requests behind it in, and
// adopts the pages once they are published; an owner that ends releases the wait.
#include <gtest/gtest.h>

#include <vector>

#include "packserve/sched/scheduler.h"
#include "packserve/sched/scheduler_test_util.h"

namespace packserve::sched {
namespace {

using testing_util::expected_output;
using testing_util::Harness;

constexpr int32_t kPageSize = 4;

kv::KvCacheConfig kv_config() {
  kv::KvCacheConfig c;
  c.num_pages = 64;
  c.page_size = kPageSize;
  return c;
}

SchedulerConfig config(int32_t min_tokens, int32_t max_chunk = 0) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.max_num_running_requests = 8;
  c.max_prefill_chunk_tokens = max_chunk;
  c.prefix_wait_min_tokens = min_tokens;
  return c;
}

// 16 shared tokens (4 pages) then 4 of its own, starting at `own`.
std::vector<TokenId> shared_prompt(TokenId own) {
  std::vector<TokenId> t;
  for (TokenId i = 0; i < 16; ++i) t.push_back(1 + i);
  for (TokenId i = 0; i < 4; ++i) t.push_back(own + i);
  return t;
}

std::vector<TokenId> unrelated_prompt(TokenId first) {
  std::vector<TokenId> t;
  for (TokenId i = 0; i < 20; ++i) t.push_back(first + i);
  return t;
}

struct Row {
  RequestId id;
  int32_t start;
  int32_t num_tokens;
  bool operator==(const Row&) const = default;
};

std::vector<Row> prefill_rows(const ScheduledBatch& batch) {
  std::vector<Row> rows;
  for (const ScheduledSequence& seq : batch.sequences) {
    if (seq.is_prefill) rows.push_back(Row{seq.id, seq.start_position, seq.num_tokens});
  }
  return rows;
}

void finish_all(Harness& h, double now) {
  for (int i = 0; i < 200 && h.scheduler->has_unfinished_requests(); ++i, now += 10.0) {
    h.step(now);
  }
  ASSERT_FALSE(h.scheduler->has_unfinished_requests());
  for (const auto& [id, len] : h.prompt_len_of) {
    EXPECT_EQ(h.outputs[id], expected_output(id, len, h.max_output_of[id])) << "req=" << id;
  }
  const kv::KvCacheStats kv = h.scheduler->kv_cache().stats();
  EXPECT_EQ(kv.pages_free + kv.pages_cached, kv.pages_total);
  EXPECT_FALSE(h.scheduler->kv_cache().has_pending_pages());
}

// Requests 1 and 2 share 16 prompt tokens and arrive with an unrelated request 3 between
// them in the queue. Request 2 waits one step (the shared pages are request 1's pending
// pages), request 3 overtakes it, and in step 2 request 2 computes only its own 4 tokens,
// ahead of request 4 that arrived behind it.
TEST(SchedulerPrefixWaitTest, WaitsForPagesARunningRequestIsComputing) {
  Harness h(config(/*min_tokens=*/8), kv_config());
  h.keep_batches = true;
  ASSERT_TRUE(h.add_prompt(1, shared_prompt(100), 3, 0.0).ok());
  ASSERT_TRUE(h.add_prompt(2, shared_prompt(200), 3, 0.0).ok());
  ASSERT_TRUE(h.add_prompt(3, unrelated_prompt(500), 3, 0.0).ok());
  h.step(0.0);
  ASSERT_TRUE(h.add_prompt(4, unrelated_prompt(700), 3, 10.0).ok());
  h.step(10.0);
  ASSERT_EQ(h.batches.size(), 2u);
  EXPECT_EQ(prefill_rows(h.batches[0]), (std::vector<Row>{{1, 0, 20}, {3, 0, 20}}));
  EXPECT_EQ(prefill_rows(h.batches[1]), (std::vector<Row>{{2, 16, 4}, {4, 0, 20}}));
  EXPECT_EQ(h.scheduler->stats().num_prefix_waits, 1);
  finish_all(h, 20.0);
  EXPECT_EQ(h.finished[2].num_cached_prompt_tokens, 16);
  EXPECT_EQ(h.scheduler->stats().num_prefill_tokens, 20 + 20 + 4 + 20);
}

// A request that computes its whole prompt (prompt logprobs) neither waits for the shared
// pages nor adopts them once published: both compute all 20 tokens; a third request behind
// them adopts the shared pages.
TEST(SchedulerPrefixWaitTest, ARequestComputingItsWholePromptNeitherWaitsNorAdopts) {
  Harness h(config(/*min_tokens=*/8), kv_config());
  h.keep_batches = true;
  ASSERT_TRUE(h.add_prompt(1, shared_prompt(100), 3, 0.0).ok());
  ASSERT_TRUE(h.add_prompt(2, shared_prompt(200), 3, 0.0, /*compute_whole_prompt=*/true).ok());
  h.step(0.0);
  ASSERT_TRUE(h.add_prompt(3, shared_prompt(300), 3, 10.0, /*compute_whole_prompt=*/true).ok());
  ASSERT_TRUE(h.add_prompt(4, shared_prompt(400), 3, 10.0).ok());
  h.step(10.0);
  EXPECT_EQ(prefill_rows(h.batches[0]), (std::vector<Row>{{1, 0, 20}, {2, 0, 20}}));
  EXPECT_EQ(prefill_rows(h.batches[1]), (std::vector<Row>{{3, 0, 20}, {4, 16, 4}}));
  EXPECT_EQ(h.scheduler->stats().num_prefix_waits, 0);
  finish_all(h, 20.0);
  EXPECT_EQ(h.finished[2].num_cached_prompt_tokens, 0);
  EXPECT_EQ(h.finished[3].num_cached_prompt_tokens, 0);
  EXPECT_EQ(h.finished[4].num_cached_prompt_tokens, 16);
}

// Below the threshold, or with the wait off, both compute the shared tokens in step 1.
TEST(SchedulerPrefixWaitTest, ShortSharedRunsAndZeroDoNotWait) {
  for (const int32_t min_tokens : {0, 17}) {
    SCOPED_TRACE(min_tokens);
    Harness h(config(min_tokens), kv_config());
    h.keep_batches = true;
    ASSERT_TRUE(h.add_prompt(1, shared_prompt(100), 3, 0.0).ok());
    ASSERT_TRUE(h.add_prompt(2, shared_prompt(200), 3, 0.0).ok());
    h.step(0.0);
    EXPECT_EQ(prefill_rows(h.batches[0]), (std::vector<Row>{{1, 0, 20}, {2, 0, 20}}));
    EXPECT_EQ(h.scheduler->stats().num_prefix_waits, 0);
    finish_all(h, 10.0);
  }
}

// The owner prefills in chunks of 8: request 2 waits while any 8 or more of its shared tokens
// are still pending, and is admitted in step 3 with all 16 adopted.
TEST(SchedulerPrefixWaitTest, WaitsAcrossTheOwnersChunks) {
  Harness h(config(/*min_tokens=*/8, /*max_chunk=*/8), kv_config());
  h.keep_batches = true;
  ASSERT_TRUE(h.add_prompt(1, shared_prompt(100), 3, 0.0).ok());
  ASSERT_TRUE(h.add_prompt(2, shared_prompt(200), 3, 0.0).ok());
  h.step(0.0);
  h.step(10.0);
  h.step(20.0);
  ASSERT_EQ(h.batches.size(), 3u);
  EXPECT_EQ(prefill_rows(h.batches[0]), (std::vector<Row>{{1, 0, 8}}));
  EXPECT_EQ(prefill_rows(h.batches[1]), (std::vector<Row>{{1, 8, 8}}));
  EXPECT_EQ(prefill_rows(h.batches[2]), (std::vector<Row>{{1, 16, 4}, {2, 16, 4}}));
  EXPECT_EQ(h.scheduler->stats().num_prefix_waits, 2);
  finish_all(h, 30.0);
}

// The owner is cancelled while its step is pending: its pages are never published, the wait
// ends, and request 2 computes its whole prompt in the next step.
TEST(SchedulerPrefixWaitTest, AnOwnerThatEndsReleasesTheWait) {
  Harness h(config(/*min_tokens=*/8), kv_config());
  h.keep_batches = true;
  ASSERT_TRUE(h.add_prompt(1, shared_prompt(100), 3, 0.0).ok());
  ASSERT_TRUE(h.add_prompt(2, shared_prompt(200), 3, 0.0).ok());
  auto batch = h.scheduler->schedule(0.0);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(prefill_rows(**batch), (std::vector<Row>{{1, 0, 20}}));
  EXPECT_TRUE(h.scheduler->kv_cache().has_pending_pages());
  ASSERT_TRUE(h.scheduler->cancel(1, 0.0).ok());
  EXPECT_FALSE(h.scheduler->kv_cache().has_pending_pages());
  // cancel() invalidated the batch's spans: commit an output without running it.
  StepOutput out;
  out.sampled_token_ids = {0};
  out.step_duration_ms = 10.0;
  auto events = h.scheduler->commit(out);
  ASSERT_TRUE(events.ok());
  h.record(**events);
  h.step(10.0);
  EXPECT_EQ(prefill_rows(h.batches.back()), (std::vector<Row>{{2, 0, 20}}));
  h.prompt_len_of.erase(1);  // cancelled: no outputs to check
  finish_all(h, 20.0);
  EXPECT_EQ(h.finished[1].reason, FinishReason::kCancelled);
}

TEST(SchedulerPrefixWaitTest, NegativeThresholdIsRejected) {
  SchedulerConfig c = config(-1);
  const Status s = c.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("scheduler.prefix_wait_min_tokens"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace packserve::sched
