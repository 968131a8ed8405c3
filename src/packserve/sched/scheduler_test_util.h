// scheduler_test_util.h: a fake ModelExecutor and a step-driven harness for the scheduler
// tests (scheduler_test.cc, scheduler_policy_test.cc). Test-only; header-only.
//
// FakeExecutor samples token f(id, kv_len) for every sampling sequence: a pure function of
// the request and the position the token will occupy, so a request preempted and recomputed
// must end up with exactly the output tokens an undisturbed run would give
// (expected_output()). It also checks each batch it is handed against the scheduler's
// documented batch invariants and against the harness's own record of every request's tokens.
// Thread-safety: none.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "packserve/sched/scheduler.h"

namespace packserve::sched::testing_util {

inline TokenId fake_token(RequestId id, int32_t position) {
  return static_cast<TokenId>((id * 1000003ull + static_cast<uint64_t>(position) * 7919ull) %
                              50000ull) +
         100;
}

// The output tokens of an undisturbed run of a request with this prompt length.
inline std::vector<TokenId> expected_output(RequestId id, int32_t num_prompt_tokens,
                                            int32_t num_output_tokens) {
  std::vector<TokenId> out;
  for (int32_t j = 0; j < num_output_tokens; ++j)
    out.push_back(fake_token(id, num_prompt_tokens + j));
  return out;
}

struct Harness;

class FakeExecutor : public ModelExecutor {
 public:
  FakeExecutor(Harness* harness, double step_ms) : harness_(harness), step_ms_(step_ms) {}
  Result<StepOutput> execute(const ScheduledBatch& batch) override;
  int num_failures_to_inject = 0;

 private:
  Harness* harness_;
  double step_ms_;
};

struct Harness {
  Harness(const SchedulerConfig& config, const kv::KvCacheConfig& kv_config, double step_ms = 10.0)
      : executor(this, step_ms) {
    SchedulerConfig checked = config;
    checked.check_invariants_every_step = true;
    auto created = Scheduler::create(checked, kv_config);
    EXPECT_TRUE(created.ok()) << created.status().to_string();
    scheduler = std::move(created).value();
  }

  // A prompt of prompt_len consecutive token ids from first_token.
  Status add(RequestId id, int32_t prompt_len, int32_t max_output, double arrival_ms,
             TokenId first_token = 1, int32_t priority = 0) {
    std::vector<TokenId> prompt;
    for (int32_t i = 0; i < prompt_len; ++i) prompt.push_back(first_token + i);
    return add_prompt(id, std::move(prompt), max_output, arrival_ms, false, priority);
  }

  Status add_prompt(RequestId id, std::vector<TokenId> prompt, int32_t max_output,
                    double arrival_ms, bool compute_whole_prompt = false, int32_t priority = 0) {
    Request r;
    r.id = id;
    r.priority = priority;
    r.compute_whole_prompt = compute_whole_prompt;
    r.arrival_time_ms = arrival_ms;
    r.prompt_token_ids = std::move(prompt);
    r.max_output_tokens = max_output;
    known[id] = r.prompt_token_ids;
    prompt_len_of[id] = static_cast<int32_t>(r.prompt_token_ids.size());
    max_output_of[id] = max_output;
    return scheduler->add_request(std::move(r));
  }

  // One step at now_ms; records events. Returns the events.
  const StepEvents& step(double now_ms) {
    auto events = scheduler->step(now_ms, executor);
    EXPECT_TRUE(events.ok()) << events.status().to_string();
    record(**events);
    return **events;
  }

  void record(const StepEvents& events) {
    for (const TokenEvent& t : events.tokens) {
      EXPECT_EQ(t.output_index, static_cast<int32_t>(outputs[t.id].size())) << "req=" << t.id;
      outputs[t.id].push_back(t.token_id);
      token_times[t.id].push_back(t.time_ms);
      known[t.id].push_back(t.token_id);
    }
    for (const FinishedRequest& f : events.finished) {
      EXPECT_EQ(finished.count(f.id), 0u) << "req=" << f.id << " finished twice";
      finished[f.id] = f;
    }
    for (const RequestId id : events.preempted) preempted_order.push_back(id);
  }

  std::unique_ptr<Scheduler> scheduler;
  FakeExecutor executor;
  std::vector<ScheduledBatch> batches;  // copies of every non-empty batch (spans dropped)
  bool keep_batches = false;
  std::map<RequestId, std::vector<TokenId>> known;  // prompt + outputs so far
  std::map<RequestId, int32_t> prompt_len_of, max_output_of;
  std::map<RequestId, std::vector<TokenId>> outputs;
  std::map<RequestId, std::vector<double>> token_times;
  std::map<RequestId, FinishedRequest> finished;
  std::vector<RequestId> preempted_order;
};

inline Result<StepOutput> FakeExecutor::execute(const ScheduledBatch& batch) {
  if (num_failures_to_inject > 0) {
    --num_failures_to_inject;
    return internal_error("injected executor failure");
  }
  const Scheduler& s = *harness_->scheduler;
  const SchedulerConfig& c = s.config();
  EXPECT_LE(batch.num_batched_tokens, c.max_num_batched_tokens);
  EXPECT_LE(static_cast<int64_t>(batch.sequences.size()), c.max_num_running_requests);
  std::set<RequestId> seen;
  int32_t sum = 0;
  bool in_prefill = false;
  StepOutput out;
  for (const ScheduledSequence& seq : batch.sequences) {
    EXPECT_TRUE(seen.insert(seq.id).second) << "req=" << seq.id << " twice in a batch";
    EXPECT_GE(seq.num_tokens, 1);
    sum += seq.num_tokens;
    if (seq.is_prefill) in_prefill = true;
    EXPECT_FALSE(!seq.is_prefill && in_prefill) << "decode row after a prefill chunk";
    if (!seq.is_prefill) {
      EXPECT_EQ(seq.num_tokens, 1);
    }
    // Input tokens are the request's known tokens at those positions.
    const std::vector<TokenId>& known = harness_->known[seq.id];
    EXPECT_LE(seq.kv_len(), static_cast<int32_t>(known.size())) << "req=" << seq.id;
    EXPECT_EQ(seq.samples_token, seq.kv_len() == static_cast<int32_t>(known.size()));
    if (seq.kv_len() <= static_cast<int32_t>(known.size())) {
      EXPECT_TRUE(std::equal(seq.token_ids.begin(), seq.token_ids.end(),
                             known.begin() + seq.start_position))
          << "req=" << seq.id;
    }
    const int32_t page_size = s.kv_cache().config().page_size;
    EXPECT_EQ(static_cast<int32_t>(seq.page_ids.size()),
              (seq.kv_len() + page_size - 1) / page_size);
    out.sampled_token_ids.push_back(fake_token(seq.id, seq.kv_len()));
  }
  EXPECT_EQ(sum, batch.num_batched_tokens);
  if (harness_->keep_batches) {
    ScheduledBatch copy = batch;
    for (ScheduledSequence& seq : copy.sequences) seq.token_ids = {}, seq.page_ids = {};
    harness_->batches.push_back(std::move(copy));
  }
  out.step_duration_ms = step_ms_;
  return out;
}

}  // namespace packserve::sched::testing_util
