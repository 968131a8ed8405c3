// scheduler_commit.cc: Scheduler::commit(), abort_step(), step() and check_invariants()
// (scheduler.h); the queue side and schedule() are in scheduler.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "packserve/common/log.h"
#include "packserve/sched/scheduler.h"
#include "packserve/sched/scheduler_state.h"

namespace packserve::sched {

// ---- commit ----

Result<const StepEvents*> Scheduler::commit(const StepOutput& output) {
  if (!batch_pending_) return invalid_argument("commit: no pending batch; call schedule() first");
  if (output.sampled_token_ids.size() != batch_.sequences.size()) {
    return invalid_argument(fmt::format(
        "commit: sampled_token_ids.size() = {}, expected one entry per batch sequence ({})",
        output.sampled_token_ids.size(), batch_.sequences.size()));
  }
  if (!std::isfinite(output.step_duration_ms) || output.step_duration_ms < 0.0) {
    return invalid_argument(fmt::format(
        "commit: step_duration_ms = {}, expected a finite value >= 0", output.step_duration_ms));
  }
  if (!output.num_accepted_drafts.empty()) {
    if (output.num_accepted_drafts.size() != batch_.sequences.size()) {
      return invalid_argument(fmt::format(
          "commit: num_accepted_drafts.size() = {}, expected 0 or one entry per batch sequence "
          "({})",
          output.num_accepted_drafts.size(), batch_.sequences.size()));
    }
    for (size_t i = 0; i < batch_.sequences.size(); ++i) {
      const int32_t accepted = output.num_accepted_drafts[i];
      const int32_t drafts = batch_.sequences[i].num_draft_tokens;
      if (accepted < 0 || accepted > drafts) {
        return invalid_argument(fmt::format(
            "commit: num_accepted_drafts[{}] = {}, expected in [0, {}] (the sequence's drafts)", i,
            accepted, drafts));
      }
    }
  }
  const double end_ms = batch_.start_time_ms + output.step_duration_ms;
  for (size_t i = 0; i < batch_.sequences.size(); ++i) {
    RequestState* s = batch_states_[i];
    if (s == nullptr) continue;  // cancelled while the batch was pending
    const ScheduledSequence& seq = batch_.sequences[i];
    // Accepted drafts join the known tokens before their KV is committed (full pages are hashed
    // from the tokens); the rejected ones' slots stay allocated and are written again.
    const int32_t accepted = output.num_accepted_drafts.empty() ? 0 : output.num_accepted_drafts[i];
    if (accepted > 0) {
      s->tokens.insert(s->tokens.end(), s->spec_rows.begin() + 1,
                       s->spec_rows.begin() + 1 + accepted);
    }
    const int32_t rows = seq.num_tokens - seq.num_draft_tokens + accepted;
    const Status computed = kv_.commit_computed(s->id, s->tokens, rows);
    PS_CHECK(computed.ok()) << computed.to_string();
    const int32_t end = s->num_computed_tokens + rows;
    stats_.num_recomputed_tokens +=
        std::max(0, std::min(end, s->max_computed_tokens) - s->num_computed_tokens);
    s->num_computed_tokens = end;
    s->max_computed_tokens = std::max(s->max_computed_tokens, end);
    s->batch_index = -1;
    if (!seq.samples_token) continue;
    stats_.num_draft_tokens += seq.num_draft_tokens;
    stats_.num_accepted_draft_tokens += accepted;
    // The step's output tokens: the accepted drafts, then the sampled token; a stop token or
    // max_output_tokens among them ends the request there.
    s->tokens.push_back(output.sampled_token_ids[i]);
    for (auto t = s->tokens.size() - 1 - static_cast<size_t>(accepted); t < s->tokens.size(); ++t) {
      const TokenId token = s->tokens[t];
      const int32_t index = s->num_output_tokens++;
      ++stats_.num_output_tokens;
      pending_events_.tokens.push_back(TokenEvent{s->id, index, token, end_ms});
      if (index == 0) {
        s->first_token_time_ms = end_ms;
        if (aimd_) aimd_->observe_ttft(end_ms - s->arrival_time_ms);
      }
      const bool stop = std::find(s->stop_token_ids.begin(), s->stop_token_ids.end(), token) !=
                        s->stop_token_ids.end();
      if (stop) {
        finish(*s, FinishReason::kStop, end_ms);
        break;
      }
      if (s->num_output_tokens >= s->max_output_tokens) {
        finish(*s, FinishReason::kLength, end_ms);
        break;
      }
    }
  }
  batch_pending_ = false;
  last_utilization_ = static_cast<double>(batch_.num_batched_tokens) /
                      static_cast<double>(config_.max_num_batched_tokens);
  cleanup_finished();
  std::swap(returned_events_, pending_events_);
  pending_events_.tokens.clear();
  pending_events_.finished.clear();
  pending_events_.preempted.clear();
  returned_events_.end_time_ms = end_ms;
  run_invariant_check_if_enabled();
  return &returned_events_;
}

Status Scheduler::abort_step() {
  if (!batch_pending_) return invalid_argument("abort_step: no pending batch");
  for (RequestState* s : batch_states_) {
    if (s != nullptr) s->batch_index = -1;
  }
  reissue_copies_ = batch_.page_copies;
  reissue_owner_ = copy_owner_;
  batch_pending_ = false;
  PS_LOG_WARN("sched", "step={} aborted; {} page copies reissued with the next batch",
              batch_.step_index, reissue_copies_.size());
  return ok_status();
}

Result<const StepEvents*> Scheduler::step(double now_ms, ModelExecutor& executor) {
  PS_ASSIGN_OR_RETURN(const ScheduledBatch* batch, schedule(now_ms));
  if (batch->empty()) {
    StepOutput idle;
    return commit(idle);
  }
  Result<StepOutput> output = executor.execute(*batch);
  if (!output.ok()) {
    PS_CHECK(abort_step().ok());
    return output.status();
  }
  return commit(*output);
}

// ---- invariants ----

void Scheduler::run_invariant_check_if_enabled() const {
#ifdef NDEBUG
  if (!config_.check_invariants_every_step) return;
#endif
  const Status status = check_invariants();
  PS_CHECK(status.ok()) << status.to_string();
}

Status Scheduler::check_invariants() const {
  PS_RETURN_IF_ERROR(kv_.check_invariants());
  int64_t running = 0, waiting = 0, staged = 0;
  for (const auto& [id, state] : requests_) {
    const RequestState& s = *state;
    switch (s.where) {
      case Where::kRunning: {
        ++running;
        Result<int32_t> computed = kv_.num_computed_tokens(id);
        if (!computed.ok() || *computed != s.num_computed_tokens) {
          return internal_error(
              fmt::format("req={}: running with {} computed tokens but the KV manager has {}", id,
                          s.num_computed_tokens, computed.ok() ? *computed : -1));
        }
        if (s.num_computed_tokens > s.num_tokens()) {
          return internal_error(fmt::format("req={}: {} computed tokens > {} known", id,
                                            s.num_computed_tokens, s.num_tokens()));
        }
        break;
      }
      case Where::kWaiting:
      case Where::kStaged:
        if (s.where == Where::kWaiting) ++waiting;
        if (s.where == Where::kStaged) ++staged;
        if (kv_.contains(id)) {
          return internal_error(fmt::format("req={}: queued but holds a page table", id));
        }
        break;
      case Where::kFinished:
        return internal_error(fmt::format("req={}: finished but still registered", id));
    }
  }
  if (running != num_running_live_ || waiting != num_waiting_ || staged != num_staged_) {
    return internal_error(fmt::format("counts: running {} vs {}, waiting {} vs {}, staged {} vs {}",
                                      running, num_running_live_, waiting, num_waiting_, staged,
                                      num_staged_));
  }
  if (running > config_.max_num_running_requests) {
    return internal_error(fmt::format("{} running > max_num_running_requests {}", running,
                                      config_.max_num_running_requests));
  }
  if (kv_.num_requests() != running) {
    return internal_error(
        fmt::format("KV manager holds {} requests, {} running", kv_.num_requests(), running));
  }
  if (config_.policy == SchedulingPolicy::kPriority) {
    for (std::size_t i = 1; i < waiting_.size(); ++i) {
      const QueueEntry& a = waiting_[i - 1];
      const QueueEntry& b = waiting_[i];
      if (a.priority > b.priority || (a.priority == b.priority && a.serial > b.serial)) {
        return internal_error(
            fmt::format("waiting queue out of (priority, arrival) order: req={} "
                        "({}) before req={} ({})",
                        a.id, a.priority, b.id, b.priority));
      }
    }
    for (std::size_t i = 1; i < running_.size(); ++i) {
      if (running_[i - 1]->priority > running_[i]->priority) {
        return internal_error(
            fmt::format("running out of priority order: req={} ({}) before req={} "
                        "({})",
                        running_[i - 1]->id, running_[i - 1]->priority, running_[i]->id,
                        running_[i]->priority));
      }
    }
  }
  return ok_status();
}

}  // namespace packserve::sched
